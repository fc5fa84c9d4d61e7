//! `#[derive(GpuBuffers)]` for `cubie-mem`: a solver declares its buffers
//! once, and gets its allocation requests and the typed struct back from the
//! manager.
//!
//! Use it through `cubie_mem::GpuBuffers` (feature `derive`, on by default);
//! the guide is `docs/derive.md` in the repository.
//!
//! The crate follows serde_derive's layout: `attr` parses the attributes
//! (each attribute's keys an enum, matched exhaustively), `ast` models the
//! struct, `check` checks it field by field and across fields into a
//! complete `check::Checked` model, and `expand` generates the impl from it,
//! inside a `const _: () = { .. };` block that reaches cubie-mem through one
//! `use` and calls the helpers of its hidden `__private` module. Every
//! mistake is recorded in a `ctxt::Ctxt` with its span and all of them are
//! reported together, beside a fallback impl so that rustc adds no
//! secondary errors, neither in the impl nor in the code using the struct.

mod ast;
mod attr;
mod check;
mod ctxt;
mod expand;
mod names;
mod suggest;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Derives `cubie_mem::GpuBuffers` for a struct of `DeviceArray<T>` and
/// `PinnedArray<T>` fields.
///
/// ```
/// use cubie_mem::{DeviceArray, GpuBuffers, MemoryManager, PinnedArray, Precision, SimBackend};
///
/// pub struct RunDims { pub n_states: usize, pub n_saves: usize, pub n_runs: usize }
///
/// #[derive(GpuBuffers)]
/// #[stream_group("integrators")]
/// #[buffers(dims = RunDims)]
/// pub struct Outputs<P: Precision> {
///     #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
///     state: DeviceArray<P>,
///     #[buffer(shape = [n_runs], memory = pinned)]
///     status: PinnedArray<i32>,
///     #[buffer(shape = [n_states], unchunkable)]
///     initial: DeviceArray<P>,
/// }
///
/// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
/// let solver = mgr.register(Outputs::<f32>::registration().on_invalidate(|| {}))?;
/// let dims = RunDims { n_states: 3, n_saves: 10, n_runs: 100 };
/// let outputs = mgr.allocate_buffers::<Outputs<f32>>(&solver, &dims)?;
/// assert_eq!(outputs.state.shape(), [10, 3, 100]);
/// # Ok::<(), cubie_mem::MemError>(())
/// ```
///
/// Container attributes: `#[stream_group("name")]` (default `"default"`),
/// `#[buffers(dims = Type)]` (required), `#[buffers(crate = path)]`
/// (default `::cubie_mem`), `#[buffers(pipeline_depth = 2)]` (the depth
/// of every request, an integer of at least 1; default 1) and
/// `#[buffers(host = Name)]` (a host mirror: a `HostArray<T>` per field
/// marked `input`, `output` or `inout`, made by `Name::new` and bound by
/// `ChunkPipeline::bind`). Field attribute: `#[buffer(shape = [..],
/// chunk_axis = <index or dim> | unchunkable, precision = T, memory = device |
/// pinned, label = "..", input | output | inout, host_memory = pinned |
/// pageable | spilled)]`, or `#[buffer(part)]` on a field holding a buffer
/// struct of its own, allocated with the struct's (its parts must share its
/// dims, stream group and run axis, and their labels must differ: asserted at
/// compile time). The `cubie_mem` documentation of `GpuBuffers`
/// and `docs/derive.md` describe each key and each compile error.
///
/// The generated `registration()` presets the struct's name and its stream
/// group, and no invalidate hook: a holder adds `.on_invalidate(..)`, as
/// above, because the manager may evict its buffers.
#[proc_macro_derive(GpuBuffers, attributes(buffers, buffer, stream_group))]
pub fn derive_gpu_buffers(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}
