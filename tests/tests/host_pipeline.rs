//! The order in which a chunk pipeline talks to the device: every upload of
//! chunk k before its computation, every download after it, and nothing of
//! chunk k + 1 reaching the device before chunk k's results are back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use common::Logged;
use cubie_mem::{
    ArrayRequest, ChunkPlan, HostMemoryType, ManagerConfig, MemoryManager, Registration, SimBackend,
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
        .create_host_array([2, 10], HostMemoryType::Pageable, Some(&data), &solver)
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<u32>([2, 10], HostMemoryType::Pageable, None, &solver)
        .unwrap();
    let plan = ChunkPlan {
        total_runs: 10,
        chunks: 3,
        chunk_length: 4,
        ..Default::default()
    };
    let stream = mgr.stream(&solver).unwrap().0;
    log.lock().unwrap().clear();

    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline()
        .input(&host_in, &device_in, 1)
        .output(&mut host_out, &device_out, 1)
        .run(|chunk| {
            log.lock().unwrap().push(format!("compute {}", chunk.index));
            // The instance's stream is current here too: this copy is ordered on it.
            device_out.copy_from_host(&[chunk.index as u32; 8])
        })
        .unwrap();

    let up = |bytes: usize| format!("up {bytes} on {stream}");
    let down = |bytes: usize| format!("down {bytes} on {stream}");
    // Chunks of 4, 4 and 2 runs; the device arrays hold 2 x 4 elements, so a
    // full chunk spans 32 bytes and the short one 4 + 2 elements (24 bytes).
    let expected = vec![
        // Staging buffers are pinned on first use: the input's before chunk
        // 0 is staged, the output's before chunk 0 comes back.
        "pin 32".to_owned(),
        up(32),
        "compute 0".to_owned(),
        up(32),
        "pin 32".to_owned(),
        down(32),
        up(32),
        "compute 1".to_owned(),
        up(32),
        down(32),
        up(24),
        "compute 2".to_owned(),
        up(32),
        down(24),
    ];
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
