//! Queueing request sets and serving them.

use super::batch::Queued;
use super::handles::Instance;
use crate::plan::SetSizes;
use crate::{ArrayRequest, ArrayResponse, MemError, MemoryManager, RequestSet};

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
}
