//! Integration tests of cubie-mem live under `tests/` (with the trybuild ui
//! suite under `ui/`). The user guide's code blocks run as doctests of
//! cubie-mem itself (its `guide` module). This library holds what the test
//! binaries share: [`ThreadExit`], to order the steps of threads the tests
//! do not spawn.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A signal that a thread has ended, for tests that order the steps of
/// threads they do not spawn themselves (a device set's threads): a thread
/// calls [`arm`](Self::arm), and [`wait`](Self::wait) on another returns
/// once that thread has ended, after everything it did (its stack unwound,
/// its closure returned), with no guess at how long that takes.
#[derive(Clone, Default)]
pub struct ThreadExit(Arc<AtomicBool>);

/// Sets its flags when the thread's locals are destroyed, as it ends.
struct OnExit(Vec<Arc<AtomicBool>>);

impl Drop for OnExit {
    fn drop(&mut self) {
        for flag in &self.0 {
            flag.store(true, Ordering::Release);
        }
    }
}

thread_local! {
    static ON_EXIT: RefCell<OnExit> = const { RefCell::new(OnExit(Vec::new())) };
}

impl ThreadExit {
    /// A signal no thread has armed yet.
    pub fn new() -> Self {
        ThreadExit::default()
    }

    /// Signals when the calling thread ends.
    pub fn arm(&self) {
        ON_EXIT.with(|on_exit| on_exit.borrow_mut().0.push(Arc::clone(&self.0)));
    }

    /// Whether the thread that armed the signal has ended.
    pub fn ended(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Waits until the thread that armed the signal has ended; panics after
    /// a minute, so that a test that would deadlock fails instead.
    pub fn wait(&self) {
        let start = Instant::now();
        while !self.ended() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the thread did not end within a minute"
            );
            std::thread::yield_now();
        }
    }
}
