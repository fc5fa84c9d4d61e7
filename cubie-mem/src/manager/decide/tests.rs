//! The decision driven directly, from snapshots made by hand: who is
//! evicted and when, the plan, each placement (kept, reused, replaced),
//! when replaced arrays are freed first, and that a refused batch gets the
//! error the manager returns for it.

use std::sync::Arc;

use proptest::prelude::*;

use super::super::batch::{Batch, PlacedRequest, Queued};
use super::super::held::Freed;
use super::*;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::SetSizes;
use crate::{ArrayRequest, MemoryKind, RequestSet};

/// A batch of one instance that queued `requests`.
pub(super) fn batch(requests: Vec<(&str, ArrayRequest)>) -> Batch {
    let trigger = InstanceId::fresh();
    Batch {
        trigger,
        group: Arc::from("default"),
        owner: trigger.as_own_owner(),
        participants: vec![trigger],
        taken: vec![(
            trigger,
            Queued {
                order: 0,
                sizes: SetSizes::of(requests.iter().map(|(_, request)| request)),
                set: requests.into_iter().collect::<RequestSet>(),
                passed_over: 0,
            },
        )],
    }
}

/// A snapshot of `batch` on a device with `free` bytes free, holding
/// nothing, in passive mode, with no granule.
pub(super) fn snapshot(batch: &Batch, free: u64) -> Snapshot<'_> {
    let sizes = BatchSizes::measure(batch.requests()).unwrap();
    let held = Held {
        buffers: Vec::new(),
        requests: batch
            .requests()
            .map(|_| PlacedRequest { held: 0, entry: 0 })
            .collect(),
    };
    Snapshot {
        batch,
        sizes,
        free: (sizes.total_bytes() > 0).then_some(free),
        held,
        caps: None,
        granule: 0,
        remembered: None,
        candidates: Vec::new(),
    }
}

/// An idle owner of `device` bytes, last used at `last_used`.
pub(super) fn idle(last_used: u64, device: u64) -> Candidate {
    Candidate {
        owner: OwnerId::fresh(),
        last_used,
        releasable: Freed { device, pinned: 0 },
        in_group: false,
        group_held: 0,
    }
}

/// `runs` runs of one f64 each: 8 bytes a run.
pub(super) fn state(runs: usize) -> ArrayRequest {
    ArrayRequest::of::<f64>([runs])
        .chunk_axis(0)
        .total_runs(runs)
}

/// A held device buffer compared with a request.
pub(super) fn held(bytes: u64, capacity: u64, keeps: bool) -> Comparison {
    Comparison {
        kind: MemoryKind::Device,
        same_kind: true,
        same_but_runs: keeps,
        runs_held: usize::try_from(bytes / 8).unwrap(),
        bytes,
        capacity,
    }
}

pub(super) fn planned<'d, 'b>(decision: &'d Decision<'b>) -> &'d Planned<'b> {
    decision.planned.as_ref().unwrap()
}

#[test]
fn a_batch_that_fits_evicts_no_one_and_gets_new_memory() {
    let batch = batch(vec![("state", state(100))]);
    let mut snap = snapshot(&batch, 10_000);
    snap.candidates = vec![idle(0, 5_000)];
    let decision = decide(&snap);
    assert!(decision.eviction.is_none());
    let planned = planned(&decision);
    assert_eq!((planned.plan.chunks, planned.plan.chunk_length), (1, 100));
    assert!(matches!(
        planned.placements.choices[..],
        [Choice::Fresh { bytes: 800, .. }]
    ));
    assert_eq!(planned.room, Room::Decided(None));
}

#[test]
fn the_least_recently_used_idle_owners_are_evicted_when_the_batch_then_fits() {
    let batch = batch(vec![("state", state(100))]);
    let mut snap = snapshot(&batch, 500);
    let (newer, older, oldest) = (idle(9, 400), idle(5, 200), idle(1, 200));
    snap.candidates = vec![newer, older, oldest];
    let decision = decide(&snap);
    let eviction = decision.eviction.as_ref().unwrap();
    assert_eq!(eviction.victims.owners, [oldest.owner, older.owner]);
    assert_eq!(eviction.needed, 301, "R - Fe + 1");
    assert_eq!(decision.before.effective_free, 500);
    assert_eq!(decision.budget.effective_free, 900);
    let planned = planned(&decision);
    assert_eq!(planned.plan.chunks, 1);
    assert_eq!(
        planned.room,
        Room::Remeasure,
        "eviction made the free figure stale"
    );
}

#[test]
fn an_eviction_that_frees_less_is_decided_again_with_what_it_freed() {
    let batch = batch(vec![("state", state(100))]);
    let mut snap = snapshot(&batch, 500);
    snap.candidates = vec![idle(0, 400)];
    let decision = decide(&snap);
    assert_eq!(decision.budget.effective_free, 900);
    let eviction = decision.eviction.unwrap();
    let again = finish(&snap, decision.before, Some(eviction), 100);
    assert_eq!(again.budget.effective_free, 600, "an access held 300 bytes");
    assert!(planned(&again).plan.chunks > 1);
    let none_freed = finish(&snap, again.before, again.eviction, 0);
    assert!(
        matches!(planned(&none_freed).room, Room::Decided(_)),
        "free stays current"
    );
}

#[test]
fn in_active_mode_the_caps_see_again_what_the_group_s_victims_held() {
    // The caps allow 1,001 bytes, of which 981 could be allocated (2% is
    // withheld): too few for the 1,000 asked, until the victim's 600 in
    // the group are seen again, before the batch is planned.
    let params = ArrayRequest::of::<u8>([1_000]).unchunkable();
    let batch = batch(vec![("params", params)]);
    let mut snap = snapshot(&batch, 500);
    snap.caps = Some(GroupCaps {
        caps: 1_901,
        held: 900,
        proportion: 1.0,
    });
    let mut victim = idle(0, 600);
    victim.in_group = true;
    victim.group_held = 600;
    snap.candidates = vec![victim];
    let decision = decide(&snap);
    assert_eq!(decision.before.cap_headroom, Some(1_001));
    assert_eq!(
        decision.eviction.as_ref().unwrap().victims.owners,
        [victim.owner]
    );
    assert_eq!(decision.budget.cap_headroom, Some(1_601));
    assert_eq!(decision.budget.effective_free, 1_100);
    assert_eq!(planned(&decision).plan.chunks, 1);
}

#[test]
fn no_one_is_evicted_for_a_batch_that_would_not_fit_after() {
    let params = ArrayRequest::of::<u8>([1_000]).unchunkable();
    let batch = batch(vec![("params", params)]);
    let mut snap = snapshot(&batch, 500);
    snap.candidates = vec![idle(0, 100)];
    let decision = decide(&snap);
    assert!(decision.eviction.is_none());
    assert_eq!(
        decision.budget, decision.before,
        "the report reads the budget as it is"
    );
    let error = decision.planned.err().unwrap();
    let counted = decide(&snapshot(&batch, 600)).planned.err();
    assert_eq!(
        Some(error),
        counted,
        "the error counts what eviction would free"
    );
}

#[test]
fn a_held_array_is_kept_reused_or_replaced() {
    let batch = batch(vec![
        ("kept", state(100)),
        ("reused", state(100)),
        ("replaced", state(100)),
    ]);
    let mut snap = snapshot(&batch, 1 << 20);
    snap.held.buffers = vec![
        held(800, 800, true),
        held(80, 1_000, false),
        held(80, 80, false),
    ];
    snap.held.requests = (0..3)
        .map(|_| PlacedRequest { held: 1, entry: 0 })
        .collect();
    let decision = decide(&snap);
    let placements = &planned(&decision).placements;
    assert!(matches!(
        placements.choices[..],
        [
            Choice::Keep {
                bytes: 800,
                label: "kept"
            },
            Choice::Reuse {
                bytes: 800,
                label: "reused",
                held: Replaced {
                    capacity: 1_000,
                    ..
                },
                ..
            },
            Choice::Fresh {
                bytes: 800,
                label: "replaced",
                ..
            },
        ]
    ));
    let replaced: Vec<_> = placements
        .replaced
        .iter()
        .map(|r| (r.label, r.capacity))
        .collect();
    assert_eq!(replaced, [("replaced", 80)]);
    assert_eq!(
        decision.budget.effective_free,
        (1 << 20) + 1_880,
        "Fe credits every held buffer"
    );
}

#[test]
fn replaced_arrays_are_freed_first_only_when_both_do_not_fit() {
    let batch = batch(vec![("state", state(100))]);
    let mut snap = snapshot(&batch, 1 << 20);
    snap.held.buffers = vec![held(80, 80, false)];
    snap.held.requests = vec![PlacedRequest { held: 1, entry: 0 }];
    let mut placements = Placements::choose(&batch, &snap.held, &planned(&decide(&snap)).plan);
    assert_eq!(placements.make_room(800), None, "both fit");
    assert_eq!(
        placements.make_room(720),
        Some(FreeFirst {
            new: 800,
            free: 720,
            replaced: 80
        })
    );
    assert_eq!(
        placements.make_room(719),
        None,
        "cannot fit even so: fails intact"
    );
}

#[test]
fn an_oversized_reused_buffer_is_replaced_when_the_new_arrays_need_its_room() {
    let batch = batch(vec![("a", state(100)), ("b", state(100))]);
    let mut snap = snapshot(&batch, 1 << 20);
    // "a" reuses a 2,000-byte buffer for 800 bytes; "b" needs new memory.
    snap.held.buffers = vec![held(8, 2_000, false)];
    snap.held.requests = vec![
        PlacedRequest { held: 1, entry: 0 },
        PlacedRequest { held: 0, entry: 0 },
    ];
    let plan = planned(&decide(&snap)).plan;
    let mut placements = Placements::choose(&batch, &snap.held, &plan);
    assert!(matches!(placements.choices[0], Choice::Reuse { .. }));
    let room = placements.make_room(100);
    assert_eq!(
        room,
        Some(FreeFirst {
            new: 1_600,
            free: 100,
            replaced: 2_000
        })
    );
    assert!(matches!(
        placements.choices[..],
        [Choice::Fresh { .. }, Choice::Fresh { .. }]
    ));
    assert_eq!(placements.replaced.len(), 1);
}

#[test]
fn a_remembered_partition_is_reused() {
    let batch = batch(vec![("state", state(100))]);
    let mut snap = snapshot(&batch, 1 << 20);
    snap.remembered = Some((25, 4));
    let plan = planned(&decide(&snap)).plan;
    assert_eq!((plan.chunks, plan.chunk_length), (4, 25));
}

#[test]
fn caps_that_bind_are_named_with_the_group_s_figures() {
    let params = ArrayRequest::of::<u8>([1_000]).unchunkable();
    let batch = batch(vec![("params", params)]);
    let mut snap = snapshot(&batch, 1 << 20);
    snap.caps = Some(GroupCaps {
        caps: 600,
        held: 100,
        proportion: 0.25,
    });
    let decision = decide(&snap);
    assert_eq!(decision.budget.cap_headroom, Some(500));
    match decision.planned.err().unwrap() {
        MemError::CapLimited {
            group,
            proportion,
            caps,
            held,
            ..
        } => assert_eq!(
            (group.as_str(), proportion, caps.0, held.0),
            ("default", 0.25, 600, 100)
        ),
        other => panic!("{other}"),
    }
}

#[test]
fn a_refused_batch_gets_the_error_the_manager_returns() {
    use crate::{ManagerConfig, MemoryManager, Registration, SimBackend};
    let free = 50_000;
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(free),
        ManagerConfig::default().granule(0),
    );
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let params = ArrayRequest::of::<u8>([60_000]).unchunkable();
    mgr.queue_request(&solver, [("params", params.clone())])
        .unwrap();
    let end_to_end = mgr.allocate_queue(&solver).unwrap_err();
    let batch = batch(vec![("params", params)]);
    let decided = decide(&snapshot(&batch, free)).planned.err().unwrap();
    let report = end_to_end.fit_report().unwrap().clone();
    assert_eq!(decided.with_fit_report(report), end_to_end);
}

proptest! {
    #![proptest_config(crate::proptest_cases(500))]

    /// Over random batches, free memory and idle owners: an eviction is
    /// the least recently used candidates, only for a batch that then
    /// plans and whose device arrays fit what it frees; a plan's arrays
    /// never take more than the memory the budget counts; a refusal evicts
    /// no one and is the error of the batch planned as if the owners it
    /// would have evicted were gone.
    #[test]
    fn decisions_evict_the_oldest_for_a_batch_that_then_fits(
        runs in 1usize..400,
        unchunkable in 0usize..2_000,
        depth in 1usize..3,
        free in 0u64..8_000,
        idle_owners in prop::collection::vec((0u64..5, 0u64..3_000), 0..5),
    ) {
        let batch = batch(vec![
            ("state", state(runs).pipeline_depth(depth)),
            ("params", ArrayRequest::of::<u8>([unchunkable.max(1)]).unchunkable()),
        ]);
        let mut snap = snapshot(&batch, free);
        snap.candidates = idle_owners.iter().map(|&(used, bytes)| idle(used, bytes)).collect();
        let decision = decide(&snap);
        match (&decision.eviction, &decision.planned) {
            (Some(eviction), Ok(planned)) => {
                let mut lru = snap.candidates.clone();
                lru.sort_by_key(|c| (c.last_used, c.owner));
                let oldest: Vec<OwnerId> =
                    lru.iter().take(eviction.victims.owners.len()).map(|c| c.owner).collect();
                prop_assert_eq!(&eviction.victims.owners, &oldest);
                prop_assert!(device_footprint(&batch, &planned.plan) <= decision.budget.effective_free);
            }
            (Some(_), Err(error)) => prop_assert!(false, "evicted, then refused: {}", error),
            (None, Ok(planned)) => {
                prop_assert!(device_footprint(&batch, &planned.plan) <= decision.budget.effective_free);
            }
            (None, Err(error)) => {
                prop_assert_eq!(decision.budget, decision.before);
                let counted = snap.shortfall().map_or(0, |needed| {
                    choose_victims(&snap.candidates, needed, snap.pinned_requested()).credit
                });
                let without = decide(&snapshot(&batch, free.saturating_add(counted)));
                prop_assert_eq!(Some(error), without.planned.as_ref().err());
            }
        }
    }
}
