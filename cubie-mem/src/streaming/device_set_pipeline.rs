//! One batch through every device of a set at once, each device a chunk
//! pipeline of its own on a thread of its own; see
//! [several devices](crate::guide::devices).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use super::binding::{Binding, Direction};
use super::binding_host::HostRuns;
use super::{BatchError, ChunkStreamer, ChunkTarget};
use crate::devices::{DevicePortion, DeviceSetBuffers};
use crate::host::HostArray;
use crate::plan::split::Split;
use crate::{Chunk, Element, HostBuffers, MemError, MemoryManager};

/// A batch of a [`DeviceSet`](crate::DeviceSet) streamed through every
/// device taking part: made by [`DeviceSetBuffers::pipeline`]; bind host arrays
/// of the whole batch with selectors that pick each device's array out of
/// its buffer sets, then [`run`](Self::run).
///
/// Each device streams its range of runs through a
/// [`ChunkPipeline`](crate::ChunkPipeline) of its own on its own thread,
/// with that pipeline's overlap and guarantees. Inputs are shared; outputs
/// are written by run range, each device into its own runs only, so one
/// host array (pinned, pageable or spilled) serves every device.
#[must_use = "a pipeline does nothing until run"]
pub struct DeviceSetPipeline<'p, B> {
    buffers: &'p DeviceSetBuffers<'p, B>,
    bindings: Vec<Box<SetBind<'p, B>>>,
    /// The runs each device saved in a failed run being resumed, by device.
    saved: Option<Vec<Range<usize>>>,
}

/// One binding of a set pipeline: for a device's streamer, buffer sets and
/// runs, that device's binding.
type SetBind<'p, B> =
    dyn Fn(&ChunkStreamer<'_>, &'p [B], Range<usize>) -> Result<Binding<'p>, MemError> + Sync + 'p;

impl<'p, B: Sync> DeviceSetBuffers<'p, B> {
    /// A pipeline over every device's portion of the batch.
    pub fn pipeline(&'p self) -> DeviceSetPipeline<'p, B> {
        DeviceSetPipeline {
            buffers: self,
            bindings: Vec::new(),
            saved: None,
        }
    }
}

impl<B> DeviceSetPipeline<'_, B> {
    /// Runs only what a failed run of these buffers left undone: each
    /// device resumes its portion from the first chunk whose results are not
    /// in the host arrays ([`BatchError::saved_runs`]), so every run is
    /// computed once; a device that finished its portion runs nothing. Bind
    /// the same host arrays as the failed run. A device whose saved runs
    /// do not start its portion (an error of other buffers) runs its whole
    /// portion.
    pub fn resume(mut self, failure: &BatchError) -> Self {
        self.saved = Some(failure.saved_runs().to_vec());
        self
    }
}

/// The first chunk of `plan` a device whose portion starts at `first_run`
/// runs, when it saved the runs `saved` before: the chunk after the last
/// saved, 0 when `saved` is not a saved prefix of the portion.
fn resume_chunk(plan: &crate::ChunkPlan, first_run: usize, saved: &Range<usize>) -> usize {
    if saved.start != first_run || saved.end < saved.start {
        return 0;
    }
    let done = saved.end - saved.start;
    if done >= plan.total_runs {
        return plan.chunks;
    }
    match plan.chunk_length {
        0 => 0,
        length if done.is_multiple_of(length) => done / length,
        _ => 0,
    }
}

impl<'p, B: Sync + 'p> DeviceSetPipeline<'p, B> {
    fn with<T: Element, A: Into<ChunkTarget<'p, T>>>(
        mut self,
        (array, host): (&'p HostArray<T>, HostRuns<'p>),
        select: impl Fn(&'p B) -> A + Sync + 'p,
        direction: Direction,
    ) -> Self {
        self.bindings.push(Box::new(move |streamer, sets, runs| {
            let targets = sets.iter().map(|set| select(set).into()).collect();
            // SAFETY: the set gives each device one run range, disjoint
            // from the others', and makes one access per device and
            // binding, all on the array's one run axis; `host` reaches none.
            let host = unsafe { host.narrow(runs) };
            Binding::new(streamer, sets.len(), (array, host), targets, direction)
        }));
        self
    }

    /// Copies each device's chunks of `host` (the whole batch) into the
    /// array `select` picks in each of its buffer sets, as
    /// [`ChunkPipeline::input_with`](crate::ChunkPipeline::input_with).
    pub fn input<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p HostArray<T>,
        select: impl Fn(&'p B) -> A + Sync + 'p,
    ) -> Self {
        self.with(HostRuns::input(host), select, Direction::In)
    }

    /// Copies the array `select` picks into each device's chunks of `host`
    /// after they compute; each device writes its own runs only.
    pub fn output<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p B) -> A + Sync + 'p,
    ) -> Self {
        self.with(HostRuns::output(host), select, Direction::Out)
    }

    /// Both: in before each chunk computes, back after.
    pub fn inout<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p B) -> A + Sync + 'p,
    ) -> Self {
        self.with(HostRuns::output(host), select, Direction::InOut)
    }

    /// Binds every array of the host mirror `host` in its direction, to its
    /// field of the `B2` that `select` picks in each device's buffer sets, as
    /// [`ChunkPipeline::bind`](crate::ChunkPipeline::bind).
    pub fn bind<B2: 'p, H: HostBuffers<B2>>(
        self,
        host: &'p mut H,
        select: impl Fn(&'p B) -> &'p B2 + Copy + Sync + 'p,
    ) -> Self {
        host.bind_host(self, select)
    }

    /// Runs every device's portion at once, each on a thread of its own:
    /// `compute(device, chunk, set)` computes one chunk (its runs are the
    /// batch's) in one of that device's buffer sets, and is called from
    /// several threads at once.
    ///
    /// The first failure stops the others: each finishes the chunk it is
    /// computing, saves every chunk it computed, and stops. The
    /// [`BatchError`] names the device and chunk that failed and the runs
    /// each device saved ([`device`](BatchError::device),
    /// [`saved_runs`](BatchError::saved_runs)). On success every run of the
    /// batch is written, and the result is the runs each device streamed, by
    /// device (empty for a device that took no part).
    pub fn run(
        self,
        compute: impl Fn(usize, &Chunk, &B) -> Result<(), MemError> + Sync,
    ) -> Result<Vec<Range<usize>>, BatchError> {
        let stop = AtomicBool::new(false);
        let total = self.buffers.total_runs();
        let portions = self.buffers.portions();
        let outcomes: Vec<DeviceOutcome> = std::thread::scope(|scope| {
            let handles: Vec<_> = portions
                .iter()
                .map(|portion| {
                    let (stop, compute, bindings) = (&stop, &compute, &self.bindings);
                    let manager = self.buffers.manager(portion);
                    let first = self.saved.as_ref().map_or(0, |saved| {
                        saved.get(portion.device()).map_or(0, |runs| {
                            resume_chunk(portion.buffers().plan(), portion.runs().start, runs)
                        })
                    });
                    scope.spawn(move || {
                        let _panicking = StopOnPanic(stop);
                        let outcome =
                            run_portion(manager, portion, total, first, bindings, stop, compute);
                        if outcome.is_err() {
                            stop.store(true, Ordering::Release);
                        }
                        DeviceOutcome {
                            device: portion.device(),
                            runs: portion.runs(),
                            first_run: first_run_of(portion, first),
                            result: outcome,
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        set_outcome(outcomes, self.buffers.split())
    }
}

/// Stops the other devices when a device's thread panics (the panic then
/// resumes on the caller's thread once every device stopped).
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// What one device's portion of a run did.
struct DeviceOutcome {
    device: usize,
    runs: Range<usize>,
    /// The first run this run streamed (past the portion's start when
    /// resumed): the runs before it were saved before.
    first_run: usize,
    result: Result<(), BatchError>,
}

/// The first run of chunk `first_chunk` of `portion` (its end past the last).
fn first_run_of<B>(portion: &DevicePortion<B>, first_chunk: usize) -> usize {
    let runs = portion.runs();
    let offset = first_chunk.saturating_mul(portion.buffers().plan().chunk_length);
    runs.start.saturating_add(offset).min(runs.end)
}

/// Streams one device's portion; stops before a chunk once `stop` is set.
fn run_portion<'p, B: Sync>(
    manager: &'p MemoryManager,
    portion: &'p DevicePortion<B>,
    total: usize,
    first_chunk: usize,
    bindings: &[Box<SetBind<'p, B>>],
    stop: &AtomicBool,
    compute: &(impl Fn(usize, &Chunk, &B) -> Result<(), MemError> + Sync),
) -> Result<(), BatchError> {
    let plan = portion.buffers().plan();
    if portion.runs().is_empty() || first_chunk >= plan.chunks {
        return Ok(());
    }
    let streamer = manager
        .chunk_streamer(portion.instance(), portion.buffers().plan())
        .and_then(|streamer| streamer.for_runs(portion.runs(), total))
        .map_err(|error| {
            let run = first_run_of(portion, first_chunk);
            BatchError::new(error, None, first_chunk..first_chunk, run..run)
        })?;
    let sets = portion.buffers().sets();
    let mut pipeline = streamer
        .pipeline_sets(sets)
        .chunk_range(first_chunk..plan.chunks);
    for binding in bindings {
        pipeline = pipeline.push(binding(&streamer, sets, portion.runs()));
    }
    let device = portion.device();
    pipeline.run(|chunk, set| {
        if stop.load(Ordering::Acquire) {
            return Err(MemError::SetStopped { device });
        }
        // A panic stops the others at once, before this pipeline saves
        // its chunks and resumes it.
        let _panicking = StopOnPanic(stop);
        compute(device, chunk, set)
    })
}

/// The first device that failed on its own (the others stopped
/// because of it), with its error; or the runs of a batch that
/// finished.
/// `split` gives every device of the set its place, so that a device
/// that took no part has its (empty) range.
fn set_outcome(
    outcomes: Vec<DeviceOutcome>,
    split: &Split,
) -> Result<Vec<Range<usize>>, BatchError> {
    let mut saved: Vec<Range<usize>> = split
        .ranges()
        .iter()
        .map(|runs| runs.start..runs.start)
        .collect();
    let mut failed: Option<(usize, BatchError)> = None;
    for outcome in outcomes {
        let Some(slot) = saved.get_mut(outcome.device) else {
            continue;
        };
        match outcome.result {
            Ok(()) => *slot = outcome.runs,
            Err(error) => {
                // A resumed run saved its runs after those saved before.
                let done = error.completed_runs();
                *slot = if done.start == outcome.first_run {
                    outcome.runs.start..done.end
                } else {
                    done
                };
                let stopped = matches!(error.error(), MemError::SetStopped { .. });
                let replace = match &failed {
                    None => true,
                    Some((_, first)) => {
                        matches!(first.error(), MemError::SetStopped { .. }) && !stopped
                    }
                };
                if replace {
                    failed = Some((outcome.device, error));
                }
            }
        }
    }
    match failed {
        None => Ok(saved),
        Some((device, error)) => Err(error.on_device(device, saved)),
    }
}

impl<B> std::fmt::Debug for DeviceSetPipeline<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSetPipeline")
            .field("devices", &self.buffers.portions().len())
            .field("bindings", &self.bindings.len())
            .finish()
    }
}
