//! Device memory: streams, events, allocations and copies; buffer structs
//! in chunks; eviction; the pool's reuse; page-locked block reuse.

use super::*;

#[test]
fn streams_events_allocation_and_copies_on_the_backend() {
    on_device(|cuda| {
        let (a, b) = (cuda.create_stream()?, cuda.create_stream()?);
        assert_ne!(a.id(), b.id());
        let small = cuda.alloc_device(1000, &*a)?;
        let large = cuda.alloc_device(1 << 20, &*b)?;
        let data: Vec<u8> = (0..1000).map(|i| (i % 251) as u8).collect();

        a.copy_to_device(small, 0, &data)?;
        let mut back = vec![0u8; 1000];
        a.copy_from_device(&mut back, small, 0)?;
        assert_eq!(back, data);

        b.copy_to_device(large, 4096, &data)?;
        let mut part = vec![0u8; 10];
        b.copy_from_device(&mut part, large, 4096 + 5)?;
        assert_eq!(part, data[5..15]);
        // Across streams: the caller orders `a` after `b`'s work.
        a.wait(&*b.record()?)?;
        a.copy_from_device(&mut part, large, 4096 + 20)?;
        assert_eq!(part, data[20..30]);

        assert!(matches!(
            a.copy_to_device(small, 999, &[1, 2]),
            Err(BackendError::OutOfBounds {
                offset: 999,
                end: 1001,
                size: 1000,
                ..
            })
        ));

        let event = a.record()?;
        event.synchronize()?;
        assert!(event.is_complete()?);

        assert!(
            matches!(
                cuda.free_device(small, 999, &*a),
                Err(BackendError::OutOfBounds {
                    end: 999,
                    size: 1000,
                    ..
                })
            ),
            "a free of the wrong size is refused"
        );
        cuda.free_device(small, 1000, &*a)?;
        assert!(
            matches!(
                cuda.free_device(small, 1000, &*a),
                Err(BackendError::UnknownAllocation { ptr, .. }) if ptr == small
            ),
            "a double free is refused"
        );
        assert!(matches!(
            a.copy_from_device(&mut part, small, 0),
            Err(BackendError::UnknownAllocation { .. })
        ));
        cuda.free_device(large, 1 << 20, &*a)?;
        a.synchronize()?;

        let total = cuda.mem_info()?.total;
        let error = cuda.alloc_device(total, &*a).unwrap_err();
        assert!(error.is_out_of_memory(), "{error}");
        let BackendError::OutOfMemory {
            requested, free, ..
        } = error
        else {
            panic!("expected OutOfMemory, got {error:?}");
        };
        assert_eq!(requested.0, total);
        assert!(free.is_some_and(|free| free.0 < total), "{free:?}");
        Ok(())
    });
}

#[test]
fn a_stream_or_event_of_another_backend_is_refused() {
    on_device(|cuda| {
        let sim = SimBackend::new(1 << 20);
        let foreign = sim.create_stream()?;
        let unsupported = |result: Result<_, BackendError>, operation: &str| {
            assert!(
                matches!(&result, Err(BackendError::Unsupported { operation: o, .. }) if *o == operation),
                "{result:?}"
            );
        };
        unsupported(cuda.alloc_device(64, &*foreign).map(drop), "allocate");
        let stream = cuda.create_stream()?;
        let ptr = cuda.alloc_device(64, &*stream)?;
        unsupported(cuda.free_device(ptr, 64, &*foreign), "free");
        unsupported(stream.wait(&*foreign.record()?), "order streams");
        let other = CudaBackend::new(0)?;
        unsupported(
            cuda.alloc_device(64, &*other.create_stream()?).map(drop),
            "allocate",
        );
        cuda.free_device(ptr, 64, &*stream)?;
        stream.synchronize()?;
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
            assert_eq!(guard.stream().id(), mgr.stream(&other)?.id());
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

/// Its requests keep depth 1: one buffer set, so `Allocated` derefs.
impl cubie_mem::SingleBufferSet for SolverBuffers {}

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
        let total = mgr.mem_info()?.total;
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
        assert!(plan.chunks() >= 4, "{plan:?}");
        assert_eq!(plan.chunks(), dims.n_runs.div_ceil(plan.chunk_length()));
        assert_eq!(
            buffers.state.shape(),
            [dims.n_saves, dims.n_states, plan.chunk_length()]
        );
        assert_eq!(buffers.status.shape(), [plan.chunk_length()]);
        assert_eq!(buffers.initial.shape(), [dims.n_states]);
        assert!(solver.allocated_bytes() <= mgr.cap(&solver));

        // Every chunk goes through the same buffers.
        let mut seen = vec![0.0f64; buffers.state.len()];
        for chunk in 0..plan.chunks() {
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
        let free = mgr.mem_info()?.free;
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
        assert_eq!(mgr.memory_report().total.evictions, 1);

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
            // Dropping the instance frees its arrays on its group's stream
            // and destroys the stream; the frees still complete.
            drop(solver);
            cuda.synchronize_device()?;
            Ok(figures)
        };

        let (reserved_first, driver_free_first) = run_batch()?;
        let allocations_first = mgr.memory_report().total.allocations;
        let (reserved_second, driver_free_second) = run_batch()?;
        assert_eq!(mgr.memory_report().total.allocations, allocations_first + 3);
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
            mgr.mem_info()?.free >= cuda.driver_mem_info()?.free + batch_bytes,
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

#[test]
fn allocations_show_in_the_backends_pool() {
    on_device(|cuda| {
        let stream = cuda.create_stream()?;
        let before = cuda.pool_usage()?.used;
        let bytes = 96 << 20;
        let ptr = cuda.alloc_device(bytes, &*stream)?;
        let during = cuda.pool_usage()?;
        assert!(
            during.used >= before + bytes,
            "pool used {} B after allocating {bytes} B (was {before} B)",
            during.used
        );
        assert!(during.reserved >= during.used);
        // The same figures reach the manager's reports (and its
        // out-of-memory errors) through the backend contract.
        let reported = Backend::pool_usage(&cuda).expect("the cuda backend reports its pool");
        assert_eq!(
            (reported.reserved, reported.used),
            (during.reserved, during.used)
        );
        assert_eq!(reported.largest_free_block, None);
        cuda.free_device(ptr, bytes, &*stream)?;
        stream.synchronize()?;
        assert!(cuda.pool_usage()?.used <= before);
        Ok(())
    });
}

#[test]
fn memory_the_pool_holds_idle_is_given_back_for_a_larger_allocation() {
    const GIB: u64 = 1 << 30;
    on_device(|cuda| {
        let stream = cuda.create_stream()?;
        let total = cuda.mem_info()?.total;
        // Fill the device with 1 GiB blocks, then free them all.
        let mut blocks = Vec::new();
        loop {
            match cuda.alloc_device(GIB, &*stream) {
                Ok(ptr) => blocks.push(ptr),
                Err(error) if error.is_out_of_memory() => break,
                Err(error) => return Err(error.into()),
            }
            assert!(blocks.len() < 4096, "the device never ran out of memory");
        }
        assert!(
            blocks.len() as u64 * GIB >= total / 2,
            "only {} GiB of {total} B could be allocated",
            blocks.len()
        );
        for ptr in blocks {
            cuda.free_device(ptr, GIB, &*stream)?;
        }
        stream.synchronize()?;
        // The pool holds that memory idle in 1 GiB pieces; one allocation
        // of three quarters of the device needs it back from the driver.
        let large = total / 4 * 3;
        let ptr = cuda.alloc_device(large, &*stream)?;
        cuda.free_device(ptr, large, &*stream)?;
        stream.synchronize()?;
        cuda.trim_pool(0)?;
        Ok(())
    });
}

/// Memory allocated on one stream and used on another, ordered only by the
/// caller's events, as the contract asks: the second stream waits for the
/// allocation, and the free on the first waits for the use on the second.
/// On the fake driver a missing order is a violation that fails every
/// later call.
#[test]
fn memory_allocated_on_one_stream_is_used_and_freed_across_streams() {
    on_device(|cuda| {
        let (a, b) = (cuda.create_stream()?, cuda.create_stream()?);
        let len = 1 << 20;
        let mut source = cuda.alloc_pinned(len as u64)?;
        let mut target = cuda.alloc_pinned(len as u64)?;
        source
            .bytes_mut()
            .iter_mut()
            .enumerate()
            .for_each(|(i, byte)| *byte = (i % 253) as u8);
        let device = cuda.alloc_device(len as u64, &*a)?;
        b.wait(&*a.record()?)?;
        // SAFETY: the blocks are page-locked blocks of this backend, left
        // alone until `b` was synchronised; the download follows the upload
        // on `b`.
        unsafe {
            b.copy_to_device_async(device, 0, source.bytes().as_ptr(), len)?;
            b.copy_from_device_async(target.bytes_mut().as_mut_ptr(), len, device, 0)?;
        }
        // Freed on `a` while `b` may still be copying: `a` waits for it.
        a.wait(&*b.record()?)?;
        cuda.free_device(device, len as u64, &*a)?;
        b.synchronize()?;
        a.synchronize()?;
        assert!(source.bytes() == target.bytes(), "the round trip held");
        Ok(())
    });
}
