//! A kernel launched by cudarc inside the manager's overlapped chunk
//! pipeline (features `cuda` and `cudarc`).
//!
//! A batch of Euler integrations of `y' = -k y`, too large for its share
//! of the device, is planned into chunks with two buffer sets and streamed
//! through the device: the upload of chunk k + 1 and the download of
//! chunk k - 1 run on streams of their own while chunk k computes on the
//! group's stream. The computation is the examples' `euler_decay` kernel,
//! loaded and launched by cudarc on the group's stream (borrowed as a
//! cudarc stream, `GroupStream::as_cudarc`), with views of the buffer set
//! as its arguments, so the pipeline's events order it between the
//! chunk's upload and its download. The results are checked against the
//! closed form of explicit Euler, `y_n = y_0 (1 - k dt)^n`, as the main
//! job checks its own.
//!
//! ```text
//! cargo run -p cubie-mem-examples --features cudarc --bin cudarc_pipeline
//! ```
//!
//! Exits with an error (naming the cause) when no CUDA device answers or a
//! result is wrong. CI runs it on the fake driver of `ci/fake-cuda`, and
//! checks that it fails there with the launch moved to a stream of cudarc's
//! own, which nothing orders with the pipeline's copies.

use std::error::Error;
use std::fmt::Display;
use std::process::ExitCode;

use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::{DeviceArray, GpuBuffers, LimitMode, MemError, MemoryManager};
use cubie_mem_examples::batch::CLOSED_FORM_TOLERANCE;
use cubie_mem_examples::euler_decay::EULER_DECAY_PTX;
use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

/// Runs in the batch.
const RUNS: usize = 1 << 18;
/// The solver's share of the device: a quarter of the batch's 4 MiB.
const SHARE_BYTES: u64 = 1 << 20;
/// Euler steps a chunk takes (one launch each).
const STEPS: usize = 20;
/// Step size.
const DT: f64 = 0.01;

/// The sizes of the batch.
pub struct Runs {
    /// Runs in the batch.
    pub n_runs: usize,
}

/// One buffer set of the pipeline: the state, integrated in place, and
/// the decay rates.
#[derive(GpuBuffers)]
#[stream_group("euler")]
#[buffers(dims = Runs, pipeline_depth = 2)]
pub struct Decay {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    y: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    k: DeviceArray<f64>,
}

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!("cudarc_pipeline: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A failure of cudarc's inside the pipeline's computation, as the
/// pipeline reports a kernel's.
fn kernel_error(error: impl Display) -> MemError {
    MemError::Kernel {
        kernel: "euler_decay".into(),
        reason: error.to_string(),
    }
}

fn initial_state(run: usize) -> f64 {
    1.0 + (run % 97) as f64 / 97.0
}

fn decay_rate(run: usize) -> f64 {
    0.1 + (run % 13) as f64 * 0.7
}

fn run() -> Result<(), Box<dyn Error>> {
    let cuda = CudaBackend::new(0)?;
    let mgr = MemoryManager::new(cuda.clone());
    mgr.set_limit_mode(LimitMode::Active);
    let share = SHARE_BYTES as f64 / mgr.mem_info()?.total as f64;
    let solver = mgr.register(Decay::registration().proportion(share).on_invalidate(|| {}))?;
    let runs = Runs { n_runs: RUNS };
    let buffers = mgr.allocate_buffers::<Decay>(&solver, &runs)?;
    let plan = *buffers.plan();

    let initial: Vec<f64> = (0..RUNS).map(initial_state).collect();
    let rates: Vec<f64> = (0..RUNS).map(decay_rate).collect();
    let mut y = mgr.create_host_array([RUNS], None, Some(&initial), &solver)?;
    let k = mgr.create_host_array([RUNS], None, Some(&rates), &solver)?;

    // cudarc's handle of the backend's context (device 0's primary
    // context), its module, and the group's stream borrowed as cudarc's.
    let context = CudaContext::new(cuda.ordinal() as usize)?;
    let module = context.load_module(Ptx::from_src(EULER_DECAY_PTX))?;
    let euler = module.load_function("euler_decay")?;
    let stream = GroupStream::of(&mgr, &solver)?;
    let on_group_stream = stream.as_cudarc(&context)?;

    mgr.chunk_streamer(&solver, &plan)?
        .pipeline_sets(buffers.sets())
        .inout_with(&mut y, |set| set.y.along(0))
        .input_with(&k, |set| set.k.along(0))
        .run(|chunk, set| {
            // The last chunk may be shorter than the buffers.
            let n = u32::try_from(chunk.len()).map_err(kernel_error)?;
            // The views order the group's stream after the arrays' earlier
            // uses and keep their memory while the launches are queued.
            let (vy, vk) = (stream.view(&set.y)?, stream.view(&set.k)?);
            for _ in 0..STEPS {
                let mut launch = on_group_stream.launch_builder(&euler);
                launch.arg(&vy).arg(&vk).arg(&DT).arg(&n);
                // SAFETY: euler_decay takes (f64*, const f64*, f64, u32);
                // both views hold at least `n` elements, and the kernel
                // touches only indices below `n`.
                unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.map_err(kernel_error)?;
            }
            Ok(())
        })?;

    let steps = STEPS as i32;
    let worst = y
        .as_slice()
        .iter()
        .enumerate()
        .map(|(run, &got)| (got - initial[run] * (1.0 - rates[run] * DT).powi(steps)).abs())
        .fold(0.0f64, |worst, error| {
            // A NaN result is the largest error (f64::max would skip it).
            if error.is_nan() || error > worst {
                error
            } else {
                worst
            }
        });
    println!(
        "{RUNS} runs in {} chunks of {} (two buffer sets), {STEPS} Euler steps each launched by \
         cudarc on the group's stream: largest error against the closed form {worst:.3e}",
        plan.chunks(),
        plan.chunk_length()
    );
    if worst.is_nan() || worst > CLOSED_FORM_TOLERANCE {
        return Err(format!(
            "the results differ from the closed form by up to {worst:e} (tolerance \
             {CLOSED_FORM_TOLERANCE:e})"
        )
        .into());
    }
    println!("cudarc_pipeline: ok");
    Ok(())
}
