//! The CUDA driver API as the backend uses it: the types, constants and
//! structs of `cuda.h` it needs, and every driver function it calls, loaded
//! from the driver library at run time (see [`load`]).
//!
//! Nothing here links against CUDA: a program built with the feature starts
//! on any machine, and [`load`] says what is missing where the driver is.
//! Results are plain integers ([`CuResult`]), so a code newer than this
//! build is reported by number instead of being undefined behaviour.
//! Handles are opaque pointers or integers, as in `cuda.h`.
//!
//! Each Rust type alias is named after its C type (`CuStream` is
//! `CUstream`), and every function, constant and struct here is compared
//! with the real `cuda.h` of several CUDA versions by `header_check`
//! (`ci/cuda-headers/check.sh` runs it in CI).

use std::ffi::{c_char, c_int, c_uint, c_void};

#[cfg(test)]
mod header_check;
mod load;
mod optional;
mod result;

pub(super) use load::load;
pub(super) use optional::cuFuncGetParamInfo;
pub(super) use result::CuResult;

/// A device ordinal's handle (`CUdevice`).
pub(super) type CuDevice = c_int;
/// A device address (`CUdeviceptr`).
pub(super) type CuDevicePtr = u64;
/// A context (`CUcontext`).
pub(super) type CuContext = *mut c_void;
/// A stream (`CUstream`).
pub(super) type CuStream = *mut c_void;
/// An event (`CUevent`).
pub(super) type CuEvent = *mut c_void;
/// A loaded module (`CUmodule`).
pub(super) type CuModule = *mut c_void;
/// A kernel of a module (`CUfunction`).
pub(super) type CuFunction = *mut c_void;
/// A memory pool (`CUmemoryPool`).
pub(super) type CuMemoryPool = *mut c_void;
/// A device attribute (`CUdevice_attribute`, a C enum).
pub(super) type CuDeviceAttribute = c_uint;
/// A memory pool attribute (`CUmemPool_attribute`, a C enum).
pub(super) type CuMemPoolAttribute = c_uint;
/// A PTX compiler option (`CUjit_option`, a C enum).
pub(super) type CuJitOption = c_uint;
/// A kernel's attribute (`CUfunction_attribute`, a C enum).
pub(super) type CuFunctionAttribute = c_uint;
/// Where a side of a 2D copy lies (`CUmemorytype`, a C enum).
pub(super) type CuMemoryType = c_uint;
/// A CUDA array (`CUarray`); 2D copies here never use one.
pub(super) type CuArray = *mut c_void;

/// Declares constants of `cuda.h` under Rust names, and lists them with
/// their C names for the header check.
macro_rules! c_constants {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $value:literal => $c_name:literal;)*) => {
        $($(#[$doc])* pub(super) const $name: $ty = $value;)*

        /// Every constant with its C name and value, for the header check.
        #[cfg(test)]
        pub(super) const CONSTANTS: &[(&str, i64)] = &[$(($c_name, $value as i64)),*];
    };
}

c_constants! {
    /// Whether the device supports stream-ordered allocation (memory pools).
    DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: CuDeviceAttribute = 115
        => "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED";
    /// A stream with no implicit synchronisation with the null stream.
    STREAM_NON_BLOCKING: c_uint = 1 => "CU_STREAM_NON_BLOCKING";
    /// An event that records no time (cheaper; for ordering and completion).
    EVENT_DISABLE_TIMING: c_uint = 2 => "CU_EVENT_DISABLE_TIMING";
    /// An event that records time.
    EVENT_DEFAULT: c_uint = 0 => "CU_EVENT_DEFAULT";
    /// An event whose `cuEventSynchronize` blocks the waiting thread
    /// instead of busy-waiting.
    EVENT_BLOCKING_SYNC: c_uint = 1 => "CU_EVENT_BLOCKING_SYNC";
    /// A context whose waits spin on the host.
    CTX_SCHED_SPIN: c_uint = 1 => "CU_CTX_SCHED_SPIN";
    /// A context whose waits yield the host thread between polls.
    CTX_SCHED_YIELD: c_uint = 2 => "CU_CTX_SCHED_YIELD";
    /// A context whose waits block the host thread on an OS primitive.
    CTX_SCHED_BLOCKING_SYNC: c_uint = 4 => "CU_CTX_SCHED_BLOCKING_SYNC";
    /// The scheduling bits of a context's flags.
    CTX_SCHED_MASK: c_uint = 7 => "CU_CTX_SCHED_MASK";
    /// Idle bytes a pool keeps at a synchronisation (a `cuuint64_t`).
    MEMPOOL_ATTR_RELEASE_THRESHOLD: CuMemPoolAttribute = 4 => "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD";
    /// Bytes a pool holds from the driver (a `cuuint64_t`).
    MEMPOOL_ATTR_RESERVED_MEM_CURRENT: CuMemPoolAttribute = 5
        => "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT";
    /// Bytes of a pool handed out to live allocations (a `cuuint64_t`).
    MEMPOOL_ATTR_USED_MEM_CURRENT: CuMemPoolAttribute = 7 => "CU_MEMPOOL_ATTR_USED_MEM_CURRENT";
    /// Device memory that is not migrated.
    MEM_ALLOCATION_TYPE_PINNED: c_int = 1 => "CU_MEM_ALLOCATION_TYPE_PINNED";
    /// No export of a pool's memory.
    MEM_HANDLE_TYPE_NONE: c_int = 0 => "CU_MEM_HANDLE_TYPE_NONE";
    /// A memory location on a device.
    MEM_LOCATION_TYPE_DEVICE: c_int = 1 => "CU_MEM_LOCATION_TYPE_DEVICE";
    /// Page-locked host memory that every context may copy from and into.
    MEMHOSTALLOC_PORTABLE: c_uint = 1 => "CU_MEMHOSTALLOC_PORTABLE";
    /// Where the PTX compiler writes its errors.
    JIT_ERROR_LOG_BUFFER: CuJitOption = 5 => "CU_JIT_ERROR_LOG_BUFFER";
    /// That buffer's size in bytes (in, then the bytes written).
    JIT_ERROR_LOG_BUFFER_SIZE_BYTES: CuJitOption = 6 => "CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES";
    /// Whether an allocation may reuse memory freed on another stream by
    /// making its stream wait for the free (an `int`; on by default).
    MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: CuMemPoolAttribute = 3
        => "CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES";
    /// The most threads of a block.
    DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CuDeviceAttribute = 1
        => "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK";
    /// The most threads of a block along x.
    DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: CuDeviceAttribute = 2 => "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X";
    /// The most threads of a block along y.
    DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: CuDeviceAttribute = 3 => "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y";
    /// The most threads of a block along z.
    DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: CuDeviceAttribute = 4 => "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z";
    /// The most blocks of a grid along x.
    DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: CuDeviceAttribute = 5 => "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X";
    /// The most blocks of a grid along y.
    DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: CuDeviceAttribute = 6 => "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y";
    /// The most blocks of a grid along z.
    DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: CuDeviceAttribute = 7 => "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z";
    /// Shared memory a block may use without opting in, in bytes.
    DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: CuDeviceAttribute = 8
        => "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK";
    /// Shared memory a block may use after opting in, in bytes.
    DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: CuDeviceAttribute = 97
        => "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN";
    /// The major number of the device's compute capability.
    DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CuDeviceAttribute = 75
        => "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR";
    /// The minor number of the device's compute capability.
    DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CuDeviceAttribute = 76
        => "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR";
    /// The most threads of a block of this kernel on this device.
    FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CuFunctionAttribute = 0
        => "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK";
    /// The kernel's static shared memory per block, in bytes.
    FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: CuFunctionAttribute = 1 => "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES";
    /// The most dynamic shared memory a launch of the kernel may ask for,
    /// in bytes (48 KiB less its static shared memory unless raised).
    FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: CuFunctionAttribute = 8
        => "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES";
    /// A 2D copy's side in host memory (`srcHost`, `dstHost`).
    MEMORYTYPE_HOST: CuMemoryType = 1 => "CU_MEMORYTYPE_HOST";
    /// A 2D copy's side in device memory (`srcDevice`, `dstDevice`).
    MEMORYTYPE_DEVICE: CuMemoryType = 2 => "CU_MEMORYTYPE_DEVICE";
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct CuMemLocation {
    pub(super) kind: c_int,
    pub(super) id: c_int,
}

/// `CUmemPoolProps`: 88 bytes in every CUDA version since 11.2. Versions
/// carve new fields out of the reserved bytes at its end (CUDA 13.5 took one
/// for `gpuDirectRDMACapable`), where zero keeps their defaults; `maxSize`
/// zero is the system's default size.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct CuMemPoolProps {
    pub(super) alloc_type: c_int,
    pub(super) handle_types: c_int,
    pub(super) location: CuMemLocation,
    pub(super) win32_security_attributes: *mut c_void,
    pub(super) max_size: usize,
    pub(super) usage: u16,
    /// The reserved bytes and the fields later versions define there: zero.
    pub(super) tail: [u8; 54],
}

/// `CUDA_MEMCPY2D` (`CUDA_MEMCPY2D_v2`, the layout of CUDA 3.2 on): a 2D
/// copy of `height` rows of `width_in_bytes`, each side's rows `pitch`
/// bytes apart from its base (host or device, by its memory type), skipping
/// `x_in_bytes` and `y` rows first (0 here).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct CuMemcpy2D {
    pub(super) src_x_in_bytes: usize,
    pub(super) src_y: usize,
    pub(super) src_memory_type: CuMemoryType,
    pub(super) src_host: *const c_void,
    pub(super) src_device: CuDevicePtr,
    pub(super) src_array: CuArray,
    pub(super) src_pitch: usize,
    pub(super) dst_x_in_bytes: usize,
    pub(super) dst_y: usize,
    pub(super) dst_memory_type: CuMemoryType,
    pub(super) dst_host: *mut c_void,
    pub(super) dst_device: CuDevicePtr,
    pub(super) dst_array: CuArray,
    pub(super) dst_pitch: usize,
    pub(super) width_in_bytes: usize,
    pub(super) height: usize,
}

load::driver_api! {
    /// Initialises the driver; any number of calls.
    fn cuInit(flags: c_uint) = "cuInit";
    /// The CUDA version the driver supports.
    fn cuDriverGetVersion(version: *mut c_int) = "cuDriverGetVersion";
    /// The number of visible devices.
    fn cuDeviceGetCount(count: *mut c_int) = "cuDeviceGetCount";
    /// The device of an ordinal.
    fn cuDeviceGet(device: *mut CuDevice, ordinal: c_int) = "cuDeviceGet";
    /// The device's name, NUL-terminated.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CuDevice) = "cuDeviceGetName";
    /// One attribute of a device.
    fn cuDeviceGetAttribute(value: *mut c_int, attribute: CuDeviceAttribute, device: CuDevice)
        = "cuDeviceGetAttribute";
    /// Retains the device's primary context.
    fn cuDevicePrimaryCtxRetain(context: *mut CuContext, device: CuDevice)
        = "cuDevicePrimaryCtxRetain";
    /// Releases the device's primary context.
    fn cuDevicePrimaryCtxRelease(device: CuDevice) = "cuDevicePrimaryCtxRelease_v2";
    /// The flags of the device's primary context and whether it is active.
    fn cuDevicePrimaryCtxGetState(device: CuDevice, flags: *mut c_uint, active: *mut c_int)
        = "cuDevicePrimaryCtxGetState";
    /// Sets the flags of the device's primary context (the `_v2` of CUDA 11,
    /// which cuda.h maps the name to).
    fn cuDevicePrimaryCtxSetFlags(device: CuDevice, flags: c_uint)
        = "cuDevicePrimaryCtxSetFlags_v2";
    /// The context current on this thread.
    fn cuCtxGetCurrent(context: *mut CuContext) = "cuCtxGetCurrent";
    /// Makes a context current on this thread.
    fn cuCtxSetCurrent(context: CuContext) = "cuCtxSetCurrent";
    /// Waits for all work of the current context.
    fn cuCtxSynchronize() = "cuCtxSynchronize";
    /// Free and total memory of the current context's device.
    fn cuMemGetInfo(free: *mut usize, total: *mut usize) = "cuMemGetInfo_v2";
    /// Creates a memory pool.
    fn cuMemPoolCreate(pool: *mut CuMemoryPool, props: *const CuMemPoolProps) = "cuMemPoolCreate";
    /// Destroys a memory pool.
    fn cuMemPoolDestroy(pool: CuMemoryPool) = "cuMemPoolDestroy";
    /// Reads a pool attribute.
    fn cuMemPoolGetAttribute(pool: CuMemoryPool, attribute: CuMemPoolAttribute, value: *mut c_void)
        = "cuMemPoolGetAttribute";
    /// Sets a pool attribute.
    fn cuMemPoolSetAttribute(pool: CuMemoryPool, attribute: CuMemPoolAttribute, value: *mut c_void)
        = "cuMemPoolSetAttribute";
    /// Returns a pool's idle memory to the driver.
    fn cuMemPoolTrimTo(pool: CuMemoryPool, keep_bytes: usize) = "cuMemPoolTrimTo";
    /// Allocates from a pool, ordered on a stream.
    fn cuMemAllocFromPoolAsync(
        address: *mut CuDevicePtr,
        bytes: usize,
        pool: CuMemoryPool,
        stream: CuStream,
    ) = "cuMemAllocFromPoolAsync";
    /// Frees pool memory, ordered on a stream.
    fn cuMemFreeAsync(address: CuDevicePtr, stream: CuStream) = "cuMemFreeAsync";
    /// Frees device memory at once.
    fn cuMemFree(address: CuDevicePtr) = "cuMemFree_v2";
    /// Allocates page-locked host memory.
    fn cuMemHostAlloc(host: *mut *mut c_void, bytes: usize, flags: c_uint) = "cuMemHostAlloc";
    /// Frees page-locked host memory.
    fn cuMemFreeHost(host: *mut c_void) = "cuMemFreeHost";
    /// Creates a stream.
    fn cuStreamCreate(stream: *mut CuStream, flags: c_uint) = "cuStreamCreate";
    /// Destroys a stream (its queued work still completes).
    fn cuStreamDestroy(stream: CuStream) = "cuStreamDestroy_v2";
    /// Waits for all work queued on a stream.
    fn cuStreamSynchronize(stream: CuStream) = "cuStreamSynchronize";
    /// Orders a stream's later work after an event.
    fn cuStreamWaitEvent(stream: CuStream, event: CuEvent, flags: c_uint) = "cuStreamWaitEvent";
    /// The context a stream belongs to.
    fn cuStreamGetCtx(stream: CuStream, context: *mut CuContext) = "cuStreamGetCtx";
    /// Creates an event.
    fn cuEventCreate(event: *mut CuEvent, flags: c_uint) = "cuEventCreate";
    /// Records an event after the work queued so far on a stream.
    fn cuEventRecord(event: CuEvent, stream: CuStream) = "cuEventRecord";
    /// Whether the work before an event completed.
    fn cuEventQuery(event: CuEvent) = "cuEventQuery";
    /// Waits for the work before an event.
    fn cuEventSynchronize(event: CuEvent) = "cuEventSynchronize";
    /// Milliseconds between two timed events (the `_v2` of CUDA 12.8 on,
    /// which CUDA 13 maps the name to; the first version on older drivers).
    fn cuEventElapsedTime(milliseconds: *mut f32, start: CuEvent, end: CuEvent)
        = "cuEventElapsedTime_v2" | "cuEventElapsedTime";
    /// Destroys an event.
    fn cuEventDestroy(event: CuEvent) = "cuEventDestroy_v2";
    /// Queues a copy from host memory to the device.
    fn cuMemcpyHtoDAsync(
        destination: CuDevicePtr,
        source: *const c_void,
        bytes: usize,
        stream: CuStream,
    ) = "cuMemcpyHtoDAsync_v2";
    /// Queues a copy from the device to host memory.
    fn cuMemcpyDtoHAsync(
        destination: *mut c_void,
        source: CuDevicePtr,
        bytes: usize,
        stream: CuStream,
    ) = "cuMemcpyDtoHAsync_v2";
    /// Queues a 2D copy (rows a pitch apart on each side).
    fn cuMemcpy2DAsync(copy: *const CuMemcpy2D, stream: CuStream) = "cuMemcpy2DAsync_v2";
    /// Loads a module from an image (PTX text), with compiler options.
    fn cuModuleLoadDataEx(
        module: *mut CuModule,
        image: *const c_void,
        option_count: c_uint,
        options: *mut CuJitOption,
        option_values: *mut *mut c_void,
    ) = "cuModuleLoadDataEx";
    /// Unloads a module.
    fn cuModuleUnload(module: CuModule) = "cuModuleUnload";
    /// A kernel of a module, by name.
    fn cuModuleGetFunction(function: *mut CuFunction, module: CuModule, name: *const c_char)
        = "cuModuleGetFunction";
    /// Queues a kernel on a stream.
    fn cuLaunchKernel(
        function: CuFunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_bytes: c_uint,
        stream: CuStream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) = "cuLaunchKernel";
    /// Reads one attribute of a kernel.
    fn cuFuncGetAttribute(value: *mut c_int, attribute: CuFunctionAttribute, function: CuFunction)
        = "cuFuncGetAttribute";
    /// Sets one attribute of a kernel.
    fn cuFuncSetAttribute(function: CuFunction, attribute: CuFunctionAttribute, value: c_int)
        = "cuFuncSetAttribute";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_properties_have_the_drivers_size() {
        assert_eq!(size_of::<CuMemPoolProps>(), 88);
    }

    #[test]
    fn every_binding_names_its_symbols_once() {
        let mut symbols: Vec<&str> = BINDINGS
            .iter()
            .flat_map(|binding| binding.symbols.iter().copied())
            .collect();
        let count = symbols.len();
        symbols.sort_unstable();
        symbols.dedup();
        assert_eq!(symbols.len(), count);
        assert!(
            BINDINGS
                .iter()
                .all(|binding| binding.symbols[0].starts_with(binding.api))
        );
    }
}
