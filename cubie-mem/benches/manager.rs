//! Planner and `queue_request + allocate_queue` throughput on the simulated
//! device, for 1 and 16 instances of 8 arrays each.
//!
//! Reference figures of the Python original on a 2-core machine: about 12 µs
//! to plan one instance and 112 µs to queue and allocate it.

#![allow(clippy::expect_used)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use cubie_mem::plan::{self, Budget};
use cubie_mem::{
    ArrayRequest, DType, Instance, ManagerConfig, MemoryKind, MemoryManager, Registration,
    RequestSet, SimBackend,
};

const RUNS: usize = 1024;

/// Eight arrays in the shapes a batch ODE solver asks for.
fn solver_requests() -> Vec<(&'static str, ArrayRequest)> {
    solver_requests_for(RUNS)
}

/// [`solver_requests`] for a batch of `runs`.
fn solver_requests_for(runs: usize) -> Vec<(&'static str, ArrayRequest)> {
    let chunked =
        |dtype, shape: &[usize]| ArrayRequest::new(dtype, shape.to_vec()).total_runs(runs);
    vec![
        ("state", chunked(DType::F64, &[100, 8, runs])),
        ("observables", chunked(DType::F64, &[100, 4, runs])),
        ("state_summaries", chunked(DType::F64, &[10, 8, runs])),
        ("observable_summaries", chunked(DType::F64, &[10, 4, runs])),
        ("iteration_counters", chunked(DType::I32, &[100, 4, runs])),
        (
            "status",
            ArrayRequest::new(DType::I32, [runs])
                .chunk_axis(0)
                .memory(MemoryKind::Pinned),
        ),
        (
            "initial_values",
            ArrayRequest::new(DType::F64, [8, runs]).chunk_axis(1),
        ),
        (
            "parameters",
            ArrayRequest::new(DType::F64, [16]).unchunkable(),
        ),
    ]
}

fn bench_planner(c: &mut Criterion) {
    let requests = solver_requests();
    let mut group = c.benchmark_group("plan");
    for (name, free) in [("fits", 1u64 << 30), ("chunked", 4 << 20)] {
        let budget = Budget::passive(free).with_granule(0);
        group.bench_function(BenchmarkId::new("one_instance_8_arrays", name), |b| {
            b.iter(|| plan::plan(black_box(&requests).iter().map(|(l, r)| (*l, r)), &budget))
        });
    }
    group.finish();
}

fn bench_allocate(c: &mut Criterion) {
    let requests = solver_requests();
    let mut group = c.benchmark_group("queue_and_allocate");
    // The floor: what a caller spends building one instance's request set
    // (the same clones the loops below make), measured in the same run.
    group.bench_function("request_set_only", |b| {
        b.iter(|| black_box(requests.iter().cloned().collect::<RequestSet>()))
    });
    for instances in [1usize, 16] {
        let sim = SimBackend::new(64 << 30).with_free(32 << 30);
        let mgr = MemoryManager::with_config(
            sim,
            ManagerConfig {
                allocation_granule_bytes: 0,
                ..Default::default()
            },
        );
        // One owner's instances in one group: one allocate_queue serves all,
        // and each partner receives its response through its hook, as
        // cubie's instances do.
        let first = mgr
            .register(
                Registration::new()
                    .stream_group("solvers")
                    .on_invalidate(|| {}),
            )
            .expect("registering the first solver");
        let mut registered: Vec<Instance> = vec![first];
        for _ in 1..instances {
            let partner = mgr
                .register(
                    Registration::new()
                        .owner(&registered[0])
                        .stream_group("solvers")
                        .on_invalidate(|| {})
                        .on_allocation_ready(|response| drop(black_box(response))),
                )
                .expect("registering a solver");
            registered.push(partner);
        }
        // The same batch again: arrays of the same shape are kept.
        group.bench_function(BenchmarkId::new("instances_of_8_arrays", instances), |b| {
            b.iter(|| {
                for instance in &registered {
                    let _ = mgr.queue_request(instance, requests.iter().cloned());
                }
                black_box(mgr.allocate_queue_for(&registered[0]))
            })
        });
        // Alternating run counts: every array is replaced each time, by a
        // buffer reused in place (shrinking) or newly allocated (growing).
        let alternate = [solver_requests_for(RUNS - 24), requests.clone()];
        let mut turn = 0usize;
        group.bench_function(
            BenchmarkId::new("instances_of_8_arrays_reshaped", instances),
            |b| {
                b.iter(|| {
                    turn ^= 1;
                    for instance in &registered {
                        let _ = mgr.queue_request(instance, alternate[turn].iter().cloned());
                    }
                    black_box(mgr.allocate_queue_for(&registered[0]))
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_planner, bench_allocate);
criterion_main!(benches);
