//! Your own kernels on the manager's memory: a stream group's stream as a
//! [`GroupStream`], each array a kernel touches as a [`DeviceView`] of it, and
//! a [`LaunchBuilder`] that passes views and scalars to the kernel by type.
//!
//! Views have no operations of their own that reach the driver (their
//! address, length and element type, and their use as an argument), so safe
//! code cannot copy on the wrong stream or keep an address past the
//! memory's life: what outlives the view is a plain number.

use std::any::Any;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::{CudaBackend, LaunchDims, PtxFunction};
use crate::backend::cuda::CudaStream;
use crate::backend::{Backend, BackendError};
use crate::resource::OwnedStream;
use crate::{DeviceArray, Element, Instance, MemError, MemoryManager, PinnedArray};

/// The stream of a stream group on a CUDA backend, for launching your own
/// kernels there, ordered with the manager's allocations, copies and frees
/// on it. It keeps the stream alive while it lives. (The stream a
/// current-stream guard binds, another library's included, is one too,
/// borrowed from the guard: [`CurrentStream::cuda_stream`](crate::CurrentStream::cuda_stream).)
///
/// Take a [`view`](Self::view) of each array the kernel touches (which
/// orders this stream after the array's last use elsewhere), then launch
/// with [`launch_builder`](Self::launch_builder).
pub struct GroupStream {
    stream: Arc<OwnedStream>,
    pub(super) backend: CudaBackend,
}

impl GroupStream {
    /// The stream of `instance`'s group on `mgr`, whose backend must be a
    /// [`CudaBackend`].
    pub fn of(mgr: &MemoryManager, instance: &Instance) -> Result<Self, MemError> {
        Self::new(mgr.group_stream(instance)?, "take a group's CUDA stream")
    }

    /// `stream` as a CUDA stream, or why it is not one.
    pub(super) fn new(stream: Arc<OwnedStream>, operation: &'static str) -> Result<Self, MemError> {
        let backend = cuda_backend(&**stream.backend(), operation)?.clone();
        cuda_stream(&stream, operation)?;
        Ok(GroupStream { stream, backend })
    }

    /// The stream's number (as timelines show it).
    pub fn id(&self) -> u64 {
        self.stream.id()
    }

    /// Blocks until the work queued on the stream completed.
    pub fn synchronize(&self) -> Result<(), MemError> {
        self.stream.stream().synchronize().map_err(mem_error)
    }

    /// The driver handle of the stream (`CUstream`), for launching with any
    /// library on it, ordered with the manager's work there. Valid while
    /// `self` lives: the stream is never destroyed before.
    pub fn raw_stream(&self) -> *mut c_void {
        // `new` checked that the stream is a CUDA one.
        self.stream
            .stream()
            .as_any()
            .downcast_ref::<CudaStream>()
            .map_or(std::ptr::null_mut(), CudaStream::raw_stream)
    }

    /// `array`'s device memory for a kernel launched on this stream next.
    /// The stream is ordered after the array's allocation and its last use
    /// on another stream (a copy, another group's kernel), and the memory
    /// stays allocated while the view lives, even if the manager releases
    /// the array meanwhile (its free is then ordered after this stream's
    /// work).
    ///
    /// Refused when the array is released already, or belongs to another
    /// backend (a simulated array, another device).
    pub fn view<'a, T: Element>(
        &self,
        array: &'a DeviceArray<T>,
    ) -> Result<DeviceView<'a, T>, MemError> {
        const OPERATION: &str = "take an array's CUDA memory";
        self.check_backend(array.slot().backend(), array.label(), OPERATION)?;
        let memory = array.device_memory()?;
        memory.use_on(&self.stream)?;
        Ok(DeviceView {
            address: memory.ptr().0,
            len: array.len(),
            stream: self.id(),
            _memory: memory,
            _array: PhantomData,
        })
    }

    /// `array`'s page-locked memory for a kernel launched on this stream
    /// next, which reads and writes it in place through its address (with
    /// unified addressing, which every 64-bit CUDA device has, a
    /// page-locked page's device address is its host address).
    ///
    /// Nothing orders host access with the kernel: read or write the array
    /// on the host only once the stream's work is done (the chunk pipeline
    /// does so for the pinned arrays bound to it). The memory stays
    /// allocated while the view lives. Refused when the array is released
    /// already, or belongs to another backend.
    pub fn view_pinned<'a, T: Element>(
        &self,
        array: &'a PinnedArray<T>,
    ) -> Result<DeviceView<'a, T>, MemError> {
        const OPERATION: &str = "take an array's page-locked memory";
        self.check_backend(array.slot().backend(), array.label(), OPERATION)?;
        let memory = array.pinned_memory()?;
        let address = memory.read().bytes().as_ptr().addr() as u64;
        Ok(DeviceView {
            address,
            len: array.len(),
            stream: self.id(),
            _memory: memory,
            _array: PhantomData,
        })
    }

    /// Refuses an array of another backend than this stream's.
    fn check_backend(
        &self,
        backend: &dyn Backend,
        label: &str,
        operation: &'static str,
    ) -> Result<(), MemError> {
        let owner = cuda_backend(backend, operation)?;
        if owner.same_backend(&self.backend) {
            return Ok(());
        }
        Err(mem_error(BackendError::Unsupported {
            operation,
            reason: format!(
                "array '{label}' lives on another CUDA backend (device {}) than this stream (device {})",
                owner.ordinal(),
                self.backend.ordinal()
            ),
        }))
    }

    /// A launch of `function` on this stream; give its arguments in order
    /// with [`LaunchBuilder::arg`], then [`LaunchBuilder::launch`].
    pub fn launch_builder<'a>(&'a self, function: &'a PtxFunction<'_>) -> LaunchBuilder<'a> {
        LaunchBuilder {
            stream: self,
            function,
            params: Vec::new(),
            arg_sizes: Vec::new(),
            views: Vec::new(),
        }
    }
}

impl fmt::Debug for GroupStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupStream")
            .field("id", &self.id())
            .field("device", &self.backend.ordinal())
            .finish()
    }
}

/// A device array's memory for a kernel launched on the [`GroupStream`] that
/// made it, valid while the borrow of the array lives: its address, its
/// length in elements of `T`, and its use as a kernel argument
/// ([`LaunchBuilder::arg`] passes the address).
pub struct DeviceView<'a, T> {
    /// The device address, where a launch's parameter points.
    pub(super) address: u64,
    len: usize,
    /// The number of the stream that took the view.
    stream: u64,
    /// Keeps the memory (device or page-locked) allocated while the view
    /// lives.
    _memory: Arc<dyn Any + Send + Sync>,
    _array: PhantomData<(&'a (), T)>,
}

impl<T: Element> DeviceView<'_, T> {
    /// The device address of the first element.
    pub fn device_address(&self) -> u64 {
        self.address
    }

    /// The number of elements (the array's own, also in a larger buffer).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes.
    pub fn byte_len(&self) -> u64 {
        (self.len as u64).saturating_mul(size_of::<T>() as u64)
    }

    /// The address as `cust`'s typed device pointer, for code that uses
    /// cust's types elsewhere (feature `cust`).
    #[cfg(feature = "cust")]
    pub fn as_cust_ptr(&self) -> cust::memory::DevicePointer<T>
    where
        T: cust::memory::DeviceCopy,
    {
        cust::memory::DevicePointer::from_raw(self.address)
    }
}

impl<T> fmt::Debug for DeviceView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceView")
            .field("address", &format_args!("{:#x}", self.address))
            .field("len", &self.len)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}

mod sealed {
    /// A view passed to a launch.
    pub struct ViewUse {
        /// The number of the stream that took the view.
        pub(in super::super) stream: u64,
        /// Its bytes.
        pub(in super::super) bytes: u64,
    }

    /// Keeps [`LaunchArg`](super::LaunchArg) to the types of this module.
    pub trait Sealed {
        /// The view, when the argument is one.
        fn view_use(&self) -> Option<ViewUse> {
            None
        }
    }
}

/// A value a kernel takes as one parameter: a scalar of an element type
/// (passed by value), or a [`DeviceView`] (passed as its device address).
pub trait LaunchArg: sealed::Sealed {
    /// Where the parameter's bytes are, for the driver to copy at launch.
    #[doc(hidden)]
    fn param_ptr(&self) -> *mut c_void;
    /// The parameter's size in bytes, checked against the kernel's.
    #[doc(hidden)]
    fn param_size(&self) -> usize;
}

impl<T: Element> sealed::Sealed for T {}
impl<T: Element> LaunchArg for T {
    fn param_ptr(&self) -> *mut c_void {
        (self as *const T).cast_mut().cast()
    }

    fn param_size(&self) -> usize {
        size_of::<T>()
    }
}

impl<T: Element> sealed::Sealed for DeviceView<'_, T> {
    fn view_use(&self) -> Option<sealed::ViewUse> {
        Some(sealed::ViewUse {
            stream: self.stream,
            bytes: self.byte_len(),
        })
    }
}
impl<T: Element> LaunchArg for DeviceView<'_, T> {
    fn param_ptr(&self) -> *mut c_void {
        (&raw const self.address).cast_mut().cast()
    }

    fn param_size(&self) -> usize {
        size_of::<u64>()
    }
}

/// A kernel launch being put together by [`GroupStream::launch_builder`]:
/// its arguments by type, borrowed until the launch is queued.
pub struct LaunchBuilder<'a> {
    stream: &'a GroupStream,
    function: &'a PtxFunction<'a>,
    params: Vec<*mut c_void>,
    arg_sizes: Vec<usize>,
    views: Vec<sealed::ViewUse>,
}

impl<'a> LaunchBuilder<'a> {
    /// Appends the next argument: a scalar (`&dt`, `&n`) or a view (`&y`).
    pub fn arg<A: LaunchArg>(&mut self, arg: &'a A) -> &mut Self {
        self.params.push(arg.param_ptr());
        self.arg_sizes.push(arg.param_size());
        if let Some(view) = arg.view_use() {
            self.views.push(view);
        }
        self
    }

    /// Queues the kernel on the stream with `config`; it runs after the
    /// work queued there before it, and the arrays' frees wait for it.
    /// Refused, with nothing queued, when the kernel was loaded on another
    /// backend or a view was taken by another stream, and, saying what
    /// allows it, when the launch exceeds the device's or the kernel's limits
    /// (blocks of the grid, threads of a block, dynamic shared memory above
    /// what [`PtxFunction::set_max_dynamic_shared_bytes`] allowed) or the
    /// arguments differ from the parameters in number or size (checked
    /// where the driver tells them: CUDA 12.4 and later).
    ///
    /// # Safety
    ///
    /// The arguments match the kernel's parameters in number, order and
    /// type, and the kernel touches each view only within its length.
    pub unsafe fn launch(&mut self, config: LaunchDims) -> Result<(), MemError> {
        let stream = self.stream;
        let name = self.function.name();
        if let Some(other) = self
            .views
            .iter()
            .map(|view| view.stream)
            .find(|&other| other != stream.id())
        {
            return Err(mem_error(BackendError::Unsupported {
                operation: "launch kernel",
                reason: format!(
                    "an argument of kernel '{name}' is a view taken by stream {other} for a launch \
                     on stream {}; take each view from the stream that launches the kernel",
                    stream.id()
                ),
            }));
        }
        let bytes = self
            .views
            .iter()
            .fold(0u64, |sum, view| sum.saturating_add(view.bytes));
        let cuda = cuda_stream(&stream.stream, "launch kernel")?;
        // SAFETY: the caller guarantees the arguments; the views' memory
        // lives until after the launch is queued (they are borrowed).
        unsafe {
            self.function
                .launch_on(cuda, config, &mut self.params, &self.arg_sizes, bytes)
        }
    }
}

impl fmt::Debug for LaunchBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchBuilder")
            .field("kernel", &self.function.name())
            .field("arguments", &self.params.len())
            .finish()
    }
}

/// A backend's failure as the crate's error.
pub(super) fn mem_error(error: BackendError) -> MemError {
    MemError::backend("cuda", error)
}

/// The CUDA stream of `stream`, or why it is not one.
pub(super) fn cuda_stream<'s>(
    stream: &'s OwnedStream,
    operation: &'static str,
) -> Result<&'s CudaStream, MemError> {
    stream
        .stream()
        .as_any()
        .downcast_ref::<CudaStream>()
        .ok_or_else(|| {
            mem_error(BackendError::Unsupported {
                operation,
                reason: format!(
                    "the stream is the {} backend's; CUDA kernels run on a stream of a CudaBackend",
                    stream.backend_name()
                ),
            })
        })
}

/// `backend` as the CUDA backend, or why it is not one.
pub(super) fn cuda_backend<'b>(
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
                    "the {} backend is not the cuda backend; CUDA kernels run on memory of a \
                     CudaBackend",
                    backend.name()
                ),
            })
        })
}
