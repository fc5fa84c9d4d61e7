//! The manager at scale, on cubie's own benchmark workload (8 arrays per
//! instance, R = 10,000 runs), on the simulated device:
//!
//! - `cubie_workload`: `queue_request` + `allocate_queue` of 1 and 16
//!   instances of one owner in one group, the batch fitting or chunked,
//!   responses delivered through `on_allocation_ready`, buffers reused in
//!   steady state;
//! - `instances`: the same for 1, 16, 256 and 1,024 instances (the cost per
//!   array should stay flat), and registering and deregistering one more
//!   instance beside 16 and beside 1,024.

#![allow(clippy::expect_used)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use cubie_mem::{
    ArrayRequest, DType, Instance, ManagerConfig, MemoryKind, MemoryManager, Registration,
    SimBackend,
};

/// Runs per batch, as in cubie's benchmark.
const RUNS: usize = 10_000;
/// Arrays per instance.
const ARRAYS: u64 = 8;

/// The eight arrays of cubie's benchmark instance.
fn cubie_requests() -> Vec<(&'static str, ArrayRequest)> {
    let on_runs = |dtype, shape: &[usize], axis| {
        ArrayRequest::new(dtype, shape.to_vec())
            .chunk_axis(axis)
            .total_runs(RUNS)
    };
    vec![
        ("state", on_runs(DType::F64, &[8, 4, RUNS], 2)),
        ("observables", on_runs(DType::F64, &[8, 2, RUNS], 2)),
        ("state_summaries", on_runs(DType::F64, &[2, 4, RUNS], 2)),
        (
            "observable_summaries",
            on_runs(DType::F64, &[2, 2, RUNS], 2),
        ),
        ("initial_values", on_runs(DType::F64, &[4, RUNS], 1)),
        ("parameters", on_runs(DType::F32, &[6, RUNS], 1)),
        (
            "status",
            on_runs(DType::I32, &[RUNS], 0).memory(MemoryKind::Pinned),
        ),
        (
            "driver_coefficients",
            ArrayRequest::new(DType::F64, [16, 4, 3]).unchunkable(),
        ),
    ]
}

/// A manager on a device with `free` bytes free, and `count` instances of
/// one owner in one group; the partners receive their responses through
/// their hooks.
fn solvers(free: u64, count: usize) -> (MemoryManager, Vec<Instance>) {
    let mgr = MemoryManager::with_config(
        SimBackend::new(64 << 30).with_free(free),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let first = mgr
        .register(
            Registration::new()
                .stream_group("solvers")
                .on_invalidate(|| {}),
        )
        .expect("registering the first solver");
    let mut instances = vec![first];
    for _ in 1..count {
        let partner = mgr
            .register(
                Registration::new()
                    .owner(&instances[0])
                    .stream_group("solvers")
                    .on_invalidate(|| {})
                    .on_allocation_ready(|response| drop(black_box(response))),
            )
            .expect("registering a solver");
        instances.push(partner);
    }
    (mgr, instances)
}

/// Queues every instance's arrays and allocates them with one call.
fn queue_and_allocate(
    mgr: &MemoryManager,
    instances: &[Instance],
    requests: &[(&'static str, ArrayRequest)],
) {
    for instance in instances {
        mgr.queue_request(instance, requests.iter().cloned())
            .expect("queueing");
    }
    black_box(mgr.allocate_queue_for(&instances[0]).expect("allocating"));
}

fn bench_cubie_workload(c: &mut Criterion) {
    let requests = cubie_requests();
    let mut group = c.benchmark_group("cubie_workload");
    // One instance is about 5.4 MB: chunked below that, and 16 below 86 MB.
    for (instances, case, free) in [
        (1usize, "fits", 32u64 << 30),
        (1, "chunked", 2 << 20),
        (16, "fits", 32 << 30),
        (16, "chunked", 40 << 20),
    ] {
        let (mgr, registered) = solvers(free, instances);
        queue_and_allocate(&mgr, &registered, &requests);
        group.throughput(Throughput::Elements(instances as u64 * ARRAYS));
        group.bench_function(
            BenchmarkId::new(format!("{instances}_instances"), case),
            |b| b.iter(|| queue_and_allocate(&mgr, &registered, &requests)),
        );
    }
    group.finish();
}

fn bench_instances(c: &mut Criterion) {
    let requests = cubie_requests();
    let mut group = c.benchmark_group("instances");
    group.sample_size(20);
    for count in [1usize, 16, 256, 1024] {
        let (mgr, registered) = solvers(1 << 40, count);
        queue_and_allocate(&mgr, &registered, &requests);
        group.throughput(Throughput::Elements(count as u64 * ARRAYS));
        group.bench_function(BenchmarkId::new("queue_and_allocate", count), |b| {
            b.iter(|| queue_and_allocate(&mgr, &registered, &requests))
        });
        if count >= 16 {
            group.throughput(Throughput::Elements(1));
            group.bench_function(BenchmarkId::new("register_and_drop_one_more", count), |b| {
                b.iter(|| {
                    let extra = mgr
                        .register(
                            Registration::new()
                                .owner(&registered[0])
                                .stream_group("solvers")
                                .on_invalidate(|| {}),
                        )
                        .expect("registering one more");
                    drop(black_box(extra));
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_cubie_workload, bench_instances);
criterion_main!(benches);
