//! Stream groups and the current-stream guard.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{allocate_f64, manager, queuing, runs_request};
use cubie_mem::Registration;
use cubie_mem::streams::DEFAULT_STREAM_GROUP;

#[test]
fn streams_are_created_lazily_and_shared_within_a_group() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(Registration::new().stream_group("g")).unwrap();
    let b = mgr.register(Registration::new().stream_group("g")).unwrap();
    let c = mgr.register(Registration::new()).unwrap();
    assert_eq!(sim.live_streams(), 0, "no stream before first use");
    let sa = mgr.stream(&a).unwrap();
    assert_eq!(mgr.stream(&b).unwrap(), sa);
    let sc = mgr.stream(&c).unwrap();
    assert_ne!(sc, sa, "the default group has its own stream too");
    assert_ne!(sc.0, 0, "never the null stream");
    assert_eq!(sim.live_streams(), 2);
}

#[test]
fn grouping() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let d1 = mgr.register(Registration::new()).unwrap();
    let _d2 = mgr.register(Registration::new()).unwrap();
    let alone = mgr
        .register(Registration::new().stream_group("solo"))
        .unwrap();
    let g1 = mgr
        .register(Registration::new().stream_group("pair"))
        .unwrap();
    let g2 = mgr
        .register(Registration::new().stream_group("pair"))
        .unwrap();
    assert_eq!(mgr.stream_group(&d1), DEFAULT_STREAM_GROUP);
    assert!(!mgr.is_grouped(&d1), "default is never grouped");
    assert!(!mgr.is_grouped(&alone), "a group of one is not grouped");
    assert!(mgr.is_grouped(&g1));
    drop(g2);
    assert!(!mgr.is_grouped(&g1));
}

#[test]
fn change_stream_group_moves_the_instance_and_its_queue() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing().stream_group("old")).unwrap();
    let b = mgr.register(queuing().stream_group("new")).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10))]).unwrap();
    mgr.change_stream_group(&a, "new").unwrap();
    assert_eq!(mgr.stream_group(&a), "new");
    assert_eq!(mgr.stream(&a).unwrap(), mgr.stream(&b).unwrap());
    let r = mgr.allocate_queue_for(&b).unwrap();
    assert_eq!(r.chunks, 1);
    assert!(
        !mgr.has_queued(&a),
        "a's requests moved with it and were served with b's group"
    );
}

#[test]
fn arrays_follow_their_instance_to_a_new_group_and_new_streams() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing().stream_group("g")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 10));
    let before = mgr.stream(&a).unwrap();
    mgr.reinit_streams().unwrap();
    let after = mgr.stream(&a).unwrap();
    assert_ne!(before, after);
    x.copy_from_host(&[1.0; 10]).unwrap();
    mgr.change_stream_group(&a, "h").unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![1.0; 10]);
    assert_eq!(mgr.stats().groups["h"].current_count, 1);
    assert_eq!(mgr.stats().groups["g"].current_count, 0);
}

#[test]
fn the_current_stream_guard_binds_and_nests() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(Registration::new().stream_group("a")).unwrap();
    let b = mgr.register(Registration::new().stream_group("b")).unwrap();
    let outer = mgr.bind_stream(&a).unwrap();
    assert_eq!(outer.stream(), mgr.stream(&a).unwrap());
    {
        let inner = mgr.bind_stream(&b).unwrap();
        assert_eq!(inner.stream(), mgr.stream(&b).unwrap());
    }
    drop(outer);
}

#[test]
fn copies_inside_a_guard_use_the_bound_stream() {
    // On the simulated device a copy on a destroyed stream fails, so the copy
    // proves which stream it used: bind a group's stream, then retire it.
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let b = mgr.register(Registration::new().stream_group("b")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    let guard = mgr.bind_stream(&b).unwrap();
    x.copy_from_host(&[2.0; 4]).unwrap();
    mgr.reinit_streams().unwrap(); // b's bound stream is destroyed
    let err = x.copy_from_host(&[3.0; 4]).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    drop(guard);
    x.copy_from_host(&[3.0; 4]).unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![3.0; 4]);
}

#[test]
fn allocations_inside_a_guard_use_the_bound_stream() {
    // As above: a retired bound stream makes the allocation fail, which
    // proves the allocation was ordered on it.
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let b = mgr.register(Registration::new().stream_group("b")).unwrap();
    mgr.stream(&a).unwrap();
    let guard = mgr.bind_stream(&b).unwrap();
    mgr.reinit_streams().unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 4))]).unwrap();
    let err = mgr.allocate_queue(&a).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    drop(guard);
    let x = mgr
        .allocate_queue_for(&a)
        .unwrap()
        .take::<f64>("x")
        .unwrap();
    x.copy_from_host(&[1.0; 4]).unwrap();
}
