//! The simulated device's streams and events: objects that release
//! themselves, each keeping its device and the number the model knows it by.

use std::any::Any;
use std::sync::Arc;

use super::SimBackend;
use super::device::HostTarget;
use crate::backend::{BackendError, DevicePtr, Event, Stream, StridedRows, own};

/// A stream of the simulated device. Dropping it does not wait for its
/// work, as `cuStreamDestroy` does not.
pub(super) struct SimStream {
    id: u64,
    device: SimBackend,
}

/// An event recorded on a [`SimStream`]; forgotten when dropped.
pub(super) struct SimEvent {
    id: u64,
    device: SimBackend,
}

impl SimBackend {
    /// A new stream of this device.
    pub(super) fn new_stream(&self) -> Result<Arc<dyn Stream>, BackendError> {
        let mut s = self.call()?;
        let id = s.next_stream;
        s.next_stream = id.saturating_add(1);
        s.live_streams += 1;
        Ok(Arc::new(SimStream {
            id,
            device: self.clone(),
        }))
    }

    /// The model's number of `stream`, if it is a stream of this device.
    pub(super) fn stream_id(
        &self,
        stream: &dyn Stream,
        operation: &'static str,
    ) -> Result<u64, BackendError> {
        let stream = own::<SimStream>(stream.as_any(), operation, "stream")?;
        self.check_same_device(&stream.device, operation, "stream")?;
        Ok(stream.id)
    }

    fn check_same_device(
        &self,
        other: &SimBackend,
        operation: &'static str,
        what: &str,
    ) -> Result<(), BackendError> {
        if Arc::ptr_eq(&self.inner, &other.inner) {
            return Ok(());
        }
        Err(BackendError::Unsupported {
            operation,
            reason: format!(
                "the {what} belongs to another simulated device; use one of this device"
            ),
        })
    }
}

impl Stream for SimStream {
    fn id(&self) -> u64 {
        self.id
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.device.call()?.host_waits_for_stream(self.id);
        Ok(())
    }

    fn record(&self) -> Result<Box<dyn Event>, BackendError> {
        let mut s = self.device.call()?;
        let id = s.next_event;
        s.next_event = id.saturating_add(1);
        s.live_events += 1;
        let call = s.clock.calls().record_ns;
        s.clock.call("record", call);
        s.clock.record_event(id, self.id);
        s.order.record_event(id, self.id);
        Ok(Box::new(SimEvent {
            id,
            device: self.device.clone(),
        }))
    }

    fn wait(&self, event: &dyn Event) -> Result<(), BackendError> {
        const OPERATION: &str = "order streams";
        let event = own::<SimEvent>(event.as_any(), OPERATION, "event")?;
        self.device
            .check_same_device(&event.device, OPERATION, "event")?;
        let mut s = self.device.call()?;
        s.clock.wait_event(self.id, event.id);
        s.order.wait_event(self.id, event.id);
        Ok(())
    }

    fn copy_to_device(&self, dst: DevicePtr, offset: u64, src: &[u8]) -> Result<(), BackendError> {
        let mut s = self.device.call()?;
        let end = s.copy_in("copy to device", dst, offset, src, self.id, None)?;
        // Pageable memory: the host waits until the slice is free again.
        s.clock.wait_until(end);
        s.host_waits_for_stream(self.id);
        Ok(())
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        let mut s = self.device.call()?;
        let target = HostTarget::Pageable(dst);
        let end = s.copy_out("copy from device", target, src, offset, self.id)?;
        s.clock.wait_until(end);
        s.host_waits_for_stream(self.id);
        Ok(())
    }

    /// Checks that `src..src + len` is a page-locked block of this device;
    /// the device memory gets the bytes now.
    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous copy to device";
        let mut s = self.device.call()?;
        let pinned = s.check_page_locked(OPERATION, src.addr(), len)?;
        // SAFETY: the caller guarantees `len` readable bytes at `src`, left
        // alone until the copy completes; they lie in a live page-locked
        // block of this device (checked above), read here under its lock.
        let bytes = unsafe { std::slice::from_raw_parts(src, len) };
        s.copy_in(OPERATION, dst, offset, bytes, self.id, Some(pinned))
            .map(drop)
    }

    /// Checks that `dst..dst + len` is a page-locked block of this device;
    /// the data lands there when the host sees the copy done.
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        len: usize,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous copy from device";
        let mut s = self.device.call()?;
        let pinned = s.check_page_locked(OPERATION, dst.addr(), len)?;
        // The copy's data is taken now and written into `dst` later, once
        // the host has seen the copy done (`SimState::land`).
        let target = HostTarget::PageLocked(pinned);
        s.copy_out(OPERATION, target, src, offset, self.id)
            .map(drop)
    }

    /// Checks each row as a contiguous copy; the device memory gets the
    /// bytes now.
    unsafe fn copy_to_device_strided_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        rows: StridedRows,
    ) -> Result<(), BackendError> {
        let mut s = self.device.call()?;
        // SAFETY: passed on from the caller.
        unsafe { s.copy_in_strided(dst, offset, src, rows, self.id) }
    }

    /// Checks the rows as [`copy_to_device_strided_async`](Self::copy_to_device_strided_async)
    /// does; each row's data lands when the host sees the copy done.
    unsafe fn copy_from_device_strided_async(
        &self,
        dst: *mut u8,
        rows: StridedRows,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        self.device
            .call()?
            .copy_out_strided(dst, rows, src, offset, self.id)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        let mut s = self.device.state();
        s.clock.forget_stream(self.id);
        s.order.destroy_stream(self.id);
        s.live_streams = s.live_streams.saturating_sub(1);
    }
}

impl Event for SimEvent {
    /// Whether the event fired; a pending poll lets time pass on the host.
    fn is_complete(&self) -> Result<bool, BackendError> {
        let mut s = self.device.call()?;
        let fired = !s.hold_completions && s.clock.event_fired(self.id);
        if fired {
            s.host_waits_for_event(self.id);
        } else {
            s.clock.poll();
        }
        Ok(fired)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        let mut s = self.device.call()?;
        s.clock.synchronize_event(self.id);
        s.host_waits_for_event(self.id);
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for SimEvent {
    fn drop(&mut self) {
        let mut s = self.device.state();
        s.clock.forget_event(self.id);
        s.order.forget_event(self.id);
        s.live_events = s.live_events.saturating_sub(1);
    }
}
