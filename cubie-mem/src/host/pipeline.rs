//! The chunk pipeline: a whole batch through the device, chunk by chunk,
//! with the next chunk's input staged while the current chunk computes.

use std::collections::{BTreeSet, HashSet};

use super::HostArray;
use super::layout::ChunkLayout;
use super::transfer::{
    ChunkStreamer, Stager, download_through, needs_staging, stage_first_window, upload,
};
use crate::ids::OwnerId;
use crate::plan::Chunk;
use crate::{DeviceArray, Element, MemError};

/// Runs a batch chunk by chunk: for each chunk it copies the inputs to the
/// device, calls the caller's computation, stages the next chunk's inputs,
/// then copies the outputs back. Made by [`ChunkStreamer::pipeline`].
///
/// The order inside each chunk `k` is
/// 1. upload the inputs of `k` (their first staging window was gathered
///    before);
/// 2. `compute(k)`: the caller queues its work on the instance's stream
///    (bound as the current stream for the whole run);
/// 3. gather the first staging window of every input of `k + 1`: on a device
///    that computes asynchronously this host work overlaps the computation;
/// 4. download the outputs of `k` into the host arrays (this waits for the
///    computation).
///
/// Uploads complete on the host side before the backend returns, so one
/// staging buffer per input suffices: chunk `k + 1` is staged on the host
/// while chunk `k` lives on the device. An `inout` array stages its
/// download in a second buffer when the pool grants one without waiting,
/// else in its input buffer (and then gathers `k + 1` again at upload).
///
/// The owners of every bound array (and the streamer's instance) are marked
/// busy for the whole run, so none of those arrays can be evicted in the
/// middle of a batch.
///
/// The staging buffers a run needs are acquired before the first chunk, in
/// one order shared by every pipeline (by label), and kept for the run: two
/// pipelines sharing a pool that cannot grow, whose inputs and outputs cross,
/// then wait for each other instead of deadlocking.
#[must_use = "a pipeline does nothing until run"]
pub struct ChunkPipeline<'p> {
    streamer: &'p ChunkStreamer<'p>,
    bindings: Vec<Box<dyn Bind<'p> + 'p>>,
}

/// How the host side of a binding is borrowed.
enum HostRef<'p, T: Element> {
    Shared(&'p HostArray<T>),
    Exclusive(&'p mut HostArray<T>),
}

impl<T: Element> HostRef<'_, T> {
    fn get(&self) -> &HostArray<T> {
        match self {
            HostRef::Shared(host) => host,
            HostRef::Exclusive(host) => host,
        }
    }
}

/// Which ways a binding copies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
    InOut,
}

/// A binding before the run checked it.
struct Binding<'p, T: Element> {
    host: HostRef<'p, T>,
    device: &'p DeviceArray<T>,
    axis: usize,
    direction: Direction,
}

/// A checked binding with its layout and staging buffers.
struct Prepared<'p, T: Element> {
    host: HostRef<'p, T>,
    device: &'p DeviceArray<T>,
    layout: ChunkLayout,
    input: Option<Stager<T>>,
    output: Option<Stager<T>>,
    /// The chunk whose first input window the input buffer holds.
    staged: Option<usize>,
}

trait Bind<'p> {
    fn label(&self) -> &str;
    fn owner(&self) -> OwnerId;
    fn prepare(
        self: Box<Self>,
        streamer: &ChunkStreamer<'_>,
    ) -> Result<Box<dyn Move + 'p>, MemError>;
}

trait Move {
    /// Acquires the staging buffers the run will need (waiting for them),
    /// so that no acquire waits later while another buffer is held.
    fn reserve(&mut self, first: &Chunk) -> Result<(), MemError>;
    fn stage(&mut self, chunk: &Chunk) -> Result<(), MemError>;
    fn upload(&mut self, chunk: &Chunk) -> Result<(), MemError>;
    fn download(&mut self, chunk: &Chunk) -> Result<(), MemError>;
}

impl<'p, T: Element> Bind<'p> for Binding<'p, T> {
    fn label(&self) -> &str {
        self.device.label()
    }

    fn owner(&self) -> OwnerId {
        self.device.owner()
    }

    fn prepare(
        self: Box<Self>,
        streamer: &ChunkStreamer<'_>,
    ) -> Result<Box<dyn Move + 'p>, MemError> {
        let layout = streamer.layout(self.host.get().shape(), self.device, self.axis)?;
        let stager = || streamer.stager(&layout, self.device.label());
        let input = (self.direction != Direction::Out).then(stager);
        let output = (self.direction != Direction::In).then(stager);
        Ok(Box::new(Prepared {
            host: self.host,
            device: self.device,
            layout,
            input,
            output,
            staged: None,
        }))
    }
}

impl<T: Element> Move for Prepared<'_, T> {
    fn reserve(&mut self, first: &Chunk) -> Result<(), MemError> {
        if !needs_staging(self.host.get(), &self.layout, &first.runs) {
            return Ok(());
        }
        // An inout binding's second buffer is only taken when free (see the
        // type's docs), so only its input buffer is reserved.
        match (self.input.as_mut(), self.output.as_mut()) {
            (Some(input), _) => input.reserve(),
            (None, Some(output)) => output.reserve(),
            (None, None) => Ok(()),
        }
    }

    fn stage(&mut self, chunk: &Chunk) -> Result<(), MemError> {
        let Some(input) = self.input.as_mut() else {
            return Ok(());
        };
        let staged = stage_first_window(self.host.get(), &self.layout, &chunk.runs, input)?;
        self.staged = staged.then_some(chunk.index);
        Ok(())
    }

    fn upload(&mut self, chunk: &Chunk) -> Result<(), MemError> {
        let Some(input) = self.input.as_mut() else {
            return Ok(());
        };
        let prestaged = self.staged.take() == Some(chunk.index);
        upload(
            self.host.get(),
            self.device,
            &self.layout,
            &chunk.runs,
            input,
            prestaged,
        )
    }

    fn download(&mut self, chunk: &Chunk) -> Result<(), MemError> {
        let (HostRef::Exclusive(host), Some(output)) = (&mut self.host, self.output.as_mut())
        else {
            return Ok(());
        };
        let input = &mut self.input;
        let staged = &mut self.staged;
        download_through(
            self.device,
            host,
            &self.layout,
            &chunk.runs,
            move || match input {
                None => output.buffer(),
                Some(input) => match output.try_buffer()? {
                    Some(buffer) => Ok(buffer),
                    None => {
                        *staged = None;
                        input.buffer()
                    }
                },
            },
        )
    }
}

impl<'s> ChunkStreamer<'s> {
    /// A pipeline over every chunk of the plan; bind arrays to it, then
    /// [`run`](ChunkPipeline::run) it.
    pub fn pipeline(&'s self) -> ChunkPipeline<'s> {
        ChunkPipeline {
            streamer: self,
            bindings: Vec::new(),
        }
    }
}

impl<'p> ChunkPipeline<'p> {
    fn bind<T: Element>(
        mut self,
        host: HostRef<'p, T>,
        device: &'p DeviceArray<T>,
        axis: usize,
        direction: Direction,
    ) -> Self {
        self.bindings.push(Box::new(Binding {
            host,
            device,
            axis,
            direction,
        }));
        self
    }

    /// Copies each chunk of `host` (the whole batch, chunked along `axis`)
    /// into `device` before the chunk computes.
    pub fn input<T: Element>(
        self,
        host: &'p HostArray<T>,
        device: &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        self.bind(HostRef::Shared(host), device, axis, Direction::In)
    }

    /// Copies `device` into each chunk of `host` after the chunk computes.
    pub fn output<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        device: &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        self.bind(HostRef::Exclusive(host), device, axis, Direction::Out)
    }

    /// Both: copies each chunk in before it computes and back after.
    pub fn inout<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        device: &'p DeviceArray<T>,
        axis: usize,
    ) -> Self {
        self.bind(HostRef::Exclusive(host), device, axis, Direction::InOut)
    }

    /// Runs every chunk through `compute` (see the type's docs for the
    /// order). Every binding is checked before anything is copied; the first
    /// error stops the run and is returned.
    pub fn run<E: From<MemError>>(
        self,
        mut compute: impl FnMut(&Chunk) -> Result<(), E>,
    ) -> Result<(), E> {
        let ChunkPipeline { streamer, bindings } = self;
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
            .map(|binding| binding.owner())
            .chain(std::iter::once(streamer.instance.owner()))
            .collect();
        let mut order: Vec<(String, usize)> = bindings
            .iter()
            .enumerate()
            .map(|(index, binding)| (binding.label().to_owned(), index))
            .collect();
        order.sort_unstable();
        let mut moves = bindings
            .into_iter()
            .map(|binding| binding.prepare(streamer))
            .collect::<Result<Vec<_>, MemError>>()?;
        let _stream = streamer.bind_stream()?;
        let works = owners
            .into_iter()
            .map(|owner| streamer.manager.begin_work_for(owner))
            .collect::<Result<Vec<_>, MemError>>()?;
        // Lazily: a plan may have more chunks than would fit in memory as a list.
        let mut chunks = streamer.chunks().peekable();
        if let Some(first) = chunks.peek() {
            // Staging buffers are taken in one global order (by label), so
            // pipelines sharing a pool that cannot grow wait for each other
            // instead of each holding what the other needs.
            for (_, index) in &order {
                if let Some(binding) = moves.get_mut(*index) {
                    binding.reserve(first)?;
                }
            }
            moves.iter_mut().try_for_each(|m| m.stage(first))?;
        }
        while let Some(chunk) = chunks.next() {
            moves.iter_mut().try_for_each(|m| m.upload(&chunk))?;
            compute(&chunk)?;
            if let Some(next) = chunks.peek() {
                moves.iter_mut().try_for_each(|m| m.stage(next))?;
            }
            moves.iter_mut().try_for_each(|m| m.download(&chunk))?;
        }
        works.into_iter().try_for_each(|work| work.finish())?;
        Ok(())
    }
}

impl std::fmt::Debug for ChunkPipeline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkPipeline")
            .field("streamer", self.streamer)
            .field(
                "bindings",
                &self.bindings.iter().map(|b| b.label()).collect::<Vec<_>>(),
            )
            .finish()
    }
}
