//! The initcheck: a kernel that reads device memory nothing wrote (a
//! shared table never uploaded) is refused on the simulated device, with an
//! error naming the kernel, the array, the bytes never written and the fix;
//! inside a chunk pipeline the failure names the chunk. A device that reads
//! poison on purpose turns the check off.

use std::time::Duration;

use crate::common;
use cubie_mem::{
    ArrayRequest, BatchError, Bytes, ChunkPlan, DeviceArray, HostKernel, HostMemoryKind,
    KernelArgument, MemError, Registration, SimBackend,
};

const CHUNK: usize = 2;
const TABLE: usize = 16;

/// One buffer set: a chunk of inputs and outputs, and a shared table the
/// kernel looks its factors up in.
struct Set {
    x: DeviceArray<f64>,
    y: DeviceArray<f64>,
    table: DeviceArray<f64>,
}

fn table() -> Vec<f64> {
    (0..TABLE).map(|i| i as f64 + 1.0).collect()
}

/// `y = x * table[run % TABLE]` over a batch of `runs` in two buffer sets,
/// of which `prepare` uploads (or not) the tables. Returns the outcome and
/// the host outputs.
fn scale_batch(
    sim: SimBackend,
    runs: usize,
    prepare: impl Fn(&[Set]) -> Result<(), MemError>,
) -> Result<(Result<(), BatchError>, Vec<f64>), MemError> {
    let mgr = common::manager_on(sim);
    let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
    let requests = (0..2).flat_map(|set| {
        [
            (format!("x{set}"), ArrayRequest::of::<f64>([CHUNK])),
            (format!("y{set}"), ArrayRequest::of::<f64>([CHUNK])),
            (format!("table{set}"), ArrayRequest::of::<f64>([TABLE])),
        ]
        .map(|(label, request)| (label, request.unchunkable()))
    });
    mgr.queue_request(&solver, requests)?;
    let mut response = mgr.allocate_queue_for(&solver)?;
    let sets = (0..2)
        .map(|set| {
            Ok(Set {
                x: response.take(&format!("x{set}"))?,
                y: response.take(&format!("y{set}"))?,
                table: response.take(&format!("table{set}"))?,
            })
        })
        .collect::<Result<Vec<_>, MemError>>()?;
    prepare(&sets)?;
    let input: Vec<f64> = (0..runs).map(|i| i as f64).collect();
    let kind = HostMemoryKind::Pageable;
    let host_x = mgr.create_host_array([runs], kind, Some(&input), &solver)?;
    let mut host_y = mgr.create_host_array::<f64>([runs], kind, None, &solver)?;
    let plan = ChunkPlan::new(runs, runs.div_ceil(CHUNK), CHUNK)?;
    let streamer = mgr.chunk_streamer(&solver, &plan)?;
    let outcome = streamer
        .pipeline_sets(&sets)
        .input_with(&host_x, |set| set.x.along(0))
        .output_with(&mut host_y, |set| set.y.along(0))
        .run(|chunk, set| {
            HostKernel::new("scale", Duration::from_micros(1))
                .reads(&set.x)
                .reads(&set.table)
                .writes(&set.y)
                .launch(|args| {
                    let (x, table) = (args.read(&set.x)?, args.read(&set.table)?);
                    let y = args.write(&set.y)?;
                    for (i, (y, x)) in y.iter_mut().zip(x).enumerate() {
                        *y = x * table[(chunk.runs.start + i) % TABLE];
                    }
                    Ok(())
                })
        });
    drop(streamer);
    Ok((outcome, host_y.to_vec()))
}

/// The error of a kernel that read set 1's table, never uploaded.
fn never_uploaded(first_unwritten: std::ops::Range<u64>, unwritten: u64) -> MemError {
    MemError::KernelArgument(KernelArgument::UnwrittenRead {
        kernel: "scale".to_owned(),
        label: "table1".to_owned(),
        read: Bytes(8 * TABLE as u64),
        first_unwritten,
        unwritten: Bytes(unwritten),
    })
}

#[test]
fn a_shared_table_never_uploaded_is_refused_naming_kernel_array_and_chunk() {
    // The mistake: only the first buffer set's table is uploaded, so chunk
    // 0 (set 0) computes and chunk 1 (set 1) reads a table nothing wrote.
    let (outcome, host_y) = scale_batch(SimBackend::new(1 << 30), 8, |sets| {
        sets[0].table.copy_from_host(&table())
    })
    .unwrap();
    let failure = outcome.unwrap_err();
    assert_eq!(failure.chunk(), Some(1), "the chunk is named");
    assert_eq!(failure.completed(), 0..1);
    assert_eq!(
        failure.error(),
        &never_uploaded(0..8 * TABLE as u64, 8 * TABLE as u64)
    );
    assert_eq!(&host_y[..CHUNK], [0.0, 2.0], "chunk 0's results are in");
    let message = failure.error().to_string();
    for part in [
        "kernel 'scale'",
        "'table1'",
        "bytes 0..128",
        "128 B of the 128 B",
        "copy_from_host",
        "input of the chunk pipeline",
        "writes(..)",
        "with_initcheck(false)",
    ] {
        assert!(message.contains(part), "{part} missing: {message}");
    }
    // As one MemError, the batch's failure names the chunk too.
    let batch = MemError::from(failure).to_string();
    assert!(
        batch.starts_with("chunk 1 of the batch failed: kernel 'scale'"),
        "{batch}"
    );
}

#[test]
fn a_table_uploaded_in_part_is_refused_from_its_first_unwritten_byte() {
    let (outcome, _) = scale_batch(SimBackend::new(1 << 30), 8, |sets| {
        sets[0].table.copy_from_host(&table())?;
        sets[1].table.copy_from_host_at(0, &table()[..4])
    })
    .unwrap();
    let failure = outcome.unwrap_err();
    assert_eq!(failure.chunk(), Some(1));
    assert_eq!(failure.error(), &never_uploaded(32..128, 96));
}

#[test]
fn the_fix_uploading_every_sets_table_runs_the_batch() {
    let (outcome, host_y) = scale_batch(SimBackend::new(1 << 30), 8, |sets| {
        sets.iter()
            .try_for_each(|set| set.table.copy_from_host(&table()))
    })
    .unwrap();
    outcome.unwrap();
    let expected: Vec<f64> = (0..8).map(|i| i as f64 * (i as f64 + 1.0)).collect();
    assert_eq!(host_y, expected);
}

#[test]
fn the_padding_past_a_short_last_chunk_is_not_a_never_written_read() {
    // 3 runs in chunks of 2: chunk 1, the first in set 1, holds one run, and
    // the kernel reads all of x (the pipeline's padding past the run).
    let (outcome, host_y) = scale_batch(SimBackend::new(1 << 30), 3, |sets| {
        sets.iter()
            .try_for_each(|set| set.table.copy_from_host(&table()))
    })
    .unwrap();
    outcome.unwrap();
    assert_eq!(host_y, [0.0, 2.0, 6.0]);
}

#[test]
fn with_the_initcheck_off_the_kernel_reads_poison() {
    let sim = SimBackend::new(1 << 30).with_initcheck(false);
    let (outcome, host_y) = scale_batch(sim, 8, |_| Ok(())).unwrap();
    outcome.unwrap();
    assert!(host_y.iter().all(|y| y.is_nan()), "poison: {host_y:?}");
}

#[test]
fn an_update_of_an_array_never_written_is_refused_and_a_write_is_not() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    mgr.queue_request(&solver, [("sum", ArrayRequest::of::<f32>([4]))])
        .unwrap();
    let sum = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f32>("sum")
        .unwrap();
    let accumulate = || {
        HostKernel::new("accumulate", Duration::from_micros(1))
            .updates(&sum)
            .launch(|args| {
                args.write(&sum)?.iter_mut().for_each(|s| *s += 1.0);
                Ok(())
            })
    };
    let error = accumulate().unwrap_err();
    assert!(
        matches!(&error, MemError::KernelArgument(KernelArgument::UnwrittenRead { kernel, label, unwritten, .. })
            if kernel == "accumulate" && label == "sum" && *unwritten == Bytes(16)),
        "{error}"
    );
    HostKernel::new("zero", Duration::from_micros(1))
        .writes(&sum)
        .launch(|args| {
            args.write(&sum)?.fill(0.0);
            Ok(())
        })
        .unwrap();
    accumulate().unwrap();
    assert_eq!(sum.to_vec().unwrap(), [1.0; 4]);
}
