//! Declared buffer structs: the trait `#[derive(GpuBuffers)]` implements, and
//! the typed result of allocating one.

use std::ops::Deref;

use crate::plan::ChunkPlan;
use crate::{ArrayResponse, Instance, MemError, MemoryManager, Registration, RequestSet};

/// A struct of device and pinned arrays declared once, usually through
/// `#[derive(GpuBuffers)]`: it knows its requests for given dimensions and
/// how to take its arrays out of a response.
pub trait GpuBuffers: Sized {
    /// The dimensions the shapes refer to (number of states, saves, runs...).
    type Dims;
    /// The stream group instances holding these buffers belong to.
    const STREAM_GROUP: &'static str;
    /// The labels of the arrays, in declaration order.
    const LABELS: &'static [&'static str];

    /// The allocation requests for `dims`.
    fn requests(dims: &Self::Dims) -> RequestSet;

    /// Builds the struct from an allocation response holding every label.
    fn from_response(response: ArrayResponse) -> Result<Self, MemError>;

    /// A registration preset in [`GpuBuffers::STREAM_GROUP`], so that an
    /// instance holding these buffers cannot land in the wrong group.
    fn registration() -> Registration {
        Registration::new().stream_group(Self::STREAM_GROUP)
    }
}

/// Buffers allocated by [`MemoryManager::allocate_buffers`], with the chunk
/// plan they were laid out for. Dereferences to the buffer struct.
#[derive(Debug)]
pub struct Allocated<B> {
    buffers: B,
    plan: ChunkPlan,
}

impl<B> Allocated<B> {
    /// The chunk plan the arrays follow.
    pub fn plan(&self) -> &ChunkPlan {
        &self.plan
    }

    /// The buffer struct.
    pub fn into_inner(self) -> B {
        self.buffers
    }
}

impl<B> Deref for Allocated<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.buffers
    }
}

impl MemoryManager {
    /// Queues `B`'s requests for `dims` on `instance`, allocates its stream
    /// group's queue, and returns the typed buffers with their chunk plan.
    ///
    /// The instance must be in `B::STREAM_GROUP` (register it with
    /// [`GpuBuffers::registration`]).
    pub fn allocate_buffers<B: GpuBuffers>(
        &self,
        instance: &Instance,
        dims: &B::Dims,
    ) -> Result<Allocated<B>, MemError> {
        self.queue_buffers::<B>(instance, dims)?;
        let response = self.allocate_queue_for(instance)?;
        let plan = response.plan;
        Ok(Allocated {
            buffers: B::from_response(response)?,
            plan,
        })
    }

    /// Queues `B`'s requests for `dims` on `instance` without allocating, so
    /// that several buffer structs of one stream group are planned together:
    /// the next `allocate_buffers` (or `allocate_queue`) in the group serves
    /// them all with one chunk plan, and this instance receives its response
    /// through its `on_allocation_ready` hook (build `B` from it with
    /// [`GpuBuffers::from_response`]).
    ///
    /// The instance must be in `B::STREAM_GROUP`.
    pub fn queue_buffers<B: GpuBuffers>(
        &self,
        instance: &Instance,
        dims: &B::Dims,
    ) -> Result<(), MemError> {
        {
            let s = self.inner.lock();
            let group = s.group_of(instance.id)?;
            if &*group != B::STREAM_GROUP {
                return Err(MemError::StreamGroupMismatch {
                    instance: s.named(instance.id).to_string(),
                    group: group.to_string(),
                    declared: B::STREAM_GROUP,
                });
            }
        }
        self.queue_request(instance, B::requests(dims))
    }
}
