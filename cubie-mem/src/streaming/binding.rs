//! One binding of a chunk pipeline: a host array of the whole batch, the
//! device (or pinned) array of each buffer set, and the copies between them.
//!
//! A chunk of a page-locked host array moves directly: by one contiguous
//! copy when it is one block of the array, else by one strided copy of its
//! rows when they are at least the streamer's narrowest strided row
//! ([`ChunkStreamer::DEFAULT_MIN_STRIDED_ROW_BYTES`](super::ChunkStreamer::DEFAULT_MIN_STRIDED_ROW_BYTES)).
//! Otherwise it is gathered into (or scattered from) one of the binding's
//! page-locked staging buffers, window by window, the buffers taken in turn
//! ([`StagingRing`]). Every copy is queued on the pipeline's upload or
//! download stream and returns at once; a staging buffer is only touched
//! again once the copy that used it is done ([`Stage`]). A window
//! downloaded into a staging buffer is scattered later
//! ([`Move::scatter_landed`]): when its download has landed and the host
//! reaches it, or when its buffer is needed again.
//!
//! A pinned array in a buffer set is host memory the kernels use in place:
//! a chunk is gathered into it on the host once the copy stream reached the
//! chunk's turn (the computation that last used the set is done), and
//! scattered out of it once the chunk's computation is done.

use std::ops::Range;
use std::sync::Arc;

pub(crate) use super::binding_host::HostRef;
use super::layout::ChunkLayout;
use super::stage::Stage;
use super::staging_ring::{Landing, StagingRing};
use super::staging_threads::StagingThreads;
use super::streamer::direct_range;
use crate::Chunk;
use crate::array::queued::{
    queue_download, queue_download_strided, queue_upload, queue_upload_strided,
};
use crate::array::slot::Memory;
use crate::backend::{Backend, BackendResult, StridedRows};
use crate::host::HostMemoryKind;
use crate::resource::OwnedStream;
use crate::resource::{DeviceMemory, PinnedMemory};
use crate::{Element, MemError};

/// Which ways a binding copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    In,
    Out,
    InOut,
}

impl Direction {
    pub(super) fn uploads(self) -> bool {
        self != Direction::Out
    }

    pub(super) fn downloads(self) -> bool {
        self != Direction::In
    }
}

/// A checked binding, ready to move chunks.
pub(super) struct Lane<'p, T: Element> {
    pub(super) label: String,
    pub(super) host: HostRef<'p, T>,
    /// The device or pinned array of each buffer set, held allocated for
    /// the run.
    pub(super) devices: Vec<Memory>,
    pub(super) layout: ChunkLayout,
    pub(super) direction: Direction,
    pub(super) backend: Arc<dyn Backend>,
    /// Staging for uploads (and for the downloads of an `inout` binding
    /// that got no buffers of its own for them).
    pub(super) input: Option<StagingRing<T>>,
    /// Staging for downloads.
    pub(super) output: Option<StagingRing<T>>,
    /// The narrowest row, in bytes, a strided copy moves.
    pub(super) min_strided_row: usize,
    /// The threads that gather and scatter staged chunks.
    pub(super) threads: StagingThreads,
}

/// Scatters `part`, the device window from `start`, into chunk `runs` of
/// `host` on `threads`, and reports the work to `backend`; nothing for an
/// input's array.
fn scatter_window<T: Element>(
    threads: &StagingThreads,
    backend: &dyn Backend,
    host: &mut HostRef<'_, T>,
    layout: &ChunkLayout,
    runs: &Range<usize>,
    start: usize,
    part: &[T],
) -> Result<(), MemError> {
    let Some(target) = host.target(runs.clone())? else {
        return Ok(());
    };
    threads.scatter(backend, part, |offset, piece| {
        // SAFETY: the threads are given disjoint pieces of the window,
        // which the layout maps to disjoint elements of the chunk.
        unsafe { target.scatter(layout, piece, start.saturating_add(offset)) }
    })
}

/// Scatters the window `landing` of `stage` into the host array once its
/// download has landed (waiting for it).
fn scatter_landing<T: Element>(
    stage: &mut Stage<T>,
    landing: &Landing,
    host: &mut HostRef<'_, T>,
    layout: &ChunkLayout,
    threads: &StagingThreads,
    backend: &dyn Backend,
) -> Result<(), MemError> {
    let staged = stage.host()?;
    let part = staged.get(..landing.len).unwrap_or(&[]);
    scatter_window(
        threads,
        backend,
        host,
        layout,
        &landing.runs,
        landing.start,
        part,
    )
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

/// What the pipeline's schedule asks of a lane, whatever its element type.
pub(super) trait Move {
    /// Copies both ways.
    fn is_inout(&self) -> bool;
    /// Moves chunks on the host (its buffer sets are pinned arrays), so its
    /// uploads wait for the copy stream: they go before the others.
    fn is_host_side(&self) -> bool;
    /// Orders `stream` after the last use of every device array of the
    /// lane, and makes it their last use (the run's copies are ordered
    /// through it).
    fn order_on(&self, stream: &Arc<OwnedStream>) -> Result<(), MemError>;
    /// Acquires the staging buffers the run will need (waiting for them),
    /// so that no acquire waits later while another buffer is held: for
    /// `ends`, the run's first and last chunks (the last the shortest, so
    /// the narrowest rows).
    fn reserve(&mut self, ends: &[Chunk]) -> Result<(), MemError>;
    /// Queues the upload of `chunk` into buffer set `set` on `stream`.
    fn upload(&mut self, chunk: &Chunk, set: usize, stream: &OwnedStream) -> Result<(), MemError>;
    /// Queues the download of `chunk` from buffer set `set` on `stream`.
    /// Staged results wait in their staging buffers for
    /// [`scatter_landed`](Self::scatter_landed) (a buffer needed again is
    /// emptied first).
    fn download(&mut self, chunk: &Chunk, set: usize, stream: &OwnedStream)
    -> Result<(), MemError>;
    /// Scatters into the host array the staged windows of the chunks up
    /// to `chunk`, oldest first: with `wait`, waiting for their downloads;
    /// without, only while they have landed. Whether none is left.
    fn scatter_landed(&mut self, chunk: usize, wait: bool) -> Result<bool, MemError>;
    /// Leaks the host array's page-locked memory when it is dropped: a copy
    /// could not be waited for and may still use it.
    fn retire_host(&self);
}

/// Where buffer set `set` of a lane holds its chunk.
enum SetMemory {
    Device(Arc<DeviceMemory>),
    Pinned(Arc<PinnedMemory>),
}

/// The elements of a pinned array's first `len` elements, as `T`.
fn pinned_elements<'b, T: Element>(
    bytes: &'b mut [u8],
    label: &str,
    len: usize,
) -> Result<&'b mut [T], MemError> {
    let found = bytes.len() / size_of::<T>().max(1);
    bytes
        .get_mut(..len.saturating_mul(size_of::<T>()))
        .and_then(|bytes| bytemuck::try_cast_slice_mut(bytes).ok())
        .ok_or_else(|| MemError::LengthMismatch {
            label: label.to_owned(),
            expected: len,
            found,
        })
}

impl<T: Element> Lane<'_, T> {
    fn device(&self, set: usize) -> Result<SetMemory, MemError> {
        match self.devices.get(set) {
            Some(Memory::Device(memory)) => Ok(SetMemory::Device(Arc::clone(memory))),
            Some(Memory::Pinned(memory)) => Ok(SetMemory::Pinned(Arc::clone(memory))),
            None => Err(MemError::PipelineSets {
                label: self.label.clone(),
                bound: self.devices.len(),
                sets: set.saturating_add(1),
            }),
        }
    }

    /// Waits until the copy stream reached this point: the computation
    /// that last used the set (or this chunk's, for a download) is done.
    fn wait_for(&self, stream: &OwnedStream) -> Result<(), MemError> {
        stream.stream().synchronize().on(&*self.backend)
    }

    /// Gathers chunk `runs` of the host array into a pinned set.
    fn gather_pinned(
        &self,
        pinned: &PinnedMemory,
        runs: Range<usize>,
        extent: usize,
        stream: &OwnedStream,
    ) -> Result<(), MemError> {
        self.wait_for(stream)?;
        let mut block = pinned.write();
        let part = pinned_elements::<T>(block.bytes_mut(), &self.label, extent)?;
        let (host, layout) = (&self.host, &self.layout);
        self.threads.gather(&*self.backend, part, |offset, piece| {
            host.gather(layout, runs.clone(), offset, piece)
        })
    }

    /// How chunk `runs` moves: directly from or to page-locked memory of
    /// this backend (or of a peer it accepts), by one contiguous copy when
    /// the chunk is one block of the host array, else by one strided copy
    /// when its rows are at least `min_strided_row` bytes. Anything else
    /// (pageable, spilled, narrower rows, or page-locked memory the backend
    /// cannot copy) goes through a staging buffer.
    fn route(&self, runs: &Range<usize>) -> Route {
        if let Some(range) = direct_range(self.host.get(), &self.layout, runs) {
            let Ok(bytes) = self
                .host
                .range(&self.label, &self.layout, runs, range.clone())
            else {
                return Route::Staged;
            };
            return match self
                .backend
                .is_page_locked(bytes.as_ptr().cast(), size_of_val(bytes))
            {
                true => Route::Contiguous(range),
                false => Route::Staged,
            };
        }
        if self.host.get().kind() != HostMemoryKind::Pinned {
            return Route::Staged;
        }
        let Some((first, rows)) = self.layout.strided_rows(runs, size_of::<T>()) else {
            return Route::Staged;
        };
        if rows.row_bytes < self.min_strided_row {
            return Route::Staged;
        }
        let Ok(address) = self.host.rows_address(&self.label, runs, first) else {
            return Route::Staged;
        };
        match rows.host_span() {
            Some(span) if self.backend.is_page_locked(address.as_ptr().cast(), span) => {
                Route::Strided(first, rows)
            }
            _ => Route::Staged,
        }
    }

    /// Whether moving `runs` needs a staging buffer.
    fn staged(&self, runs: &Range<usize>) -> bool {
        self.layout.chunk_extent(runs.len()) > 0 && matches!(self.route(runs), Route::Staged)
    }
}

impl<T: Element> Move for Lane<'_, T> {
    fn is_inout(&self) -> bool {
        self.direction == Direction::InOut
    }

    fn is_host_side(&self) -> bool {
        self.devices
            .iter()
            .any(|memory| matches!(memory, Memory::Pinned(_)))
    }

    fn retire_host(&self) {
        self.host.get().retire();
    }

    fn order_on(&self, stream: &Arc<OwnedStream>) -> Result<(), MemError> {
        self.devices.iter().try_for_each(|memory| match memory {
            Memory::Device(device) => device.use_on(stream),
            Memory::Pinned(_) => Ok(()),
        })
    }

    fn reserve(&mut self, ends: &[Chunk]) -> Result<(), MemError> {
        if !ends.iter().any(|chunk| self.staged(&chunk.runs)) {
            return Ok(());
        }
        if let Some(input) = self.input.as_mut() {
            input.reserve()?;
            // An inout binding's own download buffers are only taken when
            // the staging pool has them at once; else its downloads share the
            // input buffers.
            if let Some(output) = self.output.as_mut()
                && !output.try_reserve()?
            {
                self.output = None;
            }
            return Ok(());
        }
        match self.output.as_mut() {
            Some(output) => output.reserve(),
            None => Ok(()),
        }
    }

    fn upload(&mut self, chunk: &Chunk, set: usize, stream: &OwnedStream) -> Result<(), MemError> {
        if !self.direction.uploads() {
            return Ok(());
        }
        let runs = chunk.runs.clone();
        let extent = self.layout.chunk_extent(runs.len());
        if extent == 0 {
            return Ok(());
        }
        let device = match self.device(set)? {
            SetMemory::Device(device) => device,
            SetMemory::Pinned(pinned) => return self.gather_pinned(&pinned, runs, extent, stream),
        };
        match self.route(&runs) {
            Route::Contiguous(range) => {
                let src = self.host.range(&self.label, &self.layout, &runs, range)?;
                // SAFETY: the host array is page-locked, borrowed by the
                // pipeline for the whole run and only read; the run waits
                // for every copy before it returns.
                return unsafe { queue_upload(&device, &self.label, 0, src, stream) };
            }
            Route::Strided(first, rows) => {
                let src = self.host.rows_address(&self.label, &runs, first)?;
                // SAFETY: as for a contiguous copy; the rows lie in the
                // host array (the layout's rows of `runs`).
                return unsafe { queue_upload_strided(&device, &self.label, src, rows, stream) };
            }
            Route::Staged => {}
        }
        let Some(ring) = self.input.as_mut() else {
            return Ok(());
        };
        let window = ring.window();
        let (backend, label, layout) = (&self.backend, &self.label, &self.layout);
        let (host, threads) = (&mut self.host, &self.threads);
        let mut start = 0;
        while start < extent {
            let len = window.min(extent - start);
            // An inout binding's downloads may share the buffer: the
            // window it holds goes out first.
            let (_, stage) = ring.next_free(|stage, landing| {
                scatter_landing(stage, landing, host, layout, threads, &**backend)
            })?;
            let host = &*host;
            // SAFETY: the closure queues one copy of the window it is given,
            // on `stream`; the stage keeps the buffer until it is done.
            unsafe {
                stage.lend(stream, len, |part| {
                    threads.gather(&**backend, part, |offset, piece| {
                        host.gather(layout, runs.clone(), start + offset, piece)
                    })?;
                    queue_upload(&device, label, start, part, stream)
                })?;
            }
            start += len;
        }
        Ok(())
    }

    fn download(
        &mut self,
        chunk: &Chunk,
        set: usize,
        stream: &OwnedStream,
    ) -> Result<(), MemError> {
        if !self.direction.downloads() {
            return Ok(());
        }
        let runs = chunk.runs.clone();
        let extent = self.layout.chunk_extent(runs.len());
        if extent == 0 {
            return Ok(());
        }
        let memory = self.device(set)?;
        if matches!(memory, SetMemory::Pinned(_)) {
            // The download stream waited for this chunk's computation.
            self.wait_for(stream)?;
        }
        if matches!(self.host, HostRef::Shared(_)) {
            return Ok(());
        }
        let route = self.route(&runs);
        let device = match memory {
            SetMemory::Device(device) => device,
            SetMemory::Pinned(pinned) => {
                let mut block = pinned.write();
                let part = pinned_elements::<T>(block.bytes_mut(), &self.label, extent)?;
                let (threads, backend) = (&self.threads, &*self.backend);
                return scatter_window(
                    threads,
                    backend,
                    &mut self.host,
                    &self.layout,
                    &runs,
                    0,
                    part,
                );
            }
        };
        match route {
            Route::Contiguous(range) => {
                if let Some(dst) = self
                    .host
                    .range_mut(&self.label, &self.layout, &runs, range)?
                {
                    // SAFETY: the host array is page-locked and the
                    // pipeline's to write (wholly, or these runs of it) for
                    // the whole run; chunks are disjoint, and the run waits
                    // for every copy before it returns.
                    return unsafe { queue_download(&device, &self.label, 0, dst, stream) };
                }
            }
            Route::Strided(first, rows) => {
                if let Some(dst) = self.host.rows_start_mut(&self.label, &runs, first)? {
                    // SAFETY: as for a contiguous copy; the rows lie in the
                    // host array and hold only `runs`.
                    return unsafe {
                        queue_download_strided(&device, &self.label, dst, rows, stream)
                    };
                }
            }
            Route::Staged => {}
        }
        let Some(ring) = self.output.as_mut().or(self.input.as_mut()) else {
            return Ok(());
        };
        let window = ring.window();
        let (backend, label, layout) = (&self.backend, &self.label, &self.layout);
        let (host, threads) = (&mut self.host, &self.threads);
        let mut start = 0;
        while start < extent {
            let len = window.min(extent - start);
            let (slot, stage) = ring.next_free(|stage, landing| {
                scatter_landing(stage, landing, host, layout, threads, &**backend)
            })?;
            // SAFETY: the closure queues one copy into the window it is
            // given, on `stream`; the stage keeps the buffer until it is
            // done, and the host reads it only after that.
            unsafe {
                stage.lend(stream, len, |part| {
                    queue_download(&device, label, start, part, stream)
                })?;
            }
            ring.land(
                slot,
                Landing {
                    chunk: chunk.index,
                    runs: runs.clone(),
                    start,
                    len,
                },
            );
            start += len;
        }
        Ok(())
    }

    fn scatter_landed(&mut self, chunk: usize, wait: bool) -> Result<bool, MemError> {
        let Some(ring) = self.output.as_mut().or(self.input.as_mut()) else {
            return Ok(true);
        };
        let (backend, layout) = (&*self.backend, &self.layout);
        let (host, threads) = (&mut self.host, &self.threads);
        while let Some(slot) = ring.oldest_through(chunk) {
            if !wait && !ring.is_settled(slot)? {
                return Ok(false);
            }
            ring.flush(slot, |stage, landing| {
                scatter_landing(stage, landing, host, layout, threads, backend)
            })?;
        }
        Ok(true)
    }
}
