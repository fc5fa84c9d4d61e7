//! The trybuild suite of `#[derive(GpuBuffers)]`: every feature of the
//! grammar compiles (and runs) in `ui/pass`, every mistake fails with the
//! error checked in beside it in `ui/fail`.

#[test]
fn derive_gpu_buffers_ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
