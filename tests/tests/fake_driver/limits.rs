//! The pool, the driver's own memory, and launches, on the fake driver,
//! which reserves pool memory in 2 MiB granules and never serves one
//! request from idle blocks of several segments, charges 2 MiB of device
//! memory for each loaded module, honours pool attribute 3 (reuse through
//! an internal dependency), and enforces CUDA's launch limits:
//!
//! - no group's allocation is ordered after another group's free;
//! - an allocation the pool's scattered idle blocks cannot serve trims the
//!   pool and retries;
//! - a module loads after a batch that filled the device;
//! - a launch beyond the device's or the kernel's limits is refused before
//!   the driver, saying what allows it;
//! - PTX the driver cannot load is reported with what to do.

use cubie_mem::backend::Backend;
use cubie_mem::cuda::{CudaBackend, GroupStream, LaunchDims, PtxModule};
use cubie_mem::{ArrayRequest, MemError, Registration};
use cubie_mem_examples::euler_decay::EULER_DECAY_PTX;
use serde_json::Value;

use super::*;

const MIB: u64 = 1 << 20;

/// The order log's ops of `kind` as (stream, seq, clock).
fn logged(log: &str, kind: &str) -> Vec<(u64, u64, Value)> {
    log.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|op| op["kind"] == kind)
        .map(|op| {
            (
                op["stream"].as_u64().unwrap(),
                op["seq"].as_u64().unwrap(),
                op["clock"].clone(),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn no_groups_allocation_waits_for_another_groups_free() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let (a, b) = (cuda.create_stream().unwrap(), cuda.create_stream().unwrap());
    let log = tempfile::NamedTempFile::new().unwrap();
    fake.command(&format!("log={}", log.path().display()));
    let freed = cuda.alloc_device(2 * MIB, &*a).unwrap();
    cuda.free_device(freed, 2 * MIB, &*a).unwrap();
    // The free has not run (in the fake's lazy mode): the driver's default
    // would hand its bytes to b's allocation by making b wait for it (and
    // for all of a's work); the backend's pool grows instead.
    let taken = cuda.alloc_device(2 * MIB, &*b).unwrap();
    fake.command("log=");
    let text = std::fs::read_to_string(log.path()).unwrap();
    let (free_stream, free_seq, _) = logged(&text, "free")[0].clone();
    let (alloc_stream, _, clock) = logged(&text, "alloc").pop().unwrap();
    assert_ne!(alloc_stream, free_stream);
    let waits = clock[free_stream.to_string()]
        .as_u64()
        .is_some_and(|seq| seq >= free_seq);
    assert!(
        !waits,
        "b's allocation is ordered after a's free (clock {clock})"
    );
    cuda.free_device(taken, 2 * MIB, &*b).unwrap();
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn an_allocation_scattered_idle_blocks_cannot_serve_trims_the_pool_and_retries() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let stream = cuda.create_stream().unwrap();
    let free = cuda.mem_info().unwrap().free;
    assert_eq!(free % (2 * MIB), 0, "the fake's free memory is in granules");
    let filler = cuda.alloc_device(free - 8 * MIB, &*stream).unwrap();
    let blocks: Vec<_> = (0..4)
        .map(|_| cuda.alloc_device(2 * MIB, &*stream).unwrap())
        .collect();
    for &block in &blocks {
        cuda.free_device(block, 2 * MIB, &*stream).unwrap();
    }
    stream.synchronize().unwrap();
    // 8 MiB idle in four 2 MiB segments, none left on the device.
    let usage = cuda.pool_usage().unwrap();
    assert_eq!(usage.idle(), 8 * MIB);
    let (tries, trims) = (
        fake.calls("cuMemAllocFromPoolAsync"),
        fake.calls("cuMemPoolTrimTo"),
    );
    let large = cuda.alloc_device(4 * MIB, &*stream).unwrap();
    assert_eq!(
        fake.calls("cuMemAllocFromPoolAsync") - tries,
        2,
        "a first try and the retry"
    );
    assert_eq!(fake.calls("cuMemPoolTrimTo") - trims, 1);
    cuda.free_device(large, 4 * MIB, &*stream).unwrap();
    cuda.free_device(filler, free - 8 * MIB, &*stream).unwrap();
    stream.synchronize().unwrap();
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_module_loads_after_a_batch_that_filled_the_device() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    // Another owner's memory leaves 40 MiB of the device to the batch.
    let other = cuda.create_stream().unwrap();
    let resident = cuda.mem_info().unwrap().free - 40 * MIB;
    let kept = cuda.alloc_device(resident, &*other).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    assert_eq!(mgr.mem_info().unwrap().free, 40 * MIB);
    // 39 MiB, within the planner's 2% reserve; the pool reserves 40 MiB.
    mgr.queue_request(
        &solver,
        [("state", ArrayRequest::of::<f64>([39 << 17]).unchunkable())],
    )
    .unwrap();
    let state = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("state")
        .unwrap();
    drop(state);
    assert!(mgr.free(&solver, "state").unwrap());
    mgr.synchronize(&solver).unwrap();
    // The pool keeps the whole batch idle (release threshold u64::MAX):
    // the driver has nothing left for a module's code and data.
    assert_eq!(cuda.pool_usage().unwrap().idle(), 40 * MIB);
    let (loads, trims) = (
        fake.calls("cuModuleLoadDataEx"),
        fake.calls("cuMemPoolTrimTo"),
    );
    let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX).unwrap();
    assert_eq!(
        fake.calls("cuModuleLoadDataEx") - loads,
        2,
        "a first try and the retry"
    );
    assert_eq!(fake.calls("cuMemPoolTrimTo") - trims, 1);
    module.function("euler_decay").unwrap();
    drop(module);
    cuda.free_device(kept, resident, &*other).unwrap();
    other.synchronize().unwrap();
    fake.assert_clean();
}

/// A launch of euler_decay over `y` with `config` and `n`, its result and
/// the launches that reached the driver.
fn launch_euler(fake: &Fake, config: LaunchDims, with_n: bool) -> (Result<(), MemError>, u64) {
    let cuda = CudaBackend::new(0).unwrap();
    let (mgr, solver, y) = one_array(&cuda, 64);
    let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX).unwrap();
    let euler = module.function("euler_decay").unwrap();
    if config.shared_bytes > 48 * 1024 {
        euler
            .set_max_dynamic_shared_bytes(config.shared_bytes)
            .unwrap();
    }
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let view = stream.view(&y).unwrap();
    let (dt, n) = (0.5f64, 64u32);
    let before = fake.calls("cuLaunchKernel");
    let mut builder = stream.launch_builder(&euler);
    builder.arg(&view).arg(&view).arg(&dt);
    if with_n {
        builder.arg(&n);
    }
    // SAFETY: euler_decay's parameters (or too few, which is refused
    // before the driver); the view holds 64 elements and the grid is at
    // most 64 threads along x where a launch is not refused.
    let result = unsafe { builder.launch(config) };
    stream.synchronize().unwrap();
    (result, fake.calls("cuLaunchKernel") - before)
}

/// Checks that `result` is a refusal of euler_decay saying each of `says`.
fn assert_refused(result: Result<(), MemError>, says: &[&str]) {
    let error = result.unwrap_err();
    let MemError::Kernel { kernel, reason } = &error else {
        panic!("expected MemError::Kernel, got {error:?}");
    };
    assert_eq!(kernel, "euler_decay");
    for text in says {
        assert!(reason.contains(text), "'{text}' not in: {reason}");
    }
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn launches_beyond_the_devices_limits_are_refused_with_the_numbers() {
    let fake = Fake::open();
    let grid = |grid, block| LaunchDims {
        grid,
        block,
        shared_bytes: 0,
    };
    let refusals: [(LaunchDims, &[&str]); 5] = [
        (
            grid((1, 65_536, 1), (64, 1, 1)),
            &["65536 blocks along y", "1..=65535", "MAX_GRID_DIM_Y"],
        ),
        (
            grid((1, 1, 70_000), (64, 1, 1)),
            &["70000 blocks along z", "MAX_GRID_DIM_Z"],
        ),
        (
            grid((1, 1, 1), (1, 1, 65)),
            &["65 threads along z", "1..=64", "MAX_BLOCK_DIM_Z"],
        ),
        (
            grid((1, 1, 1), (2048, 1, 1)),
            &["2048 threads along x", "1..=1024"],
        ),
        (
            grid((1, 1, 1), (64, 32, 1)),
            &["64 x 32 x 1 = 2048 threads", "1024 threads per block"],
        ),
    ];
    for (config, says) in refusals {
        let (result, launched) = launch_euler(&fake, config, true);
        assert_refused(result, says);
        assert_eq!(launched, 0, "{config:?} reached the driver");
    }
    let (result, launched) = launch_euler(&fake, grid((1, 1, 1), (64, 1, 1)), true);
    result.unwrap();
    assert_eq!(launched, 1);
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn dynamic_shared_memory_above_48_kib_needs_the_kernels_opt_in() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX).unwrap();
    let euler = module.function("euler_decay").unwrap();
    let error = euler.set_max_dynamic_shared_bytes(300_000).unwrap_err();
    assert!(
        matches!(&error, MemError::Kernel { kernel, reason }
            if kernel == "euler_decay" && reason.contains("exceed the 232448 this device allows")),
        "{error:?}"
    );
    drop(module);

    let shared = |shared_bytes| LaunchDims {
        grid: (1, 1, 1),
        block: (64, 1, 1),
        shared_bytes,
    };
    // Without the opt-in (launch_euler opts in above 48 KiB only when asked).
    let cuda = CudaBackend::new(0).unwrap();
    let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX).unwrap();
    let euler = module.function("euler_decay").unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let (dt, n, y) = (0.5f64, 0u32, 0u64);
    // SAFETY: refused before the driver; nothing runs.
    let result = unsafe {
        stream
            .launch_builder(&euler)
            .arg(&y)
            .arg(&y)
            .arg(&dt)
            .arg(&n)
            .launch(shared(48 * 1024 + 1))
    };
    assert_refused(
        result,
        &[
            "49153 bytes of dynamic shared memory",
            "exceed the 49152",
            "set_max_dynamic_shared_bytes(49153)",
        ],
    );
    // With it, the launch reaches the driver (which accepts it).
    let (result, launched) = launch_euler(&fake, shared(100_000), true);
    result.unwrap();
    assert_eq!(launched, 1);
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn arguments_are_checked_against_the_kernels_parameters() {
    let fake = Fake::open();
    let config = LaunchDims::for_elements(64, 64);
    let (result, launched) = launch_euler(&fake, config, false);
    assert_refused(
        result,
        &[
            "the kernel takes 4 parameters (of [8, 8, 8, 4] bytes)",
            "gives 3 arguments",
        ],
    );
    assert_eq!(launched, 0);

    let cuda = CudaBackend::new(0).unwrap();
    let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX).unwrap();
    let euler = module.function("euler_decay").unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let (dt, wide_n, y) = (0.5f64, 64u64, 0u64);
    // SAFETY: refused before the driver; nothing runs.
    let result = unsafe {
        stream
            .launch_builder(&euler)
            .arg(&y)
            .arg(&y)
            .arg(&dt)
            .arg(&wide_n)
            .launch(config)
    };
    assert_refused(result, &["argument 3 is 8 bytes", "parameter 3 is 4 bytes"]);
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn ptx_the_driver_cannot_load_says_what_to_do() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let cases: [(String, u32, &[&str]); 2] = [
        (
            EULER_DECAY_PTX.replace(".version 7.0", ".version 9.9"),
            222,
            &[
                "declares .version 9.9, which needs a newer driver",
                "(CUDA 13.5)",
                "update the NVIDIA driver",
                "Unsupported .version 9.9",
            ],
        ),
        (
            EULER_DECAY_PTX.replace(".target sm_50", ".target sm_100"),
            218,
            &[
                "compute capability 9.0",
                "-arch=compute_90",
                "higher than default SM version",
            ],
        ),
    ];
    for (ptx, code, says) in cases {
        let error = PtxModule::from_ptx(&cuda, &ptx).unwrap_err();
        let (got, message) = super::driver_failure(&error, "load PTX module");
        assert_eq!(got, code, "{message}");
        for text in says {
            assert!(message.contains(text), "'{text}' not in: {message}");
        }
    }
    fake.command("fail=cuModuleLoadDataEx:209");
    let error = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX).unwrap_err();
    fake.command("reset");
    let (code, message) = super::driver_failure(&error, "load PTX module");
    assert_eq!(code, 209, "{message}");
    for text in [
        "no code this device (compute_90) runs",
        "-arch=compute_90",
        "sm_75",
    ] {
        assert!(message.contains(text), "'{text}' not in: {message}");
    }
    fake.assert_clean();
}

/// A kernel of 512 bytes of local memory a thread: the fake reserves
/// 132 MiB of device memory for it at its first launch on a context.
const LOCAL_MEMORY_PTX: &str = "\
.version 7.0
.target sm_50
.address_size 64
.visible .entry euler_decay_local(.param .u64 y, .param .u64 k, .param .f64 dt, .param .u32 n)
{ ret; }
";

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_kernel_needing_local_memory_launches_after_a_batch_that_filled_the_device() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let (mgr, solver, y) = one_array(&cuda, 64);
    let module = PtxModule::from_ptx(&cuda, LOCAL_MEMORY_PTX).unwrap();
    let function = module.function("euler_decay_local").unwrap();
    // Another owner's memory leaves 150 MiB; a batch of 140 MiB comes and
    // goes, and the pool keeps it idle (release threshold u64::MAX).
    let other = cuda.create_stream().unwrap();
    let resident = cuda.mem_info().unwrap().free - 150 * MIB;
    let kept = cuda.alloc_device(resident, &*other).unwrap();
    let batch = cuda.alloc_device(140 * MIB, &*other).unwrap();
    cuda.free_device(batch, 140 * MIB, &*other).unwrap();
    other.synchronize().unwrap();
    assert!(cuda.driver_mem_info().unwrap().free < 132 * MIB);
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let view = stream.view(&y).unwrap();
    let (dt, n) = (0.5f64, 64u32);
    let (launches, trims) = (fake.calls("cuLaunchKernel"), fake.calls("cuMemPoolTrimTo"));
    // SAFETY: euler_decay_local's parameters; the view holds 64 elements
    // and the grid is 64 threads along x.
    unsafe {
        stream
            .launch_builder(&function)
            .arg(&view)
            .arg(&view)
            .arg(&dt)
            .arg(&n)
            .launch(LaunchDims::for_elements(64, 64))
    }
    .unwrap();
    stream.synchronize().unwrap();
    assert_eq!(
        fake.calls("cuLaunchKernel") - launches,
        2,
        "a first try and the retry"
    );
    assert_eq!(fake.calls("cuMemPoolTrimTo") - trims, 1);
    drop(view);
    cuda.free_device(kept, resident, &*other).unwrap();
    other.synchronize().unwrap();
    fake.assert_clean();
}
