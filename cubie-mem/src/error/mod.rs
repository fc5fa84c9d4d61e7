//! The one error type of the crate. Every message says what was asked, what
//! was available, and what the caller can change.

use crate::{Bytes, DType};

mod constructors;
mod hints;
mod kernel_argument;
mod messages;
mod unchunkable;

pub use hints::ArraySide;
pub use kernel_argument::KernelArgument;
pub use unchunkable::{UnchunkableArray, UnchunkableReason};

/// Every failure of cubie-mem.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// A VRAM proportion outside `[0, 1]` (or not a number).
    #[error("proportion {} is outside [0, 1]: give a fraction of total device memory", crate::pools::Proportion(*.proportion))]
    InvalidProportion {
        /// The proportion given.
        proportion: f64,
    },

    /// Adding to the manual pool would take more than all of device memory.
    #[error("{}", messages::manual_pool_overflow(*.manual_sum, *.requested))]
    ManualPoolOverflow {
        /// The proportion asked for.
        requested: f64,
        /// The manual pool's sum before the request.
        manual_sum: f64,
    },

    /// Adding to the manual pool would starve the non-empty auto pool.
    #[error("{}", messages::auto_pool_starved(*.manual_sum, *.requested, *.remaining, *.auto_members, *.minimum))]
    AutoPoolStarved {
        /// The proportion asked for.
        requested: f64,
        /// The manual pool's sum before the request.
        manual_sum: f64,
        /// What would remain for the auto pool.
        remaining: f64,
        /// The auto pool's size.
        auto_members: usize,
        /// The minimum auto pool fraction.
        minimum: f64,
    },

    /// The auto pool has no room for another member.
    #[error("{}", messages::auto_pool_full(*.manual_sum, *.remaining, *.minimum))]
    AutoPoolFull {
        /// The manual pool's sum.
        manual_sum: f64,
        /// What is left for the auto pool.
        remaining: f64,
        /// The minimum auto pool fraction.
        minimum: f64,
    },

    /// The instance handle belongs to another manager or was deregistered.
    #[error("{instance} is not registered with this manager; use the manager that registered it")]
    UnknownInstance {
        /// The instance, with its name when known.
        instance: String,
    },

    /// The owner handle belongs to another manager, or is gone.
    #[error("{}", messages::unknown_owner(.owner))]
    UnknownOwner {
        /// The owner.
        owner: String,
    },

    /// An instance without an invalidate hook tried to queue requests.
    #[error("{}", messages::no_invalidate_hook(.instance))]
    NoInvalidateHook {
        /// The instance, with its name when set.
        instance: String,
    },

    /// One `queue_request` call naming a label twice; nothing was queued.
    #[error("{}", messages::duplicate_label(.label, .instance))]
    DuplicateLabel {
        /// The label given twice.
        label: String,
        /// The instance that queued, with its name when set.
        instance: String,
    },

    /// A request that cannot be served as written.
    #[error("request '{label}': {reason}")]
    InvalidRequest {
        /// The request's label.
        label: String,
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// A chunkable request's chunk axis does not have the batch's run count.
    #[error("{}", messages::run_count_mismatch(.label, *.axis, *.axis_length, *.total_runs))]
    RunCountMismatch {
        /// The request's label.
        label: String,
        /// The chunk axis.
        axis: usize,
        /// The axis length found.
        axis_length: usize,
        /// The batch's run count (the largest `total_runs`).
        total_runs: usize,
    },

    /// A request of runs that a chunk axis beyond its shape leaves whole beside chunked arrays.
    #[error("{}", messages::runs_left_whole(.0))]
    RunsLeftWhole(UnchunkableArray),

    /// The effective free memory is below the allocation granule.
    #[error("{}{}", messages::below_granule(*.free, *.granule), hints::fit_hint(.report))]
    BelowGranule {
        /// Effective free memory.
        free: Bytes,
        /// The configured granule.
        granule: Bytes,
        /// Who holds the memory, and the fix ([`MemError::fit_report`]); `None` from the planner.
        report: Option<Box<crate::report::FitReport>>,
    },

    /// Everything requested is unchunkable and does not fit.
    #[error("{}{}{}", messages::all_unchunkable(*.requested, *.available, *.withheld), unchunkable::unchunkable_hint(.arrays), hints::fit_hint(.report))]
    AllUnchunkable {
        /// Bytes requested.
        requested: Bytes,
        /// Bytes the plan may allocate.
        available: Bytes,
        /// Bytes withheld for fragmentation and the granule.
        withheld: Bytes,
        /// The arrays, largest first, with why each is unchunkable (none from `plan_chunks`)
        arrays: Vec<UnchunkableArray>,
        /// Who holds the memory, and the fix ([`MemError::fit_report`]); `None` from the planner.
        report: Option<Box<crate::report::FitReport>>,
    },

    /// The unchunkable requests alone leave no room for any run.
    #[error("{}{}{}", messages::unchunkable_too_large(*.unchunkable, *.available, *.withheld), unchunkable::unchunkable_hint(.arrays), hints::fit_hint(.report))]
    UnchunkableTooLarge {
        /// Bytes of the unchunkable requests.
        unchunkable: Bytes,
        /// Bytes the plan may allocate.
        available: Bytes,
        /// Bytes withheld for fragmentation and the granule.
        withheld: Bytes,
        /// The unchunkable arrays, largest first, with why (none from `plan_chunks`)
        arrays: Vec<UnchunkableArray>,
        /// Who holds the memory, and the fix ([`MemError::fit_report`]); `None` from the planner.
        report: Option<Box<crate::report::FitReport>>,
    },

    /// Not even one run (in each buffer set) fits beside the unchunkable arrays.
    #[error("{}{}", messages::single_run_too_large(*.per_run, *.depth, *.room, *.unchunkable, *.withheld), hints::fit_hint(.report))]
    SingleRunTooLarge {
        /// Chunkable bytes per run in one buffer set (rounded up).
        per_run: Bytes,
        /// The pipeline depth: buffer sets that each need room for a run.
        depth: usize,
        /// Bytes left for chunkable arrays.
        room: Bytes,
        /// Bytes of the unchunkable arrays.
        unchunkable: Bytes,
        /// Bytes withheld for fragmentation and the granule.
        withheld: Bytes,
        /// Who holds the memory, and the fix ([`MemError::fit_report`]); `None` from the planner.
        report: Option<Box<crate::report::FitReport>>,
    },

    /// The device could not provide the memory.
    #[error("{}{}", messages::out_of_memory(.label, *.requested, *.free, *.idle_held, *.limit), hints::fit_hint(.report))]
    OutOfMemory {
        /// The label being allocated.
        label: String,
        /// Bytes requested for it.
        requested: Bytes,
        /// Device free memory at the time.
        free: Bytes,
        /// Device bytes held by idle owners that could be evicted for it.
        idle_held: Bytes,
        /// The limit that applied (free memory, or the group's caps in active mode).
        limit: Bytes,
        /// Who holds the memory, and the fix ([`MemError::fit_report`]); `None` from the planner.
        report: Option<Box<crate::report::FitReport>>,
    },

    /// A handle whose memory was evicted, freed or replaced.
    #[error("array '{label}' is no longer valid: its memory was {reason}; request it again")]
    Released {
        /// The array's label.
        label: String,
        /// Why it went.
        reason: crate::array::ReleaseReason,
    },

    /// Active-mode caps, not the device, keep the batch from fitting.
    #[error("{}{}", messages::cap_limited(.group, *.proportion, *.caps, *.held, *.allowed, *.needed, *.free), hints::fit_hint(.report))]
    CapLimited {
        /// The stream group.
        group: String,
        /// Sum of the group members' proportions.
        proportion: f64,
        /// Sum of the group members' caps.
        caps: Bytes,
        /// Device bytes the members hold (less what the batch replaces).
        held: Bytes,
        /// What the plan may allocate under the caps.
        allowed: Bytes,
        /// The least the batch needs: unchunkable bytes and one run per set.
        needed: Bytes,
        /// Free device memory, with what the requesters hold.
        free: Bytes,
        /// Who holds the memory, and the fix ([`MemError::fit_report`]); `None` from the planner.
        report: Option<Box<crate::report::FitReport>>,
    },

    /// `take` of a label that was already taken from this response.
    #[error("{}", messages::already_taken(.label))]
    AlreadyTaken {
        /// The label asked for.
        label: String,
    },

    /// `take` with a label the response does not hold.
    #[error("no array '{label}' in this response; it holds: {available}")]
    UnknownLabel {
        /// The label asked for.
        label: String,
        /// The labels present, comma separated.
        available: String,
    },

    /// `take` with the wrong element type or memory kind.
    #[error("array '{label}' holds {found}, not {requested}")]
    WrongArrayType {
        /// The array's label.
        label: String,
        /// What the caller asked for (e.g. `DeviceArray<f32>`).
        requested: String,
        /// What the array is.
        found: String,
    },

    /// A host slice of the wrong length for a copy.
    #[error("copy of '{label}': the host side has {found} elements, the array has {expected}")]
    LengthMismatch {
        /// The array's label.
        label: String,
        /// The array's element count.
        expected: usize,
        /// The host slice's element count.
        found: usize,
    },

    /// A byte range outside an allocation.
    #[error("copy out of bounds: bytes {offset}..{end} of an allocation of {size} bytes")]
    OutOfBounds {
        /// Start of the range.
        offset: u64,
        /// End of the range.
        end: u64,
        /// The allocation's size.
        size: u64,
    },

    /// Element type mismatch in a typed operation.
    #[error("element type mismatch: expected {expected}, found {found}")]
    DTypeMismatch {
        /// The expected type.
        expected: DType,
        /// The type found.
        found: DType,
    },

    /// A failure reported by the backend (driver call, unknown handle, simulated fault).
    #[error("{backend} backend: {error}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What the backend reported.
        error: crate::backend::BackendError,
    },

    /// Work on two streams touched an array with no event ordering them (timing-dependent on a GPU).
    #[error("array '{label}': {backend} backend: {error}")]
    StreamHazard {
        /// The array's label.
        label: String,
        /// The backend's name.
        backend: &'static str,
        /// The hazard, naming both streams.
        error: crate::backend::BackendError,
    },

    /// A host kernel was launched or used wrongly.
    #[error("kernel '{kernel}': {reason}")]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// What was wrong, and the fix.
        reason: String,
    },

    /// A host kernel's argument it cannot use as declared ([`KernelArgument`]).
    #[error("{0}")]
    KernelArgument(KernelArgument),

    /// A pipeline binding does not have one device array per buffer set.
    #[error("{}", messages::pipeline_sets(.label, *.bound, *.sets))]
    PipelineSets {
        /// The binding's label.
        label: String,
        /// Device arrays bound.
        bound: usize,
        /// Buffer sets of the pipeline.
        sets: usize,
    },

    /// No GPU device could be used.
    #[error("no CUDA device available: {cause}")]
    NoDevice {
        /// The driver's reason.
        cause: String,
    },

    /// Buffers declared for one stream group allocated on an instance of another.
    #[error("{}", messages::stream_group_mismatch(.instance, .group, .declared))]
    StreamGroupMismatch {
        /// The instance, with its name when set.
        instance: String,
        /// The instance's group.
        group: String,
        /// The group the buffers declare.
        declared: &'static str,
    },

    /// A malformed configuration value (environment variable or setting).
    #[error("invalid configuration {name}={value:?}: {reason}")]
    Config {
        /// The variable or setting.
        name: String,
        /// The value found.
        value: String,
        /// What is wrong and what is accepted.
        reason: String,
    },

    /// A host-side I/O failure (spill files, staging).
    #[error("{operation} '{path}': {message}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The file or directory.
        path: String,
        /// The system's message.
        message: String,
    },

    /// A chunk index past the plan's last chunk.
    #[error("{}", messages::chunk_out_of_range(*.chunk, *.chunks))]
    ChunkOutOfRange {
        /// The chunk index given.
        chunk: usize,
        /// The plan's number of chunks.
        chunks: usize,
    },

    /// A chunk axis outside an array's rank.
    #[error("{}", messages::invalid_chunk_axis(*.axis, .shape))]
    InvalidChunkAxis {
        /// The axis given.
        axis: usize,
        /// The array's shape.
        shape: Vec<usize>,
    },

    /// A host or device array whose shape does not fit the chunk plan.
    #[error("{side} array {} has shape {found:?}: {}", side.naming(label), hints::shape_problem(*side, found, expected, *axis, *total_runs, *chunk_length, *runs_axis))]
    ChunkShapeMismatch {
        /// The device array's label.
        label: String,
        /// Which array is wrong.
        side: ArraySide,
        /// The shape found.
        found: Vec<usize>,
        /// The shape the plan needs (one chunk, for a device array).
        expected: Vec<usize>,
        /// The axis bound: the one the runs are taken to lie on.
        axis: usize,
        /// The plan's run count.
        total_runs: usize,
        /// The plan's chunk length.
        chunk_length: usize,
        /// Another axis of the array that matches the plan: likely the one meant.
        runs_axis: Option<usize>,
    },

    /// A run range that does not fit a chunk layout.
    #[error("{}", messages::invalid_chunk_runs(*.start, *.end, *.axis_length, *.chunk_length))]
    InvalidChunkRuns {
        /// First run.
        start: usize,
        /// One past the last run.
        end: usize,
        /// Length of the chunk axis of the whole batch.
        axis_length: usize,
        /// Runs one chunk holds.
        chunk_length: usize,
    },

    /// A staging window outside the chunk it stages.
    #[error("{}", messages::staging_window(*.start, *.len, *.chunk_elements))]
    StagingWindow {
        /// First element of the window.
        start: usize,
        /// Elements in the window.
        len: usize,
        /// Elements of one chunk.
        chunk_elements: usize,
    },

    /// A host array or staging buffer whose size overflows the address space.
    #[error("{}", messages::host_array_size(.shape, *.element_bytes))]
    HostArraySize {
        /// The shape asked for.
        shape: Vec<usize>,
        /// Bytes per element.
        element_bytes: usize,
    },

    /// The same device array bound twice in one chunk pipeline.
    #[error("{}", messages::duplicate_binding(.label))]
    DuplicateBinding {
        /// The device array's label.
        label: String,
    },

    /// One device array bound in two buffer sets of a chunk pipeline.
    #[error("{}", messages::shared_buffer(.label, *.first_set, *.second_set))]
    SharedBuffer {
        /// The device array's label.
        label: String,
        /// The first set it is bound in.
        first_set: usize,
        /// Another set it is bound in.
        second_set: usize,
    },

    /// A chunk pipeline given no buffer set.
    #[error("{}", messages::NO_BUFFER_SETS)]
    NoBufferSets,

    /// A pipeline binding without an axis, of an array that holds no runs.
    #[error("{}", messages::no_run_axis(.label))]
    NoRunAxis {
        /// The array's label.
        label: String,
    },

    /// A pipeline binding whose buffer sets chunk along different axes.
    #[error("{}", messages::binding_axes(.label, *.first, *.set, *.axis))]
    BindingAxes {
        /// The binding's label.
        label: String,
        /// The axis of set 0.
        first: usize,
        /// The set that differs.
        set: usize,
        /// Its axis.
        axis: usize,
    },

    /// A chunk of a batch failed; the results of the chunks before it are in the host arrays.
    #[error("{}", messages::batch_failed(*.chunk, .source, .completed, .completed_runs))]
    BatchFailed {
        /// The chunk that failed.
        chunk: usize,
        /// The chunks whose results are in the host arrays.
        completed: std::ops::Range<usize>,
        /// Their runs.
        completed_runs: std::ops::Range<usize>,
        /// Why the chunk failed.
        source: Box<MemError>,
    },

    /// A pipeline's chunk range that does not lie within its plan's chunks.
    #[error("{}", messages::chunk_range(*.start, *.end, *.chunks))]
    ChunkRange {
        /// The range's first chunk.
        start: usize,
        /// One past its last chunk.
        end: usize,
        /// The plan's number of chunks.
        chunks: usize,
    },

    /// A streamer's run range that does not fit its plan or the batch.
    #[error("{}", messages::run_range(*.start, *.end, *.plan_runs, *.batch_runs))]
    RunRange {
        /// The range's first run.
        start: usize,
        /// Its end.
        end: usize,
        /// The plan's run count.
        plan_runs: usize,
        /// The host arrays' run count.
        batch_runs: usize,
    },

    /// A device of a set stopped because another device failed.
    #[error("{}", messages::set_stopped(*.device))]
    SetStopped {
        /// The device that stopped.
        device: usize,
    },

    /// A device of a set failed mid-batch; the others stopped.
    #[error("device {device} of the set failed: {source}; the runs saved by device are {saved:?}")]
    DeviceFailed {
        /// The device that failed.
        device: usize,
        /// Its failure (with the chunk it stopped at).
        source: Box<MemError>,
        /// The runs whose results are in the host arrays, by device.
        saved: Vec<std::ops::Range<usize>>,
    },

    /// A chunk plan whose figures are inconsistent (made by hand or altered).
    #[error("{}", messages::invalid_plan(*.total_runs, *.chunks, *.chunk_length, .reason))]
    InvalidPlan {
        /// The plan's run count.
        total_runs: usize,
        /// The plan's number of chunks.
        chunks: usize,
        /// The plan's runs per chunk.
        chunk_length: usize,
        /// What is inconsistent.
        reason: &'static str,
    },

    /// Batch sizes with no runs, given to the planner by hand.
    #[error("{}", messages::zero_runs(*.chunkable, *.unchunkable))]
    ZeroRuns {
        /// Bytes of the chunkable requests.
        chunkable: Bytes,
        /// Bytes of the unchunkable requests.
        unchunkable: Bytes,
    },

    /// The host could not provide memory for a host-side allocation.
    #[error("{}", messages::host_out_of_memory(*.requested, .what))]
    HostOutOfMemory {
        /// Bytes asked for.
        requested: Bytes,
        /// Which host allocation failed (e.g. "a pageable host array").
        what: &'static str,
    },

    /// A buffer set past the response's last set.
    #[error("{}", messages::set_out_of_range(.label, *.set, *.buffer_sets))]
    SetOutOfRange {
        /// The array's label.
        label: String,
        /// The set asked for.
        set: usize,
        /// The response's number of buffer sets.
        buffer_sets: usize,
    },

    /// Batch sizes with a pipeline depth of 0, given to the planner by hand.
    #[error("{}", messages::zero_depth(*.chunkable, *.unchunkable))]
    ZeroDepth {
        /// Bytes of the chunkable requests.
        chunkable: Bytes,
        /// Bytes of the unchunkable requests.
        unchunkable: Bytes,
    },

    /// A launcher's variables, or figures given to `Shard::new`, that place no job.
    #[error("{}", messages::shard(.variables, .reason))]
    Shard {
        /// The variables read, with their values (`Shard::new`'s arguments, by name).
        variables: Vec<(&'static str, String)>,
        /// Which failure it is, with its figures; its message says the fix.
        reason: crate::ShardError,
    },

    /// No device of a set can take part in a batch split across them.
    #[error("{}", messages::no_device_takes_part(.reasons))]
    NoDeviceTakesPart {
        /// Each device's reason, in device order (none for an empty set).
        reasons: Vec<crate::plan::split::Skip>,
    },
}
