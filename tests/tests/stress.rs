//! Many threads registering, queueing, allocating and dropping instances on
//! one manager at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::thread;

use common::{manager, runs_request};
use cubie_mem::{ArrayRequest, Registration};

const THREADS: usize = 8;
const ROUNDS: usize = 500;

#[test]
fn eight_threads_end_with_an_empty_registry_and_free_memory() {
    let (mgr, sim) = manager(1 << 30, 4 << 20);
    let free_before = sim.free_bytes();
    let groups = ["a", "b", "c"];
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let mgr = mgr.clone();
            thread::spawn(move || {
                let mut kept = Vec::new();
                for round in 0..ROUNDS {
                    let g = (t + round) % groups.len();
                    let group = groups[g];
                    let owner = kept.last();
                    let mut reg = Registration::new().stream_group(group).on_invalidate(|| {});
                    if let Some(owner) = owner.filter(|_| round % 3 == 0) {
                        reg = reg.owner(owner);
                    }
                    let inst = mgr.register(reg).unwrap();
                    // A group's members share one batch, so one run count per group.
                    let runs = 50 + g * 10;
                    mgr.queue_request(
                        &inst,
                        [
                            ("state", runs_request(800, runs)),
                            ("init", ArrayRequest::of::<f32>([16]).unchunkable()),
                        ],
                    )
                    .unwrap();
                    let work = mgr.begin_work(&inst).unwrap();
                    match mgr.allocate_queue_for(&inst) {
                        Ok(mut r) => {
                            if let Ok(state) = r.take::<f64>("state") {
                                // Another thread may evict it at any time: either works or reports release.
                                let _ = state.copy_from_host(&vec![1.0; state.len()]);
                            }
                        }
                        Err(e) => panic!("thread {t} round {round}: {e}"),
                    }
                    work.finish().unwrap();
                    if round % 4 == 0 {
                        kept.push(inst);
                    }
                    if kept.len() > 5 {
                        kept.remove(0);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(mgr.instance_count(), 0);
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(sim.free_bytes(), free_before);
    let stats = mgr.stats();
    assert_eq!(stats.total.current_bytes, 0);
    assert_eq!(stats.total.current_count, 0);
    assert!(stats.total.allocations >= (THREADS * ROUNDS) as u64);
}
