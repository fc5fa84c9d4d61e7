//! The typed handles: [`DeviceArray`], [`PinnedArray`] and the guards that
//! borrow a pinned array's elements.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use parking_lot::RawRwLock;
use parking_lot::lock_api::{ArcRwLockReadGuard, ArcRwLockWriteGuard};

use super::ReleaseReason;
use super::slot::{Memory, Slot};
use crate::backend::{BackendResult, DevicePtr, PinnedBlock};
use crate::resource::DeviceMemory;
use crate::{Element, MemError};

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
struct Handle<T> {
    slot: Arc<Slot>,
    _element: PhantomData<fn() -> T>,
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        Handle {
            slot: Arc::clone(&self.slot),
            _element: PhantomData,
        }
    }
}

impl<T: Element> Handle<T> {
    fn new(slot: Arc<Slot>) -> Self {
        Handle {
            slot,
            _element: PhantomData,
        }
    }

    fn len(&self) -> usize {
        // The slot's bytes fit in memory, so its element count fits a usize.
        self.slot.shape().iter().product()
    }

    /// Copies `src` into the array starting at element `offset`.
    fn write_at(&self, offset: usize, src: &[T]) -> Result<(), MemError> {
        self.check_range(offset, src.len())?;
        let bytes: &[u8] = bytemuck::cast_slice(src);
        let byte_offset = offset * size_of::<T>();
        match self.slot.memory()? {
            Memory::Device(memory) => self
                .slot
                .use_stream(&memory)?
                .stream()
                .copy_to_device(memory.ptr(), byte_offset as u64, bytes)
                .for_array(self.slot.backend(), self.slot.label()),
            Memory::Pinned(memory) => {
                memory.write().bytes_mut()[byte_offset..byte_offset + bytes.len()]
                    .copy_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Copies elements starting at `offset` into `dst`.
    fn read_at(&self, offset: usize, dst: &mut [T]) -> Result<(), MemError> {
        self.check_range(offset, dst.len())?;
        let byte_offset = offset * size_of::<T>();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        match self.slot.memory()? {
            Memory::Device(memory) => self
                .slot
                .use_stream(&memory)?
                .stream()
                .copy_from_device(bytes, memory.ptr(), byte_offset as u64)
                .for_array(self.slot.backend(), self.slot.label()),
            Memory::Pinned(memory) => {
                let len = bytes.len();
                bytes.copy_from_slice(&memory.read().bytes()[byte_offset..byte_offset + len]);
                Ok(())
            }
        }
    }

    /// Checks that `count` elements from `offset` lie inside the array.
    fn check_range(&self, offset: usize, count: usize) -> Result<(), MemError> {
        let len = self.len();
        let element = size_of::<T>() as u64;
        match offset.checked_add(count) {
            Some(end) if end <= len => Ok(()),
            _ => Err(MemError::OutOfBounds {
                offset: (offset as u64).saturating_mul(element),
                end: (offset as u64)
                    .saturating_add(count as u64)
                    .saturating_mul(element),
                size: (len as u64).saturating_mul(element),
            }),
        }
    }

    /// A vector of every element, or an error when the host cannot hold it.
    fn to_vec(&self) -> Result<Vec<T>, MemError> {
        let len = self.len();
        let mut out = Vec::new();
        out.try_reserve_exact(len)
            .map_err(|_| MemError::HostOutOfMemory {
                requested: crate::Bytes(self.slot.bytes()),
                what: "a host copy of an array (to_vec)",
            })?;
        out.resize(len, T::zeroed());
        self.read_at(0, &mut out)?;
        Ok(out)
    }
}

macro_rules! common_accessors {
    () => {
        /// The label the array was requested under.
        pub fn label(&self) -> &str {
            self.inner.slot.label()
        }

        /// The allocated (chunked) shape.
        pub fn shape(&self) -> &[usize] {
            self.inner.slot.shape()
        }

        /// The axis that holds the batch's runs; `None` when unchunkable.
        pub fn chunk_axis(&self) -> Option<usize> {
            self.inner.slot.chunk_axis()
        }

        /// Number of elements.
        pub fn len(&self) -> usize {
            self.inner.len()
        }

        /// Whether the array has no elements.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Bytes of the array's elements, even in a larger reused buffer.
        pub fn nbytes(&self) -> u64 {
            self.inner.slot.bytes()
        }

        /// Bytes of the buffer holding the array: [`nbytes`](Self::nbytes),
        /// or more in a larger reused buffer.
        pub fn capacity_bytes(&self) -> u64 {
            self.inner.slot.capacity()
        }

        /// Whether the memory is still allocated.
        pub fn is_valid(&self) -> bool {
            self.inner.slot.is_live()
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

        /// The array's contents as a vector; an error when the host cannot hold it.
        pub fn to_vec(&self) -> Result<Vec<T>, MemError> {
            self.inner.to_vec()
        }
    };
}

/// A typed array in device memory. A clone is another handle to it.
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
    pub(crate) fn from_slot(slot: Arc<Slot>) -> Self {
        DeviceArray {
            inner: Handle::new(slot),
        }
    }

    common_accessors!();

    /// The slot, for identity and backend.
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.inner.slot
    }

    /// The device memory, kept allocated while the result lives.
    pub(crate) fn device_memory(&self) -> Result<Arc<DeviceMemory>, MemError> {
        match self.inner.slot.memory()? {
            Memory::Device(memory) => Ok(memory),
            Memory::Pinned(_) => Err(MemError::WrongArrayType {
                label: self.label().to_owned(),
                requested: "device memory".into(),
                found: "pinned host memory".into(),
            }),
        }
    }

    /// Calls `f` with the device address, for kernel launches. The memory
    /// stays allocated until `f` returns; `f` may call the manager.
    pub fn with_device_ptr<R>(&self, f: impl FnOnce(DevicePtr) -> R) -> Result<R, MemError> {
        self.device_memory().map(|memory| f(memory.ptr()))
    }
}

/// A typed array in page-locked host memory. A clone is another handle to it.
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
    pub(crate) fn from_slot(slot: Arc<Slot>) -> Self {
        PinnedArray {
            inner: Handle::new(slot),
        }
    }

    common_accessors!();

    /// The slot, for identity and backend.
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.inner.slot
    }

    /// The page-locked memory, kept allocated while the result lives.
    pub(crate) fn pinned_memory(&self) -> Result<Arc<crate::resource::PinnedMemory>, MemError> {
        match self.inner.slot.memory()? {
            Memory::Pinned(memory) => Ok(memory),
            Memory::Device(_) => Err(MemError::WrongArrayType {
                label: self.label().to_owned(),
                requested: "pinned host memory".into(),
                found: "device memory".into(),
            }),
        }
    }

    /// Borrows the elements. The memory stays allocated while the guard
    /// lives, and the manager never waits for it.
    pub fn read(&self) -> Result<impl Deref<Target = [T]> + '_, MemError> {
        Ok(ReadGuard {
            guard: self.pinned_memory()?.read_arc(),
            len: self.len(),
            _borrow: PhantomData,
        })
    }

    /// Borrows the elements mutably, as [`PinnedArray::read`] does.
    pub fn write(&self) -> Result<impl DerefMut<Target = [T]> + '_, MemError> {
        Ok(WriteGuard {
            guard: self.pinned_memory()?.write_arc(),
            len: self.len(),
            _borrow: PhantomData,
        })
    }
}

fn pinned_elements<T: Element>(block: &dyn PinnedBlock, len: usize) -> &[T] {
    block
        .bytes()
        .get(..len.saturating_mul(size_of::<T>()))
        .and_then(|bytes| bytemuck::try_cast_slice(bytes).ok())
        .unwrap_or(&[])
}

/// Shared borrow of a [`PinnedArray`]'s elements.
struct ReadGuard<'a, T: Element> {
    guard: ArcRwLockReadGuard<RawRwLock, Box<dyn PinnedBlock>>,
    len: usize,
    _borrow: PhantomData<&'a [T]>,
}

impl<T: Element> Deref for ReadGuard<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        pinned_elements(&**self.guard, self.len)
    }
}

/// Exclusive borrow of a [`PinnedArray`]'s elements.
struct WriteGuard<'a, T: Element> {
    guard: ArcRwLockWriteGuard<RawRwLock, Box<dyn PinnedBlock>>,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<T: Element> Deref for WriteGuard<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        pinned_elements(&**self.guard, self.len)
    }
}

impl<T: Element> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let len = self.len.saturating_mul(size_of::<T>());
        self.guard
            .bytes_mut()
            .get_mut(..len)
            .and_then(|bytes| bytemuck::try_cast_slice_mut(bytes).ok())
            .unwrap_or(&mut [])
    }
}

impl<T: Element> fmt::Debug for DeviceArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceArray")
            .field("label", &self.label())
            .field("dtype", &crate::dtype::dtype_of::<T>())
            .field("shape", &self.shape())
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl<T: Element> fmt::Debug for PinnedArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedArray")
            .field("label", &self.label())
            .field("dtype", &crate::dtype::dtype_of::<T>())
            .field("shape", &self.shape())
            .field("valid", &self.is_valid())
            .finish()
    }
}
