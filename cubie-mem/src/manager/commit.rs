//! Committing a placed batch: held buffers kept, reused or replaced,
//! buffer sets a smaller plan no longer has retired, the responses built,
//! and a group near its caps warned about. Nothing here fails: what could
//! fail happened in `prepare`.
//!
//! A response's arrays are a shared list: when a participant's batch keeps
//! every buffer of its last response, that response's list is delivered
//! again (one reference count per response instead of one per buffer).

use std::sync::Arc;

use super::Inner;
use super::batch::{Batch, Placed, PlacedRequest, Placement, Queued, Receiver};
use super::decide::sets_of;
use super::held::HeldBuffer;
use super::hooks::Hooks;
use super::state::State;
use crate::array::ReleaseReason;
use crate::array::slot::{Shape, Slot};
use crate::array::{ResponseArrays, SetSlots, per_set};
use crate::config::LimitMode;
use crate::ids::InstanceId;
use crate::stats::UsageStats;
use crate::{ArrayResponse, Bytes, ChunkPlan, DType};

/// Fraction of a group's caps above which active mode warns.
const CAP_WARNING_FRACTION: f64 = 0.95;

impl Inner {
    /// Commits `batch` as `placed` under `plan`: applies the placements and
    /// builds the responses; returns the trigger's.
    pub(super) fn commit(
        &self,
        s: &mut State,
        batch: Batch,
        plan: ChunkPlan,
        placed: Placed,
        want_response: bool,
        hooks: &mut Hooks,
    ) -> ArrayResponse {
        let Batch {
            trigger,
            group,
            owner,
            participants,
            mut taken,
        } = batch;
        let Placed {
            mut placements,
            mut requests,
        } = placed;
        // Responses are built only for those who receive them: the caller
        // (the trigger's) and participants with a ready hook. Sorted by
        // instance to be found, then put back in join order for the hooks.
        let mut responses = std::mem::take(&mut s.scratch.receivers);
        responses.clear();
        responses.extend(participants.iter().enumerate().map(|(position, &id)| {
            let hook = s.instances.get(&id).and_then(|i| i.on_ready.clone());
            let wanted = hook.is_some() || (want_response && id == trigger);
            Receiver {
                position,
                id,
                hook,
                response: wanted.then(|| ArrayResponse::new(plan)),
            }
        }));
        responses.sort_unstable_by_key(|receiver| receiver.id);
        s.with_group_usage(&group, |s, usage| {
            let mut placements = placements.drain(..);
            let mut requests = requests.drain(..);
            for (instance, queued) in taken.drain(..) {
                if plan.is_chunked() {
                    if let Some(i) = s.instances.get_mut(&instance) {
                        i.usage.chunked();
                    }
                    usage.chunked();
                    s.total_usage.chunked();
                }
                let response = responses
                    .binary_search_by_key(&instance, |receiver| receiver.id)
                    .ok()
                    .and_then(|index| responses[index].response.as_mut());
                let cursor = Cursor {
                    placements: &mut placements,
                    requests: &mut requests,
                };
                commit_participant(s, usage, &plan, instance, queued, cursor, response);
            }
        });
        if let Some(g) = s.groups.get_mut(&group) {
            g.partitions.insert(owner, (plan.chunk_length, plan.chunks));
        }
        if s.limit_mode == LimitMode::Active {
            self.warn_cap_usage(s, &group);
        }
        s.scratch.placements = placements;
        s.scratch.requests = requests;
        s.scratch.keep_batch_lists(participants, taken);
        responses.sort_unstable_by_key(|receiver| receiver.position);
        hooks.reserve_ready(responses.iter().filter(|r| r.hook.is_some()).count());
        let mut own = ArrayResponse::default();
        for Receiver {
            id, hook, response, ..
        } in responses.drain(..)
        {
            let Some(response) = response else { continue };
            match hook {
                Some(hook) => {
                    if want_response && id == trigger {
                        own = response.clone();
                    }
                    hooks.ready(s.named(id), hook, response);
                }
                None => own = response,
            }
        }
        s.scratch.receivers = responses;
        own
    }

    /// Warns, once until it falls below again, when `group` holds over
    /// [`CAP_WARNING_FRACTION`] of its caps.
    pub(super) fn warn_cap_usage(&self, s: &mut State, group: &Arc<str>) {
        let (caps, used) = s.group_caps_and_use(group, self.total);
        let over = caps > 0 && used as f64 > CAP_WARNING_FRACTION * caps as f64;
        let Some(g) = s.groups.get_mut(group) else {
            return;
        };
        if over && !g.cap_warned {
            tracing::warn!(
                %group,
                used = %Bytes(used),
                caps = %Bytes(caps),
                "stream group has used over 95% of its caps"
            );
        }
        g.cap_warned = over;
    }
}

/// Where the placements and placed requests of the next participant begin.
struct Cursor<'a, 'b> {
    /// The placements left, the participant's first.
    placements: &'a mut std::vec::Drain<'b, Placement>,
    /// The placed requests left, the participant's first.
    requests: &'a mut std::vec::Drain<'b, PlacedRequest>,
}

/// Commits one participant's `queued` set: applies its placements (counted
/// in `usage`, its group's counters), retires the sets the plan no longer
/// has, and fills its `response` (if anyone receives one): its last
/// response's arrays when the batch kept every buffer, else a new list.
fn commit_participant(
    s: &mut State,
    usage: &mut UsageStats,
    plan: &ChunkPlan,
    instance: InstanceId,
    queued: Queued,
    cursor: Cursor<'_, '_>,
    response: Option<&mut ArrayResponse>,
) {
    let delivered = match response {
        Some(_) => delivered_again(
            s,
            instance,
            &queued,
            plan,
            cursor.placements.as_slice(),
            cursor.requests.as_slice(),
        ),
        None => None,
    };
    // A new list only when the last response's is not delivered again.
    let mut arrays: Option<Vec<SetSlots>> =
        (response.is_some() && delivered.is_none()).then(|| Vec::with_capacity(queued.set.len()));
    let mut shapes = response
        .is_some()
        .then(|| Vec::with_capacity(queued.set.len()));
    for (label, request) in queued.set {
        let (dtype, axis) = (request.dtype(), request.run_axis());
        let sets = sets_of(plan, &request);
        let shape = request.into_chunked_shape(plan.chunk_length);
        let (held, mut entry) = match cursor.requests.next() {
            Some(placed) if placed.held > 0 => (placed.held, Some(placed.entry)),
            _ => (0, None),
        };
        let mut slots = arrays.is_some().then(SetSlots::new);
        for (set, placement) in cursor.placements.by_ref().take(sets).enumerate() {
            // A kept buffer is looked up only for a response.
            let slot = match placement {
                Placement::Keep if slots.is_none() => None,
                placement => {
                    let at = At {
                        instance,
                        entry: &mut entry,
                        set,
                    };
                    apply(s, usage, at, (dtype, &shape, axis), placement)
                }
            };
            if let (Some(slots), Some(slot)) = (slots.as_mut(), slot) {
                slots.push(slot);
            }
        }
        if held > sets
            && let Some(entry) = entry
        {
            retire_sets_from(s, usage, instance, entry, sets);
        }
        if let (Some(arrays), Some(slots)) = (arrays.as_mut(), slots)
            && !slots.is_empty()
        {
            arrays.push(per_set(&slots, plan.buffer_sets).cloned().collect());
        }
        if let Some(shapes) = shapes.as_mut() {
            shapes.push((label, shape));
        }
    }
    if let Some(response) = response {
        let arrays = delivered.unwrap_or_else(|| ResponseArrays::from(arrays.unwrap_or_default()));
        if let Some(i) = s.instances.get_mut(&instance) {
            i.allocations.set_delivered(Arc::clone(&arrays));
        }
        response.set_arrays(arrays);
        response.set_shapes(shapes.unwrap_or_default());
    }
}

/// Which buffer a placement is for: `instance`'s array at `entry` of its
/// list of held arrays (`None` until it holds one under the label) in
/// buffer set `set`.
struct At<'a> {
    /// The participant.
    instance: InstanceId,
    /// The array's position in its list, once it holds one.
    entry: &'a mut Option<usize>,
    /// The buffer set.
    set: usize,
}

/// The arrays of `instance`'s last response, when this batch delivers the
/// same buffers again: it keeps every buffer (`placements` and `requests`
/// begin with the instance's), in the order of the last response.
/// Otherwise `None`, the last response's list dropped before any buffer is
/// reshaped in place.
fn delivered_again(
    s: &mut State,
    instance: InstanceId,
    queued: &Queued,
    plan: &ChunkPlan,
    placements: &[Placement],
    requests: &[PlacedRequest],
) -> Option<ResponseArrays> {
    let held = &mut s.instances.get_mut(&instance)?.allocations;
    let arrays = held.take_delivered()?;
    if arrays.len() != queued.set.len() {
        return None;
    }
    let mut placements = placements.iter();
    let mut requests = requests.iter();
    for ((_, request), delivered) in queued.set.iter().zip(arrays.iter()) {
        let sets = sets_of(plan, request);
        let all_kept = placements
            .by_ref()
            .take(sets)
            .filter(|p| matches!(p, Placement::Keep))
            .count()
            == sets;
        // Every set kept: the request held its buffers, at `entry`.
        let entry = requests.next()?.entry;
        let same = all_kept
            && held
                .sets_at(entry)
                .and_then(|kept| kept.get(..sets))
                .is_some_and(|kept| {
                    per_set(kept, plan.buffer_sets)
                        .map(|buffer| Arc::as_ptr(buffer.slot()))
                        .eq(delivered.iter().map(Arc::as_ptr))
                });
        if !same {
            return None;
        }
    }
    Some(arrays)
}

/// The array a placement keeps.
fn kept(s: &State, at: &At) -> Option<Arc<Slot>> {
    let sets = s
        .instances
        .get(&at.instance)?
        .allocations
        .sets_at((*at.entry)?)?;
    sets.get(at.set).map(|buffer| Arc::clone(buffer.slot()))
}

/// Applies one placement (new memory, or a held buffer reused) at `at` of
/// an array of `(dtype, shape, chunk_axis)`, counting it in `usage` (its
/// group's counters); returns the array it holds now.
fn apply(
    s: &mut State,
    usage: &mut UsageStats,
    at: At,
    (dtype, shape, chunk_axis): (DType, &[usize], Option<usize>),
    placement: Placement,
) -> Option<Arc<Slot>> {
    let instance = at.instance;
    match placement {
        Placement::Keep => kept(s, &at),
        Placement::Reuse => {
            let instance_state = s.instances.get_mut(&instance)?;
            let entry = instance_state
                .allocations
                .sets_at_mut((*at.entry)?)?
                .get_mut(at.set)?;
            let before = entry.bytes();
            // No handle refers to the array: reshaped where it is.
            let new = if entry.reshape_in_place(dtype, shape, chunk_axis) {
                Arc::clone(entry.slot())
            } else {
                let new = entry
                    .slot()
                    .reuse(dtype, Shape::from_slice(shape), chunk_axis);
                *entry = HeldBuffer::new(Arc::clone(&new));
                new
            };
            s.count_reuse(instance, usage, before, &new);
            Some(new)
        }
        Placement::Fresh(slot) => {
            let allocations = &mut s.instances.get_mut(&instance)?.allocations;
            let index = match *at.entry {
                Some(index) => index,
                None => allocations.sets_for(slot.label()),
            };
            *at.entry = Some(index);
            let sets = allocations.sets_at_mut(index)?;
            let fresh = HeldBuffer::new(Arc::clone(&slot));
            // Sets are placed in order, so a new set comes right after the last.
            let old = match sets.get_mut(at.set) {
                Some(held) => Some(std::mem::replace(held, fresh).into_slot()),
                None => {
                    sets.push(fresh);
                    None
                }
            };
            s.count_allocation(instance, usage, &slot);
            if let Some(old) = old
                && let Err(error) = s.release_slot(instance, usage, &old, ReleaseReason::Replaced)
            {
                tracing::warn!(label = %old.label(), %error, "freeing a replaced array failed");
            }
            Some(slot)
        }
    }
}

/// Releases the buffers `instance` holds at `entry` of its list in sets
/// `keep` and above: a plan with fewer sets replaced them.
fn retire_sets_from(
    s: &mut State,
    usage: &mut UsageStats,
    instance: InstanceId,
    entry: usize,
    keep: usize,
) {
    let Some(sets) = s
        .instances
        .get_mut(&instance)
        .and_then(|i| i.allocations.sets_at_mut(entry))
    else {
        return;
    };
    let keep = keep.min(sets.len());
    let retired: Vec<Arc<Slot>> = sets.drain(keep..).map(HeldBuffer::into_slot).collect();
    for old in retired {
        if let Err(error) = s.release_slot(instance, usage, &old, ReleaseReason::Replaced) {
            tracing::warn!(label = %old.label(), %error, "freeing a replaced buffer set failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        ArrayRequest, ArrayResponse, Instance, ManagerConfig, MemError, MemoryManager,
        Registration, SimBackend,
    };

    /// A solver on a device with `free` bytes free.
    fn manager_with(free: u64) -> (MemoryManager, Instance) {
        let mgr = MemoryManager::with_config(
            SimBackend::new(1 << 30).with_free(free),
            ManagerConfig {
                allocation_granule_bytes: 0,
                ..Default::default()
            },
        );
        let solver = mgr
            .register(Registration::new().on_invalidate(|| {}))
            .unwrap();
        (mgr, solver)
    }

    /// A chunkable `state` in `depth` buffer sets, and unchunkable `params`.
    fn serve(mgr: &MemoryManager, solver: &Instance, params: usize, depth: usize) -> ArrayResponse {
        let state = ArrayRequest::of::<f64>([4, 100])
            .chunk_axis(1)
            .total_runs(100)
            .pipeline_depth(depth);
        let params = ArrayRequest::of::<f32>([params]).unchunkable();
        mgr.queue_request(solver, [("state", state), ("params", params)])
            .unwrap();
        mgr.allocate_queue_for(solver).unwrap()
    }

    fn state_ptr(response: &mut ArrayResponse, set: usize) -> u64 {
        let state = response.take_set::<f64>("state", set).unwrap();
        state.with_device_ptr(|p| p.0).unwrap()
    }

    #[test]
    fn a_batch_keeping_every_buffer_delivers_its_last_arrays_again() {
        let (mgr, solver) = manager_with(1 << 20);
        let mut first = serve(&mgr, &solver, 4, 1);
        let mut second = serve(&mgr, &solver, 4, 1);
        assert!(second.shares_arrays_with(&first));
        assert_eq!(state_ptr(&mut first, 0), state_ptr(&mut second, 0));
        assert!(matches!(
            second.take::<f64>("state"),
            Err(MemError::AlreadyTaken { .. })
        ));
        assert_eq!(
            first.labels().collect::<Vec<_>>(),
            ["params"],
            "each response takes its own"
        );
        assert_eq!(second.take::<f32>("params").unwrap().len(), 4);
        assert!(second.is_empty() && !first.is_empty());
    }

    #[test]
    fn a_changed_array_makes_a_new_list_with_the_kept_buffers() {
        let (mgr, solver) = manager_with(1 << 20);
        let mut first = serve(&mgr, &solver, 4, 1);
        let mut second = serve(&mgr, &solver, 64, 1);
        assert!(!second.shares_arrays_with(&first));
        assert_eq!(state_ptr(&mut first, 0), state_ptr(&mut second, 0));
        assert_eq!(second.take::<f32>("params").unwrap().len(), 64);
        let third = serve(&mgr, &solver, 64, 1);
        assert!(third.shares_arrays_with(&second));
    }

    #[test]
    fn a_response_of_several_sets_is_delivered_again_until_an_array_changes() {
        let (mgr, solver) = manager_with(1 << 20);
        let first = serve(&mgr, &solver, 4, 1);
        let second = serve(&mgr, &solver, 4, 2);
        assert_eq!(second.buffer_sets(), 1, "one chunk needs one set");
        assert!(second.shares_arrays_with(&first));

        // 3,200 bytes of state in 2,000 free: chunked, in two sets.
        let (mgr, solver) = manager_with(2_000);
        let mut first = serve(&mgr, &solver, 4, 2);
        let second = serve(&mgr, &solver, 4, 2);
        assert_eq!((first.chunks, first.buffer_sets()), (4, 2));
        assert!(second.shares_arrays_with(&first));
        let mut third = serve(&mgr, &solver, 8, 2);
        assert!(!third.shares_arrays_with(&second));
        for set in 0..2 {
            assert_eq!(state_ptr(&mut first, set), state_ptr(&mut third, set));
        }
        let params: Vec<u64> = (0..2)
            .map(|set| {
                let params = third.take_set::<f32>("params", set).unwrap();
                assert_eq!(params.len(), 8);
                params.with_device_ptr(|p| p.0).unwrap()
            })
            .collect();
        assert_eq!(params[0], params[1], "one buffer in every set");
        let fourth = serve(&mgr, &solver, 8, 2);
        assert!(fourth.shares_arrays_with(&third));
    }
}
