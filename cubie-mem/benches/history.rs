//! The simulated device costs the same however much came before: copies,
//! kernel launches and a small chunk pipeline, measured on a fresh device
//! and on one where 10,000 streams, 10,000 events and 1,000 pipelines came
//! and went, and on one where 10,000 streams were destroyed with their
//! uploads not yet seen done (the ratio to fresh should stay near 1).

#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::sync::Arc;

use cubie_mem::backend::{
    Access, Backend, KernelArg, KernelBody, KernelLaunch, PinnedBlock, Stream,
};
use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, HostMemoryKind, Instance, ManagerConfig, MemError,
    MemoryManager, Registration, SimBackend,
};

/// Runs per chunk of the small pipeline, and its chunks.
const CHUNK_RUNS: usize = 256;
const CHUNKS: usize = 4;

/// A device, a manager on it, and what the measured work uses.
struct Device {
    sim: SimBackend,
    mgr: MemoryManager,
    solver: Instance,
    stream: Arc<dyn Stream>,
    buffer: cubie_mem::backend::DevicePtr,
    set: DeviceArray<f32>,
}

fn device() -> Device {
    let sim = SimBackend::new(1 << 30);
    let mgr = MemoryManager::with_config(
        sim.clone(),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .expect("registering");
    mgr.queue_request(
        &solver,
        [("x", ArrayRequest::of::<f32>([CHUNK_RUNS]).unchunkable())],
    )
    .expect("queueing");
    let set = mgr
        .allocate_queue_for(&solver)
        .expect("allocating")
        .take::<f32>("x")
        .expect("taking");
    let stream = sim.create_stream().expect("a stream");
    let buffer = sim.alloc_device(4096, &*stream).expect("a buffer");
    stream
        .copy_to_device(buffer, 0, &[0; 4096])
        .expect("writing the buffer");
    Device {
        sim,
        mgr,
        solver,
        stream,
        buffer,
        set,
    }
}

/// A small pipeline: `CHUNKS` chunks through one buffer set, in and out of
/// pinned host arrays.
fn pipeline(d: &Device) -> Result<(), MemError> {
    let runs = CHUNKS * CHUNK_RUNS;
    let mut host = d.mgr.create_host_array::<f32>(
        [runs],
        HostMemoryKind::Pinned,
        Some(&vec![1.0; runs]),
        &d.solver,
    )?;
    let plan = ChunkPlan::new(runs, CHUNKS, CHUNK_RUNS)?;
    d.mgr
        .chunk_streamer(&d.solver, &plan)?
        .pipeline()
        .inout(&mut host, d.set.along(0))
        .run(|_, _| Ok::<_, MemError>(()))?;
    Ok(())
}

/// What came and went before the measurement.
fn age(d: &Device) {
    for _ in 0..10_000 {
        let stream = d.sim.create_stream().expect("a stream");
        stream
            .copy_to_device(d.buffer, 0, &[1; 64])
            .expect("a copy on the stream");
    }
    for _ in 0..10_000 {
        let event = d.stream.record().expect("an event");
        d.stream.wait(&*event).expect("waiting on it");
    }
    for _ in 0..1_000 {
        pipeline(d).expect("a pipeline");
    }
    d.sim.clear_timeline();
}

/// Streams destroyed with their work unseen: 10,000 streams, each an
/// upload from one page-locked block into bytes of its own, destroyed
/// without a wait (the block,
/// returned, is in use until the host sees those uploads done).
fn age_unseen(d: &Device) -> Box<dyn PinnedBlock> {
    const STREAMS: u64 = 10_000;
    let block = d.sim.alloc_pinned(64).expect("a page-locked block");
    let target = d
        .sim
        .alloc_device(STREAMS * 64, &*d.stream)
        .expect("a buffer for the uploads");
    d.stream.synchronize().expect("the buffer allocated");
    for stream_index in 0..STREAMS {
        let stream = d.sim.create_stream().expect("a stream");
        // SAFETY: the block outlives the device's use of it (the caller
        // keeps it for the measurement).
        unsafe {
            stream.copy_to_device_async(target, stream_index * 64, block.base().as_ptr(), 64)
        }
        .expect("an upload on the stream");
    }
    d.sim.clear_timeline();
    block
}

/// The measured work: 100 small copies, 20 kernel launches, one pipeline.
fn work(d: &Device) {
    for _ in 0..100 {
        d.stream
            .copy_to_device(d.buffer, 0, &[2; 64])
            .expect("a copy");
    }
    for _ in 0..20 {
        let args = [KernelArg {
            ptr: d.buffer,
            bytes: 64,
            access: Access::ReadWrite,
        }];
        let mut run = |bytes: &mut [&mut [u8]]| {
            black_box(bytes);
        };
        d.sim
            .launch(
                KernelLaunch {
                    name: "touch",
                    args: &args,
                    body: KernelBody::Host {
                        duration: Duration::from_micros(1),
                        run: &mut run,
                    },
                },
                &*d.stream,
            )
            .expect("a launch");
    }
    pipeline(d).expect("a pipeline");
    // The timeline is the one record kept for ever; keep it from growing
    // with the measurement's own iterations.
    d.sim.clear_timeline();
}

fn bench_history(c: &mut Criterion) {
    let mut group = c.benchmark_group("history");
    group.sample_size(30);
    let fresh = device();
    group.bench_function(BenchmarkId::new("work", "fresh"), |b| {
        b.iter(|| work(&fresh))
    });
    let aged = device();
    age(&aged);
    group.bench_function(
        BenchmarkId::new("work", "after_10k_streams_10k_events_1k_pipelines"),
        |b| b.iter(|| work(&aged)),
    );
    let unseen = device();
    let _block = age_unseen(&unseen);
    group.bench_function(
        BenchmarkId::new("work", "after_10k_streams_destroyed_with_uploads_unseen"),
        |b| b.iter(|| work(&unseen)),
    );
    group.finish();
}

criterion_group!(benches, bench_history);
criterion_main!(benches);
