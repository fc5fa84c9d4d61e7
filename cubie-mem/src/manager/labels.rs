//! One shared string per distinct label of the arrays held.
//!
//! Every instance of a solver holds arrays under the same few labels. With
//! the label interned, each instance's list of held arrays names them by
//! that one string: looking an array up compares with a string every
//! instance shares (in cache), not with a copy of its own (a cache miss per
//! array when thousands are held).

use std::sync::Arc;

use rustc_hash::FxHashSet;

/// Entries kept at least before unused labels are dropped.
const MIN_PRUNE: usize = 64;

/// The labels in use. A label no array holds any more is dropped once the
/// set has doubled since it was last pruned, so its size stays within
/// twice the labels in use (and [`MIN_PRUNE`]).
#[derive(Default)]
pub(crate) struct Labels {
    labels: FxHashSet<Arc<str>>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
