//! The overlapped pipeline against a serial reference: over random shapes,
//! chunk axes, chunk lengths, buffer sets, staging windows and host memory
//! kinds, the results equal what a plain loop over the batch computes, and
//! the strict simulated device reports no hazard on the way.

use crate::common;
use std::time::Duration;

use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, HostKernel, HostMemoryKind, MemError, SimBackend,
    StagingPool,
};
use proptest::prelude::*;

/// One buffer set of the test's kernel.
struct Set {
    input: DeviceArray<u32>,
    output: DeviceArray<u32>,
    state: DeviceArray<u32>,
}

/// What the kernel does to each element, as a plain function.
fn output_of(x: u32) -> u32 {
    x.wrapping_mul(3).wrapping_add(1)
}

fn state_of(v: u32) -> u32 {
    v.wrapping_add(7)
}

#[derive(Debug, Clone)]
struct Case {
    shape: Vec<usize>,
    axis: usize,
    chunk_length: usize,
    sets: usize,
    staging_bytes: usize,
    kind: HostMemoryKind,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=3)
        .prop_flat_map(|ndim| {
            (
                prop::collection::vec(1usize..=4, ndim),
                0..ndim,
                1usize..=24,
                1usize..=3,
                prop_oneof![
                    Just(4usize),
                    Just(12),
                    Just(StagingPool::BYTES_PER_TRANSFER)
                ],
                prop_oneof![
                    Just(HostMemoryKind::Pinned),
                    Just(HostMemoryKind::Pageable),
                    Just(HostMemoryKind::Spilled),
                ],
            )
        })
        .prop_flat_map(|(mut shape, axis, runs, sets, staging_bytes, kind)| {
            shape[axis] = runs;
            (1usize..=runs).prop_map(move |chunk_length| Case {
                shape: shape.clone(),
                axis,
                chunk_length,
                sets,
                staging_bytes,
                kind,
            })
        })
}

fn run_case(case: &Case) -> Result<(), MemError> {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = mgr.register(cubie_mem::Registration::new().on_invalidate(|| {}))?;
    let runs = case.shape[case.axis];
    let chunks = runs.div_ceil(case.chunk_length);
    let mut chunk_shape = case.shape.clone();
    chunk_shape[case.axis] = case.chunk_length;
    let labels = ["input", "output", "state"];
    let requests = (0..case.sets).flat_map(|set| {
        labels.map(|label| {
            (
                format!("{label}{set}"),
                ArrayRequest::of::<u32>(chunk_shape.clone()).unchunkable(),
            )
        })
    });
    mgr.queue_request(&solver, requests)?;
    let mut response = mgr.allocate_queue_for(&solver)?;
    let sets = (0..case.sets)
        .map(|set| {
            Ok(Set {
                input: response.take(&format!("input{set}"))?,
                output: response.take(&format!("output{set}"))?,
                state: response.take(&format!("state{set}"))?,
            })
        })
        .collect::<Result<Vec<_>, MemError>>()?;
    let elements: usize = case.shape.iter().product();
    let input: Vec<u32> = (0..elements as u32)
        .map(|i| i.wrapping_mul(2654435761))
        .collect();
    let state: Vec<u32> = (0..elements as u32).map(|i| i ^ 0x5a5a).collect();
    let host_in = mgr.create_host_array(case.shape.clone(), case.kind, Some(&input), &solver)?;
    let mut host_out =
        mgr.create_host_array::<u32>(case.shape.clone(), case.kind, None, &solver)?;
    let mut host_state =
        mgr.create_host_array(case.shape.clone(), case.kind, Some(&state), &solver)?;
    let plan = ChunkPlan::new(runs, chunks, case.chunk_length).unwrap();
    let streamer = mgr
        .chunk_streamer(&solver, &plan)?
        .with_staging_bytes(case.staging_bytes);
    streamer
        .pipeline_sets(&sets)
        .input_with(&host_in, |set| set.input.along(case.axis))
        .output_with(&mut host_out, |set| set.output.along(case.axis))
        .inout_with(&mut host_state, |set| set.state.along(case.axis))
        .run(|_, set| {
            HostKernel::new("reference step", Duration::from_nanos(100))
                .reads(&set.input)
                .writes(&set.output)
                .updates(&set.state)
                .launch(|args| {
                    let input = args.read(&set.input)?;
                    let output = args.write(&set.output)?;
                    let state = args.write(&set.state)?;
                    output
                        .iter_mut()
                        .zip(input)
                        .for_each(|(y, &x)| *y = output_of(x));
                    state.iter_mut().for_each(|v| *v = state_of(*v));
                    Ok(())
                })
        })?;
    let expected_out: Vec<u32> = input.iter().map(|&x| output_of(x)).collect();
    let expected_state: Vec<u32> = state.iter().map(|&v| state_of(v)).collect();
    assert_eq!(host_out.as_slice(), expected_out, "{case:?}");
    assert_eq!(host_state.as_slice(), expected_state, "{case:?}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn the_pipeline_equals_a_serial_loop(case in case()) {
        run_case(&case).map_err(|error| TestCaseError::fail(format!("{case:?}: {error}")))?;
    }
}
