//! Streams of other libraries bound as the current stream, and the raw
//! handles of the manager's own for other libraries to launch on.
//!
//! A stream the manager did not create is adopted by the backend for the
//! length of a binding: checked to belong to the backend's context, used
//! as any stream of the backend (its uses counted, a final marker recorded
//! after them when the binding ends, so that later frees wait for them),
//! then forgotten, never destroyed.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

use super::CudaBackend;
use super::driver::mem_error;
use super::interop::{GroupStream, cuda_backend};
use super::stream::RawStream;
use super::sys::{self, CuContext};
use crate::backend::{BackendError, StreamHandle};
use crate::resource::OwnedStream;
use crate::streams::CurrentStream;
use crate::{MemError, MemoryManager};

/// What binding a stream of another library is called in errors.
const BIND: &str = "bind an external stream";

impl CudaBackend {
    /// The driver handle of the backend's context (`CUcontext`: the
    /// device's primary context), for libraries that launch on the
    /// backend's streams. It stays valid while the backend lives.
    pub fn raw_context(&self) -> *mut c_void {
        self.shared.context.raw_context()
    }

    /// Adopts `raw`, a `CUstream` created by someone else on this backend's
    /// context, as a stream of the backend: the handle returned works as
    /// one from [`create_stream`](crate::backend::Backend::create_stream),
    /// and [`destroy_stream`](crate::backend::Backend::destroy_stream) of
    /// it forgets the stream (recording a final marker after the work the
    /// backend queued on it, which later frees wait for) without destroying
    /// it. Refused, adopting nothing, for a stream of another context and
    /// for the null, legacy and per-thread default streams.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream, and stays so until the handle is given to
    /// `destroy_stream`.
    pub unsafe fn adopt_stream(&self, raw: *mut c_void) -> Result<StreamHandle, MemError> {
        let context = &self.shared.context;
        // CU_STREAM_LEGACY is 0x1 and CU_STREAM_PER_THREAD 0x2 (cuda.h).
        if raw.addr() <= 2 {
            return Err(refused(format!(
                "stream {raw:p} is a default stream (null, CU_STREAM_LEGACY or \
                 CU_STREAM_PER_THREAD), which synchronises with other streams; bind a stream \
                 created with cuStreamCreate"
            )));
        }
        let owner = {
            let _guard = context.enter(BIND).map_err(mem_error)?;
            let mut owner: CuContext = ptr::null_mut();
            // SAFETY: the caller guarantees a live stream; the out-pointer
            // is a live context slot.
            let result = unsafe { sys::cuStreamGetCtx(raw, &mut owner) };
            context.check(result, BIND).map_err(mem_error)?;
            owner
        };
        if owner != context.raw_context() {
            return Err(refused(format!(
                "stream {raw:p} belongs to CUDA context {owner:p}, not to this backend's (the \
                 primary context {:p} of device {}); create the stream on that context \
                 (CudaBackend::make_current, then cuStreamCreate) or bind it to a manager of its \
                 own device",
                context.raw_context(),
                context.ordinal()
            )));
        }
        // SAFETY: a live stream of this context (checked above), alive
        // until the handle is destroyed (the caller's promise).
        let stream = unsafe { RawStream::adopt(context, raw) };
        let mut handles = self.handles();
        let id = handles.next_stream;
        handles.next_stream += 1;
        handles.streams.insert(id, stream);
        Ok(StreamHandle(id))
    }
}

/// A binding refused before anything changed.
fn refused(reason: String) -> MemError {
    mem_error(BackendError::Unsupported {
        operation: BIND,
        reason,
    })
}

impl MemoryManager {
    /// Binds `raw`, a `CUstream` of another library (Numba's, PyTorch's,
    /// your own), as this thread's current stream until the guard drops,
    /// as [`bind_stream`](Self::bind_stream) does for a group's stream:
    /// device allocations made by the manager and copies through array
    /// handles inside the scope are ordered on it, and the free of an
    /// array allocated there waits for its work (an event). The manager
    /// never destroys the stream and never touches it after the guard
    /// dropped. The backend must be a [`CudaBackend`]; refused, binding
    /// nothing, for a stream of another context (another device's) and
    /// for the default streams.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream, and stays so until the guard dropped: a
    /// guard kept alive by [`std::mem::forget`] keeps the binding forever.
    /// (A stream destroyed earlier is used by the driver after its end.)
    pub unsafe fn bind_cuda_stream(&self, raw: *mut c_void) -> Result<CurrentStream, MemError> {
        // SAFETY: the caller's promise.
        unsafe { self.bind_adopted(raw, None) }
    }

    /// Adopts `raw` on the manager's CUDA backend and binds it; `keep`
    /// keeps it alive while bound.
    ///
    /// # Safety
    ///
    /// As for [`MemoryManager::bind_cuda_stream`].
    pub(super) unsafe fn bind_adopted(
        &self,
        raw: *mut c_void,
        keep: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Result<CurrentStream, MemError> {
        let backend = self.backend();
        let cuda = cuda_backend(&**backend, BIND)?;
        // SAFETY: the caller's promise: live until the binding ends, which
        // forgets the handle.
        let handle = unsafe { cuda.adopt_stream(raw)? };
        Ok(CurrentStream::bind(OwnedStream::external(
            backend, handle, true, keep,
        )))
    }

    /// Runs `f` with `stream`, a stream of the `cust` crate, bound as this
    /// thread's current stream (as [`bind_cuda_stream`](Self::bind_cuda_stream)
    /// binds it; the binding ends when `f` returns or panics, while the
    /// stream is borrowed). Refused, running nothing, for a stream of
    /// another context than the manager's CUDA backend. Feature `cust`.
    #[cfg(feature = "cust")]
    pub fn with_cust_stream<R>(
        &self,
        stream: &cust::stream::Stream,
        f: impl FnOnce(&CurrentStream) -> R,
    ) -> Result<R, MemError> {
        // SAFETY: the stream is borrowed for longer than the guard, which
        // drops here (or while unwinding), never forgotten.
        let guard = unsafe { self.bind_adopted(stream.as_inner().cast(), None)? };
        Ok(f(&guard))
    }

    /// Binds `stream`, a stream of the `cudarc` crate, as this thread's
    /// current stream until the guard drops (as
    /// [`bind_cuda_stream`](Self::bind_cuda_stream) binds it); the guard
    /// keeps the stream alive. Refused, binding nothing, for a stream of
    /// another context than the manager's CUDA backend and for cudarc's
    /// per-thread default stream. Feature `cudarc`.
    #[cfg(feature = "cudarc")]
    pub fn bind_cudarc_stream(
        &self,
        stream: &Arc<cudarc::driver::CudaStream>,
    ) -> Result<CurrentStream, MemError> {
        let keep: Box<dyn std::any::Any + Send + Sync> = Box::new(Arc::clone(stream));
        // SAFETY: the binding holds the stream (cudarc destroys it when
        // the last reference to it drops, never before), even if the guard is
        // forgotten.
        unsafe { self.bind_adopted(stream.cu_stream().cast(), Some(keep)) }
    }
}

impl CurrentStream {
    /// The stream this guard binds, on a CUDA backend, for taking
    /// [views](GroupStream::view) of arrays and launching kernels on it
    /// (with the [`LaunchBuilder`](super::LaunchBuilder), or another
    /// library through [`raw_stream`](GroupStream::raw_stream) and
    /// [`DeviceView::device_address`](super::DeviceView::device_address)),
    /// ordered with the manager's work there: a group's stream, or another
    /// library's bound with [`MemoryManager::bind_cuda_stream`],
    /// `with_cust_stream` or `bind_cudarc_stream`. It borrows the guard, so
    /// nothing taken from it outlives the binding. Refused when the stream
    /// is not a CUDA backend's.
    pub fn cuda_stream(&self) -> Result<BoundStream<'_>, MemError> {
        const OPERATION: &str = "take the bound CUDA stream";
        let owned = self.owned();
        let backend = cuda_backend(&**owned.backend(), OPERATION)?.clone();
        let raw = backend
            .stream(owned.handle(), OPERATION)
            .map_err(mem_error)?;
        Ok(BoundStream {
            stream: GroupStream {
                stream: Arc::clone(owned),
                raw,
                backend,
            },
            _guard: PhantomData,
        })
    }
}

/// The stream a [`CurrentStream`] guard binds, as a [`GroupStream`]
/// (which it derefs to) borrowed from the guard
/// ([`CurrentStream::cuda_stream`]): views taken from it, and kernels
/// launched on it, are ordered with the manager's work on that stream.
pub struct BoundStream<'g> {
    stream: GroupStream,
    _guard: PhantomData<&'g CurrentStream>,
}

impl std::ops::Deref for BoundStream<'_> {
    type Target = GroupStream;

    fn deref(&self) -> &GroupStream {
        &self.stream
    }
}

impl std::fmt::Debug for BoundStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BoundStream").field(&self.stream).finish()
    }
}

impl GroupStream {
    /// The driver handle of the stream (`CUstream`), for launching with any
    /// library on it, ordered with the manager's work there. Valid while
    /// `self` lives: the stream is never destroyed before.
    pub fn raw_stream(&self) -> *mut c_void {
        self.raw.raw()
    }

    /// The stream as a `cudarc` stream on `context` (cudarc's handle of
    /// this backend's context, from `CudaContext::new` with the backend's
    /// ordinal), borrowed: it never destroys the stream, and lives no
    /// longer than `self`. Refused for a context of another device.
    /// Feature `cudarc`.
    #[cfg(feature = "cudarc")]
    pub fn as_cudarc(
        &self,
        context: &Arc<cudarc::driver::CudaContext>,
    ) -> Result<CudarcStream<'_>, MemError> {
        let ours = self.backend.raw_context();
        let theirs: *mut c_void = context.cu_ctx().cast();
        if theirs != ours {
            return Err(mem_error(BackendError::Unsupported {
                operation: "view a stream as cudarc's",
                reason: format!(
                    "cudarc context {theirs:p} is not this stream's (the primary context {ours:p} \
                     of device {}); open it with CudaContext::new({})",
                    self.backend.ordinal(),
                    self.backend.ordinal()
                ),
            }));
        }
        // SAFETY: a live stream of this context; the wrapper is reachable
        // only through the result, which borrows `self` (keeping the
        // stream alive) and never hands out the `Arc`.
        let stream = unsafe { context.wrap_borrowed_stream(self.raw_stream().cast()) };
        Ok(CudarcStream {
            stream,
            _stream: PhantomData,
        })
    }
}

/// A group's stream as a `cudarc` stream, borrowed from the [`GroupStream`]
/// that made it ([`GroupStream::as_cudarc`]): derefs to cudarc's stream,
/// for its launch builder and copies. Feature `cudarc`.
#[cfg(feature = "cudarc")]
pub struct CudarcStream<'a> {
    stream: Arc<cudarc::driver::CudaStream>,
    _stream: PhantomData<&'a GroupStream>,
}

#[cfg(feature = "cudarc")]
impl std::ops::Deref for CudarcStream<'_> {
    type Target = cudarc::driver::CudaStream;

    fn deref(&self) -> &Self::Target {
        &self.stream
    }
}

#[cfg(feature = "cudarc")]
impl std::fmt::Debug for CudarcStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudarcStream")
            .field("stream", &self.stream.cu_stream())
            .finish()
    }
}
