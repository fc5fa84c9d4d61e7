//! This process's place in a job of several processes: its rank, the job's
//! size, and the same two figures among the processes of its node, read
//! from the launcher that started it (Slurm's `srun`, Open MPI's `mpirun`,
//! MPICH's or Intel MPI's Hydra `mpiexec`), or one process when none did.
//!
//! cubie-mem has no engine of its own across nodes: the launcher is the
//! engine. Each process takes one contiguous range of a batch's runs
//! ([`Shard::runs`]) and the devices of its node that its local rank picks
//! ([`Shard::devices`]); nothing is shared between processes.

mod env;
mod error;
#[cfg(test)]
mod tests;

pub use error::ShardError;

use std::fmt;
use std::ops::Range;

use crate::MemError;

/// Whose variables a [`Shard`] was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Launcher {
    /// No launcher's variables were set: one process, rank 0 of 1.
    Single,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_STEP_NUM_TASKS` or
    /// `SLURM_NTASKS`, `SLURM_LOCALID`, and the tasks per node).
    Slurm,
    /// Open MPI's `mpirun` or `mpiexec` (`OMPI_COMM_WORLD_RANK`, `_SIZE`,
    /// `_LOCAL_RANK`, `_LOCAL_SIZE`).
    OpenMpi,
    /// The Hydra process manager of MPICH and Intel MPI, `mpiexec` or
    /// `mpirun` (`PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`,
    /// `MPI_LOCALNRANKS`).
    Hydra,
    /// Figures given to [`Shard::new`].
    Manual,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Single => "no launcher",
            Launcher::Slurm => "Slurm's srun",
            Launcher::OpenMpi => "Open MPI's mpirun",
            Launcher::Hydra => "Hydra's mpiexec",
            Launcher::Manual => "given by hand",
        })
    }
}

/// One process's part of a job: its rank among `size` processes, its
/// local rank among the `local_size` processes of its node, and the
/// launcher these came from.
///
/// Always consistent: `rank < size`, `local_rank < local_size <= size`.
/// [`runs`](Self::runs) gives the process its contiguous range of a
/// batch's runs, so that the ranks together cover every run exactly once;
/// [`devices`](Self::devices) gives it the devices of its node to run them
/// on. Ranks share nothing: each has its own managers, host arrays and
/// output.
///
/// ```
/// use cubie_mem::{Launcher, Shard};
///
/// // Rank 5 of 8, the second of the 4 ranks on its node (two nodes of 4).
/// let shard = Shard::new(5, 8, 1, 4)?;
/// assert_eq!(shard.launcher(), Launcher::Manual);
/// // 1000 runs: 125 each, contiguous.
/// assert_eq!(shard.runs(1000), 625..750);
/// // 4 ranks on a node of 8 GPUs: 2 each; of 4, one each; of 2, shared.
/// assert_eq!(shard.devices(8), 2..4);
/// assert_eq!(shard.devices(4), 1..2);
/// assert_eq!(shard.devices(2), 1..2);
/// # Ok::<(), cubie_mem::MemError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
    launcher: Launcher,
}

impl Shard {
    /// A shard from figures the caller knows (from an MPI library, or a
    /// distributed engine that numbers its tasks), checked like a
    /// launcher's: an error unless `rank < size` and
    /// `local_rank < local_size <= size` ([`MemError::Shard`] whose
    /// `variables` are the arguments by name, and whose
    /// [`ShardError`] says which figure is at fault).
    pub fn new(
        rank: usize,
        size: usize,
        local_rank: usize,
        local_size: usize,
    ) -> Result<Shard, MemError> {
        Shard::checked(rank, size, local_rank, local_size, Launcher::Manual).map_err(|reason| {
            MemError::Shard {
                variables: vec![
                    ("rank", rank.to_string()),
                    ("size", size.to_string()),
                    ("local_rank", local_rank.to_string()),
                    ("local_size", local_size.to_string()),
                ],
                reason,
            }
        })
    }

    /// One process alone: rank 0 of 1, alone on its node.
    pub fn single() -> Shard {
        Shard {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            launcher: Launcher::Single,
        }
    }

    /// This process's shard, read from its environment: see
    /// [`from_vars`](Self::from_vars), which this calls with the process's
    /// environment variables (a value that is not Unicode is read lossily,
    /// and then refused as a number).
    pub fn from_env() -> Result<Shard, MemError> {
        Shard::from_vars(|name| {
            std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
        })
    }

    /// The shard that the variables `lookup` returns describe (`lookup`
    /// gives a variable's value, or `None` when it is unset; an empty value
    /// counts as unset).
    ///
    /// The launcher that started the process is read, in this order:
    ///
    /// 1. Open MPI (`OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK`,
    ///    `_LOCAL_SIZE`), then Hydra (`PMI_RANK`, `PMI_SIZE`,
    ///    `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`, recognised by the last two).
    ///    An MPI launcher run inside a Slurm job leaves the job's Slurm
    ///    variables (and those of the `srun` that started its daemons) to
    ///    its ranks, so beside an MPI launcher's variables Slurm's are not
    ///    read. Open MPI's and Hydra's together must agree: nothing says
    ///    which one started the process.
    /// 2. Slurm, recognised by `SLURM_PROCID`: the rank; the size from
    ///    `SLURM_STEP_NUM_TASKS` (the step's, set by `srun`), else
    ///    `SLURM_NTASKS`; the local rank from `SLURM_LOCALID`; the local
    ///    size from the entry of the node `SLURM_NODEID` in
    ///    `SLURM_STEP_TASKS_PER_NODE`, else `SLURM_TASKS_PER_NODE` (lists
    ///    like `4(x2),3`: two nodes of 4 tasks, then one of 3; their sum
    ///    must be the size), else `SLURM_NTASKS_PER_NODE`. A batch script
    ///    also sees `SLURM_PROCID=0`, but no `SLURM_STEP_ID` or
    ///    `SLURM_STEP_NUM_TASKS`: there, a job of several tasks is an error
    ///    (the program was meant to be started with `srun`), and a job of
    ///    one task is one process.
    /// 3. PMIx puts only the rank in the environment (`PMIX_RANK`); the
    ///    sizes are in its library alone. Beside Open MPI's or Slurm's
    ///    variables (`mpirun` and `srun --mpi=pmix` set it) it must agree
    ///    with their rank; beside Hydra's it is not read (Hydra does not set
    ///    it: an `srun` that started Hydra's proxies does); alone it is an
    ///    error that says how to build the shard with [`Shard::new`].
    ///    `PMI_RANK` and `PMI_SIZE` without Hydra's local variables are
    ///    likewise not enough alone, and not read beside Slurm's.
    /// 4. None of these: [`Shard::single`].
    ///
    /// A variable that is not a whole number, a missing one that its
    /// launcher always sets, figures that contradict each other (`rank >=
    /// size`, `local rank >= local size`, `local size > size`), and two
    /// launchers that disagree are a [`MemError::Shard`] that names the
    /// variables with their values, its [`ShardError`] saying which
    /// failure it is.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Shard, MemError> {
        let shard = env::read(lookup)?;
        tracing::debug!(%shard, "placed this process in its job");
        Ok(shard)
    }

    /// `Ok` with the shard when the figures are consistent, else what is
    /// wrong with them.
    fn checked(
        rank: usize,
        size: usize,
        local_rank: usize,
        local_size: usize,
        launcher: Launcher,
    ) -> Result<Shard, ShardError> {
        if rank >= size {
            Err(ShardError::RankNotBelowSize {
                rank,
                size,
                launcher,
            })
        } else if local_rank >= local_size {
            Err(ShardError::LocalRankNotBelowLocalSize {
                local_rank,
                local_size,
                launcher,
            })
        } else if local_size > size {
            Err(ShardError::LocalSizeAboveSize {
                local_size,
                size,
                launcher,
            })
        } else {
            Ok(Shard {
                rank,
                size,
                local_rank,
                local_size,
                launcher,
            })
        }
    }

    /// This process's rank among the job's processes, `0..size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the job (at least 1).
    pub fn size(&self) -> usize {
        self.size
    }

    /// This process's rank among the processes on its node,
    /// `0..local_size`: what picks its devices.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The number of the job's processes on this node (at least 1).
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// Whose variables the shard was read from.
    pub fn launcher(&self) -> Launcher {
        self.launcher
    }

    /// This rank's runs of a batch of `total_runs`: the ranks split the
    /// runs into `size` contiguous ranges in rank order, whose lengths
    /// differ by at most one (the first `total_runs % size` ranks take one
    /// more), so every run belongs to exactly one rank. A rank past the
    /// runs (more ranks than runs) gets an empty range at the end. Exact
    /// for every `total_runs`.
    pub fn runs(&self, total_runs: usize) -> Range<usize> {
        even_part(total_runs, self.size, self.rank)
    }

    /// The devices this rank uses among the `visible` devices of its node
    /// (`0..visible` in the order of `CUDA_VISIBLE_DEVICES`), chosen by its
    /// local rank:
    ///
    /// - as many devices as ranks on the node, or more: the devices are
    ///   split into `local_size` contiguous blocks whose sizes differ by at
    ///   most one, as runs are ([`runs`](Self::runs)), and the rank takes
    ///   block `local_rank`. A rank alone on its node takes every device,
    ///   and with as many ranks as devices each takes one;
    /// - more ranks than devices: ranks share devices round-robin, the rank
    ///   taking device `local_rank % visible`;
    /// - no device visible: an empty range.
    pub fn devices(&self, visible: usize) -> Range<usize> {
        if visible == 0 {
            0..0
        } else if self.local_size <= visible {
            even_part(visible, self.local_size, self.local_rank)
        } else {
            let device = self.local_rank % visible;
            device..device + 1
        }
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} of {} (local rank {} of {} on its node; {})",
            self.rank, self.size, self.local_rank, self.local_size, self.launcher
        )
    }
}

/// Part `index` of `total` items split into `parts` contiguous ranges in
/// order, the first `total % parts` one longer than the others. `parts` is
/// at least 1 and `index` below it (a shard's figures, checked when it was
/// made).
fn even_part(total: usize, parts: usize, index: usize) -> Range<usize> {
    let (base, extra) = (total / parts, total % parts);
    // No overflow: index * base <= (parts - 1) * base <= total - base, and
    // the last part ends at parts * base + extra = total.
    let start = index * base + index.min(extra);
    start..start + base + usize::from(index < extra)
}
