//! Calling user hooks: after the manager's lock is released, each caught
//! when it panics, so one hook cannot skip the others or unwind through the
//! manager.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::ArrayResponse;
use crate::ids::{InstanceId, Named};
use crate::registration::{InvalidateHook, ReadyHook};

/// Ready hooks to call, each with its instance and response.
pub(crate) type ReadyList = Vec<(Named<InstanceId>, ReadyHook, ArrayResponse)>;

/// Hooks collected under the lock, to call once it is released.
#[derive(Default)]
pub(crate) struct Hooks {
    /// Invalidate hooks, each with its instance.
    invalidate: Vec<(Named<InstanceId>, InvalidateHook)>,
    /// Ready hooks, each with its instance and response.
    ready: ReadyList,
}

impl Hooks {
    /// No hooks yet, the ready hooks going into `ready` (emptied), a list
    /// kept from an earlier call with its room.
    pub(crate) fn reusing(mut ready: ReadyList) -> Self {
        ready.clear();
        Hooks {
            invalidate: Vec::new(),
            ready,
        }
    }

    /// Schedules an invalidate hook of `instance`.
    pub(crate) fn invalidate(&mut self, instance: Named<InstanceId>, hook: InvalidateHook) {
        self.invalidate.push((instance, hook));
    }

    /// Makes room for `count` more ready hooks.
    pub(crate) fn reserve_ready(&mut self, count: usize) {
        self.ready.reserve(count);
    }

    /// Schedules a ready hook of `instance` with its response.
    pub(crate) fn ready(
        &mut self,
        instance: Named<InstanceId>,
        hook: ReadyHook,
        response: ArrayResponse,
    ) {
        self.ready.push((instance, hook, response));
    }

    /// Calls the invalidate hooks, then the ready hooks. Must run with no
    /// manager lock held. A panicking hook is reported and the rest still run.
    /// Returns the emptied ready list, to be [reused](Self::reusing).
    pub(crate) fn run(self) -> ReadyList {
        for (instance, hook) in self.invalidate {
            guarded("invalidate", &instance, || hook.with(|f| f()));
        }
        let mut ready = self.ready;
        for (instance, hook, response) in ready.drain(..) {
            guarded("allocation-ready", &instance, || hook.with(|f| f(response)));
        }
        ready
    }
}

/// Calls one hook, reporting a panic or a hook that triggered itself.
fn guarded(kind: &str, instance: &Named<InstanceId>, call: impl FnOnce() -> Option<()>) {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Some(())) => {}
        Ok(None) => tracing::error!(
            %instance,
            hook = kind,
            "a hook triggered itself (it called the manager in a way that calls it again); \
             the inner call was skipped"
        ),
        Err(payload) => report_panic(kind, instance, &*payload),
    }
}

/// Reports that a hook of `instance` panicked with `payload`.
fn report_panic(kind: &str, instance: &Named<InstanceId>, payload: &(dyn std::any::Any + Send)) {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned());
    tracing::error!(
        %instance,
        hook = kind,
        panic = %message,
        "a hook panicked; the manager's state is committed and the other hooks still run"
    );
}
