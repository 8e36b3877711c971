//! The threads client connections are served on: one single-threaded
//! runtime per core (as many as tokio's workers: `TOKIO_WORKER_THREADS`, by
//! default one per core), each on a thread of its own. The listener's task
//! hands each accepted connection to the next thread in turn, and
//! everything the connection's requests start runs there: the handler, the
//! tool loop, the tasks of the upstream connections they open (the upstream
//! pool gives a thread its own idle connections first). A request on a
//! sequential connection then wakes no other thread, where a work-stealing
//! runtime wakes an idle worker for much of what it schedules
//! (`docs/benchmarks.md` measures both).
//!
//! The MCP servers' shared sessions run on these threads too, each server's
//! on one of them in turn (a `per_user` server's session runs on the thread
//! of the request that opened it): a call from a connection of the
//! session's thread wakes no other thread, a call from another thread wakes
//! the session's, a single-threaded runtime that has no idle workers to
//! wake besides. What stays on the main runtime: the listener, signals,
//! reloads and other background work.
//!
//! The threads end when [`Threads`] is dropped, after serving has ended and
//! the MCP sessions have been closed; what still runs on them then is
//! dropped, as the main runtime's tasks are at exit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// How long a thread's runtime waits, once told to end, for blocking work
/// it started (a tool stuck in a system call) before leaving it behind.
const END_WAIT: Duration = Duration::from_secs(1);

/// The period of each thread's tick (see [`until_ended`]).
const TICK: Duration = Duration::from_secs(1);

/// What each thread's runtime runs until `ended`: a timer that fires every
/// [`TICK`]. tokio's timer writes to its runtime's wake-up descriptor
/// whenever a timer is armed sooner than the earliest one it knew of when
/// it last slept, even on its own thread, where nothing sleeps to be woken.
/// Every exchange arms timers seconds away (the connection's idle bound,
/// hyper's header timeout, the upstream's deadline), and with no timer
/// sooner each cost a system call; with the tick one second away at most,
/// those due after it cost none. An idle gateway's thread wakes once a
/// second for it.
async fn until_ended(ended: CancellationToken) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = ended.cancelled() => return,
            _ = tick.tick() => {}
        }
    }
}

/// The connection threads of one listener.
#[derive(Debug)]
pub(super) struct Threads {
    handles: Vec<Handle>,
    next: AtomicUsize,
    end: CancellationToken,
}

impl Threads {
    /// Starts `count` threads (at least one), each running a one-thread
    /// runtime until the [`Threads`] are dropped.
    pub(super) fn start(count: usize) -> std::io::Result<Threads> {
        let end = CancellationToken::new();
        let mut handles = Vec::with_capacity(count.max(1));
        for i in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(runtime.handle().clone());
            let ended = end.clone();
            let started = std::thread::Builder::new()
                .name(format!("toolgate-conn-{i}"))
                .spawn(move || {
                    runtime.block_on(until_ended(ended));
                    runtime.shutdown_timeout(END_WAIT);
                });
            if let Err(e) = started {
                end.cancel();
                return Err(e);
            }
        }
        Ok(Threads {
            handles,
            next: AtomicUsize::new(0),
            end,
        })
    }

    /// As many threads as tokio's multi-threaded runtime has workers:
    /// `TOKIO_WORKER_THREADS` when set, else one per core.
    pub(super) fn start_per_core() -> std::io::Result<Threads> {
        let count = std::env::var("TOKIO_WORKER_THREADS")
            .ok()
            .and_then(|n| n.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
            .unwrap_or(1);
        Threads::start(count)
    }

    /// Every thread's runtime.
    pub(super) fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// The runtime of the next thread in turn.
    pub(super) fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.end.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_are_handed_to_each_thread_in_turn_and_stay_there() {
        let threads = Threads::start(2).unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let on = threads.next().spawn(async {
                let first = std::thread::current().id();
                // What a task spawns runs on the same thread.
                let then = tokio::spawn(async { std::thread::current().id() })
                    .await
                    .unwrap();
                (first, then)
            });
            let (first, then) = on.await.unwrap();
            assert_eq!(first, then);
            seen.push(first);
        }
        assert_ne!(seen[0], seen[1]);
        assert_eq!(seen[0], seen[2]);
        assert_eq!(seen[1], seen[3]);
        assert!(!seen.contains(&std::thread::current().id()));
    }

    #[tokio::test]
    async fn the_threads_end_when_dropped() {
        let threads = Threads::start(1).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // A task still running when the threads are dropped is dropped.
        let task = threads.next().spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(threads);
        assert!(rx.await.is_err(), "the task was dropped");
        assert!(task.await.unwrap_err().is_cancelled());
    }
}
