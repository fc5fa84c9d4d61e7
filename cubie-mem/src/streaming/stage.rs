//! A staging buffer kept safe while asynchronous copies use it: acquired
//! from the staging pool on first use, with the event of the last copy
//! that used it. The host waits for that event before touching the buffer
//! again, and before the buffer goes back to its staging pool, so neither
//! the host nor the next user of the buffer can see (or spoil) bytes a
//! copy is still moving.

use crate::host::{StagingBuffer, StagingPool};
use crate::resource::{Event, OwnedStream};
use crate::{Element, MemError};

/// A staging buffer of `shape` for `label`, and the event of the last
/// asynchronous copy using it.
pub(super) struct Stage<T: Element> {
    pool: StagingPool,
    label: String,
    shape: Vec<usize>,
    buffer: Option<StagingBuffer<T>>,
    pending: Option<Event>,
}

impl<T: Element> Stage<T> {
    /// A buffer of `shape` from `pool`, acquired on first use.
    pub(super) fn new(pool: StagingPool, label: String, shape: Vec<usize>) -> Self {
        Stage {
            pool,
            label,
            shape,
            buffer: None,
            pending: None,
        }
    }

    /// Waits for the last copy that used the buffer. A wait that fails
    /// leaves the copy pending, so the buffer is retired when dropped.
    pub(super) fn settle(&mut self) -> Result<(), MemError> {
        if let Some(event) = &self.pending {
            event.wait()?;
        }
        self.pending = None;
        Ok(())
    }

    /// Whether the last copy that used the buffer is done (does not block).
    pub(super) fn is_settled(&mut self) -> Result<bool, MemError> {
        let settled = match &self.pending {
            Some(event) => event.is_complete()?,
            None => true,
        };
        if settled {
            self.pending = None;
        }
        Ok(settled)
    }

    /// The elements the buffer holds (its shape's product).
    pub(super) fn capacity(&self) -> usize {
        self.shape.iter().fold(1, |len, &d| len.saturating_mul(d))
    }

    /// Acquires the buffer now (waiting for the staging pool if need be).
    pub(super) fn reserve(&mut self) -> Result<(), MemError> {
        if self.buffer.is_none() {
            self.buffer = Some(self.pool.acquire(&self.label, &self.shape)?);
        }
        Ok(())
    }

    /// Acquires the buffer if the staging pool has one without waiting;
    /// whether it did.
    pub(super) fn try_reserve(&mut self) -> Result<bool, MemError> {
        if self.buffer.is_none() {
            self.buffer = self.pool.try_acquire(&self.label, &self.shape)?;
        }
        Ok(self.buffer.is_some())
    }

    /// The buffer for the host, once no copy uses it.
    pub(super) fn host(&mut self) -> Result<&mut [T], MemError> {
        self.settle()?;
        self.reserve()?;
        Ok(self.buffer.as_deref_mut().unwrap_or(&mut []))
    }

    /// Hands the buffer to an asynchronous copy queued by `queue` on
    /// `stream`: it gets the buffer's first `len` elements, and the buffer
    /// is not touched again until an event recorded after the copy fired.
    ///
    /// # Safety
    ///
    /// `queue` must only queue copies on `stream` that use the slice it is
    /// given, and nothing else may keep its address.
    pub(super) unsafe fn lend(
        &mut self,
        stream: &OwnedStream,
        len: usize,
        queue: impl FnOnce(&mut [T]) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let buffer = self.host()?;
        let len = len.min(buffer.len());
        let window = buffer.get_mut(..len).unwrap_or(&mut []);
        let queued = queue(window);
        // Even a failed call may have queued part of its work: wait for it
        // before anyone touches the buffer again.
        self.pending = Some(Event::record(stream)?);
        queued
    }
}

impl<T: Element> Drop for Stage<T> {
    fn drop(&mut self) {
        // The buffer goes back to the staging pool only once no copy uses
        // it; when that cannot be known, it is never reused.
        if let Err(error) = self.settle() {
            tracing::error!(%error, "waiting for a staging copy failed; its buffer is retired");
            if let Some(buffer) = self.buffer.take() {
                std::mem::forget(buffer);
            }
        }
    }
}
