//! `#[buffers(crate = path)]` reaches cubie-mem through a re-export, written
//! as a path or as a string.

mod solver_kit {
    pub use cubie_mem;
}

use solver_kit::cubie_mem::{DeviceArray, GpuBuffers};

pub mod dims {
    pub struct RunDims {
        pub n_runs: usize,
    }
}

#[derive(GpuBuffers)]
#[buffers(dims = dims::RunDims, crate = crate::solver_kit::cubie_mem)]
pub struct ByPath {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(crate = "crate::solver_kit::cubie_mem")]
#[buffers(dims = dims::RunDims)]
pub struct ByString {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

fn main() {
    let dims = dims::RunDims { n_runs: 8 };
    assert_eq!(ByPath::requests(&dims).get("state").unwrap().runs(), 8);
    assert_eq!(ByString::requests(&dims).get("state").unwrap().runs(), 8);
}
