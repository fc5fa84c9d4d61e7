//! Asynchronous copies between a whole page-locked host array and a device
//! array, which hold the host array until they are done; see
//! [asynchronous copies](crate::guide::host_memory#asynchronous-copies).

use std::fmt;
use std::sync::Arc;

use super::{HostArray, HostMemoryKind};
use crate::array::queued::{queue_download, queue_upload};
use crate::resource::DeviceMemory;
use crate::resource::Event;
use crate::resource::OwnedStream;
use crate::{DeviceArray, Element, MemError};

/// An asynchronous copy in flight, holding its page-locked host array until
/// the copy is done. Made by [`DeviceArray::upload_async`] and
/// [`DeviceArray::download_async`].
///
/// Dropping it waits for the copy before the host array is freed; when that
/// wait fails (the device is gone), the host array is leaked rather than
/// freed under a copy that may still use it.
#[must_use = "the host array comes back from `wait`; dropping the copy waits for it"]
pub struct PendingCopy<T: Element> {
    host: Option<HostArray<T>>,
    event: Event,
    /// Keeps the device memory allocated while the copy uses it.
    _device: Arc<DeviceMemory>,
}

impl<T: Element> PendingCopy<T> {
    /// Whether the copy is done (does not block). On the simulated device a
    /// copy is done once the host's modelled clock has passed its end.
    pub fn is_done(&self) -> Result<bool, MemError> {
        self.event.is_complete()
    }

    /// Waits until the copy is done and gives the host array back: after an
    /// upload, unchanged; after a download, holding the device array's
    /// elements.
    pub fn wait(mut self) -> Result<HostArray<T>, MemError> {
        self.event.wait()?;
        self.host.take().ok_or_else(|| MemError::InvalidRequest {
            label: String::new(),
            reason: "the host array of this copy was already given back".into(),
        })
    }
}

impl<T: Element> Drop for PendingCopy<T> {
    fn drop(&mut self) {
        let Some(host) = self.host.take() else {
            return;
        };
        if let Err(error) = self.event.wait() {
            tracing::error!(
                %error,
                "waiting for an asynchronous copy failed; its page-locked host array is leaked, \
                 not freed under the copy"
            );
            std::mem::forget(host);
        }
    }
}

impl<T: Element> fmt::Debug for PendingCopy<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingCopy")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// An asynchronous copy that failed, with its host array given back where
/// that is safe.
///
/// Converts into [`MemError`] (dropping the host array), so `?` works in
/// functions returning `MemError`.
pub struct AsyncCopyError<T: Element> {
    // Boxed, so that the `Result` of a copy stays small.
    error: Box<MemError>,
    host: Option<Box<HostArray<T>>>,
}

impl<T: Element> AsyncCopyError<T> {
    /// What went wrong.
    pub fn error(&self) -> &MemError {
        &self.error
    }

    /// The host array, as it was unless a copy was queued before the
    /// failure. `None` only when a queued copy's completion could not be
    /// awaited: the array is then leaked, never freed under the copy.
    pub fn into_host(self) -> Option<HostArray<T>> {
        self.host.map(|host| *host)
    }

    /// The error and the host array (see [`into_host`](Self::into_host)).
    pub fn into_parts(self) -> (MemError, Option<HostArray<T>>) {
        (*self.error, self.host.map(|host| *host))
    }
}

impl<T: Element> fmt::Debug for AsyncCopyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCopyError")
            .field("error", &self.error)
            .field("host", &self.host)
            .finish()
    }
}

impl<T: Element> fmt::Display for AsyncCopyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<T: Element> std::error::Error for AsyncCopyError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<T: Element> From<AsyncCopyError<T>> for MemError {
    fn from(error: AsyncCopyError<T>) -> Self {
        *error.error
    }
}

impl<T: Element> DeviceArray<T> {
    /// Queues a copy of the page-locked `host` array (as many elements as
    /// this array, [`HostMemoryKind::Pinned`]) into this array and returns
    /// at once, without waiting for the device.
    ///
    /// The copy is queued on the thread's current stream (see
    /// [`CurrentStream`](crate::streams::CurrentStream)), else on the
    /// array's group stream, after the array's last use on another stream.
    /// The host array is held by the returned [`PendingCopy`] until the copy
    /// is done. A pageable or spilled array is refused (copy it with
    /// [`copy_from_host`](Self::copy_from_host), which blocks), and the
    /// error gives it back. A page-locked array the backend does not take
    /// for asynchronous copies (another manager's or backend's) is staged
    /// as pageable memory is: the host waits for that copy, and the
    /// returned copy is already done.
    ///
    /// ```
    /// use cubie_mem::{ArrayRequest, HostMemoryKind, MemoryManager, Registration, SimBackend};
    ///
    /// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
    /// let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
    /// mgr.queue_request(&solver, [("y", ArrayRequest::of::<f32>([1024]))])?;
    /// let y = mgr.allocate_queue_for(&solver)?.take::<f32>("y")?;
    ///
    /// let values: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    /// let host = mgr.create_host_array([1024], HostMemoryKind::Pinned, Some(&values), &solver)?;
    /// let upload = y.upload_async(host)?; // returns at once
    /// // ... queue other work, or fill another host array, meanwhile ...
    /// let host = upload.wait()?;
    ///
    /// let download = y.download_async(host)?;
    /// assert_eq!(download.wait()?.as_slice(), values);
    /// # Ok::<(), cubie_mem::MemError>(())
    /// ```
    pub fn upload_async(&self, host: HostArray<T>) -> Result<PendingCopy<T>, AsyncCopyError<T>> {
        queue_copy(self, host, true)
    }

    /// Queues a copy of this array into the page-locked `host` array (as
    /// many elements, [`HostMemoryKind::Pinned`]) and returns at once; the
    /// host array comes back, holding the elements, from
    /// [`PendingCopy::wait`]. Streams and refusals as for
    /// [`upload_async`](Self::upload_async).
    pub fn download_async(&self, host: HostArray<T>) -> Result<PendingCopy<T>, AsyncCopyError<T>> {
        queue_copy(self, host, false)
    }
}

/// Checks, queues the copy (an upload, or a download) and records its
/// completion event.
fn queue_copy<T: Element>(
    device: &DeviceArray<T>,
    mut host: HostArray<T>,
    upload: bool,
) -> Result<PendingCopy<T>, AsyncCopyError<T>> {
    let (memory, stream) = match prepare(device, &host) {
        Ok(prepared) => prepared,
        Err(error) => return Err(refused(error, host)),
    };
    let backend = stream.backend();
    let (label, bytes) = (device.label(), size_of_val(host.as_slice()));
    // A page-locked array the backend does not take for asynchronous
    // copies (another manager's or backend's) is copied as pageable memory
    // is: the host waits, and nothing is left queued.
    let direct = backend.is_page_locked(host.as_slice().as_ptr().cast(), bytes);
    let queued = match (direct, upload) {
        (false, true) => device.copy_from_host(host.as_slice()),
        (false, false) => device.copy_to_host(host.as_mut_slice()),
        _ if host.is_empty() => Ok(()),
        // SAFETY: the host array is page-locked (checked by `prepare`) and
        // moves into the PendingCopy, which keeps it, unread and unwritten
        // by anyone else, until an event recorded after the copy fired.
        (true, true) => unsafe { queue_upload(&memory, label, 0, host.as_slice(), &stream) },
        // SAFETY: as for the upload; the copy is the only writer.
        (true, false) => unsafe { queue_download(&memory, label, 0, host.as_mut_slice(), &stream) },
    };
    match (queued, Event::record(&stream)) {
        (Ok(()), Ok(event)) => Ok(PendingCopy {
            host: Some(host),
            event,
            _device: memory,
        }),
        (Err(error), _) | (Ok(()), Err(error)) if !direct => Err(refused(error, host)),
        (Err(error), Ok(event)) => {
            // Part of a failed copy may be queued: wait before handing back.
            let settled = event.wait();
            Err(settle(error, host, settled))
        }
        (queued, Err(event_error)) => {
            let settled = stream
                .stream()
                .synchronize()
                .map_err(|error| MemError::backend(backend.name(), error));
            Err(settle(queued.err().unwrap_or(event_error), host, settled))
        }
    }
}

/// The device memory and the stream for a copy between `device` and `host`,
/// or why there is none.
fn prepare<T: Element>(
    device: &DeviceArray<T>,
    host: &HostArray<T>,
) -> Result<(Arc<DeviceMemory>, Arc<OwnedStream>), MemError> {
    if host.kind() != HostMemoryKind::Pinned {
        return Err(MemError::WrongArrayType {
            label: device.label().to_owned(),
            requested: "a page-locked host array (HostMemoryKind::Pinned) for an asynchronous copy"
                .into(),
            found: format!(
                "a {:?} host array; copy it with copy_from_host or copy_to_host, which block",
                host.kind()
            ),
        });
    }
    if host.len() != device.len() {
        return Err(MemError::LengthMismatch {
            label: device.label().to_owned(),
            expected: device.len(),
            found: host.len(),
        });
    }
    let memory = device.device_memory()?;
    let stream = device.slot().work_stream(&memory);
    memory.use_on(&stream)?;
    Ok((memory, stream))
}

/// The error of a failed copy, with the host array back if the wait for
/// whatever was queued succeeded, else leaked.
fn settle<T: Element>(
    error: MemError,
    host: HostArray<T>,
    settled: Result<(), MemError>,
) -> AsyncCopyError<T> {
    match settled {
        Ok(()) => refused(error, host),
        Err(wait_error) => {
            tracing::error!(
                %wait_error,
                "waiting for a failed asynchronous copy failed; its page-locked host array is leaked"
            );
            std::mem::forget(host);
            AsyncCopyError {
                error: Box::new(error),
                host: None,
            }
        }
    }
}

fn refused<T: Element>(error: MemError, host: HostArray<T>) -> AsyncCopyError<T> {
    AsyncCopyError {
        error: Box::new(error),
        host: Some(Box::new(host)),
    }
}
