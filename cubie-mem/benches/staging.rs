//! Gather and scatter of one chunk between a host array of the whole batch
//! and a staging buffer, along each axis of a 64 MiB `[64, 32, 4096]` f64
//! array, against a plain memcpy of the same bytes measured in the same run.
//!
//! Each chunk is a quarter of the chunk axis (16 MiB). Along axis 0 the chunk
//! is one contiguous block; along axis 1 it is 64 blocks of 256 KiB; along
//! axis 2 (innermost) it is 2048 blocks of 8 KiB.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use cubie_mem::ChunkLayout;

const SHAPE: [usize; 3] = [64, 32, 4096];

fn staging(c: &mut Criterion) {
    let elements: usize = SHAPE.iter().product();
    let host: Vec<f64> = (0..elements).map(|i| i as f64).collect();
    let mut host_out = vec![0.0f64; elements];
    for (axis, length) in SHAPE.into_iter().enumerate() {
        let chunk_length = length / 4;
        let layout = ChunkLayout::new(&SHAPE, axis, chunk_length).unwrap();
        let runs = chunk_length..2 * chunk_length;
        let chunk_elements = layout.chunk_elements();
        let bytes = (chunk_elements * size_of::<f64>()) as u64;
        let mut staging = vec![0.0f64; chunk_elements];
        let mut reference = vec![0.0f64; chunk_elements];

        let mut group = c.benchmark_group(format!("gather_axis{axis}"));
        group.throughput(Throughput::Bytes(bytes));
        group.sample_size(20);
        group.bench_function("gather", |b| {
            b.iter(|| {
                layout
                    .gather(black_box(&host), runs.clone(), 0, &mut staging)
                    .unwrap();
                black_box(&staging);
            })
        });
        group.bench_function("memcpy", |b| {
            b.iter(|| {
                reference.copy_from_slice(black_box(&host[..chunk_elements]));
                black_box(&reference);
            })
        });
        group.finish();

        let mut group = c.benchmark_group(format!("scatter_axis{axis}"));
        group.throughput(Throughput::Bytes(bytes));
        group.sample_size(20);
        group.bench_function("scatter", |b| {
            b.iter(|| {
                layout
                    .scatter(black_box(&staging), 0, runs.clone(), &mut host_out)
                    .unwrap();
                black_box(&host_out);
            })
        });
        group.bench_function("memcpy", |b| {
            b.iter(|| {
                host_out[..chunk_elements].copy_from_slice(black_box(&staging));
                black_box(&host_out);
            })
        });
        group.finish();
    }
}

criterion_group!(benches, staging);
criterion_main!(benches);
