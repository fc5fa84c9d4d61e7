//! Messages too long to sit in the error enum's attributes.

use crate::Bytes;
use crate::plan::split::Skip;
use crate::pools::Proportion;

/// `MemError::RunCountMismatch`.
pub(super) fn run_count_mismatch(
    label: &str,
    axis: usize,
    axis_length: usize,
    total_runs: usize,
) -> String {
    format!(
        "request '{label}' has length {axis_length} on its chunk axis {axis}, but the batch has \
         {total_runs} runs; size the chunk axis to the run count or mark the request unchunkable"
    )
}

/// `MemError::RunsLeftWhole`.
pub(super) fn runs_left_whole(array: &super::UnchunkableArray) -> String {
    format!(
        "request {array}; it declares runs (total_runs above 1), yet would be allocated whole \
         beside arrays split into chunks of the runs; to keep it whole on purpose, flag it \
         ArrayRequest::unchunkable()"
    )
}

/// `MemError::AllUnchunkable`, before its hints.
pub(super) fn all_unchunkable(requested: Bytes, available: Bytes, withheld: Bytes) -> String {
    format!(
        "all {requested} requested are unchunkable, but only {available} can be allocated ({withheld} \
         withheld as reserve); make a request chunkable or free memory"
    )
}

/// `MemError::SingleRunTooLarge`, before its report.
pub(super) fn single_run_too_large(
    per_run: Bytes,
    depth: usize,
    room: Bytes,
    unchunkable: Bytes,
    withheld: Bytes,
) -> String {
    format!(
        "cannot fit a single run: one run needs {per_run} of chunkable arrays{}, {room} is left after \
         {unchunkable} of unchunkable arrays ({withheld} withheld as reserve); free memory or shrink \
         the per-run arrays{}",
        super::hints::depth_need(depth),
        super::hints::depth_fix(depth)
    )
}

/// `MemError::BelowGranule`.
pub(super) fn below_granule(free: Bytes, granule: Bytes) -> String {
    format!(
        "cannot allocate: {free} free (including memory the requesters already hold) is below the \
         allocation granule of {granule}, the memory always left free (setting \
         ManagerConfig::allocation_granule_bytes); free device memory, or lower the granule: \
         MemoryManager::with_config(backend, ManagerConfig::default().granule(0)) allocates down to \
         the last byte"
    )
}

/// `MemError::OutOfMemory`.
pub(super) fn out_of_memory(
    label: &str,
    requested: Bytes,
    free: Bytes,
    idle_held: Bytes,
    limit: Bytes,
) -> String {
    format!(
        "out of memory allocating '{label}': requested {requested}, device free {free}, held idle by \
         this manager {idle_held}, limit {limit}; free or evict idle buffers, lower the batch size, \
         or raise the limit"
    )
}

/// `MemError::NoDeviceTakesPart`: each device's reason, then the fixes.
pub(super) fn no_device_takes_part(reasons: &[Skip]) -> String {
    if reasons.is_empty() {
        return "a batch cannot be split across a set of no devices: give the set at least one \
                device"
            .to_owned();
    }
    let each: Vec<String> = reasons
        .iter()
        .enumerate()
        .map(|(device, skip)| format!("device {device} {skip}"))
        .collect();
    let mut fixes = Vec::new();
    if reasons.iter().any(|r| !matches!(r, Skip::ZeroWeight)) {
        fixes.push(
            "free memory on a device, or shrink the batch's unchunkable or per-run arrays (a device \
             holds the unchunkable arrays and one run in each buffer set)",
        );
    }
    if reasons.contains(&Skip::ZeroWeight) {
        fixes.push("give a device a weight above 0");
    }
    format!(
        "no device can take part in the batch: {}; {}",
        each.join("; "),
        fixes.join(", or ")
    )
}

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

/// `MemError::PipelineSets`.
pub(super) fn pipeline_sets(label: &str, bound: usize, sets: usize) -> String {
    format!(
        "pipeline binding '{label}' has {bound} device array(s), but the pipeline runs {sets} buffer \
         set(s): bind it with input_with, output_with or inout_with, which pick its array in every \
         set, or run ChunkStreamer::pipeline (one set) for a single array"
    )
}

/// `MemError::SharedBuffer`.
pub(super) fn shared_buffer(label: &str, first_set: usize, second_set: usize) -> String {
    format!(
        "device array '{label}' is bound in buffer sets {first_set} and {second_set}: each set needs \
         a buffer of its own, or two chunks in flight overwrite each other; allocate the array with \
         a pipeline depth and pick each set's buffer in input_with, output_with or inout_with"
    )
}

/// `MemError::NoBufferSets`.
pub(super) const NO_BUFFER_SETS: &str = "a chunk pipeline needs at least one buffer set, and \
     pipeline_sets was given none: pass the sets of an allocation (Allocated::sets), or use \
     ChunkStreamer::pipeline for one set";

/// `MemError::Shard`: the variables as `NAME=value`.
pub(super) fn shard(variables: &[(&str, String)], reason: &crate::ShardError) -> String {
    let shown: Vec<String> = variables
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let shown = if shown.is_empty() {
        "no launcher variable set".to_owned()
    } else {
        shown.join(", ")
    };
    format!("cannot place this process in its job ({shown}): {reason}")
}

/// `MemError::UnknownOwner`.
pub(super) fn unknown_owner(owner: &str) -> String {
    format!(
        "{owner} is not known to this manager; create owners with this manager's new_owner(), \
         or name an instance registered with it"
    )
}

/// `MemError::NoInvalidateHook`.
pub(super) fn no_invalidate_hook(instance: &str) -> String {
    format!(
        "{instance} has no invalidate hook, so its buffers could be evicted without notice; \
         register it with Registration::on_invalidate(..) before queueing requests"
    )
}

/// `MemError::UnchunkableTooLarge`.
pub(super) fn unchunkable_too_large(
    unchunkable: Bytes,
    available: Bytes,
    withheld: Bytes,
) -> String {
    format!(
        "unchunkable arrays need {unchunkable} but only {available} can be allocated ({withheld} withheld as reserve); \
         shrink the unchunkable arrays, make them chunkable, or free memory"
    )
}

/// `MemError::StreamGroupMismatch`.
pub(super) fn stream_group_mismatch(instance: &str, group: &str, declared: &str) -> String {
    format!(
        "{instance} is in stream group '{group}' but the buffers are declared for '{declared}'; \
         register it with the buffers' registration() preset or change its stream group"
    )
}

/// `MemError::ChunkOutOfRange`.
pub(super) fn chunk_out_of_range(chunk: usize, chunks: usize) -> String {
    format!(
        "chunk {chunk} is out of range: the plan has {chunks} chunk(s), indices 0..{chunks}; \
         iterate over ChunkPlan::iter_chunks() for the valid chunks"
    )
}

/// `MemError::InvalidChunkRuns`.
pub(super) fn invalid_chunk_runs(
    start: usize,
    end: usize,
    axis_length: usize,
    chunk_length: usize,
) -> String {
    format!(
        "runs {start}..{end} do not fit a chunk: the chunk axis has {axis_length} runs and a chunk holds \
         {chunk_length}; take run ranges from ChunkPlan::iter_chunks()"
    )
}

/// `MemError::StagingWindow`.
pub(super) fn staging_window(start: usize, len: usize, chunk_elements: usize) -> String {
    format!(
        "staging window of {len} elements at element {start} reaches past the chunk's {chunk_elements} elements; \
         keep windows inside ChunkLayout::chunk_elements()"
    )
}

/// `MemError::NoRunAxis`.
pub(super) fn no_run_axis(label: &str) -> String {
    format!(
        "'{label}' was requested unchunkable, so it has no axis of runs to bind along: bind \
         it with .along(axis) naming the axis of the host array that holds the runs, or leave it \
         out of the pipeline (an unchunkable array is the same for every chunk)"
    )
}

/// `MemError::BindingAxes`.
pub(super) fn binding_axes(label: &str, first: usize, set: usize, axis: usize) -> String {
    format!(
        "pipeline binding '{label}' chunks set 0 along axis {first} but set {set} along axis \
         {axis}: one host array has one axis of runs; make every set's array the same (or name \
         the axis with .along(axis) in the selector)"
    )
}

/// `MemError::HostOutOfMemory`.
pub(super) fn host_out_of_memory(requested: Bytes, what: &str) -> String {
    format!(
        "the host could not provide {requested} for {what}; run a smaller batch, or lower the spill threshold \
         (ManagerConfig::host_spill_threshold or Registration::host_spill_threshold) so that arrays this large \
         spill to a file"
    )
}

/// `MemError::SetOutOfRange`.
pub(super) fn set_out_of_range(label: &str, set: usize, buffer_sets: usize) -> String {
    format!(
        "buffer set {set} of array '{label}' is out of range: the response has {buffer_sets} buffer set(s), \
         indices 0..{buffer_sets}; take sets below ArrayResponse::buffer_sets, or raise the requests' \
         pipeline_depth for more sets"
    )
}

/// `MemError::AlreadyTaken`.
pub(super) fn already_taken(label: &str) -> String {
    format!(
        "array '{label}' was already taken from this response; keep the handle from the first take \
         (clone it to share)"
    )
}

/// `MemError::InvalidChunkAxis`.
pub(super) fn invalid_chunk_axis(axis: usize, shape: &[usize]) -> String {
    format!(
        "chunk axis {axis} is out of range for an array of shape {shape:?}; give an axis below its rank {}",
        shape.len()
    )
}

/// `MemError::HostArraySize`.
pub(super) fn host_array_size(shape: &[usize], element_bytes: usize) -> String {
    format!(
        "an array of shape {shape:?} with {element_bytes}-byte elements does not fit the address space; \
         shrink the shape"
    )
}

/// `MemError::DuplicateBinding`.
pub(super) fn duplicate_binding(label: &str) -> String {
    format!(
        "'{label}' is bound twice in one chunk pipeline; bind it once, with inout(..) when it is copied \
         both ways"
    )
}

/// `MemError::BatchFailed`.
pub(super) fn batch_failed(
    chunk: usize,
    source: &super::MemError,
    completed: &std::ops::Range<usize>,
    completed_runs: &std::ops::Range<usize>,
) -> String {
    format!(
        "chunk {chunk} of the batch failed: {source}; the results of chunks {completed:?} (runs \
         {completed_runs:?}) are in the host arrays"
    )
}

/// `MemError::RunRange`.
pub(super) fn run_range(start: usize, end: usize, plan_runs: usize, batch_runs: usize) -> String {
    format!(
        "runs {start}..{end} cannot be streamed under a plan of {plan_runs} run(s) within a batch of \
         {batch_runs}: give a range of the plan's run count that ends within the batch"
    )
}

/// `MemError::SetStopped`.
pub(super) fn set_stopped(device: usize) -> String {
    format!(
        "device {device} stopped before its next chunk because another device of the set failed; \
         its computed chunks are in the host arrays"
    )
}

/// `MemError::DuplicateLabel`.
pub(super) fn duplicate_label(label: &str, instance: &str) -> String {
    format!(
        "the requests queued for {instance} name '{label}' twice; give each array its own label \
         (nothing was queued: the instance's queue is as it was)"
    )
}

/// `MemError::ChunkRange`.
pub(super) fn chunk_range(start: usize, end: usize, chunks: usize) -> String {
    format!(
        "chunks {start}..{end} are not a range of the plan's {chunks} chunk(s) (0..{chunks}): give a \
         range with start <= end <= {chunks}, or resume a failed run with ChunkPipeline::resume"
    )
}
