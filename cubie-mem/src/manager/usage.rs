//! Statistics and memory queries.

use crate::backend::{BackendResult, MemInfo};
use crate::host::PinnedUse;
use crate::stats::{HostPinnedStats, InstanceStats, MemoryStats};
use crate::{MemError, MemoryManager};

impl MemoryManager {
    /// Free and total device memory, as the backend reports them
    /// ([`Backend::mem_info`](crate::backend::Backend::mem_info)).
    pub fn mem_info(&self) -> Result<MemInfo, MemError> {
        self.inner.backend.mem_info().on(&*self.inner.backend)
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> MemoryStats {
        let device = self.inner.backend.mem_info().unwrap_or(MemInfo {
            free: 0,
            total: self.inner.total,
        });
        let s = self.inner.lock();
        let mut instances: Vec<InstanceStats> = s
            .instances
            .iter()
            .map(|(&id, i)| InstanceStats {
                instance: id,
                name: i.name.as_deref().map(str::to_owned),
                group: s
                    .groups
                    .group_of(id)
                    .map_or_else(String::new, |g| g.to_string()),
                proportion: s.shares.proportion(id).unwrap_or(0.0),
                cap: s.cap(id, self.inner.total),
                usage: i.usage,
            })
            .collect();
        instances.sort_by_key(|i| i.instance);
        MemoryStats {
            backend: self.inner.backend.name(),
            device,
            limit_mode: s.limit_mode,
            total: s.total_usage,
            groups: s
                .group_usage
                .iter()
                .map(|(name, usage)| (name.to_string(), *usage))
                .collect(),
            instances,
            host_pinned: HostPinnedStats {
                host_arrays: self.inner.pinned_host.bytes(PinnedUse::HostArray),
                staging: self.inner.pinned_host.bytes(PinnedUse::Staging),
            },
        }
    }
}
