//! Bytes released or held, device and pinned apart ([`Freed`]): what
//! releasing arrays frees, what an owner holds, and what eviction would
//! give a batch, which can count released pinned bytes only toward its own
//! pinned arrays.

use crate::MemoryKind;

/// Bytes released (or held), device and pinned apart: a batch counts
/// released pinned bytes only toward its own pinned arrays, since a device
/// allocation cannot obtain them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Freed {
    pub(crate) device: u64,
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
