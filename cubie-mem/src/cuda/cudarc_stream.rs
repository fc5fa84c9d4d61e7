//! The `cudarc` crate's streams and launches on the manager's memory:
//! a stream of cudarc's bound as the current stream, a group's stream seen
//! as cudarc's, and views passed to cudarc's launch builder. Feature
//! `cudarc`.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use super::interop::mem_error;
use super::{DeviceView, GroupStream};
use crate::backend::BackendError;
use crate::{CurrentStream, MemError, MemoryManager};

/// Binds `stream`, a stream of the `cudarc` crate, as this thread's current
/// stream on `manager` until the guard drops (as
/// [`bind_raw_stream`](super::bind_raw_stream) binds it); the guard keeps
/// the stream alive. Refused, binding nothing, for a stream of another
/// context than the manager's CUDA backend and for cudarc's per-thread
/// default stream. Feature `cudarc`.
pub fn bind_cudarc_stream(
    manager: &MemoryManager,
    stream: &Arc<cudarc::driver::CudaStream>,
) -> Result<CurrentStream, MemError> {
    let keep: Box<dyn std::any::Any + Send + Sync> = Box::new(Arc::clone(stream));
    // SAFETY: the binding holds the stream (cudarc destroys it when the
    // last reference to it drops, never before), even if the guard is
    // forgotten.
    unsafe { super::external::bind_adopted(manager, stream.cu_stream().cast(), Some(keep)) }
}

impl GroupStream {
    /// The stream as a `cudarc` stream on `context` (cudarc's handle of
    /// this backend's context, from `CudaContext::new` with the backend's
    /// ordinal), borrowed: it never destroys the stream, and lives no
    /// longer than `self`. Refused for a context of another device.
    /// Feature `cudarc`.
    pub fn as_cudarc(
        &self,
        context: &Arc<cudarc::driver::CudaContext>,
    ) -> Result<CudarcStream<'_>, MemError> {
        let backend = &self.backend;
        let ours = backend.raw_context();
        let theirs: *mut c_void = context.cu_ctx().cast();
        if theirs != ours {
            return Err(mem_error(BackendError::Unsupported {
                operation: "view a stream as cudarc's",
                reason: format!(
                    "cudarc context {theirs:p} is not this stream's (the primary context {ours:p} \
                     of device {}); open it with CudaContext::new({})",
                    backend.ordinal(),
                    backend.ordinal()
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
pub struct CudarcStream<'a> {
    stream: Arc<cudarc::driver::CudaStream>,
    _stream: PhantomData<&'a GroupStream>,
}

impl std::ops::Deref for CudarcStream<'_> {
    type Target = cudarc::driver::CudaStream;

    fn deref(&self) -> &Self::Target {
        &self.stream
    }
}

impl std::fmt::Debug for CudarcStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudarcStream")
            .field("stream", &self.stream.cu_stream())
            .finish()
    }
}

/// A view as an argument of `cudarc`'s launch builder: its device
/// address, as cudarc passes its own slices. Launch on the stream the view
/// was taken for ([`GroupStream::as_cudarc`]): the view ordered that stream
/// after the array's earlier uses, and the manager orders the array's free
/// after the stream's work. Feature `cudarc`.
// SAFETY: pushes a pointer to the view's `u64` device address, which lives
// as long as the borrow of the view ('b), as cudarc's own slices do.
unsafe impl<'a, 'b: 'a, 'c: 'b, T> cudarc::driver::PushKernelArg<&'b DeviceView<'c, T>>
    for cudarc::driver::LaunchArgs<'a>
{
    fn arg(&mut self, arg: &'b DeviceView<'c, T>) -> &mut Self {
        self.arg(&arg.address)
    }
}
