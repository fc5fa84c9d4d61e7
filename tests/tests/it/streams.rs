//! Stream groups and the current-stream guard.

use crate::common::{allocate_f64, logged_manager, manager, queuing, runs_request};
use cubie_mem::timeline::Activity;
use cubie_mem::{Registration, SimBackend};

#[test]
fn streams_are_created_lazily_and_shared_within_a_group() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(Registration::new().stream_group("g")).unwrap();
    let b = mgr.register(Registration::new().stream_group("g")).unwrap();
    let c = mgr.register(Registration::new()).unwrap();
    assert_eq!(sim.live_streams(), 0, "no stream before first use");
    let sa = mgr.stream(&a).unwrap().id();
    assert_eq!(mgr.stream(&b).unwrap().id(), sa);
    let sc = mgr.stream(&c).unwrap().id();
    assert_ne!(sc, sa, "the default group has its own stream too");
    assert_ne!(sc, 0, "never the null stream");
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
    assert_eq!(mgr.stream_group(&d1), Registration::DEFAULT_STREAM_GROUP);
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
    let b = mgr
        .register(queuing().owner(&a).stream_group("new"))
        .unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10))]).unwrap();
    mgr.change_stream_group(&a, "new").unwrap();
    assert_eq!(mgr.stream_group(&a), "new");
    assert_eq!(mgr.stream(&a).unwrap().id(), mgr.stream(&b).unwrap().id());
    let r = mgr.allocate_queue_for(&b).unwrap();
    assert_eq!(r.chunks, 1);
    assert!(
        !a.has_queued(),
        "a's requests moved with it and were served with b's group"
    );
}

#[test]
fn arrays_follow_their_instance_to_a_new_group_and_new_streams() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing().stream_group("g")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 10));
    let before = mgr.stream(&a).unwrap().id();
    mgr.reinit_streams().unwrap();
    let after = mgr.stream(&a).unwrap().id();
    assert_ne!(before, after);
    x.copy_from_host(&[1.0; 10]).unwrap();
    mgr.change_stream_group(&a, "h").unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![1.0; 10]);
    assert_eq!(mgr.memory_report().groups["h"].current_count, 1);
    assert_eq!(mgr.memory_report().groups["g"].current_count, 0);
}

/// The activity and stream of every span the simulated device recorded
/// from span `from` on.
fn work_since(sim: &SimBackend, from: usize) -> Vec<(Activity, u64)> {
    sim.timeline().spans()[from..]
        .iter()
        .map(|span| (span.activity, span.stream))
        .collect()
}

#[test]
fn nested_guards_order_work_on_the_innermost_stream_and_unbind_in_turn() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let solver = mgr.register(queuing().stream_group("solver")).unwrap();
    let outer = mgr
        .register(Registration::new().stream_group("outer"))
        .unwrap();
    let inner = mgr
        .register(Registration::new().stream_group("inner"))
        .unwrap();
    let x = allocate_f64(&mgr, &solver, "x", runs_request(8, 4));
    let own = mgr.stream(&solver).unwrap().id();
    let (outer_stream, inner_stream) = (
        mgr.stream(&outer).unwrap().id(),
        mgr.stream(&inner).unwrap().id(),
    );
    assert!(own != outer_stream && own != inner_stream && outer_stream != inner_stream);

    let from = sim.timeline().spans().len();
    let outer_guard = mgr.bind_stream(&outer).unwrap();
    let inner_guard = mgr.bind_stream(&inner).unwrap();
    let _y = allocate_f64(&mgr, &solver, "y", runs_request(8, 4));
    x.copy_from_host(&[1.0; 4]).unwrap();
    assert_eq!(
        work_since(&sim, from),
        [
            (Activity::Alloc, inner_stream),
            (Activity::HostToDevice, inner_stream)
        ],
        "the innermost guard wins"
    );

    let from = sim.timeline().spans().len();
    drop(inner_guard);
    x.copy_from_host(&[2.0; 4]).unwrap();
    assert_eq!(
        work_since(&sim, from),
        [(Activity::HostToDevice, outer_stream)],
        "the outer guard's stream is current again"
    );

    let from = sim.timeline().spans().len();
    drop(outer_guard);
    x.copy_from_host(&[3.0; 4]).unwrap();
    assert_eq!(
        work_since(&sim, from),
        [(Activity::HostToDevice, own)],
        "no stream is current: the group's stream"
    );
}

#[test]
fn copies_inside_a_guard_use_the_bound_stream() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let b = mgr.register(Registration::new().stream_group("b")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    let (sa, sb) = (mgr.stream(&a).unwrap().id(), mgr.stream(&b).unwrap().id());
    logged.take();
    let guard = mgr.bind_stream(&b).unwrap();
    x.copy_from_host(&[2.0; 4]).unwrap();
    drop(guard);
    x.copy_from_host(&[3.0; 4]).unwrap();
    assert_eq!(
        logged.take(),
        [format!("up 32 on {sb}"), format!("up 32 on {sa}")]
    );
}

#[test]
fn allocations_inside_a_guard_use_the_bound_stream() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let b = mgr.register(Registration::new().stream_group("b")).unwrap();
    let (sa, sb) = (mgr.stream(&a).unwrap().id(), mgr.stream(&b).unwrap().id());
    let guard = mgr.bind_stream(&b).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    drop(guard);
    assert_eq!(logged.take(), [format!("alloc 32 on {sb}")]);
    // Later copies and the free follow the group's stream.
    x.copy_from_host(&[1.0; 4]).unwrap();
    mgr.free(&a, "x").unwrap();
    assert_eq!(
        logged.take(),
        [format!("up 32 on {sa}"), format!("free on {sa}")]
    );
}

#[test]
fn a_guard_keeps_its_stream_alive_across_reinit() {
    let (mgr, logged) = logged_manager(1 << 30);
    let a = mgr.register(queuing().stream_group("a")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    let guard = mgr.bind_stream(&a).unwrap();
    let retired = guard.stream().id();
    mgr.reinit_streams().unwrap();
    assert_ne!(mgr.stream(&a).unwrap().id(), retired);
    assert_eq!(
        logged.sim.live_streams(),
        2,
        "the guard still holds the old stream"
    );
    logged.take();
    x.copy_from_host(&[1.0; 4]).unwrap();
    assert_eq!(logged.take(), [format!("up 32 on {retired}")]);
    drop(guard);
    assert_eq!(
        logged.sim.live_streams(),
        2,
        "x's last copy is on it: its free must be ordered after that copy"
    );
    mgr.free(&a, "x").unwrap();
    assert_eq!(
        logged.sim.live_streams(),
        1,
        "destroyed once nothing refers to it"
    );
}

#[test]
fn a_guard_that_outlives_its_manager_binds_nothing_of_another() {
    // The guard keeps its backend alive, so a later backend cannot take its
    // address and inherit the binding.
    let guard = {
        let (mgr, _) = manager(1 << 30, 1 << 30);
        let a = mgr
            .register(Registration::new().stream_group("g1"))
            .unwrap();
        let b = mgr
            .register(Registration::new().stream_group("g2"))
            .unwrap();
        mgr.stream(&a).unwrap();
        let guard = mgr.bind_stream(&b).unwrap();
        assert_eq!(
            guard.stream().id(),
            2,
            "a stream number the next devices start without"
        );
        guard
    };
    for _ in 0..64 {
        let (mgr, logged) = logged_manager(1 << 30);
        let a = mgr.register(queuing()).unwrap();
        let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
        let own = mgr.stream(&a).unwrap().id();
        logged.take();
        x.copy_from_host(&[1.0; 4]).unwrap();
        assert_eq!(logged.take(), [format!("up 32 on {own}")]);
    }
    drop(guard);
}
