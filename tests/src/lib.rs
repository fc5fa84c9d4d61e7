//! Integration tests of cubie-mem live under `tests/` (with the trybuild ui
//! suite under `ui/`); this library only compiles the user guide's code
//! blocks as doctests.

#[doc = include_str!("../../docs/index.md")]
#[cfg(doctest)]
pub struct GuideIndexDoctests;

#[doc = include_str!("../../docs/default-manager.md")]
#[cfg(doctest)]
pub struct DefaultManagerDoctests;

#[doc = include_str!("../../docs/memory-manager.md")]
#[cfg(doctest)]
pub struct MemoryManagerDoctests;

#[doc = include_str!("../../docs/array-request.md")]
#[cfg(doctest)]
pub struct ArrayRequestDoctests;

#[doc = include_str!("../../docs/planner.md")]
#[cfg(doctest)]
pub struct PlannerDoctests;

#[doc = include_str!("../../docs/array-response.md")]
#[cfg(doctest)]
pub struct ArrayResponseDoctests;

#[doc = include_str!("../../docs/stream-groups.md")]
#[cfg(doctest)]
pub struct StreamGroupsDoctests;

#[doc = include_str!("../../docs/current-stream.md")]
#[cfg(doctest)]
pub struct CurrentStreamDoctests;

#[doc = include_str!("../../docs/host-memory.md")]
#[cfg(doctest)]
pub struct HostMemoryDoctests;

#[doc = include_str!("../../docs/derive.md")]
#[cfg(doctest)]
pub struct DeriveDoctests;

#[doc = include_str!("../../docs/device-model.md")]
#[cfg(doctest)]
pub struct DeviceModelDoctests;

#[doc = include_str!("../../docs/cuda.md")]
#[cfg(all(doctest, feature = "cuda"))]
pub struct CudaDoctests;
