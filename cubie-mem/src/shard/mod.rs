//! This process's place in a job: its rank and the job's size, overall and
//! on its node, read from the launcher that started it.
//!
//! The launcher is the engine across nodes: processes share nothing.
//! The rules are on the guide page [launchers](crate::guide::launchers).

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
    /// Slurm's `srun` (`SLURM_PROCID` and the step's figures).
    Slurm,
    /// Open MPI's `mpirun` or `mpiexec` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// Hydra, the `mpiexec` of MPICH and Intel MPI (`PMI_*`, `MPI_LOCAL*`).
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

/// One process's part of a job: its rank among `size` processes, its local
/// rank among the `local_size` on its node, and the launcher.
///
/// Always consistent: `rank < size`, `local_rank < local_size <= size`.
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
    /// A shard from figures the caller knows, such as an MPI library's.
    /// Inconsistent figures are a [`MemError::Shard`].
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

    /// This process's shard, read from its environment by
    /// [`from_vars`](Self::from_vars).
    pub fn from_env() -> Result<Shard, MemError> {
        Shard::from_vars(|name| {
            std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
        })
    }

    /// The shard the variables `lookup` returns describe (`None`: unset).
    ///
    /// Open MPI and Hydra are read first, then Slurm, then PMIx; with none,
    /// [`Shard::single`]. Bad or contradictory figures are a
    /// [`MemError::Shard`]. The exact rules are on the guide page
    /// [launchers](crate::guide::launchers).
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Shard, MemError> {
        let shard = env::read(lookup)?;
        tracing::debug!(%shard, "placed this process in its job");
        Ok(shard)
    }

    /// The shard when the figures are consistent, else what is wrong.
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

    /// This process's rank on its node, `0..local_size`: it picks the devices.
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

    /// This rank's contiguous range of `total_runs` runs. The ranks' ranges
    /// cover every run once; their lengths differ by at most one.
    pub fn runs(&self, total_runs: usize) -> Range<usize> {
        even_part(total_runs, self.size, self.rank)
    }

    /// The devices this rank uses among the `visible` devices of its node:
    /// a contiguous block per local rank, or one shared device round-robin
    /// when ranks outnumber devices.
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

/// Part `index` of `total` items split into `parts` contiguous ranges, the
/// first `total % parts` one longer.
fn even_part(total: usize, parts: usize, index: usize) -> Range<usize> {
    let (base, extra) = (total / parts, total % parts);
    // No overflow: index * base <= (parts - 1) * base <= total - base, and
    // the last part ends at parts * base + extra = total.
    let start = index * base + index.min(extra);
    start..start + base + usize::from(index < extra)
}
