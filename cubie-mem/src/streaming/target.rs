//! The array side of a chunk pipeline binding: a device array or a pinned
//! array, and the axis that holds its runs.

use std::fmt;
use std::sync::Arc;

use crate::array::slot::Slot;
use crate::{DeviceArray, Element, MemError, PinnedArray};

/// What a [`ChunkPipeline`](crate::ChunkPipeline) binding moves each chunk
/// to and from, and along which axis.
///
/// - A [`DeviceArray`]: chunks are copied to and from it asynchronously on
///   the pipeline's copy streams.
/// - A [`PinnedArray`] (`memory = pinned`): page-locked host memory that a
///   kernel reads and writes in place (on CUDA through its device address),
///   so nothing crosses the bus; each chunk is gathered into it on the host
///   once the chunk that last used it has computed, and scattered out of it
///   once its own computation is done.
///
/// `&array` binds along the array's own chunk axis (the one its request
/// gave, see [`DeviceArray::chunk_axis`]); [`DeviceArray::along`] and
/// [`PinnedArray::along`] name another.
///
/// ```
/// use cubie_mem::{ArrayRequest, ChunkTarget, MemoryManager, Registration, SimBackend};
///
/// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
/// let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
/// mgr.queue_request(&solver, [("x", ArrayRequest::of::<f64>([3, 100]).chunk_axis(1).total_runs(100))])?;
/// let mut response = mgr.allocate_queue_for(&solver)?;
/// let x = response.take::<f64>("x")?;
/// assert_eq!(ChunkTarget::from(&x).axis(), Some(1));
/// assert_eq!(x.along(0).axis(), Some(0));
/// # Ok::<(), cubie_mem::MemError>(())
/// ```
#[derive(Clone, Copy)]
pub struct ChunkTarget<'a, T: Element> {
    array: TargetArray<'a, T>,
    axis: Option<usize>,
}

/// The array a binding names.
#[derive(Clone, Copy)]
enum TargetArray<'a, T: Element> {
    Device(&'a DeviceArray<T>),
    Pinned(&'a PinnedArray<T>),
}

impl<'a, T: Element> ChunkTarget<'a, T> {
    /// The axis the binding chunks along: the one named with `along`, else
    /// the array's own chunk axis (`None` for an unchunkable array).
    pub fn axis(&self) -> Option<usize> {
        self.axis.or_else(|| self.slot().chunk_axis())
    }

    /// The axis, or an error naming the array when it holds no runs.
    pub(crate) fn run_axis(&self) -> Result<usize, MemError> {
        self.axis().ok_or_else(|| MemError::NoRunAxis {
            label: self.label().to_owned(),
        })
    }

    /// The label the array was requested under.
    pub fn label(&self) -> &'a str {
        match self.array {
            TargetArray::Device(array) => array.label(),
            TargetArray::Pinned(array) => array.label(),
        }
    }

    /// The array's (chunked) shape.
    pub fn shape(&self) -> &'a [usize] {
        match self.array {
            TargetArray::Device(array) => array.shape(),
            TargetArray::Pinned(array) => array.shape(),
        }
    }

    /// The allocation behind the array: its identity and owner.
    pub(crate) fn slot(&self) -> &'a Arc<Slot> {
        match self.array {
            TargetArray::Device(array) => array.slot(),
            TargetArray::Pinned(array) => array.slot(),
        }
    }
}

impl<'a, T: Element> From<&'a DeviceArray<T>> for ChunkTarget<'a, T> {
    fn from(array: &'a DeviceArray<T>) -> Self {
        ChunkTarget {
            array: TargetArray::Device(array),
            axis: None,
        }
    }
}

impl<'a, T: Element> From<&'a PinnedArray<T>> for ChunkTarget<'a, T> {
    fn from(array: &'a PinnedArray<T>) -> Self {
        ChunkTarget {
            array: TargetArray::Pinned(array),
            axis: None,
        }
    }
}

impl<T: Element> DeviceArray<T> {
    /// This array as a pipeline binding's target chunked along `axis`
    /// (of the host array, which has the batch's runs there) instead of
    /// its own chunk axis.
    pub fn along(&self, axis: usize) -> ChunkTarget<'_, T> {
        ChunkTarget {
            array: TargetArray::Device(self),
            axis: Some(axis),
        }
    }
}

impl<T: Element> PinnedArray<T> {
    /// This array as a pipeline binding's target chunked along `axis`
    /// instead of its own chunk axis.
    pub fn along(&self, axis: usize) -> ChunkTarget<'_, T> {
        ChunkTarget {
            array: TargetArray::Pinned(self),
            axis: Some(axis),
        }
    }
}

impl<T: Element> fmt::Debug for ChunkTarget<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let memory = match self.array {
            TargetArray::Device(_) => "device",
            TargetArray::Pinned(_) => "pinned",
        };
        f.debug_struct("ChunkTarget")
            .field("label", &self.label())
            .field("memory", &memory)
            .field("axis", &self.axis())
            .finish()
    }
}
