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
//! the pool.

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

/// One or two staging buffers used in turn.
pub(super) struct StagingRing<T: Element> {
    slots: Vec<Slot<T>>,
    /// The second buffer until it is reserved (or given up).
    second: Option<Stage<T>>,
    /// The slot the next window takes.
    next: usize,
    /// How many windows have landed, to scatter them in order.
    landed: u64,
}

impl<T: Element> StagingRing<T> {
    /// A ring of `first`, and of `second` if the pool gives it without
    /// waiting when the ring is reserved.
    pub(super) fn new(first: Stage<T>, second: Stage<T>) -> Self {
        StagingRing {
            slots: vec![Slot {
                stage: first,
                landing: None,
            }],
            second: Some(second),
            next: 0,
            landed: 0,
        }
    }

    /// Acquires the first buffer now (waiting for the pool if need be),
    /// then the second if the pool has one at once.
    pub(super) fn reserve(&mut self) -> Result<(), MemError> {
        if let Some(first) = self.slots.first_mut() {
            first.stage.reserve()?;
        }
        self.reserve_second()
    }

    /// Acquires the buffers only if the pool has them at once; whether it
    /// had the first.
    pub(super) fn try_reserve(&mut self) -> Result<bool, MemError> {
        let Some(first) = self.slots.first_mut() else {
            return Ok(false);
        };
        if !first.stage.try_reserve()? {
            return Ok(false);
        }
        self.reserve_second().map(|()| true)
    }

    fn reserve_second(&mut self) -> Result<(), MemError> {
        if let Some(mut second) = self.second.take()
            && second.try_reserve()?
        {
            self.slots.push(Slot {
                stage: second,
                landing: None,
            });
        }
        Ok(())
    }

    /// The elements one window holds.
    pub(super) fn window(&self) -> usize {
        self.slots
            .first()
            .map_or(1, |slot| slot.stage.capacity().max(1))
    }

    /// The slot the next window takes; the one after it comes next.
    pub(super) fn advance(&mut self) -> usize {
        let slot = self.next.min(self.slots.len().saturating_sub(1));
        self.next = (slot + 1) % self.slots.len().max(1);
        slot
    }

    /// The buffer of `slot`.
    pub(super) fn stage(&mut self, slot: usize) -> Option<&mut Stage<T>> {
        self.slots.get_mut(slot).map(|slot| &mut slot.stage)
    }

    /// Notes that `slot` holds `landing`, downloaded, for the host.
    pub(super) fn land(&mut self, slot: usize, landing: Landing) {
        if let Some(slot) = self.slots.get_mut(slot) {
            slot.landing = Some((self.landed, landing));
            self.landed = self.landed.wrapping_add(1);
        }
    }

    /// The slot holding the oldest window of a chunk up to `chunk` that
    /// the host has yet to scatter.
    pub(super) fn oldest_through(&self, chunk: usize) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let (order, landing) = slot.landing.as_ref()?;
                (landing.chunk <= chunk).then_some((*order, index))
            })
            .min()
            .map(|(_, index)| index)
    }

    /// Whether the copy that last used `slot` is done (does not block).
    pub(super) fn is_settled(&mut self, slot: usize) -> Result<bool, MemError> {
        match self.slots.get_mut(slot) {
            Some(slot) => slot.stage.is_settled(),
            None => Ok(true),
        }
    }

    /// Empties `slot` for reuse: hands the window it holds, if any, to
    /// `scatter` with the buffer. The window is taken off the ring even
    /// when `scatter` fails: its results are then lost, and the error
    /// says so.
    pub(super) fn flush(
        &mut self,
        slot: usize,
        scatter: impl FnOnce(&mut Stage<T>, &Landing) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let Some(slot) = self.slots.get_mut(slot) else {
            return Ok(());
        };
        match slot.landing.take() {
            Some((_, landing)) => scatter(&mut slot.stage, &landing),
            None => Ok(()),
        }
    }
}
