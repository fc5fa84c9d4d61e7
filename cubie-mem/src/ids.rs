//! Identities of instances and owners, unique in the process.
//!
//! Ids come from one process-wide counter, so an [`Instance`](crate::Instance)
//! or [`Owner`](crate::Owner) of one manager never names an entry of another:
//! a manager handed a foreign handle finds nothing under its id and answers
//! with an error (or a neutral value where the call cannot fail).

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The next id of any kind; instance and owner numbers never coincide except
/// for a registration that is its own owner.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> NonZeroU64 {
    // A counter that wrapped after 2^64 ids would skip 0 and restart at 1.
    NonZeroU64::new(NEXT_ID.fetch_add(1, Ordering::Relaxed)).unwrap_or(NonZeroU64::MIN)
}

/// The identity of a registered instance, unique in the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(NonZeroU64);

impl InstanceId {
    pub(crate) fn fresh() -> Self {
        InstanceId(next_id())
    }

    /// The id as a number.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// The owner a registration without `.owner(..)` is: itself.
    pub(crate) fn as_own_owner(self) -> OwnerId {
        OwnerId(self.0)
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instance {}", self.0)
    }
}

/// The identity of an eviction unit, unique in the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(NonZeroU64);

impl OwnerId {
    pub(crate) fn fresh() -> Self {
        OwnerId(next_id())
    }

    /// The id as a number.
    pub fn get(self) -> u64 {
        self.0.get()
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "owner {}", self.0)
    }
}

/// An id with the name its registration gave, for messages: `'rk45' (instance 7)`
/// or `instance 7` when unnamed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named<I> {
    pub(crate) id: I,
    pub(crate) name: Option<Arc<str>>,
}

impl<I: fmt::Display> fmt::Display for Named<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "'{name}' ({})", self.id),
            None => self.id.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_own_owners_share_the_number() {
        let a = InstanceId::fresh();
        let b = InstanceId::fresh();
        let o = OwnerId::fresh();
        assert_ne!(a, b);
        assert_ne!(o.get(), a.get());
        assert_ne!(o.get(), b.get());
        assert_eq!(a.as_own_owner().get(), a.get());
    }

    #[test]
    fn names_show_beside_the_id() {
        let id = InstanceId::fresh();
        let named = Named {
            id,
            name: Some(Arc::from("rk45")),
        };
        assert_eq!(named.to_string(), format!("'rk45' (instance {})", id.get()));
        let plain = Named { id, name: None };
        assert_eq!(plain.to_string(), format!("instance {}", id.get()));
    }
}
