//! Reading a [`Shard`] from the launchers' environment variables.

use super::{Launcher, Shard, ShardError};
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

/// The launcher variables that are set (empty counts as unset).
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
    fn error(&self, names: &[&'static str], reason: ShardError) -> MemError {
        MemError::Shard {
            variables: names
                .iter()
                .filter_map(|&name| Some((name, self.get(name)?.to_owned())))
                .collect(),
            reason,
        }
    }

    /// `name` as a whole number, `None` when unset.
    fn number(
        &self,
        name: &'static str,
        family: &[&'static str],
    ) -> Result<Option<usize>, MemError> {
        self.get(name)
            .map(|value| {
                value.trim().parse::<usize>().map_err(|_| {
                    self.error(
                        family,
                        ShardError::NotANumber {
                            variable: name,
                            value: value.to_owned(),
                        },
                    )
                })
            })
            .transpose()
    }

    /// `name` as a whole number; an error when it is unset.
    fn required(
        &self,
        name: &'static str,
        family: &[&'static str],
        launcher: Launcher,
    ) -> Result<usize, MemError> {
        self.number(name, family)?.ok_or_else(|| {
            self.error(
                family,
                ShardError::Unset {
                    variable: name,
                    launcher,
                },
            )
        })
    }

    /// The shard of a launcher whose four variables are `names`: rank,
    /// size, local rank, local size.
    fn four(&self, names: &[&'static str; 4], launcher: Launcher) -> Result<Shard, MemError> {
        let [rank, size, local_rank, local_size] = *names;
        let rank = self.required(rank, names, launcher)?;
        let size = self.required(size, names, launcher)?;
        let local_rank = self.required(local_rank, names, launcher)?;
        let local_size = self.required(local_size, names, launcher)?;
        Shard::checked(rank, size, local_rank, local_size, launcher)
            .map_err(|reason| self.error(names, reason))
    }

    /// An error unless `PMIX_RANK`, when set, is the rank of `shard`.
    fn pmix_agrees(&self, shard: &Shard, family: &[&'static str]) -> Result<(), MemError> {
        let both: Vec<&'static str> = family.iter().copied().chain([PMIX_RANK]).collect();
        match self.number(PMIX_RANK, &both)? {
            Some(pmix_rank) if pmix_rank != shard.rank => Err(self.error(
                &both,
                ShardError::PmixRankDisagrees {
                    launcher: shard.launcher,
                    rank: shard.rank,
                    pmix_rank,
                },
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
                let both: Vec<&'static str> = OPEN_MPI.iter().chain(&HYDRA).copied().collect();
                return Err(vars.error(
                    &both,
                    ShardError::LaunchersDisagree {
                        open_mpi: shard,
                        hydra,
                    },
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
        Err(vars.error(&[PMIX_RANK], ShardError::PmixRankAlone))
    } else if vars.any(&HYDRA) {
        Err(vars.error(&HYDRA, ShardError::PmiWithoutLocalRanks))
    } else {
        Ok(Shard::single())
    }
}

/// The shard of a process that Slurm started (`SLURM_PROCID` is set).
fn slurm(vars: &Vars) -> Result<Shard, MemError> {
    let rank = vars.required("SLURM_PROCID", &SLURM, Launcher::Slurm)?;
    if !vars.any(&SLURM_STEP) {
        // The batch script (or a shell of salloc) itself: one process.
        let tasks = vars.number("SLURM_NTASKS", &SLURM)?.unwrap_or(1);
        if tasks > 1 {
            return Err(vars.error(&SLURM, ShardError::SlurmBatchScript { tasks }));
        }
        return Shard::checked(rank, 1, 0, 1, Launcher::Slurm)
            .map_err(|reason| vars.error(&SLURM, reason));
    }
    let size_name = ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"]
        .into_iter()
        .find(|name| vars.get(name).is_some())
        .ok_or_else(|| vars.error(&SLURM, ShardError::SlurmSizeUnset))?;
    let size = vars.required(size_name, &SLURM, Launcher::Slurm)?;
    let local_rank = vars.required("SLURM_LOCALID", &SLURM, Launcher::Slurm)?;
    let local_size = slurm_local_size(vars, size_name, size)?;
    Shard::checked(rank, size, local_rank, local_size, Launcher::Slurm)
        .map_err(|reason| vars.error(&SLURM, reason))
}

/// The number of the step's tasks on this node.
fn slurm_local_size(vars: &Vars, size_name: &'static str, size: usize) -> Result<usize, MemError> {
    let list = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
        .into_iter()
        .find_map(|name| Some((name, vars.get(name)?)));
    let Some((name, list)) = list else {
        return vars
            .number("SLURM_NTASKS_PER_NODE", &SLURM)?
            .ok_or_else(|| vars.error(&SLURM, ShardError::TasksPerNodeUnset));
    };
    let groups = tasks_per_node(list).ok_or_else(|| {
        vars.error(
            &SLURM,
            ShardError::TasksPerNodeMalformed {
                variable: name,
                list: list.to_owned(),
            },
        )
    })?;
    let total = groups.iter().try_fold(0usize, |sum, &(tasks, nodes)| {
        sum.checked_add(tasks.checked_mul(nodes)?)
    });
    if total != Some(size) {
        return Err(vars.error(
            &SLURM,
            ShardError::TasksPerNodeTotal {
                variable: name,
                list: list.to_owned(),
                total,
                size_variable: size_name,
                size,
            },
        ));
    }
    match vars.number("SLURM_NODEID", &SLURM)? {
        Some(node) => node_tasks(&groups, node).ok_or_else(|| {
            let nodes = groups
                .iter()
                .try_fold(0usize, |sum, &(_, n)| sum.checked_add(n));
            vars.error(
                &SLURM,
                ShardError::NodeIdPastList {
                    node,
                    nodes: nodes.unwrap_or(usize::MAX),
                    variable: name,
                    list: list.to_owned(),
                },
            )
        }),
        None => match groups.as_slice() {
            [(tasks, _), rest @ ..] if rest.iter().all(|(t, _)| t == tasks) => Ok(*tasks),
            _ => Err(vars.error(
                &SLURM,
                ShardError::NodeIdUnset {
                    variable: name,
                    list: list.to_owned(),
                },
            )),
        },
    }
}

/// A Slurm list of tasks per node, `4(x2),3`, as (tasks, nodes) entries.
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
