//! VRAM shares, caps and limit modes.

use super::handles::Instance;
use crate::backend::BackendResult;
use crate::config::LimitMode;
use crate::pools::{MIN_AUTOPOOL_SIZE, Proportion, ShareWarning};
use crate::{MemError, MemoryManager};

/// Logs the warning an accepted share change raised.
pub(super) fn warn_share(warning: Option<ShareWarning>) {
    if let Some(ShareWarning::AutoPoolBelowMinimum { remaining }) = warning {
        tracing::warn!(
            remaining = %Proportion(remaining),
            minimum = %Proportion(MIN_AUTOPOOL_SIZE),
            "the manual pool leaves {} to the auto pool, below the minimum auto pool of {}; later auto \
             registrations will fail: lower the manual proportions to leave room for them",
            Proportion(remaining),
            Proportion(MIN_AUTOPOOL_SIZE)
        );
    }
}

impl MemoryManager {
    /// The instance's share of device memory (0 for an instance this manager
    /// does not know).
    pub fn proportion(&self, instance: &Instance) -> f64 {
        self.inner
            .lock()
            .shares
            .proportion(instance.id)
            .unwrap_or(0.0)
    }

    /// The instance's cap: `floor(proportion * total device memory)` bytes
    /// (0 for an instance this manager does not know).
    pub fn cap(&self, instance: &Instance) -> u64 {
        self.inner.lock().cap(instance.id, self.inner.total)
    }

    /// Sum of the manual pool's proportions.
    pub fn manual_pool_proportion(&self) -> f64 {
        self.inner.lock().shares.manual_sum()
    }

    /// The fraction of memory the auto pool shares.
    pub fn auto_pool_proportion(&self) -> f64 {
        self.inner.lock().shares.auto_sum()
    }

    /// Moves `instance` (from either pool) to the manual pool with `proportion`.
    pub fn set_manual_proportion(
        &self,
        instance: &Instance,
        proportion: f64,
    ) -> Result<(), MemError> {
        self.move_to_manual(instance, proportion, true)
    }

    /// Moves an auto-pool `instance` to the manual pool; a no-op when it is
    /// already manual.
    pub fn set_manual_limit_mode(
        &self,
        instance: &Instance,
        proportion: f64,
    ) -> Result<(), MemError> {
        self.move_to_manual(instance, proportion, false)
    }

    /// Gives `instance` the manual `proportion`; a manual member keeps its
    /// proportion unless `from_either_pool`. On error nothing changes.
    fn move_to_manual(
        &self,
        instance: &Instance,
        proportion: f64,
        from_either_pool: bool,
    ) -> Result<(), MemError> {
        let mut s = self.inner.lock();
        s.instance(instance.id)?;
        if !from_either_pool && s.shares.is_manual(instance.id) {
            return Ok(());
        }
        warn_share(s.shares.set_manual(instance.id, proportion)?);
        Ok(())
    }

    /// Moves a manual-pool `instance` to the auto pool; a no-op when it is
    /// already auto.
    pub fn set_auto_limit_mode(&self, instance: &Instance) -> Result<(), MemError> {
        let mut s = self.inner.lock();
        s.instance(instance.id)?;
        if !s.shares.is_manual(instance.id) {
            return Ok(());
        }
        s.shares.set_auto(instance.id)
    }

    /// Sets the limit mode for every group.
    pub fn set_limit_mode(&self, mode: LimitMode) {
        self.inner.lock().limit_mode = mode;
    }

    /// The memory the instance's group may use now: the device's free memory
    /// (passive), or `min(sum of caps - bytes allocated, free)` (active).
    pub fn available_memory(&self, instance: &Instance) -> Result<u64, MemError> {
        let free = self.inner.backend.mem_info().on(&*self.inner.backend)?.free;
        let s = self.inner.lock();
        let group = s.group_of(instance.id)?;
        Ok(match s.limit_mode {
            LimitMode::Passive => free,
            LimitMode::Active => free.min(s.cap_headroom(&group, self.inner.total, 0)),
        })
    }
}
