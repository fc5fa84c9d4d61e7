//! One allocation, shared by the manager and every handle to it: live, with
//! its [`Memory`], or released with a [`ReleaseReason`]. The memory is freed
//! when the last reference to it goes.

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::ReleaseReason;
use crate::backend::{Backend, BackendResult};
use crate::ids::OwnerId;
use crate::resource::{DeviceMemory, OwnedStream, PinnedMemory};
use crate::streams::current_stream_for;
use crate::{DType, MemError, MemoryKind};

/// An array's shape, inline for up to four dimensions.
pub(crate) type Shape = smallvec::SmallVec<[usize; 4]>;

/// The memory of a live slot. Cloning it keeps the memory alive.
#[derive(Clone)]
pub(crate) enum Memory {
    Device(Arc<DeviceMemory>),
    Pinned(Arc<PinnedMemory>),
}

enum SlotState {
    Live(Memory),
    Released(ReleaseReason),
}

/// What releasing a slot did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// The memory was freed now.
    Freed,
    /// An access still holds the memory; it is freed when that access ends.
    Deferred,
    /// The slot had already been released.
    AlreadyReleased,
}

/// One allocation: its description and its memory. `repr(C)` keeps the
/// fields read most often in the first cache line.
#[repr(C)]
pub(crate) struct Slot {
    kind: MemoryKind,
    /// The array's own bytes: its shape's elements times the element size.
    bytes: u64,
    /// The bytes of the buffer holding it.
    capacity: u64,
    dtype: DType,
    shape: Shape,
    label: Arc<str>,
    /// The owner of the instance holding it.
    owner: OwnerId,
    /// The axis holding the runs; `None` when unchunkable.
    chunk_axis: Option<usize>,
    backend: Arc<dyn Backend>,
    state: Mutex<SlotState>,
}

/// The bytes of an array of `shape` and `dtype`, saturating.
fn own_bytes(dtype: DType, shape: &[usize]) -> u64 {
    shape.iter().fold(dtype.size_bytes() as u64, |bytes, &d| {
        bytes.saturating_mul(d as u64)
    })
}

impl Slot {
    /// Allocates `bytes` of `kind` memory for `label`. Device memory is
    /// ordered on the thread's current stream when one is bound, else on
    /// `stream`; its free and later copies default to `stream`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn allocate(
        backend: &Arc<dyn Backend>,
        owner: OwnerId,
        label: Arc<str>,
        dtype: DType,
        kind: MemoryKind,
        bytes: u64,
        shape: Shape,
        chunk_axis: Option<usize>,
        stream: &Arc<OwnedStream>,
    ) -> Result<Arc<Slot>, MemError> {
        let memory = match kind {
            MemoryKind::Device => {
                let order = current_stream_for(backend).unwrap_or_else(|| Arc::clone(stream));
                Memory::Device(Arc::new(DeviceMemory::allocate(
                    backend, bytes, &label, stream, order,
                )?))
            }
            MemoryKind::Pinned => {
                let block = backend.alloc_pinned(bytes).for_array(&**backend, &label)?;
                Memory::Pinned(Arc::new(RwLock::new(block)))
            }
        };
        Ok(Arc::new(Slot {
            label,
            owner,
            dtype,
            kind,
            bytes,
            capacity: bytes,
            shape,
            chunk_axis,
            backend: Arc::clone(backend),
            state: Mutex::new(SlotState::Live(memory)),
        }))
    }

    /// A new slot taking over this slot's memory for a new type and shape;
    /// this slot's handles then report `Replaced`.
    pub(crate) fn reuse(&self, dtype: DType, shape: Shape, chunk_axis: Option<usize>) -> Arc<Slot> {
        let previous = std::mem::replace(
            &mut *self.state.lock(),
            SlotState::Released(ReleaseReason::Replaced),
        );
        Arc::new(Slot {
            label: Arc::clone(&self.label),
            owner: self.owner,
            dtype,
            kind: self.kind,
            bytes: own_bytes(dtype, &shape),
            capacity: self.capacity,
            shape,
            chunk_axis,
            backend: Arc::clone(&self.backend),
            state: Mutex::new(previous),
        })
    }

    /// Gives this slot a new type and shape in place (no handle refers to it).
    pub(crate) fn reshape(&mut self, dtype: DType, shape: &[usize], chunk_axis: Option<usize>) {
        self.dtype = dtype;
        self.shape = Shape::from_slice(shape);
        self.chunk_axis = chunk_axis;
        self.bytes = own_bytes(dtype, shape);
    }

    /// Marks the slot released for `reason` and frees its memory unless an
    /// access still holds it (then the last access frees it). Never waits.
    pub(crate) fn release(&self, reason: ReleaseReason) -> Result<Release, MemError> {
        let previous = std::mem::replace(&mut *self.state.lock(), SlotState::Released(reason));
        match previous {
            SlotState::Live(Memory::Device(memory)) => match Arc::try_unwrap(memory) {
                Ok(memory) => memory.free().map(|()| Release::Freed),
                Err(_shared) => Ok(Release::Deferred),
            },
            SlotState::Live(Memory::Pinned(memory)) => match Arc::try_unwrap(memory) {
                Ok(_freed) => Ok(Release::Freed),
                Err(_shared) => Ok(Release::Deferred),
            },
            SlotState::Released(_) => Ok(Release::AlreadyReleased),
        }
    }

    /// Whether releasing the slot now would free its memory at once.
    pub(crate) fn frees_on_release(&self) -> bool {
        match &*self.state.lock() {
            SlotState::Live(Memory::Device(memory)) => Arc::strong_count(memory) == 1,
            SlotState::Live(Memory::Pinned(memory)) => Arc::strong_count(memory) == 1,
            SlotState::Released(_) => false,
        }
    }

    /// The memory, for an access; `Released` when it is gone.
    pub(crate) fn memory(&self) -> Result<Memory, MemError> {
        match &*self.state.lock() {
            SlotState::Live(memory) => Ok(memory.clone()),
            SlotState::Released(reason) => Err(self.released(*reason)),
        }
    }

    /// Orders the free and later copies of device memory on `stream`.
    pub(crate) fn set_stream(&self, stream: &Arc<OwnedStream>) {
        if let SlotState::Live(Memory::Device(memory)) = &*self.state.lock() {
            memory.set_group_stream(stream);
        }
    }

    /// The stream work on `memory` is queued on, ordered after its last use.
    pub(crate) fn use_stream(&self, memory: &DeviceMemory) -> Result<Arc<OwnedStream>, MemError> {
        let stream = self.work_stream(memory);
        memory.use_on(&stream)?;
        Ok(stream)
    }

    /// The stream work on `memory` goes to: the current one, else the group's.
    pub(crate) fn work_stream(&self, memory: &DeviceMemory) -> Arc<OwnedStream> {
        self.current_stream()
            .unwrap_or_else(|| memory.group_stream())
    }

    /// The thread's current stream for this slot's backend, if one is bound.
    pub(crate) fn current_stream(&self) -> Option<Arc<OwnedStream>> {
        current_stream_for(&self.backend)
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// The owner of the instance holding the array.
    pub(crate) fn owner(&self) -> OwnerId {
        self.owner
    }

    pub(crate) fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// The array's own bytes, not its buffer's.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The bytes of the buffer holding the array, reusable by its label.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The axis holding the runs, if the array holds any.
    pub(crate) fn chunk_axis(&self) -> Option<usize> {
        self.chunk_axis
    }

    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub(crate) fn kind(&self) -> MemoryKind {
        self.kind
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    /// Why the memory is gone, if it is.
    pub(crate) fn release_reason(&self) -> Option<ReleaseReason> {
        match &*self.state.lock() {
            SlotState::Live(_) => None,
            SlotState::Released(reason) => Some(*reason),
        }
    }

    pub(crate) fn is_live(&self) -> bool {
        self.release_reason().is_none()
    }

    /// The error a use of a released slot returns.
    pub(crate) fn released(&self, reason: ReleaseReason) -> MemError {
        MemError::Released {
            label: self.label.to_string(),
            reason,
        }
    }

    /// `DeviceArray<f64>`-style description, for type errors.
    pub(crate) fn describe(&self) -> String {
        let kind = match self.kind {
            MemoryKind::Device => "DeviceArray",
            MemoryKind::Pinned => "PinnedArray",
        };
        format!("{kind}<{}>", self.dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimBackend;

    fn setup() -> (Arc<dyn Backend>, SimBackend, Arc<OwnedStream>) {
        let sim = SimBackend::new(1 << 20);
        let backend: Arc<dyn Backend> = Arc::new(sim.clone());
        let stream = OwnedStream::create(&backend).unwrap();
        (backend, sim, stream)
    }

    fn device_slot(backend: &Arc<dyn Backend>, stream: &Arc<OwnedStream>) -> Arc<Slot> {
        Slot::allocate(
            backend,
            OwnerId::fresh(),
            Arc::from("x"),
            DType::U8,
            MemoryKind::Device,
            100,
            Shape::from_slice(&[100]),
            Some(0),
            stream,
        )
        .unwrap()
    }

    #[test]
    fn release_frees_at_once_without_accesses() {
        let (backend, sim, stream) = setup();
        let slot = device_slot(&backend, &stream);
        assert_eq!(sim.live_allocations(), 1);
        assert_eq!(slot.release(ReleaseReason::Freed).unwrap(), Release::Freed);
        assert_eq!(sim.live_allocations(), 0);
        assert_eq!(
            slot.release(ReleaseReason::Freed).unwrap(),
            Release::AlreadyReleased
        );
        assert!(matches!(slot.memory(), Err(MemError::Released { .. })));
    }

    #[test]
    fn release_during_an_access_defers_the_free_to_its_end() {
        let (backend, sim, stream) = setup();
        let slot = device_slot(&backend, &stream);
        let access = slot.memory().unwrap();
        assert_eq!(
            slot.release(ReleaseReason::Evicted).unwrap(),
            Release::Deferred
        );
        assert_eq!(slot.release_reason(), Some(ReleaseReason::Evicted));
        assert_eq!(sim.live_allocations(), 1, "still in use");
        drop(access);
        assert_eq!(sim.live_allocations(), 0);
    }

    #[test]
    fn reuse_moves_the_memory_and_retires_the_old_slot() {
        let (backend, sim, stream) = setup();
        let slot = device_slot(&backend, &stream);
        let new = slot.reuse(DType::I32, Shape::from_slice(&[5]), Some(0));
        assert_eq!(slot.release_reason(), Some(ReleaseReason::Replaced));
        assert_eq!(new.shape(), [5]);
        assert_eq!((new.bytes(), new.capacity()), (20, 100));
        assert_eq!(sim.live_allocations(), 1);
        assert!(slot.memory().is_err());
        assert_eq!(
            slot.reuse(DType::U8, Shape::from_slice(&[1]), None)
                .release_reason(),
            Some(ReleaseReason::Replaced),
            "a released slot yields a released slot"
        );
        drop(new);
        assert_eq!(sim.live_allocations(), 0, "the last reference frees");
    }

    #[test]
    fn a_freed_slot_keeps_its_stream_alive_until_the_memory_goes() {
        let (backend, sim, stream) = setup();
        let slot = device_slot(&backend, &stream);
        let access = slot.memory().unwrap();
        slot.release(ReleaseReason::Freed).unwrap();
        drop(stream);
        assert_eq!(sim.live_streams(), 1, "the pending free is ordered on it");
        drop(access);
        assert_eq!(sim.live_streams(), 0);
        assert_eq!(sim.live_allocations(), 0);
    }
}
