//! Property tests of the decision: placements against the held buffers
//! (kept, reused or replaced), room made only when it makes the new
//! arrays fit, and the decision's outcome the manager's own, end to end.

use proptest::prelude::*;

use super::super::batch::PlacedRequest;
use super::tests::{batch, snapshot, state};
use super::*;
use crate::{ArrayRequest, MemoryKind};

/// A held buffer of `bytes` in a buffer of `capacity`, of the request's
/// kind or not, keeping its layout or not.
fn comparison((bytes, spare, same_kind, keeps): (u64, u64, bool, bool)) -> Comparison {
    Comparison {
        kind: if same_kind {
            MemoryKind::Device
        } else {
            MemoryKind::Pinned
        },
        same_kind,
        same_but_runs: same_kind && keeps,
        runs_held: usize::try_from(bytes / 8).unwrap_or(0),
        bytes,
        capacity: bytes + spare,
    }
}

proptest! {
    #![proptest_config(crate::proptest_cases(300))]

    /// Each array is kept when its held layout is what the plan asks for,
    /// reused when its buffer is large enough, else given new memory and
    /// its held buffer replaced; room is made only when the new arrays do
    /// not fit beside the replaced ones and do once those are freed.
    #[test]
    fn placements_keep_reuse_or_replace_and_make_room_only_to_fit(
        held in prop::collection::vec(
            prop::option::of((0u64..1_600, 0u64..1_600, any::<bool>(), any::<bool>())),
            1..5,
        ),
        runs in 1usize..200,
        free in 0u64..6_000,
    ) {
        let requests: Vec<String> = (0..held.len()).map(|i| format!("a{i}")).collect();
        let batch = batch(requests.iter().map(|label| (label.as_str(), state(runs))).collect());
        let mut snap = snapshot(&batch, 1 << 30);
        snap.held.buffers = held.iter().flatten().copied().map(comparison).collect();
        snap.held.requests = held
            .iter()
            .map(|h| PlacedRequest { held: usize::from(h.is_some()), entry: 0 })
            .collect();
        let plan = decide(&snap).planned.map(|p| p.plan).unwrap();
        let mut placements = Placements::choose(&batch, &snap.held, &plan);
        prop_assert_eq!(placements.choices.len(), held.len());
        let bytes = u64::try_from(runs).unwrap() * 8;
        for (choice, old) in placements.choices.iter().zip(&held) {
            let old = old.map(comparison).filter(|old| old.same_kind);
            match (choice, old) {
                (Choice::Keep { bytes: kept, .. }, Some(old)) => {
                    prop_assert!(old.keeps(&state(runs), plan.chunk_length));
                    prop_assert_eq!(*kept, old.bytes);
                }
                (Choice::Reuse { held, .. }, Some(old)) => {
                    prop_assert!(!old.keeps(&state(runs), plan.chunk_length));
                    prop_assert!(old.capacity >= bytes);
                    prop_assert_eq!(held.capacity, old.capacity);
                }
                (Choice::Fresh { .. }, old) => {
                    let replaces = old.is_none_or(|old| {
                        old.capacity < bytes && !old.keeps(&state(runs), plan.chunk_length)
                    });
                    prop_assert!(replaces, "new memory beside {:?}", old);
                }
                (choice, old) => prop_assert!(false, "{:?} for {:?}", choice, old),
            }
        }
        // A buffer of another memory kind is not among them: it is freed
        // on commit, never first.
        let replaced = held.iter().flatten().filter(|h| {
            let old = comparison(**h);
            old.same_kind && !old.keeps(&state(runs), plan.chunk_length) && old.capacity < bytes
        }).count();
        prop_assert_eq!(placements.replaced.len(), replaced);
        let new = placements.new_device_bytes();
        let before = placements.replaced.len();
        match placements.make_room(free) {
            Some(room) => {
                prop_assert!(room.new > free, "made room though both fit");
                prop_assert!(room.new <= free + room.replaced, "made room that does not fit");
                prop_assert_eq!(room.new, placements.new_device_bytes());
            }
            None => {
                prop_assert_eq!(placements.replaced.len(), before, "converted for nothing");
                prop_assert_eq!(placements.new_device_bytes(), new);
            }
        }
    }

    /// What the decision says of a batch on a device with `free` bytes
    /// free is what the manager does with it: the same plan, or the same
    /// error (its report aside).
    #[test]
    fn the_decision_is_the_manager_s_end_to_end(
        runs in 1usize..300,
        unchunkable in 1usize..3_000,
        depth in 1usize..3,
        free in 0u64..10_000,
    ) {
        use crate::{ManagerConfig, MemoryManager, Registration, SimBackend};
        let requests = vec![
            ("state", state(runs).pipeline_depth(depth)),
            ("params", ArrayRequest::of::<u8>([unchunkable]).unchunkable()),
        ];
        let mgr = MemoryManager::with_config(
            SimBackend::new(1 << 30).with_free(free),
            ManagerConfig::default().granule(0),
        );
        let solver = mgr.register(Registration::new().on_invalidate(|| {})).unwrap();
        mgr.queue_request(&solver, requests.clone()).unwrap();
        let end_to_end = mgr.allocate_queue_for(&solver);
        let batch = batch(requests);
        let decided = decide(&snapshot(&batch, free)).planned.map(|p| p.plan);
        match (decided, end_to_end) {
            (Ok(plan), Ok(response)) => {
                prop_assert_eq!((plan.chunks, plan.chunk_length), (response.chunks, response.chunk_length));
            }
            (Err(decided), Err(error)) => {
                let decided = match error.fit_report() {
                    Some(report) => decided.with_fit_report(report.clone()),
                    None => decided,
                };
                prop_assert_eq!(decided, error);
            }
            (decided, end_to_end) => prop_assert!(
                false,
                "decided {:?}, the manager {:?}",
                decided.map(|p| p.chunks),
                end_to_end.map(|r| r.chunks)
            ),
        }
    }
}
