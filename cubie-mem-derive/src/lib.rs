//! `#[derive(GpuBuffers)]` for `cubie-mem`.

use proc_macro::TokenStream;

/// Derives `cubie_mem::GpuBuffers`.
#[proc_macro_derive(GpuBuffers, attributes(buffers, buffer, stream_group))]
pub fn derive_gpu_buffers(input: TokenStream) -> TokenStream {
    let _ = input;
    "compile_error!(\"GpuBuffers derive: work in progress\");"
        .parse()
        .unwrap_or_default()
}
