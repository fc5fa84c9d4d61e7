//! The CUDA driver functions the backend calls, declared here with a plain
//! integer result.
//!
//! cust_raw types `CUresult` as a Rust enum generated from CUDA 11.4: a
//! newer driver returning a code that enum lacks (46, 226, 912, ...) would be
//! undefined behaviour the moment the value exists. Every call the backend
//! makes goes through these declarations instead, and [`CuResult`] is the
//! driver's `unsigned int` as is: known codes have names, unknown ones print
//! as numbers. Handles are opaque pointers or integers, as in `cuda.h`.
//!
//! The library itself is linked by cust_raw's build script (`libcuda.so`,
//! found through `CUDA_LIBRARY_PATH` or the CUDA toolkit), which the
//! backend's dependency on cust brings in; at run time the loader finds
//! `libcuda.so.1` from the NVIDIA driver.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt;

/// A driver result code (`CUresult`), kept as the integer the driver returned.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct CuResult(pub(super) u32);

impl CuResult {
    /// `CUDA_SUCCESS`.
    pub(super) const SUCCESS: CuResult = CuResult(0);
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    pub(super) const OUT_OF_MEMORY: CuResult = CuResult(2);
    /// `CUDA_ERROR_NOT_READY`: an event or stream query whose work is pending.
    pub(super) const NOT_READY: CuResult = CuResult(600);

    /// The symbolic name of a code CUDA 13 defines, or `None`.
    pub(super) fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "CUDA_SUCCESS",
            1 => "CUDA_ERROR_INVALID_VALUE",
            2 => "CUDA_ERROR_OUT_OF_MEMORY",
            3 => "CUDA_ERROR_NOT_INITIALIZED",
            4 => "CUDA_ERROR_DEINITIALIZED",
            5 => "CUDA_ERROR_PROFILER_DISABLED",
            6 => "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
            7 => "CUDA_ERROR_PROFILER_ALREADY_STARTED",
            8 => "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
            34 => "CUDA_ERROR_STUB_LIBRARY",
            36 => "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
            46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
            100 => "CUDA_ERROR_NO_DEVICE",
            101 => "CUDA_ERROR_INVALID_DEVICE",
            102 => "CUDA_ERROR_DEVICE_NOT_LICENSED",
            200 => "CUDA_ERROR_INVALID_IMAGE",
            201 => "CUDA_ERROR_INVALID_CONTEXT",
            202 => "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
            205 => "CUDA_ERROR_MAP_FAILED",
            206 => "CUDA_ERROR_UNMAP_FAILED",
            207 => "CUDA_ERROR_ARRAY_IS_MAPPED",
            208 => "CUDA_ERROR_ALREADY_MAPPED",
            209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
            210 => "CUDA_ERROR_ALREADY_ACQUIRED",
            211 => "CUDA_ERROR_NOT_MAPPED",
            212 => "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
            213 => "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
            214 => "CUDA_ERROR_ECC_UNCORRECTABLE",
            215 => "CUDA_ERROR_UNSUPPORTED_LIMIT",
            216 => "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
            217 => "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
            218 => "CUDA_ERROR_INVALID_PTX",
            219 => "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
            220 => "CUDA_ERROR_NVLINK_UNCORRECTABLE",
            221 => "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
            222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            223 => "CUDA_ERROR_JIT_COMPILATION_DISABLED",
            224 => "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
            225 => "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
            226 => "CUDA_ERROR_CONTAINED",
            300 => "CUDA_ERROR_INVALID_SOURCE",
            301 => "CUDA_ERROR_FILE_NOT_FOUND",
            302 => "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
            303 => "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
            304 => "CUDA_ERROR_OPERATING_SYSTEM",
            400 => "CUDA_ERROR_INVALID_HANDLE",
            401 => "CUDA_ERROR_ILLEGAL_STATE",
            402 => "CUDA_ERROR_LOSSY_QUERY",
            500 => "CUDA_ERROR_NOT_FOUND",
            600 => "CUDA_ERROR_NOT_READY",
            700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
            701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
            703 => "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
            704 => "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
            705 => "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
            708 => "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
            709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
            710 => "CUDA_ERROR_ASSERT",
            711 => "CUDA_ERROR_TOO_MANY_PEERS",
            712 => "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            713 => "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
            714 => "CUDA_ERROR_HARDWARE_STACK_ERROR",
            715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
            716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
            717 => "CUDA_ERROR_INVALID_ADDRESS_SPACE",
            718 => "CUDA_ERROR_INVALID_PC",
            719 => "CUDA_ERROR_LAUNCH_FAILED",
            720 => "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
            721 => "CUDA_ERROR_TENSOR_MEMORY_LEAK",
            800 => "CUDA_ERROR_NOT_PERMITTED",
            801 => "CUDA_ERROR_NOT_SUPPORTED",
            802 => "CUDA_ERROR_SYSTEM_NOT_READY",
            803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            805 => "CUDA_ERROR_MPS_CONNECTION_FAILED",
            806 => "CUDA_ERROR_MPS_RPC_FAILURE",
            807 => "CUDA_ERROR_MPS_SERVER_NOT_READY",
            808 => "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
            809 => "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
            810 => "CUDA_ERROR_MPS_CLIENT_TERMINATED",
            811 => "CUDA_ERROR_CDP_NOT_SUPPORTED",
            812 => "CUDA_ERROR_CDP_VERSION_MISMATCH",
            900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            901 => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            902 => "CUDA_ERROR_STREAM_CAPTURE_MERGE",
            903 => "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
            904 => "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
            905 => "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
            906 => "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
            907 => "CUDA_ERROR_CAPTURED_EVENT",
            908 => "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
            909 => "CUDA_ERROR_TIMEOUT",
            910 => "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
            911 => "CUDA_ERROR_EXTERNAL_DEVICE",
            912 => "CUDA_ERROR_INVALID_CLUSTER_SIZE",
            913 => "CUDA_ERROR_FUNCTION_NOT_LOADED",
            914 => "CUDA_ERROR_INVALID_RESOURCE_TYPE",
            915 => "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
            916 => "CUDA_ERROR_KEY_ROTATION",
            999 => "CUDA_ERROR_UNKNOWN",
            _ => return None,
        })
    }

    /// Whether the code leaves the context unusable: the driver documents
    /// that every later call fails the same way and the process must be
    /// restarted (faults in a kernel, an assert, a contained error).
    pub(super) fn is_sticky(self) -> bool {
        matches!(
            self.0,
            226 | 700 | 702 | 710 | 714 | 715 | 716 | 717 | 718 | 719 | 911
        )
    }
}

impl fmt::Display for CuResult {
    /// `CUDA_ERROR_NO_DEVICE`, or `unknown CUDA error` for a code this
    /// build does not know (the number is printed beside it by callers).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name().unwrap_or("unknown CUDA error"))
    }
}

impl fmt::Debug for CuResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} ({})", self.0)
    }
}

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

/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`.
pub(super) const DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: c_int = 115;
/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the null stream.
pub(super) const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
pub(super) const EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_EVENT_DEFAULT`: an event that records time.
pub(super) const EVENT_DEFAULT: c_uint = 0;
/// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD` (a `cuuint64_t`).
pub(super) const MEMPOOL_ATTR_RELEASE_THRESHOLD: c_int = 4;
/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` (a `cuuint64_t`).
pub(super) const MEMPOOL_ATTR_RESERVED_MEM_CURRENT: c_int = 5;
/// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT` (a `cuuint64_t`).
pub(super) const MEMPOOL_ATTR_USED_MEM_CURRENT: c_int = 7;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`: device memory that is not migrated.
pub(super) const MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
/// `CU_MEM_HANDLE_TYPE_NONE`: no export of the pool's memory.
pub(super) const MEM_HANDLE_TYPE_NONE: c_int = 0;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub(super) const MEM_LOCATION_TYPE_DEVICE: c_int = 1;
/// `CU_JIT_ERROR_LOG_BUFFER`: where the PTX compiler writes its errors.
pub(super) const JIT_ERROR_LOG_BUFFER: c_int = 5;
/// `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`: that buffer's size (in, then used).
pub(super) const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct CuMemLocation {
    pub(super) kind: c_int,
    pub(super) id: c_int,
}

/// `CUmemPoolProps`: 88 bytes in every CUDA version since 11.2; later
/// versions carved `maxSize` and `usage` out of the reserved bytes, where
/// zero keeps their defaults.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct CuMemPoolProps {
    pub(super) alloc_type: c_int,
    pub(super) handle_types: c_int,
    pub(super) location: CuMemLocation,
    pub(super) win32_security_attributes: *mut c_void,
    pub(super) reserved: [u8; 64],
}

unsafe extern "C" {
    pub(super) fn cuInit(flags: c_uint) -> CuResult;
    pub(super) fn cuDriverGetVersion(version: *mut c_int) -> CuResult;
    pub(super) fn cuDeviceGetCount(count: *mut c_int) -> CuResult;
    pub(super) fn cuDeviceGet(device: *mut CuDevice, ordinal: c_int) -> CuResult;
    pub(super) fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CuDevice) -> CuResult;
    pub(super) fn cuDeviceGetAttribute(
        value: *mut c_int,
        attribute: c_int,
        device: CuDevice,
    ) -> CuResult;
    pub(super) fn cuDevicePrimaryCtxRetain(context: *mut CuContext, device: CuDevice) -> CuResult;
    pub(super) fn cuDevicePrimaryCtxRelease_v2(device: CuDevice) -> CuResult;
    pub(super) fn cuCtxGetCurrent(context: *mut CuContext) -> CuResult;
    pub(super) fn cuCtxSetCurrent(context: CuContext) -> CuResult;
    pub(super) fn cuCtxSynchronize() -> CuResult;
    pub(super) fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult;

    pub(super) fn cuMemPoolCreate(
        pool: *mut CuMemoryPool,
        props: *const CuMemPoolProps,
    ) -> CuResult;
    pub(super) fn cuMemPoolDestroy(pool: CuMemoryPool) -> CuResult;
    pub(super) fn cuMemPoolGetAttribute(
        pool: CuMemoryPool,
        attribute: c_int,
        value: *mut c_void,
    ) -> CuResult;
    pub(super) fn cuMemPoolSetAttribute(
        pool: CuMemoryPool,
        attribute: c_int,
        value: *mut c_void,
    ) -> CuResult;
    pub(super) fn cuMemPoolTrimTo(pool: CuMemoryPool, keep_bytes: usize) -> CuResult;
    pub(super) fn cuMemAllocFromPoolAsync(
        address: *mut CuDevicePtr,
        bytes: usize,
        pool: CuMemoryPool,
        stream: CuStream,
    ) -> CuResult;
    pub(super) fn cuMemFreeAsync(address: CuDevicePtr, stream: CuStream) -> CuResult;
    pub(super) fn cuMemFree_v2(address: CuDevicePtr) -> CuResult;
    pub(super) fn cuMemHostAlloc(host: *mut *mut c_void, bytes: usize, flags: c_uint) -> CuResult;
    pub(super) fn cuMemFreeHost(host: *mut c_void) -> CuResult;

    pub(super) fn cuStreamCreate(stream: *mut CuStream, flags: c_uint) -> CuResult;
    pub(super) fn cuStreamDestroy_v2(stream: CuStream) -> CuResult;
    pub(super) fn cuStreamSynchronize(stream: CuStream) -> CuResult;
    pub(super) fn cuStreamWaitEvent(stream: CuStream, event: CuEvent, flags: c_uint) -> CuResult;
    pub(super) fn cuEventCreate(event: *mut CuEvent, flags: c_uint) -> CuResult;
    pub(super) fn cuEventRecord(event: CuEvent, stream: CuStream) -> CuResult;
    pub(super) fn cuEventQuery(event: CuEvent) -> CuResult;
    pub(super) fn cuEventSynchronize(event: CuEvent) -> CuResult;
    pub(super) fn cuEventElapsedTime(
        milliseconds: *mut f32,
        start: CuEvent,
        end: CuEvent,
    ) -> CuResult;
    pub(super) fn cuEventDestroy_v2(event: CuEvent) -> CuResult;

    pub(super) fn cuMemcpyHtoDAsync_v2(
        destination: CuDevicePtr,
        source: *const c_void,
        bytes: usize,
        stream: CuStream,
    ) -> CuResult;
    pub(super) fn cuMemcpyDtoHAsync_v2(
        destination: *mut c_void,
        source: CuDevicePtr,
        bytes: usize,
        stream: CuStream,
    ) -> CuResult;

    pub(super) fn cuModuleLoadDataEx(
        module: *mut CuModule,
        image: *const c_void,
        option_count: c_uint,
        options: *mut c_int,
        option_values: *mut *mut c_void,
    ) -> CuResult;
    pub(super) fn cuModuleUnload(module: CuModule) -> CuResult;
    pub(super) fn cuModuleGetFunction(
        function: *mut CuFunction,
        module: CuModule,
        name: *const c_char,
    ) -> CuResult;
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cuLaunchKernel(
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
    ) -> CuResult;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_have_names_and_unknown_ones_do_not() {
        assert_eq!(CuResult(46).name(), Some("CUDA_ERROR_DEVICE_UNAVAILABLE"));
        assert_eq!(CuResult(226).name(), Some("CUDA_ERROR_CONTAINED"));
        assert_eq!(
            CuResult(912).name(),
            Some("CUDA_ERROR_INVALID_CLUSTER_SIZE")
        );
        assert_eq!(CuResult(4321).name(), None);
        assert_eq!(format!("{:?}", CuResult(4321)), "unknown CUDA error (4321)");
        assert_eq!(CuResult(34).to_string(), "CUDA_ERROR_STUB_LIBRARY");
    }

    #[test]
    fn faults_are_sticky_and_ordinary_failures_are_not() {
        for code in [226, 700, 719] {
            assert!(CuResult(code).is_sticky(), "{code}");
        }
        for code in [1, 2, 100, 600, 701] {
            assert!(!CuResult(code).is_sticky(), "{code}");
        }
    }

    #[test]
    fn the_pool_properties_have_the_drivers_size() {
        assert_eq!(size_of::<CuMemPoolProps>(), 88);
    }
}
