//! The chunk pipeline: a whole batch through the device, chunk by chunk,
//! with uploads, computation and downloads of different chunks overlapping.

use std::collections::{BTreeSet, HashMap};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use super::lane::{Direction, HostRef, Lane, Move};
use super::schedule::Schedule;
use super::stage::Stage;
use super::transfer::ChunkStreamer;
use super::{BatchError, HostArray};
use crate::ids::OwnerId;
use crate::streams::CurrentStream;
use crate::{Chunk, DeviceArray, Element, MemError, Work};

/// Runs a batch through the device chunk by chunk, overlapping the copies of
/// some chunks with the computation of another. Made by
/// [`ChunkStreamer::pipeline`] (one buffer set) or
/// [`ChunkStreamer::pipeline_sets`] (one per chunk in flight).
///
/// With `d` buffer sets, chunk `k` lives in set `k % d`. Uploads run on an
/// upload stream, the computation on the instance's stream (bound as the
/// current stream while `compute` runs, so that copies and kernel launches
/// inside it are ordered there), downloads on a download stream; events
/// order them:
///
/// - the upload of chunk `k` waits until the computation of chunk `k - d`
///   (which read that set) is done, and for an `inout` binding until its
///   download is done;
/// - the computation of chunk `k` waits for its upload, and for the
///   download of chunk `k - d` (whose results lay in that set);
/// - the download of chunk `k` waits for its computation.
///
/// The host queues the computation of chunk `k`, the upload of chunk
/// `k + 1` (gathering it into a staging buffer first when the host array is
/// pageable, spilled, or not contiguous), then the download of chunk `k - 1`
/// (scattering it from its staging buffer once it arrived). With two sets,
/// separate input and output arrays and equal times for an upload, a
/// computation and a download, the device runs all three at once and the
/// batch takes about `(n + 2)` steps for `n` chunks instead of `3n`; with one
/// set, the upload of `k + 1` and the download of `k` still overlap.
///
/// The owners of every bound array (and the streamer's instance) are busy
/// for the whole run, so none of those arrays can be evicted mid-batch; the
/// staging buffers a run needs are acquired before the first chunk, in one
/// order shared by every pipeline (by label), so two pipelines sharing a
/// pool that cannot grow wait for each other instead of deadlocking. Before
/// `run` returns, successfully or not, every copy it queued is done.
#[must_use = "a pipeline does nothing until run"]
pub struct ChunkPipeline<'p, S = ()> {
    streamer: &'p ChunkStreamer<'p>,
    sets: &'p [S],
    bindings: Vec<Box<dyn Bind<'p> + 'p>>,
}

/// A device array's identity: the address of its device memory, which every
/// handle to the array (and every set sharing one buffer) refers to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct ArrayId(usize);

/// A binding before the run checked it.
struct Binding<'p, T: Element> {
    host: HostRef<'p, T>,
    devices: Vec<&'p DeviceArray<T>>,
    axis: usize,
    direction: Direction,
}

trait Bind<'p> {
    fn label(&self) -> &str;
    fn owners(&self) -> Vec<OwnerId>;
    /// The bound device arrays' buffers, one per buffer set.
    fn arrays(&self) -> Result<Vec<ArrayId>, MemError>;
    fn prepare(
        self: Box<Self>,
        streamer: &ChunkStreamer<'_>,
        sets: usize,
    ) -> Result<Box<dyn Move + 'p>, MemError>;
}

impl<'p, T: Element> Bind<'p> for Binding<'p, T> {
    fn label(&self) -> &str {
        self.devices.first().map_or("", |device| device.label())
    }

    fn owners(&self) -> Vec<OwnerId> {
        self.devices.iter().map(|device| device.owner()).collect()
    }

    fn arrays(&self) -> Result<Vec<ArrayId>, MemError> {
        self.devices
            .iter()
            .map(|device| Ok(ArrayId(Arc::as_ptr(&device.device_memory()?).addr())))
            .collect()
    }

    fn prepare(
        self: Box<Self>,
        streamer: &ChunkStreamer<'_>,
        sets: usize,
    ) -> Result<Box<dyn Move + 'p>, MemError> {
        let label = self.label().to_owned();
        if self.devices.len() != sets || sets == 0 {
            return Err(MemError::PipelineSets {
                label,
                bound: self.devices.len(),
                sets,
            });
        }
        let mut layout = None;
        for device in &self.devices {
            layout = Some(streamer.layout(self.host.get().shape(), device, self.axis)?);
        }
        let layout = layout.ok_or_else(|| MemError::PipelineSets {
            label: label.clone(),
            bound: 0,
            sets,
        })?;
        let devices = self
            .devices
            .iter()
            .map(|device| device.device_memory())
            .collect::<Result<Vec<_>, _>>()?;
        let stage = || Stage::new(streamer.stager(&layout, &label));
        Ok(Box::new(Lane {
            input: self.direction.uploads().then(stage),
            output: self.direction.downloads().then(stage),
            label,
            host: self.host,
            devices,
            layout,
            direction: self.direction,
            backend: Arc::clone(streamer.manager.backend()),
        }))
    }
}

impl<'s> ChunkStreamer<'s> {
    /// A pipeline over every chunk of the plan with one buffer set: bind
    /// arrays to it, then [`run`](ChunkPipeline::run) it.
    pub fn pipeline(&'s self) -> ChunkPipeline<'s, ()> {
        self.pipeline_sets(&[()])
    }

    /// A pipeline with one buffer set per element of `sets` (for example
    /// [`Allocated::sets`](crate::Allocated::sets), allocated with a
    /// pipeline depth): chunk `k` uses `sets[k % sets.len()]`, and `compute`
    /// is handed that set.
    pub fn pipeline_sets<S>(&'s self, sets: &'s [S]) -> ChunkPipeline<'s, S> {
        ChunkPipeline {
            streamer: self,
            sets,
            bindings: Vec::new(),
        }
    }
}

impl<'p, S> ChunkPipeline<'p, S> {
    fn bind<T: Element>(
        mut self,
        host: HostRef<'p, T>,
        devices: Vec<&'p DeviceArray<T>>,
        axis: usize,
        direction: Direction,
    ) -> Self {
        self.bindings.push(Box::new(Binding {
            host,
            devices,
            axis,
            direction,
        }));
        self
    }

    fn select<T: Element>(
        &self,
        select: impl Fn(&'p S) -> &'p DeviceArray<T>,
    ) -> Vec<&'p DeviceArray<T>> {
        self.sets.iter().map(select).collect()
    }

    /// Copies each chunk of `host` (the whole batch, chunked along `axis`)
    /// into `device` before the chunk computes (a pipeline of one buffer set).
    pub fn input<T: Element>(
        self,
        host: &'p HostArray<T>,
        device: &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        self.bind(HostRef::Shared(host), vec![device], axis, Direction::In)
    }

    /// Copies `device` into each chunk of `host` after the chunk computes (a
    /// pipeline of one buffer set).
    pub fn output<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        device: &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        self.bind(HostRef::Exclusive(host), vec![device], axis, Direction::Out)
    }

    /// Both: copies each chunk in before it computes and back after (a
    /// pipeline of one buffer set).
    pub fn inout<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        device: &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        self.bind(
            HostRef::Exclusive(host),
            vec![device],
            axis,
            Direction::InOut,
        )
    }

    /// [`input`](Self::input) into the array `select` picks in every set.
    pub fn input_with<T: Element>(
        self,
        host: &'p HostArray<T>,
        select: impl Fn(&'p S) -> &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        let devices = self.select(select);
        self.bind(HostRef::Shared(host), devices, axis, Direction::In)
    }

    /// [`output`](Self::output) from the array `select` picks in every set.
    pub fn output_with<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        let devices = self.select(select);
        self.bind(HostRef::Exclusive(host), devices, axis, Direction::Out)
    }

    /// [`inout`](Self::inout) with the array `select` picks in every set.
    pub fn inout_with<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        let devices = self.select(select);
        self.bind(HostRef::Exclusive(host), devices, axis, Direction::InOut)
    }

    /// Runs every chunk through `compute`, which is handed the chunk and
    /// the buffer set holding it (see the type's docs for the order).
    ///
    /// Every binding is checked before anything moves: at least one buffer
    /// set, no device array bound twice (in two bindings, or in two sets of
    /// one), each array chunked along its axis. The first error stops the
    /// run; before it returns, every chunk computed before the failure is
    /// downloaded into the host arrays and every copy queued is done, and
    /// the [`BatchError`] names the chunk that failed and the chunks whose
    /// results are in place. A panic in `compute` leaves the same way: the
    /// finished chunks are downloaded and every copy is waited for before
    /// the panic resumes (when waiting fails, the page-locked memory a copy
    /// may still use is leaked, never freed under it).
    pub fn run<E: From<MemError>>(
        self,
        mut compute: impl FnMut(&Chunk, &S) -> Result<(), E>,
    ) -> Result<(), BatchError<E>> {
        let ChunkPipeline {
            streamer,
            sets,
            bindings,
        } = self;
        let _span = tracing::debug_span!(
            "pipeline",
            instance = %streamer.instance.id(),
            chunks = streamer.plan().chunks,
            chunk_length = streamer.plan().chunk_length,
            sets = sets.len(),
        )
        .entered();
        let started = start(streamer, sets.len(), bindings)
            .map_err(|error| BatchError::before_start(error.into()))?;
        let Started {
            mut lanes,
            mut schedule,
            works,
            current,
        } = started;
        let mut chunks = streamer.chunks().peekable();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            schedule.run(&mut lanes, &mut chunks, |chunk, set| {
                sets.get(set).map_or(Ok(()), |set| compute(chunk, set))
            })
        }));
        if !matches!(outcome, Ok(Ok(()))) {
            schedule.salvage(&mut lanes);
        }
        // Every queued copy is done before the lanes (and the host arrays
        // and staging buffers they borrow) are let go, even after an error.
        let settled = schedule.finish();
        if let Err(error) = &settled {
            tracing::error!(%error, "waiting for a pipeline's copies failed; its host memory is leaked");
            lanes.iter().for_each(|lane| lane.retire_host());
        }
        drop(lanes);
        drop(current);
        let completed = schedule.completed();
        let stopped = |error: E, chunk: Option<usize>| {
            BatchError::new(
                error,
                chunk,
                completed.chunks.clone(),
                completed.runs.clone(),
            )
        };
        match outcome {
            Err(payload) => panic::resume_unwind(payload),
            Ok(Err(error)) => return Err(stopped(error, schedule.stopped_at())),
            Ok(Ok(())) => {}
        }
        settled.map_err(|error| stopped(error.into(), None))?;
        works
            .into_iter()
            .try_for_each(|work| work.finish())
            .map_err(|error| stopped(error.into(), None))
    }
}

/// What a run holds once its bindings are checked and its staging is
/// reserved.
struct Started<'p> {
    lanes: Vec<Box<dyn Move + 'p>>,
    schedule: Schedule,
    works: Vec<Work>,
    current: CurrentStream,
}

/// Checks the bindings, prepares them, marks the owners busy and reserves
/// the staging buffers: everything before the first copy.
fn start<'p>(
    streamer: &ChunkStreamer<'_>,
    sets: usize,
    bindings: Vec<Box<dyn Bind<'p> + 'p>>,
) -> Result<Started<'p>, MemError> {
    check_bindings(&bindings, sets)?;
    // Every owner whose arrays are bound is busy for the whole run, so
    // none of them is evicted mid-batch.
    let owners: BTreeSet<OwnerId> = bindings
        .iter()
        .flat_map(|binding| binding.owners())
        .chain(std::iter::once(streamer.instance.owner()))
        .collect();
    let mut order: Vec<(String, usize)> = bindings
        .iter()
        .enumerate()
        .map(|(index, binding)| (binding.label().to_owned(), index))
        .collect();
    order.sort_unstable();
    let mut lanes = bindings
        .into_iter()
        .map(|binding| binding.prepare(streamer, sets))
        .collect::<Result<Vec<_>, MemError>>()?;
    let current = streamer.bind_stream()?;
    let works = owners
        .into_iter()
        .map(|owner| streamer.manager.begin_work_for(owner))
        .collect::<Result<Vec<_>, MemError>>()?;
    if let Some(first) = streamer.chunks().next() {
        // Staging buffers are taken in one global order (by label).
        for (_, index) in &order {
            if let Some(lane) = lanes.get_mut(*index) {
                lane.reserve(&first)?;
            }
        }
    }
    // The run's streams start after every earlier use of the arrays.
    for lane in &lanes {
        lane.order_on(current.owned())?;
    }
    let schedule = Schedule::new(streamer.manager.backend(), current.stream(), sets)?;
    Ok(Started {
        lanes,
        schedule,
        works,
        current,
    })
}

/// Refuses, before anything moves, a pipeline without buffer sets and a
/// device array bound twice: in two sets of one binding (two chunks in
/// flight would overwrite each other) or in two bindings. Arrays are told
/// apart by identity, not label: two instances' arrays of one label bind
/// together.
fn check_bindings(bindings: &[Box<dyn Bind<'_> + '_>], sets: usize) -> Result<(), MemError> {
    if sets == 0 {
        return Err(MemError::NoBufferSets);
    }
    let mut bound: HashMap<ArrayId, (usize, usize)> = HashMap::new();
    for (index, binding) in bindings.iter().enumerate() {
        for (set, array) in binding.arrays()?.into_iter().enumerate() {
            match bound.insert(array, (index, set)) {
                None => {}
                Some((other, first_set)) if other == index => {
                    return Err(MemError::SharedBuffer {
                        label: binding.label().to_owned(),
                        first_set,
                        second_set: set,
                    });
                }
                Some(_) => {
                    return Err(MemError::DuplicateBinding {
                        label: binding.label().to_owned(),
                    });
                }
            }
        }
    }
    Ok(())
}

impl<S> std::fmt::Debug for ChunkPipeline<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkPipeline")
            .field("streamer", self.streamer)
            .field("sets", &self.sets.len())
            .field(
                "bindings",
                &self.bindings.iter().map(|b| b.label()).collect::<Vec<_>>(),
            )
            .finish()
    }
}
