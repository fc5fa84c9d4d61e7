//! The chunk streamer: one instance's chunks of host arrays moved to and
//! from its device arrays under one plan; see
//! [chunked transfers](crate::guide::host_memory#chunked-transfers).

use std::ops::Range;

use super::BatchError;
use super::layout::ChunkLayout;
use super::staging_ring::StagingRing;
use super::staging_threads::StagingThreads;
use crate::Chunk;
use crate::host::HostArray;
use crate::host::StagingPool;
use crate::ids::{InstanceId, Named};
use crate::plan::chunks::Chunks;
use crate::streams::CurrentStream;
use crate::{ArraySide, ChunkPlan, DType, DeviceArray, Element, Instance, MemError, MemoryManager};
use std::fmt;

/// Moves chunks of host arrays to and from device arrays of one chunk, for
/// one instance and one chunk plan. Made by [`MemoryManager::chunk_streamer`].
///
/// Host arrays hold the whole batch; device arrays have the plan's chunked
/// shape (the chunk axis, any axis, set to the chunk length).
/// [`copy_in`](Self::copy_in) and [`copy_out`](Self::copy_out) move one
/// chunk and wait for it; [`pipeline`](Self::pipeline) and
/// [`pipeline_sets`](Self::pipeline_sets) run the whole batch with the
/// copies of some chunks overlapping the computation of another.
pub struct ChunkStreamer<'a> {
    pub(super) manager: &'a MemoryManager,
    pub(super) instance: &'a Instance,
    plan: ChunkPlan,
    /// Where the plan's runs start in the host arrays: 0, or a device's
    /// first run when a batch is split across devices.
    first_run: usize,
    /// The runs of the host arrays: the plan's, or the whole batch's when
    /// the plan covers one device's share of it.
    batch_runs: usize,
    pool: StagingPool,
    staging_bytes: usize,
    min_strided_row_bytes: usize,
    /// The staging threads; `None`: the manager's.
    threads: Option<StagingThreads>,
}

impl MemoryManager {
    /// A streamer for `instance`'s arrays under `plan`, with the manager's
    /// staging pool (give it another with
    /// [`ChunkStreamer::with_pool`]).
    ///
    /// An inconsistent plan is [`MemError::InvalidPlan`]
    /// (see [`ChunkPlan::validate`]).
    pub fn chunk_streamer<'a>(
        &'a self,
        instance: &'a Instance,
        plan: &ChunkPlan,
    ) -> Result<ChunkStreamer<'a>, MemError> {
        plan.validate()?;
        Ok(ChunkStreamer {
            manager: self,
            instance,
            plan: *plan,
            first_run: 0,
            batch_runs: plan.total_runs,
            pool: self.staging_pool(),
            staging_bytes: StagingPool::BYTES_PER_TRANSFER,
            min_strided_row_bytes: ChunkStreamer::DEFAULT_MIN_STRIDED_ROW_BYTES,
            threads: None,
        })
    }
}

impl<'a> ChunkStreamer<'a> {
    /// The narrowest row, in bytes, that a pipeline moves by one strided
    /// (2D) copy of the copy engines instead of through a staging buffer,
    /// by default ([`with_min_strided_row_bytes`](Self::with_min_strided_row_bytes)).
    /// A strided copy costs about 2.5 ns a row
    /// ([`SimBackend::DEFAULT_STRIDED_ROW_PS`](crate::SimBackend::DEFAULT_STRIDED_ROW_PS))
    /// where staging costs the host the bytes at 12 GB/s
    /// ([`Calibration::fixed`](crate::backend::Calibration::fixed)):
    /// it is the faster above 30 bytes a row (see
    /// [strided copies](crate::guide::host_memory#strided-copies-of-page-locked-chunks)).
    pub const DEFAULT_MIN_STRIDED_ROW_BYTES: usize = 32;

    /// Moves chunks of page-locked host arrays whose rows hold at least
    /// `bytes` by one strided copy, and stages narrower ones (default
    /// [`DEFAULT_MIN_STRIDED_ROW_BYTES`](Self::DEFAULT_MIN_STRIDED_ROW_BYTES);
    /// `usize::MAX` stages every chunk that is not one block of its array).
    pub fn with_min_strided_row_bytes(mut self, bytes: usize) -> Self {
        self.min_strided_row_bytes = bytes;
        self
    }

    /// The narrowest row a pipeline moves by one strided copy, in bytes.
    pub fn min_strided_row_bytes(&self) -> usize {
        self.min_strided_row_bytes
    }

    /// Gathers and scatters staged chunks (pageable and spilled arrays,
    /// rows too narrow for a strided copy) with `threads` (default: the
    /// manager's, shared by its streamers).
    pub fn with_staging_threads(mut self, threads: StagingThreads) -> Self {
        self.threads = Some(threads);
        self
    }

    /// The threads that gather and scatter staged chunks.
    pub fn staging_threads(&self) -> StagingThreads {
        self.threads
            .clone()
            .unwrap_or_else(|| self.manager.staging_threads())
    }

    /// Uses `pool` for staging buffers, so that they are reused across streamers.
    pub fn with_pool(mut self, pool: StagingPool) -> Self {
        self.pool = pool;
        self
    }

    /// Bounds each staging buffer to `bytes` (default
    /// [`StagingPool::BYTES_PER_TRANSFER`]; at least one element is staged).
    pub fn with_staging_bytes(mut self, bytes: usize) -> Self {
        self.staging_bytes = bytes;
        self
    }

    /// The chunk plan.
    pub fn plan(&self) -> &ChunkPlan {
        &self.plan
    }

    /// The staging pool.
    pub fn pool(&self) -> &StagingPool {
        &self.pool
    }

    /// Streams the runs `runs` of host arrays that hold `batch_runs` runs
    /// (a device's share of a batch split across devices) instead of host
    /// arrays of the plan's own runs: chunk `k` of the plan moves runs
    /// `runs.start + k * chunk_length..`. `runs` must have the plan's run
    /// count and end within the batch ([`MemError::RunRange`] otherwise).
    pub fn for_runs(mut self, runs: Range<usize>, batch_runs: usize) -> Result<Self, MemError> {
        if runs.len() != self.plan.total_runs || runs.start > runs.end || runs.end > batch_runs {
            return Err(MemError::RunRange {
                start: runs.start,
                end: runs.end,
                plan_runs: self.plan.total_runs,
                batch_runs,
            });
        }
        self.first_run = runs.start;
        self.batch_runs = batch_runs;
        Ok(self)
    }

    /// The runs of the host arrays this streamer moves.
    pub fn runs(&self) -> Range<usize> {
        // `for_runs` checked that the plan's runs end within the batch.
        self.first_run..self.first_run + self.plan.total_runs
    }

    /// The plan's chunks, with the runs they move in the host arrays.
    pub fn iter_chunks(
        &self,
    ) -> impl DoubleEndedIterator<Item = Chunk> + ExactSizeIterator + Clone + fmt::Debug + use<>
    {
        self.chunk_iter()
    }

    /// [`iter_chunks`](Self::iter_chunks), as the type the pipeline narrows.
    pub(crate) fn chunk_iter(&self) -> Chunks {
        self.plan.chunk_iter().starting_at(self.first_run)
    }

    /// Chunk `index`, with the runs it moves in the host arrays.
    fn chunk(&self, index: usize) -> Result<Chunk, MemError> {
        self.chunk_iter()
            .nth(index)
            .ok_or(MemError::ChunkOutOfRange {
                chunk: index,
                chunks: self.plan.chunks,
            })
    }

    /// Copies chunk `chunk` of `host` (the whole batch, chunked along `axis`)
    /// into `device` (one chunk), and waits for it: a run of the
    /// [`pipeline`](Self::pipeline) over that one chunk, so it takes the
    /// same route (direct, strided or staged).
    pub fn copy_in<T: Element>(
        &self,
        host: &HostArray<T>,
        device: &DeviceArray<T>,
        axis: usize,
        chunk: usize,
    ) -> Result<(), MemError> {
        self.chunk(chunk)?;
        self.pipeline()
            .chunk_range(chunk..chunk + 1)
            .input(host, device.along(axis))
            .run(|_, _| Ok(()))
            .map_err(BatchError::into_error)
    }

    /// Copies `device` (one chunk) into chunk `chunk` of `host` (the whole
    /// batch, chunked along `axis`), and waits for it, as
    /// [`copy_in`](Self::copy_in) does. Only the chunk's runs are written.
    pub fn copy_out<T: Element>(
        &self,
        device: &DeviceArray<T>,
        host: &mut HostArray<T>,
        axis: usize,
        chunk: usize,
    ) -> Result<(), MemError> {
        self.chunk(chunk)?;
        self.pipeline()
            .chunk_range(chunk..chunk + 1)
            .output(host, device.along(axis))
            .run(|_, _| Ok(()))
            .map_err(BatchError::into_error)
    }

    pub(super) fn bind_stream(&self) -> Result<CurrentStream, MemError> {
        self.manager.bind_stream(self.instance)
    }

    /// The instance with its name, as logs and messages print it:
    /// `'solver' (instance 7)`, or `instance 7` when unnamed.
    pub(crate) fn named_instance(&self) -> Named<InstanceId> {
        Named {
            id: self.instance.id,
            name: self.instance.name.clone(),
        }
    }

    /// Checks the shapes of a host array and a device array against the plan
    /// and returns their layout. A host array whose shape is the transpose of
    /// the one the device array needs is named as such.
    pub(super) fn layout(
        &self,
        host_shape: &[usize],
        label: &str,
        device_shape: &[usize],
        axis: usize,
    ) -> Result<ChunkLayout, MemError> {
        self.matching_layout(host_shape, label, device_shape, axis)
            .map_err(|error| match error {
                MemError::ChunkShapeMismatch { .. } => self
                    .transposed(host_shape, label, device_shape, axis)
                    .unwrap_or(error),
                other => other,
            })
    }

    /// A [`ChunkShapeMismatch`](MemError::ChunkShapeMismatch) of the host
    /// array, naming the shape it needs and the axis to bind along, when
    /// `host_shape` is a permutation, not the same order, of the host shape
    /// `device_shape` needs along one of its axes of one chunk's length (the
    /// bound `axis` first).
    fn transposed(
        &self,
        host_shape: &[usize],
        label: &str,
        device_shape: &[usize],
        axis: usize,
    ) -> Option<MemError> {
        let mut sorted_host = host_shape.to_vec();
        sorted_host.sort_unstable();
        let run_axes = std::iter::once(axis).chain((0..device_shape.len()).filter(|&a| a != axis));
        run_axes
            .filter(|&a| device_shape.get(a) == Some(&self.plan.chunk_length))
            .find_map(|run_axis| {
                let needed = host_shape_chunked(device_shape, run_axis, self.batch_runs);
                let mut sorted_needed = needed.clone();
                sorted_needed.sort_unstable();
                (needed != host_shape && sorted_needed == sorted_host).then(|| {
                    MemError::ChunkShapeMismatch {
                        label: label.to_owned(),
                        side: ArraySide::Host,
                        found: host_shape.to_vec(),
                        expected: needed,
                        axis: run_axis,
                        total_runs: self.batch_runs,
                        chunk_length: self.plan.chunk_length,
                        runs_axis: None,
                    }
                })
            })
    }

    /// [`layout`](Self::layout) without naming a transposed host array.
    fn matching_layout(
        &self,
        host_shape: &[usize],
        label: &str,
        device_shape: &[usize],
        axis: usize,
    ) -> Result<ChunkLayout, MemError> {
        let mismatch = |side, found: &[usize], expected: Vec<usize>, runs: Option<usize>| {
            MemError::ChunkShapeMismatch {
                label: label.to_owned(),
                side,
                found: found.to_vec(),
                expected,
                axis,
                total_runs: self.batch_runs,
                chunk_length: self.plan.chunk_length,
                runs_axis: runs.and_then(|runs| other_axis_of_length(found, axis, runs)),
            }
        };
        let mut expected_host = host_shape.to_vec();
        match expected_host.get_mut(axis) {
            Some(d) => *d = self.batch_runs,
            None => {
                return Err(MemError::InvalidChunkAxis {
                    axis,
                    shape: host_shape.to_vec(),
                });
            }
        }
        if expected_host != host_shape {
            return Err(mismatch(
                ArraySide::Host,
                host_shape,
                expected_host,
                Some(self.batch_runs),
            ));
        }
        // The device array was allocated from the declaration: when it
        // holds one chunk on the axis but disagrees elsewhere, the host
        // array is the one made for other dims.
        if device_shape.get(axis) == Some(&self.plan.chunk_length)
            && device_shape.len() == host_shape.len()
            && device_shape != host_shape_chunked(host_shape, axis, self.plan.chunk_length)
        {
            let expected_host = host_shape_chunked(device_shape, axis, self.batch_runs);
            return Err(mismatch(ArraySide::Host, host_shape, expected_host, None));
        }
        let layout = ChunkLayout::new(host_shape, axis, self.plan.chunk_length)?;
        let expected_device = layout.chunk_shape();
        if device_shape != expected_device {
            return Err(mismatch(
                ArraySide::Device,
                device_shape,
                expected_device,
                Some(self.plan.chunk_length),
            ));
        }
        Ok(layout)
    }

    /// The staging buffers of `label` under `layout`, for elements of
    /// `dtype`, acquired when reserved.
    pub(super) fn staging_ring(
        &self,
        layout: &ChunkLayout,
        label: &str,
        dtype: DType,
    ) -> StagingRing {
        let element = dtype.size_bytes().max(1);
        let shape = if layout.chunk_elements().saturating_mul(element) <= self.staging_bytes {
            layout.chunk_shape()
        } else {
            vec![(self.staging_bytes / element).max(1)]
        };
        StagingRing::new(self.pool.clone(), label.to_owned(), shape, dtype)
    }
}

impl std::fmt::Debug for ChunkStreamer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkStreamer")
            .field("instance", &format_args!("{}", self.named_instance()))
            .field("plan", &self.plan)
            .field("staging_bytes", &self.staging_bytes)
            .field("min_strided_row_bytes", &self.min_strided_row_bytes)
            .field("threads", &self.threads)
            .finish()
    }
}

/// `shape` with its axis `axis` (inside it) set to `chunk_length`.
fn host_shape_chunked(shape: &[usize], axis: usize, chunk_length: usize) -> Vec<usize> {
    let mut chunked = shape.to_vec();
    if let Some(d) = chunked.get_mut(axis) {
        *d = chunk_length;
    }
    chunked
}

/// The one axis of `shape` other than `axis` of length `len`, if exactly one
/// has it: the chunk axis the caller likely meant.
fn other_axis_of_length(shape: &[usize], axis: usize, len: usize) -> Option<usize> {
    let mut matching = (0..shape.len()).filter(|&a| a != axis && shape[a] == len);
    let first = matching.next()?;
    matching.next().is_none().then_some(first)
}
