//! The decision at its edges: each comparison at its boundary, and the
//! figures it is built from (footprints, buffer sets, pinned bytes, the
//! bytes the caps see again) checked directly, so that a changed
//! comparison or a figure lost on the way fails a test of its own.

use super::super::batch::PlacedRequest;
use super::tests::{batch, held, idle, planned, snapshot, state};
use super::*;
use crate::ids::InstanceId;
use crate::{ArrayRequest, MemoryKind};

/// `runs` runs of one f32 each (4 bytes a run) in page-locked host memory.
fn pinned_state(runs: usize) -> ArrayRequest {
    ArrayRequest::of::<f32>([runs])
        .chunk_axis(0)
        .total_runs(runs)
        .memory(MemoryKind::Pinned)
}

/// A held page-locked buffer of `capacity` bytes holding `bytes`.
fn held_pinned(bytes: u64, capacity: u64) -> Comparison {
    Comparison {
        kind: MemoryKind::Pinned,
        ..held(bytes, capacity, false)
    }
}

/// `label`'s buffer in set 0 of `kind` and `capacity` bytes.
fn replaced(label: &str, kind: MemoryKind, capacity: u64) -> Replaced<'_> {
    Replaced {
        instance: InstanceId::fresh(),
        label,
        entry: 0,
        set: 0,
        kind,
        capacity,
    }
}

#[test]
fn a_remembered_partition_that_fits_exactly_once_the_victims_go_evicts_them() {
    let batch = batch(vec![("state", state(100))]);
    let mut snap = snapshot(&batch, 500);
    snap.remembered = Some((100, 1));
    snap.candidates = vec![idle(0, 300)];
    let decision = decide(&snap);
    assert!(decision.eviction.is_some(), "800 bytes in 500 + 300 free");
    assert_eq!(decision.budget.effective_free, 800);
}

#[test]
fn a_remembered_partition_larger_than_what_eviction_frees_evicts_no_one() {
    let batch = batch(vec![("state", state(100))]);
    let mut snap = snapshot(&batch, 500);
    snap.remembered = Some((100, 1));
    snap.candidates = vec![idle(0, 299)];
    let decision = decide(&snap);
    assert!(decision.eviction.is_none(), "800 bytes in 500 + 299 free");
    let plan = planned(&decision).plan;
    assert_eq!(
        (plan.chunks, plan.chunk_length),
        (1, 100),
        "the partition is kept, to fail at allocation with everyone intact"
    );
}

#[test]
fn an_empty_batch_is_one_chunk_even_with_a_remembered_partition() {
    let empty = ArrayRequest::of::<f64>([100, 0])
        .chunk_axis(0)
        .total_runs(100);
    let batch = batch(vec![("empty", empty)]);
    let mut snap = snapshot(&batch, 1 << 20);
    snap.remembered = Some((25, 4));
    assert_eq!(planned(&decide(&snap)).plan.chunks, 1);
}

#[test]
fn caps_exactly_at_the_free_memory_do_not_bind() {
    let params = ArrayRequest::of::<u8>([1_000]).unchunkable();
    let batch = batch(vec![("params", params)]);
    let mut snap = snapshot(&batch, 500);
    snap.caps = Some(GroupCaps {
        caps: 600,
        held: 100,
        proportion: 0.5,
    });
    let decision = decide(&snap);
    assert_eq!(decision.budget.cap_headroom, Some(500));
    let error = decision.planned.err().unwrap();
    assert!(
        !matches!(error, MemError::CapLimited { .. }),
        "the device binds as much as the caps: {error}"
    );
}

#[test]
fn caps_that_do_not_bind_leave_the_planner_s_error() {
    let params = ArrayRequest::of::<u8>([1_000]).unchunkable();
    let batch = batch(vec![("params", params)]);
    let mut snap = snapshot(&batch, 500);
    snap.caps = Some(GroupCaps {
        caps: 1 << 20,
        held: 0,
        proportion: 1.0,
    });
    let error = decide(&snap).planned.err().unwrap();
    assert!(matches!(error, MemError::AllUnchunkable { .. }), "{error}");
}

#[test]
fn a_chunkable_request_has_a_buffer_in_every_set_and_an_unchunkable_one_shares_one() {
    let plan = ChunkPlan {
        buffer_sets: 3,
        ..ChunkPlan::default()
    };
    assert_eq!(sets_of(&plan, &state(100)), 3);
    let params = ArrayRequest::of::<u8>([10]).unchunkable();
    assert_eq!(sets_of(&plan, &params), 1);
}

#[test]
fn the_device_footprint_counts_each_device_array_in_each_set_and_no_pinned_one() {
    let batch = batch(vec![
        ("state", state(100)),
        ("params", ArrayRequest::of::<u8>([10]).unchunkable()),
        ("saved", pinned_state(100)),
    ]);
    let plan = ChunkPlan {
        total_runs: 100,
        chunks: 4,
        chunk_length: 25,
        buffer_sets: 2,
        ..ChunkPlan::default()
    };
    assert_eq!(device_footprint(&batch, &plan), 25 * 8 * 2 + 10);
}

#[test]
fn a_choice_gives_the_label_and_bytes_of_the_array_placed() {
    let request = state(100);
    let keep = Choice::Keep {
        bytes: 8,
        label: "kept",
    };
    let fresh = Choice::Fresh {
        label: "fresh",
        request: &request,
        bytes: 16,
    };
    let reuse = Choice::Reuse {
        label: "reused",
        request: &request,
        bytes: 24,
        held: replaced("reused", MemoryKind::Device, 32),
    };
    assert_eq!(keep.label_and_bytes(), ("kept", 8));
    assert_eq!(fresh.label_and_bytes(), ("fresh", 16));
    assert_eq!(reuse.label_and_bytes(), ("reused", 24));
}

#[test]
fn new_device_bytes_leave_out_new_pinned_memory() {
    let batch = batch(vec![("state", state(100)), ("saved", pinned_state(100))]);
    let snap = snapshot(&batch, 1 << 20);
    let placements = planned(&decide(&snap)).placements.choices.clone();
    let placements = Placements {
        choices: placements,
        replaced: Vec::new(),
    };
    assert_eq!(placements.new_device_bytes(), 800);
}

#[test]
fn an_oversized_buffer_is_replaced_when_its_spare_bytes_exactly_make_the_room() {
    // "a" reuses a 1,000-byte buffer for 800; "b" needs 800 new bytes, and
    // 600 are free: with a's 200 spare bytes the new arrays fit exactly.
    let batch = batch(vec![("a", state(100)), ("b", state(100))]);
    let mut snap = snapshot(&batch, 1 << 20);
    snap.held.buffers = vec![held(8, 1_000, false)];
    snap.held.requests = vec![
        PlacedRequest { held: 1, entry: 0 },
        PlacedRequest { held: 0, entry: 0 },
    ];
    let plan = planned(&decide(&snap)).plan;
    let mut placements = Placements::choose(&batch, &snap.held, &plan);
    assert_eq!(
        placements.make_room(600),
        Some(FreeFirst {
            new: 1_600,
            free: 600,
            replaced: 1_000
        })
    );
    let mut short = Placements::choose(&batch, &snap.held, &plan);
    assert_eq!(short.make_room(599), None, "one byte short: fails intact");
    assert!(matches!(short.choices[0], Choice::Reuse { .. }));
}

#[test]
fn a_reused_page_locked_buffer_makes_no_room_on_the_device() {
    // "d" needs 800 new device bytes with 100 free; "p" reuses a 2,000-byte
    // page-locked buffer for 400, whose spare bytes are not device memory.
    let batch = batch(vec![("d", state(100)), ("p", pinned_state(100))]);
    let mut snap = snapshot(&batch, 1 << 20);
    snap.held.buffers = vec![held_pinned(8, 2_000)];
    snap.held.requests = vec![
        PlacedRequest { held: 0, entry: 0 },
        PlacedRequest { held: 1, entry: 0 },
    ];
    let plan = planned(&decide(&snap)).plan;
    let mut placements = Placements::choose(&batch, &snap.held, &plan);
    assert!(matches!(placements.choices[1], Choice::Reuse { .. }));
    assert_eq!(placements.make_room(100), None);
    assert!(
        matches!(placements.choices[1], Choice::Reuse { .. }),
        "the page-locked buffer stays reused"
    );
}

#[test]
fn only_device_buffers_are_freed_first_to_make_room() {
    let placements = Placements {
        choices: Vec::new(),
        replaced: vec![
            replaced("device", MemoryKind::Device, 100),
            replaced("pinned", MemoryKind::Pinned, 50),
        ],
    };
    let freed: Vec<_> = placements.replaced_device().map(|old| old.label).collect();
    assert_eq!(freed, ["device"]);
}

#[test]
fn the_pinned_bytes_requested_are_those_of_the_pinned_arrays() {
    let batch = batch(vec![("state", state(100)), ("saved", pinned_state(100))]);
    assert_eq!(snapshot(&batch, 1 << 20).pinned_requested(), 400);
}

#[test]
fn the_caps_see_every_held_buffer_again_and_the_device_only_device_ones() {
    let batch = batch(vec![("state", state(100)), ("saved", pinned_state(100))]);
    let mut snap = snapshot(&batch, 1_000);
    snap.held.buffers = vec![held(8, 100, false), held_pinned(8, 50)];
    snap.held.requests = vec![
        PlacedRequest { held: 1, entry: 0 },
        PlacedRequest { held: 1, entry: 0 },
    ];
    assert_eq!(snap.held.replaced_bytes(), 100);
    assert_eq!(snap.held.replaced_cap_bytes(), 150);
    snap.caps = Some(GroupCaps {
        caps: 1_000,
        held: 400,
        proportion: 1.0,
    });
    assert_eq!(snap.budget().cap_headroom, Some(750), "1,000 - (400 - 150)");
    assert_eq!(snap.budget().effective_free, 1_100);
}
