//! Splitting a batch across a set's devices and allocating each portion.

use super::{DevicePortion, DeviceSet, DeviceSetBuffers, check_distinct};
use crate::plan::BatchSizes;
use crate::plan::split::{DeviceCapacity, EQUAL_WEIGHT, Split, Workload, split, weights};
use crate::{GpuBuffers, Instance, MemError, Registration, RequestSet};

/// How a set weighs its devices for a batch: the runs are shared in
/// proportion to each device's throughput for it, so that the devices
/// finish together (memory only decides whether a device takes part, and
/// its chunk plan).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Throughput {
    /// Every device alike: identical devices, or rates unknown.
    #[default]
    Equal,
    /// From each device's engine rates ([`Backend::engine_rates`]) for
    /// `Workload`, the work of one run; every device alike when a device's
    /// rates are unknown (a CUDA device's).
    ///
    /// [`Backend::engine_rates`]: crate::backend::Backend::engine_rates
    Modelled(Workload),
    /// The user's weights, by device (a device of weight 2 takes twice the
    /// runs of one of weight 1; weight 0 takes none).
    Weights(Vec<u64>),
}

impl DeviceSet {
    /// Splits a batch of `total_runs` runs of `B` across the devices and
    /// allocates each portion: registers `registration(device)` on every
    /// device, keeps those that can hold one run and the unchunkable
    /// arrays, gives each one contiguous range of runs in proportion to
    /// `throughput`, and allocates `B` for `dims(runs)` (the dims of a
    /// portion of `runs` runs) on it, chunked for its own memory.
    ///
    /// One device alone gets every run, as [`MemoryManager::allocate_buffers`]
    /// would. Every run is in exactly one portion; a device that takes no part
    /// says why ([`DeviceSetBuffers::split`]). The registrations need an
    /// invalidate hook, as for one device. A failure leaves nothing
    /// registered or allocated.
    ///
    /// [`MemoryManager::allocate_buffers`]: crate::MemoryManager::allocate_buffers
    pub fn allocate<B: GpuBuffers>(
        &self,
        total_runs: usize,
        throughput: &Throughput,
        registration: impl Fn(usize) -> Registration,
        dims: impl Fn(usize) -> B::Dims,
    ) -> Result<DeviceSetBuffers<'_, B>, MemError> {
        check_distinct(self)?;
        if self.is_empty() {
            return Err(MemError::Config {
                name: "DeviceSet".into(),
                value: "no device".into(),
                reason: "a batch needs at least one device: make the set with a manager per device"
                    .into(),
            });
        }
        let requests = B::requests(&dims(total_runs));
        let sizes = BatchSizes::measure(requests.iter())?;
        if sizes.total_runs != total_runs.max(1) {
            return Err(MemError::Config {
                name: "DeviceSet::allocate total_runs".into(),
                value: total_runs.to_string(),
                reason: format!(
                    "the requests of dims(total_runs) have {} runs; make dims(runs) give arrays of \
                     `runs` runs on their run axis",
                    sizes.total_runs
                ),
            });
        }
        let instances = self.register(&registration)?;
        let split = self.split_among(&sizes, &instances, throughput)?;
        let mut portions = Vec::new();
        for (device, instance) in instances.into_iter().enumerate() {
            let Some(runs) = split.range(device).filter(|runs| !runs.is_empty()) else {
                continue;
            };
            let manager = &self.managers()[device];
            let buffers = manager.allocate_buffers::<B>(&instance, &dims(runs.len()))?;
            portions.push(DevicePortion {
                device,
                runs,
                instance,
                buffers,
            });
        }
        Ok(DeviceSetBuffers {
            set: self,
            portions,
            split,
            total_runs,
        })
    }

    /// How [`allocate`](Self::allocate) would split a batch of `requests`
    /// now, without allocating: for a batch you allocate yourself on each
    /// device (`registration` gives the group and caps each device's
    /// budget is taken for; nothing stays registered).
    pub fn split(
        &self,
        requests: &RequestSet,
        throughput: &Throughput,
        registration: impl Fn(usize) -> Registration,
    ) -> Result<Split, MemError> {
        check_distinct(self)?;
        let sizes = BatchSizes::measure(requests.iter())?;
        let instances = self.register(&registration)?;
        self.split_among(&sizes, &instances, throughput)
    }

    /// Registers `registration(device)` on every device.
    fn register(
        &self,
        registration: &impl Fn(usize) -> Registration,
    ) -> Result<Vec<Instance>, MemError> {
        self.managers()
            .iter()
            .enumerate()
            .map(|(device, manager)| manager.register(registration(device)))
            .collect()
    }

    /// The split of a batch of `sizes` among the devices, each budgeted
    /// for its instance in `instances`.
    fn split_among(
        &self,
        sizes: &BatchSizes,
        instances: &[Instance],
        throughput: &Throughput,
    ) -> Result<Split, MemError> {
        let weights = self.weights(throughput)?;
        let capacities = self
            .managers()
            .iter()
            .zip(instances)
            .zip(weights)
            .map(|((manager, instance), weight)| {
                let budget = manager.batch_budget(instance)?;
                Ok(DeviceCapacity {
                    allocatable: budget
                        .allocatable()
                        .map_or(0, |(allocatable, _)| allocatable),
                    weight,
                })
            })
            .collect::<Result<Vec<_>, MemError>>()?;
        split(sizes, &capacities)
    }

    /// Each device's weight for `throughput`.
    fn weights(&self, throughput: &Throughput) -> Result<Vec<u64>, MemError> {
        match throughput {
            Throughput::Equal => Ok(vec![EQUAL_WEIGHT; self.len()]),
            Throughput::Modelled(workload) => {
                let rates: Vec<_> = self
                    .managers()
                    .iter()
                    .map(|manager| manager.backend().engine_rates())
                    .collect();
                Ok(weights(workload, &rates))
            }
            Throughput::Weights(given) if given.len() == self.len() => Ok(given.clone()),
            Throughput::Weights(given) => Err(MemError::Config {
                name: "Throughput::Weights".into(),
                value: format!("{} weight(s)", given.len()),
                reason: format!(
                    "the set has {} device(s): give one weight per device",
                    self.len()
                ),
            }),
        }
    }
}
