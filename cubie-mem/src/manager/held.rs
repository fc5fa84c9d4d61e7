//! What instances hold: each instance's arrays by label ([`HeldArrays`]),
//! the labels they share ([`Labels`]), and bytes held or freed
//! ([`Freed`]).
//!
//! Built for thousands of instances, where each cache miss per array
//! counts:
//! - the arrays sit in a list in the order their labels were first placed,
//!   searched from a hint (a solver requests the same labels in the same
//!   order each call, so a batch's look-up reads the list front to back,
//!   prefetched); a label off its hint is found by a linear search;
//! - labels are interned, so every instance compares with one shared
//!   string, not a copy of its own;
//! - each buffer keeps a copy of its layout, so a batch that keeps every
//!   buffer reads neither a slot nor its reference count.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use crate::array::ResponseArrays;
use crate::array::slot::{Shape, Slot};
use crate::{DType, MemoryKind};

/// A held buffer, with a copy of its slot's layout.
pub(crate) struct HeldBuffer {
    /// The allocation.
    slot: Arc<Slot>,
    /// Its memory kind.
    kind: MemoryKind,
    /// Its element type.
    dtype: DType,
    /// The array's own bytes.
    bytes: u64,
    /// The bytes of the buffer holding it.
    capacity: u64,
    /// The array's shape.
    shape: Shape,
}

impl HeldBuffer {
    /// `slot`, its layout copied.
    pub(crate) fn new(slot: Arc<Slot>) -> Self {
        HeldBuffer {
            kind: slot.kind(),
            dtype: slot.dtype(),
            bytes: slot.bytes(),
            capacity: slot.capacity(),
            shape: Shape::from_slice(slot.shape()),
            slot,
        }
    }

    /// The slot.
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Gives the array a new type and shape in place when no one else
    /// holds its slot (no handle, no response); returns whether it did.
    pub(crate) fn reshape_in_place(
        &mut self,
        dtype: DType,
        shape: &[usize],
        chunk_axis: Option<usize>,
    ) -> bool {
        let Some(slot) = Arc::get_mut(&mut self.slot) else {
            return false;
        };
        slot.reshape(dtype, shape, chunk_axis);
        self.dtype = dtype;
        self.bytes = slot.bytes();
        self.shape = Shape::from_slice(shape);
        true
    }

    /// The slot, leaving the buffer.
    pub(crate) fn into_slot(self) -> Arc<Slot> {
        self.slot
    }

    /// The memory kind.
    pub(crate) fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// The element type.
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    /// The array's own bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The bytes of the buffer holding it.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The array's shape.
    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }
}

/// An array's buffers held by an instance, one per buffer set, inline for up
/// to two sets (looking an array up then touches no further allocation).
pub(crate) type HeldSets = smallvec::SmallVec<[HeldBuffer; 2]>;

/// An instance's arrays: per label, the buffer of each buffer set in set
/// order (`[set 0, set 1, ..]`), one for an unchunkable array or a plan of
/// one set. A label's list is never left empty by the manager.
///
/// Every change drops the arrays of the last response
/// ([`Self::delivered`]): they are offered again only while nothing changed.
#[derive(Default)]
pub(crate) struct HeldArrays {
    /// Each label with its buffers, in the order first placed.
    entries: Vec<(Arc<str>, HeldSets)>,
    /// The arrays of the last response, while nothing changed.
    delivered: Option<ResponseArrays>,
}

impl HeldArrays {
    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The position of `label`, searched from the front.
    fn find(&self, label: &str) -> Option<usize> {
        self.entries.iter().position(|(held, _)| **held == *label)
    }

    /// The position of `label`, looked for first at `hint`.
    fn position(&self, label: &str, hint: usize) -> Option<usize> {
        match self.entries.get(hint) {
            Some((held, _)) if **held == *label => Some(hint),
            _ => self.find(label),
        }
    }

    /// The position of `label` in the list, looked for first at `hint`.
    /// Positions stay valid while labels are only added, as in one
    /// `allocate_queue` call from looking its buffers up to committing.
    pub(crate) fn find_near(&self, label: &str, hint: usize) -> Option<usize> {
        self.position(label, hint)
    }

    /// The buffers at position `index` ([`Self::find_near`]).
    pub(crate) fn sets_at(&self, index: usize) -> Option<&HeldSets> {
        self.entries.get(index).map(|(_, sets)| sets)
    }

    /// The buffers at position `index`, writable.
    pub(crate) fn sets_at_mut(&mut self, index: usize) -> Option<&mut HeldSets> {
        let (_, sets) = self.entries.get_mut(index)?;
        self.delivered = None;
        Some(sets)
    }

    /// The position of the buffers held under `label`, an empty list added
    /// for a new label.
    pub(crate) fn sets_for(&mut self, label: &Arc<str>) -> usize {
        self.delivered = None;
        match self.find(label) {
            Some(index) => index,
            None => {
                self.entries.push((Arc::clone(label), HeldSets::new()));
                self.entries.len() - 1
            }
        }
    }

    /// Removes and returns the buffers held under `label`.
    pub(crate) fn remove(&mut self, label: &str) -> Option<HeldSets> {
        let index = self.find(label)?;
        self.delivered = None;
        Some(self.entries.remove(index).1)
    }

    /// Keeps the labels whose buffers `keep` returns true for (it may
    /// change them), in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&mut HeldSets) -> bool) {
        self.delivered = None;
        self.entries.retain_mut(|(_, sets)| keep(sets));
    }

    /// Every label's buffers, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &HeldSets> {
        self.entries.iter().map(|(_, sets)| sets)
    }

    /// Every label with its buffers, in order.
    pub(crate) fn labelled(&self) -> impl Iterator<Item = (&str, &HeldSets)> {
        self.entries.iter().map(|(label, sets)| (&**label, sets))
    }

    /// Every buffer held.
    pub(crate) fn buffers(&self) -> impl Iterator<Item = &HeldBuffer> {
        self.values().flatten()
    }

    /// Every slot held.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &Arc<Slot>> {
        self.buffers().map(HeldBuffer::slot)
    }

    /// Takes the arrays of the last response, if nothing changed since.
    pub(crate) fn take_delivered(&mut self) -> Option<ResponseArrays> {
        self.delivered.take()
    }

    /// Remembers the arrays of the response just built from the buffers
    /// held now.
    pub(crate) fn set_delivered(&mut self, arrays: ResponseArrays) {
        self.delivered = Some(arrays);
    }
}

/// Entries kept at least before unused labels are dropped.
const MIN_PRUNE: usize = 64;

/// The labels in use. A label no array holds any more is dropped once the
/// set has doubled since it was last pruned, so its size stays within
/// twice the labels in use (and [`MIN_PRUNE`]).
#[derive(Default)]
pub(crate) struct Labels {
    /// One string per label.
    labels: FxHashSet<Arc<str>>,
    /// The size at which unused labels are dropped next.
    prune_at: usize,
}

impl Labels {
    /// The shared string for `label`.
    pub(crate) fn intern(&mut self, label: &str) -> Arc<str> {
        if let Some(shared) = self.labels.get(label) {
            return Arc::clone(shared);
        }
        if self.labels.len() >= self.prune_at {
            self.labels.retain(|shared| Arc::strong_count(shared) > 1);
            self.prune_at = self.labels.len().saturating_mul(2).max(MIN_PRUNE);
        }
        let shared: Arc<str> = Arc::from(label);
        self.labels.insert(Arc::clone(&shared));
        shared
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.labels.len()
    }
}

/// Bytes released (or held), device and pinned apart: a batch counts
/// released pinned bytes only toward its own pinned arrays, since a device
/// allocation cannot obtain them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Freed {
    /// Device bytes.
    pub(crate) device: u64,
    /// Page-locked host bytes.
    pub(crate) pinned: u64,
}

impl Freed {
    /// `bytes` of memory of `kind`.
    pub(crate) fn of(bytes: u64, kind: MemoryKind) -> Self {
        match kind {
            MemoryKind::Device => Freed {
                device: bytes,
                pinned: 0,
            },
            MemoryKind::Pinned => Freed {
                device: 0,
                pinned: bytes,
            },
        }
    }

    /// Both, added (saturating).
    pub(crate) fn plus(self, other: Freed) -> Freed {
        Freed {
            device: self.device.saturating_add(other.device),
            pinned: self.pinned.saturating_add(other.pinned),
        }
    }

    /// What a batch requesting `pinned_requested` bytes of pinned arrays
    /// can obtain from these bytes: every device byte, and pinned bytes up
    /// to its pinned arrays.
    pub(crate) fn credit(self, pinned_requested: u64) -> u64 {
        self.device
            .saturating_add(self.pinned.min(pinned_requested))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimBackend;
    use crate::backend::Backend;
    use crate::ids::OwnerId;
    use crate::resource::OwnedStream;

    fn slot(dtype: DType, shape: &[usize]) -> Arc<Slot> {
        let backend: Arc<dyn Backend> = Arc::new(SimBackend::new(1 << 20));
        let stream = OwnedStream::create(&backend).unwrap();
        let bytes = shape.iter().product::<usize>() as u64 * dtype.size_bytes() as u64;
        Slot::allocate(
            &backend,
            OwnerId::fresh(),
            Arc::from("x"),
            dtype,
            MemoryKind::Device,
            bytes,
            Shape::from_slice(shape),
            Some(0),
            &stream,
        )
        .unwrap()
    }

    fn layout(held: &HeldBuffer) -> (MemoryKind, DType, u64, u64, Vec<usize>) {
        (
            held.kind(),
            held.dtype(),
            held.bytes(),
            held.capacity(),
            held.shape().to_vec(),
        )
    }

    #[test]
    fn a_buffer_reshaped_in_place_copies_its_new_layout() {
        let mut held = HeldBuffer::new(slot(DType::F64, &[10, 4]));
        assert_eq!(
            layout(&held),
            (MemoryKind::Device, DType::F64, 320, 320, vec![10, 4])
        );
        assert!(held.reshape_in_place(DType::F32, &[3, 5], Some(1)));
        assert_eq!(
            layout(&held),
            (MemoryKind::Device, DType::F32, 60, 320, vec![3, 5]),
            "the buffer keeps its capacity"
        );
        let slot = held.slot();
        assert_eq!(
            (slot.dtype(), slot.bytes(), slot.shape()),
            (DType::F32, 60, &[3, 5][..])
        );
    }

    #[test]
    fn a_buffer_someone_else_holds_is_not_reshaped() {
        let mut held = HeldBuffer::new(slot(DType::F64, &[10]));
        let handle = Arc::clone(held.slot());
        assert!(!held.reshape_in_place(DType::F32, &[2], None));
        assert_eq!(layout(&held).1, DType::F64);
        assert_eq!(handle.shape(), &[10]);
    }

    #[test]
    fn any_change_forgets_the_last_response() {
        let changes: [fn(&mut HeldArrays); 4] = [
            |held| assert!(held.sets_at_mut(0).is_some()),
            |held| assert_eq!(held.sets_for(&Arc::from("b")), 1),
            |held| assert!(held.remove("a").is_some()),
            |held| held.retain(|_| true),
        ];
        for change in changes {
            let mut held = HeldArrays::default();
            let a = held.sets_for(&Arc::from("a"));
            if let Some(sets) = held.sets_at_mut(a) {
                sets.push(HeldBuffer::new(slot(DType::U8, &[1])));
            }
            held.set_delivered(ResponseArrays::from(Vec::new()));
            change(&mut held);
            assert!(held.take_delivered().is_none());
        }
        let mut held = HeldArrays::default();
        held.set_delivered(ResponseArrays::from(Vec::new()));
        assert!(held.find_near("a", 0).is_none());
        assert!(held.sets_at(0).is_none());
        assert!(held.take_delivered().is_some(), "reading changes nothing");
    }

    fn labels(held: &HeldArrays) -> Vec<&str> {
        held.entries.iter().map(|(label, _)| &**label).collect()
    }

    #[test]
    fn labels_are_found_at_their_hint_or_anywhere_else() {
        let mut held = HeldArrays::default();
        for label in ["a", "b", "c"] {
            held.sets_for(&Arc::from(label));
        }
        assert_eq!(labels(&held), ["a", "b", "c"]);
        assert_eq!(held.position("b", 1), Some(1));
        assert_eq!(
            held.position("b", 0),
            Some(1),
            "a wrong hint still finds it"
        );
        assert_eq!(held.position("b", 7), Some(1), "a hint past the end too");
        assert_eq!(held.position("d", 0), None);
        assert_eq!(held.find_near("c", 0), Some(2));
        assert!(held.sets_at(2).is_some_and(|sets| sets.is_empty()));
        assert!(held.sets_at(3).is_none());
    }

    #[test]
    fn a_known_label_is_not_added_again_and_removal_keeps_the_order() {
        let mut held = HeldArrays::default();
        for label in ["a", "b", "c", "b"] {
            held.sets_for(&Arc::from(label));
        }
        assert_eq!(labels(&held), ["a", "b", "c"]);
        assert!(held.remove("b").is_some());
        assert!(held.remove("b").is_none());
        assert_eq!(labels(&held), ["a", "c"]);
        held.retain(|_| false);
        assert!(held.is_empty());
    }

    #[test]
    fn one_string_per_label() {
        let mut labels = Labels::default();
        let a = labels.intern("state");
        let b = labels.intern("state");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &labels.intern("status")));
    }

    #[test]
    fn unused_labels_are_dropped_and_used_ones_kept() {
        let mut labels = Labels::default();
        let kept = labels.intern("kept");
        for i in 0..10 * MIN_PRUNE {
            drop(labels.intern(&format!("run {i}")));
        }
        assert!(labels.len() <= MIN_PRUNE + 1, "{} labels", labels.len());
        assert!(Arc::ptr_eq(&kept, &labels.intern("kept")));
    }
}
