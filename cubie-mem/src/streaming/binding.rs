//! One binding of a chunk pipeline: a host array of the whole batch, the
//! device (or pinned) array of each buffer set, and the one route each
//! chunk takes between them (direct, strided or staged); see
//! [the chunk pipeline](crate::guide::host_memory#the-chunk-pipeline).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::binding_host::HostRuns;
use super::layout::ChunkLayout;
use super::staging_ring::{Landing, StagingRing};
use super::staging_threads::StagingThreads;
use super::streamer::ChunkStreamer;
use super::target::ChunkTarget;
use crate::array::queued::{
    queue_download, queue_download_strided, queue_upload, queue_upload_strided,
};
use crate::array::slot::{Memory, Slot};
use crate::backend::{Backend, BackendResult, StridedRows};
use crate::host::{HostArray, HostMemoryKind, StagingBuffer};
use crate::ids::OwnerId;
use crate::resource::{Event, OwnedStream};
use crate::{Chunk, Element, MemError};

/// Which ways a binding copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    In,
    Out,
    InOut,
}

impl Direction {
    fn uploads(self) -> bool {
        self != Direction::Out
    }

    fn downloads(self) -> bool {
        self != Direction::In
    }
}

/// How a chunk moves between the host array and a device buffer.
enum Route {
    /// By one contiguous copy of these host elements.
    Contiguous(Range<usize>),
    /// By one strided copy of rows starting at this host element.
    Strided(usize, StridedRows),
    /// Through a staging buffer.
    Staged,
}

/// A binding of a host array to a device or pinned array per buffer set,
/// checked against the streamer's plan when it is made, and moving bytes
/// whatever the element type.
///
/// A chunk of a page-locked host array moves directly: by one contiguous
/// copy when it is one block of the array, else by one strided copy of its
/// rows when they are at least the streamer's narrowest strided row.
/// Otherwise it is gathered into (or scattered from) the binding's staging
/// buffers, window by window, on the pipeline's copy streams; a window
/// downloaded into a staging buffer is scattered once its download has
/// landed and the host reaches it, or when its buffer is needed again. A
/// pinned array of a buffer set is filled and emptied on the host once the
/// copy stream reaches the chunk's turn.
pub(super) struct Binding<'p> {
    label: String,
    host: Host<'p>,
    /// The host array's kind.
    kind: HostMemoryKind,
    /// What makes dropping the host array leak its page-locked memory.
    retirement: Option<&'p AtomicBool>,
    /// The bound array of each buffer set.
    slots: Vec<&'p Arc<Slot>>,
    /// Their memory, once held.
    devices: Vec<Memory>,
    direction: Direction,
    /// Staging for uploads (and for the downloads of an `inout` binding
    /// that got no buffers of its own for them).
    input: Option<StagingRing>,
    /// Staging for downloads.
    output: Option<StagingRing>,
    /// The narrowest row, in bytes, a strided copy moves.
    min_strided_row: usize,
}

/// The host side of a binding: the host array's runs, where a chunk's bytes
/// sit in them, and the threads that gather and scatter them.
struct Host<'p> {
    runs: HostRuns<'p>,
    /// The layout of the arrays' bytes.
    layout: ChunkLayout,
    threads: StagingThreads,
    backend: Arc<dyn Backend>,
}

impl Host<'_> {
    /// Gathers the bytes from `start` of chunk `runs` into `part` on the
    /// staging threads.
    fn gather(&self, runs: &Range<usize>, start: usize, part: &mut [u8]) -> Result<(), MemError> {
        let (host, layout) = (&self.runs, &self.layout);
        let rows = layout.rows_in(runs.len(), start, part.len());
        self.threads
            .gather(&*self.backend, part, rows, |offset, piece| {
                host.gather(layout, runs.clone(), start.saturating_add(offset), piece)
            })
    }

    /// Scatters `part`, the bytes from `start` of chunk `runs`, into the
    /// host array on the staging threads.
    fn scatter(&mut self, runs: &Range<usize>, start: usize, part: &[u8]) -> Result<(), MemError> {
        let (host, layout) = (&self.runs, &self.layout);
        let rows = layout.rows_in(runs.len(), start, part.len());
        self.threads
            .scatter(&*self.backend, part, rows, |offset, piece| {
                // SAFETY: the threads are given disjoint pieces of the window,
                // which the layout maps to disjoint bytes of the chunk; `&mut`
                // keeps any other use of the access away meanwhile.
                unsafe { host.scatter(layout, runs.clone(), piece, start.saturating_add(offset)) }
            })
    }

    /// Scatters the window `landing` of `buffer` once its download has
    /// landed (waiting for it).
    fn scatter_landing(
        &mut self,
        buffer: &mut StagingBuffer,
        landing: &Landing,
    ) -> Result<(), MemError> {
        let staged = buffer.host()?;
        let part = staged.get(..landing.len).unwrap_or(&[]);
        self.scatter(&landing.runs, landing.start, part)
    }
}

impl<'p> Binding<'p> {
    /// A binding of the runs `host` of `array` to `targets`, one per each
    /// of `sets` buffer sets, checked: their axes agree and their shapes
    /// fit `streamer`'s plan.
    pub(super) fn new<T: Element>(
        streamer: &ChunkStreamer<'_>,
        sets: usize,
        (array, host): (&'p HostArray<T>, HostRuns<'p>),
        targets: Vec<ChunkTarget<'p, T>>,
        direction: Direction,
    ) -> Result<Self, MemError> {
        let label = targets.first().map_or("", |target| target.label());
        let label = label.to_owned();
        if targets.len() != sets || sets == 0 {
            return Err(MemError::PipelineSets {
                label,
                bound: targets.len(),
                sets,
            });
        }
        let mut layout = None;
        for (set, target) in targets.iter().enumerate() {
            let axis = target.run_axis()?;
            if let Some(first) = layout.as_ref().map(ChunkLayout::axis)
                && first != axis
            {
                return Err(MemError::BindingAxes {
                    label,
                    first,
                    set,
                    axis,
                });
            }
            let shape = target.shape();
            layout = Some(streamer.layout(array.shape(), target.label(), shape, axis)?);
        }
        let layout = layout.ok_or_else(|| MemError::PipelineSets {
            label: label.clone(),
            bound: 0,
            sets,
        })?;
        let dtype = crate::dtype::dtype_of::<T>();
        let ring = || streamer.staging_ring(&layout, &label, dtype);
        Ok(Binding {
            input: direction.uploads().then(ring),
            output: direction.downloads().then(ring),
            host: Host {
                runs: host,
                layout: layout.of_bytes(size_of::<T>())?,
                threads: streamer.staging_threads(),
                backend: Arc::clone(streamer.manager.backend()),
            },
            kind: array.kind(),
            retirement: array.retirement(),
            slots: targets.iter().map(ChunkTarget::slot).collect(),
            devices: Vec::new(),
            direction,
            min_strided_row: streamer.min_strided_row_bytes(),
            label,
        })
    }

    /// The device or pinned array of buffer set `set`.
    fn device(&self, set: usize) -> Result<Memory, MemError> {
        self.devices
            .get(set)
            .cloned()
            .ok_or_else(|| MemError::PipelineSets {
                label: self.label.clone(),
                bound: self.devices.len(),
                sets: set.saturating_add(1),
            })
    }

    /// How chunk `runs` moves: directly from or to page-locked memory of
    /// this backend (or of a peer it accepts), by one contiguous copy when
    /// the chunk is one block of the host array, else by one strided copy
    /// when its rows are at least `min_strided_row` bytes. Anything else
    /// (pageable, spilled, narrower rows, or page-locked memory the backend
    /// cannot copy) goes through a staging buffer.
    fn route(&self, runs: &Range<usize>) -> Route {
        let Host {
            runs: host,
            layout,
            backend,
            ..
        } = &self.host;
        if self.kind != HostMemoryKind::Pinned {
            return Route::Staged;
        }
        if let Some(range) = layout.contiguous_range(runs) {
            return match host.range(layout, runs, range.clone()) {
                Ok(src) if backend.is_page_locked(src.as_ptr(), src.len()) => {
                    Route::Contiguous(range)
                }
                _ => Route::Staged,
            };
        }
        let Some((first, rows)) = layout.strided_rows(runs, 1) else {
            return Route::Staged;
        };
        match (host.rows_start(runs, first), rows.host_span()) {
            (Ok(start), Some(span))
                if rows.row_bytes >= self.min_strided_row
                    && backend.is_page_locked(start.as_ptr(), span) =>
            {
                Route::Strided(first, rows)
            }
            _ => Route::Staged,
        }
    }

    /// The bound arrays' label.
    pub(super) fn label(&self) -> &str {
        &self.label
    }

    /// The owners of the bound arrays.
    pub(super) fn owners(&self) -> impl Iterator<Item = OwnerId> {
        self.slots.iter().map(|slot| slot.owner())
    }

    /// Takes the bound arrays' memory, one per buffer set, held for the run.
    pub(super) fn hold(&mut self) -> Result<&[Memory], MemError> {
        self.devices = self
            .slots
            .iter()
            .map(|slot| slot.memory())
            .collect::<Result<_, _>>()?;
        // Only device arrays copy through staging buffers.
        if !self.devices.iter().any(|m| matches!(m, Memory::Device(_))) {
            (self.input, self.output) = (None, None);
        }
        Ok(&self.devices)
    }

    /// Copies both ways.
    pub(super) fn is_inout(&self) -> bool {
        self.direction == Direction::InOut
    }

    /// Moves chunks on the host (its buffer sets are pinned arrays), so its
    /// uploads wait for the copy stream: they go before the others.
    pub(super) fn is_host_side(&self) -> bool {
        self.devices
            .iter()
            .any(|memory| matches!(memory, Memory::Pinned(_)))
    }

    /// Leaks the host array's page-locked memory when it is dropped: a copy
    /// could not be waited for and may still use it.
    pub(super) fn retire_host(&self) {
        if let Some(retired) = self.retirement {
            retired.store(true, Ordering::Release);
        }
    }

    /// Orders `stream` after the last use of every device array of the
    /// binding, and makes it their last use (the run's copies are ordered
    /// through it).
    pub(super) fn order_on(&self, stream: &Arc<OwnedStream>) -> Result<(), MemError> {
        self.devices.iter().try_for_each(|memory| match memory {
            Memory::Device(device) => device.use_on(stream),
            Memory::Pinned(_) => Ok(()),
        })
    }

    /// Acquires the staging buffers the run will need (waiting for them),
    /// so that no acquire waits later while another buffer is held: for
    /// `ends`, the run's first and last chunks (the last the shortest, so
    /// the narrowest rows).
    pub(super) fn reserve(&mut self, ends: &[Chunk]) -> Result<(), MemError> {
        let staged = |runs: &Range<usize>| {
            self.host.layout.chunk_extent(runs.len()) > 0
                && matches!(self.route(runs), Route::Staged)
        };
        if !ends.iter().any(|chunk| staged(&chunk.runs)) {
            return Ok(());
        }
        if let Some(input) = self.input.as_mut() {
            input.reserve()?;
            // An inout binding's own download buffers are only taken when
            // the staging pool has them at once; else its downloads share
            // the input buffers.
            if let Some(output) = self.output.as_mut()
                && !output.try_reserve()?
            {
                self.output = None;
            }
            return Ok(());
        }
        self.output.as_mut().map_or(Ok(()), StagingRing::reserve)
    }

    /// Queues the upload of `chunk` into buffer set `set` on `stream`. The
    /// bytes of the set's device array that a short chunk's upload leaves
    /// (past its runs) are the pipeline's padding: a kernel over the whole
    /// array reads them and its results there are never downloaded, so on
    /// the simulated device they read as poison without failing the
    /// initcheck. A full chunk writes every byte and leaves none.
    ///
    /// A page-locked set is filled by the host in place once `set_free`
    /// fired (the kernel that last used the set is done), without waiting
    /// for the other copies on `stream`; with no event, once `stream` is.
    pub(super) fn upload(
        &mut self,
        chunk: &Chunk,
        set: usize,
        stream: &OwnedStream,
        set_free: Option<&Event>,
    ) -> Result<(), MemError> {
        self.upload_runs(chunk, set, stream, set_free)?;
        let layout = &self.host.layout;
        let short = layout.chunk_extent(chunk.len()) < layout.chunk_elements();
        if short
            && self.direction.uploads()
            && let (Some(slot), Ok(Memory::Device(device))) =
                (self.slots.get(set), self.device(set))
        {
            slot.backend().mark_padding(device.ptr(), slot.bytes());
        }
        Ok(())
    }

    /// Queues the copies of `chunk`'s runs into buffer set `set`.
    fn upload_runs(
        &mut self,
        chunk: &Chunk,
        set: usize,
        stream: &OwnedStream,
        set_free: Option<&Event>,
    ) -> Result<(), MemError> {
        let runs = chunk.runs.clone();
        let extent = self.host.layout.chunk_extent(runs.len());
        if !self.direction.uploads() || extent == 0 {
            return Ok(());
        }
        let device = match self.device(set)? {
            Memory::Device(device) => device,
            Memory::Pinned(pinned) => {
                host_may_touch(set_free, stream, &*self.host.backend)?;
                let mut block = pinned.write();
                return self
                    .host
                    .gather(&runs, 0, pinned_part(block.bytes_mut(), extent)?);
            }
        };
        let label = &self.label;
        match self.route(&runs) {
            Route::Contiguous(range) => {
                let src = self.host.runs.range(&self.host.layout, &runs, range)?;
                // SAFETY: the host array is page-locked, borrowed by the
                // pipeline for the whole run and only read; the run waits
                // for every copy before it returns.
                return unsafe { queue_upload(&device, label, 0, src, stream) };
            }
            Route::Strided(first, rows) => {
                let src = self.host.runs.rows_start(&runs, first)?;
                // SAFETY: as for a contiguous copy; the rows lie in the
                // host array (the layout's rows of `runs`).
                return unsafe { queue_upload_strided(&device, label, src, rows, stream) };
            }
            Route::Staged => {}
        }
        let Some(ring) = self.input.as_mut() else {
            return Ok(());
        };
        let host = &mut self.host;
        for (start, len) in ring.windows(extent) {
            // An inout binding's downloads may share the buffer: the
            // window it holds goes out first.
            let (_, buffer) =
                ring.next_free(|buffer, landing| host.scatter_landing(buffer, landing))?;
            let host = &*host;
            // SAFETY: the closure queues one copy of the window it is given,
            // on `stream`; the buffer is kept until it is done.
            unsafe {
                buffer.lend(stream, len, |part| {
                    host.gather(&runs, start, part)?;
                    queue_upload(&device, label, start, part, stream)
                })?;
            }
        }
        Ok(())
    }

    /// Queues the download of `chunk` from buffer set `set` on `stream`.
    /// Staged results wait in their staging buffers for
    /// [`scatter_landed`](Self::scatter_landed) (a buffer needed again is
    /// emptied first). A page-locked set is read by the host once
    /// `computed` fired (with no event, once `stream` is done).
    pub(super) fn download(
        &mut self,
        chunk: &Chunk,
        set: usize,
        stream: &OwnedStream,
        computed: Option<&Event>,
    ) -> Result<(), MemError> {
        let runs = chunk.runs.clone();
        let extent = self.host.layout.chunk_extent(runs.len());
        if !self.direction.downloads() || extent == 0 {
            return Ok(());
        }
        let device = match self.device(set)? {
            Memory::Device(device) => device,
            Memory::Pinned(pinned) => {
                host_may_touch(computed, stream, &*self.host.backend)?;
                let mut block = pinned.write();
                return self
                    .host
                    .scatter(&runs, 0, pinned_part(block.bytes_mut(), extent)?);
            }
        };
        let route = self.route(&runs);
        let (label, host) = (&self.label, &mut self.host);
        match route {
            Route::Contiguous(range) => {
                if let Some(dst) = host.runs.range_mut(&host.layout, &runs, range)? {
                    // SAFETY: the host array is page-locked and the
                    // pipeline's to write (wholly, or these runs of it) for
                    // the whole run; chunks are disjoint, and the run waits
                    // for every copy before it returns.
                    return unsafe { queue_download(&device, label, 0, dst, stream) };
                }
            }
            Route::Strided(first, rows) => {
                if let Some(dst) = host.runs.rows_start_mut(&runs, first)? {
                    // SAFETY: as for a contiguous copy; the rows lie in the
                    // host array and hold only `runs`.
                    return unsafe { queue_download_strided(&device, label, dst, rows, stream) };
                }
            }
            Route::Staged => {}
        }
        let Some(ring) = self.output.as_mut().or(self.input.as_mut()) else {
            return Ok(());
        };
        for (start, len) in ring.windows(extent) {
            let (buffer_id, buffer) =
                ring.next_free(|buffer, landing| host.scatter_landing(buffer, landing))?;
            // SAFETY: the closure queues one copy into the window it is
            // given, on `stream`; the buffer is kept until it is done, and
            // the host reads it only after that.
            unsafe {
                buffer.lend(stream, len, |part| {
                    queue_download(&device, label, start, part, stream)
                })?;
            }
            ring.land(Landing {
                buffer: buffer_id,
                chunk: chunk.index,
                runs: runs.clone(),
                start,
                len,
            });
        }
        Ok(())
    }

    /// Scatters into the host array the staged windows of the chunks up
    /// to `chunk`, oldest first: with `wait`, waiting for their downloads;
    /// without, only while they have landed. Whether none is left.
    pub(super) fn scatter_landed(&mut self, chunk: usize, wait: bool) -> Result<bool, MemError> {
        let Some(ring) = self.output.as_mut().or(self.input.as_mut()) else {
            return Ok(true);
        };
        while let Some(id) = ring.oldest_through(chunk) {
            if !wait && !ring.is_settled(id)? {
                return Ok(false);
            }
            ring.flush(id, |buffer, landing| {
                self.host.scatter_landing(buffer, landing)
            })?;
        }
        Ok(true)
    }
}

/// The first `len` bytes of a pinned array.
fn pinned_part(bytes: &mut [u8], len: usize) -> Result<&mut [u8], MemError> {
    let size = bytes.len() as u64;
    bytes.get_mut(..len).ok_or(MemError::OutOfBounds {
        offset: 0,
        end: len as u64,
        size,
    })
}

/// Waits until the host may touch a page-locked buffer set in place: for
/// `event` (the kernels that use the set are done), or with none, for
/// everything queued on `stream`.
fn host_may_touch(
    event: Option<&Event>,
    stream: &OwnedStream,
    backend: &dyn Backend,
) -> Result<(), MemError> {
    match event {
        Some(event) => event.wait(),
        None => stream.stream().synchronize().on(backend),
    }
}
