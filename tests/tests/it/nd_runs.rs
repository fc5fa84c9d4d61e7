//! Typed-rank views and a chunk split by runs over host threads:
//! `read_nd_as`/`write_nd_runs_as` refuse another rank with
//! `KernelArgument::RankMismatch`, and `par_runs` computes what a serial kernel
//! computes, for arrays chunked along different axes and a short chunk.

use std::ops::Range;
use std::sync::Mutex;
use std::time::Duration;

use cubie_mem::{
    ArrayRequest, DeviceArray, HostKernel, Instance, KernelArgument, MemError, MemoryManager,
    Registration, SimBackend,
};
use ndarray::{Ix1, Ix2, Ix3, IxDyn};

use crate::common;

/// The chunk length of every chunked array.
const WIDTH: usize = 8;
/// What the outputs hold before a kernel writes them.
const SENTINEL: f64 = -7.0;

/// A chunk's arrays: `a` `[runs, 3]` (run axis 0) and `b` `[2, runs]` (run
/// axis 1) in, `w` `[3]` unchunkable in, and out `x` `[runs, 2]` (run axis
/// 0) and `y` `[2, runs, 3]` (run axis 1).
struct Arrays {
    /// Holds the arrays: they are released when it is dropped.
    _solver: Instance,
    a: DeviceArray<f64>,
    b: DeviceArray<f64>,
    w: DeviceArray<f64>,
    x: DeviceArray<f64>,
    y: DeviceArray<f64>,
}

fn arrays(mgr: &MemoryManager) -> Arrays {
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let chunked = |shape: Vec<usize>, axis: usize| {
        ArrayRequest::of::<f64>(shape)
            .chunk_axis(axis)
            .total_runs(WIDTH)
    };
    mgr.queue_request(
        &solver,
        [
            ("a", chunked(vec![WIDTH, 3], 0)),
            ("b", chunked(vec![2, WIDTH], 1)),
            ("w", ArrayRequest::of::<f64>([3]).unchunkable()),
            ("x", chunked(vec![WIDTH, 2], 0)),
            ("y", chunked(vec![2, WIDTH, 3], 1)),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let arrays = Arrays {
        _solver: solver,
        a: response.take("a").unwrap(),
        b: response.take("b").unwrap(),
        w: response.take("w").unwrap(),
        x: response.take("x").unwrap(),
        y: response.take("y").unwrap(),
    };
    let ramp = |n: usize| (0..n).map(|i| i as f64 * 0.5 + 1.0).collect::<Vec<_>>();
    arrays.a.copy_from_host(&ramp(WIDTH * 3)).unwrap();
    arrays.b.copy_from_host(&ramp(2 * WIDTH)).unwrap();
    arrays.w.copy_from_host(&[2.0, 3.0, 5.0]).unwrap();
    arrays
}

/// Fills the outputs with the sentinel.
fn reset(arrays: &Arrays) {
    arrays.x.copy_from_host(&[SENTINEL; WIDTH * 2]).unwrap();
    arrays.y.copy_from_host(&[SENTINEL; 2 * WIDTH * 3]).unwrap();
}

fn kernel(arrays: &Arrays) -> HostKernel<'_> {
    HostKernel::new("mix", Duration::from_micros(1))
        .reads(&arrays.a)
        .reads(&arrays.b)
        .reads(&arrays.w)
        .writes(&arrays.x)
        .writes(&arrays.y)
}

/// The elements of `x` and `y`.
type Outputs = (Vec<f64>, Vec<f64>);

/// The outputs after a kernel.
fn outputs(arrays: &Arrays) -> Outputs {
    (arrays.x.to_vec().unwrap(), arrays.y.to_vec().unwrap())
}

/// The serial kernel, on typed views.
fn serial(arrays: &Arrays, runs: usize) -> Outputs {
    reset(arrays);
    kernel(arrays)
        .launch(|args| {
            let a = args.read_nd_runs_as::<Ix2, _>(&arrays.a, runs)?;
            let b = args.read_nd_runs_as::<Ix2, _>(&arrays.b, runs)?;
            let w = args.read_nd_as::<Ix1, _>(&arrays.w)?;
            let mut x = args.write_nd_runs_as::<Ix2, _>(&arrays.x, runs)?;
            let mut y = args.write_nd_runs_as::<Ix3, _>(&arrays.y, runs)?;
            for run in 0..runs {
                for k in 0..2 {
                    x[[run, k]] = a[[run, k]] * b[[k, run]] + w[k];
                    for v in 0..3 {
                        y[[k, run, v]] = a[[run, v]] * w[v] - b[[k, run]] * run as f64;
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    outputs(arrays)
}

/// The same kernel with its runs split over `threads` threads; the parts'
/// runs, in order.
fn parallel(arrays: &Arrays, runs: usize, threads: usize) -> (Outputs, Vec<Range<usize>>) {
    reset(arrays);
    let parts = Mutex::new(Vec::new());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        kernel(arrays).launch(|args| {
            let views = (
                args.read_runs::<Ix2, _>(&arrays.a, runs)?,
                args.read_runs::<Ix2, _>(&arrays.b, runs)?,
                args.read_runs::<Ix1, _>(&arrays.w, runs)?,
                args.write_runs::<Ix2, _>(&arrays.x, runs)?,
                args.write_runs::<Ix3, _>(&arrays.y, runs)?,
            );
            args.par_runs(views, |part, (a, b, w, mut x, mut y)| {
                assert_eq!(w.len(), 3, "an unchunkable view goes whole to every part");
                assert_eq!((a.shape()[0], b.shape()[1]), (part.len(), part.len()));
                for run in 0..part.len() {
                    // The chunk's run, as the serial kernel numbers it.
                    let chunk_run = (part.start + run) as f64;
                    for k in 0..2 {
                        x[[run, k]] = a[[run, k]] * b[[k, run]] + w[k];
                        for v in 0..3 {
                            y[[k, run, v]] = a[[run, v]] * w[v] - b[[k, run]] * chunk_run;
                        }
                    }
                }
                parts.lock().unwrap().push(part);
                Ok(())
            })
        })
    })
    .unwrap();
    let mut parts = parts.into_inner().unwrap();
    parts.sort_by_key(|part| part.start);
    (outputs(arrays), parts)
}

#[test]
fn par_runs_computes_what_the_serial_kernel_does_for_a_full_and_a_short_chunk() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let arrays = arrays(&mgr);
    for runs in [WIDTH, 5, 1] {
        let expected = serial(&arrays, runs);
        for threads in [1, 2, 3, 4] {
            let (got, parts) = parallel(&arrays, runs, threads);
            assert_eq!(got, expected, "{runs} runs over {threads} threads");
            // Contiguous parts covering the runs, one per thread at most.
            assert_eq!(parts.first().map(|p| p.start), Some(0));
            assert_eq!(parts.last().map(|p| p.end), Some(runs));
            assert!(parts.windows(2).all(|pair| pair[0].end == pair[1].start));
            assert!(parts.len() <= threads, "{parts:?}");
            let full = runs.div_ceil(threads);
            assert!(
                parts[..parts.len() - 1].iter().all(|p| p.len() == full),
                "{parts:?}"
            );
        }
    }
    // The serial kernel's values, and a short chunk's padding untouched.
    let (x, y) = serial(&arrays, 5);
    assert_eq!(x[2 * 4 + 1], 7.5 * 7.0 + 3.0); // x[4, 1] = a[4, 1] * b[1, 4] + w[1]
    assert_eq!(x[2 * 5..], [SENTINEL; 2 * 3]);
    assert_eq!(y[(WIDTH + 4) * 3 + 2], 8.0 * 5.0 - 7.0 * 4.0); // y[1, 4, 2]
    assert_eq!(y[(WIDTH + 5) * 3..2 * WIDTH * 3], [SENTINEL; 3 * 3]);
}

#[test]
fn a_view_of_another_rank_is_a_rank_mismatch_and_borrows_nothing() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let arrays = arrays(&mgr);
    reset(&arrays);
    let mut mismatch = None;
    kernel(&arrays)
        .launch(|args| {
            mismatch = args.write_nd_runs_as::<Ix2, _>(&arrays.y, 5).err();
            // Nothing was borrowed: the array is still there, at its rank
            // or any (IxDyn).
            assert_eq!(args.write_nd_as::<IxDyn, _>(&arrays.y)?.ndim(), 3);
            assert_eq!(args.read_nd_as::<Ix2, _>(&arrays.a)?.shape(), [WIDTH, 3]);
            Ok(())
        })
        .unwrap();
    let expected = KernelArgument::RankMismatch {
        kernel: "mix".into(),
        label: "y".into(),
        rank: 3,
        asked: 2,
    };
    assert_eq!(mismatch, Some(MemError::KernelArgument(expected)));
    let message = mismatch.map(|error| error.to_string()).unwrap_or_default();
    assert!(
        message.contains("'y' has 3 axes") && message.contains("Ix3"),
        "{message}"
    );
}

/// The reason of a kernel's `MemError::Kernel`.
fn reason(error: MemError) -> String {
    match error {
        MemError::Kernel { kernel, reason } => {
            assert_eq!(kernel, "mix");
            reason
        }
        other => panic!("expected MemError::Kernel, got {other:?}"),
    }
}

#[test]
fn par_runs_refuses_views_it_cannot_split_and_returns_the_first_parts_error() {
    let mgr = common::manager_on(SimBackend::new(1 << 30));
    let arrays = arrays(&mgr);
    reset(&arrays);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    let failing = pool.install(|| {
        kernel(&arrays).launch(|args| {
            let x = args.write_runs::<Ix2, _>(&arrays.x, WIDTH)?;
            args.par_runs((x,), |part, _| match part.start {
                0 => Ok(()),
                start => Err(MemError::Kernel {
                    kernel: "mix".into(),
                    reason: format!("part at {start}"),
                }),
            })
        })
    });
    assert_eq!(
        reason(failing.unwrap_err()),
        "part at 2",
        "the first by run order"
    );

    let disagreeing = kernel(&arrays).launch(|args| {
        let views = (
            args.read_runs::<Ix2, _>(&arrays.a, 5)?,
            args.write_runs::<Ix2, _>(&arrays.x, 4)?,
        );
        args.par_runs(views, |_, _| unreachable!("nothing runs"))
    });
    let message = reason(disagreeing.unwrap_err());
    assert!(message.contains("'a' holds 5, 'x' 4"), "{message}");

    let whole = kernel(&arrays).launch(|args| {
        let w = args.read_runs::<Ix1, _>(&arrays.w, 5)?;
        args.par_runs((w,), |_, _| unreachable!("nothing runs"))
    });
    assert!(reason(whole.unwrap_err()).contains("none of its views"));

    let unchunkable =
        kernel(&arrays).launch(|args| args.write_runs::<Ix1, _>(&arrays.w, 5).map(drop));
    assert!(reason(unchunkable.unwrap_err()).contains("'w' is unchunkable"));
}
