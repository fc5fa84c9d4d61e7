//! VRAM shares: the manual and auto pools, caps, and moving between pools.

use crate::common::{capture_logs, manager};
use cubie_mem::{MIN_AUTOPOOL_SIZE, MemError, Registration};

const GIB: u64 = 1 << 30;

#[test]
fn a_lone_auto_member_gets_all_memory() {
    let (mgr, _) = manager(GIB, GIB);
    let a = mgr.register(Registration::new()).unwrap();
    assert_eq!(mgr.proportion(&a), 1.0);
    assert_eq!(mgr.cap(&a), GIB);
    assert_eq!(mgr.auto_pool_proportion(), 1.0);
    assert_eq!(mgr.manual_pool_proportion(), 0.0);
}

#[test]
fn auto_members_split_what_the_manual_pool_leaves() {
    let (mgr, _) = manager(GIB, GIB);
    let manual = mgr.register(Registration::new().proportion(0.3)).unwrap();
    let a = mgr.register(Registration::new()).unwrap();
    let b = mgr.register(Registration::new().proportion(0.0)).unwrap();
    assert_eq!(mgr.proportion(&manual), 0.3);
    assert_eq!(mgr.cap(&manual), (0.3 * GIB as f64).floor() as u64);
    assert!((mgr.proportion(&a) - 0.35).abs() < 1e-12);
    assert_eq!(mgr.proportion(&a), mgr.proportion(&b));
    assert_eq!(
        mgr.cap(&a),
        (mgr.proportion(&a) * GIB as f64).floor() as u64
    );
    assert!((mgr.manual_pool_proportion() - 0.3).abs() < 1e-12);
    assert!((mgr.auto_pool_proportion() - 0.7).abs() < 1e-12);

    drop(b);
    assert!(
        (mgr.proportion(&a) - 0.7).abs() < 1e-12,
        "the auto pool rebalances on drop"
    );
    drop(manual);
    assert_eq!(mgr.proportion(&a), 1.0);
}

#[test]
fn caps_floor_the_product() {
    let (mgr, _) = manager(1001, 1001);
    let a = mgr.register(Registration::new().proportion(0.5)).unwrap();
    assert_eq!(mgr.cap(&a), 500);
}

#[test]
fn proportions_outside_unit_interval_are_rejected_and_register_nothing() {
    let (mgr, _) = manager(GIB, GIB);
    for p in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let err = mgr.register(Registration::new().proportion(p)).unwrap_err();
        assert!(
            matches!(err, MemError::InvalidProportion { .. }),
            "{p}: {err}"
        );
    }
    assert_eq!(mgr.memory_report().instances.len(), 0);
    assert_eq!(mgr.manual_pool_proportion(), 0.0);
}

#[test]
fn the_manual_pool_cannot_exceed_one() {
    let (mgr, _) = manager(GIB, GIB);
    let _a = mgr.register(Registration::new().proportion(0.6)).unwrap();
    let err = mgr
        .register(Registration::new().proportion(0.5))
        .unwrap_err();
    assert_eq!(
        err,
        MemError::ManualPoolOverflow {
            requested: 0.5,
            manual_sum: 0.6
        }
    );
    assert_eq!(mgr.memory_report().instances.len(), 1);
}

#[test]
fn starving_a_non_empty_auto_pool_is_an_error() {
    let (mgr, _) = manager(GIB, GIB);
    let _auto = mgr.register(Registration::new()).unwrap();
    let err = mgr
        .register(Registration::new().proportion(0.97))
        .unwrap_err();
    assert_eq!(
        err,
        MemError::AutoPoolStarved {
            requested: 0.97,
            manual_sum: 0.0,
            remaining: 1.0 - 0.97,
            auto_members: 1,
            minimum: MIN_AUTOPOOL_SIZE,
        }
    );
    assert_eq!(mgr.memory_report().instances.len(), 1);
    // Exactly 1 - MIN_AUTOPOOL_SIZE is still allowed.
    mgr.register(Registration::new().proportion(1.0 - MIN_AUTOPOOL_SIZE))
        .unwrap();
}

#[test]
fn an_empty_auto_pool_below_minimum_is_only_a_warning() {
    let (mgr, _) = manager(GIB, GIB);
    let (result, logs) = capture_logs(|| mgr.register(Registration::new().proportion(0.97)));
    result.unwrap();
    assert!(
        logs.contains("WARN") && logs.contains("minimum auto pool"),
        "{logs}"
    );
}

#[test]
fn joining_a_full_auto_pool_is_an_error() {
    let (mgr, _) = manager(GIB, GIB);
    let _m = mgr.register(Registration::new().proportion(0.96)).unwrap();
    let err = mgr.register(Registration::new()).unwrap_err();
    assert!(matches!(err, MemError::AutoPoolFull { .. }), "{err}");
    assert_eq!(mgr.memory_report().instances.len(), 1);
}

#[test]
fn set_manual_proportion_moves_from_either_pool() {
    let (mgr, _) = manager(GIB, GIB);
    let a = mgr.register(Registration::new()).unwrap();
    let b = mgr.register(Registration::new()).unwrap();
    mgr.set_manual_proportion(&a, 0.2).unwrap();
    assert_eq!(mgr.proportion(&a), 0.2);
    assert!((mgr.proportion(&b) - 0.8).abs() < 1e-12);
    mgr.set_manual_proportion(&a, 0.4).unwrap();
    assert_eq!(mgr.proportion(&a), 0.4);
    let err = mgr.set_manual_proportion(&a, 0.99).unwrap_err();
    assert!(
        matches!(err, MemError::AutoPoolStarved { remaining, .. } if remaining == 1.0 - 0.99),
        "{err:?}"
    );
    assert_eq!(mgr.proportion(&a), 0.4, "a failed move changes nothing");
}

#[test]
fn set_manual_limit_mode_only_moves_auto_members() {
    let (mgr, _) = manager(GIB, GIB);
    let a = mgr.register(Registration::new().proportion(0.3)).unwrap();
    mgr.set_manual_limit_mode(&a, 0.5).unwrap();
    assert_eq!(mgr.proportion(&a), 0.3, "already manual: a no-op");
    let b = mgr.register(Registration::new()).unwrap();
    mgr.set_manual_limit_mode(&b, 0.5).unwrap();
    assert_eq!(mgr.proportion(&b), 0.5);
    assert!((mgr.manual_pool_proportion() - 0.8).abs() < 1e-12);
}

#[test]
fn set_auto_limit_mode_only_moves_manual_members() {
    let (mgr, _) = manager(GIB, GIB);
    let a = mgr.register(Registration::new()).unwrap();
    let b = mgr.register(Registration::new().proportion(0.5)).unwrap();
    mgr.set_auto_limit_mode(&a).unwrap();
    assert_eq!(mgr.proportion(&a), 0.5, "already auto: a no-op");
    mgr.set_auto_limit_mode(&b).unwrap();
    assert_eq!(mgr.proportion(&a), 0.5);
    assert_eq!(mgr.proportion(&b), 0.5);
    assert_eq!(mgr.manual_pool_proportion(), 0.0);
}

#[test]
fn set_auto_limit_mode_fails_cleanly_when_the_auto_pool_is_full() {
    let (mgr, _) = manager(GIB, GIB);
    let a = mgr.register(Registration::new().proportion(0.04)).unwrap();
    // 0.99 in all leaves less than the minimum to an empty auto pool: allowed.
    let b = mgr.register(Registration::new().proportion(0.95)).unwrap();
    let before = (
        mgr.proportion(&a),
        mgr.cap(&a),
        mgr.proportion(&b),
        mgr.manual_pool_proportion(),
        mgr.auto_pool_proportion(),
    );
    // Without a, the manual pool holds 0.95, leaving the auto pool no more
    // than the minimum: a cannot join it.
    let err = mgr.set_auto_limit_mode(&a).unwrap_err();
    assert_eq!(
        err,
        MemError::AutoPoolFull {
            manual_sum: 0.95,
            remaining: 1.0 - 0.95,
            minimum: MIN_AUTOPOOL_SIZE,
        }
    );
    let after = (
        mgr.proportion(&a),
        mgr.cap(&a),
        mgr.proportion(&b),
        mgr.manual_pool_proportion(),
        mgr.auto_pool_proportion(),
    );
    assert_eq!(after, before, "a failed move changes nothing");
    assert_eq!(after.0, 0.04, "a is still a manual member");
}

#[test]
fn a_manual_pool_of_exactly_the_maximum_refuses_the_auto_pool_and_just_below_admits_it() {
    // Sums are compared with a tolerance of 1e-9; twice that is past it.
    const PAST_TOLERANCE: f64 = 2e-9;
    let boundary = 1.0 - MIN_AUTOPOOL_SIZE;
    assert_eq!(boundary, 0.95);

    let (mgr, _) = manager(GIB, GIB);
    let _manual = mgr
        .register(Registration::new().proportion(boundary))
        .unwrap();
    let err = mgr.register(Registration::new()).unwrap_err();
    assert_eq!(
        err,
        MemError::AutoPoolFull {
            manual_sum: boundary,
            remaining: 1.0 - boundary,
            minimum: MIN_AUTOPOOL_SIZE,
        },
        "0.95 leaves exactly the minimum (a hair above it in floating point): refused"
    );

    let (mgr, _) = manager(GIB, GIB);
    let manual = mgr
        .register(Registration::new().proportion(boundary - PAST_TOLERANCE))
        .unwrap();
    let auto = mgr.register(Registration::new()).unwrap();
    assert!((mgr.proportion(&auto) - (MIN_AUTOPOOL_SIZE + PAST_TOLERANCE)).abs() < 1e-15);

    // With an auto member, the manual pool may reach 0.95 but not pass it.
    mgr.set_manual_proportion(&manual, boundary).unwrap();
    let err = mgr
        .set_manual_proportion(&manual, boundary + PAST_TOLERANCE)
        .unwrap_err();
    assert!(
        matches!(err, MemError::AutoPoolStarved { remaining, .. }
            if remaining == 1.0 - (boundary + PAST_TOLERANCE)),
        "{err:?}"
    );
    assert_eq!(mgr.proportion(&manual), boundary);
}
