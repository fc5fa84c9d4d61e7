//! Kernels launched by cust in an overlapped chunk pipeline on the
//! manager's memory (features `cuda` and `cust`).
//!
//! cust launches only on a stream it created (`cust::stream::Stream` has no
//! way to hold another's), so the chunks go the other way round: two cust
//! streams, each bound in turn as the manager's current stream
//! (`with_cust_stream`), each with a buffer set of its own. Chunk k's
//! upload (from page-locked memory), its Euler steps (the examples'
//! `euler_decay` kernel, launched by cust's `launch!` over views taken
//! from the bound stream, `CurrentStream::cuda_stream`) and its download
//! are queued on stream k % 2, so that chunk k + 1's upload runs while
//! chunk k computes, and the host gathers and scatters chunks while the
//! device works. The results are checked against the closed form of
//! explicit Euler, `y_n = y_0 (1 - k dt)^n`, as the main job checks its
//! own.
//!
//! ```text
//! cargo run -p cubie-mem-examples --features cust --bin cust_pipeline
//! ```
//!
//! cust's build links `libcuda.so`: a CUDA toolkit, or `CUDA_LIBRARY_PATH`
//! naming a directory whose `lib64` holds it (docs/interop.md). Exits with
//! an error (naming the cause) when no CUDA device answers or a result is
//! wrong.

use std::error::Error;
use std::process::ExitCode;

use cubie_mem::cuda::CudaBackend;
use cubie_mem::{
    ArrayRequest, AsyncCopyError, DeviceArray, HostArray, HostMemoryKind, MemError, MemoryManager,
    PendingCopy, Registration,
};
use cubie_mem_examples::batch::CLOSED_FORM_TOLERANCE;
use cubie_mem_examples::euler_decay::EULER_DECAY_PTX;
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};

/// Runs in the batch.
const RUNS: usize = 1 << 18;
/// Runs in a chunk (the last may hold fewer).
const CHUNK: usize = 1 << 15;
/// Euler steps a chunk takes (one launch each).
const STEPS: usize = 20;
/// Step size.
const DT: f64 = 0.01;
/// Threads per block.
const BLOCK: u32 = 256;

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!("cust_pipeline: {error}");
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

/// The error of an asynchronous copy, without the host array it gives back.
fn copy_error<T: cubie_mem::Element>(error: AsyncCopyError<T>) -> MemError {
    error.into_parts().0
}

/// A chunk's device buffers and page-locked host arrays, with what is in
/// flight on its stream.
struct Set {
    y: DeviceArray<f64>,
    k: DeviceArray<f64>,
    /// The host arrays of the next upload, and of the next download.
    y_in: Option<HostArray<f64>>,
    k_in: Option<HostArray<f64>>,
    y_out: Option<HostArray<f64>>,
    /// The uploads in flight, and the download with its chunk's first run.
    uploads: Option<(PendingCopy<f64>, PendingCopy<f64>)>,
    download: Option<(usize, PendingCopy<f64>)>,
}

impl Set {
    /// Waits for the set's copies in flight, scattering a downloaded chunk
    /// into `results`.
    fn finish(&mut self, results: &mut [f64]) -> Result<(), MemError> {
        if let Some((y, k)) = self.uploads.take() {
            self.y_in = Some(y.wait()?);
            self.k_in = Some(k.wait()?);
        }
        if let Some((first, download)) = self.download.take() {
            let host = download.wait()?;
            let end = (first + CHUNK).min(RUNS);
            results[first..end].copy_from_slice(&host.as_slice()[..end - first]);
            self.y_out = Some(host);
        }
        Ok(())
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let cuda = CudaBackend::new(0)?;
    let mgr = MemoryManager::new(cuda.clone());
    let solver = mgr.register(
        Registration::new()
            .stream_group("euler")
            .on_invalidate(|| {}),
    )?;
    // cust calls the driver with the current context: the backend's.
    cuda.make_current()?;
    let module = Module::from_ptx(EULER_DECAY_PTX, &[])?;
    let euler = module.get_function("euler_decay")?;
    let streams = [
        Stream::new(StreamFlags::NON_BLOCKING, None)?,
        Stream::new(StreamFlags::NON_BLOCKING, None)?,
    ];

    let chunk = || ArrayRequest::of::<f64>([CHUNK]).unchunkable();
    mgr.queue_request(
        &solver,
        [
            ("y0", chunk()),
            ("k0", chunk()),
            ("y1", chunk()),
            ("k1", chunk()),
        ],
    )?;
    let mut response = mgr.allocate_queue_for(&solver)?;
    let pinned = || mgr.create_host_array::<f64>([CHUNK], HostMemoryKind::Pinned, None, &solver);
    let mut sets = Vec::new();
    for set in ["0", "1"] {
        sets.push(Set {
            y: response.take::<f64>(&format!("y{set}"))?,
            k: response.take::<f64>(&format!("k{set}"))?,
            y_in: Some(pinned()?),
            k_in: Some(pinned()?),
            y_out: Some(pinned()?),
            uploads: None,
            download: None,
        });
    }

    let initial: Vec<f64> = (0..RUNS).map(initial_state).collect();
    let rates: Vec<f64> = (0..RUNS).map(decay_rate).collect();
    let mut results = vec![f64::NAN; RUNS];
    let chunks = RUNS.div_ceil(CHUNK);
    for index in 0..chunks {
        let (set, stream) = (&mut sets[index % 2], &streams[index % 2]);
        // The set's previous chunk is done with its buffers.
        set.finish(&mut results)?;
        let (first, end) = (index * CHUNK, ((index + 1) * CHUNK).min(RUNS));
        let n = (end - first) as u32;
        let (Some(mut y_in), Some(mut k_in), Some(y_out)) =
            (set.y_in.take(), set.k_in.take(), set.y_out.take())
        else {
            return Err("a set's host arrays were lost".into());
        };
        y_in.as_mut_slice()[..end - first].copy_from_slice(&initial[first..end]);
        k_in.as_mut_slice()[..end - first].copy_from_slice(&rates[first..end]);
        let (uploads, download) = cubie_mem::cuda::with_cust_stream(&mgr, stream, |guard| {
            // Queued on cust's stream, the current stream: the uploads ...
            let y_up = set.y.upload_async(y_in).map_err(copy_error)?;
            let k_up = set.k.upload_async(k_in).map_err(copy_error)?;
            // ... the Euler steps, over views ordered on the bound stream ...
            let bound = guard.cuda_stream()?;
            let (y, k) = (bound.view(&set.y)?, bound.view(&set.k)?);
            let (y_ptr, k_ptr) = (y.as_cust_ptr(), k.as_cust_ptr());
            for _ in 0..STEPS {
                // SAFETY: euler_decay takes (f64*, const f64*, f64, u32);
                // both views hold at least `n` elements and the kernel
                // touches only indices below `n`.
                unsafe {
                    cust::launch!(euler<<<n.div_ceil(BLOCK), BLOCK, 0, stream>>>(
                        y_ptr, k_ptr, DT, n
                    ))?;
                }
            }
            // ... and the download.
            let down = set.y.download_async(y_out).map_err(copy_error)?;
            Ok::<_, Box<dyn Error>>(((y_up, k_up), down))
        })??;
        set.uploads = Some(uploads);
        set.download = Some((first, download));
    }
    for set in &mut sets {
        set.finish(&mut results)?;
    }

    let steps = STEPS as i32;
    let worst = results
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
        "{RUNS} runs in {chunks} chunks of {CHUNK} on two cust streams, {STEPS} Euler steps each \
         launched by cust: largest error against the closed form {worst:.3e}"
    );
    if worst.is_nan() || worst > CLOSED_FORM_TOLERANCE {
        return Err(format!(
            "the results differ from the closed form by up to {worst:e} (tolerance \
             {CLOSED_FORM_TOLERANCE:e})"
        )
        .into());
    }
    println!("cust_pipeline: ok");
    Ok(())
}
