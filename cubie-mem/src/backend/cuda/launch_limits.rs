//! What a launch may ask of the device and of its kernel, checked before
//! the launch so that one the driver would refuse is refused with the
//! numbers and the fix instead of a bare `CUDA_ERROR_INVALID_VALUE`:
//!
//! - the device's limits (blocks of a grid and threads of a block along
//!   each axis, threads per block, shared memory per block with and without
//!   opting in), read from the driver when a module loads;
//! - the kernel's: its threads per block (fewer than the device's when its
//!   registers do not allow more), its dynamic shared memory (48 KiB less its
//!   static shared memory, until raised with
//!   [`PtxFunction::set_max_dynamic_shared_bytes`](super::PtxFunction::set_max_dynamic_shared_bytes)),
//!   and the sizes of its parameters, which the driver tells from CUDA 12.4
//!   on (`cuFuncGetParamInfo`; older drivers leave the arguments unchecked).

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use super::context::DeviceContext;
use super::driver::{mem_error, with_detail};
use super::launch_dims::LaunchDims;
use super::sys::{self, CuDevice, CuDeviceAttribute, CuFunction, CuFunctionAttribute, CuResult};
use crate::MemError;

/// The most parameters a kernel can take (32,764 bytes of parameters, each
/// at least one byte).
const MAX_PARAMS: usize = 32_764;

/// `CUDA_ERROR_INVALID_VALUE`: `cuFuncGetParamInfo` past the last parameter.
const INVALID_VALUE: CuResult = CuResult(1);

/// The axes' names in messages and in the driver's attribute names.
const AXES: [(&str, &str); 3] = [("x", "X"), ("y", "Y"), ("z", "Z")];

/// A device's launch limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DeviceLimits {
    max_threads: u32,
    max_block: [u32; 3],
    max_grid: [u32; 3],
    /// Shared memory per block without opting in.
    shared: u32,
    /// Shared memory per block after opting in.
    shared_optin: u32,
}

impl DeviceLimits {
    /// CUDA's limits on every device since compute capability 3.0, for an
    /// attribute the driver does not answer.
    const DOCUMENTED: DeviceLimits = DeviceLimits {
        max_threads: 1024,
        max_block: [1024, 1024, 64],
        max_grid: [i32::MAX as u32, 65_535, 65_535],
        shared: 48 * 1024,
        shared_optin: 48 * 1024,
    };

    /// The limits of `device` as its driver reports them.
    pub(super) fn read(device: CuDevice) -> DeviceLimits {
        let documented = Self::DOCUMENTED;
        let get = |attribute: CuDeviceAttribute, documented: u32| {
            let mut value: c_int = 0;
            // SAFETY: the out-pointer is a live c_int; the device came from
            // the driver.
            let result = unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) };
            match u32::try_from(value) {
                Ok(value) if result == CuResult::SUCCESS && value > 0 => value,
                _ => documented,
            }
        };
        let shared = get(
            sys::DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            documented.shared,
        );
        DeviceLimits {
            max_threads: get(
                sys::DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                documented.max_threads,
            ),
            max_block: [
                get(
                    sys::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                    documented.max_block[0],
                ),
                get(
                    sys::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                    documented.max_block[1],
                ),
                get(
                    sys::DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
                    documented.max_block[2],
                ),
            ],
            max_grid: [
                get(sys::DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, documented.max_grid[0]),
                get(sys::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, documented.max_grid[1]),
                get(sys::DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, documented.max_grid[2]),
            ],
            shared,
            shared_optin: get(
                sys::DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                shared,
            )
            .max(shared),
        }
    }
}

/// One kernel's launch limits on its device.
#[derive(Debug)]
pub(super) struct KernelLimits {
    device: DeviceLimits,
    /// Threads per block (the device's, or fewer for the kernel's registers).
    max_threads: u32,
    /// Static shared memory per block.
    static_shared: u32,
    /// Dynamic shared memory a launch may ask for, as last read or set.
    max_dynamic_shared: AtomicU32,
    /// Each parameter's size in bytes, when the driver tells them.
    params: Option<Vec<usize>>,
}

impl KernelLimits {
    /// The limits of `function`, a kernel of `context` on a device of
    /// `device` limits, as the driver reports them.
    pub(super) fn read(
        context: &DeviceContext,
        function: CuFunction,
        device: DeviceLimits,
    ) -> KernelLimits {
        let Ok(_guard) = context.enter("read a kernel's attributes") else {
            return KernelLimits::documented(device);
        };
        let max_threads = function_attribute(function, sys::FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            .filter(|&threads| threads > 0)
            .map_or(device.max_threads, |threads| {
                threads.min(device.max_threads)
            });
        let static_shared =
            function_attribute(function, sys::FUNC_ATTRIBUTE_SHARED_SIZE_BYTES).unwrap_or(0);
        let max_dynamic_shared =
            function_attribute(function, sys::FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
                .unwrap_or_else(|| device.shared.saturating_sub(static_shared));
        KernelLimits {
            device,
            max_threads,
            static_shared,
            max_dynamic_shared: AtomicU32::new(max_dynamic_shared),
            params: param_sizes(function),
        }
    }

    /// The device's limits and CUDA's defaults for the kernel.
    fn documented(device: DeviceLimits) -> KernelLimits {
        KernelLimits {
            device,
            max_threads: device.max_threads,
            static_shared: 0,
            max_dynamic_shared: AtomicU32::new(device.shared),
            params: None,
        }
    }

    /// The most dynamic shared memory the device allows a block of the
    /// kernel: its opt-in limit less the kernel's static shared memory.
    fn dynamic_shared_limit(&self) -> u32 {
        self.device.shared_optin.saturating_sub(self.static_shared)
    }

    /// Lets launches of `function` ask for up to `bytes` of dynamic shared
    /// memory per block (`cuFuncSetAttribute`), or says why the device
    /// cannot.
    pub(super) fn set_max_dynamic_shared(
        &self,
        context: &DeviceContext,
        function: CuFunction,
        kernel: &str,
        bytes: u32,
    ) -> Result<(), MemError> {
        const OPERATION: &str = "set a kernel's dynamic shared memory";
        let limit = self.dynamic_shared_limit();
        let value = match c_int::try_from(bytes) {
            Ok(value) if bytes <= limit => value,
            _ => {
                return Err(refused(
                    kernel,
                    format!(
                        "{bytes} bytes of dynamic shared memory per block exceed the {limit} this \
                         device allows the kernel ({} bytes per block after opting in, less its {} \
                         bytes of static shared memory); ask for at most {limit}",
                        self.device.shared_optin, self.static_shared
                    ),
                ));
            }
        };
        let _guard = context.enter(OPERATION).map_err(mem_error)?;
        // SAFETY: the function is a kernel of this context, which is current;
        // the attribute takes an int.
        let result = unsafe {
            sys::cuFuncSetAttribute(
                function,
                sys::FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                value,
            )
        };
        context.check(result, OPERATION).map_err(|error| {
            mem_error(with_detail(
                error,
                format_args!("asking {bytes} bytes of dynamic shared memory for kernel '{kernel}'"),
            ))
        })?;
        self.max_dynamic_shared.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Checks a launch of `function` with `config` and arguments of
    /// `arg_sizes` bytes against the device's and the kernel's limits.
    pub(super) fn check(
        &self,
        context: &DeviceContext,
        function: CuFunction,
        kernel: &str,
        config: &LaunchDims,
        arg_sizes: &[usize],
    ) -> Result<(), MemError> {
        let grid = [config.grid.0, config.grid.1, config.grid.2];
        let block = [config.block.0, config.block.1, config.block.2];
        for (axis, (name, attribute)) in AXES.iter().enumerate() {
            let (blocks, max) = (grid[axis], self.device.max_grid[axis]);
            if blocks == 0 || blocks > max {
                let fix = if axis == 0 {
                    "launch fewer, larger blocks, or have each thread loop over several elements \
                     (a grid-stride loop)"
                        .to_owned()
                } else {
                    format!(
                        "put the largest extent on x (up to {} blocks)",
                        self.device.max_grid[0]
                    )
                };
                return Err(refused(
                    kernel,
                    format!(
                        "a grid of {blocks} blocks along {name} is outside 1..={max} \
                         (CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{attribute}); {fix}"
                    ),
                ));
            }
            let (threads, max) = (block[axis], self.device.max_block[axis]);
            if threads == 0 || threads > max {
                return Err(refused(
                    kernel,
                    format!(
                        "a block of {threads} threads along {name} is outside 1..={max} \
                         (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{attribute}); use smaller blocks \
                         and more of them"
                    ),
                ));
            }
        }
        let threads = block
            .iter()
            .fold(1u64, |threads, &n| threads.saturating_mul(u64::from(n)));
        if threads > u64::from(self.max_threads) {
            return Err(refused(
                kernel,
                format!(
                    "a block of {} x {} x {} = {threads} threads exceeds the {} threads per block \
                     this kernel may use on this device (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK; \
                     the device allows {}); use smaller blocks and more of them",
                    block[0], block[1], block[2], self.max_threads, self.device.max_threads
                ),
            ));
        }
        self.check_shared(context, function, kernel, config.shared_bytes)?;
        self.check_args(kernel, arg_sizes)
    }

    fn check_shared(
        &self,
        context: &DeviceContext,
        function: CuFunction,
        kernel: &str,
        bytes: u32,
    ) -> Result<(), MemError> {
        if bytes <= self.max_dynamic_shared.load(Ordering::Relaxed) {
            return Ok(());
        }
        // The attribute may have been raised through another handle of the
        // same kernel, or by code calling the driver itself.
        if let Ok(_guard) = context.enter("read a kernel's attributes")
            && let Some(current) =
                function_attribute(function, sys::FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        {
            self.max_dynamic_shared.store(current, Ordering::Relaxed);
            if bytes <= current {
                return Ok(());
            }
        }
        let allowed = self.max_dynamic_shared.load(Ordering::Relaxed);
        let limit = self.dynamic_shared_limit();
        let fix = if bytes <= limit {
            format!(
                "call set_max_dynamic_shared_bytes({bytes}) on the kernel before launching it \
                 (the device allows it up to {limit})"
            )
        } else {
            format!(
                "the device allows the kernel at most {limit} ({} bytes per block after opting \
                 in, less its {} bytes of static shared memory); use less shared memory per block",
                self.device.shared_optin, self.static_shared
            )
        };
        Err(refused(
            kernel,
            format!(
                "{bytes} bytes of dynamic shared memory per block exceed the {allowed} the kernel \
                 may use now (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); {fix}"
            ),
        ))
    }

    fn check_args(&self, kernel: &str, arg_sizes: &[usize]) -> Result<(), MemError> {
        let Some(params) = &self.params else {
            return Ok(());
        };
        if params.len() != arg_sizes.len() {
            return Err(refused(
                kernel,
                format!(
                    "the kernel takes {} parameters (of {params:?} bytes), the launch gives {} \
                     arguments (of {arg_sizes:?} bytes); pass one argument per parameter, in order",
                    params.len(),
                    arg_sizes.len()
                ),
            ));
        }
        match params
            .iter()
            .zip(arg_sizes)
            .position(|(param, arg)| param != arg)
        {
            Some(index) => Err(refused(
                kernel,
                format!(
                    "argument {index} is {} bytes, but the kernel's parameter {index} is {} bytes; \
                     pass a value of the parameter's type (a view passes an 8-byte device address)",
                    arg_sizes[index], params[index]
                ),
            )),
            None => Ok(()),
        }
    }
}

/// A launch refused before it reached the driver.
fn refused(kernel: &str, reason: String) -> MemError {
    MemError::Kernel {
        kernel: kernel.to_owned(),
        reason,
    }
}

/// A non-negative attribute of `function`, or `None` when the driver does
/// not answer. The function's context must be current.
fn function_attribute(function: CuFunction, attribute: CuFunctionAttribute) -> Option<u32> {
    let mut value: c_int = 0;
    // SAFETY: the out-pointer is a live c_int; the function is a kernel of
    // the current context.
    let result = unsafe { sys::cuFuncGetAttribute(&mut value, attribute, function) };
    (result == CuResult::SUCCESS)
        .then(|| u32::try_from(value).ok())
        .flatten()
}

/// Each parameter's size, from `cuFuncGetParamInfo` until it answers
/// `CUDA_ERROR_INVALID_VALUE` past the last; `None` when the driver lacks
/// the function or fails otherwise. The function's context must be current.
fn param_sizes(function: CuFunction) -> Option<Vec<usize>> {
    let mut sizes = Vec::new();
    for index in 0..MAX_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: both out-pointers are live usizes; the function is a
        // kernel of the current context.
        match unsafe { sys::cuFuncGetParamInfo(function, index, &mut offset, &mut size) }? {
            CuResult::SUCCESS => sizes.push(size),
            INVALID_VALUE => return Some(sizes),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(params: Option<Vec<usize>>) -> KernelLimits {
        KernelLimits {
            params,
            ..KernelLimits::documented(DeviceLimits::DOCUMENTED)
        }
    }

    #[test]
    fn arguments_are_checked_against_the_parameters_the_driver_tells() {
        let kernel = limits(Some(vec![8, 8, 8, 4]));
        assert!(kernel.check_args("k", &[8, 8, 8, 4]).is_ok());
        let error = kernel.check_args("k", &[8, 8, 8]).unwrap_err().to_string();
        assert!(
            error.contains("takes 4 parameters") && error.contains("gives 3 arguments"),
            "{error}"
        );
        let error = kernel
            .check_args("k", &[8, 8, 8, 8])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("argument 3 is 8 bytes") && error.contains("parameter 3 is 4 bytes"),
            "{error}"
        );
        assert!(
            limits(None).check_args("k", &[1, 2, 3]).is_ok(),
            "a driver that does not tell leaves the arguments unchecked"
        );
    }

    #[test]
    fn the_dynamic_shared_memory_a_kernel_may_ask_for_is_the_opt_in_less_its_static() {
        let device = DeviceLimits {
            shared_optin: 232_448,
            ..DeviceLimits::DOCUMENTED
        };
        let kernel = KernelLimits {
            static_shared: 1024,
            ..KernelLimits::documented(device)
        };
        assert_eq!(kernel.dynamic_shared_limit(), 231_424);
        assert_eq!(
            KernelLimits::documented(DeviceLimits::DOCUMENTED).dynamic_shared_limit(),
            48 * 1024
        );
    }
}
