//! The main job: a batch of ODE runs far larger than a small simulated device,
//! planned and allocated by the manager; prints the chunk plan and a memory table.

use std::process::ExitCode;

use cubie_mem::{
    ArrayRequest, DType, ManagerConfig, MemError, MemoryKind, MemoryManager, Registration,
    SimBackend,
};

const MIB: u64 = 1 << 20;

fn run() -> Result<(), MemError> {
    // An 8 GiB device of which other processes leave 256 MiB free.
    let sim = SimBackend::new(8 << 30).with_free(256 * MIB);
    let mgr = MemoryManager::with_config(
        sim.clone(),
        ManagerConfig {
            allocation_granule_bytes: 16 * MIB,
            ..Default::default()
        },
    );

    // A cache held by an idle owner in another group: evicted under pressure.
    let cache = mgr.register(
        Registration::new()
            .stream_group("cache")
            .on_invalidate(|| tracing::info!("cache evicted")),
    )?;
    mgr.queue_request(
        &cache,
        [(
            "lookup",
            ArrayRequest::of::<u8>([96 * MIB as usize]).unchunkable(),
        )],
    )?;
    mgr.allocate_queue(&cache)?;

    // An integrator and its summariser share one stream group and one plan.
    let integrator = mgr.register(
        Registration::new()
            .stream_group("integrators")
            .on_invalidate(|| {}),
    )?;
    let summaries = mgr.register(
        Registration::new()
            .stream_group("integrators")
            .on_invalidate(|| {}),
    )?;
    let (n_states, n_saves, n_runs) = (6usize, 200usize, 100_000usize);
    mgr.queue_request(
        &integrator,
        [
            (
                "state",
                ArrayRequest::new(DType::F64, [n_saves, n_states, n_runs]).total_runs(n_runs),
            ),
            (
                "status",
                ArrayRequest::of::<i32>([n_runs])
                    .chunk_axis(0)
                    .memory(MemoryKind::Pinned),
            ),
            (
                "parameters",
                ArrayRequest::of::<f64>([n_states, n_states]).unchunkable(),
            ),
        ],
    )?;
    mgr.queue_request(
        &summaries,
        [(
            "mean",
            ArrayRequest::new(DType::F64, [n_states, n_runs])
                .chunk_axis(1)
                .total_runs(n_runs),
        )],
    )?;
    let response = mgr.allocate_queue_for(&integrator)?;
    let plan = response.plan;

    println!(
        "batch of {n_runs} runs: {} MiB requested, {} MiB free on the device",
        (plan.chunkable_bytes + plan.unchunkable_bytes) / MIB,
        mgr.get_memory_info()?.free / MIB
    );
    println!(
        "plan: {} chunks of {} runs (allocatable {} MiB, withheld {} MiB)",
        plan.chunks,
        plan.chunk_length,
        plan.allocatable / MIB,
        plan.withheld / MIB
    );
    for (label, shape) in &response.chunked_shapes {
        println!("  {label:<12} {shape:?}");
    }
    let ranges: Vec<_> = plan.chunk_ranges().collect();
    println!(
        "  runs per chunk: first {:?}, last {:?}",
        ranges.first(),
        ranges.last()
    );
    println!();
    println!("{}", mgr.stats().report());
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt().with_target(false).init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
