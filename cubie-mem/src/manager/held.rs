//! The arrays one instance holds, by label.
//!
//! A list in the order the labels were first placed, searched from a hint:
//! a solver requests the same labels in the same order call after call, so
//! the batch's look-up, which walks each request set in order, finds every
//! label at the position it expects, reading the list front to back. With
//! thousands of instances a hash table per instance cost a cache miss per
//! label (its buckets in hash order); a list read in order is prefetched.
//! A label not at its hint is found by a linear search: instances hold a
//! few arrays each.

use std::sync::Arc;

use crate::array::slot::Slot;

/// An array's buffers held by an instance, one per buffer set, inline for up
/// to two sets (looking an array up then touches no further allocation).
pub(crate) type HeldSets = smallvec::SmallVec<[Arc<Slot>; 2]>;

/// An instance's arrays: per label, the buffer of each buffer set in set
/// order (`[set 0, set 1, ..]`), one for an unchunkable array or a plan of
/// one set. A label's list is never left empty by the manager.
#[derive(Default)]
pub(crate) struct HeldArrays {
    entries: Vec<(Arc<str>, HeldSets)>,
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

    /// The buffers held under `label`, looked for first at position `hint`.
    pub(crate) fn get_near(&self, label: &str, hint: usize) -> Option<&HeldSets> {
        self.position(label, hint)
            .map(|index| &self.entries[index].1)
    }

    /// The buffers held under `label`, writable.
    pub(crate) fn get_mut(&mut self, label: &str) -> Option<&mut HeldSets> {
        let index = self.find(label)?;
        Some(&mut self.entries[index].1)
    }

    /// The buffers held under `label`, an empty list added for a new label.
    pub(crate) fn sets_for(&mut self, label: &Arc<str>) -> &mut HeldSets {
        let index = match self.find(label) {
            Some(index) => index,
            None => {
                self.entries.push((Arc::clone(label), HeldSets::new()));
                self.entries.len() - 1
            }
        };
        &mut self.entries[index].1
    }

    /// Removes and returns the buffers held under `label`.
    pub(crate) fn remove(&mut self, label: &str) -> Option<HeldSets> {
        let index = self.find(label)?;
        Some(self.entries.remove(index).1)
    }

    /// Keeps the labels whose buffers `keep` returns true for (it may
    /// change them), in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&mut HeldSets) -> bool) {
        self.entries.retain_mut(|(_, sets)| keep(sets));
    }

    /// Every label's buffers, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &HeldSets> {
        self.entries.iter().map(|(_, sets)| sets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(held.get_near("d", 0).is_none());
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
}
