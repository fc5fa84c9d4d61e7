//! Host arrays: a batch's inputs and results in host memory, pinned,
//! pageable, or spilled to a file.

use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::HostMemoryKind;
use super::spill::SpillFile;
use super::tally::PinnedUse;
use crate::backend::{Backend, BackendError, HostWork, PinnedBlock};
use crate::block::HostBlock;
use crate::{DType, Element, Instance, MemError, MemoryManager};

/// The memory behind a host array, as 64-byte aligned bytes.
enum Storage {
    Pinned(PinnedStorage),
    Pageable(HostBlock),
    Spilled(SpillFile),
}

/// A page-locked block with the address of its bytes, taken once.
///
/// A host array's asynchronous copies are ordered by the array's own code
/// (a pending copy owns the array; a pipeline waits for each chunk's copy
/// before it touches the chunk's bytes, while other chunks' copies of the
/// same array may still run), so its accesses go straight to the bytes.
/// Asking the block each time would make a simulated block check every
/// access against the whole block's copies in flight.
struct PinnedStorage {
    /// Owns the memory `data` points into; freed with the storage unless
    /// `retired`.
    block: ManuallyDrop<Box<dyn PinnedBlock>>,
    data: std::ptr::NonNull<u8>,
    len: usize,
    /// Set when a copy using the block could not be waited for: the block
    /// is leaked rather than freed under it.
    retired: AtomicBool,
}

// SAFETY: the block is Send + Sync and owns the bytes `data` points into;
// shared access only reads them and writes need `&mut self`, as for the
// block itself.
unsafe impl Send for PinnedStorage {}
// SAFETY: as for Send.
unsafe impl Sync for PinnedStorage {}

impl PinnedStorage {
    fn new(mut block: Box<dyn PinnedBlock>) -> Self {
        let len = block.bytes_mut().len();
        // The block's own pointer, not one derived from a borrow of its
        // bytes: a download the backend lands through it leaves it valid.
        let data = block.base();
        PinnedStorage {
            block: ManuallyDrop::new(block),
            data,
            len,
            retired: AtomicBool::new(false),
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes of the block live at `data` while the block
        // does, and the block is never asked for them again.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`; `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
    }
}

impl Drop for PinnedStorage {
    fn drop(&mut self) {
        if self.retired.load(Ordering::Acquire) {
            tracing::warn!(
                bytes = %crate::Bytes(u64::try_from(self.len).unwrap_or(u64::MAX)),
                "a page-locked host array is leaked: a copy using it could not be waited for"
            );
            return;
        }
        // SAFETY: the block is dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.block) };
    }
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Pinned(pinned) => pinned.bytes(),
            Storage::Pageable(block) => block.bytes(),
            Storage::Spilled(file) => file.bytes(),
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Pinned(pinned) => pinned.bytes_mut(),
            Storage::Pageable(block) => block.bytes_mut(),
            Storage::Spilled(file) => file.bytes_mut(),
        }
    }

    /// The first byte, from the memory's own pointer, never through a
    /// borrow of the bytes (see [`PinnedBlock`]): accesses derived from it
    /// stay valid across the backend's writes into page-locked memory.
    fn base_mut(&mut self) -> std::ptr::NonNull<u8> {
        match self {
            Storage::Pinned(pinned) => pinned.data,
            Storage::Pageable(block) => block.base(),
            Storage::Spilled(file) => file.base_mut(),
        }
    }

    fn kind(&self) -> HostMemoryKind {
        match self {
            Storage::Pinned(_) => HostMemoryKind::Pinned,
            Storage::Pageable(_) => HostMemoryKind::Pageable,
            Storage::Spilled(_) => HostMemoryKind::Spilled,
        }
    }
}

/// The error for page-locked host memory the backend could not provide.
pub(crate) fn host_pinned_error(backend: &dyn Backend, error: BackendError) -> MemError {
    match error {
        BackendError::OutOfMemory { requested, .. } => MemError::HostOutOfMemory {
            requested,
            what: "page-locked host memory",
        },
        other => MemError::backend(backend.name(), other),
    }
}

/// Element count and byte size of `shape`, or an error when they overflow.
pub(crate) fn shape_size(
    shape: &[usize],
    element_bytes: usize,
) -> Result<(usize, usize), MemError> {
    let too_large = || MemError::HostArraySize {
        shape: shape.to_vec(),
        element_bytes,
    };
    let elements = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(too_large)?;
    let bytes = elements.checked_mul(element_bytes).ok_or_else(too_large)?;
    isize::try_from(bytes).map_err(|_| too_large())?;
    Ok((elements, bytes))
}

/// A typed array in host memory, in row-major order, holding a whole batch.
///
/// Made by [`MemoryManager::create_host_array`].
/// A spilled array's file is unlinked as soon as it is made, so nothing is
/// left on disk however the process ends; dropping the array unmaps it and
/// gives its space back.
pub struct HostArray<T: Element> {
    array: AnyHostArray,
    _element: PhantomData<T>,
}

impl<T: Element> HostArray<T> {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.array.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        // The array's bytes fit in memory, so its element count fits a usize.
        self.array.shape.iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the elements.
    pub fn nbytes(&self) -> u64 {
        self.array.nbytes()
    }

    /// The kind of memory the array lives in.
    pub fn kind(&self) -> HostMemoryKind {
        self.array.kind()
    }

    /// Where a spilled array's file was made; it is unlinked already, so
    /// nothing is at this path (the mapping alone keeps the data).
    pub fn spill_path(&self) -> Option<&Path> {
        match &self.array.storage {
            Storage::Spilled(file) => Some(file.path()),
            _ => None,
        }
    }

    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        let bytes = self.len() * size_of::<T>();
        let bytes = self.array.storage.bytes().get(..bytes);
        bytes
            .and_then(|b| bytemuck::try_cast_slice(b).ok())
            .unwrap_or(&[])
    }

    /// The elements, writable.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        let bytes = self.len() * size_of::<T>();
        let bytes = self.array.storage.bytes_mut().get_mut(..bytes);
        bytes
            .and_then(|b| bytemuck::try_cast_slice_mut(b).ok())
            .unwrap_or(&mut [])
    }

    /// The first element, for accesses that outlive one borrow (each of a
    /// device set's devices writes its own runs): from the memory's own
    /// pointer, valid for `len()` elements while the array lives.
    pub(crate) fn as_mut_ptr(&mut self) -> std::ptr::NonNull<T> {
        self.array.storage.base_mut().cast()
    }

    /// The elements as a vector.
    pub fn to_vec(&self) -> Vec<T> {
        self.as_slice().to_vec()
    }

    /// What makes dropping the array leak its page-locked memory instead of
    /// freeing it, once set: an asynchronous copy using it could not be
    /// waited for. `None` for pageable and spilled memory, never handed to
    /// a copy directly.
    pub(crate) fn retirement(&self) -> Option<&AtomicBool> {
        match &self.array.storage {
            Storage::Pinned(pinned) => Some(&pinned.retired),
            _ => None,
        }
    }

    /// Frees the array now, as dropping it does: pinned memory goes back to
    /// the backend, and a spilled array's file (unlinked already) is
    /// unmapped, which gives its disk space back. Nothing can fail.
    pub fn close(self) {
        drop(self);
    }
}

impl<T: Element> AsRef<[T]> for HostArray<T> {
    fn as_ref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Element> AsMut<[T]> for HostArray<T> {
    fn as_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<T: Element> fmt::Debug for HostArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostArray")
            .field("dtype", &crate::dtype::dtype_of::<T>())
            .field("shape", &self.shape())
            .field("kind", &self.kind())
            .field("spill_path", &self.spill_path())
            .finish()
    }
}

/// The storage of a [`HostArray`], its shape and its element type.
pub(crate) struct AnyHostArray {
    storage: Storage,
    shape: Vec<usize>,
    dtype: DType,
}

impl AnyHostArray {
    /// The kind of memory the array lives in.
    fn kind(&self) -> HostMemoryKind {
        self.storage.kind()
    }

    /// Bytes of the elements.
    fn nbytes(&self) -> u64 {
        (self.shape.iter().product::<usize>() * self.dtype.size_bytes()) as u64
    }
}

impl fmt::Debug for AnyHostArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyHostArray")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("kind", &self.kind())
            .finish()
    }
}

impl MemoryManager {
    /// A host array of `shape` for `instance`, holding a copy of `like`
    /// (which must have exactly as many elements) or zeros, in `kind`
    /// memory (cubie's `create_host_array`). With `None` for the kind, the
    /// manager picks it: spilled above the instance's spill threshold
    /// ([`Registration::host_spill_threshold`](crate::Registration::host_spill_threshold),
    /// else 80% of RAM), else pinned up to
    /// [`ManagerConfig::pinned_max_bytes`](crate::ManagerConfig::pinned_max_bytes),
    /// else pageable.
    ///
    /// Pinned memory comes from the backend; spill files go to the
    /// instance's spill directory (its own, its owner's, the manager's,
    /// else the system's temporary directory).
    ///
    /// ```
    /// use cubie_mem::{HostMemoryKind, MemoryManager, Registration, SimBackend};
    ///
    /// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
    /// let solver = mgr.register(Registration::new()).unwrap();
    /// let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
    /// let host = mgr.create_host_array([2, 3, 4], HostMemoryKind::Pageable, Some(&data), &solver).unwrap();
    /// assert_eq!(host.as_slice(), &data[..]);
    /// let zeros = mgr.create_host_array::<f64>([5], None, None, &solver).unwrap();
    /// assert_eq!((zeros.as_slice(), zeros.kind()), (&[0.0; 5][..], HostMemoryKind::Pinned));
    /// ```
    pub fn create_host_array<T: Element>(
        &self,
        shape: impl Into<Vec<usize>>,
        kind: impl Into<Option<HostMemoryKind>>,
        like: Option<&[T]>,
        instance: &Instance,
    ) -> Result<HostArray<T>, MemError> {
        let shape = shape.into();
        let (len, bytes) = shape_size(&shape, size_of::<T>())?;
        let kind = match kind.into() {
            Some(kind) => kind,
            None => self.choose_host_memory_kind(bytes as u64, instance),
        };
        if let Some(like) = like
            && like.len() != len
        {
            return Err(MemError::LengthMismatch {
                label: "like".into(),
                expected: len,
                found: like.len(),
            });
        }
        let dtype = crate::dtype::dtype_of::<T>();
        let storage = self.host_storage(&shape, dtype, kind, like.is_some(), instance)?;
        let array = AnyHostArray {
            storage,
            shape,
            dtype,
        };
        let mut array = HostArray {
            array,
            _element: PhantomData,
        };
        if let Some(like) = like {
            array.as_mut_slice().copy_from_slice(like);
        }
        Ok(array)
    }

    fn host_storage(
        &self,
        shape: &[usize],
        dtype: DType,
        kind: HostMemoryKind,
        overwritten: bool,
        instance: &Instance,
    ) -> Result<Storage, MemError> {
        self.check_registered(instance)?;
        let (_, bytes) = shape_size(shape, dtype.size_bytes())?;
        Ok(match kind {
            HostMemoryKind::Pinned => {
                // A block the caller fills from data need not be zeroed first.
                let block = if overwritten {
                    self.backend().alloc_pinned_for_overwrite(bytes as u64)
                } else {
                    self.backend().alloc_pinned(bytes as u64)
                };
                Storage::Pinned(PinnedStorage::new(self.inner.pinned_host.count(
                    block.map_err(|error| host_pinned_error(&**self.backend(), error))?,
                    PinnedUse::HostArray,
                )))
            }
            HostMemoryKind::Pageable => {
                Storage::Pageable(HostBlock::zeroed(bytes, "a pageable host array")?)
            }
            HostMemoryKind::Spilled => {
                let file = SpillFile::create(&self.spill_directory(instance)?, bytes)?;
                // Its pages are touched now (pre-faulted) or by the first
                // writes: the model places their cost here.
                self.backend()
                    .host_work(HostWork::FirstTouch, bytes as u64, 1);
                Storage::Spilled(file)
            }
        })
    }
}
