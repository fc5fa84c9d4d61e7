//! Kernels from PTX: modules loaded into the backend's context (compiled by
//! the driver's JIT for the device), and the kernels they hold.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};

use super::context::DeviceContext;
use super::driver::{describe, mem_error, with_detail};
use super::launch_dims::LaunchDims;
use super::launch_limits::{DeviceLimits, KernelLimits};
use super::sys::{self, CuFunction, CuModule, CuResult};
use super::{CudaBackend, CudaStream, ptx};
use crate::MemError;
use crate::backend::BackendError;
use crate::timeline::Activity;

/// A module loaded into a CUDA backend's context from PTX; unloaded (with
/// that context current) when dropped.
pub struct PtxModule {
    raw: CuModule,
    context: Arc<DeviceContext>,
    /// The device's launch limits, read when the module loaded.
    device: DeviceLimits,
    /// Kernels found so far by name, with their launch limits: a launch
    /// per chunk looks its kernel up without a driver call.
    functions: Mutex<HashMap<String, Found>>,
}

/// A kernel found in a module: its handle and its launch limits.
type Found = (CuFunction, Arc<KernelLimits>);

// SAFETY: a CUmodule is an opaque handle usable from any thread with its
// context current, which every use here arranges through `enter`.
unsafe impl Send for PtxModule {}
// SAFETY: as for Send; the handle is never changed after loading.
unsafe impl Sync for PtxModule {}

impl PtxModule {
    /// Loads `ptx`, which the driver compiles for the device. A load that
    /// fails for want of device memory (the module's code and data are the
    /// driver's own allocation, outside the pool) is retried once after the
    /// pool's idle memory went back to the driver. A compile error carries
    /// the compiler's log and what to do (PTX newer than the driver, PTX for
    /// a newer device); PTX holding a NUL byte is refused before the driver
    /// sees it.
    pub fn from_ptx(backend: &CudaBackend, ptx: &str) -> Result<Self, MemError> {
        let image = CString::new(ptx).map_err(|error| MemError::Kernel {
            kernel: "PTX module".into(),
            reason: format!(
                "the PTX holds a NUL byte at offset {}; PTX is text and ends at the first NUL",
                error.nul_position()
            ),
        })?;
        let context = Arc::clone(backend.context());
        let raw = ptx::load(&context, &image, ptx)?;
        Ok(PtxModule {
            raw,
            device: DeviceLimits::read(context.device()),
            context,
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// The kernel `name` of the module (found by the driver once, then
    /// remembered).
    pub fn function(&self, name: &str) -> Result<PtxFunction<'_>, MemError> {
        const OPERATION: &str = "find kernel";
        let found = self.functions().get(name).cloned();
        let (raw, limits) = match found {
            Some(found) => found,
            None => {
                let raw = self.find_function(name, OPERATION)?;
                let limits = Arc::new(KernelLimits::read(&self.context, raw, self.device));
                self.functions()
                    .insert(name.to_owned(), (raw, Arc::clone(&limits)));
                (raw, limits)
            }
        };
        Ok(PtxFunction {
            raw,
            name: name.to_owned(),
            context: Arc::clone(&self.context),
            limits,
            _module: PhantomData,
        })
    }

    fn functions(&self) -> MutexGuard<'_, HashMap<String, Found>> {
        // The map is consistent after every statement.
        self.functions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `cuModuleGetFunction` of `name`.
    fn find_function(&self, name: &str, operation: &'static str) -> Result<CuFunction, MemError> {
        let c_name = CString::new(name).map_err(|_| MemError::Kernel {
            kernel: name.to_owned(),
            reason: "a kernel name cannot hold a NUL byte".into(),
        })?;
        let _guard = self.context.enter(operation).map_err(mem_error)?;
        let mut raw: CuFunction = ptr::null_mut();
        // SAFETY: the out-pointer is a live slot, the module is loaded and
        // the name NUL-terminated; the context is current.
        let result = unsafe { sys::cuModuleGetFunction(&mut raw, self.raw, c_name.as_ptr()) };
        self.context.check(result, operation).map_err(|error| {
            mem_error(with_detail(
                error,
                format_args!("no kernel '{name}' in the module"),
            ))
        })?;
        Ok(raw)
    }
}

impl Drop for PtxModule {
    /// Waits for the device first: launches of the module's kernels may
    /// still be queued on any stream. When the device cannot be waited for,
    /// the module is left loaded rather than unloaded under a kernel.
    fn drop(&mut self) {
        if let Err(error) = self.context.synchronize() {
            tracing::warn!(%error, "the device could not be synchronised; a CUDA module is left loaded");
            return;
        }
        let _guard = self.context.enter("unload module");
        // SAFETY: the module was loaded by this struct and is unloaded once;
        // its functions borrow it, so none is left.
        let result = unsafe { sys::cuModuleUnload(self.raw) };
        if result != CuResult::SUCCESS {
            tracing::debug!(error = %describe(result), "unloading a CUDA module failed");
        }
    }
}

impl fmt::Debug for PtxModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtxModule").finish_non_exhaustive()
    }
}

/// A kernel of a loaded [`PtxModule`], valid while the module is; launch it
/// with [`GroupStream::launch_builder`](crate::cuda::GroupStream::launch_builder).
pub struct PtxFunction<'m> {
    raw: CuFunction,
    name: String,
    context: Arc<DeviceContext>,
    limits: Arc<KernelLimits>,
    _module: PhantomData<&'m PtxModule>,
}

// SAFETY: a CUfunction is an opaque handle usable from any thread with its
// context current, as every launch arranges.
unsafe impl Send for PtxFunction<'_> {}
// SAFETY: as for Send; the handle is never changed.
unsafe impl Sync for PtxFunction<'_> {}

impl PtxFunction<'_> {
    /// The kernel's name in its module.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queues the kernel on `stream` with `config`, the parameter values
    /// at `params` (of `arg_sizes` bytes each) and a timeline span of
    /// `bytes` (the views it touches). Refused, with nothing queued, for a
    /// stream of another backend than the kernel's, and, saying what allows
    /// it, past the device's or the kernel's limits.
    ///
    /// # Safety
    ///
    /// `params` point to live values that match the kernel's parameters in
    /// number, order and type, and the kernel stays within the memory they
    /// address.
    pub(crate) unsafe fn launch_on(
        &self,
        stream: &CudaStream,
        config: LaunchDims,
        params: &mut [*mut c_void],
        arg_sizes: &[usize],
        bytes: u64,
    ) -> Result<(), MemError> {
        const OPERATION: &str = "launch kernel";
        let context = stream.context();
        if !Arc::ptr_eq(&self.context, context) {
            return Err(mem_error(BackendError::Unsupported {
                operation: OPERATION,
                reason: format!(
                    "kernel '{}' was loaded on another CUDA backend than this stream's",
                    self.name
                ),
            }));
        }
        self.limits
            .check(context, self.raw, &self.name, &config, arg_sizes)?;
        let _guard = context.enter(OPERATION).map_err(mem_error)?;
        let recorder = stream.backend().recorder();
        let started = recorder.start(stream);
        let (grid, block) = (config.grid, config.block);
        // SAFETY: the function and stream are live handles of this context,
        // which is current; the caller guarantees the parameters. The driver
        // copies the parameter values before returning; a launch that failed
        // queued nothing and may be tried again.
        let mut launch_once = || unsafe {
            sys::cuLaunchKernel(
                self.raw,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                config.shared_bytes,
                stream.raw_stream(),
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        let mut result = launch_once();
        // The kernel's local memory is reserved by the driver at its first
        // launch: the pool may hold idle what it needs.
        if result == CuResult::OUT_OF_MEMORY {
            context.reclaim_idle_memory(OPERATION);
            result = launch_once();
        }
        let launched = context.check(result, OPERATION);
        recorder.finish(started, stream, Activity::Kernel, &*self.name, bytes);
        launched.map_err(mem_error)
    }

    /// Lets launches of the kernel use up to `bytes` of dynamic shared
    /// memory per block (`cuFuncSetAttribute` of
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`). Without it a
    /// launch may use 48 KiB less the kernel's static shared memory; a
    /// launch asking for more is refused before it reaches the driver,
    /// saying to call this. Refused, with the figures, above what the
    /// device allows a block after opting in
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, e.g.
    /// 227 KiB on compute capability 9.0) less the kernel's static shared
    /// memory. The setting belongs to the kernel, for every launch of it.
    pub fn set_max_dynamic_shared_bytes(&self, bytes: u32) -> Result<(), MemError> {
        self.limits
            .set_max_dynamic_shared(&self.context, self.raw, &self.name, bytes)
    }
}

impl fmt::Debug for PtxFunction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtxFunction")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
