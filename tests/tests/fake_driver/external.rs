//! A stream of another library bound as the current stream
//! (`bind_cuda_stream`), read back from the fake's order log: the manager's
//! work inside the guard goes to it, a free after the guard waits for its
//! work, a stream of another context is refused, and once the guard is
//! gone the manager neither destroys the stream nor touches it again.

use std::ffi::c_void;
use std::ptr;

use cubie_mem::cuda::CudaBackend;
use cubie_mem::{ArrayRequest, DeviceArray, Instance, MemoryManager, Registration};
use serde_json::Value;

use super::*;

/// A driver handle (`CUstream`, `CUevent`).
type Handle = *mut c_void;

/// The driver calls the tests make themselves, as another library would.
struct Driver {
    stream_create: unsafe extern "C" fn(*mut Handle, u32) -> u32,
    stream_destroy: unsafe extern "C" fn(Handle) -> u32,
    stream_synchronize: unsafe extern "C" fn(Handle) -> u32,
    event_create: unsafe extern "C" fn(*mut Handle, u32) -> u32,
    event_record: unsafe extern "C" fn(Handle, Handle) -> u32,
    event_destroy: unsafe extern "C" fn(Handle) -> u32,
    _library: libloading::Library,
}

impl Driver {
    fn open() -> Driver {
        // SAFETY: the fake driver, already loaded; its initialisers only
        // read its knobs.
        let library = unsafe { libloading::Library::new("libcuda.so.1") }.unwrap();
        // SAFETY: the prototypes of cuda.h.
        unsafe {
            Driver {
                stream_create: *library.get(b"cuStreamCreate").unwrap(),
                stream_destroy: *library.get(b"cuStreamDestroy_v2").unwrap(),
                stream_synchronize: *library.get(b"cuStreamSynchronize").unwrap(),
                event_create: *library.get(b"cuEventCreate").unwrap(),
                event_record: *library.get(b"cuEventRecord").unwrap(),
                event_destroy: *library.get(b"cuEventDestroy_v2").unwrap(),
                _library: library,
            }
        }
    }

    /// A non-blocking stream on `cuda`'s context, made current.
    fn stream_on(&self, cuda: &CudaBackend) -> Handle {
        cuda.make_current().unwrap();
        let mut stream = ptr::null_mut();
        // SAFETY: a live out-pointer; CU_STREAM_NON_BLOCKING.
        assert_eq!(unsafe { (self.stream_create)(&mut stream, 1) }, 0);
        stream
    }

    /// Records an event on `stream` (an op of its own in the order log).
    fn record(&self, stream: Handle) {
        let mut event = ptr::null_mut();
        // SAFETY: a live out-pointer and live handles of the current context.
        unsafe {
            assert_eq!((self.event_create)(&mut event, 2), 0);
            assert_eq!((self.event_record)(event, stream), 0);
            assert_eq!((self.event_destroy)(event), 0);
        }
    }
}

/// One operation of the order log: its kind, stream, index on the stream
/// and clock.
struct Op {
    kind: String,
    stream: u64,
    seq: u64,
    clock: Value,
}

impl Op {
    /// Whether the device must finish `self` before it starts `later`.
    fn before(&self, later: &Op) -> bool {
        later.clock[self.stream.to_string()]
            .as_u64()
            .is_some_and(|seq| seq >= self.seq)
    }
}

fn read_log(path: &std::path::Path) -> Vec<Op> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap();
            Op {
                kind: value["kind"].as_str().unwrap().to_owned(),
                stream: value["stream"].as_u64().unwrap(),
                seq: value["seq"].as_u64().unwrap(),
                clock: value["clock"].clone(),
            }
        })
        .collect()
}

fn allocate(mgr: &MemoryManager, solver: &Instance, label: &str) -> DeviceArray<f64> {
    mgr.queue_request(
        solver,
        [(label, ArrayRequest::of::<f64>([1024]).unchunkable())],
    )
    .unwrap();
    mgr.allocate_queue_for(solver)
        .unwrap()
        .take::<f64>(label)
        .unwrap()
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn copies_and_an_allocation_inside_an_external_guard_are_ordered_on_its_stream() {
    let fake = Fake::open();
    let driver = Driver::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let x = allocate(&mgr, &solver, "x");
    let external = driver.stream_on(&cuda);
    let log = tempfile::NamedTempFile::new().unwrap();
    fake.command(&format!("log={}", log.path().display()));
    x.copy_from_host(&[1.0; 1024]).unwrap();
    // SAFETY: the stream outlives the guard, which is dropped below.
    let guard = unsafe { cubie_mem::cuda::bind_raw_stream(&mgr, external) }.unwrap();
    x.copy_from_host(&[2.0; 1024]).unwrap();
    let y = allocate(&mgr, &solver, "y");
    y.copy_from_host(&[3.0; 1024]).unwrap();
    let mut back = vec![0.0; 1024];
    x.copy_to_host(&mut back).unwrap();
    drop(guard);
    driver.record(external);
    fake.command("log=");

    let ops = read_log(log.path());
    let stream_of = |kind: &str| -> Vec<u64> {
        ops.iter()
            .filter(|op| op.kind == kind)
            .map(|op| op.stream)
            .collect()
    };
    let theirs = ops.last().unwrap().stream;
    let uploads = stream_of("h2d");
    assert_eq!(uploads.len(), 3, "{uploads:?}");
    assert_ne!(uploads[0], theirs, "before the guard: the group's stream");
    assert_eq!(
        &uploads[1..],
        [theirs, theirs],
        "inside: the external stream"
    );
    assert_eq!(stream_of("alloc"), [theirs]);
    assert_eq!(stream_of("d2h"), [theirs]);
    assert_eq!(back, vec![2.0; 1024]);
    assert_eq!(y.to_vec().unwrap(), vec![3.0; 1024]);
    drop((x, y));
    // SAFETY: the stream is live: the manager never destroys it.
    assert_eq!(unsafe { (driver.stream_destroy)(external) }, 0);
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_free_after_an_external_guard_is_ordered_after_its_streams_work() {
    let fake = Fake::open();
    let driver = Driver::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let external = driver.stream_on(&cuda);
    let log = tempfile::NamedTempFile::new().unwrap();
    fake.command(&format!("log={}", log.path().display()));
    // SAFETY: the stream outlives the guard, which is dropped below.
    let guard = unsafe { cubie_mem::cuda::bind_raw_stream(&mgr, external) }.unwrap();
    let y = allocate(&mgr, &solver, "y");
    y.copy_from_host(&[3.0; 1024]).unwrap();
    drop(guard);
    drop(y);
    mgr.free(&solver, "y").unwrap();
    fake.command("log=");

    let ops = read_log(log.path());
    let upload = ops.iter().find(|op| op.kind == "h2d").unwrap();
    let free = ops.iter().find(|op| op.kind == "free").unwrap();
    assert_ne!(free.stream, upload.stream, "freed on the group's stream");
    assert!(
        upload.before(free),
        "the free is ordered after the external stream's upload on the device"
    );
    // SAFETY: the stream is live: the manager never destroys it.
    assert_eq!(unsafe { (driver.stream_destroy)(external) }, 0);
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn an_external_stream_destroyed_after_its_guard_leaves_nothing_dangling() {
    let fake = Fake::open();
    let driver = Driver::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let x = allocate(&mgr, &solver, "x");
    let external = driver.stream_on(&cuda);
    let y = {
        // SAFETY: the stream outlives the guard, which drops in this block.
        let _guard = unsafe { cubie_mem::cuda::bind_raw_stream(&mgr, external) }.unwrap();
        x.copy_from_host(&[4.0; 1024]).unwrap();
        allocate(&mgr, &solver, "y")
    };
    // The stream is live after the guard (never destroyed by the manager);
    // its owner destroys it.
    // SAFETY: a live stream of the current context.
    unsafe {
        assert_eq!((driver.stream_synchronize)(external), 0);
        assert_eq!((driver.stream_destroy)(external), 0);
    }
    // Copies, frees and the backend's teardown never touch it again.
    y.copy_from_host(&[5.0; 1024]).unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![4.0; 1024]);
    drop((x, y));
    mgr.free(&solver, "x").unwrap();
    mgr.free(&solver, "y").unwrap();
    drop(mgr);
    drop(cuda);
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_stream_of_another_context_or_a_default_stream_is_refused() {
    let fake = Fake::open();
    let driver = Driver::open();
    let cuda = CudaBackend::new(0).unwrap();
    let other = CudaBackend::new(1).unwrap();
    let mgr = manager(&cuda);
    let foreign = driver.stream_on(&other);
    // SAFETY: a live stream (of another context: refused before any use).
    let error = unsafe { cubie_mem::cuda::bind_raw_stream(&mgr, foreign) }.unwrap_err();
    let reason = refusal(&error, "bind an external stream");
    assert!(
        reason.contains("not to this backend's") && reason.contains("device 0"),
        "{reason}"
    );
    for default in [ptr::null_mut(), 1 as Handle, 2 as Handle] {
        // SAFETY: the default streams are refused before any driver call.
        let error = unsafe { cubie_mem::cuda::bind_raw_stream(&mgr, default) }.unwrap_err();
        let reason = refusal(&error, "bind an external stream");
        assert!(reason.contains("is a default stream"), "{reason}");
    }
    other.make_current().unwrap();
    // SAFETY: the stream of `other`'s context, which is current.
    assert_eq!(unsafe { (driver.stream_destroy)(foreign) }, 0);
    fake.assert_clean();
}
