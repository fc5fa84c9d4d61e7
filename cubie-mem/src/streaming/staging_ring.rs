//! A binding's staging buffers for one direction, used in turn: while a
//! copy moves one buffer, the host fills or empties the other. The ring
//! also remembers the windows downloaded into its buffers that the host
//! has yet to scatter ([`Landing`]): a scatter waits until its download
//! has landed and the host has nothing readier to do, and a buffer is
//! only reused once its window is scattered.
//!
//! A ring has two buffers when the staging pool gives the second without
//! waiting (RAM allows it), else one: a run never waits for a second
//! buffer while holding the first, so no two pipelines can deadlock over
//! the staging pool.

use std::ops::Range;

use super::stage::Stage;
use crate::{Element, MemError};

/// A window of a chunk downloaded into a staging buffer that the host has
/// yet to scatter into the host array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Landing {
    /// The chunk's index in the run.
    pub(super) chunk: usize,
    /// The chunk's runs in the host array.
    pub(super) runs: Range<usize>,
    /// The window's first element in the chunk's device buffer.
    pub(super) start: usize,
    /// The window's length in elements.
    pub(super) len: usize,
}

/// One buffer of a ring and the window it holds for the host, if any,
/// with the order the window landed in.
struct Slot<T: Element> {
    stage: Stage<T>,
    landing: Option<(u64, Landing)>,
}

impl<T: Element> Slot<T> {
    fn new(stage: Stage<T>) -> Self {
        Slot {
            stage,
            landing: None,
        }
    }
}

/// Which buffer of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotId {
    First,
    Second,
}

/// One or two staging buffers used in turn.
pub(super) struct StagingRing<T: Element> {
    first: Slot<T>,
    /// The second buffer once reserved.
    second: Option<Slot<T>>,
    /// The second buffer until it is reserved (or given up).
    spare: Option<Stage<T>>,
    /// The buffer the next window takes.
    next: SlotId,
    /// How many windows have landed, to scatter them in order.
    landed: u64,
}

impl<T: Element> StagingRing<T> {
    /// A ring of `first`, and of `second` if the staging pool gives it
    /// without waiting when the ring is reserved.
    pub(super) fn new(first: Stage<T>, second: Stage<T>) -> Self {
        StagingRing {
            first: Slot::new(first),
            second: None,
            spare: Some(second),
            next: SlotId::First,
            landed: 0,
        }
    }

    /// Acquires the first buffer now (waiting for the staging pool if need
    /// be), then the second if the staging pool has one at once.
    pub(super) fn reserve(&mut self) -> Result<(), MemError> {
        self.first.stage.reserve()?;
        self.reserve_second()
    }

    /// Acquires the buffers only if the staging pool has them at once; whether it
    /// had the first.
    pub(super) fn try_reserve(&mut self) -> Result<bool, MemError> {
        if !self.first.stage.try_reserve()? {
            return Ok(false);
        }
        self.reserve_second().map(|()| true)
    }

    fn reserve_second(&mut self) -> Result<(), MemError> {
        if let Some(mut second) = self.spare.take()
            && second.try_reserve()?
        {
            self.second = Some(Slot::new(second));
        }
        Ok(())
    }

    /// The elements one window holds.
    pub(super) fn window(&self) -> usize {
        self.first.stage.capacity().max(1)
    }

    /// The buffer `id` names (the first, when the ring has one buffer).
    fn slot(&mut self, id: SlotId) -> &mut Slot<T> {
        match (id, &mut self.second) {
            (SlotId::Second, Some(second)) => second,
            _ => &mut self.first,
        }
    }

    /// The buffer the next window takes, emptied for it: the window it
    /// still holds, if any, handed to `scatter` first (see
    /// [`flush`](Self::flush)). The buffer after it comes next.
    pub(super) fn next_free(
        &mut self,
        scatter: impl FnOnce(&mut Stage<T>, &Landing) -> Result<(), MemError>,
    ) -> Result<(SlotId, &mut Stage<T>), MemError> {
        let id = self.next;
        self.next = match (id, &self.second) {
            (SlotId::First, Some(_)) => SlotId::Second,
            _ => SlotId::First,
        };
        self.flush(id, scatter)?;
        Ok((id, &mut self.slot(id).stage))
    }

    /// Notes that buffer `id` holds `landing`, downloaded, for the host.
    pub(super) fn land(&mut self, id: SlotId, landing: Landing) {
        let order = self.landed;
        self.landed = self.landed.wrapping_add(1);
        self.slot(id).landing = Some((order, landing));
    }

    /// The buffer holding the oldest window of a chunk up to `chunk` that
    /// the host has yet to scatter.
    pub(super) fn oldest_through(&self, chunk: usize) -> Option<SlotId> {
        [
            (SlotId::First, Some(&self.first)),
            (SlotId::Second, self.second.as_ref()),
        ]
        .into_iter()
        .filter_map(|(id, slot)| {
            let (order, landing) = slot?.landing.as_ref()?;
            (landing.chunk <= chunk).then_some((*order, id))
        })
        .min_by_key(|&(order, _)| order)
        .map(|(_, id)| id)
    }

    /// Whether the copy that last used buffer `id` is done (does not block).
    pub(super) fn is_settled(&mut self, id: SlotId) -> Result<bool, MemError> {
        self.slot(id).stage.is_settled()
    }

    /// Empties buffer `id` for reuse: hands the window it holds, if any, to
    /// `scatter` with the buffer. The window is taken off the ring even
    /// when `scatter` fails: its results are then lost, and the error
    /// says so.
    pub(super) fn flush(
        &mut self,
        id: SlotId,
        scatter: impl FnOnce(&mut Stage<T>, &Landing) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let slot = self.slot(id);
        match slot.landing.take() {
            Some((_, landing)) => scatter(&mut slot.stage, &landing),
            None => Ok(()),
        }
    }
}
