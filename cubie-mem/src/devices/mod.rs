//! Several devices in one process: a [`DeviceSet`] holds one
//! [`MemoryManager`] per device, splits a batch into one contiguous run
//! range per device so that the devices finish together, and streams every
//! portion at once into the same host arrays.

mod allocate;
mod report;

use std::ops::Range;

use crate::{Allocated, Instance, ManagerConfig, MemError, MemoryManager, SimBackend};

pub use allocate::Throughput;
pub use report::DeviceSetReport;

/// The devices of one process, one [`MemoryManager`] each (its own
/// backend, streams and budget), in device order.
///
/// ```
/// use cubie_mem::{DeviceSet, ManagerConfig, SimBackend};
///
/// // Two simulated devices with 1 GiB and 3 GiB free.
/// let set = DeviceSet::simulated(
///     [SimBackend::new(8 << 30).with_free(1 << 30), SimBackend::new(8 << 30).with_free(3 << 30)],
///     ManagerConfig::default(),
/// );
/// assert_eq!(set.len(), 2);
/// ```
#[derive(Debug)]
pub struct DeviceSet {
    managers: Vec<MemoryManager>,
}

impl DeviceSet {
    /// A set of the devices of `managers`, in that order; each manager is
    /// one device (two managers of one backend are refused when the set
    /// allocates).
    ///
    /// Every device accepts the others' page-locked memory for its
    /// asynchronous copies (page-locked allocations are portable), so that
    /// a pinned host array made by any device's manager moves directly to
    /// and from every device; a backend that cannot (of another kind)
    /// stages it instead.
    pub fn new(managers: Vec<MemoryManager>) -> Self {
        for manager in &managers {
            for peer in &managers {
                if !std::sync::Arc::ptr_eq(manager.backend(), peer.backend()) {
                    manager
                        .backend()
                        .accept_page_locked(peer.backend().as_ref());
                }
            }
        }
        DeviceSet { managers }
    }

    /// A set of simulated devices, each with a manager of `config`: for
    /// tests, and for planning a batch across devices without them.
    pub fn simulated(devices: impl IntoIterator<Item = SimBackend>, config: ManagerConfig) -> Self {
        DeviceSet::new(
            devices
                .into_iter()
                .map(|device| MemoryManager::with_config(device, config.clone()))
                .collect(),
        )
    }

    /// Every visible CUDA device (the driver honours `CUDA_VISIBLE_DEVICES`
    /// and numbers the visible devices from 0), each with a manager of
    /// `config`. No device, or no driver, is [`MemError::NoDevice`].
    #[cfg(feature = "cuda")]
    pub fn cuda(config: ManagerConfig) -> Result<Self, MemError> {
        let count = crate::backend::cuda::CudaBackend::device_count()?;
        let managers = (0..count)
            .map(|ordinal| {
                crate::backend::cuda::CudaBackend::new(ordinal)
                    .map(|device| MemoryManager::with_config(device, config.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if managers.is_empty() {
            return Err(MemError::NoDevice {
                cause: "the driver lists no visible CUDA device (check CUDA_VISIBLE_DEVICES)"
                    .into(),
            });
        }
        Ok(DeviceSet::new(managers))
    }

    /// The managers, by device.
    pub fn managers(&self) -> &[MemoryManager] {
        &self.managers
    }

    /// The manager of device `device`.
    pub fn manager(&self, device: usize) -> Option<&MemoryManager> {
        self.managers.get(device)
    }

    /// The number of devices.
    pub fn len(&self) -> usize {
        self.managers.len()
    }

    /// Whether the set has no device.
    pub fn is_empty(&self) -> bool {
        self.managers.is_empty()
    }
}

/// One device's portion of a batch: its runs, the instance holding its
/// buffers on that device, and the buffers.
#[derive(Debug)]
pub struct DevicePortion<B> {
    device: usize,
    runs: Range<usize>,
    instance: Instance,
    buffers: Allocated<B>,
}

impl<B> DevicePortion<B> {
    /// The device's index in the set.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The batch's runs this device streams.
    pub fn runs(&self) -> Range<usize> {
        self.runs.clone()
    }

    /// The instance holding the buffers, registered on the device's
    /// manager.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    /// The buffers, laid out for the device's runs.
    pub fn buffers(&self) -> &Allocated<B> {
        &self.buffers
    }
}

/// A batch's buffers on every device of a set that takes part, made by
/// [`DeviceSet::allocate`]: each device's portion, and the split that gave
/// them.
#[derive(Debug)]
pub struct DeviceSetBuffers<'s, B> {
    set: &'s DeviceSet,
    portions: Vec<DevicePortion<B>>,
    split: crate::plan::split::Split,
    total_runs: usize,
}

impl<'s, B> DeviceSetBuffers<'s, B> {
    /// The portions of the devices that take part, in device order.
    pub fn portions(&self) -> &[DevicePortion<B>] {
        &self.portions
    }

    /// How the runs were split, with why a device took no part.
    pub fn split(&self) -> &crate::plan::split::Split {
        &self.split
    }

    /// The batch's run count.
    pub fn total_runs(&self) -> usize {
        self.total_runs
    }

    /// The set the buffers live on.
    pub fn set(&self) -> &'s DeviceSet {
        self.set
    }

    /// The manager of `portion`'s device.
    pub(crate) fn manager(&self, portion: &DevicePortion<B>) -> &'s MemoryManager {
        // Shares are made for devices of this set only.
        &self.set.managers[portion.device]
    }
}

/// Checks that no backend serves two devices of a set.
fn check_distinct(set: &DeviceSet) -> Result<(), MemError> {
    for (device, manager) in set.managers.iter().enumerate() {
        if let Some(first) = set.managers[..device]
            .iter()
            .position(|other| std::sync::Arc::ptr_eq(other.backend(), manager.backend()))
        {
            return Err(MemError::Config {
                name: "DeviceSet::new(managers)".into(),
                value: format!("devices {first} and {device}"),
                reason: "they are managers of one backend; give each device a manager of its own"
                    .into(),
            });
        }
    }
    Ok(())
}
