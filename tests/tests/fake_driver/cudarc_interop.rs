//! cudarc and the manager on one device (feature `cudarc`): a cudarc
//! stream bound as the current stream, and a kernel launched by cudarc's
//! launch builder on a group's stream with views of the manager's arrays
//! as its arguments.

use std::sync::Arc;

use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::{ArrayRequest, DeviceArray, Instance, MemoryManager, Registration};
use cubie_mem_examples::euler_decay::EULER_DECAY_PTX;
use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use serde_json::Value;

use super::*;

const RUNS: usize = 4096;

fn allocate(mgr: &MemoryManager, solver: &Instance, label: &str) -> DeviceArray<f64> {
    mgr.queue_request(
        solver,
        [(label, ArrayRequest::of::<f64>([RUNS]).unchunkable())],
    )
    .unwrap();
    mgr.allocate_queue_for(solver)
        .unwrap()
        .take::<f64>(label)
        .unwrap()
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_cudarc_stream_bound_as_current_takes_the_managers_work() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let context = CudaContext::new(0).unwrap();
    let stream = context.new_stream().unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    fake.command(&format!("log={}", log.path().display()));
    let guard = cubie_mem::cuda::bind_cudarc_stream(&mgr, &stream).unwrap();
    let y = allocate(&mgr, &solver, "y");
    y.copy_from_host(&[2.0; RUNS]).unwrap();
    drop(guard);
    let _marker = stream.record_event(None).unwrap();
    fake.command("log=");
    let ops: Vec<(String, u64)> = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .map(|line| {
            let op: Value = serde_json::from_str(line).unwrap();
            (
                op["kind"].as_str().unwrap().to_owned(),
                op["stream"].as_u64().unwrap(),
            )
        })
        .collect();
    let theirs = ops.last().unwrap().1;
    for (kind, stream) in &ops {
        if kind == "alloc" || kind == "h2d" {
            assert_eq!(*stream, theirs, "{kind} on cudarc's stream: {ops:?}");
        }
    }
    assert!(ops.iter().any(|(kind, _)| kind == "alloc"), "{ops:?}");
    assert_eq!(y.to_vec().unwrap(), vec![2.0; RUNS]);
    // cudarc destroys its stream; the manager orders the free after its work.
    drop(stream);
    drop(y);
    mgr.free(&solver, "y").unwrap();
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn cudarcs_launch_builder_runs_a_kernel_on_a_group_stream_with_views() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let (y, k) = (allocate(&mgr, &solver, "y"), allocate(&mgr, &solver, "k"));
    let (y0, rates) = euler_inputs(RUNS);
    y.copy_from_host(&y0).unwrap();
    k.copy_from_host(&rates).unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let context: Arc<CudaContext> = CudaContext::new(0).unwrap();
    let theirs = stream.as_cudarc(&context).unwrap();
    assert_eq!(theirs.cu_stream().cast(), stream.raw_stream());
    let module = context.load_module(Ptx::from_src(EULER_DECAY_PTX)).unwrap();
    let euler = module.load_function("euler_decay").unwrap();
    let (dt, n) = (0.01f64, RUNS as u32);
    {
        let (vy, vk) = (stream.view(&y).unwrap(), stream.view(&k).unwrap());
        let mut launch = theirs.launch_builder(&euler);
        launch.arg(&vy).arg(&vk).arg(&dt).arg(&n);
        // SAFETY: euler_decay's parameters (y, k, dt, n); the views hold
        // `n` elements each.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
    }
    assert_one_euler_step(&y.to_vec().unwrap(), &y0, &rates, dt);
    drop(module);
    // A context of another device is refused.
    let other = CudaContext::new(1).unwrap();
    let error = stream.as_cudarc(&other).unwrap_err();
    let reason = refusal(&error, "view a stream as cudarc's");
    assert!(reason.contains("CudaContext::new(0)"), "{reason}");
    fake.assert_clean();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn cudarc_launches_on_its_bound_stream_over_views_taken_from_the_guard() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    // Allocated and filled on the group's stream.
    let (y, k) = (allocate(&mgr, &solver, "y"), allocate(&mgr, &solver, "k"));
    let (y0, rates) = euler_inputs(RUNS);
    y.copy_from_host(&y0).unwrap();
    k.copy_from_host(&rates).unwrap();
    let context = CudaContext::new(0).unwrap();
    let theirs = context.new_stream().unwrap();
    let module = context.load_module(Ptx::from_src(EULER_DECAY_PTX)).unwrap();
    let euler = module.load_function("euler_decay").unwrap();
    let (dt, n) = (0.01f64, RUNS as u32);
    let log = tempfile::NamedTempFile::new().unwrap();
    fake.command(&format!("log={}", log.path().display()));
    {
        let guard = cubie_mem::cuda::bind_cudarc_stream(&mgr, &theirs).unwrap();
        let bound = guard.cuda_stream().unwrap();
        assert_eq!(bound.raw_stream(), theirs.cu_stream().cast());
        // The views order cudarc's stream after the uploads on the group's.
        let (vy, vk) = (bound.view(&y).unwrap(), bound.view(&k).unwrap());
        let mut launch = theirs.launch_builder(&euler);
        launch.arg(&vy).arg(&vk).arg(&dt).arg(&n);
        // SAFETY: euler_decay's parameters (y, k, dt, n); the views hold
        // `n` elements each.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
    }
    fake.command("log=");
    let kernels: Vec<Value> = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|op| op["kind"] == "kernel")
        .collect();
    assert_eq!(kernels.len(), 1, "{kernels:?}");
    // The download on the group's stream waits for the binding's end, after
    // the kernel on cudarc's stream; so does the free.
    assert_one_euler_step(&y.to_vec().unwrap(), &y0, &rates, dt);
    drop((y, k));
    mgr.free(&solver, "y").unwrap();
    mgr.free(&solver, "k").unwrap();
    drop(theirs);
    drop(module);
    fake.assert_clean();
}
