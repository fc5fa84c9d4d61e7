//! Freeing arrays on request.

use std::sync::Arc;

use super::handles::Instance;
use super::held::HeldBuffer;
use super::hooks::Hooks;
use crate::array::ReleaseReason;
use crate::ids::InstanceId;
use crate::{MemError, MemoryManager};

impl MemoryManager {
    /// Frees the instance's array `label`, in every buffer set; returns
    /// whether it existed. The memory goes at once, or when the last access
    /// in progress ends.
    ///
    /// Dropping an array's handles frees nothing: the manager owns the
    /// memory until this, [`Allocated::release`](crate::Allocated::release)
    /// (every array of a derived struct), eviction, or the instance's
    /// deregistration.
    pub fn free(&self, instance: &Instance, label: &str) -> Result<bool, MemError> {
        let mut s = self.inner.lock();
        let Some(slots) = s.instance_mut(instance.id)?.allocations.remove(label) else {
            return Ok(false);
        };
        s.release_slots(
            instance.id,
            slots.iter().map(HeldBuffer::slot),
            ReleaseReason::Freed,
        )?;
        Ok(true)
    }

    /// Frees the instance's arrays among `slots` that it still holds (an
    /// array replaced since is another allocation and stays); the others
    /// are skipped. Every one is released even when one fails.
    pub(crate) fn free_slots(
        &self,
        instance: &Instance,
        slots: &[std::sync::Weak<crate::array::slot::Slot>],
    ) -> Result<(), MemError> {
        let mut s = self.inner.lock();
        let allocations = &mut s.instance_mut(instance.id)?.allocations;
        let mut freed = Vec::new();
        allocations.retain(|sets| {
            let held = sets.len();
            sets.retain(|held| {
                let ours = slots
                    .iter()
                    .any(|weak| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(held.slot())));
                if ours {
                    freed.push(Arc::clone(held.slot()));
                }
                !ours
            });
            // A label keeps its entry only while it holds every set.
            if !sets.is_empty() && sets.len() < held {
                freed.extend(sets.drain(..).map(HeldBuffer::into_slot));
            }
            !sets.is_empty()
        });
        s.release_slots(instance.id, &freed, ReleaseReason::Freed)
    }

    /// Frees every allocation of every instance.
    pub fn free_all(&self) {
        let mut s = self.inner.lock();
        let ids: Vec<InstanceId> = s.instances.keys().copied().collect();
        for id in ids {
            s.release_all(id, ReleaseReason::Freed);
        }
    }

    /// Frees every allocation and calls every invalidate hook (after the
    /// memory is released, with no lock held).
    pub fn invalidate_all(&self) {
        let mut hooks = Hooks::default();
        {
            let mut s = self.inner.lock();
            let ids: Vec<InstanceId> = s.instances.keys().copied().collect();
            for id in ids {
                s.release_all(id, ReleaseReason::Freed);
                if let Some(hook) = s.instances.get(&id).and_then(|i| i.on_invalidate.clone()) {
                    hooks.invalidate(s.named(id), hook);
                }
            }
        }
        hooks.run();
    }
}
