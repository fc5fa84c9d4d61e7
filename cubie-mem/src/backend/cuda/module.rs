//! Kernels from PTX: modules loaded into the backend's context (compiled by
//! the driver's JIT for the device), and the kernels they hold.

use std::collections::HashMap;
use std::ffi::{CString, c_uint, c_void};
use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};

use super::CudaBackend;
use super::context::DeviceContext;
use super::driver::{describe, mem_error, with_detail};
use super::sys::{self, CuFunction, CuJitOption, CuModule, CuResult};
use crate::MemError;

/// Bytes of the PTX compiler's error log kept for an error message.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// A module loaded into a CUDA backend's context from PTX; unloaded (with
/// that context current) when dropped.
pub struct CudaModule {
    raw: CuModule,
    context: Arc<DeviceContext>,
    /// Kernels found so far by name: a launch per chunk looks its kernel
    /// up without a driver call.
    functions: Mutex<HashMap<String, CuFunction>>,
}

// SAFETY: a CUmodule is an opaque handle usable from any thread with its
// context current, which every use here arranges through `enter`.
unsafe impl Send for CudaModule {}
// SAFETY: as for Send; the handle is never changed after loading.
unsafe impl Sync for CudaModule {}

impl CudaModule {
    /// Loads `ptx`, which the driver compiles for the device. A compile
    /// error carries the compiler's log; PTX holding a NUL byte is refused
    /// before the driver sees it.
    pub fn from_ptx(backend: &CudaBackend, ptx: &str) -> Result<Self, MemError> {
        const OPERATION: &str = "load PTX module";
        let image = CString::new(ptx).map_err(|error| MemError::Kernel {
            kernel: "PTX module".into(),
            reason: format!(
                "the PTX holds a NUL byte at offset {}; PTX is text and ends at the first NUL",
                error.nul_position()
            ),
        })?;
        let context = Arc::clone(backend.context());
        let _guard = context.enter(OPERATION).map_err(mem_error)?;
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options: [CuJitOption; 2] = [
            sys::JIT_ERROR_LOG_BUFFER,
            sys::JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values: [*mut c_void; 2] = [
            log.as_mut_ptr().cast::<c_void>(),
            // The size option is an unsigned int passed in the pointer's bits.
            JIT_LOG_BYTES as *mut c_void,
        ];
        let mut raw: CuModule = ptr::null_mut();
        // SAFETY: the image is NUL-terminated text; the option arrays hold
        // two entries each, the log buffer is live and as long as its
        // stated size; the context is current.
        let result = unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                image.as_ptr().cast::<c_void>(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        context.check(result, OPERATION).map_err(|error| {
            let log = String::from_utf8_lossy(log.split(|&b| b == 0).next().unwrap_or(&[]))
                .trim()
                .to_owned();
            mem_error(if log.is_empty() {
                error
            } else {
                with_detail(error, format_args!("the PTX compiler said: {log}"))
            })
        })?;
        Ok(CudaModule {
            raw,
            context,
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// The kernel `name` of the module (found by the driver once, then
    /// remembered).
    pub fn function(&self, name: &str) -> Result<CudaFunction<'_>, MemError> {
        const OPERATION: &str = "find kernel";
        let found = self.functions().get(name).copied();
        let raw = match found {
            Some(raw) => raw,
            None => {
                let raw = self.find_function(name, OPERATION)?;
                self.functions().insert(name.to_owned(), raw);
                raw
            }
        };
        Ok(CudaFunction {
            raw,
            name: name.to_owned(),
            context: Arc::clone(&self.context),
            _module: PhantomData,
        })
    }

    fn functions(&self) -> MutexGuard<'_, HashMap<String, CuFunction>> {
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

impl Drop for CudaModule {
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

impl fmt::Debug for CudaModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaModule").finish_non_exhaustive()
    }
}

/// A kernel of a loaded [`CudaModule`], valid while the module is; launch it
/// with [`CudaStream::launch_builder`](super::CudaStream::launch_builder).
pub struct CudaFunction<'m> {
    raw: CuFunction,
    name: String,
    context: Arc<DeviceContext>,
    _module: PhantomData<&'m CudaModule>,
}

// SAFETY: a CUfunction is an opaque handle usable from any thread with its
// context current, as every launch arranges.
unsafe impl Send for CudaFunction<'_> {}
// SAFETY: as for Send; the handle is never changed.
unsafe impl Sync for CudaFunction<'_> {}

impl CudaFunction<'_> {
    /// The kernel's name in its module.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn raw(&self) -> CuFunction {
        self.raw
    }

    pub(super) fn context(&self) -> &Arc<DeviceContext> {
        &self.context
    }
}

impl fmt::Debug for CudaFunction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaFunction")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
