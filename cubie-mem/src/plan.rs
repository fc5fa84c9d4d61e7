//! The chunk planner: a pure function from request sizes and a memory budget
//! to a chunk plan.
//!
//! The manager calls it after gathering the queue and evicting idle owners,
//! but it needs no manager: a caller can ask "how would this batch be chunked
//! with X bytes free?" directly.
//!
//! ```
//! use cubie_mem::{plan, ArrayRequest, DType};
//!
//! let requests = [("state", ArrayRequest::new(DType::F64, [100, 4, 10_000]).total_runs(10_000))];
//! let budget = plan::Budget::passive(8 << 20).with_granule(0);
//! let p = plan::plan(requests.iter().map(|(l, r)| (*l, r)), &budget).unwrap();
//! assert!(p.chunks > 1);
//! assert_eq!(p.chunk_ranges().map(|r| r.len()).sum::<usize>(), 10_000);
//! ```

use std::ops::Range;

use crate::{ArrayRequest, Bytes, MemError};

/// Percentage of the available memory withheld against fragmentation.
pub const FRAGMENTATION_RESERVE_PERCENT: u64 = 2;

/// Default allocation granule: memory below which nothing is allocated, and
/// which is always left free.
pub const DEFAULT_ALLOCATION_GRANULE: u64 = 32 << 20;

/// A request larger than this multiple of free memory logs a warning.
pub const OVERSIZE_WARNING_FACTOR: u64 = 20;

/// The byte totals of a set of requests, and the batch's run count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSizes {
    /// The batch's run count: the largest `total_runs` among the requests (at least 1).
    pub total_runs: usize,
    /// Bytes of the chunkable requests at full length (`C`).
    pub chunkable_bytes: u64,
    /// Bytes of the unchunkable requests (`U`).
    pub unchunkable_bytes: u64,
}

impl BatchSizes {
    /// Measures requests, checking that each is valid and that every
    /// chunkable request has the batch's run count on its chunk axis.
    pub fn measure<'a>(
        requests: impl IntoIterator<Item = (&'a str, &'a ArrayRequest)> + Clone,
    ) -> Result<Self, MemError> {
        let mut total_runs = 1usize;
        for (label, request) in requests.clone() {
            request.validate(label)?;
            total_runs = total_runs.max(request.runs());
        }
        let mut sizes = BatchSizes {
            total_runs,
            chunkable_bytes: 0,
            unchunkable_bytes: 0,
        };
        for (label, request) in requests {
            let bytes = request
                .nbytes()
                .map_err(|_| MemError::invalid_request(label, "byte size overflows 64 bits"))?;
            let slot = match request.chunk_axis_in_use() {
                Some(axis) => {
                    let axis_length = request.shape()[axis];
                    if axis_length != total_runs {
                        return Err(MemError::RunCountMismatch {
                            label: label.to_owned(),
                            axis,
                            axis_length,
                            total_runs,
                        });
                    }
                    &mut sizes.chunkable_bytes
                }
                None => &mut sizes.unchunkable_bytes,
            };
            *slot = slot.checked_add(bytes).ok_or_else(|| {
                MemError::invalid_request(label, "total byte size overflows 64 bits")
            })?;
        }
        sizes
            .chunkable_bytes
            .checked_add(sizes.unchunkable_bytes)
            .ok_or_else(|| MemError::invalid_request("", "total byte size overflows 64 bits"))?;
        Ok(sizes)
    }

    /// All bytes requested (`R = C + U`).
    pub fn total_bytes(&self) -> u64 {
        self.chunkable_bytes + self.unchunkable_bytes
    }
}

/// The memory a plan may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Free device memory plus what the participants already hold and will
    /// replace (`Fe`).
    pub effective_free: u64,
    /// In active limit mode, what the group's caps still allow (`H`); `None`
    /// in passive mode.
    pub cap_headroom: Option<u64>,
    /// Memory always left free, and below which nothing is allocated.
    pub granule: u64,
}

impl Budget {
    /// Passive limit mode: the plan may use the free memory.
    pub fn passive(effective_free: u64) -> Self {
        Budget {
            effective_free,
            cap_headroom: None,
            granule: DEFAULT_ALLOCATION_GRANULE,
        }
    }

    /// Active limit mode: the plan may use `min(free, headroom)`.
    pub fn active(effective_free: u64, cap_headroom: u64) -> Self {
        Budget {
            cap_headroom: Some(cap_headroom),
            ..Budget::passive(effective_free)
        }
    }

    /// Sets the allocation granule.
    pub fn with_granule(mut self, granule: u64) -> Self {
        self.granule = granule;
        self
    }

    /// The limit before the reserve: `Fe` (passive) or `min(Fe, H)` (active).
    pub fn limit(&self) -> u64 {
        match self.cap_headroom {
            Some(h) => self.effective_free.min(h),
            None => self.effective_free,
        }
    }

    /// The eviction trigger: on a physical shortage (`R >= Fe`) that the
    /// caps allow (passive, or `R < H`), the bytes idle owners must release,
    /// `R - Fe + 1`; `None` otherwise, and for an empty batch.
    pub fn shortfall(&self, requested: u64) -> Option<u64> {
        let caps_allow = self.cap_headroom.is_none_or(|h| requested < h);
        (requested > 0 && requested >= self.effective_free && caps_allow)
            .then(|| (requested - self.effective_free).saturating_add(1))
    }

    /// `(allocatable, withheld)`: `alloc = min(A - floor(0.02 A), Fe - granule)`.
    pub fn allocatable(&self) -> Result<(u64, u64), MemError> {
        if self.effective_free < self.granule {
            return Err(MemError::BelowGranule {
                free: Bytes(self.effective_free),
                granule: Bytes(self.granule),
            });
        }
        let limit = self.limit();
        let reserve = (u128::from(limit) * u128::from(FRAGMENTATION_RESERVE_PERCENT) / 100) as u64;
        let alloc = (limit - reserve).min(self.effective_free - self.granule);
        Ok((alloc, limit - alloc))
    }
}

/// How a batch is split along its run axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Runs in the whole batch.
    pub total_runs: usize,
    /// Number of chunks.
    pub chunks: usize,
    /// Runs per chunk (the last chunk may be shorter).
    pub chunk_length: usize,
    /// Bytes of the chunkable requests at full length.
    pub chunkable_bytes: u64,
    /// Bytes of the unchunkable requests.
    pub unchunkable_bytes: u64,
    /// Bytes the plan was allowed to allocate.
    pub allocatable: u64,
    /// Bytes withheld as reserve (fragmentation share and granule).
    pub withheld: u64,
}

impl ChunkPlan {
    /// Whether the batch is split into more than one chunk.
    pub fn is_chunked(&self) -> bool {
        self.chunks > 1
    }

    /// The runs of chunk `index`, or `None` past the last chunk. Chunks
    /// past the batch's end (possible for a reused partition) are empty.
    pub fn chunk_runs(&self, index: usize) -> Option<Range<usize>> {
        (index < self.chunks).then(|| self.runs_of(index))
    }

    fn runs_of(&self, index: usize) -> Range<usize> {
        let start = index.saturating_mul(self.chunk_length).min(self.total_runs);
        let end = start.saturating_add(self.chunk_length).min(self.total_runs);
        start..end
    }

    /// The run ranges of every chunk, in order.
    pub fn chunk_ranges(&self) -> impl ExactSizeIterator<Item = Range<usize>> + '_ {
        (0..self.chunks).map(|i| self.runs_of(i))
    }

    /// The shape a request is allocated with under this plan.
    pub fn chunked_shape(&self, request: &ArrayRequest) -> Vec<usize> {
        request.chunked_shape(self.chunk_length)
    }

    /// Bytes allocated for a request under this plan.
    pub fn chunked_bytes(&self, request: &ArrayRequest) -> u64 {
        let elements: u64 = request
            .chunked_dims(self.chunk_length)
            .map(|d| d as u64)
            .product();
        elements * request.dtype().size_bytes() as u64
    }

    /// This plan with the partition `(chunk_length, chunks)` instead, when
    /// that partition covers the batch (`ceil(total_runs / chunks) == chunk_length`)
    /// and is at least as fine as this plan's.
    pub fn with_partition(&self, chunk_length: usize, chunks: usize) -> Option<ChunkPlan> {
        let covers = chunks > 0 && self.total_runs.div_ceil(chunks) == chunk_length;
        (covers && chunk_length <= self.chunk_length).then_some(ChunkPlan {
            chunks,
            chunk_length,
            ..*self
        })
    }
}

/// Plans a batch from measured sizes and a budget.
///
/// `R < alloc` gives one chunk. Otherwise the run axis is split evenly so that
/// the chunkable bytes of one chunk plus the unchunkable bytes fit in `alloc`,
/// using exact integer arithmetic.
pub fn plan_chunks(sizes: &BatchSizes, budget: &Budget) -> Result<ChunkPlan, MemError> {
    let (alloc, withheld) = budget.allocatable()?;
    let total = sizes.total_bytes();
    let mut plan = ChunkPlan {
        total_runs: sizes.total_runs,
        chunks: 1,
        chunk_length: sizes.total_runs,
        chunkable_bytes: sizes.chunkable_bytes,
        unchunkable_bytes: sizes.unchunkable_bytes,
        allocatable: alloc,
        withheld,
    };
    if total < alloc {
        return Ok(plan);
    }
    if sizes.chunkable_bytes == 0 {
        return Err(MemError::AllUnchunkable {
            requested: Bytes(total),
            available: Bytes(alloc),
            withheld: Bytes(withheld),
        });
    }
    if alloc <= sizes.unchunkable_bytes {
        return Err(MemError::UnchunkableTooLarge {
            unchunkable: Bytes(sizes.unchunkable_bytes),
            available: Bytes(alloc),
            withheld: Bytes(withheld),
        });
    }
    let room = alloc - sizes.unchunkable_bytes;
    let runs = sizes.total_runs as u128;
    let max_chunk = runs * u128::from(room) / u128::from(sizes.chunkable_bytes);
    if max_chunk == 0 {
        return Err(MemError::SingleRunTooLarge {
            per_run: Bytes(sizes.chunkable_bytes.div_ceil(sizes.total_runs as u64)),
            room: Bytes(room),
            unchunkable: Bytes(sizes.unchunkable_bytes),
            withheld: Bytes(withheld),
        });
    }
    // max_chunk < total_runs here, because C * total_runs / total_runs > room.
    let max_chunk = max_chunk.min(runs) as usize;
    plan.chunks = sizes.total_runs.div_ceil(max_chunk);
    plan.chunk_length = sizes.total_runs.div_ceil(plan.chunks);
    Ok(plan)
}

/// Measures `requests` and plans them against `budget`.
pub fn plan<'a>(
    requests: impl IntoIterator<Item = (&'a str, &'a ArrayRequest)> + Clone,
    budget: &Budget,
) -> Result<ChunkPlan, MemError> {
    plan_chunks(&BatchSizes::measure(requests)?, budget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, MemoryKind};

    fn sizes(total_runs: usize, c: u64, u: u64) -> BatchSizes {
        BatchSizes {
            total_runs,
            chunkable_bytes: c,
            unchunkable_bytes: u,
        }
    }

    #[test]
    fn exact_arithmetic_keeps_the_seventh_run() {
        // alloc = 57142 - floor(0.02 * 57142) = 57142 - 1142 = 56000
        let budget = Budget::passive(57_142).with_granule(0);
        assert_eq!(budget.allocatable().unwrap(), (56_000, 1_142));
        let plan = plan_chunks(&sizes(58, 464_000, 0), &budget).unwrap();
        // 58 * 56000 / 464000 = 7 exactly; float division gives 6.999...
        assert_eq!(plan.chunks, 9);
        assert_eq!(plan.chunk_length, 7);
    }

    #[test]
    fn fits_in_one_chunk_when_strictly_below_alloc() {
        let budget = Budget::passive(1000).with_granule(0); // alloc 980
        let p = plan_chunks(&sizes(10, 900, 79), &budget).unwrap();
        assert_eq!((p.chunks, p.chunk_length), (1, 10));
        // R == alloc takes the split path, which still fits all 10 runs.
        let p = plan_chunks(&sizes(10, 900, 80), &budget).unwrap();
        assert_eq!((p.chunks, p.chunk_length), (1, 10));
        let p = plan_chunks(&sizes(10, 901, 80), &budget).unwrap();
        assert_eq!((p.chunks, p.chunk_length), (2, 5));
    }

    #[test]
    fn even_split() {
        // alloc 980, U=0, C=10_000 over 100 runs: max_chunk = 100*980/10000 = 9
        let p = plan_chunks(
            &sizes(100, 10_000, 0),
            &Budget::passive(1000).with_granule(0),
        )
        .unwrap();
        assert_eq!(p.chunks, 12); // ceil(100/9)
        assert_eq!(p.chunk_length, 9); // ceil(100/12)
        let lens: Vec<_> = p.chunk_ranges().map(|r| r.len()).collect();
        assert_eq!(lens.iter().sum::<usize>(), 100);
        assert_eq!(lens.last(), Some(&1));
    }

    #[test]
    fn granule_is_left_free() {
        let budget = Budget::passive(1000).with_granule(100);
        assert_eq!(budget.allocatable().unwrap(), (900, 100));
        let budget = Budget::passive(99).with_granule(100);
        assert!(matches!(
            budget.allocatable(),
            Err(MemError::BelowGranule { .. })
        ));
    }

    #[test]
    fn active_limit_uses_headroom() {
        let budget = Budget::active(10_000, 1_000).with_granule(0);
        assert_eq!(budget.allocatable().unwrap(), (980, 20));
    }

    #[test]
    fn error_cases() {
        let b = Budget::passive(1000).with_granule(0);
        assert!(matches!(
            plan_chunks(&sizes(1, 0, 5000), &b),
            Err(MemError::AllUnchunkable { .. })
        ));
        assert!(matches!(
            plan_chunks(&sizes(10, 100, 980), &b),
            Err(MemError::UnchunkableTooLarge { .. })
        ));
        assert!(matches!(
            plan_chunks(&sizes(10, 100_000, 0), &b),
            Err(MemError::SingleRunTooLarge { .. })
        ));
    }

    #[test]
    fn measure_checks_run_counts_and_counts_pinned() {
        let state = ArrayRequest::new(DType::F64, [2, 3, 50]).total_runs(50);
        let status = ArrayRequest::of::<i32>([50])
            .chunk_axis(0)
            .memory(MemoryKind::Pinned);
        let init = ArrayRequest::of::<f32>([3]).unchunkable();
        let reqs = [("state", &state), ("status", &status), ("init", &init)];
        let s = BatchSizes::measure(reqs.iter().copied()).unwrap();
        assert_eq!(s.total_runs, 50);
        assert_eq!(s.chunkable_bytes, 2 * 3 * 50 * 8 + 50 * 4);
        assert_eq!(s.unchunkable_bytes, 12);

        let short = ArrayRequest::of::<i32>([49]).chunk_axis(0);
        let reqs = [("state", &state), ("short", &short)];
        assert!(matches!(
            BatchSizes::measure(reqs.iter().copied()),
            Err(MemError::RunCountMismatch {
                axis_length: 49,
                total_runs: 50,
                ..
            })
        ));
    }

    #[test]
    fn reused_partition_must_cover_and_fit() {
        let p = plan_chunks(
            &sizes(100, 10_000, 0),
            &Budget::passive(1000).with_granule(0),
        )
        .unwrap();
        assert_eq!((p.chunk_length, p.chunks), (9, 12));
        assert!(p.with_partition(5, 20).is_some());
        assert!(
            p.with_partition(6, 20).is_none(),
            "does not cover: ceil(100/20) = 5"
        );
        assert!(p.with_partition(10, 10).is_none(), "coarser than what fits");
    }
}
