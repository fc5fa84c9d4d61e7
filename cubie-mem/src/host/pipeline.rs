//! The chunk pipeline: a whole batch through the device, chunk by chunk,
//! with uploads, computation and downloads of different chunks overlapping.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use super::HostArray;
use super::lane::{Direction, HostRef, Lane, Move};
use super::stage::{Event, Stage};
use super::transfer::ChunkStreamer;
use crate::Chunk;
use crate::backend::{Backend, BackendResult, StreamHandle};
use crate::ids::OwnerId;
use crate::streams::OwnedStream;
use crate::{DeviceArray, Element, MemError};

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
    /// the buffer set holding it (see the type's docs for the order). Every
    /// binding is checked before anything is copied; the first error stops
    /// the run and is returned once the copies already queued are done.
    pub fn run<E: From<MemError>>(
        self,
        mut compute: impl FnMut(&Chunk, &S) -> Result<(), E>,
    ) -> Result<(), E> {
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
        let mut labels = HashSet::new();
        for binding in &bindings {
            if !labels.insert(binding.label().to_owned()) {
                return Err(MemError::DuplicateBinding {
                    label: binding.label().to_owned(),
                }
                .into());
            }
        }
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
            .map(|binding| binding.prepare(streamer, sets.len()))
            .collect::<Result<Vec<_>, MemError>>()?;
        let current = streamer.bind_stream()?;
        let works = owners
            .into_iter()
            .map(|owner| streamer.manager.begin_work_for(owner))
            .collect::<Result<Vec<_>, MemError>>()?;
        let mut chunks = streamer.chunks().peekable();
        if let Some(first) = chunks.peek() {
            // Staging buffers are taken in one global order (by label).
            for (_, index) in &order {
                if let Some(lane) = lanes.get_mut(*index) {
                    lane.reserve(first)?;
                }
            }
        }
        // The run's streams start after every earlier use of the arrays.
        for lane in &lanes {
            lane.order_on(current.owned())?;
        }
        let mut schedule = Schedule::new(streamer.manager.backend(), current.stream(), sets.len())?;
        let result = schedule.run(&mut lanes, &mut chunks, |chunk, set| {
            sets.get(set).map_or(Ok(()), |set| compute(chunk, set))
        });
        // Every queued copy is done before the lanes (and the host arrays
        // and staging buffers they borrow) are let go, even after an error.
        let settled = schedule.finish();
        drop(lanes);
        result?;
        settled?;
        works.into_iter().try_for_each(|work| work.finish())?;
        Ok(())
    }
}

/// The events of one chunk.
#[derive(Default)]
struct ChunkEvents {
    uploaded: Option<Event>,
    computed: Option<Event>,
    downloaded: Option<Event>,
}

/// The streams and events of one run.
struct Schedule {
    backend: Arc<dyn Backend>,
    compute: StreamHandle,
    upload: Arc<OwnedStream>,
    download: Arc<OwnedStream>,
    sets: usize,
    /// Events of the chunks still referred to, from chunk `first` on.
    events: VecDeque<ChunkEvents>,
    first: usize,
    /// Chunks whose download is queued (all below this index).
    downloaded: usize,
}

impl Schedule {
    fn new(
        backend: &Arc<dyn Backend>,
        compute: StreamHandle,
        sets: usize,
    ) -> Result<Self, MemError> {
        let upload = OwnedStream::create(backend)?;
        let download = OwnedStream::create(backend)?;
        // The arrays were allocated (and maybe written) on the compute
        // stream: the copy streams start after that.
        let start = Event::record(backend, compute)?;
        start.order(upload.handle())?;
        start.order(download.handle())?;
        Ok(Schedule {
            backend: Arc::clone(backend),
            compute,
            upload,
            download,
            sets,
            events: VecDeque::new(),
            first: 0,
            downloaded: 0,
        })
    }

    fn events(&mut self, chunk: usize) -> &mut ChunkEvents {
        let index = chunk.saturating_sub(self.first);
        while self.events.len() <= index {
            self.events.push_back(ChunkEvents::default());
        }
        &mut self.events[index]
    }

    /// The event of `chunk` that `pick` selects, if recorded and kept.
    fn event(&self, chunk: usize, pick: fn(&ChunkEvents) -> &Option<Event>) -> Option<&Event> {
        let index = chunk.checked_sub(self.first)?;
        self.events
            .get(index)
            .and_then(|events| pick(events).as_ref())
    }

    /// Makes `stream` wait for the event `pick` selects of the chunk `d`
    /// chunks before `chunk`, which used the same buffer set.
    fn after_previous_use(
        &self,
        chunk: usize,
        stream: StreamHandle,
        pick: fn(&ChunkEvents) -> &Option<Event>,
    ) -> Result<(), MemError> {
        match chunk
            .checked_sub(self.sets)
            .and_then(|previous| self.event(previous, pick))
        {
            Some(event) => event.order(stream),
            None => Ok(()),
        }
    }

    fn upload(&mut self, lanes: &mut [Box<dyn Move + '_>], chunk: &Chunk) -> Result<(), MemError> {
        let stream = self.upload.handle();
        let set = chunk.index % self.sets;
        self.after_previous_use(chunk.index, stream, |e| &e.computed)?;
        for lane in lanes.iter_mut().filter(|lane| !lane.is_inout()) {
            lane.upload(chunk, set, stream)?;
        }
        if lanes.iter().any(|lane| lane.is_inout()) {
            self.after_previous_use(chunk.index, stream, |e| &e.downloaded)?;
            for lane in lanes.iter_mut().filter(|lane| lane.is_inout()) {
                lane.upload(chunk, set, stream)?;
            }
        }
        self.events(chunk.index).uploaded = Some(Event::record(&self.backend, stream)?);
        tracing::debug!(chunk = chunk.index, runs = ?chunk.runs, set, "queued a chunk's upload");
        Ok(())
    }

    fn download(
        &mut self,
        lanes: &mut [Box<dyn Move + '_>],
        chunk: &Chunk,
    ) -> Result<(), MemError> {
        let stream = self.download.handle();
        if let Some(computed) = self.event(chunk.index, |e| &e.computed) {
            computed.order(stream)?;
        }
        let set = chunk.index % self.sets;
        for lane in lanes.iter_mut() {
            lane.download(chunk, set, stream)?;
        }
        self.events(chunk.index).downloaded = Some(Event::record(&self.backend, stream)?);
        self.downloaded = chunk.index + 1;
        tracing::debug!(chunk = chunk.index, runs = ?chunk.runs, set, "queued a chunk's download");
        Ok(())
    }

    fn compute<E: From<MemError>>(
        &mut self,
        chunk: &Chunk,
        compute: &mut impl FnMut(&Chunk, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        if let Some(uploaded) = self.event(chunk.index, |e| &e.uploaded) {
            uploaded.order(self.compute)?;
        }
        self.after_previous_use(chunk.index, self.compute, |e| &e.downloaded)?;
        tracing::debug!(chunk = chunk.index, runs = ?chunk.runs, set = chunk.index % self.sets, "computing a chunk");
        compute(chunk, chunk.index % self.sets)?;
        self.events(chunk.index).computed = Some(Event::record(&self.backend, self.compute)?);
        // Later steps refer back at most `d` chunks.
        while self.first < chunk.index.saturating_sub(self.sets) && !self.events.is_empty() {
            self.events.pop_front();
            self.first += 1;
        }
        Ok(())
    }

    /// Queues the downloads of the computed chunks up to `last`, in order.
    fn download_through(
        &mut self,
        lanes: &mut [Box<dyn Move + '_>],
        computed: &mut VecDeque<Chunk>,
        last: usize,
    ) -> Result<(), MemError> {
        while computed.front().is_some_and(|chunk| chunk.index <= last) {
            if let Some(chunk) = computed.pop_front() {
                self.download(lanes, &chunk)?;
            }
        }
        Ok(())
    }

    /// Queues every chunk: the computation of chunk `k` (after the download
    /// of chunk `k - d`), the upload of chunk `k + 1`, then the downloads of
    /// the chunks before `k`.
    fn run<E: From<MemError>>(
        &mut self,
        lanes: &mut [Box<dyn Move + '_>],
        chunks: &mut std::iter::Peekable<crate::Chunks>,
        mut compute: impl FnMut(&Chunk, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(first) = chunks.peek().cloned() else {
            return Ok(());
        };
        let inout = lanes.iter().any(|lane| lane.is_inout());
        let mut computed = VecDeque::new();
        self.upload(lanes, &first)?;
        while let Some(chunk) = chunks.next() {
            // The results of the chunk that last used this set must be on
            // their way out before the computation overwrites them.
            if let Some(previous) = chunk.index.checked_sub(self.sets) {
                self.download_through(lanes, &mut computed, previous)?;
            }
            self.compute(&chunk, &mut compute)?;
            computed.push_back(chunk.clone());
            if let Some(next) = chunks.peek().cloned() {
                // An inout binding's upload overwrites results: those of
                // the chunk that last used the set go out first.
                if inout && let Some(previous) = next.index.checked_sub(self.sets) {
                    self.download_through(lanes, &mut computed, previous)?;
                }
                self.upload(lanes, &next)?;
            }
            if let Some(before) = chunk.index.checked_sub(1) {
                self.download_through(lanes, &mut computed, before)?;
            }
        }
        self.download_through(lanes, &mut computed, usize::MAX)?;
        Ok(())
    }

    /// Orders the instance's stream after every copy and waits for all of
    /// it: later frees and copies on the instance's stream come after the
    /// run, and no copy still uses host memory.
    fn finish(&mut self) -> Result<(), MemError> {
        let mut result = Ok(());
        for stream in [self.upload.handle(), self.download.handle()] {
            let ordered =
                Event::record(&self.backend, stream).and_then(|done| done.order(self.compute));
            if result.is_ok() {
                result = ordered;
            }
        }
        for stream in [self.compute, self.upload.handle(), self.download.handle()] {
            let waited = self.backend.synchronize(stream).on(&*self.backend);
            if result.is_ok() {
                result = waited;
            }
        }
        self.events.clear();
        result
    }
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
