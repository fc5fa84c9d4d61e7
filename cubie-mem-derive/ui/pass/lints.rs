//! The generated code trips no lint a crate may deny: rustc's warnings and
//! its allow-by-default lints that apply to code like it, and clippy's
//! groups (checked when clippy compiles the case), on a struct using every
//! part of the grammar.

#![deny(
    warnings,
    future_incompatible,
    nonstandard_style,
    rust_2018_idioms,
    rust_2024_compatibility,
    unused,
    absolute_paths_not_starting_with_crate,
    elided_lifetimes_in_paths,
    explicit_outlives_requirements,
    keyword_idents,
    let_underscore_drop,
    macro_use_extern_crate,
    meta_variable_misuse,
    missing_copy_implementations,
    missing_debug_implementations,
    missing_docs,
    non_ascii_idents,
    redundant_lifetimes,
    single_use_lifetimes,
    trivial_casts,
    trivial_numeric_casts,
    unit_bindings,
    unnameable_types,
    unreachable_pub,
    unsafe_code,
    unused_extern_crates,
    unused_import_braces,
    unused_lifetimes,
    unused_qualifications,
    unused_results,
    variant_size_differences
)]
#![deny(
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    clippy::absolute_paths,
    clippy::std_instead_of_core,
    clippy::used_underscore_binding
)]

use cubie_mem::{DeviceArray, GpuBuffers, MemoryManager, PinnedArray, Precision, SimBackend};

/// The dimensions.
struct RunDims {
    /// States per run.
    n_states: usize,
    /// Runs in the batch.
    n_runs: usize,
}

/// An alias the macro cannot compare with `precision = f64`.
type Real = f64;

/// Every part of the grammar, with a type parameter.
#[derive(GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = RunDims, pipeline_depth = 2)]
struct Outputs<P: Precision> {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, precision = P)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], memory = pinned, label = "run_status")]
    status: PinnedArray<i32>,
    #[buffer(shape = [n_states, 2], unchunkable, precision = f64)]
    bounds: DeviceArray<Real>,
}

/// Concrete element types only.
#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
struct Times {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    times: DeviceArray<f64>,
}

fn main() -> Result<(), cubie_mem::MemError> {
    let mgr = MemoryManager::new(SimBackend::new(1 << 30));
    let solver = mgr.register(Outputs::<f32>::registration().on_invalidate(|| {}))?;
    let dims = RunDims {
        n_states: 3,
        n_runs: 100,
    };
    let outputs = mgr.allocate_buffers::<Outputs<f32>>(&solver, &dims)?;
    assert!(!outputs.sets().is_empty());
    for set in outputs.sets() {
        assert_eq!(set.state.shape()[0], 3);
        assert_eq!(set.status.shape().len(), 1);
        assert_eq!(set.bounds.shape(), [3, 2]);
    }
    let timer = mgr.register(Times::registration().on_invalidate(|| {}))?;
    let times = mgr.allocate_buffers::<Times>(&timer, &dims)?;
    assert_eq!(times.times.shape(), [100]);
    Ok(())
}
