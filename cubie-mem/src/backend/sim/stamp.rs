//! Where an operation sits in its stream ([`Stamp`]), and the bytes a
//! download writes once the host sees it done ([`Landing`]).

/// One operation, where it sits in its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) stream: u64,
    pub(super) position: u64,
}

impl Stamp {
    /// What everything is ordered after: work of a retired stream.
    pub(super) const SEEN: Stamp = Stamp {
        stream: 0,
        position: 0,
    };
}

/// Bytes a copy from the device writes into page-locked memory when the
/// host sees it done: the host address and the data.
pub(super) struct Landing {
    pub(super) address: u64,
    pub(super) data: Vec<u8>,
}
