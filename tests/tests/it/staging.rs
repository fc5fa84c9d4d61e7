//! The staging pool: reuse by (label, shape, element type), growth bounded by
//! RAM with one buffer per label always granted, blocking acquires woken by
//! releases, clear. Every wait is bounded so that a failure cannot hang.

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use cubie_mem::backend::Backend;
use cubie_mem::{SimBackend, StagingPool, SystemMemory};

/// How long a test waits before it calls a wait a deadlock: under Miri,
/// which runs the code a hundred times slower or more, ten minutes.
const PATIENCE: Duration = Duration::from_secs(if cfg!(miri) { 600 } else { 10 });

fn backend() -> Arc<dyn Backend> {
    Arc::new(SimBackend::new(1 << 30))
}

/// A pool that believes RAM is nearly full: it never grows past one buffer per label.
fn tight_pool() -> StagingPool {
    StagingPool::with_memory_probe(backend(), || {
        Some(SystemMemory {
            total: 100 << 30,
            available: 10 << 30,
        })
    })
}

/// A pool with plenty of RAM.
fn roomy_pool() -> StagingPool {
    StagingPool::with_memory_probe(backend(), || {
        Some(SystemMemory {
            total: 100 << 30,
            available: 90 << 30,
        })
    })
}

#[test]
fn buffers_are_reused_by_label_shape_and_type() {
    let pool = roomy_pool();
    let mut first = pool.acquire::<f32>("state", &[4, 8]).unwrap();
    assert_eq!(first.len(), 32);
    first[3] = 7.0;
    let address = first.as_ptr();
    drop(first);
    assert_eq!(pool.idle_buffers(), 1);

    let again = pool.acquire::<f32>("state", &[4, 8]).unwrap();
    assert_eq!(again.as_ptr(), address);
    assert_eq!(again[3], 7.0);
    assert_eq!(pool.pinned_allocations(), 1);
    assert_eq!(again.key().label, "state");

    // Any difference in the key is another buffer.
    let other_shape = pool.acquire::<f32>("state", &[8, 4]).unwrap();
    let other_type = pool.acquire::<u32>("state", &[4, 8]).unwrap();
    let other_label = pool.acquire::<f32>("status", &[4, 8]).unwrap();
    assert_eq!(pool.pinned_allocations(), 4);
    assert_eq!(pool.in_flight("state"), 3);
    drop((again, other_shape, other_type, other_label));
    assert_eq!(pool.in_flight("state"), 0);
    assert_eq!(pool.idle_buffers(), 4);
}

#[test]
fn roomy_pool_grows_per_label() {
    let pool = roomy_pool();
    let a = pool.try_acquire::<f64>("state", &[16]).unwrap().unwrap();
    let b = pool.try_acquire::<f64>("state", &[16]).unwrap().unwrap();
    assert_ne!(a.as_ptr(), b.as_ptr());
    assert_eq!(pool.in_flight("state"), 2);
}

#[test]
fn tight_pool_grants_one_per_label_then_waits() {
    let pool = tight_pool();
    let held = pool.acquire::<f64>("state", &[16]).unwrap();
    // Another label with nothing in flight always gets one.
    let other = pool.try_acquire::<f64>("status", &[16]).unwrap();
    assert!(other.is_some());
    assert!(pool.try_acquire::<f64>("state", &[16]).unwrap().is_none());
    assert!(
        pool.acquire_timeout::<f64>("state", &[16], Duration::from_millis(20))
            .unwrap()
            .is_none()
    );
    drop(held);
    assert!(pool.try_acquire::<f64>("state", &[16]).unwrap().is_some());
}

#[test]
fn release_wakes_a_blocked_acquire_on_another_thread() {
    let pool = tight_pool();
    let held = pool.acquire::<u32>("state", &[1024]).unwrap();
    let address = held.as_ptr() as usize;
    let (sender, receiver) = mpsc::channel();
    let waiter = {
        let pool = pool.clone();
        thread::spawn(move || {
            let buffer = pool
                .acquire_timeout::<u32>("state", &[1024], PATIENCE)
                .unwrap();
            sender
                .send(buffer.as_ref().map(|b| b.as_ptr() as usize))
                .unwrap();
        })
    };
    // The waiter cannot get a buffer while this one is held.
    assert!(receiver.recv_timeout(Duration::from_millis(100)).is_err());
    drop(held);
    let got = receiver
        .recv_timeout(PATIENCE)
        .expect("the release woke the waiter");
    assert_eq!(got, Some(address), "the released buffer was handed over");
    waiter.join().unwrap();
    assert_eq!(pool.pinned_allocations(), 1);
}

#[test]
fn many_threads_share_one_buffer_when_ram_is_tight() {
    let pool = tight_pool();
    let (sender, receiver) = mpsc::channel();
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let pool = pool.clone();
            let sender = sender.clone();
            thread::spawn(move || {
                for _ in 0..20 {
                    let mut buffer = pool
                        .acquire_timeout::<u64>("state", &[64], PATIENCE)
                        .unwrap()
                        .expect("a buffer within the timeout");
                    assert_eq!(pool.in_flight("state"), 1);
                    buffer[0] = i;
                }
                sender.send(()).unwrap();
            })
        })
        .collect();
    for _ in 0..8 {
        receiver
            .recv_timeout(PATIENCE)
            .expect("every worker finished");
    }
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(pool.pinned_allocations(), 1);
}

#[test]
fn a_waiting_acquire_frees_idle_buffers_of_other_keys() {
    let pool = tight_pool();
    drop(pool.acquire::<u8>("old", &[4096]).unwrap());
    assert_eq!(pool.idle_buffers(), 1);
    let _held = pool.acquire::<u8>("state", &[64]).unwrap();
    assert!(pool.try_acquire::<u8>("state", &[64]).unwrap().is_none());
    assert_eq!(pool.idle_buffers(), 0);
}

#[test]
fn unknown_ram_grants_one_buffer_per_label() {
    let pool = StagingPool::with_memory_probe(backend(), || None);
    let _held = pool.acquire::<i32>("state", &[8]).unwrap();
    assert!(pool.try_acquire::<i32>("state", &[8]).unwrap().is_none());
    assert!(pool.try_acquire::<i32>("other", &[8]).unwrap().is_some());
}

#[test]
fn clear_frees_idle_buffers_only() {
    let pool = roomy_pool();
    let held = pool.acquire::<f32>("a", &[8]).unwrap();
    drop(pool.acquire::<f32>("b", &[8]).unwrap());
    drop(pool.acquire::<f32>("c", &[8]).unwrap());
    assert_eq!(pool.idle_buffers(), 2);
    pool.clear();
    assert_eq!(pool.idle_buffers(), 0);
    drop(held);
    assert_eq!(
        pool.idle_buffers(),
        1,
        "a buffer in flight returns after clear"
    );
    drop(pool.acquire::<f32>("b", &[8]).unwrap());
    assert_eq!(pool.pinned_allocations(), 4, "b was allocated again");
}

#[test]
fn allocation_failure_is_returned_and_leaves_the_label_free() {
    let sim = SimBackend::new(1 << 30);
    let pool = StagingPool::with_memory_probe(Arc::new(sim.clone()), || None);
    sim.set_fail_allocations_after(Some(0));
    assert!(
        pool.acquire::<f32>("state", &[8])
            .unwrap_err()
            .is_out_of_memory()
    );
    assert_eq!(pool.in_flight("state"), 0);
    sim.set_fail_allocations_after(None);
    assert!(pool.try_acquire::<f32>("state", &[8]).unwrap().is_some());
}
