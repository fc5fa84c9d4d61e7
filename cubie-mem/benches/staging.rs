//! Gather and scatter of one chunk between a host array of the whole batch
//! and a staging buffer, with one staging thread and with the default
//! ([`StagingThreads::default_count`]) in the same run, along each axis of
//! a 16 MiB `[16, 32, 4096]` and a 256 MiB `[64, 128, 4096]` f64 array,
//! beside a plain single-threaded memcpy of the same bytes.
//!
//! Each chunk is a quarter of the chunk axis (4 MiB and 64 MiB). Along
//! axis 0 the chunk is one contiguous block; along axis 1 it is rows of
//! 256 KiB (16 MiB) and 1 MiB (256 MiB); along axis 2 (innermost) rows of
//! 8 KiB.
//!
//! Note: the medians and ratios of a run on a 2-core cloud VM (default 2
//! threads: 1.4x to 1.9x over one thread) are in docs/host-memory.md,
//! "Staging threads".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use cubie_mem::{ChunkLayout, StagingThreads};

const SHAPES: [(&str, [usize; 3]); 2] = [("16MiB", [16, 32, 4096]), ("256MiB", [64, 128, 4096])];

fn staging(c: &mut Criterion) {
    let default = StagingThreads::default_count();
    let pools = [
        ("1_thread".to_owned(), StagingThreads::new(1).unwrap()),
        (
            format!("default_{default}_threads"),
            StagingThreads::new(default).unwrap(),
        ),
    ];
    for (size, shape) in SHAPES {
        let elements: usize = shape.iter().product();
        let host: Vec<f64> = (0..elements).map(|i| i as f64).collect();
        let mut host_out = vec![0.0f64; elements];
        for (axis, length) in shape.into_iter().enumerate() {
            let chunk_length = length / 4;
            let layout = ChunkLayout::new(&shape, axis, chunk_length).unwrap();
            let runs = chunk_length..2 * chunk_length;
            let chunk_elements = layout.chunk_elements();
            let bytes = (chunk_elements * size_of::<f64>()) as u64;
            let mut staging = vec![0.0f64; chunk_elements];
            let mut reference = vec![0.0f64; chunk_elements];

            let mut group = c.benchmark_group(format!("gather_{size}_axis{axis}"));
            group.throughput(Throughput::Bytes(bytes));
            group.sample_size(10);
            for (name, threads) in &pools {
                group.bench_function(name.as_str(), |b| {
                    b.iter(|| {
                        threads
                            .gather_chunk(&layout, black_box(&host), runs.clone(), 0, &mut staging)
                            .unwrap();
                        black_box(&staging);
                    })
                });
            }
            group.bench_function("memcpy", |b| {
                b.iter(|| {
                    reference.copy_from_slice(black_box(&host[..chunk_elements]));
                    black_box(&reference);
                })
            });
            group.finish();

            let mut group = c.benchmark_group(format!("scatter_{size}_axis{axis}"));
            group.throughput(Throughput::Bytes(bytes));
            group.sample_size(10);
            for (name, threads) in &pools {
                group.bench_function(name.as_str(), |b| {
                    b.iter(|| {
                        threads
                            .scatter_chunk(
                                &layout,
                                black_box(&staging),
                                0,
                                runs.clone(),
                                &mut host_out,
                            )
                            .unwrap();
                        black_box(&host_out);
                    })
                });
            }
            group.bench_function("memcpy", |b| {
                b.iter(|| {
                    host_out[..chunk_elements].copy_from_slice(black_box(&staging));
                    black_box(&host_out);
                })
            });
            group.finish();
        }
    }
}

criterion_group!(benches, staging);
criterion_main!(benches);
