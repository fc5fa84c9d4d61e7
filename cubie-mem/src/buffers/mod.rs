//! Declared buffer structs: the trait `#[derive(GpuBuffers)]` implements,
//! the typed result of allocating one, and tuples of buffer structs
//! allocated as one.

mod host;
mod tuples;

use std::ops::Deref;
use std::sync::Weak;

pub use host::{HostBinder, HostBuffers};

use crate::ChunkPlan;
use crate::array::slot::Slot;
use crate::{ArrayResponse, Instance, MemError, MemoryManager, Registration, RequestSet};

/// A struct of device and pinned arrays declared once, usually through
/// `#[derive(GpuBuffers)]`: it knows its requests for given dimensions and
/// how to take its arrays out of a response.
///
/// A solver of several buffer structs is one too: a struct whose fields
/// marked `#[buffer(part)]` hold buffer structs, or a tuple of buffer
/// structs of one dims type, is allocated, planned and taken as one (the
/// guide's [derive page](crate::guide::derive)).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a buffer struct",
    label = "not a buffer struct",
    note = "derive `GpuBuffers` on it (`#[derive(GpuBuffers)]`), or implement `GpuBuffers` by hand"
)]
pub trait GpuBuffers: Sized {
    /// The dimensions the shapes refer to (number of states, saves, runs...):
    /// with `#[derive(GpuBuffers)]`, the struct named by
    /// `#[buffers(dims = ..)]`, whose `usize` fields the shapes name.
    type Dims;
    /// The stream group instances holding these buffers belong to.
    const STREAM_GROUP: &'static str;
    /// The labels of the arrays, in declaration order (a composed struct's
    /// own buffers' first, then each part's).
    const LABELS: &'static [&'static str];
    /// The dims field (or length) chunked buffers are split along, as
    /// written: how composed structs check that their parts share one run
    /// axis. Set by the derive; not an API.
    #[doc(hidden)]
    const __RUN_AXIS: Option<&'static str> = None;

    /// The allocation requests for `dims`.
    fn requests(dims: &Self::Dims) -> RequestSet;

    /// Builds the struct of buffer set `set` from an allocation response
    /// holding every label, taking that set's arrays out of it (see
    /// [`ArrayResponse::take_set`]): a chunkable buffer's own array in that
    /// set, or the one array of an unchunkable buffer, which every set shares.
    fn from_response_set(response: &mut ArrayResponse, set: usize) -> Result<Self, MemError>;

    /// Builds the struct from an allocation response holding every label:
    /// its buffer set 0, the only set unless the requests have a pipeline
    /// depth above 1.
    fn from_response(mut response: ArrayResponse) -> Result<Self, MemError> {
        Self::from_response_set(&mut response, 0)
    }

    /// Builds the struct of every buffer set of an allocation response, in
    /// set order: `response.buffer_sets()` structs (at least one), where
    /// struct `i` holds set `i`'s arrays.
    fn sets_from_response(mut response: ArrayResponse) -> Result<Vec<Self>, MemError> {
        (0..response.buffer_sets().max(1))
            .map(|set| Self::from_response_set(&mut response, set))
            .collect()
    }

    /// A registration preset in [`GpuBuffers::STREAM_GROUP`], so that an
    /// instance holding these buffers cannot land in the wrong group; the
    /// derive also names it after the struct.
    ///
    /// It has no invalidate hook: add [`Registration::on_invalidate`] before
    /// allocating. The manager may evict the buffers under memory pressure,
    /// and refuses to queue requests for an instance without a hook
    /// ([`MemError::NoInvalidateHook`]); what to do on eviction is the
    /// holder's choice.
    fn registration() -> Registration {
        Registration::new().stream_group(Self::STREAM_GROUP)
    }
}

/// A buffer struct whose requests never ask for more than one buffer set
/// (no `pipeline_depth` above 1), so that an [`Allocated`] of it holds
/// exactly one struct and may dereference to it.
///
/// `#[derive(GpuBuffers)]` implements it unless the struct declares a
/// `pipeline_depth` other than `1`; a hand-written [`GpuBuffers`] may
/// implement it when its requests keep depth 1.
pub trait SingleBufferSet: GpuBuffers {}

/// Buffers allocated by [`MemoryManager::allocate_buffers`], with the chunk
/// plan they were laid out for: one buffer struct per buffer set of the plan
/// ([`ChunkPlan::buffer_sets`]).
///
/// It dereferences to its struct only when there is one set by
/// construction ([`SingleBufferSet`]); with a pipeline depth, name the set:
/// [`set`](Self::set), [`sets`](Self::sets), or hand the sets to
/// [`ChunkStreamer::pipeline_sets`](crate::ChunkStreamer::pipeline_sets).
///
/// The manager owns the memory: dropping this (or the arrays in it) frees
/// nothing while the instance is registered, and a later allocation of
/// the same labels reuses it. [`release`](Self::release) gives it back
/// now; deregistering the instance (dropping its [`Instance`]) does too.
#[derive(Debug)]
pub struct Allocated<B> {
    /// One struct per buffer set, in set order; never empty.
    sets: Vec<B>,
    plan: ChunkPlan,
    /// The buffers of every set, for [`release`](Self::release).
    slots: Vec<Weak<Slot>>,
}

impl<B> Allocated<B> {
    /// `sets` laid out for `plan`; an error when there is no set.
    fn new(sets: Vec<B>, plan: ChunkPlan, slots: Vec<Weak<Slot>>) -> Result<Self, MemError> {
        if sets.is_empty() {
            return Err(MemError::SetOutOfRange {
                label: String::new(),
                set: 0,
                buffer_sets: 0,
            });
        }
        Ok(Allocated { sets, plan, slots })
    }

    /// The buffer struct of set `set`, if the plan has that set.
    pub fn set(&self, set: usize) -> Option<&B> {
        self.sets.get(set)
    }

    /// Frees the arrays of every set now, as
    /// [`MemoryManager::free`] does for one label: later uses of their
    /// handles return [`MemError::Released`]. Arrays the instance no longer
    /// holds (replaced or evicted since) are skipped; an array still in use
    /// (a copy, a kernel, a pinned guard) goes when that use ends.
    pub fn release(self, manager: &MemoryManager, instance: &Instance) -> Result<(), MemError> {
        manager.free_slots(instance, &self.slots)
    }

    /// The chunk plan the arrays follow.
    pub fn plan(&self) -> &ChunkPlan {
        &self.plan
    }

    /// The buffer struct of every set, in set order (never empty): struct
    /// `i` holds set `i`'s arrays. The chunk pipeline computes each chunk in
    /// the set that holds it.
    pub fn sets(&self) -> &[B] {
        &self.sets
    }

    /// The buffer structs of every set, in set order (never empty).
    pub fn into_sets(self) -> Vec<B> {
        self.sets
    }

    /// The buffer struct of set 0 (the others are dropped; their arrays
    /// stay allocated in the manager).
    pub fn into_first(self) -> B {
        let mut sets = self.sets;
        sets.truncate(1);
        // `new` refuses an empty list, so there is a set 0.
        sets.swap_remove(0)
    }
}

impl<B: SingleBufferSet> Allocated<B> {
    /// The buffer struct (the only set).
    pub fn into_inner(self) -> B {
        self.into_first()
    }
}

impl<B: SingleBufferSet> Deref for Allocated<B> {
    type Target = B;
    fn deref(&self) -> &B {
        // `new` refuses an empty list, so there is a set 0.
        &self.sets[0]
    }
}

impl MemoryManager {
    /// Queues `B`'s requests for `dims` on `instance`, allocates its stream
    /// group's queue, and returns the typed buffers of every buffer set with
    /// their chunk plan.
    ///
    /// The instance must be in `B::STREAM_GROUP` (register it with
    /// [`GpuBuffers::registration`]). To plan several buffer structs of one
    /// group together, queue each with
    /// `mgr.queue_request(&instance, B::requests(&dims))` (refused, as here,
    /// for an instance of another group) and allocate the last with this
    /// call or `allocate_queue`.
    pub fn allocate_buffers<B: GpuBuffers>(
        &self,
        instance: &Instance,
        dims: &B::Dims,
    ) -> Result<Allocated<B>, MemError> {
        let mut requests = B::requests(dims);
        requests.declare_group(B::STREAM_GROUP);
        self.queue_request(instance, requests)?;
        let response = self.allocate_queue_for(instance)?;
        let plan = *response.plan();
        let slots = response.untaken_slots();
        Allocated::new(B::sets_from_response(response)?, plan, slots)
    }
}
