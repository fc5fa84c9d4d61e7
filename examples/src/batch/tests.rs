//! The main job's tests: small jobs on the modelled clock.

use super::*;

/// The main job at a hundredth of its size: 3,000 runs on a device
/// with 1 MiB free, a quarter of it taken by the cache.
fn small_job() -> Job {
    Job {
        n_runs: 3_000,
        device_free: MIB,
        cache_bytes: MIB / 4,
        granule: MIB / 16,
        spill_threshold: MIB,
        pinned_output: false,
        staging_threads: 1,
        batches: 2,
        calibration: Calibration::fixed(),
        kernel: KernelModel::Slow,
        trace: None,
        show_progress: false,
    }
}

#[test]
fn a_small_job_evicts_the_cache_chunks_and_matches_the_closed_form() {
    let outcome = run(&small_job()).unwrap();
    assert_eq!(outcome.free_after_cache, MIB - MIB / 4);
    assert!(outcome.cache_evicted);
    assert!(outcome.chunks > 1, "{outcome:?}");
    assert!(outcome.max_error <= CLOSED_FORM_TOLERANCE, "{outcome:?}");
}

#[test]
fn four_staging_threads_quarter_the_modelled_host_time() {
    // The main job at a tenth of its size: each chunk's results are
    // scattered from windows of about 4 MiB, cut in four pieces.
    let tenth = |staging_threads| Job {
        n_runs: 30_000,
        device_free: 10 * MIB,
        cache_bytes: 10 * MIB / 4,
        granule: 10 * MIB / 16,
        spill_threshold: 10 * MIB,
        staging_threads,
        ..small_job()
    };
    let one = run(&tenth(1)).unwrap();
    let four = run(&tenth(4)).unwrap();
    // On the modelled clock: 4,001,068 ns of host work on one thread,
    // a quarter of it on four (each window's time rounded up to the ns).
    assert_eq!(one.host_busy_ns, 4_001_068, "{one:?}");
    assert_eq!(four.host_busy_ns, 1_000_272, "{four:?}");
    assert_eq!(one.busiest_engine, "the host", "{one:?}");
    // The host is the busiest engine: the makespan falls by what it saved.
    assert_eq!(
        one.makespan_ns - four.makespan_ns,
        one.host_busy_ns - four.host_busy_ns,
        "{one:?}\n{four:?}"
    );
}

#[test]
fn measured_figures_time_the_host_on_their_curve() {
    // Figures whose second thread adds nothing: four threads take as long
    // as one, at a third of the fixed figure's speed.
    let flat = Calibration {
        source: "a flat curve".to_owned(),
        memcpy_by_threads: vec![4_000_000_000, 4_000_000_000],
        ..Calibration::fixed()
    };
    let tenth = |staging_threads, calibration: &Calibration| Job {
        n_runs: 30_000,
        device_free: 10 * MIB,
        cache_bytes: 10 * MIB / 4,
        granule: 10 * MIB / 16,
        spill_threshold: 10 * MIB,
        staging_threads,
        calibration: calibration.clone(),
        ..small_job()
    };
    let fixed = run(&tenth(1, &Calibration::fixed())).unwrap();
    let one = run(&tenth(1, &flat)).unwrap();
    let four = run(&tenth(4, &flat)).unwrap();
    assert_eq!(one.host_busy_ns, four.host_busy_ns, "{one:?}\n{four:?}");
    let ratio = one.host_busy_ns as f64 / fixed.host_busy_ns as f64;
    assert!((ratio - 3.0).abs() < 1e-3, "{ratio}");
}

/// The main job at a tenth of its size, on two staging threads (the
/// figures of CI's two cores, whatever the machine running the test).
fn tenth_job(pinned_output: bool) -> Job {
    Job {
        n_runs: 30_000,
        device_free: 10 * MIB,
        cache_bytes: 10 * MIB / 4,
        granule: 10 * MIB / 16,
        spill_threshold: 10 * MIB,
        pinned_output,
        staging_threads: 2,
        ..small_job()
    }
}

#[test]
fn the_main_job_runs_within_a_tenth_of_its_busiest_engine_spilled_or_pinned() {
    let spilled = run(&tenth_job(false)).unwrap();
    let pinned = run(&tenth_job(true)).unwrap();
    println!("{spilled:?}\n{pinned:?}");
    // Spilled results: the host scatters them (2,000,544 ns on two
    // threads, each chunk's 4.4 MB in two windows of 2.2 MB) while the
    // device works on; the makespan (1.050x) adds the first window's
    // upload, kernel and download before the first scatter.
    assert_eq!(spilled.busiest_engine, "the host", "{spilled:?}");
    assert_eq!(spilled.host_busy_ns, 2_000_544, "{spilled:?}");
    assert_eq!(spilled.makespan_ns, 2_100_945, "{spilled:?}");
    // The second batch prepares no memory: the host's busy time is its
    // staging alone. The first paid 2,154,746 ns of page-locking (the
    // pinned inputs and the staging windows), about as long as the
    // streaming itself, and 12 ms touching the 48 MB spill file's pages
    // for the first time (at 4 GB/s, against 12 GB/s warm), all before
    // its streaming.
    assert_eq!(spilled.busiest_engine_ns, spilled.host_busy_ns);
    assert_eq!(spilled.first_batch_page_lock_ns, 2_154_746, "{spilled:?}");
    assert_eq!(spilled.first_touch_ns, 12_000_000, "{spilled:?}");
    assert_eq!(
        spilled.first_batch_makespan_ns,
        12_000_000 + 4_255_694,
        "{spilled:?}"
    );
    assert!(spilled.makespan_ns * 100 <= spilled.busiest_engine_ns * 110);
    // Pinned results: strided DMA, no host work; the downloads are the
    // busiest engine (965,500 ns), after the first chunk's upload and
    // kernel.
    assert_eq!(pinned.busiest_engine, "device to host", "{pinned:?}");
    assert_eq!(pinned.host_busy_ns, 0, "{pinned:?}");
    assert_eq!(pinned.makespan_ns, 1_022_253, "{pinned:?}");
    // Page-locking the 48 MB of results took the first batch 11 ms,
    // ten times its streaming.
    assert_eq!(pinned.first_batch_page_lock_ns, 11_056_181, "{pinned:?}");
    assert_eq!(pinned.first_touch_ns, 0, "no spill file: {pinned:?}");
    assert_eq!(pinned.first_batch_makespan_ns, 12_078_437, "{pinned:?}");
    assert!(pinned.makespan_ns * 100 <= pinned.busiest_engine_ns * 110);
}

#[test]
fn pinned_results_leave_the_host_idle_and_the_downloads_the_busiest_engine() {
    let spilled = run(&small_job()).unwrap();
    assert_eq!(spilled.busiest_engine, "the host", "{spilled:?}");
    let pinned = run(&Job {
        pinned_output: true,
        ..small_job()
    })
    .unwrap();
    assert_eq!(
        pinned.host_busy_ns, 0,
        "strided copies both ways: {pinned:?}"
    );
    assert_eq!(pinned.busiest_engine, "device to host", "{pinned:?}");
    // The downloads overlap everything else: 107,192 ns against their
    // 101,500 on the modelled clock (the spilled results: 502,186 ns).
    assert!(
        pinned.makespan_ns * 100 <= pinned.busiest_engine_ns * 110,
        "at most 1.10x the busiest engine: {pinned:?}"
    );
}

#[test]
fn a_device_run_out_explains_who_holds_what() {
    // The small job on a device that holds a small cache and little
    // more: even with the cache evicted, the batch does not fit.
    let job = Job {
        device_free: MIB / 16 + 2048,
        cache_bytes: 1024,
        ..small_job()
    };
    let error = run(&job).unwrap_err();
    println!("{error}\n{}", error.fit_report().unwrap());
    let report = error.fit_report().unwrap();
    assert!(
        report.memory.owners.iter().any(|owner| owner
            .instances
            .iter()
            .any(|instance| instance.starts_with("'lookup cache'"))),
        "{:?}",
        report.memory.owners
    );
    assert_eq!(report.memory.device_pool.unwrap().used, 1024);
}

#[test]
fn a_bus_bound_kernel_leaves_the_copies_and_the_host_to_bound_the_batch() {
    // The kernel takes what an H100 takes for the chunk's bytes: the
    // pipeline runs within 1.10x of its busiest engine and 1.05x of its
    // floor (below it where windows fill and drain faster than a chunk).
    for pinned_output in [false, true] {
        let job = Job {
            kernel: KernelModel::BusBound,
            ..tenth_job(pinned_output)
        };
        let outcome = run(&job).unwrap();
        assert_ne!(outcome.busiest_engine, "compute", "{outcome:?}");
        assert!(
            outcome.makespan_ns * 100 <= outcome.busiest_engine_ns * 110,
            "{outcome:?}"
        );
        assert!(
            outcome.makespan_ns * 100 <= outcome.floor_ns * 105,
            "{outcome:?}"
        );
    }
    // 3,000 runs of 45 f64 values and the 4 weights, 1,080,032 bytes, at
    // 3.35 TB/s: 323 ns (rounded up).
    let dims = RunDims {
        n_states: 4,
        n_saves: 10,
        n_runs: 3_000,
    };
    assert_eq!(
        KernelModel::BusBound.duration(&dims, 3_000, 8),
        Duration::from_nanos(323)
    );
}
