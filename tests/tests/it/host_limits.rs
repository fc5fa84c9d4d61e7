//! Host-side limits and errors: inconsistent chunk plans are refused,
//! enormous valid plans stream lazily, memory the host cannot provide is an
//! error (never an abort), and wrong shapes and indices are clear errors.

use crate::common;
use cubie_mem::{
    ArrayRequest, ArraySide, Bytes, ChunkPlan, HostMemoryKind, Instance, MemError, MemoryManager,
    SimBackend,
};

/// A registration that may queue, on `mgr`.
fn solver(mgr: &MemoryManager) -> Instance {
    mgr.register(common::queuing()).unwrap()
}

fn plan(total_runs: usize, chunks: usize, chunk_length: usize) -> ChunkPlan {
    ChunkPlan::new(total_runs, chunks, chunk_length).unwrap()
}

#[test]
fn inconsistent_plans_cannot_be_made() {
    for (total, chunks, length) in [
        (0, 1, 1),
        (10, 0, 10),
        (10, 1, 0),
        (10, 3, 3),
        (10, 11, 1),
        (10, 1, 11),
        (1, usize::MAX, 1),
    ] {
        let error = ChunkPlan::new(total, chunks, length).unwrap_err();
        assert!(
            matches!(
                error,
                MemError::InvalidPlan { total_runs, chunks: c, chunk_length, .. }
                    if (total_runs, c, chunk_length) == (total, chunks, length)
            ),
            "{error}"
        );
    }
    // The default plan (an empty response's) is valid.
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = solver(&mgr);
    assert!(mgr.chunk_streamer(&solver, &ChunkPlan::default()).is_ok());
}

#[test]
fn a_reused_partition_with_an_empty_last_chunk_streams() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = solver(&mgr);
    // 10 runs in 6 chunks of 2: the last chunk is empty.
    let plan = plan(10, 6, 2);
    mgr.queue_request(
        &solver,
        [("x", ArrayRequest::of::<u32>([3, 2]).unchunkable())],
    )
    .unwrap();
    let device = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u32>("x")
        .unwrap();
    let data: Vec<u32> = (0..30).collect();
    let host = mgr
        .create_host_array([3, 10], HostMemoryKind::Pageable, Some(&data), &solver)
        .unwrap();
    let mut back = mgr
        .create_host_array::<u32>([3, 10], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let mut lengths = Vec::new();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    streamer
        .pipeline()
        .inout(&mut back, device.along(1))
        .run(|chunk, _| {
            lengths.push(chunk.len());
            Ok::<_, MemError>(())
        })
        .unwrap();
    assert_eq!(lengths, [2, 2, 2, 2, 2, 0]);
    for chunk in streamer.iter_chunks() {
        streamer.copy_in(&host, &device, 1, chunk.index).unwrap();
        streamer
            .copy_out(&device, &mut back, 1, chunk.index)
            .unwrap();
    }
    assert_eq!(back.as_slice(), &data[..]);
}

#[test]
fn a_plan_with_an_enormous_chunk_count_streams_lazily() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = solver(&mgr);
    // Valid: usize::MAX runs in chunks of 2 (chunks * length overflows, so it covers).
    let plan = plan(usize::MAX, usize::MAX / 2 + 1, 2);
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    assert_eq!(streamer.iter_chunks().len(), usize::MAX / 2 + 1);
    let mut seen = Vec::new();
    let error = streamer
        .pipeline()
        .run(|chunk, _| {
            seen.push(chunk.runs.clone());
            if seen.len() == 3 {
                return Err(MemError::ChunkOutOfRange {
                    chunk: chunk.index,
                    chunks: 0,
                });
            }
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(
        *error.error(),
        MemError::ChunkOutOfRange { chunk: 2, .. }
    ));
    assert_eq!(error.chunk(), Some(2));
    assert_eq!(error.completed(), 0..2);
    assert_eq!(error.completed_runs(), 0..4);
    assert_eq!(seen, [0..2, 2..4, 4..6]);
    let last = plan.iter_chunks().next_back().unwrap();
    assert_eq!(last.runs, usize::MAX - 1..usize::MAX);
}

#[test]
fn host_memory_the_machine_cannot_provide_is_an_error() {
    let mgr = common::manager_on(SimBackend::new(u64::MAX));
    let solver = solver(&mgr);
    // 2^60 bytes: a valid size, but no machine has that much memory.
    let elements = 1usize << 57;
    let error = mgr
        .create_host_array::<u64>([elements], HostMemoryKind::Pageable, None, &solver)
        .unwrap_err();
    assert_eq!(
        error,
        MemError::HostOutOfMemory {
            requested: Bytes(1 << 60),
            what: "a pageable host array",
        }
    );
    assert!(error.is_out_of_memory());

    let error = mgr
        .create_host_array::<u64>([elements], HostMemoryKind::Pinned, None, &solver)
        .unwrap_err();
    assert_eq!(
        error,
        MemError::HostOutOfMemory {
            requested: Bytes(1 << 60),
            what: "page-locked host memory",
        }
    );

    // Nothing is left broken: a sane size still works.
    let small = mgr
        .create_host_array::<u64>([8], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    assert_eq!(small.as_slice(), [0; 8]);
}

#[test]
fn device_memory_the_simulator_cannot_provide_is_out_of_memory() {
    let sim = SimBackend::new(u64::MAX);
    let mgr = common::manager_on(sim.clone());
    let solver = solver(&mgr);
    let request = ArrayRequest::of::<u64>([1usize << 57]).unchunkable();
    mgr.queue_request(&solver, [("huge", request)]).unwrap();
    let error = mgr.allocate_queue_for(&solver).unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    assert!(solver.has_queued(), "the queue is kept");
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(sim.free_bytes(), u64::MAX);
}

#[test]
fn wrong_shapes_and_indices_are_clear_errors() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = solver(&mgr);
    let plan = plan(10, 3, 4);
    let host = mgr
        .create_host_array::<f32>([2, 10], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let wrong_runs = mgr
        .create_host_array::<f32>([2, 9], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let (device, wrong_device) = {
        mgr.queue_request(
            &solver,
            [
                ("state", ArrayRequest::of::<f32>([2, 4]).unchunkable()),
                ("other", ArrayRequest::of::<f32>([3, 4]).unchunkable()),
            ],
        )
        .unwrap();
        let mut r = mgr.allocate_queue_for(&solver).unwrap();
        (
            r.take::<f32>("state").unwrap(),
            r.take::<f32>("other").unwrap(),
        )
    };
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();

    let error = streamer.copy_in(&wrong_runs, &device, 1, 0).unwrap_err();
    assert!(matches!(
        &error,
        MemError::ChunkShapeMismatch { side: ArraySide::Host, found, expected, .. }
            if found == &[2, 9] && expected == &[2, 10]
    ));
    assert!(matches!(
        &error,
        MemError::ChunkShapeMismatch { label, total_runs: 10, .. } if label == "state"
    ));

    // The run count sits on axis 1: binding axis 0 says so.
    let error = streamer.copy_in(&host, &device, 0, 0).unwrap_err();
    assert!(
        matches!(
            &error,
            MemError::ChunkShapeMismatch {
                label,
                side: ArraySide::Host,
                found,
                axis: 0,
                total_runs: 10,
                runs_axis: Some(1),
                ..
            } if label == "state" && found == &[2, 10]
        ),
        "{error:?}"
    );

    // A device array of one chunk that disagrees off the run axis: the
    // host array is the one made for other dims.
    let error = streamer.copy_in(&host, &wrong_device, 1, 0).unwrap_err();
    assert!(matches!(
        &error,
        MemError::ChunkShapeMismatch { side: ArraySide::Host, found, expected, .. }
            if found == &[2, 10] && expected == &[3, 10]
    ));

    let error = streamer.copy_in(&host, &device, 1, 3).unwrap_err();
    assert_eq!(
        error,
        MemError::ChunkOutOfRange {
            chunk: 3,
            chunks: 3
        }
    );

    let error = streamer.copy_in(&host, &device, 2, 0).unwrap_err();
    assert!(matches!(error, MemError::InvalidChunkAxis { axis: 2, .. }));

    // Nothing was copied by the failed calls, and a good call still works.
    streamer.copy_in(&host, &device, 1, 2).unwrap();

    let mut out = mgr
        .create_host_array::<f32>([2, 10], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let error = streamer
        .pipeline()
        .input(&host, device.along(1))
        .output(&mut out, device.along(1))
        .run(|_, _| Ok::<_, MemError>(()))
        .unwrap_err();
    assert_eq!(error.chunk(), None);
    assert_eq!(
        error.into_error(),
        MemError::DuplicateBinding {
            label: "state".into()
        }
    );

    let error = streamer
        .pipeline()
        .input(&wrong_runs, device.along(1))
        .run(|_, _| -> Result<(), MemError> { panic!("must not run with a bad binding") })
        .unwrap_err()
        .into_error();
    assert!(matches!(error, MemError::ChunkShapeMismatch { .. }));
}

#[test]
fn pinned_allocation_failure_is_reported() {
    let mgr = MemoryManager::new(SimBackend::new(1 << 30).fail_allocations_after(0));
    let solver = solver(&mgr);
    let error = mgr
        .create_host_array::<f32>([4], HostMemoryKind::Pinned, None, &solver)
        .unwrap_err();
    assert!(error.is_out_of_memory());
}
