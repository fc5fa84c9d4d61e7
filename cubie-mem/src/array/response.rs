//! [`ArrayResponse`]: what `allocate_queue` delivers to each participant.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::handles::{DeviceArray, PinnedArray};
use super::slot::Slot;
use crate::plan::ChunkPlan;
use crate::{Element, MemError, MemoryKind};

/// What `allocate_queue` delivers to each participant: its arrays, allocated
/// at their chunked shapes, and the chunk plan they were laid out for.
///
/// Participants that queued nothing receive a response with no arrays and the
/// same `chunks` and `chunk_length`. The default (empty) response has one
/// chunk of one run.
#[derive(Clone)]
pub struct ArrayResponse {
    /// Number of chunks the batch is split into.
    pub chunks: usize,
    /// Runs per chunk (the last chunk may be shorter).
    pub chunk_length: usize,
    /// The allocated shape of every array, by label.
    pub chunked_shapes: BTreeMap<String, Vec<usize>>,
    /// The full plan, with the byte figures it was made from.
    pub plan: ChunkPlan,
    /// The arrays not yet taken, untyped; each knows its label.
    arrays: Vec<Arc<Slot>>,
}

impl Default for ArrayResponse {
    fn default() -> Self {
        ArrayResponse::new(ChunkPlan::default())
    }
}

impl ArrayResponse {
    pub(crate) fn new(plan: ChunkPlan) -> Self {
        ArrayResponse {
            chunks: plan.chunks,
            chunk_length: plan.chunk_length,
            chunked_shapes: BTreeMap::new(),
            plan,
            arrays: Vec::new(),
        }
    }

    /// An empty response with room for `arrays` arrays.
    pub(crate) fn with_capacity(plan: ChunkPlan, arrays: usize) -> Self {
        let mut response = ArrayResponse::new(plan);
        response.arrays.reserve_exact(arrays);
        response
    }

    /// Adds `slot`, allocated for `label` with `chunked_shape`.
    pub(crate) fn insert(&mut self, label: String, chunked_shape: Vec<usize>, slot: Arc<Slot>) {
        self.chunked_shapes.insert(label, chunked_shape);
        self.arrays.push(slot);
    }

    /// Takes the device array under `label`; an unknown label, a label
    /// already taken, or a different element type or memory kind is an error.
    pub fn take<T: Element>(&mut self, label: &str) -> Result<DeviceArray<T>, MemError> {
        self.take_slot::<T>(label, MemoryKind::Device)
            .map(DeviceArray::from_slot)
    }

    /// Takes the pinned array under `label`, as [`ArrayResponse::take`] does.
    pub fn take_pinned<T: Element>(&mut self, label: &str) -> Result<PinnedArray<T>, MemError> {
        self.take_slot::<T>(label, MemoryKind::Pinned)
            .map(PinnedArray::from_slot)
    }

    /// Labels of the arrays not yet taken.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.arrays.iter().map(|slot| &**slot.label())
    }

    /// Whether the response holds no arrays (a notary's response, or all taken).
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty()
    }

    fn take_slot<T: Element>(
        &mut self,
        label: &str,
        kind: MemoryKind,
    ) -> Result<Arc<Slot>, MemError> {
        let Some(index) = self.arrays.iter().position(|slot| &**slot.label() == label) else {
            if self.chunked_shapes.contains_key(label) {
                return Err(MemError::AlreadyTaken {
                    label: label.to_owned(),
                });
            }
            return Err(MemError::UnknownLabel {
                label: label.to_owned(),
                available: self.labels().collect::<Vec<_>>().join(", "),
            });
        };
        let slot = &self.arrays[index];
        if slot.dtype() != T::DTYPE || slot.kind() != kind {
            let requested = match kind {
                MemoryKind::Device => format!("DeviceArray<{}>", T::DTYPE),
                MemoryKind::Pinned => format!("PinnedArray<{}>", T::DTYPE),
            };
            return Err(MemError::WrongArrayType {
                label: label.to_owned(),
                requested,
                found: slot.describe(),
            });
        }
        Ok(self.arrays.remove(index))
    }
}

impl fmt::Debug for ArrayResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArrayResponse")
            .field("chunks", &self.chunks)
            .field("chunk_length", &self.chunk_length)
            .field("chunked_shapes", &self.chunked_shapes)
            .field(
                "arrays",
                &self
                    .arrays
                    .iter()
                    .map(|slot| (&**slot.label(), slot.describe()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}
