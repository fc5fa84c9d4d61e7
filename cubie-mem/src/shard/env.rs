//! Reading a [`Shard`] from the launchers' environment variables (the rules
//! are [`Shard::from_vars`]'s documentation).

use super::{Launcher, Shard};
use crate::MemError;

/// Open MPI's variables: rank, size, local rank, local size.
const OPEN_MPI: [&str; 4] = [
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
];
/// Hydra's variables, in the same order.
const HYDRA: [&str; 4] = ["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"];
/// Hydra's own variables, which PMI launchers other than Hydra do not set.
const HYDRA_LOCAL: [&str; 2] = ["MPI_LOCALRANKID", "MPI_LOCALNRANKS"];
/// Slurm's variables that a shard is read from.
const SLURM: [&str; 10] = [
    "SLURM_PROCID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
];
/// The variables that only a process `srun` started has.
const SLURM_STEP: [&str; 3] = ["SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS"];
/// PMIx's one variable of the kind.
const PMIX_RANK: &str = "PMIX_RANK";

/// The fix for figures a launcher set that do not fit together.
const LAUNCHER_FIX: &str = "these come from the launcher: start the program with it, and \
                            unset any of them set by hand or left from another job";

/// The launcher variables that are set, each read once (an empty value
/// counts as unset).
struct Vars(Vec<(&'static str, String)>);

impl Vars {
    fn read(lookup: impl Fn(&str) -> Option<String>) -> Vars {
        let names = OPEN_MPI
            .iter()
            .chain(&HYDRA)
            .chain(&SLURM)
            .chain([&PMIX_RANK]);
        Vars(
            names
                .filter_map(|&name| {
                    let value = lookup(name).filter(|value| !value.trim().is_empty())?;
                    Some((name, value))
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(set, _)| *set == name)
            .map(|(_, value)| value.as_str())
    }

    fn any(&self, names: &[&str]) -> bool {
        names.iter().any(|name| self.get(name).is_some())
    }

    /// An error about the variables `names` (those set, with their values).
    fn error(&self, names: &[&str], reason: impl Into<String>) -> MemError {
        let shown: Vec<String> = names
            .iter()
            .filter_map(|name| Some(format!("{name}={}", self.get(name)?)))
            .collect();
        MemError::Shard {
            variables: if shown.is_empty() {
                format!("none of {} set", names.join(", "))
            } else {
                shown.join(", ")
            },
            reason: reason.into(),
        }
    }

    /// `name` as a whole number, `None` when unset; an error about the
    /// variables `family` when it is not a number.
    fn number(&self, name: &str, family: &[&str]) -> Result<Option<usize>, MemError> {
        self.get(name)
            .map(|value| {
                value.trim().parse::<usize>().map_err(|_| {
                    self.error(
                        family,
                        format!("{name}={value:?} is not a whole number; {LAUNCHER_FIX}"),
                    )
                })
            })
            .transpose()
    }

    /// `name` as a whole number; an error when it is unset, saying that
    /// `who` always sets it.
    fn required(&self, name: &str, family: &[&str], who: &str) -> Result<usize, MemError> {
        self.number(name, family)?.ok_or_else(|| {
            self.error(
                family,
                format!("{name} is not set, and {who} sets it beside the others; {LAUNCHER_FIX}"),
            )
        })
    }

    /// The shard of a launcher whose four variables are `names`: rank,
    /// size, local rank, local size.
    fn four(&self, names: &[&str; 4], launcher: Launcher) -> Result<Shard, MemError> {
        let who = launcher.to_string();
        let [rank, size, local_rank, local_size] = names;
        let rank = self.required(rank, names, &who)?;
        let size = self.required(size, names, &who)?;
        let local_rank = self.required(local_rank, names, &who)?;
        let local_size = self.required(local_size, names, &who)?;
        Shard::checked(rank, size, local_rank, local_size, launcher)
            .map_err(|problem| self.error(names, format!("{problem}; {LAUNCHER_FIX}")))
    }

    /// An error unless `PMIX_RANK`, when set, is the rank of `shard`, read
    /// from the variables `family`.
    fn pmix_agrees(&self, shard: &Shard, family: &[&str]) -> Result<(), MemError> {
        let both: Vec<&str> = family.iter().copied().chain([PMIX_RANK]).collect();
        match self.number(PMIX_RANK, &both)? {
            Some(rank) if rank != shard.rank => Err(self.error(
                &both,
                format!(
                    "{} says rank {} but PMIX_RANK says rank {rank}: the launcher that started \
                     this process sets both alike, so one of them is left from another launch; \
                     unset it",
                    shard.launcher, shard.rank
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// The shard the variables `lookup` gives describe.
pub(super) fn read(lookup: impl Fn(&str) -> Option<String>) -> Result<Shard, MemError> {
    let vars = Vars::read(lookup);
    if vars.any(&OPEN_MPI) {
        let shard = vars.four(&OPEN_MPI, Launcher::OpenMpi)?;
        if vars.any(&HYDRA_LOCAL) {
            let hydra = vars.four(&HYDRA, Launcher::Hydra)?;
            let figures = |s: &Shard| (s.rank, s.size, s.local_rank, s.local_size);
            if figures(&hydra) != figures(&shard) {
                let both: Vec<&str> = OPEN_MPI.iter().chain(&HYDRA).copied().collect();
                return Err(vars.error(
                    &both,
                    format!(
                        "Open MPI's variables say {shard} but Hydra's say {hydra}, and nothing \
                         says which launcher started this process; unset the other one's"
                    ),
                ));
            }
        }
        vars.pmix_agrees(&shard, &OPEN_MPI)?;
        Ok(shard)
    } else if vars.any(&HYDRA_LOCAL) {
        vars.four(&HYDRA, Launcher::Hydra)
    } else if vars.get("SLURM_PROCID").is_some() {
        let shard = slurm(&vars)?;
        vars.pmix_agrees(&shard, &SLURM)?;
        Ok(shard)
    } else if vars.get(PMIX_RANK).is_some() {
        Err(vars.error(
            &[PMIX_RANK],
            "PMIx puts only the rank in the environment: the job's size and this node's \
             processes are in its library alone (PMIx_Get of PMIX_JOB_SIZE, PMIX_LOCAL_RANK and \
             PMIX_LOCAL_SIZE); build the shard with Shard::new from those (or from MPI_Comm_size \
             and an MPI_COMM_TYPE_SHARED split), or start the program with srun, Open MPI's mpirun \
             or Hydra's mpiexec, which set them",
        ))
    } else if vars.any(&HYDRA) {
        Err(vars.error(
            &HYDRA,
            "PMI_RANK and PMI_SIZE without MPI_LOCALRANKID and MPI_LOCALNRANKS (which Hydra's \
             mpiexec sets beside them) do not say which processes share this node, and so which \
             devices this one takes; start the program with Hydra's mpiexec, srun or Open MPI's \
             mpirun, or build the shard with Shard::new",
        ))
    } else {
        Ok(Shard::single())
    }
}

/// The shard of a process that Slurm started (`SLURM_PROCID` is set).
fn slurm(vars: &Vars) -> Result<Shard, MemError> {
    let rank = vars.required("SLURM_PROCID", &SLURM, "srun")?;
    if !vars.any(&SLURM_STEP) {
        // The batch script (or a shell of salloc) itself: one process.
        let tasks = vars.number("SLURM_NTASKS", &SLURM)?.unwrap_or(1);
        if tasks > 1 {
            return Err(vars.error(
                &SLURM,
                format!(
                    "SLURM_PROCID is set but none of {} is, as in a batch script, whose job has \
                     {tasks} tasks: this one process would take 1/{tasks} of the runs; start the \
                     program with srun (one process per task), or unset SLURM_PROCID to run it as \
                     one process",
                    SLURM_STEP.join(", ")
                ),
            ));
        }
        return Shard::checked(rank, 1, 0, 1, Launcher::Slurm)
            .map_err(|problem| vars.error(&SLURM, format!("{problem}; {LAUNCHER_FIX}")));
    }
    let size_name = ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"]
        .into_iter()
        .find(|name| vars.get(name).is_some())
        .ok_or_else(|| {
            vars.error(
                &SLURM,
                format!("neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set, and srun sets both; {LAUNCHER_FIX}"),
            )
        })?;
    let size = vars.required(size_name, &SLURM, "srun")?;
    let local_rank = vars.required("SLURM_LOCALID", &SLURM, "srun")?;
    let local_size = slurm_local_size(vars, size_name, size)?;
    Shard::checked(rank, size, local_rank, local_size, Launcher::Slurm)
        .map_err(|problem| vars.error(&SLURM, format!("{problem}; {LAUNCHER_FIX}")))
}

/// The number of the step's tasks on this node.
fn slurm_local_size(vars: &Vars, size_name: &str, size: usize) -> Result<usize, MemError> {
    let list = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
        .into_iter()
        .find_map(|name| Some((name, vars.get(name)?)));
    let Some((name, list)) = list else {
        return vars
            .number("SLURM_NTASKS_PER_NODE", &SLURM)?
            .ok_or_else(|| {
                vars.error(
                    &SLURM,
                    "none of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE and \
                     SLURM_NTASKS_PER_NODE is set, so the tasks on this node are not known (srun \
                     sets the first two); start the program with srun, or build the shard with \
                     Shard::new",
                )
            });
    };
    let groups = tasks_per_node(list).ok_or_else(|| {
        vars.error(
            &SLURM,
            format!(
                "{name}={list:?} is not a list of task counts per node like 4(x2),3 (two nodes of \
                 4 tasks, then one of 3); {LAUNCHER_FIX}"
            ),
        )
    })?;
    let total = groups.iter().try_fold(0usize, |sum, &(tasks, nodes)| {
        sum.checked_add(tasks.checked_mul(nodes)?)
    });
    if total != Some(size) {
        let total = total.map_or_else(|| "more than fit in a number".into(), |t| t.to_string());
        return Err(vars.error(
            &SLURM,
            format!(
                "{name}={list} places {total} task(s) but {size_name}={size}: they describe \
                 different launches; {LAUNCHER_FIX}"
            ),
        ));
    }
    match vars.number("SLURM_NODEID", &SLURM)? {
        Some(node) => node_tasks(&groups, node).ok_or_else(|| {
            let nodes = groups
                .iter()
                .try_fold(0usize, |sum, &(_, n)| sum.checked_add(n));
            vars.error(
                &SLURM,
                format!(
                    "SLURM_NODEID={node} is past the {} node(s) of {name}={list}; {LAUNCHER_FIX}",
                    nodes.unwrap_or(usize::MAX)
                ),
            )
        }),
        None => match groups.as_slice() {
            [(tasks, _), rest @ ..] if rest.iter().all(|(t, _)| t == tasks) => Ok(*tasks),
            _ => Err(vars.error(
                &SLURM,
                format!(
                    "SLURM_NODEID is not set, and {name}={list} gives the nodes different task \
                     counts, so this node's is not known (srun sets SLURM_NODEID); {LAUNCHER_FIX}"
                ),
            )),
        },
    }
}

/// A Slurm list of tasks per node, `4(x2),3`: (tasks, nodes) for each
/// entry, in node order; `None` when it is not one (or repeats a count 0
/// times).
pub(super) fn tasks_per_node(list: &str) -> Option<Vec<(usize, usize)>> {
    list.split(',')
        .map(|entry| {
            let entry = entry.trim();
            let (tasks, nodes) = match entry.strip_suffix(')') {
                Some(head) => {
                    let (tasks, nodes) = head.split_once("(x")?;
                    (tasks.parse::<usize>().ok()?, nodes.parse::<usize>().ok()?)
                }
                None => (entry.parse::<usize>().ok()?, 1),
            };
            (nodes > 0).then_some((tasks, nodes))
        })
        .collect()
}

/// The task count of node `node` in a parsed list, `None` past its end.
fn node_tasks(groups: &[(usize, usize)], mut node: usize) -> Option<usize> {
    for &(tasks, nodes) in groups {
        if node < nodes {
            return Some(tasks);
        }
        node -= nodes;
    }
    None
}
