//! [`ArrayResponse`]: what `allocate_queue` delivers to each participant.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use super::handles::{DeviceArray, PinnedArray};
use super::slot::Slot;
use crate::ChunkPlan;
use crate::{Element, MemError, MemoryKind};

/// What `allocate_queue` delivers to each participant: its arrays at their
/// chunked shapes, and the chunk plan they were laid out for.
#[derive(Clone)]
pub struct ArrayResponse {
    /// Number of chunks the batch is split into.
    pub chunks: usize,
    /// Runs per chunk (the last chunk may be shorter).
    pub chunk_length: usize,
    /// The allocated shape of every array, by label (the same in every set).
    pub chunked_shapes: BTreeMap<String, Vec<usize>>,
    /// The full plan, with the byte figures it was made from.
    plan: ChunkPlan,
    /// Every array, in request order (none for a notary).
    arrays: Option<ResponseArrays>,
    /// Per array and set, whether it was taken; empty until the first take.
    taken: Vec<SmallVec<[bool; 2]>>,
}

/// An array's buffers in a response, one per set (inline for up to two).
pub(crate) type SetSlots = SmallVec<[Arc<Slot>; 2]>;

/// The arrays of a response, in request order, shared with later responses
/// that keep every buffer.
pub(crate) type ResponseArrays = Arc<[SetSlots]>;

/// The buffers of an array in a response of `buffer_sets` sets.
pub(crate) fn per_set<T>(buffers: &[T], buffer_sets: usize) -> impl Iterator<Item = &T> {
    let (shared, sets) = match buffers {
        [one] => (Some(one), buffer_sets.max(1)),
        own => (None, own.len()),
    };
    (0..sets).filter_map(move |set| shared.or_else(|| buffers.get(set)))
}

impl Default for ArrayResponse {
    fn default() -> Self {
        ArrayResponse::new(ChunkPlan::default())
    }
}

impl ArrayResponse {
    /// A response to `plan` without arrays: add them with
    /// [`set_arrays`](Self::set_arrays).
    pub(crate) fn new(plan: ChunkPlan) -> Self {
        ArrayResponse {
            chunks: plan.chunks,
            chunk_length: plan.chunk_length,
            chunked_shapes: BTreeMap::new(),
            plan,
            arrays: None,
            taken: Vec::new(),
        }
    }

    /// The chunk plan the arrays were laid out for.
    pub fn plan(&self) -> &ChunkPlan {
        &self.plan
    }

    /// Number of buffer sets (chunks in flight).
    pub fn buffer_sets(&self) -> usize {
        self.plan.buffer_sets
    }

    /// Every array's buffers, in request order.
    fn arrays(&self) -> &[SetSlots] {
        self.arrays.as_deref().unwrap_or_default()
    }

    fn is_taken(&self, array: usize, set: usize) -> bool {
        self.taken
            .get(array)
            .and_then(|sets| sets.get(set))
            .copied()
            .unwrap_or(false)
    }

    /// The buffers of array `array` not yet taken.
    fn untaken(&self, array: usize) -> impl Iterator<Item = &Arc<Slot>> {
        self.arrays()
            .get(array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter(move |&(set, _)| !self.is_taken(array, set))
            .map(|(_, slot)| slot)
    }

    /// The label of array `array`, while a set is not taken.
    fn label_of(&self, array: usize) -> Option<&str> {
        self.untaken(array).next().map(|slot| &**slot.label())
    }

    /// Every buffer not yet taken, weakly, for release.
    pub(crate) fn untaken_slots(&self) -> Vec<std::sync::Weak<Slot>> {
        let mut slots: Vec<std::sync::Weak<Slot>> = Vec::new();
        for slot in (0..self.arrays().len()).flat_map(|array| self.untaken(array)) {
            if !slots
                .iter()
                .any(|seen| std::ptr::eq(seen.as_ptr(), Arc::as_ptr(slot)))
            {
                slots.push(Arc::downgrade(slot));
            }
        }
        slots
    }

    /// Sets the shapes of the arrays, by label, at once.
    pub(crate) fn set_shapes(&mut self, shapes: Vec<(String, Vec<usize>)>) {
        self.chunked_shapes = shapes.into_iter().collect();
    }

    /// Sets the arrays, each with a buffer per set ([`per_set`]).
    pub(crate) fn set_arrays(&mut self, arrays: ResponseArrays) {
        self.arrays = Some(arrays);
        self.taken.clear();
    }

    /// Takes the device array under `label`, of set 0. An unknown label, one
    /// already taken, or another type is an error.
    pub fn take<T: Element>(&mut self, label: &str) -> Result<DeviceArray<T>, MemError> {
        self.take_set::<T>(label, 0)
    }

    /// Takes the pinned array under `label` (of set 0), as [`ArrayResponse::take`] does.
    pub fn take_pinned<T: Element>(&mut self, label: &str) -> Result<PinnedArray<T>, MemError> {
        self.take_pinned_set::<T>(label, 0)
    }

    /// Takes buffer set `set`'s device array under `label`. An unchunkable
    /// array is one buffer that each set can take once.
    ///
    /// ```
    /// use cubie_mem::{ArrayRequest, ManagerConfig, MemoryManager, Registration, SimBackend};
    ///
    /// let mgr = MemoryManager::with_config(
    ///     SimBackend::new(1 << 30).with_free(8_000),
    ///     ManagerConfig { allocation_granule_bytes: 0, ..Default::default() },
    /// );
    /// let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
    /// mgr.queue_request(&solver, [
    ///     ("state", ArrayRequest::of::<f64>([10, 100]).chunk_axis(1).total_runs(100).pipeline_depth(2)),
    ///     ("params", ArrayRequest::of::<f64>([4]).unchunkable()),
    /// ])?;
    /// let mut response = mgr.allocate_queue_for(&solver)?;
    /// assert_eq!(response.buffer_sets(), 2);
    /// let state: Vec<_> = (0..2).map(|set| response.take_set::<f64>("state", set)).collect::<Result<_, _>>()?;
    /// assert_ne!(state[0].with_device_ptr(|p| p)?, state[1].with_device_ptr(|p| p)?); // a buffer per set
    /// let p0 = response.take_set::<f64>("params", 0)?;
    /// let p1 = response.take_set::<f64>("params", 1)?;
    /// assert_eq!(p0.with_device_ptr(|p| p)?, p1.with_device_ptr(|p| p)?); // one buffer for every set
    /// assert!(response.take_set::<f64>("state", 2).is_err());
    /// # Ok::<(), cubie_mem::MemError>(())
    /// ```
    pub fn take_set<T: Element>(
        &mut self,
        label: &str,
        set: usize,
    ) -> Result<DeviceArray<T>, MemError> {
        self.take_slot::<T>(label, set, MemoryKind::Device)
            .map(DeviceArray::from_slot)
    }

    /// Takes buffer set `set`'s pinned array under `label`, as
    /// [`ArrayResponse::take_set`] does.
    pub fn take_pinned_set<T: Element>(
        &mut self,
        label: &str,
        set: usize,
    ) -> Result<PinnedArray<T>, MemError> {
        self.take_slot::<T>(label, set, MemoryKind::Pinned)
            .map(PinnedArray::from_slot)
    }

    /// Whether both responses share one list of arrays.
    #[cfg(test)]
    pub(crate) fn shares_arrays_with(&self, other: &ArrayResponse) -> bool {
        match (&self.arrays, &other.arrays) {
            (Some(mine), Some(theirs)) => Arc::ptr_eq(mine, theirs),
            _ => false,
        }
    }

    /// Labels of the arrays with a set not yet taken.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        (0..self.arrays().len()).filter_map(|array| self.label_of(array))
    }

    /// Whether the response holds no arrays (left).
    pub fn is_empty(&self) -> bool {
        self.labels().next().is_none()
    }

    fn take_slot<T: Element>(
        &mut self,
        label: &str,
        set: usize,
        kind: MemoryKind,
    ) -> Result<Arc<Slot>, MemError> {
        let buffer_sets = self.buffer_sets();
        let Some(index) =
            (0..self.arrays().len()).find(|&array| self.label_of(array) == Some(label))
        else {
            return Err(if !self.chunked_shapes.contains_key(label) {
                MemError::UnknownLabel {
                    label: label.to_owned(),
                    available: self.labels().collect::<Vec<_>>().join(", "),
                }
            } else if set >= buffer_sets.max(1) {
                MemError::SetOutOfRange {
                    label: label.to_owned(),
                    set,
                    buffer_sets,
                }
            } else {
                MemError::AlreadyTaken {
                    label: label.to_owned(),
                }
            });
        };
        let Some(slot) = self.arrays()[index].get(set) else {
            return Err(MemError::SetOutOfRange {
                label: label.to_owned(),
                set,
                buffer_sets,
            });
        };
        if self.is_taken(index, set) {
            return Err(MemError::AlreadyTaken {
                label: label.to_owned(),
            });
        }
        let dtype = crate::dtype::dtype_of::<T>();
        if slot.dtype() != dtype || slot.kind() != kind {
            let requested = match kind {
                MemoryKind::Device => format!("DeviceArray<{dtype}>"),
                MemoryKind::Pinned => format!("PinnedArray<{dtype}>"),
            };
            return Err(MemError::WrongArrayType {
                label: label.to_owned(),
                requested,
                found: slot.describe(),
            });
        }
        let slot = Arc::clone(slot);
        if self.taken.is_empty() {
            self.taken = self
                .arrays()
                .iter()
                .map(|sets| smallvec::smallvec![false; sets.len()])
                .collect();
        }
        if let Some(taken) = self.taken.get_mut(index).and_then(|sets| sets.get_mut(set)) {
            *taken = true;
        }
        Ok(slot)
    }
}

impl fmt::Debug for ArrayResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArrayResponse")
            .field("chunks", &self.chunks)
            .field("chunk_length", &self.chunk_length)
            .field("buffer_sets", &self.buffer_sets())
            .field("chunked_shapes", &self.chunked_shapes)
            .field(
                "arrays",
                &(0..self.arrays().len())
                    .filter_map(|array| {
                        let label = self.label_of(array)?;
                        let sets: Vec<String> = self.arrays()[array]
                            .iter()
                            .enumerate()
                            .map(|(set, slot)| {
                                if self.is_taken(array, set) {
                                    "taken".to_owned()
                                } else {
                                    slot.describe()
                                }
                            })
                            .collect();
                        Some((label, sets))
                    })
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::per_set;

    #[test]
    fn one_buffer_serves_every_set_and_own_buffers_their_own() {
        let listed = |buffers: &[char], sets| per_set(buffers, sets).collect::<String>();
        assert_eq!(listed(&['u'], 3), "uuu");
        assert_eq!(listed(&['u'], 0), "u", "at least one set");
        assert_eq!(listed(&['a', 'b'], 2), "ab");
        assert_eq!(listed(&[], 2), "");
    }
}
