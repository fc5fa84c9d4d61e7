//! The public API of memory: queueing request sets and serving them,
//! freeing arrays, and what the device and the manager hold.

use std::sync::Arc;

use super::batch::Queued;
use super::handles::Instance;
use super::held::HeldBuffer;
use super::hooks::Hooks;
use crate::array::ReleaseReason;
use crate::array::slot::Slot;
use crate::backend::{BackendResult, MemInfo};
use crate::ids::InstanceId;
use crate::plan::{Budget, SetSizes};
use crate::report::MemoryReport;
use crate::{ArrayRequest, ArrayResponse, LimitMode, MemError, MemoryManager, RequestSet};

impl MemoryManager {
    /// Queues `requests` for `instance` under its stream group, replacing what
    /// it queued before. The instance must have an invalidate hook, and the
    /// labels must be distinct: a label given twice is
    /// [`MemError::DuplicateLabel`]. A call that fails queues nothing and
    /// leaves what the instance queued before in place.
    pub fn queue_request<L: Into<String>>(
        &self,
        instance: &Instance,
        requests: impl IntoIterator<Item = (L, ArrayRequest)>,
    ) -> Result<(), MemError> {
        let set =
            RequestSet::from_distinct(requests).map_err(|label| MemError::DuplicateLabel {
                label,
                instance: self.inner.lock().named(instance.id).to_string(),
            })?;
        // Validated as RequestSet::validate does, its sizes taken meanwhile.
        let mut sizes = SetSizes::default();
        for (label, request) in set.iter() {
            if !sizes.add(request) {
                request.validate(label)?;
            }
        }
        let mut s = self.inner.lock();
        if let Some(declared) = set.iter().find_map(|(_, request)| request.declared_group()) {
            let group = s.group_of(instance.id)?;
            if &*group != declared {
                return Err(MemError::StreamGroupMismatch {
                    instance: s.named(instance.id).to_string(),
                    group: group.to_string(),
                    declared,
                });
            }
        }
        let order = s.queue_order;
        let state = s.instance_mut(instance.id)?;
        if state.on_invalidate.is_none() {
            return Err(MemError::NoInvalidateHook {
                instance: s.named(instance.id).to_string(),
            });
        }
        state.queued = Some(Queued {
            order,
            set,
            sizes,
            passed_over: 0,
        });
        s.queue_order = order.wrapping_add(1);
        Ok(())
    }

    /// Serves the trigger's owner within the trigger's stream group: the
    /// group's members of that owner take part, their queued sets are
    /// planned together and allocated all or nothing, and each participant's
    /// `on_allocation_ready` hook receives its response. Members of other
    /// owners are neither served nor notified; what they queued stays
    /// queued. With nothing queued, returns at once without calling a hook.
    ///
    /// The rules, with the figures they use, are in the guide:
    /// [queueing and allocating](crate::guide::memory_manager#queueing-and-allocating).
    pub fn allocate_queue(&self, trigger: &Instance) -> Result<(), MemError> {
        let outcome = self.inner.allocate_queue(trigger.id, false);
        self.inner.keep_ready_list(outcome.hooks.run());
        outcome.result.map(drop)
    }

    /// [`MemoryManager::allocate_queue`], also returning the trigger's own
    /// response (empty when it queued nothing).
    pub fn allocate_queue_for(&self, trigger: &Instance) -> Result<ArrayResponse, MemError> {
        let outcome = self.inner.allocate_queue(trigger.id, true);
        self.inner.keep_ready_list(outcome.hooks.run());
        outcome.result
    }

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
        slots: &[std::sync::Weak<Slot>],
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

    /// Free and total device memory, as the backend reports them
    /// ([`Backend::mem_info`](crate::backend::Backend::mem_info)).
    pub fn mem_info(&self) -> Result<MemInfo, MemError> {
        self.inner.backend.mem_info().on(&*self.inner.backend)
    }

    /// Who holds the device's memory now and how it was used: each owner
    /// holding any (its registrations, group, whether it is idle or busy,
    /// device and pinned bytes), the device's free and total memory, its
    /// device pool's reserved and used bytes and largest free block where it
    /// knows them, the page-locked host memory of host arrays and staging
    /// buffers, the request sets still queued, and the usage counters
    /// (current and peak bytes, counts, evictions) per instance, stream
    /// group and in total. It prints as a table.
    /// The same figures an out-of-memory error carries
    /// ([`MemError::fit_report`]), to look before a batch fails.
    pub fn memory_report(&self) -> MemoryReport {
        let device = self.inner.device_info();
        let mut s = self.inner.lock();
        self.inner.memory_report(&mut s, None, device)
    }

    /// The budget a batch of `instance`'s group would be planned against
    /// now: the device's free memory, the group's cap headroom in active
    /// mode, and the granule. Eviction could free more; it is not counted.
    pub(crate) fn batch_budget(&self, instance: &Instance) -> Result<Budget, MemError> {
        let inner = &self.inner;
        let free = inner.backend.mem_info().on(&*inner.backend)?.free;
        let s = inner.lock();
        let group = s.group_of(instance.id)?;
        let cap_headroom = match s.limit_mode {
            LimitMode::Passive => None,
            LimitMode::Active => Some(s.cap_headroom(&group, inner.total, 0)),
        };
        Ok(Budget {
            effective_free: free,
            cap_headroom,
            granule: inner.config.allocation_granule_bytes,
        })
    }
}
