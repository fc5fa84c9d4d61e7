//! The order of a chunk pipeline's work: which chunk's upload, computation
//! and download is queued when, on which stream, after which events; when
//! the host scatters the staged results that have landed; and what is saved
//! when a step fails.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use super::binding::Binding;
use crate::Chunk;
use crate::MemError;
use crate::backend::{Backend, BackendResult};
use crate::plan::chunks::Chunks;
use crate::resource::Event;
use crate::resource::OwnedStream;

/// The events of one chunk.
#[derive(Default)]
struct ChunkEvents {
    uploaded: Option<Event>,
    computed: Option<Event>,
    downloaded: Option<Event>,
}

/// The chunks of a run whose results are in the host arrays (once the
/// copies queued are done), and their runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Completed {
    pub(super) chunks: Range<usize>,
    pub(super) runs: Range<usize>,
}

/// The streams and events of one run.
pub(super) struct Schedule {
    backend: Arc<dyn Backend>,
    compute: Arc<OwnedStream>,
    upload: Arc<OwnedStream>,
    download: Arc<OwnedStream>,
    sets: usize,
    /// After the work queued before the run: what the run's first use of
    /// each buffer set waits for.
    start: Event,
    /// Events of the chunks still referred to, from chunk `first` on.
    events: VecDeque<ChunkEvents>,
    first: usize,
    /// Chunks computed whose download is not queued yet, in order.
    computed: VecDeque<Chunk>,
    /// Chunks whose downloads are queued and whose staged results the host
    /// may not have scattered yet, in order.
    landing: VecDeque<Chunk>,
    /// The chunk whose step was queued last: where a failure stopped.
    at: Option<usize>,
    /// The chunks whose results are downloaded (or queued to be) and
    /// scattered, from the run's first chunk.
    completed: Completed,
    /// A download or a scatter failed: later chunks' results cannot follow
    /// in order.
    download_failed: bool,
}

impl Schedule {
    pub(super) fn new(
        backend: &Arc<dyn Backend>,
        compute: Arc<OwnedStream>,
        sets: usize,
    ) -> Result<Self, MemError> {
        let upload = OwnedStream::create(backend)?;
        let download = OwnedStream::create(backend)?;
        // The arrays were allocated (and maybe written) on the compute
        // stream: the copy streams start after that.
        let start = Event::record(&compute)?;
        start.order(&upload)?;
        start.order(&download)?;
        Ok(Schedule {
            backend: Arc::clone(backend),
            compute,
            upload,
            download,
            sets: sets.max(1),
            start,
            events: VecDeque::new(),
            first: 0,
            computed: VecDeque::new(),
            landing: VecDeque::new(),
            at: None,
            completed: Completed::default(),
            download_failed: false,
        })
    }

    /// The chunk the run stopped at (the last one a step was queued for).
    pub(super) fn stopped_at(&self) -> Option<usize> {
        self.at
    }

    /// The chunks whose downloads were queued and whose staged results
    /// were scattered, without error.
    pub(super) fn completed(&self) -> Completed {
        self.completed.clone()
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
        stream: &OwnedStream,
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

    /// The event after which the host may fill buffer set `chunk % sets`
    /// in place (a page-locked set, which kernels use directly): the
    /// computation of the chunk that used it last, or the run's start.
    /// `None` when that chunk's event is not kept.
    fn set_free(&self, chunk: usize) -> Option<&Event> {
        match chunk.checked_sub(self.sets) {
            Some(previous) => self.event(previous, |e| &e.computed),
            None => Some(&self.start),
        }
    }

    fn upload(&mut self, bindings: &mut [Binding<'_>], chunk: &Chunk) -> Result<(), MemError> {
        self.at = Some(chunk.index);
        let stream = Arc::clone(&self.upload);
        let stream = &*stream;
        let set = chunk.index % self.sets;
        self.after_previous_use(chunk.index, stream, |e| &e.computed)?;
        let free = self.set_free(chunk.index);
        for binding in bindings.iter_mut().filter(|binding| !binding.is_inout()) {
            binding.upload(chunk, set, stream, free)?;
        }
        if bindings.iter().any(|binding| binding.is_inout()) {
            self.after_previous_use(chunk.index, stream, |e| &e.downloaded)?;
            for binding in bindings.iter_mut().filter(|binding| binding.is_inout()) {
                binding.upload(chunk, set, stream, free)?;
            }
        }
        self.events(chunk.index).uploaded = Some(Event::record(stream)?);
        tracing::debug!(chunk = chunk.index, runs = ?chunk.runs, set, "queued a chunk's upload");
        Ok(())
    }

    fn download(&mut self, bindings: &mut [Binding<'_>], chunk: &Chunk) -> Result<(), MemError> {
        self.at = Some(chunk.index);
        let queued = self.queue_download(bindings, chunk);
        match queued {
            Ok(()) => self.landing.push_back(chunk.clone()),
            Err(_) => self.download_failed = true,
        }
        queued
    }

    /// Scatters the staged results of at most `most` downloaded chunks, in
    /// order: with `wait`, waiting for their downloads; else only while
    /// they have landed. A chunk counts as completed once every binding
    /// scattered it.
    fn settle(
        &mut self,
        bindings: &mut [Binding<'_>],
        wait: bool,
        most: usize,
    ) -> Result<(), MemError> {
        for _ in 0..most {
            let Some(chunk) = self.landing.front() else {
                return Ok(());
            };
            let (index, end) = (chunk.index, chunk.runs.end);
            for binding in bindings.iter_mut() {
                match binding.scatter_landed(index, wait) {
                    Ok(true) => {}
                    Ok(false) => return Ok(()),
                    Err(error) => {
                        self.at = Some(index);
                        self.download_failed = true;
                        self.landing.clear();
                        return Err(error);
                    }
                }
            }
            self.landing.pop_front();
            self.completed.chunks.end = index.saturating_add(1);
            self.completed.runs.end = end;
        }
        Ok(())
    }

    fn queue_download(
        &mut self,
        bindings: &mut [Binding<'_>],
        chunk: &Chunk,
    ) -> Result<(), MemError> {
        let stream = Arc::clone(&self.download);
        let stream = &*stream;
        let computed = self.event(chunk.index, |e| &e.computed);
        if let Some(computed) = computed {
            computed.order(stream)?;
        }
        let set = chunk.index % self.sets;
        for binding in bindings.iter_mut() {
            binding.download(chunk, set, stream, computed)?;
        }
        self.events(chunk.index).downloaded = Some(Event::record(stream)?);
        tracing::debug!(chunk = chunk.index, runs = ?chunk.runs, set, "queued a chunk's download");
        Ok(())
    }

    fn compute<E: From<MemError>>(
        &mut self,
        chunk: &Chunk,
        compute: &mut impl FnMut(&Chunk, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        self.at = Some(chunk.index);
        if let Some(uploaded) = self.event(chunk.index, |e| &e.uploaded) {
            uploaded.order(&self.compute)?;
        }
        self.after_previous_use(chunk.index, &self.compute, |e| &e.downloaded)?;
        tracing::debug!(chunk = chunk.index, runs = ?chunk.runs, set = chunk.index % self.sets, "computing a chunk");
        compute(chunk, chunk.index % self.sets)?;
        self.events(chunk.index).computed = Some(Event::record(&self.compute)?);
        self.computed.push_back(chunk.clone());
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
        bindings: &mut [Binding<'_>],
        last: usize,
    ) -> Result<(), MemError> {
        while self
            .computed
            .front()
            .is_some_and(|chunk| chunk.index <= last)
        {
            if let Some(chunk) = self.computed.pop_front() {
                self.download(bindings, &chunk)?;
            }
        }
        Ok(())
    }

    /// Queues every chunk: the computation of chunk `k` (after the download
    /// of chunk `k - d`), the upload of chunk `k + 1`, then the downloads of
    /// the chunks before `k`.
    pub(super) fn run<E: From<MemError>>(
        &mut self,
        bindings: &mut [Binding<'_>],
        chunks: &mut std::iter::Peekable<Chunks>,
        mut compute: impl FnMut(&Chunk, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(first) = chunks.peek().cloned() else {
            return Ok(());
        };
        // A run may start past chunk 0 (a range, a resume).
        if self.events.is_empty() {
            self.first = first.index;
        }
        self.completed = Completed {
            chunks: first.index..first.index,
            runs: first.runs.start..first.runs.start,
        };
        let inout = bindings.iter().any(|binding| binding.is_inout());
        self.upload(bindings, &first)?;
        while let Some(chunk) = chunks.next() {
            // The results of the chunk that last used this set must be on
            // their way out before the computation overwrites them.
            if let Some(previous) = chunk.index.checked_sub(self.sets) {
                self.download_through(bindings, previous)?;
            }
            self.compute(&chunk, &mut compute)?;
            if let Some(next) = chunks.peek().cloned() {
                // An inout binding's upload overwrites results: those of
                // the chunk that last used the set go out first.
                if inout && let Some(previous) = next.index.checked_sub(self.sets) {
                    self.download_through(bindings, previous)?;
                }
                self.upload(bindings, &next)?;
            }
            if let Some(before) = chunk.index.checked_sub(1) {
                self.download_through(bindings, before)?;
            }
            // With the device fed as far as it can be, the host scatters
            // the oldest chunk that has landed, if any, and then feeds the
            // device again: one chunk's results come down per chunk.
            self.settle(bindings, false, 1)?;
        }
        self.download_through(bindings, usize::MAX)?;
        self.settle(bindings, true, usize::MAX)?;
        Ok(())
    }

    /// After a failure: queues the downloads of every chunk computed before
    /// it, in order, and scatters every chunk downloaded, so that no
    /// finished result is lost. Stops at the first download or scatter that
    /// fails (and downloads nothing more after one failed), so that the
    /// chunks saved are always the first ones of the run.
    pub(super) fn salvage(&mut self, bindings: &mut [Binding<'_>]) {
        let at = self.at;
        if !self.download_failed
            && let Err(error) = self.download_through(bindings, usize::MAX)
        {
            tracing::error!(%error, "downloading a finished chunk after a failure failed");
        }
        if let Err(error) = self.settle(bindings, true, usize::MAX) {
            tracing::error!(%error, "scattering a finished chunk after a failure failed");
        }
        self.computed.clear();
        self.at = at;
    }

    /// Orders the instance's stream after every copy and waits for all of
    /// it: later frees and copies on the instance's stream come after the
    /// run, and no copy still uses host memory. When waiting fails, no
    /// chunk's results can be counted on.
    pub(super) fn finish(&mut self) -> Result<(), MemError> {
        let mut result = Ok(());
        for stream in [&self.upload, &self.download] {
            let ordered = Event::record(stream).and_then(|done| done.order(&self.compute));
            if result.is_ok() {
                result = ordered;
            }
        }
        for stream in [&self.compute, &self.upload, &self.download] {
            let waited = stream.stream().synchronize().on(&*self.backend);
            if result.is_ok() {
                result = waited;
            }
        }
        self.events.clear();
        if result.is_err() {
            self.completed.chunks.end = self.completed.chunks.start;
            self.completed.runs.end = self.completed.runs.start;
        }
        result
    }
}
