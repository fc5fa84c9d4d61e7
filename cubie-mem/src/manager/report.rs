//! Who holds the device's memory and what waits in the queue
//! ([`MemoryManager::memory_report`](crate::MemoryManager::memory_report)), and
//! the report an error that says a batch does not fit carries: the
//! owners holding it, the bytes the batch lacks and the one change that would make
//! it fit, found by planning the batch again with that change (the planner
//! is pure).

use super::Inner;
use super::batch::{Batch, Queued};
use super::state::State;
use crate::backend::{BackendResult, MemInfo};
use crate::host::PinnedUse;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::{BatchSizes, Budget, plan_chunks};
use crate::report::{FitReport, Fix, MemoryReport, OwnerState, OwnerUsage, PendingRequests};
use crate::stats::InstanceStats;
use crate::{MemError, MemoryKind};

/// What a failed batch was planned with, for its error's report.
#[derive(Clone, Copy, Default)]
pub(super) struct Attempt {
    /// The batch's sizes, once measured.
    pub(super) sizes: Option<BatchSizes>,
    /// The budget of the plan that failed (before any eviction).
    pub(super) budget: Option<Budget>,
}

impl Inner {
    /// Free and total memory, or the total and nothing free when the
    /// backend cannot say.
    pub(super) fn device_info(&self) -> MemInfo {
        self.backend.mem_info().unwrap_or(MemInfo {
            free: 0,
            total: self.total,
        })
    }

    /// The owners holding memory, `requester`'s owner marked as such.
    pub(super) fn memory_report(
        &self,
        s: &mut State,
        requester: Option<OwnerId>,
        device: MemInfo,
    ) -> MemoryReport {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        let mut usages = Vec::new();
        for owner in owners {
            let held = s.owner_held(owner);
            if held.device == 0 && held.pinned == 0 {
                continue;
            }
            let state = if Some(owner) == requester {
                OwnerState::Requesting
            } else if s.owner_idle(owner) {
                OwnerState::Idle
            } else {
                OwnerState::Busy
            };
            let instances = s.owners.get(&owner).map_or_else(Vec::new, |o| {
                o.instances
                    .iter()
                    .filter(|id| s.instances.get(id).is_some_and(|i| i.held_bytes() > 0))
                    .map(|&id| s.named(id).to_string())
                    .collect()
            });
            usages.push((
                owner,
                OwnerUsage {
                    owner: s.named_owner(owner).to_string(),
                    instances,
                    group: s
                        .owner_group(owner)
                        .map_or_else(String::new, |g| g.to_string()),
                    state,
                    device_bytes: held.device,
                    pinned_bytes: held.pinned,
                },
            ));
        }
        // The most device bytes first; ties in registration order.
        usages.sort_by(|(a_id, a), (b_id, b)| {
            (b.device_bytes, b.pinned_bytes, a_id).cmp(&(a.device_bytes, a.pinned_bytes, b_id))
        });
        let owners = usages.into_iter().map(|(_, usage)| usage).collect();
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
                cap: s.cap(id, self.total),
                usage: i.usage,
            })
            .collect();
        instances.sort_by_key(|i| i.instance);
        MemoryReport {
            backend: self.backend.name(),
            device,
            limit_mode: s.limit_mode,
            total: s.total_usage,
            groups: s
                .group_usage
                .iter()
                .map(|(name, usage)| (name.to_string(), *usage))
                .collect(),
            instances,
            owners,
            device_pool: self.backend.pool_usage(),
            pinned_host_array_bytes: self.pinned_host.bytes(PinnedUse::HostArray),
            staging_bytes: self.pinned_host.bytes(PinnedUse::Staging),
            pending: pending_requests(s),
        }
    }

    /// `error` with its report, when it says the batch does not fit.
    pub(super) fn fill_report(
        &self,
        s: &mut State,
        error: MemError,
        batch: &Batch,
        attempt: &Attempt,
    ) -> MemError {
        if !error.is_fit_error() {
            return error;
        }
        let device = match self.backend.mem_info().on(&*self.backend) {
            Ok(info) => info,
            Err(_) => self.device_info(),
        };
        let memory = self.memory_report(s, Some(batch.owner), device);
        let (lacking, fix) = match (&error, attempt.sizes, attempt.budget) {
            (MemError::OutOfMemory { requested, .. }, _, _) => {
                let lacking = requested.0.saturating_sub(device.free);
                let fix = self.allocation_fix(s, batch, &memory, requested.0, lacking);
                (lacking, fix)
            }
            (_, Some(sizes), Some(budget)) => self.plan_fix(s, batch, &memory, &sizes, &budget),
            _ => (0, Fix::FreeDevice { bytes: 0 }),
        };
        error.with_fit_report(FitReport {
            memory,
            lacking,
            fix,
        })
    }

    /// The fix of an allocation of `requested` bytes the device refused,
    /// `lacking` bytes short of its free memory (0: the figures allowed
    /// it: a block too fragmented where the backend knows its largest free
    /// block, else memory taken meanwhile or a fault).
    fn allocation_fix(
        &self,
        s: &State,
        batch: &Batch,
        memory: &MemoryReport,
        requested: u64,
        lacking: u64,
    ) -> Fix {
        if lacking == 0 {
            return match memory.device_pool.and_then(|pool| pool.largest_free_block) {
                Some(largest) if largest < requested => Fix::Shrink { bytes: largest },
                _ => Fix::Retry,
            };
        }
        freeing_fix(s, batch, memory, lacking).unwrap_or(Fix::FreeDevice { bytes: lacking })
    }

    /// The bytes a batch the planner refused lacks, and the one change that
    /// makes it plan: a larger proportion where the caps alone bind, the
    /// requester's own arrays, an idle owner, a lower granule, a lower
    /// pipeline depth, a busy owner, or memory freed elsewhere.
    fn plan_fix(
        &self,
        s: &State,
        batch: &Batch,
        memory: &MemoryReport,
        sizes: &BatchSizes,
        budget: &Budget,
    ) -> (u64, Fix) {
        let plans = |budget: &Budget| plan_chunks(sizes, budget).is_ok();
        let free = budget.effective_free;
        // The free memory the batch lacks, the caps as they are.
        let lacking = least(|x| {
            plans(&Budget {
                effective_free: free.saturating_add(x),
                ..*budget
            })
        });
        if let (None, Some(headroom)) = (lacking, budget.cap_headroom) {
            // The caps keep it out whatever is freed.
            let raised = |fe: u64| {
                least(|x| {
                    plans(&Budget {
                        effective_free: fe,
                        cap_headroom: Some(headroom.saturating_add(x)),
                        ..*budget
                    })
                })
            };
            if let Some(more) = raised(free).or_else(|| raised(u64::MAX)) {
                let (caps, _) = s.group_caps_and_use(&batch.group, self.total);
                let proportion = if self.total == 0 {
                    1.0
                } else {
                    (caps.saturating_add(more) as f64 / self.total as f64).min(1.0)
                };
                return (
                    more,
                    Fix::RaiseProportion {
                        group: batch.group.to_string(),
                        proportion: (proportion * 1e4).ceil() / 1e4,
                    },
                );
            }
        }
        let Some(lacking) = lacking else {
            let most = budget.allocatable().map_or(0, |(alloc, _)| alloc);
            return (0, Fix::Shrink { bytes: most });
        };
        if let Some(fix) = freeing_fix(s, batch, memory, lacking).filter(|fix| {
            !matches!(fix, Fix::FreeBusy { .. }) || !smaller_settings(sizes, budget, &plans)
        }) {
            return (lacking, fix);
        }
        if budget.granule > 0
            && plans(&Budget {
                granule: 0,
                ..*budget
            })
        {
            let lower = least(|x| {
                plans(&Budget {
                    granule: budget.granule.saturating_sub(x),
                    ..*budget
                })
            })
            .unwrap_or(budget.granule);
            return (
                lacking,
                Fix::LowerGranule {
                    granule: budget.granule.saturating_sub(lower),
                },
            );
        }
        if let Some(depth) = greatest_below(sizes.depth, |depth| {
            plan_chunks(&BatchSizes { depth, ..*sizes }, budget).is_ok()
        }) {
            return (lacking, Fix::LowerDepth { depth });
        }
        (lacking, Fix::FreeDevice { bytes: lacking })
    }
}

/// Whether a lower granule or pipeline depth alone would make the batch
/// plan under `budget`: changes preferred to stopping another's work.
fn smaller_settings(sizes: &BatchSizes, budget: &Budget, plans: &impl Fn(&Budget) -> bool) -> bool {
    (budget.granule > 0
        && plans(&Budget {
            granule: 0,
            ..*budget
        }))
        || (sizes.depth > 1 && plan_chunks(&BatchSizes { depth: 1, ..*sizes }, budget).is_ok())
}

/// Freeing `lacking` device bytes held by this manager: the requester's
/// own arrays outside the batch (the registration holding the most), else
/// the smallest idle owner holding enough, else the smallest busy one.
fn freeing_fix(s: &State, batch: &Batch, memory: &MemoryReport, lacking: u64) -> Option<Fix> {
    let own = batch
        .participants
        .iter()
        .map(|&id| (id, own_bytes_outside(s, batch, id)))
        .max_by_key(|&(_, bytes)| bytes)
        .filter(|&(_, bytes)| bytes >= lacking);
    if let Some((id, bytes)) = own {
        return Some(Fix::ReleaseOwn {
            instance: s.named(id).to_string(),
            bytes,
        });
    }
    let smallest = |state: OwnerState| {
        memory
            .owners
            .iter()
            .filter(|o| o.state == state && o.device_bytes >= lacking)
            .min_by_key(|o| o.device_bytes)
    };
    if let Some(idle) = smallest(OwnerState::Idle) {
        return Some(Fix::FreeIdle {
            owner: idle.owner.clone(),
            bytes: idle.device_bytes,
        });
    }
    smallest(OwnerState::Busy).map(|busy| Fix::FreeBusy {
        owner: busy.owner.clone(),
        bytes: busy.device_bytes,
    })
}

/// Device bytes `id` holds under labels the batch does not request of it.
fn own_bytes_outside(s: &State, batch: &Batch, id: InstanceId) -> u64 {
    let Some(instance) = s.instances.get(&id) else {
        return 0;
    };
    let queued = batch
        .taken
        .iter()
        .find(|(taken, _)| *taken == id)
        .map(|(_, queued)| &queued.set);
    instance
        .allocations
        .labelled()
        .filter(|(label, _)| queued.is_none_or(|set| set.iter().all(|(asked, _)| asked != *label)))
        .flat_map(|(_, sets)| sets.iter())
        .filter(|buffer| buffer.kind() == MemoryKind::Device)
        .fold(0u64, |sum, buffer| sum.saturating_add(buffer.capacity()))
}

/// The least `x` for which `fits(x)` holds, for a `fits` that stays true
/// once true; `None` when even `u64::MAX` does not fit.
fn least(fits: impl Fn(u64) -> bool) -> Option<u64> {
    if !fits(u64::MAX) {
        return None;
    }
    let (mut low, mut high) = (0u64, u64::MAX);
    while low < high {
        let mid = low + (high - low) / 2;
        if fits(mid) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    Some(low)
}

/// The greatest `x` in `1..limit` that `fits`, where `fits` holds up to a
/// threshold and not above it (a batch that plans at some pipeline depth
/// plans at every smaller one), by bisection: a logarithmic number of
/// calls, however large `limit` is.
fn greatest_below(limit: usize, fits: impl Fn(usize) -> bool) -> Option<usize> {
    if limit < 2 || !fits(1) {
        return None;
    }
    let (mut low, mut high) = (1, limit - 1);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if fits(mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    Some(low)
}

/// Every request set waiting in the queue, in the order queued.
fn pending_requests(s: &State) -> Vec<PendingRequests> {
    let mut queued: Vec<(u64, PendingRequests)> = s
        .instances
        .iter()
        .filter_map(|(&id, instance)| {
            let queued = instance.queued.as_ref()?;
            Some((queued.order, describe(s, id, instance.owner, queued)))
        })
        .collect();
    queued.sort_by_key(|(order, _)| *order);
    queued.into_iter().map(|(_, pending)| pending).collect()
}

/// The pending set `queued` of `id`.
fn describe(s: &State, id: InstanceId, owner: OwnerId, queued: &Queued) -> PendingRequests {
    PendingRequests {
        instance: s.named(id).to_string(),
        owner: s.named_owner(owner).to_string(),
        group: s.group_of(id).map(|g| g.to_string()).unwrap_or_default(),
        labels: queued.set.labels().map(str::to_owned).collect(),
        passed_over: queued.passed_over,
    }
}

#[cfg(test)]
mod tests {
    use super::{greatest_below, least};

    #[test]
    fn greatest_below_finds_the_threshold_or_none() {
        assert_eq!(greatest_below(10, |x| x <= 4), Some(4));
        assert_eq!(greatest_below(10, |_| true), Some(9));
        assert_eq!(greatest_below(10, |x| x == 1), Some(1));
        assert_eq!(greatest_below(10, |_| false), None);
        assert_eq!(greatest_below(1, |_| true), None, "nothing below 1");
        assert_eq!(greatest_below(2, |_| true), Some(1));
        assert_eq!(greatest_below(usize::MAX, |_| true), Some(usize::MAX - 1));
        let calls = std::cell::Cell::new(0);
        let found = greatest_below(usize::MAX, |x| {
            calls.set(calls.get() + 1);
            x <= 1_000_003
        });
        assert_eq!(found, Some(1_000_003));
        assert!(calls.get() <= 65, "{} calls", calls.get());
    }

    #[test]
    fn a_batch_of_any_depth_is_reported_in_a_bounded_number_of_plans() {
        use crate::MemError;
        use crate::plan::attempts;
        use crate::report::Fix;
        use crate::{ArrayRequest, ManagerConfig, MemoryManager, Registration, SimBackend};

        // 10 runs of 256 bytes in 980 allocatable bytes: one run in each of
        // 3 sets fits, in 4 it does not.
        let mgr = MemoryManager::with_config(
            SimBackend::new(1 << 30).with_free(1000),
            ManagerConfig::default().granule(0),
        );
        let solver = mgr
            .register(Registration::new().on_invalidate(|| {}))
            .unwrap();
        let mut plans = Vec::new();
        for depth in [4, 1 << 20, usize::MAX] {
            let state = ArrayRequest::of::<f64>([32, 10])
                .chunk_axis(1)
                .total_runs(10)
                .pipeline_depth(depth);
            mgr.queue_request(&solver, [("state", state)]).unwrap();
            let before = attempts::made();
            let error = mgr.allocate_queue(&solver).unwrap_err();
            plans.push(attempts::made() - before);
            assert!(
                matches!(error, MemError::SingleRunTooLarge { .. }),
                "{error}"
            );
            assert_eq!(
                error.fit_report().unwrap().fix,
                Fix::LowerDepth { depth: 3 }
            );
        }
        // Two searches over bytes (64 plans each at most) and one over the
        // depth (64 at most), with a few single plans around them.
        assert!(plans.iter().all(|&made| made <= 200), "{plans:?}");
    }

    #[test]
    fn least_finds_the_threshold_or_none() {
        assert_eq!(least(|x| x >= 1234), Some(1234));
        assert_eq!(least(|_| true), Some(0));
        assert_eq!(least(|x| x == u64::MAX), Some(u64::MAX));
        assert_eq!(least(|_| false), None);
    }
}
