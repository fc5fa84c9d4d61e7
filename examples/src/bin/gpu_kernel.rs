//! End to end on a CUDA device: the manager allocates a batch's buffers on
//! its stream group's stream, the initial state goes up from pinned host
//! memory, a hand-written PTX kernel (the user's own, loaded with
//! `PtxModule` and launched on the group's stream, a `GroupStream`) takes
//! explicit Euler steps of `y' = -k y` on the device, and the result comes
//! back into pinned memory, checked against the same steps computed on the
//! host.
//!
//! ```text
//! cargo run -p cubie-mem-examples --features cuda --bin gpu_kernel
//! ```
//!
//! Exits with an error (naming the cause) when no CUDA device answers.

use std::error::Error;
use std::process::ExitCode;

use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::{ArrayRequest, MemoryKind, MemoryManager, Registration};
use cubie_mem_examples::euler_decay::EulerDecay;

/// Runs in the batch.
const RUNS: usize = 1 << 20;
/// Euler steps taken.
const STEPS: usize = 50;
/// Step size.
const DT: f64 = 0.01;

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!("gpu_kernel: {error}");
            ExitCode::FAILURE
        }
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
    println!(
        "device {} ({}, driver CUDA {}.{}): {} free of {}",
        cuda.ordinal(),
        cuda.device_name(),
        cuda.driver_version() / 1000,
        cuda.driver_version() % 1000 / 10,
        cubie_mem::Bytes(mgr.mem_info()?.free),
        cubie_mem::Bytes(mgr.mem_info()?.total),
    );

    let solver = mgr.register(
        Registration::new()
            .stream_group("euler")
            .on_invalidate(|| {}),
    )?;
    let pinned = |request: ArrayRequest| request.memory(MemoryKind::Pinned).unchunkable();
    mgr.queue_request(
        &solver,
        [
            ("y", ArrayRequest::of::<f64>([RUNS]).unchunkable()),
            ("k", ArrayRequest::of::<f64>([RUNS]).unchunkable()),
            ("y_host", pinned(ArrayRequest::of::<f64>([RUNS]))),
        ],
    )?;
    let mut response = mgr.allocate_queue_for(&solver)?;
    let y = response.take::<f64>("y")?;
    let k = response.take::<f64>("k")?;
    let y_host = response.take_pinned::<f64>("y_host")?;

    let rates: Vec<f64> = (0..RUNS).map(decay_rate).collect();
    y_host
        .write()?
        .iter_mut()
        .enumerate()
        .for_each(|(run, y)| *y = initial_state(run));
    let kernel = EulerDecay::load(&cuda)?;

    // The group's stream: the copies and the kernels are ordered on it.
    let stream = GroupStream::of(&mgr, &solver)?;
    let current = mgr.bind_stream(&solver)?;
    y.copy_from_host(&y_host.read()?)?;
    k.copy_from_host(&rates)?;
    for _ in 0..STEPS {
        kernel.step(&stream, &y, &k, DT)?;
    }
    y.copy_to_host(&mut y_host.write()?)?;
    drop(current);

    let mut expected: Vec<f64> = (0..RUNS).map(initial_state).collect();
    for _ in 0..STEPS {
        for (y, k) in expected.iter_mut().zip(&rates) {
            *y += DT * -(k * *y);
        }
    }
    let device = y_host.read()?;
    let worst = device
        .iter()
        .zip(&expected)
        .map(|(d, h)| ((d - h) / h).abs())
        .fold(0.0f64, f64::max);
    println!(
        "{RUNS} runs, {STEPS} Euler steps of y' = -k y on the device: y[1] = {:.12} (host {:.12}), \
         largest relative difference {worst:.3e}",
        device[1], expected[1]
    );
    if worst > 1e-15 {
        return Err(format!(
            "the kernel's result is wrong: device and host differ by up to {worst:e} (relative)"
        )
        .into());
    }
    println!("gpu_kernel: ok");
    Ok(())
}
