//! The driver's result codes (`CUresult`), kept as the integers the driver
//! returned: a code newer than this build is a number without a name, never
//! undefined behaviour.

use std::fmt;

/// A driver result code (`CUresult`), kept as the integer the driver returned.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::backend::cuda) struct CuResult(pub(in crate::backend::cuda) u32);

/// Every code of `cuda.h`'s `cudaError_enum` in CUDA 13.5 (the newest header
/// CI compares against, both ways), by value.
pub(in crate::backend::cuda) const KNOWN_CODES: &[(u32, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (5, "CUDA_ERROR_PROFILER_DISABLED"),
    (6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"),
    (7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"),
    (8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (47, "CUDA_ERROR_MULTICAST_RESOURCE_FULL"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, "CUDA_ERROR_MAP_FAILED"),
    (206, "CUDA_ERROR_UNMAP_FAILED"),
    (207, "CUDA_ERROR_ARRAY_IS_MAPPED"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (210, "CUDA_ERROR_ALREADY_ACQUIRED"),
    (211, "CUDA_ERROR_NOT_MAPPED"),
    (212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"),
    (213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE"),
    (215, "CUDA_ERROR_UNSUPPORTED_LIMIT"),
    (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    (218, "CUDA_ERROR_INVALID_PTX"),
    (219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"),
    (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"),
    (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    (223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"),
    (224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"),
    (225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"),
    (226, "CUDA_ERROR_CONTAINED"),
    (227, "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION"),
    (300, "CUDA_ERROR_INVALID_SOURCE"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND"),
    (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"),
    (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (401, "CUDA_ERROR_ILLEGAL_STATE"),
    (402, "CUDA_ERROR_LOSSY_QUERY"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    (703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, "CUDA_ERROR_ASSERT"),
    (711, "CUDA_ERROR_TOO_MANY_PEERS"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
    (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    (718, "CUDA_ERROR_INVALID_PC"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"),
    (721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"),
    (800, "CUDA_ERROR_NOT_PERMITTED"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    (805, "CUDA_ERROR_MPS_CONNECTION_FAILED"),
    (806, "CUDA_ERROR_MPS_RPC_FAILURE"),
    (807, "CUDA_ERROR_MPS_SERVER_NOT_READY"),
    (808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"),
    (809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"),
    (810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"),
    (811, "CUDA_ERROR_CDP_NOT_SUPPORTED"),
    (812, "CUDA_ERROR_CDP_VERSION_MISMATCH"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"),
    (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"),
    (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
    (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"),
    (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"),
    (907, "CUDA_ERROR_CAPTURED_EVENT"),
    (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"),
    (909, "CUDA_ERROR_TIMEOUT"),
    (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"),
    (911, "CUDA_ERROR_EXTERNAL_DEVICE"),
    (912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"),
    (913, "CUDA_ERROR_FUNCTION_NOT_LOADED"),
    (914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"),
    (915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"),
    (916, "CUDA_ERROR_KEY_ROTATION"),
    (917, "CUDA_ERROR_STREAM_DETACHED"),
    (918, "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE"),
    (919, "CUDA_ERROR_FABRIC_NOT_READY"),
    (999, "CUDA_ERROR_UNKNOWN"),
];

/// The codes after which the driver documents that the process is in an
/// inconsistent state and must be relaunched (or the context destroyed):
/// every later call fails the same way. CI derives this set from the
/// header's comments and compares.
pub(in crate::backend::cuda) const STICKY_CODES: &[u32] = &[
    226, 700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911,
];

impl CuResult {
    /// `CUDA_SUCCESS`.
    pub(in crate::backend::cuda) const SUCCESS: CuResult = CuResult(0);
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    pub(in crate::backend::cuda) const OUT_OF_MEMORY: CuResult = CuResult(2);
    /// `CUDA_ERROR_NOT_INITIALIZED`: what a call answers before the driver
    /// library is loaded.
    pub(in crate::backend::cuda) const NOT_INITIALIZED: CuResult = CuResult(3);
    /// `CUDA_ERROR_NOT_READY`: an event or stream query whose work is pending.
    pub(in crate::backend::cuda) const NOT_READY: CuResult = CuResult(600);
    /// `CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE`: flags a driver would only set
    /// before the primary context was created.
    pub(in crate::backend::cuda) const PRIMARY_CONTEXT_ACTIVE: CuResult = CuResult(708);

    /// The symbolic name of a code CUDA 13.5 defines, or `None`.
    pub(in crate::backend::cuda) fn name(self) -> Option<&'static str> {
        KNOWN_CODES
            .binary_search_by_key(&self.0, |&(code, _)| code)
            .ok()
            .map(|index| KNOWN_CODES[index].1)
    }

    /// Whether the code leaves the context unusable: the driver documents
    /// that every later call fails the same way and the process must be
    /// restarted (faults in a kernel, an assert, a contained error, an MPS
    /// client terminated).
    pub(in crate::backend::cuda) fn is_sticky(self) -> bool {
        STICKY_CODES.contains(&self.0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_table_is_sorted_by_value_and_without_duplicates() {
        assert!(KNOWN_CODES.windows(2).all(|pair| pair[0].0 < pair[1].0));
        let mut names: Vec<&str> = KNOWN_CODES.iter().map(|&(_, name)| name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KNOWN_CODES.len());
    }

    #[test]
    fn known_codes_have_names_and_unknown_ones_do_not() {
        assert_eq!(CuResult(46).name(), Some("CUDA_ERROR_DEVICE_UNAVAILABLE"));
        assert_eq!(CuResult(226).name(), Some("CUDA_ERROR_CONTAINED"));
        assert_eq!(
            CuResult(912).name(),
            Some("CUDA_ERROR_INVALID_CLUSTER_SIZE")
        );
        assert_eq!(
            CuResult(47).name(),
            Some("CUDA_ERROR_MULTICAST_RESOURCE_FULL")
        );
        assert_eq!(CuResult(919).name(), Some("CUDA_ERROR_FABRIC_NOT_READY"));
        assert_eq!(CuResult(4321).name(), None);
        assert_eq!(format!("{:?}", CuResult(4321)), "unknown CUDA error (4321)");
        assert_eq!(CuResult(34).to_string(), "CUDA_ERROR_STUB_LIBRARY");
    }

    #[test]
    fn faults_and_restarts_are_sticky_and_ordinary_failures_are_not() {
        for code in [226, 700, 710, 719, 721, 810] {
            assert!(CuResult(code).is_sticky(), "{code}");
        }
        for code in [1, 2, 100, 600, 701, 918] {
            assert!(!CuResult(code).is_sticky(), "{code}");
        }
    }
}
