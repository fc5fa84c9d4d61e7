//! Kernels: host kernels refused, the user's own CUDA kernel on the
//! manager's memory.

use super::*;

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
        let stream = cuda.create_stream()?;
        let error = Backend::launch(&cuda, launch, &*stream).unwrap_err();
        let BackendError::Unsupported { reason, .. } = &error else {
            panic!("expected Unsupported, got {error:?}");
        };
        assert!(
            reason.contains("(GroupStream::of) with a LaunchBuilder"),
            "{reason}"
        );
        assert!(!ran, "the host body did not run");
        Ok(())
    });
}

/// Runs in the kernel tests.
const RUNS: usize = 100_003;
const DT: f64 = 0.01;

fn initial_state() -> Vec<f64> {
    (0..RUNS).map(|i| 1.0 + (i % 97) as f64 / 97.0).collect()
}

fn decay_rates() -> Vec<f64> {
    (0..RUNS).map(|i| 0.1 + (i % 13) as f64 * 0.7).collect()
}

/// `steps` Euler steps on the host, rounded as the kernel rounds.
fn host_steps(steps: usize) -> Vec<f64> {
    let mut y = initial_state();
    let rates = decay_rates();
    for _ in 0..steps {
        for (y, k) in y.iter_mut().zip(&rates) {
            *y += DT * -(k * *y);
        }
    }
    y
}

fn assert_matches_host(device: &[f64], steps: usize) {
    let expected = host_steps(steps);
    let worst = device
        .iter()
        .zip(&expected)
        .map(|(d, h)| ((d - h) / h).abs())
        .fold(0.0f64, f64::max);
    assert!(
        worst <= 1e-15,
        "after {steps} steps the device differs from the host by up to {worst:e} (relative)"
    );
}

/// `y` and `k` of `RUNS` elements for `instance`, with the initial state
/// and the rates uploaded.
fn euler_arrays(
    mgr: &MemoryManager,
    instance: &cubie_mem::Instance,
) -> TestResult<(DeviceArray<f64>, DeviceArray<f64>)> {
    mgr.queue_request(
        instance,
        [
            ("y", ArrayRequest::of::<f64>([RUNS]).unchunkable()),
            ("k", ArrayRequest::of::<f64>([RUNS]).unchunkable()),
        ],
    )?;
    let mut r = mgr.allocate_queue_for(instance)?;
    let (y, k) = (r.take::<f64>("y")?, r.take::<f64>("k")?);
    y.copy_from_host(&initial_state())?;
    k.copy_from_host(&decay_rates())?;
    Ok((y, k))
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
        let (y, k) = euler_arrays(&mgr, &solver)?;
        let kernel = EulerDecay::load(&cuda)?;
        let stream = GroupStream::of(&mgr, &solver)?;
        let steps = 25;
        for _ in 0..steps {
            kernel.step(&stream, &y, &k, DT)?;
        }
        let device = y.to_vec()?;
        assert_matches_host(&device, steps);
        assert!(
            device.iter().zip(initial_state()).all(|(d, i)| *d < i),
            "the state decayed"
        );

        let short = mgr.register(
            Registration::new()
                .stream_group("cuda-kernel")
                .on_invalidate(|| {}),
        )?;
        mgr.queue_request(&short, [("k", ArrayRequest::of::<f64>([10]).unchunkable())])?;
        let short_k = mgr.allocate_queue_for(&short)?.take::<f64>("k")?;
        let error = kernel.step(&stream, &y, &short_k, DT).unwrap_err();
        assert!(matches!(error, MemError::LengthMismatch { .. }), "{error}");
        // One array as both arguments is fine: each thread reads and writes
        // its own element.
        kernel.step(&stream, &k, &k, 0.0)?;
        Ok(())
    });
}

/// A pinned array is a kernel's argument in place: the kernel reads and
/// writes its page-locked pages through their address, no copy.
#[test]
fn a_kernel_updates_a_pinned_array_in_place() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let solver = mgr.register(
            Registration::new()
                .stream_group("cuda-pinned")
                .on_invalidate(|| {}),
        )?;
        mgr.queue_request(
            &solver,
            [
                (
                    "y",
                    ArrayRequest::of::<f64>([RUNS])
                        .unchunkable()
                        .memory(MemoryKind::Pinned),
                ),
                ("k", ArrayRequest::of::<f64>([RUNS]).unchunkable()),
            ],
        )?;
        let mut response = mgr.allocate_queue_for(&solver)?;
        let y: PinnedArray<f64> = response.take_pinned("y")?;
        let k = response.take::<f64>("k")?;
        y.write()?.copy_from_slice(&initial_state());
        k.copy_from_host(&decay_rates())?;
        let kernel = EulerDecay::load(&cuda)?;
        let stream = GroupStream::of(&mgr, &solver)?;
        let steps = 10;
        for _ in 0..steps {
            kernel.step_views(&stream, &stream.view_pinned(&y)?, &stream.view(&k)?, DT)?;
        }
        stream.synchronize()?;
        assert_matches_host(&y.read()?, steps);
        Ok(())
    });
}

#[test]
fn a_kernel_on_arrays_of_another_groups_stream_is_ordered_after_their_upload() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let owner = mgr.register(
            Registration::new()
                .stream_group("cuda-upload")
                .on_invalidate(|| {}),
        )?;
        let runner = mgr.register(
            Registration::new()
                .stream_group("cuda-compute")
                .on_invalidate(|| {}),
        )?;
        // Allocated and uploaded on the owner's group stream, without waiting.
        let (y, k) = euler_arrays(&mgr, &owner)?;
        let kernel = EulerDecay::load(&cuda)?;
        let stream = GroupStream::of(&mgr, &runner)?;
        assert_ne!(stream.id(), mgr.stream(&owner)?.id());
        let steps = 40;
        for _ in 0..steps {
            kernel.step(&stream, &y, &k, DT)?;
        }
        // Read on the owner's stream without waiting: the manager orders
        // the download after the kernels.
        assert_matches_host(&y.to_vec()?, steps);
        Ok(())
    });
}

#[test]
fn ordering_survives_new_streams_and_freed_memory_reused_at_once() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let solver = mgr.register(
            Registration::new()
                .stream_group("cuda-reinit")
                .on_invalidate(|| {}),
        )?;
        let (y, k) = euler_arrays(&mgr, &solver)?;
        let kernel = EulerDecay::load(&cuda)?;
        let steps = 2000;
        let pending = {
            let stream = GroupStream::of(&mgr, &solver)?;
            for _ in 0..steps {
                kernel.step(&stream, &y, &k, DT)?;
            }
            let _current = mgr.bind_stream(&solver)?;
            let host =
                mgr.create_host_array::<f64>([RUNS], HostMemoryKind::Pinned, None, &solver)?;
            y.download_async(host)?
        };
        // Nothing has waited for the kernels: new streams, every array
        // freed, new arrays (likely on the same memory) overwritten.
        mgr.reinit_streams()?;
        mgr.free_all();
        drop((y, k));
        let (y2, k2) = euler_arrays(&mgr, &solver)?;
        y2.copy_from_host(&vec![-1.0; RUNS])?;
        k2.copy_from_host(&vec![-2.0; RUNS])?;
        let host = pending.wait()?;
        assert_matches_host(host.as_slice(), steps);
        Ok(())
    });
}

#[test]
fn a_simulated_array_is_refused_by_a_cuda_stream() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
        let stream = GroupStream::of(&mgr, &solver)?;
        let sim = MemoryManager::with_config(
            SimBackend::new(1 << 20),
            ManagerConfig {
                allocation_granule_bytes: 0,
                ..Default::default()
            },
        );
        let other = sim.register(Registration::new().on_invalidate(|| {}))?;
        sim.queue_request(&other, [("x", ArrayRequest::of::<f64>([4]))])?;
        let x = sim.allocate_queue_for(&other)?.take::<f64>("x")?;
        let error = stream.view(&x).unwrap_err();
        let reason = refusal(&error, "take an array's CUDA memory");
        assert!(
            reason.starts_with("the simulated backend is not the cuda backend"),
            "{reason}"
        );
        let error = GroupStream::of(&sim, &other).unwrap_err();
        let reason = refusal(&error, "take a group's CUDA stream");
        assert!(reason.starts_with("the simulated backend "), "{reason}");
        Ok(())
    });
}

/// PTX with an unclosed kernel body, which the driver's compiler rejects.
const BROKEN_PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\n\
                          .visible .entry broken()\n{\n    ret;\n";

#[test]
fn a_ptx_compile_error_carries_the_log_and_a_missing_kernel_is_named() {
    on_device(|cuda| {
        let error = PtxModule::from_ptx(&cuda, BROKEN_PTX).unwrap_err();
        let (_, message) = driver_failure(&error, "load PTX module");
        assert!(message.contains("; the PTX compiler said: "), "{message}");
        let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX)?;
        let error = module.function("no_such_kernel").unwrap_err();
        assert!(
            matches!(&error, MemError::Backend {
                backend: "cuda",
                error: BackendError::Driver { message, .. },
            } if message.ends_with("; no kernel 'no_such_kernel' in the module")),
            "{error:?}"
        );
        Ok(())
    });
}

#[test]
fn a_launch_refuses_a_view_taken_by_another_stream() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let first = mgr.register(
            Registration::new()
                .stream_group("views-a")
                .on_invalidate(|| {}),
        )?;
        let second = mgr.register(
            Registration::new()
                .stream_group("views-b")
                .on_invalidate(|| {}),
        )?;
        let (y, k) = euler_arrays(&mgr, &first)?;
        let module = PtxModule::from_ptx(&cuda, EULER_DECAY_PTX)?;
        let euler = module.function("euler_decay")?;
        let (a, b) = (
            GroupStream::of(&mgr, &first)?,
            GroupStream::of(&mgr, &second)?,
        );
        let (y_view, k_view) = (a.view(&y)?, a.view(&k)?);
        assert_eq!(y_view.len(), RUNS);
        assert_eq!(y_view.byte_len(), (RUNS * 8) as u64);
        let (dt, n) = (DT, RUNS as u32);
        // SAFETY: the arguments match euler_decay's parameters; the launch
        // is refused before it reaches the driver.
        let error = unsafe {
            b.launch_builder(&euler)
                .arg(&y_view)
                .arg(&k_view)
                .arg(&dt)
                .arg(&n)
                .launch(LaunchDims::for_elements(n, 256))
        }
        .unwrap_err();
        let reason = refusal(&error, "launch kernel");
        assert!(
            reason.contains("take each view from the stream that launches the kernel"),
            "{reason}"
        );
        // The same views on their own stream: one step, as the host computes.
        // SAFETY: as above, on the stream that took the views.
        unsafe {
            a.launch_builder(&euler)
                .arg(&y_view)
                .arg(&k_view)
                .arg(&dt)
                .arg(&n)
                .launch(LaunchDims::for_elements(n, 256))?;
        }
        drop((y_view, k_view));
        assert_matches_host(&y.to_vec()?, 1);
        Ok(())
    });
}

#[test]
fn arrays_allocated_and_uploaded_on_a_bound_external_stream_serve_its_kernels() {
    on_device(|cuda| {
        let mgr = manager(&cuda);
        let solver = mgr.register(
            Registration::new()
                .stream_group("cuda-solver")
                .on_invalidate(|| {}),
        )?;
        let library = mgr.register(Registration::new().stream_group("cuda-library"))?;
        // Another library's stream: here another group's, bound by its raw
        // handle as any CUstream of the device's primary context is.
        let theirs = GroupStream::of(&mgr, &library)?;
        // SAFETY: `theirs` keeps the stream alive past the guard.
        let guard = unsafe { cubie_mem::cuda::bind_raw_stream(&mgr, theirs.raw_stream())? };
        let (y, k) = euler_arrays(&mgr, &solver)?;
        drop(guard);
        let kernel = EulerDecay::load(&cuda)?;
        let steps = 40;
        for _ in 0..steps {
            kernel.step(&theirs, &y, &k, DT)?;
        }
        // Read on the solver's stream, ordered after the kernels.
        assert_matches_host(&y.to_vec()?, steps);
        // SAFETY: the null stream is refused before any driver call.
        let error =
            unsafe { cubie_mem::cuda::bind_raw_stream(&mgr, std::ptr::null_mut()) }.unwrap_err();
        let reason = refusal(&error, "bind an external stream");
        assert!(reason.contains("is a default stream"), "{reason}");
        Ok(())
    });
}
