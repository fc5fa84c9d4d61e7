//! Why a process could not be placed in its job: [`ShardError`].

use super::{Launcher, Shard};

/// The fix for figures a launcher set that do not fit together.
const LAUNCHER_FIX: &str = "these come from the launcher: start the program with it, and \
                            unset any of them set by hand or left from another job";

/// The fix for figures given to [`Shard::new`] that do not fit together.
const BY_HAND_FIX: &str = "give Shard::new the process's rank among the job's size processes \
                           and its local rank among the local size processes of its node";

/// The fix for figures that contradict each other, by where they came from.
fn figures_fix(launcher: Launcher) -> &'static str {
    match launcher {
        Launcher::Manual => BY_HAND_FIX,
        _ => LAUNCHER_FIX,
    }
}

/// A task count that may not fit a number.
fn task_count(total: Option<usize>) -> String {
    total.map_or_else(|| "more than fit in a number".to_owned(), |t| t.to_string())
}

/// Why a launcher's variables, or the figures given to [`Shard::new`],
/// place no job: the `reason` of a [`MemError::Shard`](crate::MemError::Shard).
/// Its message says the fix.
///
/// ```
/// use cubie_mem::{Launcher, MemError, Shard, ShardError};
///
/// let error = Shard::new(6, 6, 0, 1).unwrap_err();
/// assert!(matches!(
///     error,
///     MemError::Shard {
///         reason: ShardError::RankNotBelowSize { rank: 6, size: 6, launcher: Launcher::Manual },
///         ..
///     }
/// ));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// A rank that is not below the job's size (`rank >= size`).
    #[error("rank {rank} is not below the job's size {size}; {}", figures_fix(*.launcher))]
    RankNotBelowSize {
        /// The rank.
        rank: usize,
        /// The job's number of processes.
        size: usize,
        /// Where the figures came from ([`Launcher::Manual`]: `Shard::new`).
        launcher: Launcher,
    },

    /// A local rank that is not below the node's local size.
    #[error(
        "local rank {local_rank} is not below the node's local size {local_size}; {}",
        figures_fix(*.launcher)
    )]
    LocalRankNotBelowLocalSize {
        /// The rank among the node's processes.
        local_rank: usize,
        /// The number of the job's processes on the node.
        local_size: usize,
        /// Where the figures came from ([`Launcher::Manual`]: `Shard::new`).
        launcher: Launcher,
    },

    /// A node with more processes than the whole job.
    #[error(
        "the node's local size {local_size} is more than the job's size {size}; {}",
        figures_fix(*.launcher)
    )]
    LocalSizeAboveSize {
        /// The number of the job's processes on the node.
        local_size: usize,
        /// The job's number of processes.
        size: usize,
        /// Where the figures came from ([`Launcher::Manual`]: `Shard::new`).
        launcher: Launcher,
    },

    /// A variable that is not a whole number.
    #[error("{variable}={value:?} is not a whole number; {}", LAUNCHER_FIX)]
    NotANumber {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },

    /// A variable missing that the launcher whose others are set always sets.
    #[error(
        "{variable} is not set, and {launcher} sets it beside the others; {}",
        LAUNCHER_FIX
    )]
    Unset {
        /// The variable.
        variable: &'static str,
        /// The launcher whose variables are set.
        launcher: Launcher,
    },

    /// Open MPI's and Hydra's variables describe different shards.
    #[error(
        "Open MPI's variables say {open_mpi} but Hydra's say {hydra}, and nothing says which \
         launcher started this process; unset the other one's"
    )]
    LaunchersDisagree {
        /// The shard Open MPI's variables describe.
        open_mpi: Shard,
        /// The shard Hydra's variables describe.
        hydra: Shard,
    },

    /// `PMIX_RANK` beside another launcher's variables, with another rank.
    #[error(
        "{launcher} says rank {rank} but PMIX_RANK says rank {pmix_rank}: the launcher that \
         started this process sets both alike, so one of them is left from another launch; \
         unset it"
    )]
    PmixRankDisagrees {
        /// The launcher whose variables are set beside it.
        launcher: Launcher,
        /// The rank they give.
        rank: usize,
        /// The rank `PMIX_RANK` gives.
        pmix_rank: usize,
    },

    /// `PMIX_RANK` alone: PMIx keeps the sizes in its library.
    #[error(
        "PMIx puts only the rank in the environment: the job's size and this node's processes \
         are in its library alone (PMIx_Get of PMIX_JOB_SIZE, PMIX_LOCAL_RANK and \
         PMIX_LOCAL_SIZE); build the shard with Shard::new from those (or from MPI_Comm_size \
         and an MPI_COMM_TYPE_SHARED split), or start the program with srun, Open MPI's mpirun \
         or Hydra's mpiexec, which set them"
    )]
    PmixRankAlone,

    /// `PMI_RANK` or `PMI_SIZE` without Hydra's local variables.
    #[error(
        "PMI_RANK and PMI_SIZE without MPI_LOCALRANKID and MPI_LOCALNRANKS (which Hydra's \
         mpiexec sets beside them) do not say which processes share this node, and so which \
         devices this one takes; start the program with Hydra's mpiexec, srun or Open MPI's \
         mpirun, or build the shard with Shard::new"
    )]
    PmiWithoutLocalRanks,

    /// `SLURM_PROCID` in a batch script of several tasks, not under `srun`.
    #[error(
        "SLURM_PROCID is set but none of SLURM_STEP_ID, SLURM_STEPID, SLURM_STEP_NUM_TASKS is, \
         as in a batch script, whose job has {tasks} tasks: this one process would take \
         1/{tasks} of the runs; start the program with srun (one process per task), or unset \
         SLURM_PROCID to run it as one process"
    )]
    SlurmBatchScript {
        /// The job's tasks (`SLURM_NTASKS`).
        tasks: usize,
    },

    /// A Slurm step with neither `SLURM_STEP_NUM_TASKS` nor `SLURM_NTASKS`.
    #[error(
        "neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is set, and srun sets both; {}",
        LAUNCHER_FIX
    )]
    SlurmSizeUnset,

    /// A Slurm step with no variable that gives the tasks per node.
    #[error(
        "none of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE and SLURM_NTASKS_PER_NODE is \
         set, so the tasks on this node are not known (srun sets the first two); start the \
         program with srun, or build the shard with Shard::new"
    )]
    TasksPerNodeUnset,

    /// A list of tasks per node that is not one.
    #[error(
        "{variable}={list:?} is not a list of task counts per node like 4(x2),3 (two nodes of 4 \
         tasks, then one of 3); {}",
        LAUNCHER_FIX
    )]
    TasksPerNodeMalformed {
        /// The variable.
        variable: &'static str,
        /// Its value.
        list: String,
    },

    /// A list of tasks per node whose sum is not the job's size.
    #[error(
        "{variable}={list} places {} task(s) but {size_variable}={size}: they describe different \
         launches; {}",
        task_count(*.total),
        LAUNCHER_FIX
    )]
    TasksPerNodeTotal {
        /// The list's variable.
        variable: &'static str,
        /// Its value.
        list: String,
        /// The tasks it places; `None` when they overflow a number.
        total: Option<usize>,
        /// The variable the size was read from.
        size_variable: &'static str,
        /// The job's size.
        size: usize,
    },

    /// A node index past the list of tasks per node.
    #[error(
        "SLURM_NODEID={node} is past the {nodes} node(s) of {variable}={list}; {}",
        LAUNCHER_FIX
    )]
    NodeIdPastList {
        /// The node index (`SLURM_NODEID`).
        node: usize,
        /// The nodes the list describes (at most `usize::MAX`).
        nodes: usize,
        /// The list's variable.
        variable: &'static str,
        /// Its value.
        list: String,
    },

    /// No node index, beside a list whose nodes have different task
    /// counts.
    #[error(
        "SLURM_NODEID is not set, and {variable}={list} gives the nodes different task counts, \
         so this node's is not known (srun sets SLURM_NODEID); {}",
        LAUNCHER_FIX
    )]
    NodeIdUnset {
        /// The list's variable.
        variable: &'static str,
        /// Its value.
        list: String,
    },
}
