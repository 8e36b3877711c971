//! Limits that protect the gateway:
//! global caps on concurrent tool loops and streams, and per-key rate
//! limits.
//!
//! - **Caps** ([`InFlight`]) are counters checked against the current
//!   catalog's limit when a request starts, so a reload that changes a
//!   limit applies to the next request; a request over the cap is refused
//!   at once (503 with `Retry-After`), never queued.
//! - **Rate limits** ([`RateLimits`]) are token buckets (`governor`'s GCRA)
//!   per key name: a key may use its whole per-minute amount at once, then
//!   gets it back evenly over the minute. The buckets outlive reloads; a
//!   bucket whose quota changed is replaced. With `state.redis` the
//!   buckets live in Redis ([`crate::support::shared`]), shared by every replica;
//!   while Redis is unavailable, `on_unavailable` decides.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use toolgate_config::format::Unavailable;

use crate::support::shared::{self, Down, Redis};

/// Requests of one kind in progress, with a cap.
#[derive(Debug, Default)]
pub struct InFlight {
    n: AtomicUsize,
    gauge: Option<prometheus::IntGauge>,
}

impl InFlight {
    /// A counter mirrored into `gauge`.
    pub fn with_gauge(gauge: Option<prometheus::IntGauge>) -> InFlight {
        InFlight {
            n: AtomicUsize::new(0),
            gauge,
        }
    }

    /// Enters when fewer than `max` are in progress; the guard leaves on drop.
    pub fn try_enter(self: &Arc<Self>, max: usize) -> Option<InFlightGuard> {
        let mut current = self.n.load(Ordering::Relaxed);
        loop {
            if current >= max {
                return None;
            }
            match self.n.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        if let Some(g) = &self.gauge {
            g.inc();
        }
        Some(InFlightGuard {
            of: Arc::clone(self),
        })
    }

    /// How many are in progress.
    pub fn current(&self) -> usize {
        self.n.load(Ordering::Relaxed)
    }
}

/// One request counted in an [`InFlight`]; dropping it leaves.
#[derive(Debug)]
pub struct InFlightGuard {
    of: Arc<InFlight>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.of.n.fetch_sub(1, Ordering::AcqRel);
        if let Some(g) = &self.of.gauge {
            g.dec();
        }
    }
}

/// What a rate limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rate {
    Requests,
    ToolCalls,
}

impl Rate {
    fn label(self) -> &'static str {
        match self {
            Rate::Requests => "requests",
            Rate::ToolCalls => "tool_calls",
        }
    }
}

/// Why a rate-limited request or call may not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The key's bucket is empty: one token comes back after the wait.
    Limited(Duration),
    /// The shared buckets cannot be read (`state.redis.on_unavailable:
    /// closed`).
    Unavailable,
}

/// A bucket and the quota it was made for.
type Bucket = (NonZeroU32, Arc<DefaultDirectRateLimiter>);

/// Per-key token buckets, kept across reloads: in this process, or in the
/// shared Redis.
#[derive(Debug, Default)]
pub struct RateLimits {
    buckets: Mutex<HashMap<(String, Rate), Bucket>>,
    shared: Option<Arc<Redis>>,
}

impl RateLimits {
    /// Buckets kept in `redis`, shared by every replica using it.
    pub fn shared(redis: Arc<Redis>) -> RateLimits {
        RateLimits {
            buckets: Mutex::default(),
            shared: Some(redis),
        }
    }

    /// Takes one token from `key`'s bucket of `rate` (`per_minute` tokens a
    /// minute).
    pub async fn check(
        &self,
        key: &str,
        rate: Rate,
        per_minute: NonZeroU32,
    ) -> Result<(), Refused> {
        let Some(redis) = &self.shared else {
            return self
                .check_local(key, rate, per_minute)
                .map_err(Refused::Limited);
        };
        match redis.take_token(rate.label(), key, per_minute.get()).await {
            Ok(taken) => taken.map_err(Refused::Limited),
            Err(Down) => match redis.policy() {
                Unavailable::Local => {
                    shared::fell_back("rate_limit", "local");
                    self.check_local(key, rate, per_minute)
                        .map_err(Refused::Limited)
                }
                Unavailable::Open => {
                    shared::fell_back("rate_limit", "open");
                    Ok(())
                }
                Unavailable::Closed => {
                    shared::fell_back("rate_limit", "closed");
                    Err(Refused::Unavailable)
                }
            },
        }
    }

    /// The same, in this process's own buckets; `Err` holds how long until
    /// a token is available.
    fn check_local(&self, key: &str, rate: Rate, per_minute: NonZeroU32) -> Result<(), Duration> {
        let limiter = {
            let mut buckets = self
                .buckets
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let entry = buckets
                .entry((key.to_owned(), rate))
                .or_insert_with(|| (per_minute, Arc::new(new_limiter(per_minute))));
            if entry.0 != per_minute {
                *entry = (per_minute, Arc::new(new_limiter(per_minute)));
            }
            Arc::clone(&entry.1)
        };
        limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

fn new_limiter(per_minute: NonZeroU32) -> DefaultDirectRateLimiter {
    RateLimiter::direct(Quota::per_minute(per_minute))
}

/// Whole seconds to announce in `Retry-After` for a wait (at least 1).
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs_f64().ceil() as u64).max(1)
}

/// Counters per key name, each with the key's own cap.
#[derive(Debug, Default)]
pub struct KeyedInFlight {
    by_key: Mutex<HashMap<String, Arc<InFlight>>>,
}

impl KeyedInFlight {
    /// Enters `key`'s counter unless it is at `max`.
    pub fn try_enter(&self, key: &str, max: usize) -> Option<InFlightGuard> {
        let counter = {
            let mut map = self
                .by_key
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            Arc::clone(map.entry(key.to_owned()).or_default())
        };
        counter.try_enter(max)
    }
}

/// A place under the caps (global and the key's), held until dropped.
#[derive(Debug)]
pub struct Permit {
    _global: InFlightGuard,
    _key: Option<InFlightGuard>,
}

/// Why a request was refused a place: a code and a sentence.
#[derive(Debug, Clone)]
pub struct Full {
    pub code: &'static str,
    pub message: String,
}

/// What every request shares: the caps and the buckets.
#[derive(Debug)]
pub struct Guards {
    pub loops: Arc<InFlight>,
    pub streams: Arc<InFlight>,
    pub rates: Arc<RateLimits>,
    /// Loops and streams per key, for keys with their own caps.
    pub key_loops: KeyedInFlight,
    pub key_streams: KeyedInFlight,
}

/// A key's cap on places of one kind: its own `max_concurrent_*`, else its
/// share of the gateway's (`limits.max_key_share_percent`, at least one).
fn key_cap(
    own: Option<NonZeroU32>,
    global: usize,
    limits: &toolgate_config::format::Limits,
) -> NonZeroU32 {
    own.unwrap_or_else(|| {
        let share =
            global.saturating_mul(usize::from(limits.max_key_share_percent.clamp(1, 100))) / 100;
        NonZeroU32::new(u32::try_from(share).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN)
    })
}

impl Guards {
    /// A place for a tool loop (sub-agents included): under
    /// `limits.max_concurrent_loops`, and the key's cap (its own, else its share).
    pub fn enter_loop(
        &self,
        limits: &toolgate_config::format::Limits,
        key: Option<&crate::identity::auth::ApiKey>,
    ) -> Result<Permit, Full> {
        Self::enter(
            (&self.loops, limits.max_concurrent_loops),
            || Full {
                code: "too_many_loops",
                message: format!(
                    "the gateway runs {} tool loops, its limit (limits.max_concurrent_loops); retry shortly",
                    limits.max_concurrent_loops
                ),
            },
            (
                &self.key_loops,
                key.map(|k| {
                    (
                        k,
                        key_cap(k.max_concurrent_loops, limits.max_concurrent_loops, limits),
                    )
                }),
            ),
            "tool loops",
        )
    }

    /// A place for a streaming response: under
    /// `limits.max_concurrent_streams`, and the key's cap (its own, else its share).
    pub fn enter_stream(
        &self,
        limits: &toolgate_config::format::Limits,
        key: Option<&crate::identity::auth::ApiKey>,
    ) -> Result<Permit, Full> {
        Self::enter(
            (&self.streams, limits.max_concurrent_streams),
            || Full {
                code: "too_many_streams",
                message: format!(
                    "the gateway has {} streaming responses open, its limit (limits.max_concurrent_streams); retry shortly",
                    limits.max_concurrent_streams
                ),
            },
            (
                &self.key_streams,
                key.map(|k| {
                    (
                        k,
                        key_cap(
                            k.max_concurrent_streams,
                            limits.max_concurrent_streams,
                            limits,
                        ),
                    )
                }),
            ),
            "streaming responses",
        )
    }

    /// A place under the global counter, then under the key's.
    fn enter(
        (global, max): (&Arc<InFlight>, usize),
        full: impl FnOnce() -> Full,
        (keyed, key): (
            &KeyedInFlight,
            Option<(&crate::identity::auth::ApiKey, NonZeroU32)>,
        ),
        what: &str,
    ) -> Result<Permit, Full> {
        let global = global.try_enter(max).ok_or_else(full)?;
        let key = match key {
            None => None,
            Some((key, max)) => Some(keyed.try_enter(&key.name, max.get() as usize).ok_or_else(
                || Full {
                    code: "key_concurrency_limit",
                    message: format!(
                        "API key `{}` has {max} {what} in progress, its limit; retry shortly",
                        key.name
                    ),
                },
            )?),
        };
        Ok(Permit {
            _global: global,
            _key: key,
        })
    }
}

impl Guards {
    /// Guards whose rate-limit buckets are kept in the shared `redis`.
    pub fn shared(redis: Arc<Redis>) -> Self {
        Guards {
            rates: Arc::new(RateLimits::shared(redis)),
            ..Guards::default()
        }
    }
}

impl Default for Guards {
    fn default() -> Self {
        let metrics = crate::support::metrics::global();
        Guards {
            loops: Arc::new(InFlight::with_gauge(
                metrics.map(|m| m.active_loops.clone()),
            )),
            streams: Arc::new(InFlight::with_gauge(
                metrics.map(|m| m.active_streams.clone()),
            )),
            rates: Arc::default(),
            key_loops: KeyedInFlight::default(),
            key_streams: KeyedInFlight::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_caps_and_releases() {
        let f = Arc::new(InFlight::default());
        let a = f.try_enter(2);
        let b = f.try_enter(2);
        assert!(a.is_some() && b.is_some());
        assert!(f.try_enter(2).is_none());
        drop(a);
        assert_eq!(f.current(), 1);
        assert!(f.try_enter(2).is_some());
    }

    #[tokio::test]
    async fn a_bucket_refuses_beyond_its_quota_and_says_how_long() {
        let r = RateLimits::default();
        let two = NonZeroU32::new(2).unwrap_or(NonZeroU32::MIN);
        assert!(r.check("k", Rate::Requests, two).await.is_ok());
        assert!(r.check("k", Rate::Requests, two).await.is_ok());
        let wait = r.check("k", Rate::Requests, two).await.err();
        // One token comes back every 30 s.
        assert!(
            matches!(wait, Some(Refused::Limited(w)) if w > Duration::from_secs(20) && w <= Duration::from_secs(30))
        );
        // Other keys and other kinds have their own buckets.
        assert!(r.check("other", Rate::Requests, two).await.is_ok());
        assert!(r.check("k", Rate::ToolCalls, two).await.is_ok());
        // A changed quota starts a new bucket.
        let three = NonZeroU32::new(3).unwrap_or(NonZeroU32::MIN);
        assert!(r.check("k", Rate::Requests, three).await.is_ok());
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(29_001)), 30);
    }
}
