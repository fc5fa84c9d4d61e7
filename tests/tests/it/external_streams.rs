//! Streams the manager did not create bound as the current stream
//! (`bind_external_stream`): on the simulated device, a stream the user
//! created on the backend, under the same strict rules as any stream.

use std::time::Duration;

use crate::common::{allocate_f64, logged_manager, manager, queuing, runs_request};
use cubie_mem::backend::{BackendError, StreamHandle};
use cubie_mem::timeline::Activity;
use cubie_mem::{HostKernel, MemError, Registration};

#[test]
fn copies_and_an_allocation_inside_an_external_guard_are_ordered_on_it() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    let own = mgr.stream(&a).unwrap().0;
    let external = mgr.backend().create_stream().unwrap();
    logged.take();
    let guard = mgr.bind_external_stream(external).unwrap();
    assert_eq!(guard.stream(), external);
    x.copy_from_host(&[2.0; 4]).unwrap();
    let y = allocate_f64(&mgr, &a, "y", runs_request(8, 4));
    y.copy_from_host(&[3.0; 4]).unwrap();
    let mut back = [0.0; 4];
    x.copy_to_host(&mut back).unwrap();
    drop(guard);
    x.copy_from_host(&[4.0; 4]).unwrap();
    let e = external.0;
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
    drop(y);
    mgr.backend().destroy_stream(external).unwrap();
}

#[test]
fn a_free_after_an_external_guard_waits_for_the_streams_work() {
    let (mgr, sim) = manager(1 << 30, 1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let external = mgr.backend().create_stream().unwrap();
    let guard = mgr.bind_external_stream(external).unwrap();
    let y = allocate_f64(&mgr, &a, "y", runs_request(8, 64));
    // Queued, not waited for: 5 ms on the device.
    HostKernel::new("touch", Duration::from_millis(5))
        .updates(&y)
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
    assert_eq!(kernel.stream, external.0);
    assert_eq!(
        free.stream,
        mgr.stream(&a).unwrap().0,
        "freed on the group's"
    );
    assert!(
        free.start_ns >= kernel.end_ns,
        "the free ({} ns) starts after the kernel on the external stream ends ({} ns)",
        free.start_ns,
        kernel.end_ns
    );
    mgr.backend().destroy_stream(external).unwrap();
}

#[test]
fn an_external_stream_destroyed_after_its_guard_is_never_touched_again() {
    let (mgr, sim) = manager(1 << 30, 1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let b = mgr.register(Registration::new().stream_group("b")).unwrap();
    let events = sim.live_events();
    let external = mgr.backend().create_stream().unwrap();
    let guard = mgr.bind_external_stream(external).unwrap();
    let y = allocate_f64(&mgr, &a, "y", runs_request(8, 64));
    y.copy_from_host(&[5.0; 64]).unwrap();
    let streams = sim.live_streams();
    drop(guard);
    assert_eq!(
        sim.live_streams(),
        streams,
        "the manager does not destroy an external stream"
    );
    // Its owner destroys it: the strict device refuses any later use.
    mgr.backend().destroy_stream(external).unwrap();
    // A copy on another stream and the free still order after its work.
    let guard = mgr.bind_stream(&b).unwrap();
    let mut back = [0.0; 64];
    y.copy_to_host(&mut back).unwrap();
    drop(guard);
    assert_eq!(back, [5.0; 64]);
    drop(y);
    mgr.free(&a, "y").unwrap();
    assert_eq!(
        sim.live_events(),
        events,
        "the final event goes with the last array that used the stream"
    );
}

#[test]
fn a_stream_that_is_not_the_backends_is_refused_and_binds_nothing() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let own = mgr.stream(&a).unwrap().0;
    let error = mgr.bind_external_stream(StreamHandle(987_654)).unwrap_err();
    assert!(
        matches!(
            &error,
            MemError::Backend {
                error: BackendError::Unsupported {
                    operation: "bind an external stream",
                    reason,
                },
                ..
            } if reason.starts_with("stream 987654 ")
        ),
        "{error}"
    );
    let gone = mgr.backend().create_stream().unwrap();
    mgr.backend().destroy_stream(gone).unwrap();
    assert!(mgr.bind_external_stream(gone).is_err());
    logged.take();
    let _x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    assert_eq!(
        logged.take(),
        [format!("alloc 32 on {own}")],
        "nothing bound"
    );
}
