//! The host's figures on a GPU node, for the simulated device: this
//! machine's memcpy curve and first touch (`HostFigures::measure`), with
//! page-locking measured through the driver (`cuMemHostAlloc` of new
//! blocks, by size) in place of `mlock`. With `--host-figures FILE` they
//! are written in the format `HostFigures::load` reads, so that
//! `batch --host-figures FILE` replays the batch on this node's figures.

use std::path::Path;
use std::time::Instant;

use cubie_mem::backend::{Backend, HostFigures};
use cubie_mem::cuda::CudaBackend;

use super::BenchResult;

/// The sizes page-locking is measured at; the largest gives the figure.
const PAGE_LOCK_SIZES: [u64; 3] = [4 << 20, 64 << 20, 256 << 20];

/// Measures the host's figures, prints them and, given `path`, writes them.
pub fn report(cuda: &CudaBackend, path: Option<&Path>) -> BenchResult {
    println!("\nhost figures (the simulated device's, measured on this node)");
    let mut figures = HostFigures::measure();
    for bytes in PAGE_LOCK_SIZES {
        // Empty the backend's cache, so that the block is a new one.
        cuda.clear_pinned_cache();
        let began = Instant::now();
        let block = cuda.alloc_pinned_for_overwrite(bytes)?;
        let elapsed = began.elapsed();
        drop(block);
        let rate = (u128::from(bytes) * 1_000_000_000 / elapsed.as_nanos().max(1)) as u64;
        println!(
            "  page-locking {:>4} MiB (cuMemHostAlloc): {:>8.3} ms, {:.2} GB/s",
            bytes >> 20,
            elapsed.as_secs_f64() * 1e3,
            rate as f64 / 1e9
        );
        figures.page_lock = rate.max(1);
    }
    cuda.clear_pinned_cache();
    figures.source = format!(
        "{} (page-locking by cuMemHostAlloc on {})",
        figures.source,
        cuda.device_name()
    );
    println!("  {figures}");
    if let Some(path) = path {
        figures.save(path)?;
        println!(
            "  written to {} (batch --host-figures FILE loads it)",
            path.display()
        );
    }
    Ok(())
}
