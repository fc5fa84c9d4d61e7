//! Your own kernels on the manager's memory: a stream group's stream as a
//! [`GroupStream`], each array a kernel touches as a [`DeviceView`] of it, and
//! a [`LaunchBuilder`] that passes views and scalars to the kernel by type.
//!
//! Views have no operations of their own that reach the driver (their
//! address, length and element type, and their use as an argument), so safe
//! code cannot copy on the wrong stream or keep an address past the
//! memory's life: what outlives the view is a plain number.

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::allocation::Allocation;
use super::driver::mem_error;
use super::launch_dims::LaunchDims;
use super::module::PtxFunction;
use super::stream::RawStream;
use super::sys::CuResult;
use super::{CudaBackend, NAME};
use crate::backend::{Backend, BackendError, StreamHandle};
use crate::resource::{DeviceMemory, OwnedStream, PinnedMemory};
use crate::timeline::Activity;
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
    pub(super) stream: Arc<OwnedStream>,
    pub(super) raw: Arc<RawStream>,
    pub(super) backend: CudaBackend,
}

impl GroupStream {
    /// The stream of `instance`'s group on `mgr`, whose backend must be a
    /// [`CudaBackend`].
    pub fn of(mgr: &MemoryManager, instance: &Instance) -> Result<Self, MemError> {
        let backend = cuda_backend(&**mgr.backend(), "take a group's CUDA stream")?.clone();
        let stream = mgr.group_stream(instance)?;
        let raw = backend
            .stream(stream.handle(), "take a group's CUDA stream")
            .map_err(mem_error)?;
        Ok(GroupStream {
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
        let allocation = self
            .backend
            .allocation(memory.ptr(), OPERATION)
            .map_err(mem_error)?;
        allocation.order_use(&self.raw).map_err(mem_error)?;
        Ok(DeviceView {
            address: memory.ptr().0,
            len: array.len(),
            stream: self.handle(),
            memory: ViewMemory::Device {
                _alive: memory,
                allocation,
            },
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
            stream: self.handle(),
            memory: ViewMemory::Pinned { _alive: memory },
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
        if Arc::ptr_eq(&owner.shared, &self.backend.shared) {
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
            function: function.raw(),
            function_name: function.name(),
            function_context: function.context(),
            limits: function.limits(),
            params: Vec::new(),
            arg_sizes: Vec::new(),
            views: Vec::new(),
        }
    }
}

impl fmt::Debug for GroupStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupStream")
            .field("handle", &self.handle())
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
    address: u64,
    len: usize,
    stream: StreamHandle,
    /// Keeps the memory allocated while the view lives.
    memory: ViewMemory,
    _array: PhantomData<(&'a (), T)>,
}

/// The memory a view keeps allocated.
enum ViewMemory {
    /// Device memory, with the backend's record of its uses, which the
    /// launch notes its use in (looked up once, as the view is taken).
    Device {
        _alive: Arc<DeviceMemory>,
        allocation: Arc<Allocation>,
    },
    /// Page-locked host memory, which a kernel uses in place; held only to
    /// keep it allocated.
    Pinned { _alive: Arc<PinnedMemory> },
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

/// A view as an argument of `cudarc`'s launch builder: its device
/// address, as cudarc passes its own slices. Launch on the stream the view
/// was taken for ([`GroupStream::as_cudarc`]): the view ordered that stream
/// after the array's earlier uses, and the manager orders the array's free
/// after the stream's work. Feature `cudarc`.
#[cfg(feature = "cudarc")]
// SAFETY: pushes a pointer to the view's `u64` device address, which lives
// as long as the borrow of the view ('b), as cudarc's own slices do.
unsafe impl<'a, 'b: 'a, 'c: 'b, T> cudarc::driver::PushKernelArg<&'b DeviceView<'c, T>>
    for cudarc::driver::LaunchArgs<'a>
{
    fn arg(&mut self, arg: &'b DeviceView<'c, T>) -> &mut Self {
        self.arg(&arg.address)
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
    use std::sync::Arc;

    use super::Allocation;
    use crate::backend::StreamHandle;

    /// A view passed to a launch.
    pub struct ViewUse {
        /// The stream that took the view.
        pub(in super::super) stream: StreamHandle,
        /// Its device allocation (`None` for page-locked host memory).
        pub(in super::super) allocation: Option<Arc<Allocation>>,
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
        let allocation = match &self.memory {
            ViewMemory::Device { allocation, .. } => Some(Arc::clone(allocation)),
            ViewMemory::Pinned { .. } => None,
        };
        Some(sealed::ViewUse {
            stream: self.stream,
            allocation,
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
    function: super::sys::CuFunction,
    function_name: &'a str,
    function_context: &'a Arc<super::context::DeviceContext>,
    limits: &'a super::launch_limits::KernelLimits,
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
        const OPERATION: &str = "launch kernel";
        let stream = self.stream;
        let context = stream.raw.context();
        if !Arc::ptr_eq(self.function_context, context) {
            return Err(refused(format!(
                "kernel '{}' was loaded on another CUDA backend than this stream's",
                self.function_name
            )));
        }
        if let Some(other) = self
            .views
            .iter()
            .map(|view| view.stream)
            .find(|&other| other != stream.handle())
        {
            return Err(refused(format!(
                "an argument of kernel '{}' is a view taken by stream {} for a launch on stream {}; \
                 take each view from the stream that launches the kernel",
                self.function_name,
                other.0,
                stream.handle().0
            )));
        }
        self.limits.check(
            context,
            self.function,
            self.function_name,
            &config,
            &self.arg_sizes,
        )?;
        let _guard = context.enter(OPERATION).map_err(mem_error)?;
        let recorder = &stream.backend.shared.recorder;
        let started = recorder.start(&stream.raw);
        let (grid, block) = (config.grid, config.block);
        // SAFETY: the function and stream are live handles of this context,
        // which is current; the caller guarantees that the parameters match
        // the kernel's and that it stays within the views, whose memory
        // lives until after the launch is queued (they are borrowed). The
        // driver copies the parameter values before returning; a launch
        // that failed queued nothing and may be tried again.
        let mut launch_once = || unsafe {
            super::sys::cuLaunchKernel(
                self.function,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                config.shared_bytes,
                stream.raw.raw(),
                self.params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        let mut result = launch_once();
        // The kernel's local memory is reserved by the driver at its first
        // launch: the pool may hold idle what it needs.
        if result == CuResult::OUT_OF_MEMORY {
            context.reclaim_idle_memory(OPERATION);
            result = launch_once();
        }
        let launched = context.check(result, OPERATION).map(|()| {
            self.views
                .iter()
                .filter_map(|view| view.allocation.as_ref())
                .for_each(|allocation| allocation.note_use(&stream.raw));
        });
        recorder.finish(
            started,
            (stream.handle().0, &stream.raw),
            Activity::Kernel,
            self.function_name,
            self.views
                .iter()
                .fold(0u64, |sum, view| sum.saturating_add(view.bytes)),
        );
        launched.map_err(mem_error)
    }
}

impl fmt::Debug for LaunchBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchBuilder")
            .field("kernel", &self.function_name)
            .field("arguments", &self.params.len())
            .finish()
    }
}

/// A launch refused before it reached the driver.
fn refused(reason: String) -> MemError {
    mem_error(BackendError::Unsupported {
        operation: "launch kernel",
        reason,
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
                    "the {} backend is not the {NAME} backend; CUDA kernels run on memory of a \
                     CudaBackend",
                    backend.name()
                ),
            })
        })
}
