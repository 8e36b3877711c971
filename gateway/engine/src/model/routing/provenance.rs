//! Which target made which opaque state: a digest of each signature or
//! encrypted reasoning a target of a route of several returned, with the
//! target (`upstream/model`), so that a later request carrying it goes
//! back there. Kept for a day, here and (with `state.redis`) for every
//! replica.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::support::shared::Redis;

/// How long a target is remembered for its state.
const KEPT: Duration = Duration::from_secs(24 * 3600);

/// Entries kept in memory at most (each a digest and a shared name).
const ENTRIES: u64 = 200_000;

#[derive(Debug)]
pub struct Provenance {
    local: moka::sync::Cache<u128, Arc<str>>,
    redis: Option<Arc<Redis>>,
}

fn digest(state: &str) -> u128 {
    let d = Sha256::digest(state.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&d[..16]);
    u128::from_be_bytes(first)
}

impl Provenance {
    pub fn new(redis: Option<Arc<Redis>>) -> Provenance {
        Provenance {
            local: moka::sync::Cache::builder()
                .max_capacity(ENTRIES)
                .time_to_live(KEPT)
                .build(),
            redis,
        }
    }

    /// Remembers that target `key` made `state`.
    pub async fn remember(&self, state: &str, key: &str) {
        let d = digest(state);
        if self.local.get(&d).is_some_and(|k| &*k == key) {
            return;
        }
        self.local.insert(d, Arc::from(key));
        if let Some(redis) = &self.redis
            && redis
                .cache_put(
                    &format!("provenance:{d:032x}"),
                    &serde_json::json!(key),
                    KEPT,
                )
                .await
                .is_err()
        {
            crate::support::shared::fell_back("provenance", "local");
        }
    }

    /// The target that made `state`, if one of this gateway's did.
    pub async fn maker(&self, state: &str) -> Option<Arc<str>> {
        let d = digest(state);
        if let Some(k) = self.local.get(&d) {
            return Some(k);
        }
        let redis = self.redis.as_ref()?;
        match redis.cache_get(&format!("provenance:{d:032x}")).await {
            Ok(Some(serde_json::Value::String(k))) => {
                let k: Arc<str> = Arc::from(k);
                self.local.insert(d, Arc::clone(&k));
                Some(k)
            }
            Ok(_) => None,
            Err(_) => {
                crate::support::shared::fell_back("provenance", "local");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn state_is_traced_to_its_maker() {
        let p = Provenance::new(None);
        assert_eq!(p.maker("sig-1").await, None);
        p.remember("sig-1", "a/m").await;
        p.remember("sig-2", "b/m").await;
        assert_eq!(p.maker("sig-1").await.as_deref(), Some("a/m"));
        assert_eq!(p.maker("sig-2").await.as_deref(), Some("b/m"));
    }
}
