//! Pipeline depth: a batch with depth `d` shares the chunkable budget among
//! `d` buffer sets, and the manager allocates a buffer per set for every
//! chunkable array (one for an unchunkable array), replacing, freeing and
//! counting every set.

use crate::common;
use crate::common::{Inbox, manager, queuing};
use cubie_mem::plan::Budget;
use cubie_mem::{
    ArrayRequest, ArrayResponse, DeviceArray, GpuBuffers, Instance, LimitMode, ManagerConfig,
    MemError, MemoryKind, MemoryManager, PinnedArray, ReleaseReason, SimBackend,
};

/// 100 runs: `state` (64 B per run, device), `status` (4 B per run, pinned),
/// both chunkable, and `params` (128 B, unchunkable); the state's depth is
/// `depth`. C = 6800 B, U = 128 B.
fn requests(depth: usize) -> [(&'static str, ArrayRequest); 3] {
    [
        (
            "state",
            ArrayRequest::of::<f64>([8, 100])
                .chunk_axis(1)
                .total_runs(100)
                .pipeline_depth(depth),
        ),
        (
            "status",
            ArrayRequest::of::<i32>([100])
                .chunk_axis(0)
                .memory(MemoryKind::Pinned)
                .total_runs(100),
        ),
        ("params", ArrayRequest::of::<f64>([16]).unchunkable()),
    ]
}

/// Free bytes giving `alloc = 3600 - 72 = 3528`, so `alloc - U = 3400` is
/// half of C: depth 1 fits 50 runs per chunk, depth 2 fits 25.
const FREE: u64 = 3600;

fn ptr(array: &DeviceArray<f64>) -> u64 {
    array.with_device_ptr(|p| p.0).unwrap()
}

fn allocate(mgr: &MemoryManager, instance: &Instance, depth: usize) -> ArrayResponse {
    mgr.queue_request(instance, requests(depth)).unwrap();
    mgr.allocate_queue_for(instance).unwrap()
}

#[test]
fn depth_two_halves_the_chunk_and_gives_each_set_its_own_buffers() {
    let (shallow_mgr, _) = manager(1 << 30, FREE);
    let shallow_solver = shallow_mgr.register(queuing()).unwrap();
    let shallow = allocate(&shallow_mgr, &shallow_solver, 1);

    let (mgr, sim) = manager(1 << 30, FREE);
    let solver = mgr.register(queuing()).unwrap();
    let mut deep = allocate(&mgr, &solver, 2);

    // max_chunk = floor(100 * 3400 / (d * 6800)): 50 at depth 1, 25 at depth 2.
    let (alloc, _) = Budget::passive(FREE).with_granule(0).allocatable().unwrap();
    assert_eq!(alloc, 3528);
    assert_eq!(
        (shallow.chunks, shallow.chunk_length, shallow.buffer_sets()),
        (2, 50, 1)
    );
    assert_eq!(
        (deep.chunks, deep.chunk_length, deep.buffer_sets()),
        (4, 25, 2)
    );
    assert_eq!(deep.plan().buffer_sets(), 2);
    assert_eq!(
        deep.plan().chunk_length() * 2,
        shallow.plan().chunk_length()
    );
    assert_eq!(deep.chunked_shapes["state"], [8, 25]);
    assert_eq!(deep.chunked_shapes["params"], [16]);

    // Two state buffers, two status buffers, one params buffer.
    let state: Vec<_> = (0..2)
        .map(|set| deep.take_set::<f64>("state", set).unwrap())
        .collect();
    assert_ne!(ptr(&state[0]), ptr(&state[1]));
    assert!(state.iter().all(|s| s.shape() == [8, 25]));
    let status: Vec<PinnedArray<i32>> = (0..2)
        .map(|set| deep.take_pinned_set::<i32>("status", set).unwrap())
        .collect();
    status[0].write().unwrap().fill(1);
    status[1].write().unwrap().fill(2);
    assert_eq!(&*status[0].read().unwrap(), &[1; 25]);
    let params: Vec<_> = (0..2)
        .map(|set| deep.take_set::<f64>("params", set).unwrap())
        .collect();
    assert_eq!(ptr(&params[0]), ptr(&params[1]), "one buffer for every set");
    assert!(deep.is_empty());
    assert_eq!(sim.live_allocations(), 3, "two state sets and params");

    // Device bytes count every set: 2 * 8 * 25 * 8 + 128; pinned 2 * 25 * 4.
    let usage = mgr.memory_report().instances[0].usage;
    assert_eq!((usage.device_bytes, usage.pinned_bytes), (3328, 200));
    assert_eq!(usage.current_count, 5);
    assert_eq!(solver.allocated_bytes(), 3528);
    assert_eq!(FREE - sim.free_bytes(), 3328);
}

#[test]
fn taking_sets_reports_the_range_the_label_and_a_second_take() {
    let (mgr, _) = manager(1 << 30, FREE);
    let solver = mgr.register(queuing()).unwrap();
    let mut response = allocate(&mgr, &solver, 2);
    let error = response.take_set::<f64>("state", 2).unwrap_err();
    assert_eq!(
        error,
        MemError::SetOutOfRange {
            label: "state".to_owned(),
            set: 2,
            buffer_sets: 2,
        }
    );
    assert!(matches!(
        response.take_set::<f64>("nope", 0),
        Err(MemError::UnknownLabel { .. })
    ));
    // take is set 0.
    let first = response.take::<f64>("state").unwrap();
    assert!(matches!(
        response.take_set::<f64>("state", 0),
        Err(MemError::AlreadyTaken { .. })
    ));
    let second = response.take_set::<f64>("state", 1).unwrap();
    assert_ne!(ptr(&first), ptr(&second));
    response.take_set::<f64>("params", 1).unwrap();
    assert!(matches!(
        response.take_set::<f64>("params", 1),
        Err(MemError::AlreadyTaken { .. })
    ));
    assert!(matches!(
        response.take_set::<f32>("params", 0),
        Err(MemError::WrongArrayType { .. })
    ));
    let labels: Vec<&str> = response.labels().collect();
    assert_eq!(labels, ["status", "params"]);
    let debug = format!("{response:?}");
    assert!(
        debug.contains("buffer_sets: 2") && debug.contains("taken"),
        "{debug}"
    );
}

/// An instance capped at 3600 bytes in active mode, on a device with room
/// to spare, so that re-allocations plan as [`FREE`] does while old and new
/// buffers fit side by side.
fn capped() -> (MemoryManager, SimBackend, Instance) {
    let sim = SimBackend::new(360_000);
    let mgr = MemoryManager::with_config(
        sim.clone(),
        ManagerConfig {
            allocation_granule_bytes: 0,
            limit_mode: LimitMode::Active,
            ..Default::default()
        },
    );
    let solver = mgr.register(queuing().proportion(0.01)).unwrap();
    assert_eq!(mgr.cap(&solver), 3600);
    (mgr, sim, solver)
}

/// Device bytes the simulated device has handed out.
fn device_used(sim: &SimBackend) -> u64 {
    360_000 - sim.free_bytes()
}

#[test]
fn re_allocating_with_the_same_or_another_depth_replaces_every_set_without_a_leak() {
    let (mgr, sim, solver) = capped();
    let mut first = allocate(&mgr, &solver, 2);
    assert_eq!(
        (first.chunks, first.chunk_length, first.buffer_sets()),
        (4, 25, 2)
    );
    let old: Vec<_> = (0..2)
        .map(|set| first.take_set::<f64>("state", set).unwrap())
        .collect();
    let params = first.take::<f64>("params").unwrap();
    assert_eq!(sim.live_allocations(), 3);

    // The same depth: every set is kept, and its handles stay valid.
    let again = allocate(&mgr, &solver, 2);
    assert_eq!(again.buffer_sets(), 2);
    assert_eq!(sim.live_allocations(), 3);
    assert!(old.iter().all(|a| a.release_reason().is_none()));
    assert_eq!(mgr.memory_report().instances[0].usage.device_bytes, 3328);

    // Depth 3: max_chunk = 100 * 3400 / 20400 = 16, so 7 chunks of 15 runs.
    // Sets 0 and 1 reuse the larger buffers, set 2 is new; params is kept.
    let mut deeper = allocate(&mgr, &solver, 3);
    assert_eq!(
        (deeper.chunks, deeper.chunk_length, deeper.buffer_sets()),
        (7, 15, 3)
    );
    assert!(
        old.iter()
            .all(|a| a.release_reason() == Some(ReleaseReason::Replaced))
    );
    assert_eq!(params.release_reason(), None);
    assert_eq!(sim.live_allocations(), 4);
    let three: Vec<_> = (0..3)
        .map(|set| deeper.take_set::<f64>("state", set).unwrap())
        .collect();
    assert!(three.iter().all(|a| a.shape() == [8, 15]));
    // The figures are the arrays' own sizes; the device holds the buffers.
    assert!(three.iter().all(|a| a.nbytes() == 960));
    let capacities: Vec<u64> = three.iter().map(|a| a.capacity_bytes()).collect();
    assert_eq!(capacities, [1600, 1600, 960]);
    let usage = mgr.memory_report().instances[0].usage;
    assert_eq!(usage.device_bytes, 3 * 960 + 128);
    assert_eq!(device_used(&sim), 2 * 1600 + 960 + 128);
    assert_eq!(usage.pinned_bytes, 3 * 60);

    // Depth 1: one set of 50 runs, new memory; sets 1 and 2 go.
    let shallow = allocate(&mgr, &solver, 1);
    assert_eq!(
        (shallow.chunks, shallow.chunk_length, shallow.buffer_sets()),
        (2, 50, 1)
    );
    assert!(
        three
            .iter()
            .all(|a| a.release_reason() == Some(ReleaseReason::Replaced))
    );
    assert_eq!(sim.live_allocations(), 2, "state set 0 and params");
    let usage = mgr.memory_report().instances[0].usage;
    assert_eq!((usage.device_bytes, usage.pinned_bytes), (3200 + 128, 200));
    assert_eq!(usage.device_bytes, device_used(&sim));
    assert_eq!(usage.current_count, 3);

    assert!(mgr.free(&solver, "state").unwrap());
    assert_eq!(sim.live_allocations(), 1);
    drop(solver);
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(mgr.memory_report().total.current_count, 0);
    assert_eq!(device_used(&sim), 0);
}

#[test]
fn freeing_a_label_frees_every_set() {
    let (mgr, sim, solver) = capped();
    let mut response = allocate(&mgr, &solver, 2);
    let sets: Vec<_> = (0..2)
        .map(|set| response.take_set::<f64>("state", set).unwrap())
        .collect();
    assert!(mgr.free(&solver, "state").unwrap());
    assert!(
        sets.iter()
            .all(|a| a.release_reason() == Some(ReleaseReason::Freed))
    );
    assert_eq!(sim.live_allocations(), 1);
    assert_eq!(mgr.memory_report().instances[0].usage.device_bytes, 128);
    mgr.free_all();
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(solver.allocated_bytes(), 0);
}

#[test]
fn a_failed_deeper_allocation_leaves_every_set_as_it_was() {
    let (mgr, sim, solver) = capped();
    let mut first = allocate(&mgr, &solver, 2);
    let old: Vec<_> = (0..2)
        .map(|set| first.take_set::<f64>("state", set).unwrap())
        .collect();
    old[1].copy_from_host(&[5.0; 200]).unwrap();
    let stats_before = mgr.memory_report().instances[0].usage;
    let used_before = device_used(&sim);

    // Depth 3 allocates state set 2, then status set 2, which fails.
    mgr.queue_request(&solver, requests(3)).unwrap();
    sim.set_fail_allocations_after(Some(1));
    let error = mgr.allocate_queue_for(&solver).unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    assert!(old.iter().all(|a| a.release_reason().is_none()));
    assert_eq!(old[1].to_vec().unwrap(), vec![5.0; 200]);
    assert_eq!(old[1].shape(), [8, 25]);
    assert_eq!(sim.live_allocations(), 3);
    assert_eq!(device_used(&sim), used_before);
    let usage = mgr.memory_report().instances[0].usage;
    assert_eq!(
        (usage.device_bytes, usage.pinned_bytes, usage.current_count),
        (
            stats_before.device_bytes,
            stats_before.pinned_bytes,
            stats_before.current_count
        )
    );
    assert!(solver.has_queued(), "the queue is left as it was");

    sim.set_fail_allocations_after(None);
    let response = mgr.allocate_queue_for(&solver).unwrap();
    assert_eq!(response.buffer_sets(), 3);
    assert_eq!(sim.live_allocations(), 4);
}

#[test]
fn a_deeper_plan_on_a_full_device_replaces_the_buffer_it_would_reuse() {
    let (mgr, sim) = manager(1 << 30, FREE);
    let solver = mgr.register(queuing()).unwrap();
    let mut first = allocate(&mgr, &solver, 1);
    assert_eq!((first.chunk_length, first.buffer_sets()), (50, 1));
    let old = first.take::<f64>("state").unwrap();
    let params = first.take::<f64>("params").unwrap();
    assert_eq!(old.capacity_bytes(), 3200);

    // Depth 2 halves the chunk. Set 0 could reuse the 3,200-byte buffer,
    // but set 1 then has no room: the plan counted the whole buffer as
    // free, so it is replaced by one of 1,600 bytes.
    let mut deeper = allocate(&mgr, &solver, 2);
    assert_eq!((deeper.chunk_length, deeper.buffer_sets()), (25, 2));
    assert_eq!(old.release_reason(), Some(ReleaseReason::Replaced));
    assert_eq!(params.release_reason(), None, "kept");
    let sets: Vec<_> = (0..2)
        .map(|set| deeper.take_set::<f64>("state", set).unwrap())
        .collect();
    assert!(sets.iter().all(|a| a.capacity_bytes() == 1600));
    assert_ne!(ptr(&sets[0]), ptr(&sets[1]));
    let usage = mgr.memory_report().instances[0].usage;
    assert_eq!(usage.device_bytes, 2 * 1600 + 128);
    assert_eq!(sim.free_bytes(), FREE - usage.device_bytes);

    // Back to depth 1: set 0 reuses a buffer too small, so it is new
    // memory, made room for by freeing both sets first.
    let shallow = allocate(&mgr, &solver, 1);
    assert_eq!((shallow.chunk_length, shallow.buffer_sets()), (50, 1));
    assert!(
        sets.iter()
            .all(|a| a.release_reason() == Some(ReleaseReason::Replaced))
    );
    assert_eq!(
        mgr.memory_report().instances[0].usage.device_bytes,
        3200 + 128
    );
}

#[test]
fn only_the_most_oversized_buffers_needed_are_replaced() {
    let (mgr, sim) = manager(1 << 30, 6000);
    let solver = mgr.register(queuing()).unwrap();
    let requests = |depth: usize| {
        [("a", 8), ("b", 2)].map(|(label, rows)| {
            let request = ArrayRequest::of::<f64>([rows, 100])
                .chunk_axis(1)
                .total_runs(100)
                .pipeline_depth(depth);
            (label, request)
        })
    };
    mgr.queue_request(&solver, requests(1)).unwrap();
    let first = mgr.allocate_queue_for(&solver).unwrap();
    assert_eq!(first.chunk_length, 50, "a: 3,200 bytes, b: 800");
    assert_eq!(sim.free_bytes(), 2000);

    // Depth 2: 34 runs per set. The second sets (2,176 + 544 bytes) do not
    // fit in 2,000; replacing a (1,024 spare bytes) makes room, so b (256
    // spare) is still reused.
    mgr.queue_request(&solver, requests(2)).unwrap();
    let mut deeper = mgr.allocate_queue_for(&solver).unwrap();
    assert_eq!((deeper.chunk_length, deeper.buffer_sets()), (34, 2));
    let capacity = |response: &mut ArrayResponse, label, set| {
        response
            .take_set::<f64>(label, set)
            .unwrap()
            .capacity_bytes()
    };
    assert_eq!(capacity(&mut deeper, "a", 0), 2176);
    assert_eq!(capacity(&mut deeper, "b", 0), 800, "reused");
    assert_eq!(capacity(&mut deeper, "b", 1), 544);
}

#[test]
fn a_run_too_large_for_every_set_names_the_depth() {
    let (mgr, _) = manager(1 << 30, FREE);
    let solver = mgr.register(queuing()).unwrap();
    // 100 sets of one run need 6800 B; 3400 B are left.
    mgr.queue_request(&solver, requests(100)).unwrap();
    let error = mgr.allocate_queue_for(&solver).unwrap_err();
    assert!(
        matches!(error, MemError::SingleRunTooLarge { depth: 100, .. }),
        "{error}"
    );
    let error = mgr.queue_request(&solver, requests(0)).unwrap_err();
    assert!(
        matches!(&error, MemError::InvalidRequest { label, reason }
            if label == "state" && reason.contains("at least 1")),
        "{error}"
    );
}

#[test]
fn a_reused_partition_keeps_a_valid_number_of_sets() {
    // The holder's 80000 B at depth 2 in 50000 B: max_chunk = 10 * 49000 /
    // 160000 = 3, so 4 chunks of 3 runs in 2 sets, which it keeps holding.
    let (mgr, sim) = manager(1 << 30, 50_000);
    let holder = mgr.register(queuing().stream_group("g")).unwrap();
    let other = mgr
        .register(queuing().owner(&holder).stream_group("g"))
        .unwrap();
    mgr.queue_request(
        &holder,
        [("x", common::runs_request(8000, 10).pipeline_depth(2))],
    )
    .unwrap();
    let r = mgr.allocate_queue_for(&holder).unwrap();
    assert_eq!((r.chunk_length, r.chunks, r.buffer_sets()), (3, 4, 2));

    // A small batch at depth 3 would fit whole, but the holder's partition
    // is reused: its chunks of 3 runs get the 3 sets, which fit.
    mgr.queue_request(
        &other,
        [("y", common::runs_request(8, 10).pipeline_depth(3))],
    )
    .unwrap();
    let mut r = mgr.allocate_queue_for(&other).unwrap();
    assert_eq!((r.chunk_length, r.chunks, r.buffer_sets()), (3, 4, 3));
    assert_eq!(r.plan().validate(), Ok(()));
    let y: Vec<_> = (0..3)
        .map(|set| r.take_set::<f64>("y", set).unwrap())
        .collect();
    assert!(y.iter().all(|a| a.shape() == [1, 3]));
    assert_eq!(sim.live_allocations(), 5);
}

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[stream_group("pipelined")]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct Pipelined {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = 0, memory = pinned)]
    status: PinnedArray<i32>,
    #[buffer(shape = [16], unchunkable)]
    params: DeviceArray<f64>,
}

const DIMS: Dims = Dims {
    n_states: 8,
    n_runs: 100,
};

#[test]
fn the_derive_sets_the_depth_and_builds_a_struct_per_set() {
    assert!(
        Pipelined::requests(&DIMS)
            .iter()
            .all(|(_, request)| request.depth() == 2)
    );
    let (mgr, sim) = manager(1 << 30, FREE);
    let solver = mgr
        .register(Pipelined::registration().on_invalidate(|| {}))
        .unwrap();
    let allocated = mgr.allocate_buffers::<Pipelined>(&solver, &DIMS).unwrap();
    assert_eq!(
        (allocated.plan().chunks(), allocated.plan().buffer_sets()),
        (4, 2)
    );
    let sets = allocated.sets();
    assert_eq!(sets.len(), 2);
    assert_ne!(ptr(&sets[0].state), ptr(&sets[1].state));
    assert_eq!(ptr(&sets[0].params), ptr(&sets[1].params));
    assert_eq!(ptr(&allocated.set(0).unwrap().state), ptr(&sets[0].state));
    assert!(allocated.set(2).is_none());
    assert_eq!(sets[1].status.shape(), [25]);
    sets[0].status.write().unwrap().fill(1);
    sets[1].status.write().unwrap().fill(7);
    assert_eq!(&*sets[0].status.read().unwrap(), &[1; 25]);
    assert_eq!(sim.live_allocations(), 3);
    let state_1 = ptr(&sets[1].state);
    let owned = allocated.into_sets();
    assert_eq!(owned.len(), 2);
    assert_eq!(ptr(&owned[1].state), state_1);
}

#[test]
fn a_batch_that_fits_has_one_set_even_when_deep() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let solver = mgr
        .register(Pipelined::registration().on_invalidate(|| {}))
        .unwrap();
    let allocated = mgr.allocate_buffers::<Pipelined>(&solver, &DIMS).unwrap();
    assert_eq!(allocated.plan().chunks(), 1);
    assert_eq!(allocated.sets().len(), 1);
    assert_eq!(allocated.into_first().state.shape(), [8, 100]);
}

#[test]
fn a_queued_struct_is_built_per_set_from_its_hook_response() {
    let (mgr, _) = manager(1 << 30, FREE);
    let inbox = Inbox::default();
    let holder = mgr
        .register(
            Pipelined::registration()
                .on_invalidate(|| {})
                .on_allocation_ready(inbox.hook()),
        )
        .unwrap();
    mgr.queue_request(&holder, Pipelined::requests(&DIMS))
        .unwrap();
    mgr.allocate_queue(&holder).unwrap();
    let response = inbox.take().pop().unwrap();
    assert_eq!(response.buffer_sets(), 2);
    let sets = Pipelined::sets_from_response(response.clone()).unwrap();
    assert_eq!(sets.len(), 2);
    assert_ne!(ptr(&sets[0].state), ptr(&sets[1].state));
    // from_response takes set 0 alone.
    let first = Pipelined::from_response(response).unwrap();
    assert_eq!(ptr(&first.state), ptr(&sets[0].state));
}
