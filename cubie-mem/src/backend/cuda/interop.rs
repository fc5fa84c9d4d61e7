//! Your own kernels on the manager's memory: a stream group's stream as a
//! [`CudaStream`] that launches them, and a device array's memory as cust's
//! types ([`DeviceSlice`], [`DevicePointer`]) for `T: DeviceCopy`.
//!
//! cust 0.3's `Stream` cannot wrap a stream it did not create (it has no
//! `from_raw`, and its constructor drops the non-blocking flag the
//! manager's streams need), so launches go through [`CudaStream::launch`].

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

pub use cust::function::{BlockSize, GridSize};
pub use cust::memory::{DeviceCopy, DevicePointer, DeviceSlice};

use super::driver::mem_error;
use super::module::CudaFunction;
use super::stream::RawStream;
use super::{CudaBackend, NAME};
use crate::array::slot::DeviceMemory;
use crate::backend::{Backend, BackendError, StreamHandle};
use crate::streams::OwnedStream;
use crate::timeline::Activity;
use crate::{DeviceArray, Element, Instance, MemError, MemoryManager};

/// The stream of a stream group on a CUDA backend, for launching your own
/// kernels there, ordered with the manager's allocations, copies and frees
/// on it. It keeps the stream alive while it lives.
///
/// Take each array's memory with [`slice`](Self::slice) (which orders this
/// stream after the array's last use elsewhere), then
/// [`launch`](Self::launch) the kernel; the slices must live until the
/// launch is queued.
pub struct CudaStream {
    stream: Arc<OwnedStream>,
    raw: Arc<RawStream>,
    backend: CudaBackend,
}

impl CudaStream {
    /// The stream of `instance`'s group on `mgr`, whose backend must be a
    /// [`CudaBackend`].
    pub fn of(mgr: &MemoryManager, instance: &Instance) -> Result<Self, MemError> {
        let backend = cuda_backend(&**mgr.backend(), "take a group's CUDA stream")?.clone();
        let stream = mgr.group_stream(instance)?;
        let raw = backend
            .stream(stream.handle(), "take a group's CUDA stream")
            .map_err(mem_error)?;
        Ok(CudaStream {
            stream,
            raw,
            backend,
        })
    }

    /// The backend's handle of the stream.
    pub fn handle(&self) -> StreamHandle {
        self.stream.handle()
    }

    /// Blocks until the work queued on the stream completed.
    pub fn synchronize(&self) -> Result<(), MemError> {
        self.raw.synchronize().map_err(mem_error)
    }

    /// `array`'s device memory as cust's [`DeviceSlice`], for a kernel
    /// launched on this stream next. The stream is ordered after the
    /// array's last use on another stream (its allocation, a copy, another
    /// group's kernel), and the memory stays allocated while the slice
    /// lives, even if the manager releases the array meanwhile (its free is
    /// then ordered after this stream's work).
    ///
    /// Refused when the array is released already, or belongs to another
    /// backend (a simulated array, another device).
    pub fn slice<'a, T: Element + DeviceCopy>(
        &self,
        array: &'a DeviceArray<T>,
    ) -> Result<CudaSlice<'a, T>, MemError> {
        let owner = cuda_backend(array.slot().backend(), "take an array's CUDA memory")?;
        if !Arc::ptr_eq(&owner.shared, &self.backend.shared) {
            return Err(mem_error(BackendError::Unsupported {
                operation: "take an array's CUDA memory",
                reason: format!(
                    "array '{}' lives on another CUDA backend (device {}) than this stream (device {})",
                    array.label(),
                    owner.ordinal(),
                    self.backend.ordinal()
                ),
            }));
        }
        let memory = array.device_memory()?;
        memory.use_on(&self.stream)?;
        // SAFETY: the address and length describe the array's live device
        // allocation, which `memory` keeps allocated while the slice lives.
        let slice = unsafe {
            DeviceSlice::from_raw_parts(DevicePointer::from_raw(memory.ptr().0), array.len())
        };
        Ok(CudaSlice {
            slice,
            _memory: memory,
            _array: PhantomData,
        })
    }

    /// Launches `function` on this stream with `grid` x `block` threads and
    /// `shared_bytes` of dynamic shared memory; it runs after the work
    /// queued on the stream before it.
    ///
    /// # Safety
    ///
    /// `args` holds one pointer per kernel parameter, in order, each to a
    /// value of exactly the parameter's type; every device address the
    /// kernel uses comes from a [`CudaSlice`] of this stream that lives until
    /// this call returns, and the kernel stays within each slice's length.
    pub unsafe fn launch(
        &self,
        function: &CudaFunction<'_>,
        grid: impl Into<GridSize>,
        block: impl Into<BlockSize>,
        shared_bytes: u32,
        args: &[*mut c_void],
    ) -> Result<(), MemError> {
        const OPERATION: &str = "launch kernel";
        let context = self.raw.context();
        if !Arc::ptr_eq(function.context(), context) {
            return Err(mem_error(BackendError::Unsupported {
                operation: OPERATION,
                reason: format!(
                    "kernel '{}' was loaded on another CUDA backend than this stream's",
                    function.name()
                ),
            }));
        }
        let (grid, block) = (grid.into(), block.into());
        let _guard = context.enter(OPERATION).map_err(mem_error)?;
        let recorder = &self.backend.shared.recorder;
        let started = recorder.start(&self.raw);
        // SAFETY: the function and stream are live handles of this context,
        // which is current; the caller guarantees that `args` matches the
        // kernel's parameters and that the memory it uses stays valid. The
        // driver copies the argument values before returning.
        let result = unsafe {
            super::sys::cuLaunchKernel(
                function.raw(),
                grid.x,
                grid.y,
                grid.z,
                block.x,
                block.y,
                block.z,
                shared_bytes,
                self.raw.raw(),
                args.as_ptr().cast_mut(),
                std::ptr::null_mut(),
            )
        };
        let launched = context.check(result, OPERATION).map_err(mem_error);
        recorder.finish(
            started,
            (self.handle().0, &self.raw),
            Activity::Kernel,
            function.name(),
            0,
        );
        launched
    }
}

impl fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaStream")
            .field("handle", &self.handle())
            .field("device", &self.backend.ordinal())
            .finish()
    }
}

/// A device array's memory as cust's [`DeviceSlice`] (it dereferences to
/// one), valid while the borrow of the array lives. Made by
/// [`CudaStream::slice`].
///
/// cust's own copy methods on the slice run on the null stream, which does
/// not wait for the manager's non-blocking streams: use the array's copies
/// (or synchronise the stream first) to move data.
pub struct CudaSlice<'a, T: DeviceCopy> {
    slice: DeviceSlice<T>,
    _memory: Arc<DeviceMemory>,
    /// Borrows the array the memory belongs to.
    _array: PhantomData<&'a ()>,
}

impl<T: DeviceCopy> CudaSlice<'_, T> {
    /// The device address as cust's typed pointer.
    pub fn device_ptr(&self) -> DevicePointer<T> {
        self.slice.as_device_ptr()
    }
}

impl<T: DeviceCopy> Deref for CudaSlice<'_, T> {
    type Target = DeviceSlice<T>;
    fn deref(&self) -> &DeviceSlice<T> {
        &self.slice
    }
}

impl<T: DeviceCopy> fmt::Debug for CudaSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaSlice")
            .field("address", &self.slice.as_device_ptr().as_raw())
            .field("len", &self.slice.len())
            .finish()
    }
}

/// `backend` as the CUDA backend, or why it is not one.
fn cuda_backend<'b>(
    backend: &'b dyn Backend,
    operation: &'static str,
) -> Result<&'b CudaBackend, MemError> {
    backend
        .as_any()
        .and_then(|any| any.downcast_ref::<CudaBackend>())
        .ok_or_else(|| {
            mem_error(BackendError::Unsupported {
                operation,
                reason: format!(
                    "the {} backend is not the {NAME} backend; CUDA kernels run on memory of a \
                     CudaBackend",
                    backend.name()
                ),
            })
        })
}
