//! The CUDA backend, on whatever this machine has.
//!
//! Without a usable device (no GPU, or the stub driver of `ci/cuda-stub`)
//! every test checks the no-device path: `CudaBackend::new` fails with
//! `MemError::NoDevice` naming the cause, and the default manager falls back
//! to the simulated device. With a device the same tests exercise it:
//! allocation and free on streams, copy round trips for every element type,
//! chunked allocation of a buffer struct, eviction of an idle owner, the
//! pool's reuse across batches, pinned block reuse, asynchronous copies
//! between page-locked blocks and the device ordered by events, and the
//! example kernel.
//!
//! `CUBIE_REQUIRE_GPU=1` makes the no-device path a failure (the GPU bundle
//! sets it, so that a device run cannot pass by skipping the device), and
//! `CUBIE_CUDA_STUB=1` (set by `ci/cuda-check.sh`) pins the exact message the
//! stub driver must produce.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::error::Error;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cubie_mem::backend::cuda::{CudaBackend, EulerDecay};
use cubie_mem::backend::{
    Access, BackendError, DevicePtr, HandleKind, KernelArg, KernelBody, KernelLaunch, PinnedBlock,
    StreamHandle,
};
use cubie_mem::{
    ArrayRequest, ArrayResponse, Backend, DeviceArray, Element, GpuBuffers, LimitMode,
    ManagerConfig, MemError, MemoryKind, MemoryManager, PinnedArray, Registration, ReleaseReason,
    RequestSet, SimBackend, default_memmgr,
};

/// What a device test returns: the manager's errors and the backend's.
type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

const REQUIRE_GPU_ENV: &str = "CUBIE_REQUIRE_GPU";
const STUB_ENV: &str = "CUBIE_CUDA_STUB";

/// The device's pool figures are process-wide: one device test at a time.
static DEVICE: Mutex<()> = Mutex::new(());

fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// Checks that `error` is the clear no-device error, and that no device was
/// required.
fn check_no_device(error: &MemError) {
    assert!(
        !env_flag(REQUIRE_GPU_ENV),
        "{REQUIRE_GPU_ENV}=1 but the CUDA device cannot be used: {error}"
    );
    let MemError::NoDevice { cause } = error else {
        panic!("expected MemError::NoDevice, got {error:?}");
    };
    assert!(
        error.to_string().starts_with("no CUDA device available: ") && cause.contains("failed"),
        "{error}"
    );
    if env_flag(STUB_ENV) {
        assert_eq!(
            cause,
            "initialising the CUDA driver (cuInit) failed: NoDevice (code 100): no CUDA-capable device is \
             detected; check that the NVIDIA driver is loaded and CUDA_VISIBLE_DEVICES"
        );
    }
}

/// Runs `test` on device 0 when it answers; otherwise checks the no-device
/// error.
fn on_device(test: impl FnOnce(CudaBackend) -> TestResult) {
    let _one_at_a_time = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    match CudaBackend::new(0) {
        Ok(cuda) => test(cuda).unwrap(),
        Err(error) => check_no_device(&error),
    }
}

fn manager(cuda: &CudaBackend) -> MemoryManager {
    MemoryManager::with_config(
        cuda.clone(),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    )
}

/// Counts calls of an invalidate hook.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

impl Counter {
    fn hook(&self) -> impl FnMut() + Send + 'static {
        let count = Arc::clone(&self.0);
        move || {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn the_default_manager_uses_the_device_only_when_it_answers() {
    let _one_at_a_time = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let mgr = default_memmgr().unwrap();
    match CudaBackend::new(0) {
        Ok(cuda) => {
            assert_eq!(mgr.backend().name(), "cuda");
            assert_eq!(
                mgr.get_memory_info().unwrap().total,
                cuda.mem_info().unwrap().total
            );
            assert!(!cuda.device_name().is_empty());
        }
        Err(error) => {
            check_no_device(&error);
            assert_eq!(mgr.backend().name(), "simulated");
        }
    }
}

#[test]
fn a_missing_device_ordinal_is_a_clear_error() {
    let _one_at_a_time = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let error = CudaBackend::new(4096).unwrap_err();
    let MemError::NoDevice { cause } = &error else {
        panic!("expected MemError::NoDevice, got {error:?}");
    };
    if CudaBackend::new(0).is_ok() {
        assert!(
            cause.starts_with("device 4096 was requested but the driver reports "),
            "{cause}"
        );
    } else {
        check_no_device(&error);
    }
}

#[test]
fn streams_events_allocation_and_copies_on_the_backend() {
    on_device(|cuda| {
        let (a, b) = (cuda.create_stream()?, cuda.create_stream()?);
        assert_ne!(a, b);
        let small = cuda.alloc_device(1000, a)?;
        let large = cuda.alloc_device(1 << 20, b)?;
        let data: Vec<u8> = (0..1000).map(|i| (i % 251) as u8).collect();

        cuda.copy_to_device(small, 0, &data, a)?;
        let mut back = vec![0u8; 1000];
        cuda.copy_from_device(&mut back, small, 0, a)?;
        assert_eq!(back, data);

        cuda.copy_to_device(large, 4096, &data, b)?;
        let mut part = vec![0u8; 10];
        cuda.copy_from_device(&mut part, large, 4096 + 5, b)?;
        assert_eq!(part, data[5..15]);
        // Across streams: the copy on `a` is ordered after `large`'s stream.
        cuda.copy_from_device(&mut part, large, 4096 + 20, a)?;
        assert_eq!(part, data[20..30]);

        assert!(matches!(
            cuda.copy_to_device(small, 999, &[1, 2], a),
            Err(BackendError::OutOfBounds {
                offset: 999,
                end: 1001,
                size: 1000,
                ..
            })
        ));

        let event = cuda.record_event(a)?;
        cuda.synchronize_event(event)?;
        assert!(cuda.event_complete(event)?);
        cuda.destroy_event(event)?;
        assert!(matches!(
            cuda.event_complete(event),
            Err(BackendError::UnknownHandle {
                kind: HandleKind::Event,
                ..
            })
        ));
        assert!(matches!(
            cuda.synchronize_event(event),
            Err(BackendError::UnknownHandle {
                kind: HandleKind::Event,
                ..
            })
        ));

        assert!(
            matches!(
                cuda.free_device(small, 999, a),
                Err(BackendError::OutOfBounds {
                    end: 999,
                    size: 1000,
                    ..
                })
            ),
            "a free of the wrong size is refused"
        );
        cuda.free_device(small, 1000, a)?;
        assert!(
            matches!(
                cuda.free_device(small, 1000, a),
                Err(BackendError::UnknownHandle {
                    kind: HandleKind::Allocation,
                    ..
                })
            ),
            "a double free is refused"
        );
        assert!(cuda.copy_from_device(&mut part, small, 0, a).is_err());
        cuda.free_device(large, 1 << 20, a)?;
        cuda.synchronize(a)?;

        let total = cuda.mem_info()?.total;
        let error = cuda.alloc_device(total, a).unwrap_err();
        assert!(error.is_out_of_memory(), "{error}");
        let BackendError::OutOfMemory {
            requested, free, ..
        } = error
        else {
            panic!("expected OutOfMemory, got {error:?}");
        };
        assert_eq!(requested.0, total);
        assert!(free.is_some_and(|free| free.0 < total), "{free:?}");

        cuda.destroy_stream(a)?;
        cuda.destroy_stream(b)?;
        assert!(matches!(
            cuda.synchronize(a),
            Err(BackendError::UnknownHandle {
                kind: HandleKind::Stream,
                ..
            })
        ));
        Ok(())
    });
}

/// Writes `values` through the device array `label`, reads them back whole
/// and in part.
fn device_round_trip<T: Element + PartialEq + Debug>(
    response: &mut ArrayResponse,
    label: &str,
    values: Vec<T>,
) -> Result<DeviceArray<T>, MemError> {
    let array = response.take::<T>(label)?;
    array.copy_from_host(&values)?;
    assert_eq!(array.to_vec()?, values, "{label}");
    let patch = &values[values.len() - 7..];
    array.copy_from_host_at(3, patch)?;
    let mut window = vec![T::zeroed(); 7];
    array.copy_to_host_at(3, &mut window)?;
    assert_eq!(window, patch, "{label} at an offset");
    Ok(array)
}

#[test]
fn copy_round_trips_for_every_element_type() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let solver = mgr.register(
            Registration::new()
                .stream_group("cuda-round-trip")
                .on_invalidate(|| {}),
        )?;
        let other = mgr.register(
            Registration::new()
                .stream_group("cuda-other-stream")
                .on_invalidate(|| {}),
        )?;
        let n = 4099;
        let device = |request: ArrayRequest| request.unchunkable();
        let pinned = |request: ArrayRequest| request.memory(MemoryKind::Pinned).unchunkable();
        mgr.queue_request(
            &solver,
            [
                ("f32", device(ArrayRequest::of::<f32>([n]))),
                ("f64", device(ArrayRequest::of::<f64>([n]))),
                ("i32", device(ArrayRequest::of::<i32>([n]))),
                ("u8", device(ArrayRequest::of::<u8>([n]))),
                ("u32", device(ArrayRequest::of::<u32>([n]))),
                ("i64", device(ArrayRequest::of::<i64>([n]))),
                ("u64", device(ArrayRequest::of::<u64>([n]))),
                ("f64-out", device(ArrayRequest::of::<f64>([n]))),
                ("pinned-in", pinned(ArrayRequest::of::<f64>([n]))),
                ("pinned-out", pinned(ArrayRequest::of::<f64>([n]))),
            ],
        )?;
        let mut r = mgr.allocate_queue_for(&solver)?;
        device_round_trip(
            &mut r,
            "f32",
            (0..n).map(|i| i as f32 * 0.5 - 7.0).collect(),
        )?;
        let f64s = device_round_trip(&mut r, "f64", (0..n).map(|i| (i as f64).sqrt()).collect())?;
        device_round_trip(&mut r, "i32", (0..n).map(|i| i as i32 - 2000).collect())?;
        device_round_trip(&mut r, "u8", (0..n).map(|i| (i % 256) as u8).collect())?;
        device_round_trip(&mut r, "u32", (0..n).map(|i| (i as u32) << 20).collect())?;
        device_round_trip(&mut r, "i64", (0..n).map(|i| -(i as i64) << 40).collect())?;
        device_round_trip(&mut r, "u64", (0..n).map(|i| u64::MAX - i as u64).collect())?;

        // Pinned host memory to device and back into pinned memory.
        let pinned_in: PinnedArray<f64> = r.take_pinned("pinned-in")?;
        let pinned_out: PinnedArray<f64> = r.take_pinned("pinned-out")?;
        assert!(
            pinned_out.read()?.iter().all(|&x| x == 0.0),
            "pinned memory starts zeroed"
        );
        let expected: Vec<f64> = (0..n).map(|i| 1.0 / (1.0 + i as f64)).collect();
        pinned_in.write()?.copy_from_slice(&expected);
        let staged = r.take::<f64>("f64-out")?;
        staged.copy_from_host(&pinned_in.read()?)?;
        staged.copy_to_host(&mut pinned_out.write()?)?;
        assert_eq!(&*pinned_out.read()?, expected.as_slice());

        // Inside another group's current-stream guard, copies are ordered on
        // that stream (after the arrays' own stream).
        {
            let guard = mgr.bind_stream(&other)?;
            assert_eq!(guard.stream(), mgr.stream(&other)?);
            let values: Vec<f64> = (0..n).map(|i| i as f64 * 3.0).collect();
            f64s.copy_from_host(&values)?;
            assert_eq!(f64s.to_vec()?, values);
        }
        mgr.synchronize(&solver)?;
        Ok(())
    });
}

/// The buffers of a batch solver, declared as `#[derive(GpuBuffers)]` would
/// declare them.
struct SolverBuffers {
    state: DeviceArray<f64>,
    status: PinnedArray<i32>,
    initial: DeviceArray<f64>,
}

struct SolverDims {
    n_states: usize,
    n_saves: usize,
    n_runs: usize,
}

impl GpuBuffers for SolverBuffers {
    type Dims = SolverDims;
    const STREAM_GROUP: &'static str = "cuda-integrators";
    const LABELS: &'static [&'static str] = &["state", "status", "initial"];

    fn requests(dims: &SolverDims) -> RequestSet {
        [
            (
                "state",
                ArrayRequest::of::<f64>([dims.n_saves, dims.n_states, dims.n_runs])
                    .total_runs(dims.n_runs),
            ),
            (
                "status",
                ArrayRequest::of::<i32>([dims.n_runs])
                    .memory(MemoryKind::Pinned)
                    .chunk_axis(0)
                    .total_runs(dims.n_runs),
            ),
            (
                "initial",
                ArrayRequest::of::<f64>([dims.n_states]).unchunkable(),
            ),
        ]
        .into_iter()
        .collect()
    }

    fn from_response_set(response: &mut ArrayResponse, set: usize) -> Result<Self, MemError> {
        Ok(SolverBuffers {
            state: response.take_set("state", set)?,
            status: response.take_pinned_set("status", set)?,
            initial: response.take_set("initial", set)?,
        })
    }
}

#[test]
fn a_buffer_struct_too_large_for_its_share_is_allocated_in_chunks() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        mgr.set_limit_mode(LimitMode::Active);
        let total = mgr.get_memory_info()?.total;
        // A 256 MiB share for a batch of about 1 GiB.
        let share = (256u64 << 20) as f64 / total as f64;
        let solver = mgr.register(
            SolverBuffers::registration()
                .proportion(share)
                .on_invalidate(|| {}),
        )?;
        let dims = SolverDims {
            n_states: 8,
            n_saves: 16,
            n_runs: 1 << 20,
        };
        let buffers = mgr.allocate_buffers::<SolverBuffers>(&solver, &dims)?;
        let plan = *buffers.plan();
        assert!(plan.chunks >= 4, "{plan:?}");
        assert_eq!(plan.chunks, dims.n_runs.div_ceil(plan.chunk_length));
        assert_eq!(
            buffers.state.shape(),
            [dims.n_saves, dims.n_states, plan.chunk_length]
        );
        assert_eq!(buffers.status.shape(), [plan.chunk_length]);
        assert_eq!(buffers.initial.shape(), [dims.n_states]);
        assert!(mgr.allocated_bytes(&solver) <= mgr.cap(&solver));

        // Every chunk goes through the same buffers.
        let mut seen = vec![0.0f64; buffers.state.len()];
        for chunk in 0..plan.chunks {
            let values: Vec<f64> = (0..buffers.state.len())
                .map(|i| (chunk * 1_000_000 + i) as f64)
                .collect();
            buffers.state.copy_from_host(&values)?;
            buffers.state.copy_to_host(&mut seen)?;
            assert_eq!(seen, values, "chunk {chunk}");
            buffers.status.write()?.fill(chunk as i32);
        }
        buffers.initial.copy_from_host(&[1.0; 8])?;
        assert_eq!(buffers.initial.to_vec()?, [1.0; 8]);
        Ok(())
    });
}

#[test]
fn an_idle_owner_is_evicted_when_the_device_is_short() {
    on_device(|cuda| {
        let mgr = MemoryManager::new(cuda.clone());
        let free = mgr.get_memory_info()?.free;
        let batch = free / 10 * 6;
        let evicted = Counter::default();
        let idle = mgr.register(
            Registration::new()
                .stream_group("cuda-evict-idle")
                .on_invalidate(evicted.hook()),
        )?;
        let busy = mgr.register(
            Registration::new()
                .stream_group("cuda-evict-new")
                .on_invalidate(|| {}),
        )?;
        let request = |bytes: u64| ArrayRequest::of::<u8>([bytes as usize]).unchunkable();

        mgr.queue_request(&idle, [("held", request(batch))])?;
        let held = mgr.allocate_queue_for(&idle)?.take::<u8>("held")?;
        held.copy_from_host_at(0, &[7u8; 64])?;
        let work = mgr.begin_work(&idle)?;
        work.finish()?;
        mgr.synchronize(&idle)?;

        mgr.queue_request(&busy, [("new", request(batch))])?;
        let mut response = mgr.allocate_queue_for(&busy)?;
        assert_eq!(response.chunks, 1);
        assert_eq!(evicted.get(), 1, "the idle owner was evicted");
        assert_eq!(held.release_reason(), Some(ReleaseReason::Evicted));
        assert!(matches!(
            held.to_vec(),
            Err(MemError::Released {
                reason: ReleaseReason::Evicted,
                ..
            })
        ));
        let new = response.take::<u8>("new")?;
        new.copy_from_host_at(batch as usize - 3, &[1, 2, 3])?;
        let mut tail = [0u8; 3];
        new.copy_to_host_at(batch as usize - 3, &mut tail)?;
        assert_eq!(tail, [1, 2, 3]);
        assert_eq!(mgr.stats().total.evictions, 1);

        drop((new, response));
        mgr.free_all();
        mgr.synchronize(&busy)?;
        cuda.trim_pool(0)?;
        Ok(())
    });
}

#[test]
fn a_second_identical_batch_reuses_the_pool_without_growing_driver_memory() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let batch_bytes: u64 = 3 * (64 << 20);
        let run_batch = || -> TestResult<(u64, u64)> {
            let solver = mgr.register(
                Registration::new()
                    .stream_group("cuda-pool")
                    .on_invalidate(|| {}),
            )?;
            mgr.queue_request(
                &solver,
                ["a", "b", "c"]
                    .map(|label| (label, ArrayRequest::of::<f32>([16 << 20]).unchunkable())),
            )?;
            let mut response = mgr.allocate_queue_for(&solver)?;
            let a = response.take::<f32>("a")?;
            a.copy_from_host(&vec![1.5; 16 << 20])?;
            let figures = (cuda.pool_usage()?.reserved, cuda.driver_mem_info()?.free);
            drop(a);
            let stream = mgr.stream(&solver)?;
            drop(solver);
            cuda.synchronize(stream)?;
            Ok(figures)
        };

        let (reserved_first, driver_free_first) = run_batch()?;
        let allocations_first = mgr.stats().total.allocations;
        let (reserved_second, driver_free_second) = run_batch()?;
        assert_eq!(mgr.stats().total.allocations, allocations_first + 3);
        assert!(reserved_first >= batch_bytes);
        assert_eq!(
            reserved_second, reserved_first,
            "the second batch was served from the pool's idle memory"
        );
        // The driver's figure also moves with other processes; a growth by
        // the batch would be far beyond this allowance.
        assert!(
            driver_free_second + batch_bytes / 16 >= driver_free_first,
            "driver free memory fell from {driver_free_first} to {driver_free_second}"
        );
        assert!(
            mgr.get_memory_info()?.free >= cuda.driver_mem_info()?.free + batch_bytes,
            "idle pool memory counts as free for the planner"
        );
        Ok(())
    });
}

#[test]
fn released_pinned_blocks_are_reused() {
    on_device(|cuda| {
        cuda.clear_pinned_cache();
        let mut first = cuda.alloc_pinned(10_000)?;
        first.bytes_mut().fill(0xAB);
        drop(first);
        let cached = cuda.pinned_cached_bytes();
        assert_eq!(cached, 12_288, "the block (rounded to pages) is kept");
        let second = cuda.alloc_pinned(9_000)?;
        assert_eq!(cuda.pinned_cached_bytes(), 0, "the cached block was reused");
        assert_eq!(second.bytes().len(), 9_000);
        assert!(
            second.bytes().iter().all(|&b| b == 0),
            "a reused block is zeroed"
        );
        assert_eq!(second.bytes().as_ptr() as usize % 64, 0);
        drop(second);
        cuda.clear_pinned_cache();
        assert_eq!(cuda.pinned_cached_bytes(), 0);
        Ok(())
    });
}

/// The pattern byte `i` of round `round` holds.
fn pattern(round: u8, i: usize) -> u8 {
    (i as u8)
        .wrapping_mul(31)
        .wrapping_add(round.wrapping_mul(7))
        ^ (i >> 8) as u8
}

/// Asynchronous copies of `len` bytes between page-locked blocks and device
/// memory: an upload on one stream, an event that a second stream waits for,
/// a download on that stream, and one `synchronize_event` for both copies;
/// then a partial upload and download at an offset on one stream, again
/// waited for once. No stream is synchronised between the copies.
fn async_round_trip(backend: &dyn Backend, len: usize) -> TestResult {
    let streams = (backend.create_stream()?, backend.create_stream()?);
    let mut source = backend.alloc_pinned(len as u64)?;
    let mut target = backend.alloc_pinned(len as u64)?;
    let result = async_copies(backend, len, streams, &mut *source, &mut *target);
    // Whatever happened, no copy may still use the blocks when they drop.
    let drained = backend
        .synchronize(streams.0)
        .and(backend.synchronize(streams.1));
    backend.destroy_stream(streams.0)?;
    backend.destroy_stream(streams.1)?;
    drop((source, target));
    result?;
    Ok(drained?)
}

/// The copies of [`async_round_trip`] on the streams `(a, b)`.
fn async_copies(
    backend: &dyn Backend,
    len: usize,
    (a, b): (StreamHandle, StreamHandle),
    source: &mut dyn PinnedBlock,
    target: &mut dyn PinnedBlock,
) -> TestResult {
    assert!(len > 4096);
    let device = backend.alloc_device(len as u64, a)?;
    source
        .bytes_mut()
        .iter_mut()
        .enumerate()
        .for_each(|(i, byte)| *byte = pattern(1, i));

    // SAFETY: both ranges are whole page-locked blocks of this backend; they
    // are not touched until `downloaded` has been waited for (the download is
    // ordered after the upload by `uploaded`), and the caller synchronises
    // the streams before dropping them.
    unsafe { backend.copy_to_device_async(device, 0, source.bytes().as_ptr(), len, a)? };
    let uploaded = backend.record_event(a)?;
    backend.wait_event(b, uploaded)?;
    // SAFETY: as above.
    unsafe {
        backend.copy_from_device_async(target.bytes_mut().as_mut_ptr(), len, device, 0, b)?;
    }
    let downloaded = backend.record_event(b)?;
    backend.synchronize_event(downloaded)?;
    assert!(backend.event_complete(uploaded)?);
    assert!(backend.event_complete(downloaded)?);
    let mismatch = (0..len).find(|&i| target.bytes()[i] != pattern(1, i));
    assert_eq!(mismatch, None, "first differing byte of the round trip");

    // A window at an odd offset, up and the whole allocation down, on one stream.
    let (offset, window) = (4099usize, len - 4099 - 17);
    source.bytes_mut()[..window]
        .iter_mut()
        .enumerate()
        .for_each(|(i, byte)| *byte = pattern(2, i));
    target.bytes_mut().fill(0);
    // SAFETY: the ranges lie in the blocks, which are left alone until
    // `done` has been waited for.
    unsafe {
        backend.copy_to_device_async(device, offset as u64, source.bytes().as_ptr(), window, b)?;
        backend.copy_from_device_async(target.bytes_mut().as_mut_ptr(), len, device, 0, b)?;
    }
    let done = backend.record_event(b)?;
    backend.synchronize_event(done)?;
    let expected: Vec<u8> = (0..len)
        .map(|i| match i.checked_sub(offset) {
            Some(j) if j < window => pattern(2, j),
            _ => pattern(1, i),
        })
        .collect();
    assert!(target.bytes() == expected.as_slice(), "the window landed");

    // Out of bounds and unknown handles are refused before anything is queued.
    // SAFETY: the calls fail their checks, so nothing reads or writes the blocks.
    unsafe {
        assert!(matches!(
            backend.copy_to_device_async(device, 1, source.bytes().as_ptr(), len, b),
            Err(BackendError::OutOfBounds { .. })
        ));
        assert!(matches!(
            backend.copy_from_device_async(target.bytes_mut().as_mut_ptr(), len, device, 1, b),
            Err(BackendError::OutOfBounds { .. })
        ));
        assert!(matches!(
            backend.copy_to_device_async(device, 0, source.bytes().as_ptr(), 8, StreamHandle(9999)),
            Err(BackendError::UnknownHandle {
                kind: HandleKind::Stream,
                ..
            })
        ));
    }

    backend.free_device(device, len as u64, b)?;
    for event in [uploaded, downloaded, done] {
        backend.destroy_event(event)?;
    }
    Ok(())
}

#[test]
fn async_copies_round_trip_on_the_simulated_device() {
    // The same steps the device runs below, checked on every machine.
    async_round_trip(&SimBackend::new(1 << 30), (4 << 20) + 13).unwrap();
}

/// With a device: the asynchronous copies round-trip through page-locked
/// blocks. Without one (the stub driver): the backend cannot be created and
/// says why, as the synchronous path does.
#[test]
fn async_copies_round_trip_through_page_locked_blocks() {
    on_device(|cuda| {
        async_round_trip(&cuda, (64 << 20) + 13)?;
        async_round_trip(&cuda, (4 << 20) + 13)
    });
}

/// Host kernels stand in for CUDA kernels on the simulated device only: the
/// cuda backend refuses them, whatever the stream and arguments, without
/// running the body.
#[test]
fn a_host_kernel_launch_is_refused_with_advice() {
    on_device(|cuda| {
        let mut ran = false;
        let mut body = |_: &mut [&mut [u8]]| ran = true;
        let args = [KernelArg {
            ptr: DevicePtr(0x1000),
            bytes: 64,
            access: Access::ReadWrite,
        }];
        let launch = KernelLaunch {
            name: "decay",
            args: &args,
            body: KernelBody::Host {
                duration: Duration::from_micros(5),
                run: &mut body,
            },
        };
        let error = Backend::launch(&cuda, launch, StreamHandle(9999)).unwrap_err();
        let BackendError::Unsupported { reason, .. } = &error else {
            panic!("expected Unsupported, got {error:?}");
        };
        assert!(reason.contains("group's stream"), "{reason}");
        assert!(!ran, "the host body did not run");
        Ok(())
    });
}

#[test]
fn the_example_kernel_matches_the_host_computation() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let solver = mgr.register(
            Registration::new()
                .stream_group("cuda-kernel")
                .on_invalidate(|| {}),
        )?;
        let n = 100_003;
        mgr.queue_request(
            &solver,
            [
                ("y", ArrayRequest::of::<f64>([n]).unchunkable()),
                ("k", ArrayRequest::of::<f64>([n]).unchunkable()),
            ],
        )?;
        let mut r = mgr.allocate_queue_for(&solver)?;
        let (y, k) = (r.take::<f64>("y")?, r.take::<f64>("k")?);
        let initial: Vec<f64> = (0..n).map(|i| 1.0 + (i % 97) as f64 / 97.0).collect();
        let mut expected = initial.clone();
        let rates: Vec<f64> = (0..n).map(|i| 0.1 + (i % 13) as f64 * 0.7).collect();
        y.copy_from_host(&initial)?;
        k.copy_from_host(&rates)?;

        let kernel = EulerDecay::load(&cuda)?;
        let stream = mgr.stream(&solver)?;
        let (dt, steps) = (0.01, 25);
        let work = mgr.begin_work(&solver)?;
        for _ in 0..steps {
            // SAFETY: y and k belong to `solver`, which is busy until
            // `work` finishes, and are freed on this same group stream.
            unsafe { kernel.step(stream, &y, &k, dt)? };
        }
        work.finish()?;
        let device = y.to_vec()?;

        for _ in 0..steps {
            for (y, k) in expected.iter_mut().zip(&rates) {
                *y += dt * -(k * *y);
            }
        }
        let worst = device
            .iter()
            .zip(&expected)
            .map(|(d, h)| ((d - h) / h).abs())
            .fold(0.0f64, f64::max);
        assert!(worst <= 1e-15, "largest relative difference {worst:e}");
        assert!(
            device.iter().zip(&initial).all(|(d, i)| d < i),
            "the state decayed"
        );

        let short = mgr.register(
            Registration::new()
                .stream_group("cuda-kernel")
                .on_invalidate(|| {}),
        )?;
        mgr.queue_request(&short, [("k", ArrayRequest::of::<f64>([10]).unchunkable())])?;
        let short_k = mgr.allocate_queue_for(&short)?.take::<f64>("k")?;
        // SAFETY: the launch is refused before anything is queued.
        let error = unsafe { kernel.step(stream, &y, &short_k, dt) }.unwrap_err();
        assert!(matches!(error, MemError::LengthMismatch { .. }), "{error}");
        Ok(())
    });
}
