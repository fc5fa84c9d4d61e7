//! What the device holds is the buffers' bytes: an array placed in a
//! reused, larger buffer is its own size, but its instance holds the whole
//! buffer in `allocated_bytes`, against its cap (`H` in active mode), in
//! what evicting it releases and in the statistics' held figures; the plan
//! credits reused buffers at what they hold, so that a batch plans the same
//! whatever came before it. Page-locked host memory is counted apart.

use crate::common::{manager, queuing};
use cubie_mem::{
    ArrayRequest, HostMemoryKind, LimitMode, ManagerConfig, MemoryKind, MemoryManager,
    Registration, SimBackend,
};
use proptest::prelude::*;

/// `f64 [rows, runs]`, chunk axis 1, `runs` runs.
fn state(rows: usize, runs: usize) -> ArrayRequest {
    ArrayRequest::of::<f64>([rows, runs])
        .chunk_axis(1)
        .total_runs(runs)
}

#[test]
fn an_instance_holds_the_buffer_its_smaller_array_reuses() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("x", ArrayRequest::of::<u32>([200]))])
        .unwrap();
    mgr.allocate_queue(&solver).unwrap();
    mgr.queue_request(&solver, [("x", ArrayRequest::of::<u32>([10]))])
        .unwrap();
    let x = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u32>("x")
        .unwrap();
    assert_eq!((x.nbytes(), x.capacity_bytes()), (40, 800));
    assert_eq!(sim.free_bytes(), (1 << 20) - 800);
    assert_eq!(solver.allocated_bytes(), 800, "the buffer is held");
    let stats = mgr.memory_report();
    for usage in [
        stats.total,
        stats.instances[0].usage,
        stats.groups["default"],
    ] {
        assert_eq!(
            (usage.current_bytes, usage.device_bytes),
            (40, 40),
            "in use"
        );
        assert_eq!(
            (usage.held_bytes, usage.held_device_bytes),
            (800, 800),
            "held"
        );
        assert_eq!(usage.peak_held_bytes, 800);
    }
    let table = stats.to_string();
    let total = table.lines().find(|l| l.starts_with("total")).unwrap();
    let cells: Vec<&str> = total.split_whitespace().collect();
    assert_eq!(&cells[1..3], ["0.00", "0.00"], "MiB, rounded: {table}");
    assert!(table.contains("device held"), "{table}");
    mgr.free(&solver, "x").unwrap();
    let stats = mgr.memory_report();
    assert_eq!((stats.total.current_bytes, stats.total.held_bytes), (0, 0));
}

#[test]
fn the_caps_count_the_buffer_in_active_mode() {
    let (mgr, _sim) = manager(10_000_000, 10_000_000);
    mgr.set_limit_mode(LimitMode::Active);
    let solver = mgr.register(queuing().proportion(0.5)).unwrap();
    mgr.queue_request(&solver, [("x", ArrayRequest::of::<u8>([4_000_000]))])
        .unwrap();
    mgr.allocate_queue(&solver).unwrap();
    mgr.queue_request(&solver, [("x", ArrayRequest::of::<u8>([1_000]))])
        .unwrap();
    mgr.allocate_queue(&solver).unwrap();
    assert_eq!(solver.allocated_bytes(), 4_000_000);
    // H = 5,000,000 - 4,000,000: the cap no longer sees 3,999,000 bytes
    // the device still gives the instance.
    assert_eq!(mgr.available_memory(&solver).unwrap(), 1_000_000);
}

#[test]
fn evicting_an_owner_releases_the_buffers_it_holds() {
    // Two idle owners, the older holding an 800,000-byte buffer with a
    // 1,000-byte array in it: evicting it alone makes room for 500,000
    // bytes.
    let (mgr, sim) = manager(1 << 30, 1_000_000);
    let old = mgr.register(queuing().name("old")).unwrap();
    let recent = mgr.register(queuing().name("recent")).unwrap();
    let serve = |instance, bytes: usize| {
        mgr.queue_request(instance, [("cache", ArrayRequest::of::<u8>([bytes]))])
            .unwrap();
        mgr.allocate_queue(instance).unwrap();
    };
    serve(&old, 800_000);
    serve(&old, 1_000);
    mgr.begin_work(&recent).unwrap().finish().unwrap();
    serve(&recent, 100_000);
    assert_eq!(sim.free_bytes(), 100_000);
    let batch = mgr.register(queuing().name("batch")).unwrap();
    mgr.queue_request(
        &batch,
        [("x", ArrayRequest::of::<u8>([500_000]).unchunkable())],
    )
    .unwrap();
    mgr.allocate_queue(&batch).unwrap();
    assert_eq!(old.allocated_bytes(), 0, "evicted");
    assert_eq!(
        recent.allocated_bytes(),
        100_000,
        "its bytes were not needed"
    );
    assert_eq!(mgr.memory_report().total.evictions, 1);
}

#[test]
fn a_batch_after_reuses_plans_as_on_a_fresh_manager() {
    // 150,000, 30,000 then 100,000 runs of 64 bytes in 6,000,000 bytes.
    let free = 6_000_000;
    let plan_of = |history: &[usize]| {
        let (mgr, _) = manager(1 << 30, free);
        let solver = mgr.register(queuing()).unwrap();
        let mut last = None;
        for &runs in history {
            mgr.queue_request(&solver, [("state", state(8, runs))])
                .unwrap();
            last = Some(*mgr.allocate_queue_for(&solver).unwrap().plan());
        }
        last.unwrap()
    };
    let after = plan_of(&[150_000, 30_000, 100_000]);
    let fresh = plan_of(&[100_000]);
    assert_eq!(after, fresh);
    assert_eq!((fresh.chunks(), fresh.chunk_length()), (2, 50_000));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_batch_plans_the_same_whatever_came_before_it(
        history in prop::collection::vec((1usize..40_000, 1usize..3, 0usize..3), 0..5),
        last in (1usize..40_000, 1usize..3, 0usize..3),
        free in 100_000u64..3_000_000,
        granule in prop_oneof![Just(0u64), Just(4096u64)],
        active in any::<bool>(),
    ) {
        let run = |batches: &[(usize, usize, usize)]| {
            let sim = SimBackend::new(8_000_000).with_free(free);
            let mgr = MemoryManager::with_config(sim, ManagerConfig::default().granule(granule));
            if active {
                mgr.set_limit_mode(LimitMode::Active);
            }
            let solver = mgr.register(Registration::new().proportion(0.25).on_invalidate(|| {})).unwrap();
            let mut last = None;
            for &(runs, depth, params) in batches {
                let request = state(4, runs).pipeline_depth(depth);
                let params = ArrayRequest::of::<f32>([params * 100 + 1]).unchunkable();
                let status = ArrayRequest::of::<i32>([runs])
                    .chunk_axis(0)
                    .total_runs(runs)
                    .memory(MemoryKind::Pinned);
                mgr.queue_request(
                    &solver,
                    [("state", request), ("params", params), ("status", status)],
                )
                .unwrap();
                last = Some(mgr.allocate_queue_for(&solver).map(|r| *r.plan()));
            }
            last
        };
        let mut all = history.clone();
        all.push(last);
        // Histories whose batches all fit; the last batch compared.
        let fresh = run(&[last]).unwrap();
        let mut prefix_ok = true;
        for end in 1..all.len() {
            if run(&all[..end]).unwrap().is_err() { prefix_ok = false; }
        }
        prop_assume!(prefix_ok);
        let after = run(&all).unwrap();
        prop_assert_eq!(after, fresh);
    }
}

#[test]
fn page_locked_host_memory_is_counted_apart_from_the_device() {
    let (mgr, _sim) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    let host = mgr
        .create_host_array::<f64>([1000], HostMemoryKind::Pinned, None, &solver)
        .unwrap();
    let pageable = mgr
        .create_host_array::<f64>([1000], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    // A pageable array's chunk passes through a staging buffer of the pool.
    let pool = cubie_mem::StagingPool::for_manager(&mgr);
    let request = ArrayRequest::of::<f32>([500]).unchunkable();
    mgr.queue_request(&solver, [("state", request)]).unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let device = response.take::<f32>("state").unwrap();
    let staged = mgr
        .create_host_array::<f32>([500], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    mgr.chunk_streamer(&solver, &cubie_mem::ChunkPlan::new(500, 1, 500).unwrap())
        .unwrap()
        .with_pool(pool.clone())
        .copy_in(&staged, &device, 0, 0)
        .unwrap();
    let stats = mgr.memory_report();
    assert_eq!(stats.pinned_host_array_bytes, 8_000);
    assert!(stats.staging_bytes >= 2_000, "{}", stats.staging_bytes);
    assert_eq!(stats.total.held_bytes, 2_000, "the device array alone");
    let table = stats.to_string();
    assert!(
        table.contains("page-locked host memory: 8000 B (7.81 KiB) in host arrays"),
        "{table}"
    );
    drop((host, pageable, staged));
    pool.clear();
    assert_eq!(mgr.memory_report().pinned_host_array_bytes, 0);
    assert_eq!(mgr.memory_report().staging_bytes, 0);
}
