//! Whom eviction releases for a batch: the idle owners the snapshot found,
//! least recently used first (ties by owner id, which is registration
//! order), whole owners at a time, until what they free covers the bytes
//! the batch lacks.

use super::super::held::Freed;
use super::snapshot::Candidate;
use crate::ids::OwnerId;

/// The owners chosen to be evicted for a batch, before anyone is: what
/// evicting them would give the batch decides whether they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::manager) struct Victims {
    /// The owners, least recently used first.
    pub(in crate::manager) owners: Vec<OwnerId>,
    /// The bytes the batch could count: device bytes, and pinned bytes up
    /// to its own pinned arrays.
    pub(in crate::manager) credit: u64,
    /// The bytes (device and pinned) they free in the batch's stream
    /// group, which its members' caps see again (`H`).
    pub(in crate::manager) in_group: u64,
    /// The bytes (device and pinned) they hold in the batch's stream
    /// group: what the group holds less once they are evicted, an access
    /// holding some or not.
    pub(in crate::manager) group_held: u64,
}

/// Chooses among `candidates` (idle owners other than the batch's, each
/// holding memory the batch could count), least recently used first (ties
/// in registration order) and whole owners at a time, until evicting them
/// would free `needed` bytes the batch can obtain: device bytes, and
/// pinned bytes up to the batch's own pinned arrays (`pinned_requested`),
/// since pinned arrays count wherever device arrays do, as in cubie, but a
/// device allocation cannot obtain page-locked host memory. Memory an
/// access holds is freed only when the access ends, so it does not count.
pub(in crate::manager) fn choose_victims(
    candidates: &[Candidate],
    needed: u64,
    pinned_requested: u64,
) -> Victims {
    let mut order: Vec<&Candidate> = candidates.iter().collect();
    order.sort_unstable_by_key(|candidate| (candidate.last_used, candidate.owner));
    let mut victims = Victims::default();
    let mut released = Freed::default();
    for candidate in order {
        if released.credit(pinned_requested) >= needed {
            break;
        }
        let held = candidate.releasable;
        released = released.plus(held);
        if candidate.in_group {
            victims.in_group = victims
                .in_group
                .saturating_add(held.device.saturating_add(held.pinned));
            victims.group_held = victims.group_held.saturating_add(candidate.group_held);
        }
        victims.owners.push(candidate.owner);
    }
    victims.credit = released.credit(pinned_requested);
    victims
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Owners made in registration order.
    fn owners(n: usize) -> Vec<OwnerId> {
        (0..n).map(|_| OwnerId::fresh()).collect()
    }

    fn candidate(owner: OwnerId, last_used: u64, device: u64, pinned: u64) -> Candidate {
        Candidate {
            owner,
            last_used,
            releasable: Freed { device, pinned },
            in_group: false,
            group_held: 0,
        }
    }

    #[test]
    fn the_least_recently_used_go_first_until_enough_is_freed() {
        let o = owners(4);
        let candidates = [
            candidate(o[0], 7, 100, 0),
            candidate(o[1], 3, 100, 0),
            candidate(o[2], 5, 100, 0),
            candidate(o[3], 9, 100, 0),
        ];
        let victims = choose_victims(&candidates, 150, 0);
        assert_eq!(victims.owners, [o[1], o[2]]);
        assert_eq!(victims.credit, 200);
        assert_eq!(choose_victims(&candidates, 1, 0).owners, [o[1]]);
        assert_eq!(choose_victims(&candidates, 0, 0).owners, []);
        let all = choose_victims(&candidates, 10_000, 0);
        assert_eq!(all.owners, [o[1], o[2], o[0], o[3]], "all, still short");
        assert_eq!(all.credit, 400);
    }

    #[test]
    fn ties_go_in_registration_order() {
        let o = owners(3);
        let candidates = [
            candidate(o[2], 1, 10, 0),
            candidate(o[0], 1, 10, 0),
            candidate(o[1], 1, 10, 0),
        ];
        assert_eq!(
            choose_victims(&candidates, 25, 0).owners,
            [o[0], o[1], o[2]]
        );
    }

    #[test]
    fn pinned_bytes_count_only_toward_the_batch_s_pinned_arrays() {
        let o = owners(2);
        let candidates = [candidate(o[0], 0, 0, 500), candidate(o[1], 1, 100, 0)];
        let device_only = choose_victims(&candidates, 100, 0);
        assert_eq!(device_only.owners, [o[0], o[1]]);
        assert_eq!(device_only.credit, 100);
        let with_pinned = choose_victims(&candidates, 100, 300);
        assert_eq!(with_pinned.owners, [o[0]]);
        assert_eq!(with_pinned.credit, 300);
    }

    #[test]
    fn the_group_s_bytes_count_the_victims_in_it() {
        let o = owners(2);
        let mut a = candidate(o[0], 0, 100, 20);
        a.in_group = true;
        a.group_held = 150;
        let b = candidate(o[1], 1, 100, 0);
        let victims = choose_victims(&[a, b], 200, 0);
        assert_eq!((victims.in_group, victims.group_held), (120, 150));
    }

    proptest! {
        #![proptest_config(crate::proptest_cases(500))]

        /// The victims are candidates, least recently used first, and the
        /// fewest in that order: every one but the last still left the
        /// batch short, and only running out of candidates leaves it short.
        #[test]
        fn victims_are_the_shortest_lru_prefix_that_covers_the_need(
            figures in prop::collection::vec((0u64..6, 0u64..1_000, 0u64..1_000), 0..8),
            needed in 0u64..5_000,
            pinned_requested in 0u64..2_000,
        ) {
            let o = owners(figures.len());
            let candidates: Vec<Candidate> = figures
                .iter()
                .zip(&o)
                .map(|(&(used, device, pinned), &owner)| candidate(owner, used, device, pinned))
                .collect();
            let victims = choose_victims(&candidates, needed, pinned_requested);
            let mut lru = candidates.clone();
            lru.sort_by_key(|c| (c.last_used, c.owner));
            let prefix: Vec<OwnerId> = lru.iter().take(victims.owners.len()).map(|c| c.owner).collect();
            prop_assert_eq!(&victims.owners, &prefix);
            let credit = |n: usize| {
                lru.iter()
                    .take(n)
                    .fold(Freed::default(), |sum, c| sum.plus(c.releasable))
                    .credit(pinned_requested)
            };
            prop_assert_eq!(victims.credit, credit(victims.owners.len()));
            if let Some(fewer) = victims.owners.len().checked_sub(1) {
                prop_assert!(credit(fewer) < needed);
            }
            prop_assert!(victims.credit >= needed || victims.owners.len() == lru.len());
        }
    }
}
