//! The CUDA device, through the driver API, and your own kernels on the
//! manager's memory.
//!
//! [`CudaBackend`] loads the driver at run time (no toolkit to build, and a
//! program starts where there is no driver), retains a device's primary
//! context, allocates from a memory pool it owns, and caches page-locked
//! blocks. Load your kernels with [`PtxModule`] and launch them on a
//! stream group's [`GroupStream`] with a [`LaunchBuilder`]; streams of other
//! libraries bind with [`bind_raw_stream`]. The guide's
//! [CUDA backend design](crate::guide::cuda_design) says how it loads,
//! orders, waits, copies and reports errors.
//!
//! Without a device (or driver), [`CudaBackend::new`] fails with
//! [`MemError::NoDevice`](crate::MemError::NoDevice) naming the cause; the
//! [`Backend`](crate::backend::Backend) methods report
//! [`BackendError`](crate::backend::BackendError)s, the inherent methods
//! [`MemError`](crate::MemError)s.
//!
//! ```
//! use cubie_mem::cuda::CudaBackend;
//! use cubie_mem::{MemError, MemoryManager};
//!
//! match CudaBackend::new(0) {
//!     Ok(cuda) => {
//!         let mgr = MemoryManager::new(cuda);
//!         assert_eq!(mgr.memory_report().backend, "cuda");
//!     }
//!     Err(MemError::NoDevice { cause }) => println!("running without a GPU: {cause}"),
//!     Err(other) => return Err(other),
//! }
//! # Ok::<(), MemError>(())
//! ```

#[cfg(feature = "cudarc")]
mod cudarc_stream;
mod external;
mod interop;

pub use crate::backend::cuda::{
    CudaBackend, CudaConfig, DriverCalls, HostWait, LaunchDims, PtxFunction, PtxModule,
};
#[cfg(feature = "cudarc")]
pub use cudarc_stream::{CudarcStream, bind_cudarc_stream};
#[cfg(feature = "cust")]
pub use external::with_cust_stream;
pub use external::{BoundStream, bind_raw_stream};
pub use interop::{DeviceView, GroupStream, LaunchArg, LaunchBuilder};
