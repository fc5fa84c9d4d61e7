//! The generated code trips no lint a crate may deny, on structs using every
//! part of the grammar: rustc's warnings and its allow-by-default lints that
//! apply to code like it, which the suite checks, and clippy's groups and
//! the restriction lints generated code could trip, which hold when clippy
//! compiles the case (rustc accepts and skips them).

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
    clippy::question_mark_used,
    clippy::std_instead_of_core
)]

use cubie_mem::{
    DeviceArray, Element, GpuBuffers, MemoryManager, PinnedArray, Precision, SimBackend,
};

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
#[buffers(dims = RunDims, pipeline_depth = 2, host = OutputsHost)]
struct Outputs<P: Precision> {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, precision = P, inout)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], memory = pinned, label = "run_status", output, host_memory = pageable)]
    status: PinnedArray<i32>,
    #[buffer(shape = [n_states, 2], unchunkable, precision = f64)]
    bounds: DeviceArray<Real>,
}

/// A bounded element parameter, and concrete element types only.
#[derive(GpuBuffers)]
#[buffers(dims = RunDims, host = FlagsHost)]
struct Flags<I: Element> {
    #[buffer(shape = [n_runs], chunk_axis = 0, input)]
    flags: DeviceArray<I>,
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    times: DeviceArray<f64>,
}

fn main() {
    let mgr = MemoryManager::new(SimBackend::new(1 << 30));
    let dims = RunDims {
        n_states: 3,
        n_runs: 100,
    };
    let solver = mgr
        .register(Outputs::<f32>::registration().on_invalidate(|| {}))
        .expect("registers");
    let outputs = mgr
        .allocate_buffers::<Outputs<f32>>(&solver, &dims)
        .expect("allocates");
    assert!(!outputs.sets().is_empty(), "one buffer set at least");
    for set in outputs.sets() {
        assert_eq!(set.state.shape().first(), Some(&3), "n_states first");
        assert_eq!(set.status.shape().len(), 1, "one axis");
        assert_eq!(set.bounds.shape(), [3, 2], "unchunked");
    }
    let mut host = OutputsHost::<f32>::new(&mgr, &dims, None, &solver).expect("makes the mirror");
    assert_eq!(host.state.shape(), [3, 100], "the whole batch");
    mgr.chunk_streamer(&solver, outputs.plan())
        .expect("streams")
        .pipeline_sets(outputs.sets())
        .bind(&mut host, |set| set)
        .run(|_, _| Ok(()))
        .expect("runs");
    let flagger = mgr
        .register(Flags::<u8>::registration().on_invalidate(|| {}))
        .expect("registers");
    let flags = mgr
        .allocate_buffers::<Flags<u8>>(&flagger, &dims)
        .expect("allocates");
    assert_eq!(flags.flags.shape(), [100], "one chunk");
    assert_eq!(flags.times.shape(), [100], "one chunk");
    let mut flags_host = FlagsHost::<u8>::new(&mgr, &dims, None, &flagger).expect("makes the mirror");
    mgr.chunk_streamer(&flagger, flags.plan())
        .expect("streams")
        .pipeline()
        .bind(&mut flags_host, |()| &*flags)
        .run(|_, ()| Ok(()))
        .expect("runs");
}
