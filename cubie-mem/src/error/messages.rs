//! Messages too long to sit in the error enum's attributes: the VRAM share
//! errors (proportions printed with [`Proportion`], so that a share of
//! `1e-6` and an empty pool's `0` read as they are), and the planner's
//! errors for figures given by hand.

use crate::Bytes;
use crate::pools::Proportion;

/// `MemError::ManualPoolOverflow`.
pub(super) fn manual_pool_overflow(manual_sum: f64, requested: f64) -> String {
    format!(
        "manual pool would exceed total memory: {} already assigned + {} requested > 1; lower this \
         proportion to at most {} or free manual shares",
        Proportion(manual_sum),
        Proportion(requested),
        Proportion((1.0 - manual_sum).max(0.0))
    )
}

/// `MemError::AutoPoolStarved`.
pub(super) fn auto_pool_starved(
    manual_sum: f64,
    requested: f64,
    remaining: f64,
    auto_members: usize,
    minimum: f64,
) -> String {
    format!(
        "manual pool would leave {} of memory to {auto_members} auto-pool instance(s), below the minimum \
         auto pool of {}; lower the proportion ({} assigned + {} requested) or move the auto instances to \
         manual shares",
        Proportion(remaining),
        Proportion(minimum),
        Proportion(manual_sum),
        Proportion(requested)
    )
}

/// `MemError::AutoPoolFull`.
pub(super) fn auto_pool_full(manual_sum: f64, remaining: f64, minimum: f64) -> String {
    format!(
        "cannot join the auto pool: the manual pool holds {} of memory, leaving {} <= the minimum auto \
         pool of {}; give this instance a manual proportion or shrink the manual shares",
        Proportion(manual_sum),
        Proportion(remaining),
        Proportion(minimum)
    )
}

/// `MemError::CapLimited`.
pub(super) fn cap_limited(
    group: &str,
    proportion: f64,
    caps: Bytes,
    held: Bytes,
    allowed: Bytes,
    needed: Bytes,
    free: Bytes,
) -> String {
    format!(
        "stream group '{group}' is held to its caps in active limit mode: its members' proportion {} gives \
         caps of {caps}, {held} of which are in use, so {allowed} can be allocated, but the batch needs at \
         least {needed} (its unchunkable arrays and one run in each buffer set); the device has {free} free: \
         give the instances a larger proportion (set_manual_proportion) or use LimitMode::Passive",
        Proportion(proportion),
    )
}

/// `MemError::InvalidPlan`.
pub(super) fn invalid_plan(
    total_runs: usize,
    chunks: usize,
    chunk_length: usize,
    reason: &str,
) -> String {
    format!(
        "invalid chunk plan of {chunks} chunk(s) of {chunk_length} run(s) for {total_runs} run(s): \
         {reason}; take plans from the manager's response or plan::plan"
    )
}

/// `MemError::ZeroRuns`.
pub(super) fn zero_runs(chunkable: Bytes, unchunkable: Bytes) -> String {
    format!(
        "the batch has 0 runs ({chunkable} chunkable, {unchunkable} unchunkable); a batch has at least \
         one run: set BatchSizes::total_runs to 1 or more, or measure the requests with \
         BatchSizes::measure"
    )
}

/// `MemError::ZeroDepth`.
pub(super) fn zero_depth(chunkable: Bytes, unchunkable: Bytes) -> String {
    format!(
        "the batch has a pipeline depth of 0 ({chunkable} chunkable, {unchunkable} unchunkable); a \
         pipeline has at least one buffer set: set BatchSizes::depth to 1 or more, or measure the \
         requests with BatchSizes::measure"
    )
}
