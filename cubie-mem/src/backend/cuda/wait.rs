//! How the host's threads wait for the device: the primary context's
//! scheduling flags (`cuStreamSynchronize`, `cuCtxSynchronize`) and the
//! flags of the events the host waits on (`cuEventSynchronize`).

use std::ffi::{c_int, c_uint};

use super::driver::{describe, unusable};
use super::sys::{self, CuDevice, CuResult};
use crate::MemError;

/// How a host thread waits for the device ([`CudaConfig::host_wait`]).
///
/// Every wait of the backend is one of two kinds. Stream and context
/// waits (a copy of a host slice waits for its stream, a module's drop
/// and an allocation's retry after out of memory wait for the whole
/// context) follow the primary context's scheduling flags. Event waits
/// (`synchronize_event`, the manager's waits for a chunk or an owner's
/// work, the timeline) busy-wait unless the event was created with
/// `CU_EVENT_BLOCKING_SYNC`.
///
/// The primary context is shared with every other user of the device in
/// the process (the CUDA runtime, other libraries), and its flags with it:
/// the last backend made with a policy other than [`Driver`](Self::Driver)
/// sets them.
///
/// [`CudaConfig::host_wait`]: super::CudaConfig::host_wait
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostWait {
    /// The primary context keeps the flags it has (`CU_CTX_SCHED_AUTO`
    /// unless another user of the device set them: spin while the process
    /// has no more active contexts than logical CPUs, else yield), and
    /// event waits busy-wait.
    #[default]
    Driver,
    /// Every wait spins on a core (`CU_CTX_SCHED_SPIN`): the lowest latency,
    /// a core per waiting thread.
    Spin,
    /// Stream and context waits yield the thread between polls
    /// (`CU_CTX_SCHED_YIELD`); event waits still busy-wait.
    Yield,
    /// Every wait sleeps until the device signals
    /// (`CU_CTX_SCHED_BLOCKING_SYNC`, and `CU_EVENT_BLOCKING_SYNC` events):
    /// no core spent waiting, a few microseconds more per wait. Choose it
    /// when host threads work beside the device (a `DeviceSet` on a host
    /// with few cores, the staging of the pipeline).
    Block,
}

impl HostWait {
    /// The scheduling flag the policy sets on the primary context, or
    /// `None` to leave the context's flags as they are.
    fn schedule(self) -> Option<c_uint> {
        match self {
            HostWait::Driver => None,
            HostWait::Spin => Some(sys::CTX_SCHED_SPIN),
            HostWait::Yield => Some(sys::CTX_SCHED_YIELD),
            HostWait::Block => Some(sys::CTX_SCHED_BLOCKING_SYNC),
        }
    }

    /// The `cuEventCreate` flags the policy adds to the host's events.
    pub(super) fn event_flags(self) -> c_uint {
        match self {
            HostWait::Block => sys::EVENT_BLOCKING_SYNC,
            HostWait::Driver | HostWait::Spin | HostWait::Yield => 0,
        }
    }

    /// Sets the scheduling flag of `device`'s primary context, keeping its
    /// other flags, before the backend retains the context. A driver that
    /// refuses to change the flags of an active context
    /// (`CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE`) leaves them, with a warning:
    /// the backend still works, its stream and context waits as the flags
    /// say. Any other failure is [`MemError::NoDevice`] naming the step.
    pub(super) fn apply(self, device: CuDevice, ordinal: u32, name: &str) -> Result<(), MemError> {
        let Some(schedule) = self.schedule() else {
            return Ok(());
        };
        let (mut flags, mut active): (c_uint, c_int) = (0, 0);
        // SAFETY: both out-pointers are live; the device came from the driver.
        let result = unsafe { sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) };
        if result != CuResult::SUCCESS {
            return Err(unusable(
                format_args!(
                    "reading the primary context's flags of device {ordinal} ({name}) for \
                     HostWait::{self:?} (HostWait::Driver leaves them unread)"
                ),
                result,
            ));
        }
        if flags & sys::CTX_SCHED_MASK == schedule {
            return Ok(());
        }
        let wanted = (flags & !sys::CTX_SCHED_MASK) | schedule;
        // SAFETY: the device came from the driver; the flags are the
        // context's own with one scheduling flag.
        let result = unsafe { sys::cuDevicePrimaryCtxSetFlags(device, wanted) };
        if result == CuResult::PRIMARY_CONTEXT_ACTIVE {
            tracing::warn!(
                device = ordinal,
                flags,
                wanted,
                error = %describe(result),
                "the primary context of device {ordinal} ({name}) is active and keeps its \
                 scheduling flags {flags:#x}: its stream and context waits do not follow \
                 HostWait::{self:?}; choose the policy before anything else in the process uses \
                 the device"
            );
            return Ok(());
        }
        if result != CuResult::SUCCESS {
            return Err(unusable(
                format_args!(
                    "setting the primary context's flags of device {ordinal} ({name}) to \
                     {wanted:#x} for HostWait::{self:?} (HostWait::Driver leaves them as they are)"
                ),
                result,
            ));
        }
        Ok(())
    }
}
