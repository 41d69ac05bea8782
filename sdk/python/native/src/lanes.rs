//! The threads sync Python calls run on: a pool that grows with the calls
//! in flight and shrinks when they stop, each thread keeping one Python
//! thread state for its whole life.
//!
//! Attaching to the interpreter from a thread without a Python thread
//! state makes one and, when the call returns, tears it down: on every
//! call, a new thread state, its frame stack mapped and unmapped again
//! (about a tenth of the Python worker's CPU on a chain of quick
//! handlers), and whatever the handler kept in a `threading.local` lost
//! between two calls on the same thread. A lane attaches once when it
//! starts and lets the interpreter go at once (`detach`), so the calls it
//! runs attach to a thread state that lives as long as it does.
//!
//! A call that takes its time holds only its lane: a call that finds no
//! lane idle starts another (up to [`MOST`]), and a lane idle for
//! [`KEEP_ALIVE`] ends.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use pyo3::Python;
use tokio::sync::oneshot;

/// Lanes at most, as many calls at once; the calls beyond wait in order.
const MOST: usize = 512;

/// How long a lane with nothing to run waits before it ends.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Lanes {
    queue: Mutex<Queue>,
    ready: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Lanes running or waiting.
    lanes: usize,
    /// Lanes waiting for a job and not yet called.
    idle: usize,
    /// Calls made to waiting lanes and not yet taken up: a waking lane
    /// takes one, so a lane called is never counted idle twice.
    called: usize,
}

fn lanes() -> &'static Arc<Lanes> {
    static LANES: OnceLock<Arc<Lanes>> = OnceLock::new();
    LANES.get_or_init(Arc::default)
}

/// Runs `work` on a lane; a panic in it is the call's failure.
pub(crate) fn run<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> impl Future<Output = Result<T, String>> {
    let (done, result) = oneshot::channel();
    submit(Box::new(move || {
        let outcome = catch_unwind(AssertUnwindSafe(work))
            .unwrap_or_else(|_| Err("the Python call panicked".to_owned()));
        let _ = done.send(outcome);
    }));
    async move {
        result
            .await
            .unwrap_or_else(|_| Err("the Python call was dropped unrun".to_owned()))
    }
}

/// Runs `work` on a lane, not waiting for it.
pub(crate) fn spawn(work: impl FnOnce() + Send + 'static) {
    submit(Box::new(move || {
        let _ = catch_unwind(AssertUnwindSafe(work));
    }));
}

fn submit(job: Job) {
    let lanes = lanes();
    let mut queue = lock(lanes);
    queue.jobs.push_back(job);
    if queue.idle > 0 {
        queue.idle -= 1;
        queue.called += 1;
        lanes.ready.notify_one();
    } else if queue.lanes < MOST {
        let shared = Arc::clone(lanes);
        let started = std::thread::Builder::new()
            .name("weft-python".into())
            .spawn(move || Python::attach(|py| py.detach(|| serve(&shared))));
        if started.is_ok() {
            queue.lanes += 1;
        }
        // A lane that could not start leaves the job to the lanes there
        // are; with none, the next call tries again.
    }
}

/// A lane's life: runs jobs as they come, ends when idle too long.
fn serve(lanes: &Lanes) {
    let mut queue = lock(lanes);
    loop {
        if let Some(job) = queue.jobs.pop_front() {
            drop(queue);
            job();
            queue = lock(lanes);
            continue;
        }
        queue.idle += 1;
        let (woken, waited) = lanes
            .ready
            .wait_timeout(queue, KEEP_ALIVE)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        queue = woken;
        if queue.called > 0 {
            // Called: whoever called counted it out of the idle.
            queue.called -= 1;
            continue;
        }
        queue.idle -= 1;
        if waited.timed_out() && queue.jobs.is_empty() {
            queue.lanes -= 1;
            return;
        }
    }
}

fn lock(lanes: &Lanes) -> MutexGuard<'_, Queue> {
    // A job runs outside the lock: a panic cannot leave the queue half
    // changed.
    lanes
        .queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
