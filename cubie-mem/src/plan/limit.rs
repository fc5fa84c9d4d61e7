//! Which limit decided a plan's split: [`Limit`].

use std::fmt;

use super::{BatchSizes, Budget};

/// What bounded the chunk length of a plan of several chunks: the figure to
/// change for fewer chunks. Read it with
/// [`ChunkPlan::limited_by`](crate::ChunkPlan::limited_by) (its `Display`
/// shows an example).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// The device's free memory (`Fe`): free memory, or run a smaller batch.
    FreeMemory,
    /// The group's caps in active limit mode: raise the proportions, or use
    /// `LimitMode::Passive`.
    Caps,
    /// The fragmentation reserve: the batch fits only without the 2% withheld.
    Reserve,
    /// The allocation granule, always left free: lower
    /// `ManagerConfig::allocation_granule_bytes`.
    Granule,
    /// The pipeline depth: one buffer set would hold the batch; lower
    /// `pipeline_depth`.
    PipelineDepth,
    /// Not planned: a remembered partition, reused for arrays laid out for it
    /// (or given to [`ChunkPlan::with_partition`](crate::ChunkPlan::with_partition)).
    ReusedPartition,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Limit::FreeMemory => "free device memory",
            Limit::Caps => "instance caps",
            Limit::Reserve => "fragmentation reserve",
            Limit::Granule => "allocation granule",
            Limit::PipelineDepth => "pipeline depth",
            Limit::ReusedPartition => "reused partition",
        })
    }
}

/// The limit of a batch of `sizes` split into several chunks under
/// `budget`, which allows `alloc` bytes.
pub(super) fn of_split(sizes: &BatchSizes, budget: &Budget, alloc: u64) -> Limit {
    let room = alloc.saturating_sub(sizes.unchunkable_bytes);
    if sizes.depth > 1 && room >= sizes.chunkable_bytes {
        return Limit::PipelineDepth;
    }
    let (reserve_bound, granule_bound) = budget.bounds();
    let available = budget.limit();
    if granule_bound < reserve_bound {
        Limit::Granule
    } else if sizes.total_bytes() < available {
        Limit::Reserve
    } else if budget
        .cap_headroom
        .is_some_and(|h| h < budget.effective_free)
    {
        Limit::Caps
    } else {
        Limit::FreeMemory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan_chunks;

    fn sizes(c: u64, u: u64, depth: usize) -> BatchSizes {
        BatchSizes {
            total_runs: 100,
            chunkable_bytes: c,
            unchunkable_bytes: u,
            depth,
        }
    }

    fn limit(sizes: BatchSizes, budget: Budget) -> Option<Limit> {
        plan_chunks(&sizes, &budget).unwrap().limited_by()
    }

    #[test]
    fn each_limit_is_the_term_that_set_the_budget() {
        let passive = |free| Budget::passive(free).with_granule(0);
        // 1000 free, alloc 980: 5000 B of runs exceed the free memory.
        assert_eq!(
            limit(sizes(5000, 0, 1), passive(1000)),
            Some(Limit::FreeMemory)
        );
        // 990 B fit the 1000 B free but not the 980 left after the reserve.
        assert_eq!(limit(sizes(990, 0, 1), passive(1000)), Some(Limit::Reserve));
        // The caps leave 500 B of 1000 B free.
        let active = Budget::active(1000, 500).with_granule(0);
        assert_eq!(limit(sizes(5000, 0, 1), active), Some(Limit::Caps));
        // Caps above the free memory do not bind.
        let loose = Budget::active(1000, 5000).with_granule(0);
        assert_eq!(limit(sizes(5000, 0, 1), loose), Some(Limit::FreeMemory));
        // A granule of 400 B leaves 600 B, below the reserve's 980 B.
        let granule = Budget::passive(1000).with_granule(400);
        assert_eq!(limit(sizes(5000, 0, 1), granule), Some(Limit::Granule));
        assert_eq!(limit(sizes(700, 0, 1), granule), Some(Limit::Granule));
        // Two sets of 480 B runs: one set (980 - 500 unchunkable) held them all.
        assert_eq!(
            limit(sizes(480, 500, 2), passive(1000)),
            Some(Limit::PipelineDepth)
        );
        // Two sets, but one set could not hold the batch either.
        assert_eq!(
            limit(sizes(5000, 0, 2), passive(1000)),
            Some(Limit::FreeMemory)
        );
    }

    #[test]
    fn a_batch_in_one_chunk_has_no_limit() {
        let budget = Budget::passive(1000).with_granule(0);
        assert_eq!(limit(sizes(900, 0, 1), budget), None);
        assert_eq!(limit(sizes(0, 0, 1), budget), None);
        // R == alloc at depth 1 still fits in one chunk.
        assert_eq!(limit(sizes(980, 0, 1), budget), None);
    }

    #[test]
    fn a_reused_partition_is_named() {
        let budget = Budget::passive(1000).with_granule(0);
        let small = sizes(500, 0, 1);
        let reused = crate::plan::plan_partition(&small, &budget, 50, 2).unwrap();
        assert_eq!(reused.limited_by(), Some(Limit::ReusedPartition));
        // One chunk reused is still one chunk.
        let whole = crate::plan::plan_partition(&small, &budget, 100, 1).unwrap();
        assert_eq!(whole.limited_by(), None);
        // A plan keeps its limit on its own partition, and names a finer one.
        let planned = plan_chunks(&sizes(5000, 0, 1), &budget).unwrap();
        assert_eq!(planned.limited_by(), Some(Limit::FreeMemory));
        let same = planned.with_partition(planned.chunk_length(), planned.chunks());
        assert_eq!(same.and_then(|p| p.limited_by()), Some(Limit::FreeMemory));
        let finer = planned.with_partition(1, 100).unwrap();
        assert_eq!(finer.limited_by(), Some(Limit::ReusedPartition));
    }

    #[test]
    fn limits_print_as_phrases() {
        assert_eq!(Limit::FreeMemory.to_string(), "free device memory");
        assert_eq!(Limit::Granule.to_string(), "allocation granule");
        assert_eq!(format!("[{:>16}]", Limit::Caps), "[   instance caps]");
    }
}
