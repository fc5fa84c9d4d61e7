//! The chunk pipeline: a whole batch through the device, chunk by chunk,
//! with uploads, computation and downloads of different chunks overlapping;
//! see [the chunk pipeline](crate::guide::host_memory#the-chunk-pipeline).

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use super::BatchError;
use super::binding::{Binding, Direction};
use super::binding_host::HostRuns;
use super::schedule::Schedule;
use super::streamer::ChunkStreamer;
use super::target::ChunkTarget;
use crate::array::slot::Memory;
use crate::host::HostArray;
use crate::ids::OwnerId;
use crate::streams::CurrentStream;
use crate::{Chunk, Element, HostBuffers, MemError, Work};

/// Runs a batch through the device chunk by chunk, overlapping the copies of
/// some chunks with the computation of another. Made by
/// [`ChunkStreamer::pipeline`] (one buffer set) or
/// [`ChunkStreamer::pipeline_sets`] (one per chunk in flight).
///
/// With `d` buffer sets, chunk `k` lives in set `k % d`. Uploads run on an
/// upload stream, the computation on the instance's stream (bound as the
/// current stream while `compute` runs), downloads on a download stream,
/// ordered by events: the host queues the computation of chunk `k`, the
/// upload of chunk `k + 1`, then the download of chunk `k - 1`. The guide
/// page [the chunk pipeline](crate::guide::host_memory#the-chunk-pipeline)
/// says how the chunks overlap and what a run guarantees: its arrays are
/// not evicted mid-batch, its staging buffers are taken before the first
/// chunk in one order every pipeline follows, and every copy it queued is
/// done before `run` returns.
#[must_use = "a pipeline does nothing until run"]
pub struct ChunkPipeline<'p, S = ()> {
    streamer: &'p ChunkStreamer<'p>,
    sets: &'p [S],
    bindings: Vec<Binding<'p>>,
    /// The first binding refused when it was made, refused again by `run`.
    refused: Option<MemError>,
    /// The chunks of the plan to run (all by default).
    chunks: Range<usize>,
}

/// An array's identity: the address of its device (or pinned) memory,
/// which every handle to the array (and every set sharing one buffer)
/// refers to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct ArrayId(usize);

impl ArrayId {
    fn of(memory: &Memory) -> Self {
        ArrayId(match memory {
            Memory::Device(device) => Arc::as_ptr(device).addr(),
            Memory::Pinned(pinned) => Arc::as_ptr(pinned).addr(),
        })
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
            refused: None,
            chunks: 0..self.plan().chunks,
        }
    }
}

impl<S> ChunkPipeline<'_, S> {
    /// Runs only the chunks `chunks` of the plan (every chunk by default),
    /// with the layout, runs and buffer sets they have in the whole run:
    /// a batch can run in parts, and a failed run can be finished
    /// ([`resume`](Self::resume)). A range that is not within the plan's
    /// chunks is [`MemError::ChunkRange`], refused by `run` before anything
    /// moves.
    pub fn chunk_range(mut self, chunks: Range<usize>) -> Self {
        self.chunks = chunks;
        self
    }

    /// Runs only the chunks a failed run left undone: from the first chunk
    /// whose results are not in the host arrays
    /// ([`BatchError::completed`]'s end) to the end of this pipeline's
    /// range. A batch that failed at chunk 70 of 100 then costs 30 chunks,
    /// and every run is computed once. Bind the same arrays as the failed
    /// run (the host arrays hold the completed chunks' results; inputs are
    /// uploaded again from the first chunk resumed). The walk-through
    /// [a first chunked solver](crate::guide::first_solver) fails a batch
    /// and resumes it.
    pub fn resume<E>(mut self, failure: &BatchError<E>) -> Self {
        self.chunks.start = failure.completed().end;
        self
    }

    /// The chunks this pipeline runs.
    pub fn chunks(&self) -> Range<usize> {
        self.chunks.clone()
    }
}

impl<'p, S> ChunkPipeline<'p, S> {
    /// Adds `binding`, or notes why it was refused.
    pub(super) fn push(mut self, binding: Result<Binding<'p>, MemError>) -> Self {
        match binding {
            Ok(binding) => self.bindings.push(binding),
            Err(error) => {
                self.refused.get_or_insert(error);
            }
        }
        self
    }

    /// Adds a binding of the runs `host` of a host array to `targets`, one
    /// per buffer set.
    fn bind_array<T: Element>(
        self,
        host: (&'p HostArray<T>, HostRuns<'p>),
        targets: Vec<ChunkTarget<'p, T>>,
        direction: Direction,
    ) -> Self {
        let binding = Binding::new(self.streamer, self.sets.len(), host, targets, direction);
        self.push(binding)
    }

    fn select<T: Element, A: Into<ChunkTarget<'p, T>>>(
        &self,
        select: impl Fn(&'p S) -> A,
    ) -> Vec<ChunkTarget<'p, T>> {
        self.sets.iter().map(|set| select(set).into()).collect()
    }

    /// Copies each chunk of `host` (the whole batch) into `array` before
    /// the chunk computes (a pipeline of one buffer set).
    ///
    /// `array` is a `&DeviceArray` or a `&PinnedArray`, chunked along its
    /// own chunk axis, or `array.along(axis)` for another (see
    /// [`ChunkTarget`]); `host` has the batch's runs on that axis.
    pub fn input<T: Element>(
        self,
        host: &'p HostArray<T>,
        array: impl Into<ChunkTarget<'p, T>>,
    ) -> Self {
        self.bind_array(HostRuns::input(host), vec![array.into()], Direction::In)
    }

    /// Copies `array` into each chunk of `host` after the chunk computes (a
    /// pipeline of one buffer set). `array` as in [`input`](Self::input).
    pub fn output<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        array: impl Into<ChunkTarget<'p, T>>,
    ) -> Self {
        self.bind_array(HostRuns::output(host), vec![array.into()], Direction::Out)
    }

    /// Both: copies each chunk in before it computes and back after (a
    /// pipeline of one buffer set). `array` as in [`input`](Self::input).
    pub fn inout<T: Element>(
        self,
        host: &'p mut HostArray<T>,
        array: impl Into<ChunkTarget<'p, T>>,
    ) -> Self {
        self.bind_array(HostRuns::output(host), vec![array.into()], Direction::InOut)
    }

    /// [`input`](Self::input) into the array `select` picks in every set
    /// (`|set| &set.state`, or `|set| set.state.along(1)`).
    pub fn input_with<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p HostArray<T>,
        select: impl Fn(&'p S) -> A,
    ) -> Self {
        let targets = self.select(select);
        self.bind_array(HostRuns::input(host), targets, Direction::In)
    }

    /// [`output`](Self::output) from the array `select` picks in every set.
    pub fn output_with<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A,
    ) -> Self {
        let targets = self.select(select);
        self.bind_array(HostRuns::output(host), targets, Direction::Out)
    }

    /// [`inout`](Self::inout) with the array `select` picks in every set.
    pub fn inout_with<T: Element, A: Into<ChunkTarget<'p, T>>>(
        self,
        host: &'p mut HostArray<T>,
        select: impl Fn(&'p S) -> A,
    ) -> Self {
        let targets = self.select(select);
        self.bind_array(HostRuns::output(host), targets, Direction::InOut)
    }

    /// Binds every array of the host mirror `host` in its direction (see
    /// [`HostBuffers`]), each to its field of the `B` that `select` picks in
    /// every set, along that array's own chunk axis: `|set| set` when the
    /// sets are `B`s, `|set| &set.inputs` for a part of a composed struct.
    /// One call instead of one `input_with`/`output_with`/`inout_with` per
    /// array, the same for a resumed run.
    pub fn bind<B: 'p, H: HostBuffers<B>>(
        self,
        host: &'p mut H,
        select: impl Fn(&'p S) -> &'p B + Copy + Sync + 'p,
    ) -> Self
    where
        S: 'p,
    {
        host.bind_host(self, select)
    }

    /// Runs every chunk through `compute`, which is handed the chunk and
    /// the buffer set holding it (see the type's docs for the order).
    ///
    /// Every binding is checked before anything moves. The first error (or
    /// panic) stops the run; every chunk computed before it is downloaded
    /// into the host arrays and every copy queued is done before `run`
    /// returns (or the panic resumes), and the [`BatchError`] names the
    /// chunk that failed and the chunks whose results are in place (see
    /// [what a failed batch leaves behind](crate::guide::host_memory#what-a-failed-batch-leaves-behind)).
    ///
    /// `compute` returns `Result<(), MemError>`; a computation with an
    /// error type of its own runs with [`run_with_error`](Self::run_with_error).
    pub fn run(
        self,
        compute: impl FnMut(&Chunk, &S) -> Result<(), MemError>,
    ) -> Result<(), BatchError> {
        self.run_with_error(compute)
    }

    /// [`run`](Self::run) with a computation whose error is the caller's
    /// own type `E` (which a [`MemError`] converts into, for the pipeline's
    /// own failures): the [`BatchError`] carries an `E`.
    pub fn run_with_error<E: From<MemError>>(
        self,
        mut compute: impl FnMut(&Chunk, &S) -> Result<(), E>,
    ) -> Result<(), BatchError<E>> {
        let ChunkPipeline {
            streamer,
            sets,
            mut bindings,
            refused,
            chunks: range,
        } = self;
        let _span = tracing::debug_span!(
            "pipeline",
            instance = %streamer.named_instance(),
            chunks = streamer.plan().chunks,
            chunk_length = streamer.plan().chunk_length,
            sets = sets.len(),
        )
        .entered();
        let before_start = |error: MemError| {
            // Nothing of the range is done: a resume starts where it did.
            let first = range.start.min(streamer.plan().chunks);
            let run = streamer
                .chunk_iter()
                .nth(first)
                .map_or(streamer.runs().end, |chunk| chunk.runs.start);
            BatchError::new(error.into(), None, first..first, run..run)
        };
        let chunks = streamer
            .chunk_iter()
            .within(range.clone())
            .ok_or(MemError::ChunkRange {
                start: range.start,
                end: range.end,
                chunks: streamer.plan().chunks,
            });
        let mut chunks = chunks.map_err(before_start)?.peekable();
        let ends = chunks.peek().is_some().then(|| {
            let mut ends = chunks.clone();
            ends.next().into_iter().chain(ends.next_back()).collect()
        });
        let (mut schedule, works, current) =
            start(streamer, sets.len(), &mut bindings, refused, ends).map_err(before_start)?;
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            schedule.run(&mut bindings, &mut chunks, |chunk, set| {
                sets.get(set).map_or(Ok(()), |set| compute(chunk, set))
            })
        }));
        if !matches!(outcome, Ok(Ok(()))) {
            schedule.salvage(&mut bindings);
        }
        // Every queued copy is done before the bindings (and the host
        // arrays and staging buffers they borrow) are let go, even after an
        // error.
        let settled = schedule.finish();
        if let Err(error) = &settled {
            tracing::error!(%error, "waiting for a pipeline's copies failed; its host memory is leaked");
            bindings.iter().for_each(|binding| binding.retire_host());
        }
        drop(bindings);
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

/// Checks the bindings, holds their arrays, marks the owners busy and
/// reserves the staging buffers: everything before the first copy. The
/// run's schedule, busy marks and current stream.
fn start(
    streamer: &ChunkStreamer<'_>,
    sets: usize,
    bindings: &mut [Binding<'_>],
    refused: Option<MemError>,
    ends: Option<Vec<Chunk>>,
) -> Result<(Schedule, Vec<Work>, CurrentStream), MemError> {
    if sets == 0 {
        return Err(MemError::NoBufferSets);
    }
    hold_arrays(bindings)?;
    if let Some(error) = refused {
        return Err(error);
    }
    // Every owner whose arrays are bound is busy for the whole run, so
    // none of them is evicted mid-batch.
    let owners: BTreeSet<OwnerId> = bindings
        .iter()
        .flat_map(|binding| binding.owners())
        .chain(std::iter::once(streamer.instance.owner()))
        .collect();
    let current = streamer.bind_stream()?;
    let works = owners
        .into_iter()
        .map(|owner| streamer.manager.begin_work_for(owner))
        .collect::<Result<Vec<_>, MemError>>()?;
    // The first and last chunks run, which bound the staging buffers, are
    // taken in one global order (by label).
    if let Some(ends) = ends {
        let mut order: Vec<&mut Binding<'_>> = bindings.iter_mut().collect();
        order.sort_by(|a, b| a.label().cmp(b.label()));
        for binding in order {
            binding.reserve(&ends)?;
        }
    }
    // The run's streams start after every earlier use of the arrays.
    for binding in bindings.iter() {
        binding.order_on(current.owned())?;
    }
    // Pinned sets are filled on the host once the upload stream reaches
    // them: they go first, so that they wait for no other upload.
    bindings.sort_by_key(|binding| !binding.is_host_side());
    let schedule = Schedule::new(
        streamer.manager.backend(),
        Arc::clone(current.owned()),
        sets,
    )?;
    Ok((schedule, works, current))
}

/// Holds every bound array, refusing one bound twice: in two sets of one
/// binding (two chunks in flight would overwrite each other) or in two
/// bindings. Arrays are told apart by identity, not label: two instances'
/// arrays of one label bind together.
fn hold_arrays(bindings: &mut [Binding<'_>]) -> Result<(), MemError> {
    let mut bound: HashMap<ArrayId, (usize, usize)> = HashMap::new();
    for (index, binding) in bindings.iter_mut().enumerate() {
        for (set, memory) in binding.hold()?.iter().enumerate() {
            match bound.insert(ArrayId::of(memory), (index, set)) {
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
