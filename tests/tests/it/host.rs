//! Host arrays and chunked transfers: round trips through the simulated
//! device along every chunk axis, for every element type and memory kind.

use std::ops::Range;

use cubie_mem::{
    ArrayRequest, ChunkPlan, DType, DeviceArray, Element, HostArray, HostMemoryKind, Instance,
    ManagerConfig, MemError, MemoryManager, Registration, SimBackend,
};
use proptest::prelude::*;

fn manager() -> MemoryManager {
    MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    )
}

fn solver(mgr: &MemoryManager) -> Instance {
    mgr.register(Registration::new().on_invalidate(|| {}))
        .unwrap()
}

/// A plan of `total` runs in chunks of `chunk_length`.
fn plan(total: usize, chunk_length: usize) -> ChunkPlan {
    ChunkPlan::new(total, total.div_ceil(chunk_length), chunk_length).unwrap()
}

fn chunk_shape(shape: &[usize], axis: usize, chunk_length: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[axis] = chunk_length;
    s
}

/// Device arrays "in" and "out" of one chunk's shape.
fn device_pair<T: Element>(
    mgr: &MemoryManager,
    solver: &Instance,
    shape: &[usize],
) -> (DeviceArray<T>, DeviceArray<T>) {
    mgr.queue_request(
        solver,
        [
            ("in", ArrayRequest::of::<T>(shape.to_vec()).unchunkable()),
            ("out", ArrayRequest::of::<T>(shape.to_vec()).unchunkable()),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(solver).unwrap();
    (
        response.take::<T>("in").unwrap(),
        response.take::<T>("out").unwrap(),
    )
}

/// Distinct-looking data of any element type, compared by bytes (floats may
/// hold NaN patterns).
fn pattern<T: Element>(len: usize, seed: u8) -> Vec<T> {
    let mut data = vec![T::zeroed(); len];
    for (i, b) in bytemuck::cast_slice_mut::<T, u8>(&mut data)
        .iter_mut()
        .enumerate()
    {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8;
    }
    data
}

fn bytes<T: Element>(data: &[T]) -> &[u8] {
    bytemuck::cast_slice(data)
}

/// Checks the device chunk against index arithmetic done here, element by element.
fn assert_device_holds_chunk<T: Element>(
    device: &DeviceArray<T>,
    host: &[T],
    shape: &[usize],
    axis: usize,
    chunk_length: usize,
    runs: Range<usize>,
) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let on_device = device.to_vec().unwrap();
    for o in 0..outer {
        for r in 0..runs.len() {
            for i in 0..inner {
                let d = (o * chunk_length + r) * inner + i;
                let h = (o * shape[axis] + runs.start + r) * inner + i;
                assert_eq!(
                    bytes(&on_device[d..d + 1]),
                    bytes(&host[h..h + 1]),
                    "device element {d} should be host element {h} (axis {axis}, runs {runs:?})"
                );
            }
        }
    }
}

/// Sends a batch of `shape` through the device chunk by chunk along `axis`
/// and back; returns what came back.
fn round_trip<T: Element>(
    shape: &[usize],
    axis: usize,
    chunk_length: usize,
    kind: HostMemoryKind,
    staging_bytes: usize,
) -> Vec<T> {
    let mgr = manager();
    let solver = solver(&mgr);
    let len: usize = shape.iter().product();
    let data = pattern::<T>(len, axis as u8 + 1);
    let host_in = mgr
        .create_host_array(shape.to_vec(), kind, Some(&data), &solver)
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<T>(shape.to_vec(), kind, None, &solver)
        .unwrap();
    assert_eq!(host_in.kind(), kind);
    let plan = plan(shape[axis], chunk_length);
    let (device, _) = device_pair::<T>(&mgr, &solver, &chunk_shape(shape, axis, chunk_length));
    let streamer = mgr
        .chunk_streamer(&solver, &plan)
        .unwrap()
        .with_staging_bytes(staging_bytes);
    for chunk in streamer.iter_chunks() {
        streamer
            .copy_in(&host_in, &device, axis, chunk.index)
            .unwrap();
        assert_device_holds_chunk(&device, &data, shape, axis, chunk_length, chunk.runs);
        streamer
            .copy_out(&device, &mut host_out, axis, chunk.index)
            .unwrap();
    }
    let out = host_out.to_vec();
    assert_eq!(bytes(&out), bytes(&data), "axis {axis} {kind}");
    out
}

fn round_trips_for<T: Element>() {
    // 7, 5 and 6 runs in chunks of 3, 2 and 4: every last chunk is shorter.
    let shape = [7, 5, 6];
    for (axis, chunk_length) in [3, 2, 4].into_iter().enumerate() {
        let mut results = Vec::new();
        for kind in [
            HostMemoryKind::Pageable,
            HostMemoryKind::Spilled,
            HostMemoryKind::Pinned,
        ] {
            // Whole chunks per staging buffer, and windows of 13 elements.
            for staging in [usize::MAX, 13 * size_of::<T>()] {
                results.push(round_trip::<T>(&shape, axis, chunk_length, kind, staging));
            }
        }
        assert!(results.windows(2).all(|w| bytes(&w[0]) == bytes(&w[1])));
    }
}

macro_rules! round_trip_tests {
    ($($name:ident: $t:ty),* $(,)?) => {$(
        #[test]
        fn $name() {
            round_trips_for::<$t>();
        }
    )*};
}

round_trip_tests!(
    round_trip_f32: f32,
    round_trip_f64: f64,
    round_trip_i32: i32,
    round_trip_u8: u8,
    round_trip_u32: u32,
    round_trip_i64: i64,
    round_trip_u64: u64,
);

/// Runs a batch through a pipeline whose computation maps `in` to `out`
/// with `f` on the device; returns the host results.
fn pipeline_batch(
    kind: HostMemoryKind,
    axis: usize,
    staging_bytes: usize,
    f: impl Fn(f64) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let mgr = manager();
    let solver = solver(&mgr);
    let shape = [6, 9, 5];
    let chunk_length = 4;
    let data: Vec<f64> = (0..shape.iter().product::<usize>())
        .map(|i| i as f64)
        .collect();
    let host_in = mgr
        .create_host_array(shape, kind, Some(&data), &solver)
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<f64>(shape, kind, None, &solver)
        .unwrap();
    let plan = plan(shape[axis], chunk_length);
    let (device_in, device_out) =
        device_pair::<f64>(&mgr, &solver, &chunk_shape(&shape, axis, chunk_length));
    let streamer = mgr
        .chunk_streamer(&solver, &plan)
        .unwrap()
        .with_staging_bytes(staging_bytes);
    let mut seen = Vec::new();
    streamer
        .pipeline()
        .input(&host_in, device_in.along(axis))
        .output(&mut host_out, device_out.along(axis))
        .run(|chunk, _| {
            seen.push(chunk.runs.clone());
            let values: Vec<f64> = device_in.to_vec()?.into_iter().map(&f).collect();
            device_out.copy_from_host(&values)
        })
        .unwrap();
    assert_eq!(seen, plan.iter_chunks().map(|c| c.runs).collect::<Vec<_>>());
    (data, host_out.to_vec())
}

#[test]
fn pipeline_computes_every_chunk_for_every_axis_and_kind() {
    for axis in 0..3 {
        for kind in [
            HostMemoryKind::Pageable,
            HostMemoryKind::Spilled,
            HostMemoryKind::Pinned,
        ] {
            for staging in [usize::MAX, 7 * 8] {
                let (data, out) = pipeline_batch(kind, axis, staging, |x| 2.0 * x + 1.0);
                let expected: Vec<f64> = data.iter().map(|x| 2.0 * x + 1.0).collect();
                assert_eq!(out, expected, "axis {axis} {kind} staging {staging}");
            }
        }
    }
}

#[test]
fn inout_pipeline_updates_the_host_array_in_place() {
    let mgr = manager();
    let solver = solver(&mgr);
    let shape = [3, 10];
    let data: Vec<i64> = (0..30).collect();
    let mut state = mgr
        .create_host_array(shape, HostMemoryKind::Pageable, Some(&data), &solver)
        .unwrap();
    let plan = plan(10, 3);
    let (device, _) = device_pair::<i64>(&mgr, &solver, &[3, 3]);
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    streamer
        .pipeline()
        .inout(&mut state, device.along(1))
        .run(|chunk, _| {
            let mut values = device.to_vec()?;
            // Only the chunk's leading runs on the axis are valid.
            for row in values.chunks_mut(3) {
                for v in &mut row[..chunk.len()] {
                    *v *= 10;
                }
            }
            device.copy_from_host(&values)
        })
        .unwrap();
    let expected: Vec<i64> = data.iter().map(|v| v * 10).collect();
    assert_eq!(state.as_slice(), expected);
}

#[test]
fn a_plan_from_the_manager_streams_a_batch_larger_than_the_device() {
    // 4 x 3 x 1000 f64 = 96000 bytes of input and as much output, on a
    // device with 64 KiB free: the planner splits the runs.
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(64 << 10),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let solver = solver(&mgr);
    let runs = 1000;
    let shape = [4, 3, runs];
    mgr.queue_request(
        &solver,
        [
            ("in", ArrayRequest::new(DType::F64, shape).total_runs(runs)),
            ("out", ArrayRequest::new(DType::F64, shape).total_runs(runs)),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    assert!(response.chunks > 1);
    assert_ne!(runs % response.chunk_length, 0, "the last chunk is short");
    let device_in = response.take::<f64>("in").unwrap();
    let device_out = response.take::<f64>("out").unwrap();
    let data: Vec<f64> = (0..12 * runs).map(|i| i as f64).collect();
    let host_in = mgr
        .create_host_array(shape, None, Some(&data), &solver)
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<f64>(shape, None, None, &solver)
        .unwrap();
    mgr.chunk_streamer(&solver, response.plan())
        .unwrap()
        .pipeline()
        .input(&host_in, device_in.along(2))
        .output(&mut host_out, device_out.along(2))
        .run(|_, _| device_out.copy_from_host(&device_in.to_vec()?))
        .unwrap();
    assert_eq!(host_out.as_slice(), data);
}

#[test]
fn pipeline_holds_the_owner_busy_so_it_is_not_evicted_mid_batch() {
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(1000),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let streaming = solver(&mgr);
    let other = solver(&mgr);
    let host = mgr
        .create_host_array::<u8>([600], HostMemoryKind::Pageable, None, &streaming)
        .unwrap();
    mgr.queue_request(
        &streaming,
        [("in", ArrayRequest::of::<u8>([300]).unchunkable())],
    )
    .unwrap();
    let device = mgr
        .allocate_queue_for(&streaming)
        .unwrap()
        .take::<u8>("in")
        .unwrap();
    // 800 bytes for the other instance only fit by evicting the streaming one.
    let other_request = || [("big", ArrayRequest::of::<u8>([800]).unchunkable())];
    let plan = plan(600, 300);
    let mut refused = Vec::new();
    mgr.chunk_streamer(&streaming, &plan)
        .unwrap()
        .pipeline()
        .input(&host, device.along(0))
        .run(|_, _| {
            mgr.queue_request(&other, other_request())?;
            refused.push(mgr.allocate_queue(&other).is_err());
            Ok::<_, MemError>(())
        })
        .unwrap();
    assert_eq!(refused, [true, true], "a busy owner is not evicted");
    assert!(device.is_valid());
    mgr.queue_request(&other, other_request()).unwrap();
    mgr.allocate_queue(&other).unwrap();
    assert!(
        !device.is_valid(),
        "once the run ended the owner is idle and evictable"
    );
}

#[test]
fn host_types_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<HostArray<f64>>();
    send_sync::<cubie_mem::StagingPool>();
    send_sync::<cubie_mem::ChunkStreamer<'static>>();
}

#[test]
fn chunk_iterator_gives_run_ranges() {
    let p = plan(10, 4);
    let chunks: Vec<_> = p.iter_chunks().collect();
    assert_eq!(chunks.len(), 3);
    assert_eq!(chunks[2].index, 2);
    assert_eq!(chunks[2].runs, 8..10);
    assert_eq!(chunks[2].len(), 2);
    assert_eq!(p.iter_chunks().next_back().unwrap().index, 2);
    assert_eq!(p.iter_chunks().len(), 3);
    assert!(matches!(
        p.chunk(3),
        Err(MemError::ChunkOutOfRange {
            chunk: 3,
            chunks: 3
        })
    ));
}

#[test]
fn create_host_array_copies_like_or_zero_fills() {
    let mgr = manager();
    let solver = solver(&mgr);
    for kind in [
        HostMemoryKind::Pinned,
        HostMemoryKind::Pageable,
        HostMemoryKind::Spilled,
    ] {
        let zeros = mgr
            .create_host_array::<u32>([3, 4], kind, None, &solver)
            .unwrap();
        assert_eq!(zeros.as_slice(), [0; 12]);
        assert_eq!(zeros.shape(), [3, 4]);
        assert_eq!(zeros.nbytes(), 48);
        assert_eq!(zeros.kind(), kind);
        let like: Vec<u32> = (0..12).collect();
        let mut copy = mgr
            .create_host_array([3, 4], kind, Some(&like), &solver)
            .unwrap();
        assert_eq!(copy.as_slice(), like);
        copy.as_mut_slice()[5] = 99;
        assert_eq!(copy.to_vec()[5], 99);
        let empty = mgr
            .create_host_array::<f64>([0, 4], kind, None, &solver)
            .unwrap();
        assert!(empty.is_empty());
    }
}

#[test]
fn choose_follows_the_rule_and_resolution_order() {
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            pinned_max_bytes: 1000,
            host_spill_threshold: Some(5000),
            ..Default::default()
        },
    );
    let plain = mgr.register(Registration::new()).unwrap();
    let own = mgr
        .register(Registration::new().host_spill_threshold(2000))
        .unwrap();
    let owner = mgr.new_owner().with_spill(cubie_mem::SpillSettings {
        threshold: Some(3000),
        directory: None,
    });
    let inherits = mgr.register(Registration::new().owner(&owner)).unwrap();
    let overrides = mgr
        .register(Registration::new().owner(&owner).host_spill_threshold(4000))
        .unwrap();

    // The kind the manager picks for an array of `bytes` (u8 elements).
    let kind = |bytes: usize, instance: &cubie_mem::Instance| {
        mgr.create_host_array::<u8>([bytes], None, None, instance)
            .unwrap()
            .kind()
    };
    use HostMemoryKind::*;
    assert_eq!(kind(1000, &plain), Pinned);
    assert_eq!(kind(1001, &plain), Pageable);
    assert_eq!(kind(5000, &plain), Pageable);
    assert_eq!(kind(5001, &plain), Spilled);
    assert_eq!(kind(2000, &own), Pageable);
    assert_eq!(kind(2001, &own), Spilled);
    assert_eq!(kind(3000, &inherits), Pageable);
    assert_eq!(kind(3001, &inherits), Spilled);
    assert_eq!(kind(4000, &overrides), Pageable);
    assert_eq!(kind(4001, &overrides), Spilled);
}

#[test]
fn create_host_array_without_a_kind_picks_it() {
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            pinned_max_bytes: 64,
            ..Default::default()
        },
    );
    let solver = mgr
        .register(Registration::new().host_spill_threshold(256))
        .unwrap();
    let small = mgr
        .create_host_array::<f64>([8], None, None, &solver)
        .unwrap();
    let medium = mgr
        .create_host_array::<f64>([32], None, None, &solver)
        .unwrap();
    let large = mgr
        .create_host_array::<f64>([33], None, None, &solver)
        .unwrap();
    assert_eq!(small.kind(), HostMemoryKind::Pinned);
    assert_eq!(medium.kind(), HostMemoryKind::Pageable);
    assert_eq!(large.kind(), HostMemoryKind::Spilled);
}

#[test]
fn length_mismatches_are_errors() {
    let mgr = manager();
    let solver = solver(&mgr);

    let error = mgr
        .create_host_array(
            [2, 3],
            HostMemoryKind::Pageable,
            Some(&[1.0f32; 5]),
            &solver,
        )
        .unwrap_err();
    assert!(matches!(
        error,
        MemError::LengthMismatch {
            expected: 6,
            found: 5,
            ..
        }
    ));

    let error = mgr
        .create_host_array::<u64>([usize::MAX, 2], HostMemoryKind::Pageable, None, &solver)
        .unwrap_err();
    assert!(matches!(error, MemError::HostArraySize { .. }));
}

fn kind_strategy() -> impl Strategy<Value = HostMemoryKind> {
    prop_oneof![
        Just(HostMemoryKind::Pageable),
        Just(HostMemoryKind::Pinned),
        Just(HostMemoryKind::Spilled),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_shapes_round_trip(
        shape in prop::collection::vec(1usize..6, 1..5),
        axis_seed in 0usize..8,
        chunk_seed in 0usize..8,
        staging_elements in 1usize..64,
        kind in kind_strategy(),
    ) {
        let axis = axis_seed % shape.len();
        let chunk_length = 1 + chunk_seed % shape[axis];
        round_trip::<u32>(&shape, axis, chunk_length, kind, staging_elements * 4);
    }
}
