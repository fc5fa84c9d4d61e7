//! No race on device memory in the chunk pipeline: over two buffer sets
//! and six chunks, with arrays bound input only, output only and in and
//! out, every upload, kernel and download is ordered after the other
//! streams' accesses to the same set's bytes, which the fake driver checks
//! as each is queued (in every execution mode), and the results are one
//! Euler step. `ci/cuda-check.sh` runs these tests on mutants of the
//! pipeline's schedule, each without one of its waits: each mutant is a
//! race one of them reports.
//!
//! An input-only array shows an upload that does not wait for the kernel
//! that last read its set, an output-only array a kernel that does not
//! wait for the download of its set's last results; an in-and-out array
//! would hide the latter, its upload waiting for that download, so one
//! test has none.

use cubie_mem::cuda::{CudaBackend, GroupStream, LaunchDims, PtxFunction, PtxModule};
use cubie_mem::{ArrayRequest, ChunkPlan, DeviceArray, HostMemoryKind, MemError, Registration};
use cubie_mem_examples::euler_decay::EulerDecay;

use super::*;

const CHUNKS: usize = 6;
const CHUNK_RUNS: usize = 1024;
const DT: f64 = 0.01;
const BLOCK_THREADS: u32 = 256;

/// PTX of `euler_decay_into(out, y, k, dt, n)`: `out[i] = y[i] + dt *
/// (-(k[i] * y[i]))` for `i < n`; out is only written.
const EULER_DECAY_INTO_PTX: &str = r"
.version 7.0
.target sm_50
.address_size 64

.visible .entry euler_decay_into(
    .param .u64 out,
    .param .u64 y,
    .param .u64 k,
    .param .f64 dt,
    .param .u32 n
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<10>;
    .reg .f64   %fd<7>;

    ld.param.u64    %rd1, [out];
    ld.param.u64    %rd2, [y];
    ld.param.u64    %rd3, [k];
    ld.param.f64    %fd1, [dt];
    ld.param.u32    %r1, [n];
    mov.u32         %r2, %ctaid.x;
    mov.u32         %r3, %ntid.x;
    mov.u32         %r4, %tid.x;
    mad.lo.u32      %r5, %r2, %r3, %r4;
    setp.ge.u32     %p1, %r5, %r1;
    @%p1 bra        DONE;
    mul.wide.u32    %rd4, %r5, 8;
    cvta.to.global.u64  %rd5, %rd1;
    cvta.to.global.u64  %rd6, %rd2;
    cvta.to.global.u64  %rd7, %rd3;
    add.s64         %rd5, %rd5, %rd4;
    add.s64         %rd6, %rd6, %rd4;
    add.s64         %rd7, %rd7, %rd4;
    ld.global.f64   %fd2, [%rd6];
    ld.global.f64   %fd3, [%rd7];
    mul.rn.f64      %fd4, %fd3, %fd2;
    neg.f64         %fd5, %fd4;
    mul.rn.f64      %fd6, %fd1, %fd5;
    add.rn.f64      %fd6, %fd2, %fd6;
    st.global.f64   [%rd5], %fd6;
DONE:
    ret;
}
";

/// One buffer set: the state, the rates and the step's result.
struct Set {
    y: DeviceArray<f64>,
    k: DeviceArray<f64>,
    out: DeviceArray<f64>,
}

/// Queues `out = y + dt * (-(k * y))` on `stream`.
fn step_into(
    stream: &GroupStream,
    into: &PtxFunction<'_>,
    set: &Set,
    dt: f64,
) -> Result<(), MemError> {
    let (out, y, k) = (
        stream.view(&set.out)?,
        stream.view(&set.y)?,
        stream.view(&set.k)?,
    );
    let n = u32::try_from(y.len()).unwrap();
    // SAFETY: euler_decay_into's parameters (three f64 views of `n`
    // elements, f64, u32); it touches indices below `n` only.
    unsafe {
        stream
            .launch_builder(into)
            .arg(&out)
            .arg(&y)
            .arg(&k)
            .arg(&dt)
            .arg(&n)
            .launch(LaunchDims::for_elements(n, BLOCK_THREADS))
    }
}

/// Runs the pipeline with y bound in and out (`inout`: each chunk steps y
/// in place after writing the step into out) or input only, k input only
/// and out output only, then checks the results and that the fake saw no
/// violation.
fn pipeline(inout: bool) {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(
            Registration::new()
                .stream_group("races")
                .on_invalidate(|| {}),
        )
        .unwrap();
    let labels = ["y0", "k0", "out0", "y1", "k1", "out1"];
    mgr.queue_request(
        &solver,
        labels.map(|label| (label, ArrayRequest::of::<f64>([CHUNK_RUNS]).unchunkable())),
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let sets: Vec<Set> = (0..2)
        .map(|s| Set {
            y: response.take(labels[3 * s]).unwrap(),
            k: response.take(labels[3 * s + 1]).unwrap(),
            out: response.take(labels[3 * s + 2]).unwrap(),
        })
        .collect();
    let runs = CHUNKS * CHUNK_RUNS;
    let (y0, rates) = euler_inputs(runs);
    let pinned = HostMemoryKind::Pinned;
    let mut y = mgr
        .create_host_array([runs], pinned, Some(&y0), &solver)
        .unwrap();
    let k = mgr
        .create_host_array([runs], pinned, Some(&rates), &solver)
        .unwrap();
    let mut out = mgr
        .create_host_array::<f64>([runs], pinned, None, &solver)
        .unwrap();
    let plan = ChunkPlan::new(runs, CHUNKS, CHUNK_RUNS).unwrap();
    let decay = EulerDecay::load(&cuda).unwrap();
    let module = PtxModule::from_ptx(&cuda, EULER_DECAY_INTO_PTX).unwrap();
    let into = module.function("euler_decay_into").unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    let bound = streamer
        .pipeline_sets(&sets)
        .input_with(&k, |set| set.k.along(0))
        .output_with(&mut out, |set| set.out.along(0));
    let bound = if inout {
        bound.inout_with(&mut y, |set| set.y.along(0))
    } else {
        bound.input_with(&y, |set| set.y.along(0))
    };
    bound
        .run(|_, set| {
            step_into(&stream, &into, set, DT)?;
            if inout {
                decay.step(&stream, &set.y, &set.k, DT)?;
            }
            Ok(())
        })
        .unwrap();
    fake.assert_clean();
    assert_one_euler_step(out.as_slice(), &y0, &rates, DT);
    if inout {
        assert_one_euler_step(y.as_slice(), &y0, &rates, DT);
    } else {
        assert_eq!(y.as_slice(), y0.as_slice());
    }
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn input_and_output_arrays_are_never_accessed_by_two_streams_at_once() {
    pipeline(false);
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn an_inout_array_beside_input_and_output_arrays_is_never_accessed_by_two_streams_at_once() {
    pipeline(true);
}
