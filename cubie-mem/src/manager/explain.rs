//! What `allocate_queue` says when a batch does not fit: out-of-memory
//! errors filled with the manager's figures, and the warning of a group
//! near its caps (the error of caps that bind is the decision's:
//! [`super::decide`]).

use std::sync::Arc;

use super::Inner;
use super::state::State;
use crate::ChunkPlan;
use crate::ids::OwnerId;
use crate::{Bytes, MemError};

/// Fraction of a group's caps above which active mode warns.
const CAP_WARNING_FRACTION: f64 = 0.95;

impl Inner {
    /// Fills an out-of-memory error with the label, the idle bytes this
    /// manager holds and the limit that applied.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn explain_failure(
        &self,
        s: &mut State,
        error: MemError,
        label: &str,
        bytes: u64,
        plan: &ChunkPlan,
        free_before: u64,
        requester: OwnerId,
    ) -> MemError {
        match error {
            MemError::OutOfMemory { free, .. } => MemError::OutOfMemory {
                label: label.to_owned(),
                requested: Bytes(bytes),
                free: if free.0 == 0 {
                    Bytes(free_before)
                } else {
                    free
                },
                idle_held: Bytes(self.idle_bytes(s, requester)),
                limit: Bytes(plan.allocatable.saturating_add(plan.withheld)),
                report: None,
            },
            other => other,
        }
    }

    pub(super) fn warn_cap_usage(&self, s: &mut State, group: &Arc<str>) {
        let (caps, used) = s.group_caps_and_use(group, self.total);
        let over = caps > 0 && used as f64 > CAP_WARNING_FRACTION * caps as f64;
        let Some(g) = s.groups.get_mut(group) else {
            return;
        };
        if over && !g.cap_warned {
            tracing::warn!(
                %group,
                used = %Bytes(used),
                caps = %Bytes(caps),
                "stream group has used over 95% of its caps"
            );
        }
        g.cap_warned = over;
    }
}
