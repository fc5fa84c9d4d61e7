//! Streams the manager did not create bound as the current stream
//! (`bind_stream`): on the simulated device, a stream the user
//! created on the backend, under the same strict rules as any stream.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{allocate_f64, logged_manager, manager, queuing, runs_request};
use cubie_mem::backend::{Backend, BackendError};
use cubie_mem::timeline::Activity;
use cubie_mem::{HostKernel, MemError, Registration, SimBackend};

#[test]
fn copies_and_an_allocation_inside_an_external_guard_are_ordered_on_it() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    let own = mgr.stream(&a).unwrap().id();
    let external = mgr.backend().create_stream().unwrap();
    logged.take();
    let guard = mgr.bind_stream(Arc::clone(&external)).unwrap();
    assert_eq!(guard.stream().id(), external.id());
    x.copy_from_host(&[2.0; 4]).unwrap();
    let y = allocate_f64(&mgr, &a, "y", runs_request(8, 4));
    y.copy_from_host(&[3.0; 4]).unwrap();
    let mut back = [0.0; 4];
    x.copy_to_host(&mut back).unwrap();
    drop(guard);
    x.copy_from_host(&[4.0; 4]).unwrap();
    let e = external.id();
    assert_eq!(
        logged.take(),
        [
            format!("up 32 on {e}"),
            format!("alloc 32 on {e}"),
            format!("up 32 on {e}"),
            format!("down 32 on {e}"),
            format!("up 32 on {own}"),
        ],
        "inside the guard on the external stream, after it on the group's"
    );
    assert_eq!(back, [2.0; 4]);
}

#[test]
fn a_free_after_an_external_guard_waits_for_the_streams_work() {
    let (mgr, sim) = manager(1 << 30, 1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let external = mgr.backend().create_stream().unwrap();
    let guard = mgr.bind_stream(Arc::clone(&external)).unwrap();
    let y = allocate_f64(&mgr, &a, "y", runs_request(8, 64));
    // Queued, not waited for: 5 ms on the device. It reads nothing (y was
    // never written): it writes.
    HostKernel::new("touch", Duration::from_millis(5))
        .writes(&y)
        .launch(|_| Ok(()))
        .unwrap();
    drop(guard);
    drop(y);
    mgr.free(&a, "y").unwrap();
    let spans = sim.timeline().spans().to_vec();
    let kernel = spans
        .iter()
        .find(|s| s.activity == Activity::Kernel)
        .unwrap();
    let free = spans.iter().find(|s| s.activity == Activity::Free).unwrap();
    assert_eq!(kernel.stream, external.id());
    assert_eq!(
        free.stream,
        mgr.stream(&a).unwrap().id(),
        "freed on the group's"
    );
    assert!(
        free.start_ns >= kernel.end_ns,
        "the free ({} ns) starts after the kernel on the external stream ends ({} ns)",
        free.start_ns,
        kernel.end_ns
    );
}

#[test]
fn an_external_stream_is_never_touched_again_after_its_guard() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let b = mgr.register(Registration::new().stream_group("b")).unwrap();
    let events = logged.sim.live_events();
    let external = mgr.backend().create_stream().unwrap();
    let guard = mgr.bind_stream(Arc::clone(&external)).unwrap();
    let y = allocate_f64(&mgr, &a, "y", runs_request(8, 64));
    y.copy_from_host(&[5.0; 64]).unwrap();
    let on_b = mgr.stream(&b).unwrap().id();
    let streams = logged.sim.live_streams();
    drop(guard);
    // Its owner lets go of it: the manager queues nothing more on it.
    drop(external);
    logged.take();
    // A copy on another stream and the free still order after its work.
    let guard = mgr.bind_stream(&b).unwrap();
    let mut back = [0.0; 64];
    y.copy_to_host(&mut back).unwrap();
    drop(guard);
    assert_eq!(back, [5.0; 64]);
    drop(y);
    mgr.free(&a, "y").unwrap();
    let on_a = mgr.stream(&a).unwrap().id();
    assert_eq!(
        logged.take(),
        [format!("down 512 on {on_b}"), format!("free on {on_a}")],
        "after the guard, nothing is queued on the external stream"
    );
    assert_eq!(
        logged.sim.live_streams(),
        streams - 1,
        "released once nothing uses it"
    );
    assert_eq!(
        logged.sim.live_events(),
        events,
        "the final event goes with the last array that used the stream"
    );
}

#[test]
fn a_stream_of_another_backend_is_refused_and_binds_nothing() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let own = mgr.stream(&a).unwrap().id();
    let foreign = SimBackend::new(1 << 20).create_stream().unwrap();
    let id = foreign.id();
    let error = mgr.bind_stream(foreign).unwrap_err();
    assert!(
        matches!(
            &error,
            MemError::Backend {
                error: BackendError::Unsupported {
                    operation: "bind an external stream",
                    reason,
                },
                ..
            } if reason.starts_with(&format!("stream {id} "))
        ),
        "{error}"
    );
    logged.take();
    let _x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    assert_eq!(
        logged.take(),
        [format!("alloc 32 on {own}")],
        "nothing bound"
    );
}
