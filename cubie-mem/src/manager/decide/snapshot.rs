//! What the decision reads, copied out of the manager's state before it is
//! made: the batch's sizes, the free memory measured, the caps of its
//! stream group, the buffers its participants hold (each compared with
//! its request), the partition its owner remembers and, under physical
//! pressure, the idle owners eviction could release.
//!
//! Reading the state and asking the backend (free memory, owners'
//! completion events) happen in the caller (`gather`), which fills these
//! types; the one reading here is of a held buffer's layout
//! ([`Comparison::compare`]). Everything after works on these figures
//! alone.

use super::super::batch::{Batch, PlacedRequest};
use super::super::held::{Freed, HeldBuffer};
use crate::ids::OwnerId;
use crate::plan::{BatchSizes, Budget};
use crate::{ArrayRequest, MemoryKind};

/// The figures one `allocate_queue` call decides from.
pub(in crate::manager) struct Snapshot<'b> {
    /// The participants and the sets they queued.
    pub(in crate::manager) batch: &'b Batch,
    /// The batch's sizes.
    pub(in crate::manager) sizes: BatchSizes,
    /// The device's free memory, measured for a batch that requests any
    /// bytes (`None`: not measured, nothing is requested).
    pub(in crate::manager) free: Option<u64>,
    /// The buffers the participants hold under the labels they request.
    pub(in crate::manager) held: Held,
    /// The caps of the batch's group, in active mode (`None`: passive).
    pub(in crate::manager) caps: Option<GroupCaps>,
    /// The allocation granule.
    pub(in crate::manager) granule: u64,
    /// The owner's remembered partition `(chunk_length, chunks)`, when a
    /// notary holds arrays laid out for it.
    pub(in crate::manager) remembered: Option<(usize, usize)>,
    /// The idle owners eviction could release, gathered only when the
    /// batch does not fit the free memory, in the order they were found.
    pub(in crate::manager) candidates: Vec<Candidate>,
}

impl Snapshot<'_> {
    /// The bytes the batch asks for, device and pinned (`R`).
    pub(in crate::manager) fn requested(&self) -> u64 {
        self.sizes.total_bytes()
    }

    /// The bytes of the batch's pinned arrays: how much of the pinned
    /// memory eviction releases the batch can count.
    pub(in crate::manager) fn pinned_requested(&self) -> u64 {
        self.batch
            .requests()
            .filter(|(_, request)| request.memory_kind() == MemoryKind::Pinned)
            .fold(0u64, |sum, (_, request)| {
                sum.saturating_add(request.nbytes().unwrap_or(u64::MAX))
            })
    }

    /// Device bytes of the held buffers about to be replaced or reused,
    /// counted as free (`Fe`): none when the free memory was not measured.
    pub(in crate::manager) fn replaced(&self) -> u64 {
        if self.free.is_some() {
            self.held.replaced_bytes()
        } else {
            0
        }
    }

    /// The budget before any eviction: the free memory with the replaced
    /// bytes, the caps' headroom in active mode, and the granule.
    pub(in crate::manager) fn budget(&self) -> Budget {
        Budget {
            effective_free: self.free.unwrap_or(0).saturating_add(self.replaced()),
            cap_headroom: self
                .caps
                .map(|caps| caps.headroom(self.held.replaced_cap_bytes(), 0)),
            granule: self.granule,
        }
    }

    /// The bytes the batch lacks before eviction (`R - Fe + 1`), when
    /// eviction is to be considered: the candidates are then needed.
    pub(in crate::manager) fn shortfall(&self) -> Option<u64> {
        self.budget().shortfall(self.requested())
    }
}

/// The caps of the batch's stream group in active mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::manager) struct GroupCaps {
    /// The sum of its members' caps.
    pub(in crate::manager) caps: u64,
    /// The bytes its members hold, device and pinned.
    pub(in crate::manager) held: u64,
    /// The sum of its members' proportions.
    pub(in crate::manager) proportion: f64,
}

impl GroupCaps {
    /// The bytes its members hold once `evicted` of them are evicted.
    pub(in crate::manager) fn held_after(&self, evicted: u64) -> u64 {
        self.held.saturating_sub(evicted)
    }

    /// `H`: what the caps still allow once `evicted` bytes of the members
    /// are evicted, counting `replaced` bytes (about to be replaced) as
    /// available.
    pub(in crate::manager) fn headroom(&self, replaced: u64, evicted: u64) -> u64 {
        self.caps
            .saturating_sub(self.held_after(evicted).saturating_sub(replaced))
    }
}

/// An idle owner other than the batch's, holding memory the batch could
/// count, as eviction would find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::manager) struct Candidate {
    /// The owner.
    pub(in crate::manager) owner: OwnerId,
    /// When it was last used, on the manager's usage clock.
    pub(in crate::manager) last_used: u64,
    /// What evicting it frees at once (memory an access holds is freed
    /// when the access ends, and not counted).
    pub(in crate::manager) releasable: Freed,
    /// Whether it is in the batch's stream group.
    pub(in crate::manager) in_group: bool,
    /// The bytes it holds in the batch's stream group, device and pinned,
    /// which the group's caps count until it is evicted.
    pub(in crate::manager) group_held: u64,
}

/// The buffers each participant holds under each label it requests (every
/// set held), looked up once for the whole call, in the order of the taken
/// requests.
pub(in crate::manager) struct Held {
    /// The held buffers, compared with their requests, request by request.
    pub(in crate::manager) buffers: Vec<Comparison>,
    /// Per request, in order: how many of `buffers` it has.
    pub(in crate::manager) requests: Vec<PlacedRequest>,
}

/// A held buffer compared with its request when the batch looks it up
/// (from the copy of its layout: no slot is read): every later step reads
/// this summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::manager) struct Comparison {
    /// The held buffer's memory kind.
    pub(in crate::manager) kind: MemoryKind,
    /// The request's memory kind.
    pub(in crate::manager) same_kind: bool,
    /// The same kind, element type and dimensions as the request, but
    /// perhaps for the run axis (of the request's chunk axis in use).
    pub(in crate::manager) same_but_runs: bool,
    /// The held length of that axis (0 without one).
    pub(in crate::manager) runs_held: usize,
    /// The held array's own bytes.
    pub(in crate::manager) bytes: u64,
    /// The bytes of the buffer holding it.
    pub(in crate::manager) capacity: u64,
}

impl Comparison {
    /// `held` compared with `request`.
    pub(in crate::manager) fn compare(held: &HeldBuffer, request: &ArrayRequest) -> Self {
        let axis = request.chunk_axis_in_use();
        let shape = held.shape();
        let same_kind = held.kind() == request.memory_kind();
        let same_but_runs = same_kind
            && held.dtype() == request.dtype()
            && shape.len() == request.shape().len()
            && shape
                .iter()
                .zip(request.shape())
                .enumerate()
                .all(|(i, (held, asked))| Some(i) == axis || held == asked);
        Comparison {
            kind: held.kind(),
            same_kind,
            same_but_runs,
            runs_held: axis.and_then(|axis| shape.get(axis)).copied().unwrap_or(0),
            bytes: held.bytes(),
            capacity: held.capacity(),
        }
    }

    /// Whether the held array is what `request` asks for under a plan of
    /// `chunk_length` runs per chunk: the same kind, element type and
    /// chunked shape.
    pub(in crate::manager) fn keeps(&self, request: &ArrayRequest, chunk_length: usize) -> bool {
        self.same_but_runs
            && request
                .chunk_axis_in_use()
                .is_none_or(|_| self.runs_held == chunk_length)
    }
}

impl Held {
    /// Device bytes of the held buffers, every set: those about to be
    /// replaced or reused, which count as free device memory (`Fe`) at
    /// what they hold (a buffer reused earlier for a smaller array counts
    /// whole), so that a batch plans the same whatever came before it.
    pub(in crate::manager) fn replaced_bytes(&self) -> u64 {
        self.buffers
            .iter()
            .filter(|held| held.kind == MemoryKind::Device)
            .fold(0u64, |sum, held| sum.saturating_add(held.capacity))
    }

    /// Bytes of the held buffers, device and pinned: what the caps count
    /// as available again (`H`).
    pub(in crate::manager) fn replaced_cap_bytes(&self) -> u64 {
        self.buffers
            .iter()
            .fold(0u64, |sum, held| sum.saturating_add(held.capacity))
    }
}
