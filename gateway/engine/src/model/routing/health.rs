//! Targets' health: failures in a row, and cooldowns (shared with the
//! other replicas through `state.redis`; the failures counted here).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolgate_config::format::CooldownDecl;

use crate::support::shared::Redis;

/// Targets followed at most (a glob route's targets are named by the
/// client's model names): the least recently used are forgotten.
const TARGETS: u64 = 10_000;

#[derive(Debug, Default)]
struct State {
    failures: u32,
    until: Option<Instant>,
}

/// The health of every target, by `upstream/model`.
#[derive(Debug)]
pub struct Health {
    local: moka::sync::Cache<String, Arc<Mutex<State>>>,
    redis: Option<Arc<Redis>>,
}

impl Health {
    pub fn new(redis: Option<Arc<Redis>>) -> Health {
        Health {
            local: moka::sync::Cache::builder()
                .max_capacity(TARGETS)
                .time_to_idle(Duration::from_secs(3600))
                .build(),
            redis,
        }
    }

    fn state(&self, key: &str) -> Arc<Mutex<State>> {
        self.local.get_with_by_ref(key, Arc::default)
    }

    /// Whether `key` cools down (here, or as another replica said).
    pub async fn cooling(&self, key: &str) -> bool {
        if let Some(s) = self.local.get(key)
            && let Ok(s) = s.lock()
            && s.until.is_some_and(|u| u > Instant::now())
        {
            return true;
        }
        let Some(redis) = &self.redis else {
            return false;
        };
        match redis.marked("cooldown", key).await {
            Ok(marked) => marked,
            Err(_) => {
                crate::support::shared::fell_back("cooldown", "local");
                false
            }
        }
    }

    /// Counts a failure of `key`; returns the cooldown it starts, if any.
    pub async fn failed(
        &self,
        key: &str,
        retry_after: Option<Duration>,
        decl: &CooldownDecl,
    ) -> Option<Duration> {
        let cooldown = {
            let state = self.state(key);
            let Ok(mut s) = state.lock() else {
                return None;
            };
            s.failures += 1;
            let cooldown = super::cooldown_for(s.failures, retry_after, decl);
            if let Some(d) = cooldown {
                s.until = Some(Instant::now() + d);
                s.failures = 0;
            }
            cooldown
        };
        if let Some(d) = cooldown {
            tracing::warn!(target = %key, seconds = d.as_secs_f64(), "a model target cools down");
            if let Some(redis) = &self.redis
                && redis.mark("cooldown", key, d).await.is_err()
            {
                crate::support::shared::fell_back("cooldown", "local");
            }
        }
        cooldown
    }

    /// A call of `key` succeeded: its failures in a row end.
    pub fn succeeded(&self, key: &str) {
        if let Some(s) = self.local.get(key)
            && let Ok(mut s) = s.lock()
        {
            s.failures = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn three_failures_in_a_row_cool_a_target_down_and_a_success_resets_the_count() {
        let h = Health::new(None);
        let d = CooldownDecl::default();
        assert_eq!(h.failed("a/m", None, &d).await, None);
        h.succeeded("a/m");
        assert_eq!(h.failed("a/m", None, &d).await, None);
        assert_eq!(h.failed("a/m", None, &d).await, None);
        assert!(!h.cooling("a/m").await);
        assert_eq!(h.failed("a/m", None, &d).await, Some(d.duration));
        assert!(h.cooling("a/m").await);
        assert!(!h.cooling("b/m").await);
        assert_eq!(
            h.failed("b/m", Some(Duration::from_millis(30)), &d).await,
            Some(Duration::from_millis(30))
        );
        assert!(h.cooling("b/m").await);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!h.cooling("b/m").await);
    }
}
