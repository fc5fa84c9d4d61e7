//! The staging pool: reuse by (label, shape, element type), growth bounded by
//! RAM with one buffer per label always granted, blocking acquires woken by
//! releases, clear, and blocks that need no zero-fill. Every wait is bounded
//! so that a failure cannot hang.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use super::*;
use crate::SimBackend;
use crate::backend::{BackendError, DevicePtr, KernelLaunch, MemInfo, Stream};

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

/// [`StagingPool::acquire`], giving up after `timeout`.
fn acquire_within(
    pool: &StagingPool,
    label: &str,
    shape: &[usize],
    dtype: DType,
    timeout: Duration,
) -> Option<StagingBuffer> {
    pool.acquire_until(label, shape, dtype, Some(Instant::now() + timeout))
        .unwrap()
}

/// The address of a buffer's bytes.
fn address(buffer: &mut StagingBuffer) -> usize {
    buffer.host().unwrap().as_ptr().addr()
}

#[test]
fn buffers_are_reused_by_label_shape_and_type() {
    let pool = roomy_pool();
    let mut first = pool.acquire("state", &[4, 8], DType::F32).unwrap();
    assert_eq!(first.host().unwrap().len(), 32 * 4);
    first.host().unwrap()[3] = 7;
    let at = address(&mut first);
    drop(first);
    assert_eq!(pool.idle_buffers(), 1);

    let mut again = pool.acquire("state", &[4, 8], DType::F32).unwrap();
    assert_eq!(address(&mut again), at);
    assert_eq!(again.host().unwrap()[3], 7);
    assert_eq!(pool.pinned_allocations(), 1);
    assert_eq!(again.key.0, "state");

    // Any difference in the key is another buffer.
    let other_shape = pool.acquire("state", &[8, 4], DType::F32).unwrap();
    let other_type = pool.acquire("state", &[4, 8], DType::U32).unwrap();
    let other_label = pool.acquire("status", &[4, 8], DType::F32).unwrap();
    assert_eq!(pool.pinned_allocations(), 4);
    assert_eq!(pool.in_flight("state"), 3);
    drop((again, other_shape, other_type, other_label));
    assert_eq!(pool.in_flight("state"), 0);
    assert_eq!(pool.idle_buffers(), 4);
}

#[test]
fn roomy_pool_grows_per_label() {
    let pool = roomy_pool();
    let mut a = pool
        .try_acquire("state", &[16], DType::F64)
        .unwrap()
        .unwrap();
    let mut b = pool
        .try_acquire("state", &[16], DType::F64)
        .unwrap()
        .unwrap();
    assert_ne!(address(&mut a), address(&mut b));
    assert_eq!(pool.in_flight("state"), 2);
}

#[test]
fn tight_pool_grants_one_per_label_then_waits() {
    let pool = tight_pool();
    let held = pool.acquire("state", &[16], DType::F64).unwrap();
    // Another label with nothing in flight always gets one.
    let other = pool.try_acquire("status", &[16], DType::F64).unwrap();
    assert!(other.is_some());
    assert!(
        pool.try_acquire("state", &[16], DType::F64)
            .unwrap()
            .is_none()
    );
    assert!(acquire_within(&pool, "state", &[16], DType::F64, Duration::from_millis(20)).is_none());
    drop(held);
    assert!(
        pool.try_acquire("state", &[16], DType::F64)
            .unwrap()
            .is_some()
    );
}

#[test]
fn release_wakes_a_blocked_acquire_on_another_thread() {
    let pool = tight_pool();
    let mut held = pool.acquire("state", &[1024], DType::U32).unwrap();
    let at = address(&mut held);
    let (sender, receiver) = mpsc::channel();
    let waiter = {
        let pool = pool.clone();
        thread::spawn(move || {
            let buffer = acquire_within(&pool, "state", &[1024], DType::U32, PATIENCE);
            sender.send(buffer.map(|mut b| address(&mut b))).unwrap();
        })
    };
    // The waiter cannot get a buffer while this one is held.
    assert!(receiver.recv_timeout(Duration::from_millis(100)).is_err());
    drop(held);
    let got = receiver
        .recv_timeout(PATIENCE)
        .expect("the release woke the waiter");
    assert_eq!(got, Some(at), "the released buffer was handed over");
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
                    let mut buffer = acquire_within(&pool, "state", &[64], DType::U64, PATIENCE)
                        .expect("a buffer within the timeout");
                    assert_eq!(pool.in_flight("state"), 1);
                    buffer.host().unwrap()[0] = i;
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
    drop(pool.acquire("old", &[4096], DType::U8).unwrap());
    assert_eq!(pool.idle_buffers(), 1);
    let _held = pool.acquire("state", &[64], DType::U8).unwrap();
    assert!(
        pool.try_acquire("state", &[64], DType::U8)
            .unwrap()
            .is_none()
    );
    assert_eq!(pool.idle_buffers(), 0);
}

#[test]
fn unknown_ram_grants_one_buffer_per_label() {
    let pool = StagingPool::with_memory_probe(backend(), || None);
    let _held = pool.acquire("state", &[8], DType::I32).unwrap();
    assert!(
        pool.try_acquire("state", &[8], DType::I32)
            .unwrap()
            .is_none()
    );
    assert!(
        pool.try_acquire("other", &[8], DType::I32)
            .unwrap()
            .is_some()
    );
}

#[test]
fn clear_frees_idle_buffers_only() {
    let pool = roomy_pool();
    let held = pool.acquire("a", &[8], DType::F32).unwrap();
    drop(pool.acquire("b", &[8], DType::F32).unwrap());
    drop(pool.acquire("c", &[8], DType::F32).unwrap());
    assert_eq!(pool.idle_buffers(), 2);
    pool.clear();
    assert_eq!(pool.idle_buffers(), 0);
    drop(held);
    assert_eq!(
        pool.idle_buffers(),
        1,
        "a buffer in flight returns after clear"
    );
    drop(pool.acquire("b", &[8], DType::F32).unwrap());
    assert_eq!(pool.pinned_allocations(), 4, "b was allocated again");
}

#[test]
fn allocation_failure_is_returned_and_leaves_the_label_free() {
    let sim = SimBackend::new(1 << 30);
    let pool = StagingPool::with_memory_probe(Arc::new(sim.clone()), || None);
    sim.set_fail_allocations_after(Some(0));
    let refused = pool.acquire("state", &[8], DType::F32).map(drop);
    assert!(refused.unwrap_err().is_out_of_memory());
    assert_eq!(pool.in_flight("state"), 0);
    sim.set_fail_allocations_after(None);
    assert!(
        pool.try_acquire("state", &[8], DType::F32)
            .unwrap()
            .is_some()
    );
}

/// The simulated device, counting the page-locked blocks asked for
/// overwrite (which a backend need not zero-fill).
struct ForOverwrite {
    sim: SimBackend,
    blocks: Arc<AtomicUsize>,
}

impl Backend for ForOverwrite {
    fn name(&self) -> &'static str {
        "for-overwrite"
    }
    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        self.sim.mem_info()
    }
    fn create_stream(&self) -> Result<Arc<dyn Stream>, BackendError> {
        self.sim.create_stream()
    }
    fn alloc_device(&self, bytes: u64, stream: &dyn Stream) -> Result<DevicePtr, BackendError> {
        self.sim.alloc_device(bytes, stream)
    }
    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &dyn Stream,
    ) -> Result<(), BackendError> {
        self.sim.free_device(ptr, bytes, stream)
    }
    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.sim.alloc_pinned(bytes)
    }
    fn alloc_pinned_for_overwrite(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.sim.alloc_pinned(bytes)
    }
    fn launch(&self, launch: KernelLaunch<'_>, stream: &dyn Stream) -> Result<(), BackendError> {
        self.sim.launch(launch, stream)
    }
}

#[test]
fn staging_buffers_are_allocated_for_overwrite() {
    let blocks = Arc::new(AtomicUsize::new(0));
    let backend = ForOverwrite {
        sim: SimBackend::new(1 << 30),
        blocks: Arc::clone(&blocks),
    };
    let pool = StagingPool::with_memory_probe(Arc::new(backend), || None);
    drop(pool.acquire("y", &[8192], DType::U8).unwrap());
    assert_eq!(blocks.load(Ordering::Relaxed), 1);
}
