//! `ndarray` views (feature `ndarray`): a host kernel indexes its chunk's
//! `[saves, states, runs]` buffers as they are declared, the last chunk's
//! padding cut off, and the host reads the results the same way.

use crate::common;
use std::time::Duration;

use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, HostKernel, HostMemoryKind, MemError, Registration,
    SimBackend,
};
use ndarray::Axis;

const SAVES: usize = 4;
const STATES: usize = 3;

/// The value the kernel writes at `[save, v, run]` from run's initial value.
fn value(initial: f64, save: usize, v: usize) -> f64 {
    initial * (save + 1) as f64 + v as f64
}

#[test]
fn a_kernel_indexes_its_chunk_by_name_and_the_last_chunks_padding_is_cut() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let chunk_length = 8;
    mgr.queue_request(
        &solver,
        [
            (
                "initial",
                ArrayRequest::of::<f64>([STATES, chunk_length])
                    .chunk_axis(1)
                    .total_runs(chunk_length),
            ),
            (
                "state",
                ArrayRequest::of::<f64>([SAVES, STATES, chunk_length])
                    .chunk_axis(2)
                    .total_runs(chunk_length),
            ),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let initial: DeviceArray<f64> = response.take("initial").unwrap();
    let state: DeviceArray<f64> = response.take("state").unwrap();
    let runs = 20; // chunks of 8, 8 and 4
    let values: Vec<f64> = (0..STATES * runs).map(|i| i as f64).collect();
    let host_initial = mgr
        .create_host_array(
            [STATES, runs],
            HostMemoryKind::Pageable,
            Some(&values),
            &solver,
        )
        .unwrap();
    let mut host_state = mgr
        .create_host_array::<f64>(
            [SAVES, STATES, runs],
            HostMemoryKind::Pageable,
            None,
            &solver,
        )
        .unwrap();
    let plan = ChunkPlan::new(runs, 3, chunk_length).unwrap();
    let mut widths = Vec::new();
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline()
        .input(&host_initial, initial.along(1))
        .output(&mut host_state, state.along(2))
        .run(|chunk, _| {
            HostKernel::new("saves", Duration::from_micros(1))
                .reads(&initial)
                .writes(&state)
                .launch(|args| {
                    let initial = args.read_nd_runs(&initial, chunk.len())?;
                    let mut state = args.write_nd_runs(&state, chunk.len())?;
                    widths.push(state.len_of(Axis(2)));
                    for save in 0..SAVES {
                        for v in 0..STATES {
                            for run in 0..chunk.len() {
                                state[[save, v, run]] = value(initial[[v, run]], save, v);
                            }
                        }
                    }
                    Ok::<_, MemError>(())
                })
        })
        .unwrap();
    assert_eq!(widths, [8, 8, 4], "the last chunk's view holds its 4 runs");
    let results = host_state.view();
    let inputs = host_initial.view();
    assert_eq!(results.shape(), [SAVES, STATES, runs]);
    for save in 0..SAVES {
        for v in 0..STATES {
            for run in 0..runs {
                assert_eq!(
                    results[[save, v, run]],
                    value(inputs[[v, run]], save, v),
                    "[{save}, {v}, {run}]"
                );
            }
        }
    }
    host_state.view_mut()[[0, 0, 0]] = -1.0;
    assert_eq!(host_state.as_slice()[0], -1.0);
}

#[test]
fn more_runs_than_the_chunk_axis_holds_is_an_error_naming_the_array() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    mgr.queue_request(
        &solver,
        [
            (
                "state",
                ArrayRequest::of::<f32>([2, 5]).chunk_axis(1).total_runs(5),
            ),
            ("weights", ArrayRequest::of::<f32>([3]).unchunkable()),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let state: DeviceArray<f32> = response.take("state").unwrap();
    let weights: DeviceArray<f32> = response.take("weights").unwrap();
    weights.copy_from_host(&[1.0, 2.0, 3.0]).unwrap();
    let error = HostKernel::new("too wide", Duration::from_micros(1))
        .writes(&state)
        .reads(&weights)
        .launch(|args| {
            // An unchunkable array is viewed whole whatever the runs.
            assert_eq!(args.read_nd_runs(&weights, 99)?.shape(), [3]);
            args.write_nd_runs(&state, 6).map(drop)
        })
        .unwrap_err();
    match error {
        MemError::Kernel { kernel, reason } => {
            assert_eq!(kernel, "too wide");
            assert!(
                reason.contains("'state'") && reason.contains("6 runs"),
                "{reason}"
            );
        }
        other => panic!("expected MemError::Kernel, got {other:?}"),
    }
}
