//! The expansion keeps to itself: it reaches cubie-mem through `::cubie_mem`
//! even beside a local module of that name, declares no helper the user's
//! names could clash with, and two derives in one module do not collide.

#![deny(unused_qualifications, unused_imports)]

use ::cubie_mem::{DeviceArray, GpuBuffers, PinnedArray, Precision, Registration};

/// A local module named like the crate: the derive's `::cubie_mem` path
/// skips it.
#[allow(dead_code)]
mod cubie_mem {}

/// Names the expansion once declared in every `requests()`.
#[allow(dead_code)]
trait DimLength {}
#[allow(dead_code)]
trait ElementIs {}
#[allow(dead_code)]
fn assert_precision() {}
#[allow(dead_code)]
fn host_array() {}
#[allow(dead_code)]
trait HostBinder {}
#[allow(dead_code, non_upper_case_globals)]
const _cubie_mem: () = ();

pub struct Dims {
    pub n_runs: usize,
}

type Real = f64;

#[derive(GpuBuffers)]
#[buffers(dims = Dims, host = FirstHost)]
pub struct First<P: Precision> {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = P, output)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], precision = f64)]
    times: PinnedArray<Real>,
}

#[derive(GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = Dims)]
pub struct Second {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f32>,
}

fn main() {
    let dims = Dims { n_runs: 8 };
    assert_eq!(First::<f32>::requests(&dims).len(), 2);
    assert_eq!(Second::requests(&dims).len(), 1);
    assert_eq!(<First<f64> as GpuBuffers>::STREAM_GROUP, Registration::DEFAULT_STREAM_GROUP);
    assert_eq!(Second::STREAM_GROUP, "integrators");
}
