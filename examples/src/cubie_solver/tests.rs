//! The cubie solver at a small size: a few thousand runs in several chunks,
//! every run bit for bit against the serial reference.

use super::*;

#[test]
fn a_small_batch_streams_in_several_chunks_bit_for_bit() {
    let job = Job::new(3_000);
    let kernel = HostRk4 {
        integration: job.integration.clone(),
        steps_per_ns: 50,
    };
    let outcome = run::<f64>(&job, &kernel).unwrap();
    assert!(outcome.plan.chunks() >= 4, "{}", outcome.plan);
    assert_eq!(outcome.plan.buffer_sets(), 2);
    assert_eq!(outcome.runs_checked, 3_000);
    assert_eq!(outcome.mismatches, 0, "{:?}", outcome.first_mismatch);
    assert_eq!(outcome.failed_runs, 0);
    assert!(outcome.largest_x.is_finite() && outcome.largest_x > 1.0);
}
