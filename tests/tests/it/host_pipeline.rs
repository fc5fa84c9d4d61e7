//! The order in which a chunk pipeline talks to the device: every upload of
//! chunk k before its computation, every download after it, and nothing of
//! chunk k + 1 reaching the device before chunk k's results are back.

use crate::common;
use std::sync::Arc;

use crate::common::Logged;
use cubie_mem::{
    ArrayRequest, ChunkPlan, HostMemoryKind, ManagerConfig, MemoryManager, Registration, SimBackend,
};

#[test]
fn pipeline_orders_copies_around_the_computation_on_the_instance_stream() {
    let backend = Logged::new(SimBackend::new(1 << 30));
    let log = Arc::clone(&backend.log);
    let mgr = MemoryManager::with_config(
        backend,
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let solver = mgr
        .register(
            Registration::new()
                .stream_group("solvers")
                .on_invalidate(|| {}),
        )
        .unwrap();
    mgr.queue_request(
        &solver,
        [
            ("in", ArrayRequest::of::<u32>([2, 4]).unchunkable()),
            ("out", ArrayRequest::of::<u32>([2, 4]).unchunkable()),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let device_in = response.take::<u32>("in").unwrap();
    let device_out = response.take::<u32>("out").unwrap();
    let data: Vec<u32> = (0..20).collect();
    let host_in = mgr
        .create_host_array([2, 10], HostMemoryKind::Pageable, Some(&data), &solver)
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<u32>([2, 10], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let plan = ChunkPlan::new(10, 3, 4).unwrap();
    let stream = mgr.stream(&solver).unwrap().id();
    log.lock().unwrap().clear();

    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline()
        .input(&host_in, device_in.along(1))
        .output(&mut host_out, device_out.along(1))
        .run(|chunk, _| {
            log.lock().unwrap().push(format!("compute {}", chunk.index));
            // The instance's stream is current here too: this copy is ordered on it.
            device_out.copy_from_host(&[chunk.index as u32; 8])
        })
        .unwrap();

    // The pipeline's own streams come after the instance's.
    let (upload, download) = (stream + 1, stream + 2);
    let up = |bytes: usize| format!("up async {bytes} on {upload}");
    let down = |bytes: usize| format!("down async {bytes} on {download}");
    let compute = |chunk: usize| {
        [
            format!("compute {chunk}"),
            format!("up 32 on {stream}"), // the computation's own copy
        ]
    };
    // Chunks of 4, 4 and 2 runs; the device arrays hold 2 x 4 elements, so a
    // full chunk spans 32 bytes and the short one 4 + 2 elements (24 bytes).
    // One buffer set: the upload of chunk k + 1 is queued right after the
    // computation of chunk k (it waits on the device for that computation
    // only), the download of chunk k before the computation of chunk k + 1
    // overwrites its results.
    let mut expected = vec![
        // Staging buffers are taken before the first chunk, in label order:
        // the input's two ("in"), then the output's two ("out"), each
        // binding's taken in turn by chunk.
        "pin 32".to_owned(),
        "pin 32".to_owned(),
        "pin 32".to_owned(),
        "pin 32".to_owned(),
        up(32),
    ];
    expected.extend(compute(0));
    expected.extend([up(32), down(32)]);
    expected.extend(compute(1));
    expected.extend([up(24), down(32)]);
    expected.extend(compute(2));
    expected.push(down(24));
    assert_eq!(*log.lock().unwrap(), expected);
    let mut expected_out = vec![0u32; 20];
    for (run, chunk) in [(0..4, 0), (4..8, 1), (8..10, 2)] {
        for row in 0..2 {
            for r in run.clone() {
                expected_out[row * 10 + r] = chunk;
            }
        }
    }
    assert_eq!(host_out.as_slice(), expected_out);
}

/// A 4-run plan in 2 chunks of 2.
fn plan() -> ChunkPlan {
    ChunkPlan::new(4, 2, 2).unwrap()
}

/// One chunk's device array `label` of 2 f64 for `instance`.
fn chunk_array(
    mgr: &MemoryManager,
    instance: &cubie_mem::Instance,
    label: &str,
) -> cubie_mem::DeviceArray<f64> {
    common::allocate_f64(
        mgr,
        instance,
        label,
        ArrayRequest::of::<f64>([2]).unchunkable(),
    )
}

#[test]
fn every_owner_a_pipeline_binds_is_busy_for_the_run() {
    let (mgr, _) = common::manager(1 << 30, 10_000);
    let (params_hook, cache_hook) = (common::Counter::default(), common::Counter::default());
    let solver = mgr.register(common::queuing().name("solver")).unwrap();
    let params_holder = mgr
        .register(
            Registration::new()
                .name("params")
                .on_invalidate(params_hook.hook()),
        )
        .unwrap();
    let cache = mgr
        .register(
            Registration::new()
                .name("cache")
                .on_invalidate(cache_hook.hook()),
        )
        .unwrap();
    let out = chunk_array(&mgr, &solver, "out");
    let params = chunk_array(&mgr, &params_holder, "params");
    common::allocate_f64(
        &mgr,
        &cache,
        "blob",
        ArrayRequest::of::<f64>([500]).unchunkable(),
    );
    let newcomer = mgr.register(common::queuing().name("newcomer")).unwrap();

    let host_params = mgr
        .create_host_array(
            [4],
            HostMemoryKind::Pageable,
            Some(&[1.0, 2.0, 3.0, 4.0]),
            &solver,
        )
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<f64>([4], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    mgr.chunk_streamer(&solver, &plan())
        .unwrap()
        .pipeline()
        .input(&host_params, params.along(0))
        .output(&mut host_out, out.along(0))
        .run(|chunk, _| {
            if chunk.index == 0 {
                // Another owner needs room mid-batch: 6000 bytes with 5968
                // free. The params' owner is the least recently used, but busy.
                common::allocate_f64(
                    &mgr,
                    &newcomer,
                    "big",
                    ArrayRequest::of::<f64>([750]).unchunkable(),
                );
            }
            out.copy_from_host(&params.to_vec()?)
        })
        .unwrap();
    assert_eq!(host_out.as_slice(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!((params_hook.get(), cache_hook.get()), (0, 1));
    assert!(params.is_valid());
}

#[test]
fn pipelines_whose_inputs_and_outputs_cross_share_a_pool_without_deadlock() {
    use std::sync::mpsc;
    use std::time::Duration;

    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let (mgr, _) = common::manager(1 << 30, 1 << 20);
        // A pool that never grows past one buffer per label.
        let pool = cubie_mem::StagingPool::with_memory_probe(mgr.backend().clone(), || None);
        let first = mgr.register(common::queuing().stream_group("one")).unwrap();
        let second = mgr.register(common::queuing().stream_group("two")).unwrap();
        let arrays = |instance| {
            (
                chunk_array(&mgr, instance, "p"),
                chunk_array(&mgr, instance, "q"),
            )
        };
        let ((p1, q1), (p2, q2)) = (arrays(&first), arrays(&second));
        let host = |values: Option<&[f64]>, instance| {
            mgr.create_host_array([4], HostMemoryKind::Pageable, values, instance)
                .unwrap()
        };
        let (in1, mut out1) = (
            host(Some(&[1.0, 2.0, 3.0, 4.0]), &first),
            host(None, &first),
        );
        let (in2, mut out2) = (
            host(Some(&[5.0, 6.0, 7.0, 8.0]), &second),
            host(None, &second),
        );
        let (to_second, from_first) = mpsc::channel::<()>();
        let (to_first, from_second) = mpsc::channel::<()>();
        // Each computation waits briefly for the other pipeline to be computing
        // too, so that both hold their inputs' buffers when they download.
        let meet = |tell: &mpsc::Sender<()>, hear: &mpsc::Receiver<()>| {
            tell.send(()).ok();
            hear.recv_timeout(Duration::from_millis(200)).ok();
        };
        let (mgr, first, second) = (&mgr, &first, &second);
        let (p1, q1, p2, q2) = (&p1, &q1, &p2, &q2);
        let (in1, in2, o1, o2) = (&in1, &in2, &mut out1, &mut out2);
        let (pool1, pool2) = (pool.clone(), pool);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                mgr.chunk_streamer(first, &plan())
                    .unwrap()
                    .with_pool(pool1)
                    .pipeline()
                    .input(in1, p1.along(0))
                    .output(o1, q1.along(0))
                    .run(|_, _| {
                        meet(&to_second, &from_second);
                        q1.copy_from_host(&p1.to_vec()?)
                    })
                    .unwrap();
            });
            scope.spawn(move || {
                mgr.chunk_streamer(second, &plan())
                    .unwrap()
                    .with_pool(pool2)
                    .pipeline()
                    .input(in2, q2.along(0))
                    .output(o2, p2.along(0))
                    .run(|_, _| {
                        meet(&to_first, &from_first);
                        p2.copy_from_host(&q2.to_vec()?)
                    })
                    .unwrap();
            });
        });
        done.send((out1.to_vec(), out2.to_vec())).ok();
    });
    // Under Miri, a hundred times slower or more, ten minutes.
    let patience = Duration::from_secs(if cfg!(miri) { 600 } else { 20 });
    let (out1, out2) = finished
        .recv_timeout(patience)
        .expect("deadlock: the crossed pipelines did not finish in time");
    assert_eq!(out1, [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(out2, [5.0, 6.0, 7.0, 8.0]);
}

#[test]
fn device_memory_a_chunk_did_not_upload_reads_as_poison() {
    // 3 runs in chunks of 2: the last chunk uploads one run, and the second
    // element of the fresh device array was never written.
    let (mgr, _) = common::manager(1 << 30, 1 << 20);
    let solver = mgr.register(common::queuing()).unwrap();
    let device = chunk_array(&mgr, &solver, "x");
    let host = mgr
        .create_host_array(
            [3],
            HostMemoryKind::Pageable,
            Some(&[1.0, 2.0, 3.0]),
            &solver,
        )
        .unwrap();
    let plan = ChunkPlan::new(3, 2, 2).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    streamer.copy_in(&host, &device, 0, 1).unwrap();
    let seen = device.to_vec().unwrap();
    assert_eq!(seen[0], 3.0);
    assert!(
        seen[1].is_nan(),
        "unwritten device memory is poison, not zero: {seen:?}"
    );
    // Memory freed and reused is fresh memory: poison again, neither the
    // old values nor zeros.
    device.copy_from_host(&[5.0, 6.0]).unwrap();
    mgr.free(&solver, "x").unwrap();
    let again = chunk_array(&mgr, &solver, "y");
    assert!(again.to_vec().unwrap().iter().all(|v| v.is_nan()));
}
