//! Typed handles to allocated memory, and the response that delivers them.
//!
//! The manager owns every allocation; handles are shared views of it. When the
//! manager frees, evicts or replaces an allocation, every handle to it stops
//! working: each use then returns [`MemError::Released`], never touching freed
//! memory. Operations on a handle hold a read lock on its memory, so a release
//! waits for copies in flight.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::backend::{Backend, DevicePtr, PinnedBlock, StreamHandle};
use crate::plan::ChunkPlan;
use crate::streams::current_stream_for;
use crate::{DType, Element, MemError, MemoryKind};

/// Why a handle's memory is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    /// Evicted to make room for another owner's batch.
    Evicted,
    /// Freed explicitly (`free`, `free_all`, `invalidate_all`).
    Freed,
    /// Replaced by a later allocation of the same label.
    Replaced,
    /// Its instance was deregistered.
    Deregistered,
}

impl fmt::Display for ReleaseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReleaseReason::Evicted => "evicted to make room for another batch",
            ReleaseReason::Freed => "freed",
            ReleaseReason::Replaced => "replaced by a newer allocation of the same label",
            ReleaseReason::Deregistered => "released when its instance was dropped",
        })
    }
}

enum Memory {
    Device(DevicePtr),
    Pinned(Box<dyn PinnedBlock>),
    Released(ReleaseReason),
}

/// One allocation, shared by the manager and every handle to it.
pub(crate) struct Slot {
    label: Arc<str>,
    dtype: DType,
    kind: MemoryKind,
    bytes: u64,
    shape: Vec<usize>,
    backend: Arc<dyn Backend>,
    stream: AtomicU64,
    memory: RwLock<Memory>,
}

impl Slot {
    /// Allocates `bytes` of `kind` memory for `label`, ordered on the
    /// thread's current stream when one is bound, else on `stream`.
    pub(crate) fn allocate(
        backend: &Arc<dyn Backend>,
        label: &str,
        dtype: DType,
        kind: MemoryKind,
        bytes: u64,
        shape: Vec<usize>,
        stream: StreamHandle,
    ) -> Result<Arc<Slot>, MemError> {
        let memory = match kind {
            // Inside a current-stream guard the allocation is ordered on the
            // bound stream; later copies and the free default to `stream`.
            MemoryKind::Device => {
                let order = current_stream_for(backend).unwrap_or(stream);
                Memory::Device(backend.alloc_device(bytes, order)?)
            }
            MemoryKind::Pinned => Memory::Pinned(backend.alloc_pinned(bytes)?),
        };
        Ok(Arc::new(Slot {
            label: Arc::from(label),
            dtype,
            kind,
            bytes,
            shape,
            backend: Arc::clone(backend),
            stream: AtomicU64::new(stream.0),
            memory: RwLock::new(memory),
        }))
    }

    /// A new slot taking over this slot's memory (reuse of a buffer at least
    /// as large); this slot's handles then report `Replaced`.
    pub(crate) fn reuse(&self, dtype: DType, shape: Vec<usize>) -> Result<Arc<Slot>, MemError> {
        let mut memory = self.write();
        if let Memory::Released(reason) = *memory {
            return Err(self.released(reason));
        }
        let taken = std::mem::replace(&mut *memory, Memory::Released(ReleaseReason::Replaced));
        Ok(Arc::new(Slot {
            label: Arc::clone(&self.label),
            dtype,
            kind: self.kind,
            bytes: self.bytes,
            shape,
            backend: Arc::clone(&self.backend),
            stream: AtomicU64::new(self.stream.load(Ordering::Relaxed)),
            memory: RwLock::new(taken),
        }))
    }

    /// Frees the memory (stream-ordered for device memory); later uses of any
    /// handle report `reason`. Returns the bytes released (0 if already gone).
    pub(crate) fn release(&self, reason: ReleaseReason) -> Result<u64, MemError> {
        let previous = std::mem::replace(&mut *self.write(), Memory::Released(reason));
        match previous {
            Memory::Device(ptr) => {
                self.backend.free_device(ptr, self.stream())?;
                Ok(self.bytes)
            }
            Memory::Pinned(block) => {
                drop(block);
                Ok(self.bytes)
            }
            Memory::Released(_) => Ok(0),
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub(crate) fn is_live(&self) -> bool {
        self.release_reason().is_none()
    }

    pub(crate) fn kind(&self) -> MemoryKind {
        self.kind
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    pub(crate) fn set_stream(&self, stream: StreamHandle) {
        self.stream.store(stream.0, Ordering::Relaxed);
    }

    fn stream(&self) -> StreamHandle {
        StreamHandle(self.stream.load(Ordering::Relaxed))
    }

    /// The stream copies are ordered on: the thread's current stream when one
    /// is bound for this backend, else the allocation's group stream.
    fn copy_stream(&self) -> StreamHandle {
        current_stream_for(&self.backend).unwrap_or_else(|| self.stream())
    }

    fn read(&self) -> RwLockReadGuard<'_, Memory> {
        // Memory is replaced whole; a poisoned lock still holds a consistent value.
        self.memory.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Memory> {
        self.memory.write().unwrap_or_else(|p| p.into_inner())
    }

    fn released(&self, reason: ReleaseReason) -> MemError {
        MemError::Released {
            label: self.label.to_string(),
            reason,
        }
    }

    fn release_reason(&self) -> Option<ReleaseReason> {
        match *self.read() {
            Memory::Released(reason) => Some(reason),
            _ => None,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let memory = self.memory.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Memory::Device(ptr) = *memory {
            if let Err(error) = self.backend.free_device(ptr, self.stream()) {
                tracing::warn!(label = %self.label, %error, "freeing an abandoned device allocation failed");
            }
        }
    }
}

/// Checks that a host slice of `found` elements matches an array of `expected`.
fn check_length(label: &str, expected: usize, found: usize) -> Result<(), MemError> {
    if expected == found {
        Ok(())
    } else {
        Err(MemError::LengthMismatch {
            label: label.to_owned(),
            expected,
            found,
        })
    }
}

/// Shared parts of the typed handles.
#[derive(Clone)]
struct Handle<T> {
    slot: Arc<Slot>,
    _element: PhantomData<fn() -> T>,
}

impl<T: Element> Handle<T> {
    fn len(&self) -> usize {
        self.slot.shape.iter().product()
    }

    /// Copies `src` into the array starting at element `offset`.
    fn write_at(&self, offset: usize, src: &[T]) -> Result<(), MemError> {
        self.check_range(offset, src.len())?;
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let byte_offset = offset * size_of::<T>();
        if self.slot.kind() == MemoryKind::Device {
            return match &*self.slot.read() {
                Memory::Device(ptr) => self.slot.backend.copy_to_device(
                    *ptr,
                    byte_offset as u64,
                    bytes,
                    self.slot.copy_stream(),
                ),
                Memory::Released(reason) => Err(self.slot.released(*reason)),
                Memory::Pinned(_) => Ok(()),
            };
        }
        let mut memory = self.slot.write();
        match &mut *memory {
            Memory::Device(_) => Ok(()),
            Memory::Pinned(block) => {
                block.bytes_mut()[byte_offset..byte_offset + bytes.len()].copy_from_slice(bytes);
                Ok(())
            }
            Memory::Released(reason) => Err(self.slot.released(*reason)),
        }
    }

    /// Copies elements starting at `offset` into `dst`.
    fn read_at(&self, offset: usize, dst: &mut [T]) -> Result<(), MemError> {
        self.check_range(offset, dst.len())?;
        let byte_offset = offset * size_of::<T>();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let memory = self.slot.read();
        match &*memory {
            Memory::Device(ptr) => self.slot.backend.copy_from_device(
                bytes,
                *ptr,
                byte_offset as u64,
                self.slot.copy_stream(),
            ),
            Memory::Pinned(block) => {
                bytes.copy_from_slice(&block.bytes()[byte_offset..byte_offset + bytes.len()]);
                Ok(())
            }
            Memory::Released(reason) => Err(self.slot.released(*reason)),
        }
    }

    fn check_range(&self, offset: usize, count: usize) -> Result<(), MemError> {
        let len = self.len();
        match offset.checked_add(count) {
            Some(end) if end <= len => Ok(()),
            _ => Err(MemError::OutOfBounds {
                offset: (offset * size_of::<T>()) as u64,
                end: (offset.saturating_add(count) * size_of::<T>()) as u64,
                size: (len * size_of::<T>()) as u64,
            }),
        }
    }
}

macro_rules! common_accessors {
    () => {
        /// The label the array was requested under.
        pub fn label(&self) -> &str {
            &self.inner.slot.label
        }

        /// The allocated (chunked) shape.
        pub fn shape(&self) -> &[usize] {
            &self.inner.slot.shape
        }

        /// Number of elements.
        pub fn len(&self) -> usize {
            self.inner.len()
        }

        /// Whether the array has no elements.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Bytes of the array's elements.
        pub fn nbytes(&self) -> u64 {
            (self.len() * size_of::<T>()) as u64
        }

        /// Whether the memory is still allocated.
        pub fn is_valid(&self) -> bool {
            self.inner.slot.release_reason().is_none()
        }

        /// Why the memory is gone, if it is.
        pub fn release_reason(&self) -> Option<ReleaseReason> {
            self.inner.slot.release_reason()
        }

        /// Copies a host slice of exactly [`len`](Self::len) elements into the array.
        pub fn copy_from_host(&self, src: &[T]) -> Result<(), MemError> {
            check_length(self.label(), self.len(), src.len())?;
            self.inner.write_at(0, src)
        }

        /// Copies the array into a host slice of exactly [`len`](Self::len) elements.
        pub fn copy_to_host(&self, dst: &mut [T]) -> Result<(), MemError> {
            check_length(self.label(), self.len(), dst.len())?;
            self.inner.read_at(0, dst)
        }

        /// Copies `src` into the array starting at element `offset` (row-major order).
        pub fn copy_from_host_at(&self, offset: usize, src: &[T]) -> Result<(), MemError> {
            self.inner.write_at(offset, src)
        }

        /// Copies elements starting at `offset` (row-major order) into `dst`.
        pub fn copy_to_host_at(&self, offset: usize, dst: &mut [T]) -> Result<(), MemError> {
            self.inner.read_at(offset, dst)
        }

        /// The array's contents as a vector.
        pub fn to_vec(&self) -> Result<Vec<T>, MemError> {
            let mut out = vec![T::zeroed(); self.len()];
            self.inner.read_at(0, &mut out)?;
            Ok(out)
        }
    };
}

/// A typed array in device memory.
///
/// Cloning gives another handle to the same memory.
pub struct DeviceArray<T: Element> {
    inner: Handle<T>,
}

impl<T: Element> Clone for DeviceArray<T> {
    fn clone(&self) -> Self {
        DeviceArray {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Element> DeviceArray<T> {
    common_accessors!();

    /// Calls `f` with the device address while holding the memory, so that it
    /// cannot be freed or evicted until `f` returns (for kernel launches).
    pub fn with_device_ptr<R>(&self, f: impl FnOnce(DevicePtr) -> R) -> Result<R, MemError> {
        match &*self.inner.slot.read() {
            Memory::Device(ptr) => Ok(f(*ptr)),
            Memory::Released(reason) => Err(self.inner.slot.released(*reason)),
            Memory::Pinned(_) => Err(MemError::WrongArrayType {
                label: self.label().to_owned(),
                requested: "device memory".into(),
                found: "pinned host memory".into(),
            }),
        }
    }
}

/// A typed array in page-locked host memory.
///
/// Cloning gives another handle to the same memory.
pub struct PinnedArray<T: Element> {
    inner: Handle<T>,
}

impl<T: Element> Clone for PinnedArray<T> {
    fn clone(&self) -> Self {
        PinnedArray {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Element> PinnedArray<T> {
    common_accessors!();

    /// Borrows the elements; the memory cannot be released while the guard lives.
    pub fn read(&self) -> Result<PinnedRef<'_, T>, MemError> {
        let guard = self.inner.slot.read();
        match &*guard {
            Memory::Released(reason) => Err(self.inner.slot.released(*reason)),
            _ => Ok(PinnedRef {
                guard,
                len: self.len(),
                _element: PhantomData,
            }),
        }
    }

    /// Borrows the elements mutably; the memory cannot be released while the guard lives.
    pub fn write(&self) -> Result<PinnedMut<'_, T>, MemError> {
        let guard = self.inner.slot.write();
        match &*guard {
            Memory::Released(reason) => Err(self.inner.slot.released(*reason)),
            _ => Ok(PinnedMut {
                guard,
                len: self.len(),
                _element: PhantomData,
            }),
        }
    }
}

fn pinned_elements<T: Element>(memory: &Memory, len: usize) -> &[T] {
    match memory {
        Memory::Pinned(block) => {
            let bytes = &block.bytes()[..len * size_of::<T>()];
            bytemuck::try_cast_slice(bytes).unwrap_or(&[])
        }
        _ => &[],
    }
}

/// Shared borrow of a [`PinnedArray`]'s elements.
pub struct PinnedRef<'a, T: Element> {
    guard: RwLockReadGuard<'a, Memory>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T: Element> Deref for PinnedRef<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        pinned_elements(&self.guard, self.len)
    }
}

/// Exclusive borrow of a [`PinnedArray`]'s elements.
pub struct PinnedMut<'a, T: Element> {
    guard: RwLockWriteGuard<'a, Memory>,
    len: usize,
    _element: PhantomData<T>,
}

impl<T: Element> Deref for PinnedMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        pinned_elements(&self.guard, self.len)
    }
}

impl<T: Element> DerefMut for PinnedMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let len = self.len * size_of::<T>();
        match &mut *self.guard {
            Memory::Pinned(block) => {
                bytemuck::try_cast_slice_mut(&mut block.bytes_mut()[..len]).unwrap_or(&mut [])
            }
            _ => &mut [],
        }
    }
}

impl<T: Element> fmt::Debug for DeviceArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceArray")
            .field("label", &self.label())
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape())
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl<T: Element> fmt::Debug for PinnedArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedArray")
            .field("label", &self.label())
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape())
            .field("valid", &self.is_valid())
            .finish()
    }
}

fn describe(slot: &Slot) -> String {
    let kind = match slot.kind() {
        MemoryKind::Device => "DeviceArray",
        MemoryKind::Pinned => "PinnedArray",
    };
    format!("{kind}<{}>", slot.dtype())
}

/// What `allocate_queue` delivers to each participant: its arrays, allocated
/// at their chunked shapes, and the chunk plan they were laid out for.
///
/// Participants that queued nothing receive a response with no arrays and the
/// same `chunks` and `chunk_length`.
#[derive(Clone, Default)]
pub struct ArrayResponse {
    /// Number of chunks the batch is split into.
    pub chunks: usize,
    /// Runs per chunk (the last chunk may be shorter).
    pub chunk_length: usize,
    /// The allocated shape of every array, by label.
    pub chunked_shapes: BTreeMap<String, Vec<usize>>,
    /// The full plan, with the byte figures it was made from.
    pub plan: ChunkPlan,
    /// The arrays not yet taken, untyped; each knows its label.
    arrays: Vec<Arc<Slot>>,
}

impl ArrayResponse {
    pub(crate) fn new(plan: ChunkPlan) -> Self {
        ArrayResponse {
            chunks: plan.chunks,
            chunk_length: plan.chunk_length,
            chunked_shapes: BTreeMap::new(),
            plan,
            arrays: Vec::new(),
        }
    }

    pub(crate) fn insert(&mut self, label: String, slot: Arc<Slot>) {
        self.chunked_shapes.insert(label, slot.shape.clone());
        self.arrays.push(slot);
    }

    /// Takes the device array under `label`; an unknown label or a different
    /// element type or memory kind is an error.
    pub fn take<T: Element>(&mut self, label: &str) -> Result<DeviceArray<T>, MemError> {
        Ok(DeviceArray {
            inner: self.take_typed(label, MemoryKind::Device)?,
        })
    }

    /// Takes the pinned array under `label`, as [`ArrayResponse::take`] does.
    pub fn take_pinned<T: Element>(&mut self, label: &str) -> Result<PinnedArray<T>, MemError> {
        Ok(PinnedArray {
            inner: self.take_typed(label, MemoryKind::Pinned)?,
        })
    }

    /// Labels of the arrays not yet taken.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.arrays.iter().map(|slot| &*slot.label)
    }

    /// Whether the response holds no arrays (a notary's response, or all taken).
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }

    fn take_typed<T: Element>(
        &mut self,
        label: &str,
        kind: MemoryKind,
    ) -> Result<Handle<T>, MemError> {
        let Some(index) = self.arrays.iter().position(|slot| &*slot.label == label) else {
            return Err(MemError::UnknownLabel {
                label: label.to_owned(),
                available: self.labels().collect::<Vec<_>>().join(", "),
            });
        };
        let slot = &self.arrays[index];
        if slot.dtype() != T::DTYPE || slot.kind() != kind {
            let requested = match kind {
                MemoryKind::Device => format!("DeviceArray<{}>", T::DTYPE),
                MemoryKind::Pinned => format!("PinnedArray<{}>", T::DTYPE),
            };
            return Err(MemError::WrongArrayType {
                label: label.to_owned(),
                requested,
                found: describe(slot),
            });
        }
        Ok(Handle {
            slot: self.arrays.remove(index),
            _element: PhantomData,
        })
    }
}

impl fmt::Debug for ArrayResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArrayResponse")
            .field("chunks", &self.chunks)
            .field("chunk_length", &self.chunk_length)
            .field("chunked_shapes", &self.chunked_shapes)
            .field(
                "arrays",
                &self
                    .arrays
                    .iter()
                    .map(|slot| (&*slot.label, describe(slot)))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}
