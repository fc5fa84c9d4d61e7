//! Streams of other libraries bound as the current stream, and the raw
//! handles of the manager's own for other libraries to launch on.
//!
//! A stream the manager did not create is adopted by the backend for the
//! length of a binding: checked to belong to the backend's context, used
//! as any stream of the backend, ended with an event after its work when
//! the binding ends (later work that must follow it waits for that event),
//! and never destroyed.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use super::GroupStream;
use super::interop::cuda_backend;
use crate::resource::OwnedStream;
use crate::streams::CurrentStream;
use crate::{MemError, MemoryManager};

/// What binding a stream of another library is called in errors.
const BIND: &str = "bind an external stream";

/// Binds `raw`, a `CUstream` of another library (Numba's, PyTorch's,
/// your own), as this thread's current stream on `manager` until the guard
/// drops, as [`MemoryManager::bind_stream`] does for a group's stream:
/// device allocations made by the manager and copies through array handles
/// inside the scope are ordered on it, and the free of an array allocated
/// there waits for its work (an event). The manager never destroys the
/// stream and never touches it after the guard dropped. The backend must be
/// a [`CudaBackend`](super::CudaBackend); refused, binding nothing, for a
/// stream of another context (another device's) and for the default
/// streams.
///
/// # Safety
///
/// `raw` is a live stream, and stays so until the guard dropped: a guard
/// kept alive by [`std::mem::forget`] keeps the binding forever. (A stream
/// destroyed earlier is used by the driver after its end.)
pub unsafe fn bind_raw_stream(
    manager: &MemoryManager,
    raw: *mut c_void,
) -> Result<CurrentStream, MemError> {
    // SAFETY: the caller's promise.
    unsafe { bind_adopted(manager, raw, None) }
}

/// Adopts `raw` on `manager`'s CUDA backend and binds it; `keep` keeps it
/// alive while bound.
///
/// # Safety
///
/// As for [`bind_raw_stream`].
pub(super) unsafe fn bind_adopted(
    manager: &MemoryManager,
    raw: *mut c_void,
    keep: Option<Box<dyn std::any::Any + Send + Sync>>,
) -> Result<CurrentStream, MemError> {
    let backend = manager.backend();
    let cuda = cuda_backend(&**backend, BIND)?;
    // SAFETY: the caller's promise: live until the binding ends, after
    // which the manager queues nothing on it.
    let stream = unsafe { cuda.adopt_stream(raw)? };
    Ok(CurrentStream::bind(OwnedStream::external(
        backend, stream, keep,
    )))
}

/// Runs `f` with `stream`, a stream of the `cust` crate, bound as this
/// thread's current stream on `manager` (as [`bind_raw_stream`] binds it;
/// the binding ends when `f` returns or panics, while the stream is
/// borrowed). Refused, running nothing, for a stream of another context
/// than the manager's CUDA backend. Feature `cust`.
#[cfg(feature = "cust")]
pub fn with_cust_stream<R>(
    manager: &MemoryManager,
    stream: &cust::stream::Stream,
    f: impl FnOnce(&CurrentStream) -> R,
) -> Result<R, MemError> {
    // SAFETY: the stream is borrowed for longer than the guard, which
    // drops here (or while unwinding), never forgotten.
    let guard = unsafe { bind_adopted(manager, stream.as_inner().cast(), None)? };
    Ok(f(&guard))
}

impl CurrentStream {
    /// The stream this guard binds, on a CUDA backend, for taking
    /// [views](GroupStream::view) of arrays and launching kernels on it
    /// (with the [`LaunchBuilder`](super::LaunchBuilder), or another
    /// library through [`raw_stream`](GroupStream::raw_stream) and
    /// [`DeviceView::device_address`](super::DeviceView::device_address)),
    /// ordered with the manager's work there: a group's stream, or another
    /// library's bound with [`bind_raw_stream`], `with_cust_stream` or
    /// `bind_cudarc_stream`. It borrows the guard, so
    /// nothing taken from it outlives the binding. Refused when the stream
    /// is not a CUDA backend's.
    pub fn cuda_stream(&self) -> Result<BoundStream<'_>, MemError> {
        Ok(BoundStream {
            stream: GroupStream::new(Arc::clone(self.owned()), "take the bound CUDA stream")?,
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
