//! Kernels on the manager's streams: modules loaded from PTX with cust, and
//! one small hand-written kernel that the GPU example and tests launch on
//! buffers the manager allocated.

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use cust::function::{BlockSize, Function, GridSize};
use cust::module::Module;
use cust::sys as cu;

use super::CudaBackend;
use super::driver::{DeviceContext, DriverCode, check, failure, mem_error};
use crate::MemError;
use crate::array::DeviceArray;
use crate::backend::{BackendError, StreamHandle};

/// PTX of `euler_decay(y, k, dt, n)`: one explicit Euler step of the decay
/// equation `y' = -k y`, `y[i] = y[i] + dt * (-(k[i] * y[i]))` for `i < n`,
/// rounded like the same expression on the host (no fused multiply-add).
///
/// Written by hand so that building needs no CUDA toolkit; the driver
/// compiles it for the device when the module loads.
pub const EULER_DECAY_PTX: &str = include_str!("euler_decay.ptx");

/// Threads per block for the kernels launched here.
const BLOCK_THREADS: u32 = 256;

/// A module loaded into the backend's context; unloaded with that context
/// current when dropped.
pub struct CudaModule {
    module: ManuallyDrop<Module>,
    context: Arc<DeviceContext>,
}

impl CudaModule {
    /// Loads `ptx` (JIT-compiled by the driver for the device).
    pub fn from_ptx(backend: &CudaBackend, ptx: &str) -> Result<Self, MemError> {
        let context = Arc::clone(backend.context());
        let _guard = context.enter().map_err(mem_error)?;
        let module =
            Module::from_ptx(ptx, &[]).map_err(|e| mem_error(failure("load PTX module", e)))?;
        Ok(CudaModule {
            module: ManuallyDrop::new(module),
            context,
        })
    }

    /// The kernel `name` of the module.
    pub fn function(&self, name: &str) -> Result<Function<'_>, MemError> {
        self.module.get_function(name).map_err(|e| {
            mem_error(BackendError::Driver {
                operation: "find kernel",
                code: e.code(),
                message: format!("{} (no kernel '{name}' in the module)", e.name()),
            })
        })
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        let _guard = self.context.enter();
        // SAFETY: the module is taken once, here, and never used afterwards.
        drop(unsafe { ManuallyDrop::take(&mut self.module) });
    }
}

impl std::fmt::Debug for CudaModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaModule").finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// Launches `function` on one of this backend's streams (a stream
    /// group's stream, from [`MemoryManager::stream`](crate::MemoryManager::stream)),
    /// so that it is ordered with the allocations and copies made on it.
    ///
    /// # Safety
    ///
    /// `args` must hold one pointer per kernel parameter, in order, each to a
    /// value of exactly the parameter's type; every device address the kernel
    /// uses must stay allocated until the kernel completed (free it on the
    /// same stream, or synchronise first); the kernel must not access memory
    /// out of bounds.
    pub unsafe fn launch(
        &self,
        stream: StreamHandle,
        function: &Function<'_>,
        grid: impl Into<GridSize>,
        block: impl Into<BlockSize>,
        shared_bytes: u32,
        args: &[*mut c_void],
    ) -> Result<(), MemError> {
        let stream = self.stream(stream, "launch kernel").map_err(mem_error)?;
        let (grid, block) = (grid.into(), block.into());
        let _guard = self.context().enter().map_err(mem_error)?;
        // SAFETY: the function and stream are live handles of this context,
        // which is current; the caller guarantees that `args` matches the
        // kernel's parameters and that the memory it uses stays valid. The
        // driver copies the argument values before returning.
        check(
            unsafe {
                cu::cuLaunchKernel(
                    function.to_raw(),
                    grid.x,
                    grid.y,
                    grid.z,
                    block.x,
                    block.y,
                    block.z,
                    shared_bytes,
                    stream.raw(),
                    args.as_ptr().cast_mut(),
                    std::ptr::null_mut(),
                )
            },
            "launch kernel",
        )
        .map_err(mem_error)
    }
}

/// The [`EULER_DECAY_PTX`] kernel, loaded and ready to launch.
#[derive(Debug)]
pub struct EulerDecay {
    module: CudaModule,
    backend: CudaBackend,
}

impl EulerDecay {
    /// Loads the kernel into the backend's context.
    pub fn load(backend: &CudaBackend) -> Result<Self, MemError> {
        let module = CudaModule::from_ptx(backend, EULER_DECAY_PTX)?;
        module.function("euler_decay")?;
        Ok(EulerDecay {
            module,
            backend: backend.clone(),
        })
    }

    /// Queues one step `y += dt * (-k * y)` over every element on `stream`.
    ///
    /// The arrays are checked to be live and of equal length; the kernel runs
    /// asynchronously, after the work queued on `stream` before it.
    ///
    /// # Safety
    ///
    /// `y` and `k` must stay allocated until the kernel completed: launch on
    /// the stream their memory is freed on (their instance's group stream,
    /// inside a [`Work`](crate::Work) so that the owner cannot be evicted),
    /// or synchronise before they can be freed.
    pub unsafe fn step(
        &self,
        stream: StreamHandle,
        y: &DeviceArray<f64>,
        k: &DeviceArray<f64>,
        dt: f64,
    ) -> Result<(), MemError> {
        if k.len() != y.len() {
            return Err(MemError::LengthMismatch {
                label: k.label().to_owned(),
                expected: y.len(),
                found: k.len(),
            });
        }
        let mut n = u32::try_from(y.len()).map_err(|_| {
            mem_error(BackendError::Unsupported {
                operation: "launch kernel",
                reason: format!("{} elements exceed the kernel's 32-bit index", y.len()),
            })
        })?;
        if n == 0 {
            return Ok(());
        }
        let function = self.module.function("euler_decay")?;
        let grid = n.div_ceil(BLOCK_THREADS);
        let mut dt = dt;
        y.with_device_ptr(|y_ptr| {
            k.with_device_ptr(|k_ptr| {
                let (mut y_address, mut k_address) = (y_ptr.0, k_ptr.0);
                let args = [
                    (&mut y_address as *mut u64).cast::<c_void>(),
                    (&mut k_address as *mut u64).cast::<c_void>(),
                    (&mut dt as *mut f64).cast::<c_void>(),
                    (&mut n as *mut u32).cast::<c_void>(),
                ];
                // SAFETY: the arguments are (u64, u64, f64, u32), the types of
                // the kernel's parameters (.u64, .u64, .f64, .u32); both arrays
                // hold `n` f64 elements and the kernel touches only indices
                // below `n`; the caller keeps the memory allocated until the
                // kernel completed.
                unsafe {
                    self.backend
                        .launch(stream, &function, grid, BLOCK_THREADS, 0, &args)
                }
            })
        })??
    }
}
