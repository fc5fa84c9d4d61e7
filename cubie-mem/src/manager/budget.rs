//! What a batch of one instance could be given now, before it is queued:
//! for splitting a batch across devices.

use super::handles::Instance;
use crate::backend::BackendResult;
use crate::plan::Budget;
use crate::{LimitMode, MemError, MemoryManager};

impl MemoryManager {
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
