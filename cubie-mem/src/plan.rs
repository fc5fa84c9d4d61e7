//! The chunk planner: a pure function from request sizes and a memory budget
//! to a chunk plan. It needs no manager.
//! The rules and examples are on the guide page [planner](crate::guide::planner).

use crate::{ArrayRequest, Bytes, MemError, UnchunkableArray};

pub use limit::Limit;

/// Percentage of the available memory withheld against fragmentation.
pub(crate) const FRAGMENTATION_RESERVE_PERCENT: u64 = 2;

/// Default allocation granule: memory always left free.
pub(crate) const DEFAULT_ALLOCATION_GRANULE: u64 = 32 << 20;

/// A request larger than this multiple of free memory logs a warning.
pub(crate) const OVERSIZE_WARNING_FACTOR: u64 = 20;

/// The byte totals of a set of requests, its run count and pipeline depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSizes {
    /// The batch's run count: the largest `total_runs` among the requests (at least 1).
    pub total_runs: usize,
    /// Bytes of the chunkable requests at full length (`C`).
    pub chunkable_bytes: u64,
    /// Bytes of the unchunkable requests (`U`).
    pub unchunkable_bytes: u64,
    /// The pipeline depth `d`: the largest among the chunkable requests (1
    /// when there are none).
    pub depth: usize,
}

impl BatchSizes {
    /// Measures requests, checking each, that every chunkable one has the
    /// batch's run count on its chunk axis, and that none declaring runs is
    /// left whole beside them by a chunk axis beyond its shape
    /// ([`MemError::RunsLeftWhole`]).
    pub fn measure<'a>(
        requests: impl IntoIterator<Item = (&'a str, &'a ArrayRequest)> + Clone,
    ) -> Result<Self, MemError> {
        let mut total_runs = 1usize;
        for (label, request) in requests.clone() {
            request.check_runs(label)?;
            request.check_depth(label)?;
            total_runs = total_runs.max(request.runs());
        }
        let mut sizes = BatchSizes {
            total_runs,
            chunkable_bytes: 0,
            unchunkable_bytes: 0,
            depth: 1,
        };
        let mut any_chunkable = false;
        let mut left_whole = None;
        for (label, request) in requests {
            let bytes = request.checked_nbytes(label)?;
            let slot = match request.chunk_axis_in_use() {
                Some(axis) => {
                    any_chunkable = true;
                    let axis_length = request.shape()[axis];
                    if axis_length != total_runs {
                        return Err(MemError::RunCountMismatch {
                            label: label.to_owned(),
                            axis,
                            axis_length,
                            total_runs,
                        });
                    }
                    sizes.depth = sizes.depth.max(request.depth());
                    &mut sizes.chunkable_bytes
                }
                None => {
                    if let Some(axis) = request.empty_chunk_axis() {
                        return Err(MemError::RunCountMismatch {
                            label: label.to_owned(),
                            axis,
                            axis_length: 0,
                            total_runs,
                        });
                    }
                    if left_whole.is_none() && request.axis_out_of_range().is_some() {
                        left_whole = UnchunkableArray::of(label, request, total_runs);
                    }
                    &mut sizes.unchunkable_bytes
                }
            };
            *slot = slot.checked_add(bytes).ok_or_else(|| {
                MemError::invalid_request(label, "total byte size overflows 64 bits")
            })?;
        }
        if let Some(array) = left_whole.filter(|_| any_chunkable) {
            return Err(MemError::RunsLeftWhole(array));
        }
        sizes
            .chunkable_bytes
            .checked_add(sizes.unchunkable_bytes)
            .ok_or_else(|| MemError::invalid_request("", "total byte size overflows 64 bits"))?;
        Ok(sizes)
    }

    /// All bytes requested (`R = C + U`), saturating.
    pub fn total_bytes(&self) -> u64 {
        self.chunkable_bytes.saturating_add(self.unchunkable_bytes)
    }

    /// Refuses hand-made sizes no plan can cover: no runs, or depth 0.
    pub(crate) fn check_plannable(&self) -> Result<(), MemError> {
        let (chunkable, unchunkable) = (Bytes(self.chunkable_bytes), Bytes(self.unchunkable_bytes));
        if self.total_runs == 0 {
            return Err(MemError::ZeroRuns {
                chunkable,
                unchunkable,
            });
        }
        if self.depth == 0 {
            return Err(MemError::ZeroDepth {
                chunkable,
                unchunkable,
            });
        }
        Ok(())
    }

    /// The plan of one chunk of every run.
    fn one_chunk(&self, (allocatable, withheld): (u64, u64)) -> ChunkPlan {
        ChunkPlan {
            total_runs: self.total_runs,
            chunks: 1,
            chunk_length: self.total_runs,
            chunkable_bytes: self.chunkable_bytes,
            unchunkable_bytes: self.unchunkable_bytes,
            allocatable,
            withheld,
            buffer_sets: 1,
            limited_by: None,
        }
    }
}

/// The figures of one request set that a batch's [`BatchSizes`] add up,
/// taken once when the set is queued, as its requests are validated:
/// measuring a batch of such sets then reads no request again. A batch
/// whose figures could make [`BatchSizes::measure`] fail (a run count that
/// differs, a sum that overflows, an empty chunk axis) is measured in
/// full, for that error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SetSizes {
    /// The largest `total_runs` among its requests (at least 1).
    runs: usize,
    /// Bytes of its chunkable requests.
    chunkable: u64,
    /// Bytes of its unchunkable requests.
    unchunkable: u64,
    /// The largest pipeline depth among its chunkable requests (at least 1).
    depth: usize,
    /// The shortest chunk axis among its chunkable requests (`usize::MAX`
    /// without one), which the batch's run count must equal.
    shortest: usize,
    /// The longest chunk axis among its chunkable requests (0 without one).
    longest: usize,
    /// Whether every request is valid, none has an empty chunk axis or one
    /// beyond its shape while declaring runs, and no sum overflows: else
    /// only a full measure tells the error, if any.
    plain: bool,
}

impl Default for SetSizes {
    fn default() -> Self {
        SetSizes {
            runs: 1,
            chunkable: 0,
            unchunkable: 0,
            depth: 1,
            shortest: usize::MAX,
            longest: 0,
            plain: true,
        }
    }
}

impl SetSizes {
    /// The figures of `requests`.
    #[cfg(test)]
    pub(crate) fn of<'a>(requests: impl IntoIterator<Item = &'a ArrayRequest>) -> Self {
        let mut sizes = SetSizes::default();
        for request in requests {
            sizes.add(request);
        }
        sizes
    }

    /// Adds `request`'s figures; returns whether it is valid
    /// ([`ArrayRequest::validate`]).
    pub(crate) fn add(&mut self, request: &ArrayRequest) -> bool {
        let bytes = match request.byte_size() {
            Some(bytes) if request.runs() > 0 && request.depth() > 0 => bytes,
            _ => {
                self.plain = false;
                return false;
            }
        };
        self.runs = self.runs.max(request.runs());
        let sum = match request.chunk_axis_in_use() {
            Some(axis) => {
                let length = request.shape().get(axis).copied().unwrap_or(0);
                self.shortest = self.shortest.min(length);
                self.longest = self.longest.max(length);
                self.depth = self.depth.max(request.depth());
                &mut self.chunkable
            }
            None => {
                self.plain &=
                    request.empty_chunk_axis().is_none() && request.axis_out_of_range().is_none();
                &mut self.unchunkable
            }
        };
        match sum.checked_add(bytes) {
            Some(total) => *sum = total,
            None => self.plain = false,
        }
        true
    }

    /// The sizes of a batch of `sets`, as [`BatchSizes::measure`] gives
    /// them from their requests; `None` when that measure could fail (it
    /// then tells the error).
    pub(crate) fn batch<'a>(
        sets: impl Iterator<Item = &'a SetSizes> + Clone,
    ) -> Option<BatchSizes> {
        let total_runs = sets.clone().fold(1, |runs, set| runs.max(set.runs));
        let mut sizes = BatchSizes {
            total_runs,
            chunkable_bytes: 0,
            unchunkable_bytes: 0,
            depth: 1,
        };
        for set in sets {
            let chunked = set.shortest <= set.longest;
            let runs_match = !chunked || (set.shortest == total_runs && set.longest == total_runs);
            if !set.plain || !runs_match {
                return None;
            }
            sizes.chunkable_bytes = sizes.chunkable_bytes.checked_add(set.chunkable)?;
            sizes.unchunkable_bytes = sizes.unchunkable_bytes.checked_add(set.unchunkable)?;
            sizes.depth = sizes.depth.max(set.depth);
        }
        sizes.chunkable_bytes.checked_add(sizes.unchunkable_bytes)?;
        Some(sizes)
    }
}

/// The memory a plan may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Free device memory plus what the batch replaces (`Fe`).
    pub effective_free: u64,
    /// In active limit mode, what the group's caps still allow (`H`).
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

    /// `(allocatable, withheld)`: `alloc = min(A - floor(0.02 A), Fe - granule)`.
    /// An error when `Fe` is below the granule.
    pub fn allocatable(&self) -> Result<(u64, u64), MemError> {
        if self.effective_free < self.granule {
            return Err(MemError::BelowGranule {
                free: Bytes(self.effective_free),
                granule: Bytes(self.granule),
                report: None,
            });
        }
        let (reserve_bound, granule_bound) = self.bounds();
        let alloc = reserve_bound.min(granule_bound);
        Ok((alloc, self.limit() - alloc))
    }

    /// The two bounds of `alloc`: `A - floor(0.02 A)` and `Fe - granule`.
    fn bounds(&self) -> (u64, u64) {
        let limit = self.limit();
        let reserve = (u128::from(limit) * u128::from(FRAGMENTATION_RESERVE_PERCENT) / 100) as u64;
        (
            limit - reserve,
            self.effective_free.saturating_sub(self.granule),
        )
    }

    /// The bytes idle owners must release before a batch of `requested`
    /// bytes is planned: `R - Fe + 1` when `R >= Fe`. `None` when nothing
    /// needs evicting, or when the caps forbid the batch anyway.
    pub fn shortfall(&self, requested: u64) -> Option<u64> {
        let caps_forbid = self.cap_headroom.is_some_and(|h| requested >= h);
        if requested == 0 || requested < self.effective_free || caps_forbid {
            return None;
        }
        Some((requested - self.effective_free).saturating_add(1))
    }
}

/// Plans a batch from measured sizes and a budget: one chunk when it fits,
/// else an even split of the run axis. The rules are on the guide page
/// [planner](crate::guide::planner).
pub fn plan_chunks(sizes: &BatchSizes, budget: &Budget) -> Result<ChunkPlan, MemError> {
    #[cfg(test)]
    attempts::count();
    sizes.check_plannable()?;
    let total = sizes.total_bytes();
    if total == 0 {
        let figures = budget.allocatable().unwrap_or((0, budget.limit()));
        return Ok(sizes.one_chunk(figures));
    }
    let (alloc, withheld) = budget.allocatable()?;
    let mut plan = sizes.one_chunk((alloc, withheld));
    if total < alloc {
        return Ok(plan);
    }
    if sizes.chunkable_bytes == 0 {
        return Err(MemError::AllUnchunkable {
            requested: Bytes(total),
            available: Bytes(alloc),
            withheld: Bytes(withheld),
            arrays: Vec::new(),
            report: None,
        });
    }
    if sizes.unchunkable_bytes > 0 && alloc <= sizes.unchunkable_bytes {
        return Err(MemError::UnchunkableTooLarge {
            unchunkable: Bytes(sizes.unchunkable_bytes),
            available: Bytes(alloc),
            withheld: Bytes(withheld),
            arrays: Vec::new(),
            report: None,
        });
    }
    // alloc > U here, or U == 0 (and alloc may be 0: no run fits below).
    let room = alloc.saturating_sub(sizes.unchunkable_bytes);
    let chunkable = u128::from(sizes.chunkable_bytes);
    // usize is at most 64 bits, so both products are below 2^128.
    let runs = sizes.total_runs as u128;
    let depth = sizes.depth as u128;
    let max_chunk = runs * u128::from(room) / (depth * chunkable);
    if max_chunk == 0 {
        let per_run = chunkable.div_ceil(runs);
        return Err(MemError::SingleRunTooLarge {
            per_run: Bytes(u64::try_from(per_run).unwrap_or(u64::MAX)),
            depth: sizes.depth,
            room: Bytes(room),
            unchunkable: Bytes(sizes.unchunkable_bytes),
            withheld: Bytes(withheld),
            report: None,
        });
    }
    // max_chunk <= total_runs here, because R >= alloc gives C >= room.
    let max_chunk = usize::try_from(max_chunk.min(runs)).unwrap_or(sizes.total_runs);
    plan.chunks = sizes.total_runs.div_ceil(max_chunk);
    plan.chunk_length = sizes.total_runs.div_ceil(plan.chunks);
    // One chunk (chunks == 1) needs one set.
    plan.buffer_sets = sizes.depth.min(plan.chunks);
    plan.limited_by = plan
        .is_chunked()
        .then(|| limit::of_split(sizes, budget, alloc));
    Ok(plan)
}

/// The plan of a remembered partition, when it covers the batch
/// (`ceil(total_runs / chunks) == chunk_length`); else `None`. It comes
/// before planning, so arrays laid out for it stay valid.
pub(crate) fn plan_partition(
    sizes: &BatchSizes,
    budget: &Budget,
    chunk_length: usize,
    chunks: usize,
) -> Option<ChunkPlan> {
    let whole = sizes.one_chunk(budget.allocatable().unwrap_or((0, budget.limit())));
    whole.validate().ok()?;
    let covers = chunks > 0 && sizes.total_runs.div_ceil(chunks) == chunk_length;
    if !covers {
        return None;
    }
    let chunks = chunks.min(sizes.total_runs);
    let plan = ChunkPlan {
        chunks,
        chunk_length,
        limited_by: (chunks > 1).then_some(Limit::ReusedPartition),
        ..whole
    };
    plan.validate().ok().map(|()| plan.sets_for(sizes.depth))
}

/// Measures `requests` and plans them against `budget`.
pub fn plan<'a>(
    requests: impl IntoIterator<Item = (&'a str, &'a ArrayRequest)> + Clone,
    budget: &Budget,
) -> Result<ChunkPlan, MemError> {
    let sizes = BatchSizes::measure(requests.clone())?;
    plan_chunks(&sizes, budget).map_err(|error| name_unchunkable(error, requests, sizes.total_runs))
}

/// `error` with the unchunkable arrays among `requests` named.
pub(crate) fn name_unchunkable<'a>(
    mut error: MemError,
    requests: impl IntoIterator<Item = (&'a str, &'a ArrayRequest)>,
    total_runs: usize,
) -> MemError {
    if let MemError::AllUnchunkable { arrays, .. } | MemError::UnchunkableTooLarge { arrays, .. } =
        &mut error
    {
        *arrays = crate::UnchunkableArray::among(requests, total_runs);
    }
    error
}

pub(crate) mod chunks;
#[cfg(test)]
mod depth_tests;
#[cfg(test)]
pub(crate) mod attempts {
    //! How many plans this thread made: tests count them to show that a
    //! search over a user's figure makes a logarithmic number.

    use std::cell::Cell;

    thread_local! {
        static MADE: Cell<usize> = const { Cell::new(0) };
    }

    /// Counts one plan.
    pub(super) fn count() {
        MADE.with(|made| made.set(made.get().saturating_add(1)));
    }

    /// The plans this thread has made so far.
    pub(crate) fn made() -> usize {
        MADE.with(Cell::get)
    }
}
#[cfg(test)]
mod edge_tests;
mod limit;
pub mod split;
#[cfg(test)]
mod tests;

use chunks::ChunkPlan;
