//! A server's progress reports, routed to the call whose token they carry.
//!
//! rmcp names a request's progress token only as it sends the request, so
//! a call subscribes to its token just after: a server that reports at
//! once (its first step, as soon as the call arrives) can be faster than
//! the subscription. Such early reports wait here, a few and briefly, for
//! their call; those no call claims in time are dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tokio::sync::mpsc;
use toolgate::{Progress, ProgressSink};

/// Reports held for a call that has not subscribed yet, across all calls.
const EARLY_REPORTS: usize = 64;
/// How long an early report waits for its call.
const EARLY_WAIT: Duration = Duration::from_secs(5);
/// Reports waiting for a slow subscriber, per call.
const CHANNEL: usize = 16;

/// Routes one session's progress notifications (a server's `Handler`
/// holds a clone).
#[derive(Clone, Default)]
pub struct Dispatcher {
    inner: Arc<Mutex<Routes>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Routes {
    calls: HashMap<ProgressToken, mpsc::Sender<ProgressNotificationParam>>,
    early: VecDeque<(Instant, ProgressNotificationParam)>,
}

impl Dispatcher {
    /// Passes `report` to the call of its token, or keeps it for a call
    /// about to subscribe.
    pub async fn handle(&self, report: ProgressNotificationParam) {
        let sender = {
            let mut routes = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            match routes.calls.get(&report.progress_token) {
                Some(sender) => sender.clone(),
                None => {
                    let now = Instant::now();
                    while routes
                        .early
                        .front()
                        .is_some_and(|(at, _)| now.duration_since(*at) > EARLY_WAIT)
                        || routes.early.len() >= EARLY_REPORTS
                    {
                        routes.early.pop_front();
                    }
                    routes.early.push_back((now, report));
                    return;
                }
            }
        };
        // A call that stopped reading is not waited for.
        let _ = sender.send(report).await;
    }

    /// The reports for `token`, those that came before included, until the
    /// returned subscription is dropped.
    pub fn subscribe(&self, token: ProgressToken) -> Subscription {
        let (sender, receiver) = mpsc::channel(CHANNEL);
        let mut routes = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let early = std::mem::take(&mut routes.early);
        for (at, report) in early {
            if report.progress_token == token {
                // Fewer than CHANNEL of them: the channel is new.
                let _ = sender.try_send(report);
            } else {
                routes.early.push_back((at, report));
            }
        }
        routes.calls.insert(token.clone(), sender);
        Subscription {
            token,
            receiver,
            routes: Arc::clone(&self.inner),
        }
    }
}

/// One call's progress reports.
pub struct Subscription {
    token: ProgressToken,
    receiver: mpsc::Receiver<ProgressNotificationParam>,
    routes: Arc<Mutex<Routes>>,
}

impl Subscription {
    /// The next report, `None` once the session is gone.
    pub async fn next(&mut self) -> Option<ProgressNotificationParam> {
        self.receiver.recv().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let sender = self
            .routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .calls
            .remove(&self.token);
        // Dropped once the lock is released.
        drop(sender);
    }
}

/// Awaits `call`, passing each progress report that arrives meanwhile (and
/// those arriving just after it ends) to `sink`, in order, never waiting
/// for the sink.
pub(crate) async fn forward<T>(
    call: impl std::future::Future<Output = T>,
    mut reports: Subscription,
    sink: &ProgressSink,
) -> T {
    let pass = |p: ProgressNotificationParam| {
        let _ = sink.try_send(Progress {
            progress: p.progress,
            total: p.total,
            message: p.message,
        });
    };
    tokio::pin!(call);
    let result = loop {
        tokio::select! {
            biased;
            Some(p) = reports.next() => pass(p),
            result = &mut call => break result,
        }
    };
    // rmcp may hand over the result before the last reports, which its
    // notification handler dispatches on its own: wait a moment for them
    // (bounded, as a server could report without end).
    for _ in 0..LATE_REPORTS {
        match tokio::time::timeout(LATE_REPORT_WAIT, reports.next()).await {
            Ok(Some(p)) => pass(p),
            _ => break,
        }
    }
    result
}

/// How many progress reports arriving just after a call's result are still
/// passed on, and how long each is waited for.
const LATE_REPORTS: usize = 16;
const LATE_REPORT_WAIT: Duration = Duration::from_millis(20);

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn report(token: i64, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), progress)
    }

    #[tokio::test]
    async fn a_report_before_the_subscription_reaches_its_call_in_order() {
        let dispatcher = Dispatcher::default();
        dispatcher.handle(report(1, 0.0)).await;
        dispatcher.handle(report(2, 7.0)).await;
        let mut call = dispatcher.subscribe(ProgressToken(NumberOrString::Number(1)));
        dispatcher.handle(report(1, 50.0)).await;
        assert_eq!(call.next().await.map(|p| p.progress), Some(0.0));
        assert_eq!(call.next().await.map(|p| p.progress), Some(50.0));
        // Another call's early report stays for it.
        let mut other = dispatcher.subscribe(ProgressToken(NumberOrString::Number(2)));
        assert_eq!(other.next().await.map(|p| p.progress), Some(7.0));
    }

    #[tokio::test]
    async fn early_reports_are_bounded_and_a_dropped_call_gets_none() {
        let dispatcher = Dispatcher::default();
        for i in 0..(EARLY_REPORTS as i64 * 3) {
            dispatcher.handle(report(i, 1.0)).await;
        }
        assert_eq!(dispatcher.inner.lock().unwrap().early.len(), EARLY_REPORTS);
        let call = dispatcher.subscribe(ProgressToken(NumberOrString::Number(1000)));
        drop(call);
        assert!(dispatcher.inner.lock().unwrap().calls.is_empty());
        // A report for a call that ended waits among the early ones, bounded.
        dispatcher.handle(report(1000, 1.0)).await;
        assert_eq!(dispatcher.inner.lock().unwrap().early.len(), EARLY_REPORTS);
    }
}
