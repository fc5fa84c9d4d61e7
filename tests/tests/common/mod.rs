//! Shared helpers of the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;

use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cubie_mem::backend::{
    Backend, BackendError, DevicePtr, Event, KernelLaunch, MemInfo, PinnedBlock, Stream,
    StridedRows,
};
use cubie_mem::{
    ArrayRequest, ArrayResponse, DType, ManagerConfig, MemoryManager, Registration, SimBackend,
};

/// A manager on a simulated device with `free` bytes free out of `total`,
/// and no allocation granule (so byte figures are easy to reason about).
pub fn manager(total: u64, free: u64) -> (MemoryManager, SimBackend) {
    let sim = SimBackend::new(total).with_free(free);
    (manager_on(sim.clone()), sim)
}

/// A manager without granule on `sim`.
pub fn manager_on(sim: SimBackend) -> MemoryManager {
    MemoryManager::with_config(
        sim,
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    )
}

/// Counts calls of an invalidate hook.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl Counter {
    pub fn hook(&self) -> impl FnMut() + Send + 'static {
        let c = Arc::clone(&self.0);
        move || {
            c.fetch_add(1, Ordering::SeqCst);
        }
    }
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Collects the responses delivered to an `on_allocation_ready` hook.
#[derive(Clone, Default)]
pub struct Inbox(Arc<Mutex<Vec<ArrayResponse>>>);

impl Inbox {
    pub fn hook(&self) -> impl FnMut(ArrayResponse) + Send + 'static {
        let inbox = Arc::clone(&self.0);
        move |r| inbox.lock().unwrap().push(r)
    }
    pub fn take(&self) -> Vec<ArrayResponse> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A registration with an invalidate hook, so it may queue.
pub fn queuing() -> Registration {
    Registration::new().on_invalidate(|| {})
}

/// An f64 request of `bytes_per_run * runs` bytes laid out as `[per_run / 8, runs]`,
/// chunked along axis 1.
pub fn runs_request(bytes_per_run: usize, runs: usize) -> ArrayRequest {
    assert_eq!(bytes_per_run % 8, 0);
    ArrayRequest::new(DType::F64, [bytes_per_run / 8, runs])
        .chunk_axis(1)
        .total_runs(runs)
}

thread_local! {
    /// The log output captured on this thread, while a capture runs.
    static CAPTURED: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// Writes the process-wide subscriber's output into this thread's capture,
/// if one runs, and drops it otherwise.
struct ThreadCapture;

impl Write for ThreadCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        CAPTURED.with(|captured| {
            if let Some(buffer) = captured.borrow_mut().as_mut() {
                buffer.extend_from_slice(bytes);
            }
        });
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures the `tracing` output (debug and up) of `f` on this thread.
///
/// One process-wide subscriber writes every thread's events into that
/// thread's capture: a subscriber per test (`with_default`) would race
/// the process-wide interest cache of the callsites against other tests'
/// threads.
pub fn capture_logs<R>(f: impl FnOnce() -> R) -> (R, String) {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let installed = tracing_subscriber::fmt()
            .with_writer(|| ThreadCapture)
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .try_init();
        assert!(installed.is_ok(), "another global subscriber is installed");
    });
    CAPTURED.with(|captured| *captured.borrow_mut() = Some(Vec::new()));
    let result = f();
    let bytes = CAPTURED
        .with(|captured| captured.borrow_mut().take())
        .unwrap_or_default();
    (result, String::from_utf8(bytes).unwrap())
}

/// Queues one f64 `request` under `label` for `instance`, allocates, and
/// returns the array.
pub fn allocate_f64(
    mgr: &MemoryManager,
    instance: &cubie_mem::Instance,
    label: &str,
    request: ArrayRequest,
) -> cubie_mem::DeviceArray<f64> {
    mgr.queue_request(instance, [(label, request)]).unwrap();
    mgr.allocate_queue_for(instance)
        .unwrap()
        .take::<f64>(label)
        .unwrap()
}

/// The simulated device, logging allocations, frees and copies with the
/// stream each was ordered on ("alloc 32 on 2", "up 32 on 2", "pin 32").
#[derive(Clone)]
pub struct Logged {
    pub sim: SimBackend,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    pub fn new(sim: SimBackend) -> Self {
        Logged {
            sim,
            log: Arc::default(),
        }
    }

    fn note(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }

    /// The entries so far, clearing the log.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Backend for Logged {
    fn name(&self) -> &'static str {
        "logged"
    }
    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        self.sim.mem_info()
    }
    fn create_stream(&self) -> Result<Arc<dyn Stream>, BackendError> {
        Ok(Arc::new(LoggedStream {
            stream: self.sim.create_stream()?,
            log: self.clone(),
        }))
    }
    fn alloc_device(&self, bytes: u64, stream: &dyn Stream) -> Result<DevicePtr, BackendError> {
        self.note(format!("alloc {bytes} on {}", stream.id()));
        self.sim.alloc_device(bytes, stream)
    }
    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &dyn Stream,
    ) -> Result<(), BackendError> {
        self.note(format!("free on {}", stream.id()));
        self.sim.free_device(ptr, bytes, stream)
    }
    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.note(format!("pin {bytes}"));
        self.sim.alloc_pinned(bytes)
    }
    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        self.sim.is_page_locked(ptr, len)
    }
    fn launch(&self, launch: KernelLaunch<'_>, stream: &dyn Stream) -> Result<(), BackendError> {
        self.note(format!("launch {} on {}", launch.name, stream.id()));
        self.sim.launch(launch, stream)
    }
    fn mark_padding(&self, ptr: DevicePtr, bytes: u64) {
        self.sim.mark_padding(ptr, bytes);
    }
}

/// A stream of a [`Logged`] device, logging its copies; the device sees the
/// simulated stream it wraps ([`Stream::as_any`]).
struct LoggedStream {
    stream: Arc<dyn Stream>,
    log: Logged,
}

impl LoggedStream {
    fn note(&self, what: String) {
        self.log.note(format!("{what} on {}", self.stream.id()));
    }
}

impl Stream for LoggedStream {
    fn id(&self) -> u64 {
        self.stream.id()
    }
    fn synchronize(&self) -> Result<(), BackendError> {
        self.stream.synchronize()
    }
    fn record(&self) -> Result<Box<dyn Event>, BackendError> {
        self.stream.record()
    }
    fn wait(&self, event: &dyn Event) -> Result<(), BackendError> {
        self.stream.wait(event)
    }
    fn copy_to_device(&self, dst: DevicePtr, offset: u64, src: &[u8]) -> Result<(), BackendError> {
        self.note(format!("up {}", src.len()));
        self.stream.copy_to_device(dst, offset, src)
    }
    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        self.note(format!("down {}", dst.len()));
        self.stream.copy_from_device(dst, src, offset)
    }
    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), BackendError> {
        self.note(format!("up async {len}"));
        // SAFETY: the caller's guarantees pass through unchanged.
        unsafe { self.stream.copy_to_device_async(dst, offset, src, len) }
    }
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        len: usize,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        self.note(format!("down async {len}"));
        // SAFETY: the caller's guarantees pass through unchanged.
        unsafe { self.stream.copy_from_device_async(dst, len, src, offset) }
    }
    unsafe fn copy_to_device_strided_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        rows: StridedRows,
    ) -> Result<(), BackendError> {
        self.note(format!("up strided {} x {}", rows.rows, rows.row_bytes));
        // SAFETY: the caller's guarantees pass through unchanged.
        unsafe {
            self.stream
                .copy_to_device_strided_async(dst, offset, src, rows)
        }
    }
    unsafe fn copy_from_device_strided_async(
        &self,
        dst: *mut u8,
        rows: StridedRows,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        self.note(format!("down strided {} x {}", rows.rows, rows.row_bytes));
        // SAFETY: the caller's guarantees pass through unchanged.
        unsafe {
            self.stream
                .copy_from_device_strided_async(dst, rows, src, offset)
        }
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self.stream.as_any()
    }
}

/// A manager without granule on a [`Logged`] simulated device.
pub fn logged_manager(total: u64) -> (MemoryManager, Logged) {
    let logged = Logged::new(SimBackend::new(total));
    let mgr = MemoryManager::with_config(
        logged.clone(),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    (mgr, logged)
}

/// 0, 1, 2, the top of the range, powers of two and their neighbours, and
/// random values.
pub fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(2),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        (0u32..64).prop_map(|k| 1u64 << k),
        (1u32..64).prop_map(|k| (1u64 << k) - 1),
        (0u32..63).prop_map(|k| (1u64 << k) + 1),
        any::<u64>(),
    ]
}

/// [`edge_u64`] for `usize`.
pub fn edge_usize() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(2),
        Just(usize::MAX),
        Just(usize::MAX - 1),
        Just(usize::MAX / 2),
        Just(usize::MAX / 2 + 1),
        (0u32..usize::BITS).prop_map(|k| 1usize << k),
        (1u32..usize::BITS).prop_map(|k| (1usize << k) - 1),
        any::<usize>(),
        0usize..100,
    ]
}

/// Launches a kernel of `duration` that writes twice each element of
/// `input` into `output`: the pipelines' timing tests' computation.
pub fn double(
    input: &cubie_mem::DeviceArray<f32>,
    output: &cubie_mem::DeviceArray<f32>,
    duration: std::time::Duration,
) -> Result<(), cubie_mem::MemError> {
    cubie_mem::HostKernel::new("double", duration)
        .reads(input)
        .writes(output)
        .launch(|args| {
            let (x, y) = (args.read(input)?, args.write(output)?);
            y.iter_mut().zip(x).for_each(|(y, x)| *y = 2.0 * x);
            Ok(())
        })
}
