//! Stored responses of the Responses face (`store`, `previous_response_id`,
//! `GET`/`DELETE /v1/responses/{id}`): each kept with its owner (the API
//! key that made it; a key sees only its own), the conversation so far
//! (what a follow-up continues), its input items and the
//! response object. Bounded: entries live for a TTL, the store holds at most
//! a total of bytes (least recently used leave first), and an entry larger
//! than a sixteenth of it is not kept. With the shared state
//! (`state.redis`) every response is also written there (up to its
//! `max_value_bytes`), so any replica continues, reads or deletes it; a
//! replica that reads one from Redis keeps it too.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::support::shared::Redis;

/// One stored response.
#[derive(Debug, Serialize, Deserialize)]
pub struct Stored {
    /// The API key that made it (`None` without keys).
    pub owner: Option<String>,
    /// The conversation, the answer last (instructions left out: they are
    /// not carried over).
    pub turns: Vec<crate::conversation::Turn>,
    /// The request's input items, as sent.
    pub input_items: Vec<Value>,
    /// The response object.
    pub response: Value,
}

impl Stored {
    /// Its size in bytes, as the bound counts it.
    fn weight(&self) -> u64 {
        let bytes: usize = serde_json::to_string(&self.turns).map_or(0, |t| t.len())
            + self
                .input_items
                .iter()
                .map(|m| m.to_string().len())
                .sum::<usize>()
            + self.response.to_string().len();
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// The mark a deleted response leaves in the shared state.
const DELETED: &str = "deleted-response";

/// The store.
#[derive(Clone)]
pub struct Conversations {
    entries: moka::sync::Cache<String, Arc<Stored>>,
    max_entry: u64,
    ttl: Duration,
    shared: Option<Arc<Redis>>,
}

impl std::fmt::Debug for Conversations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversations")
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

/// What the store holds by default: 64 MiB for an hour.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

impl Default for Conversations {
    fn default() -> Self {
        Conversations::new(DEFAULT_MAX_BYTES, DEFAULT_TTL)
    }
}

impl Conversations {
    pub fn new(max_bytes: u64, ttl: Duration) -> Conversations {
        Conversations {
            entries: moka::sync::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_, v: &Arc<Stored>| u32::try_from(v.weight()).unwrap_or(u32::MAX))
                .time_to_live(ttl)
                .build(),
            max_entry: max_bytes / 16,
            ttl,
            shared: None,
        }
    }

    /// The same store, also kept in the shared state when there is one.
    pub fn with_shared(mut self, shared: Option<Arc<Redis>>) -> Conversations {
        self.shared = shared;
        self
    }

    fn shared_key(id: &str) -> String {
        format!("response:{id}")
    }

    /// Keeps `stored` under `id` (in the shared state too, written in the
    /// background); `false` when it is too large to keep.
    pub fn put(&self, id: &str, stored: Stored) -> bool {
        if stored.weight() > self.max_entry {
            return false;
        }
        if let Some(redis) = &self.shared
            && let Ok(value) = serde_json::to_value(&stored)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (redis, key, ttl) = (Arc::clone(redis), Self::shared_key(id), self.ttl);
            runtime.spawn(async move {
                if let Err(e) = redis.cache_put(&key, &value, ttl).await {
                    tracing::debug!("a stored response was not shared: {e}");
                }
            });
        }
        self.entries.insert(id.to_owned(), Arc::new(stored));
        true
    }

    /// The response `id`, if `owner` made it and it is still kept (here,
    /// else in the shared state).
    pub async fn get(&self, id: &str, owner: Option<&str>) -> Option<Arc<Stored>> {
        let found = match self.entries.get(id) {
            // Another replica may have deleted it since.
            Some(_) if self.shared.as_ref().is_some() && self.deleted_elsewhere(id).await => {
                self.entries.invalidate(id);
                return None;
            }
            Some(found) => found,
            None => {
                let redis = self.shared.as_ref()?;
                let value = redis.cache_get(&Self::shared_key(id)).await.ok()??;
                let stored: Arc<Stored> = Arc::new(serde_json::from_value(value).ok()?);
                self.entries.insert(id.to_owned(), Arc::clone(&stored));
                stored
            }
        };
        (found.owner.as_deref() == owner).then_some(found)
    }

    /// Forgets the response `id` of `owner` (everywhere); `false` when
    /// there is none.
    pub async fn remove(&self, id: &str, owner: Option<&str>) -> bool {
        if self.get(id, owner).await.is_none() {
            return false;
        }
        self.entries.invalidate(id);
        if let Some(redis) = &self.shared {
            let deleted = async {
                redis.cache_del(&Self::shared_key(id)).await?;
                redis.mark(DELETED, id, self.ttl).await
            };
            if let Err(e) = deleted.await {
                tracing::debug!("a stored response was not forgotten in the shared state: {e}");
            }
        }
        true
    }

    /// `true` when some replica deleted `id` (a mark in the shared state).
    async fn deleted_elsewhere(&self, id: &str) -> bool {
        match &self.shared {
            Some(redis) => redis.marked(DELETED, id).await.unwrap_or(false),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(owner: Option<&str>, size: usize) -> Stored {
        Stored {
            owner: owner.map(str::to_owned),
            turns: vec![crate::conversation::Turn::new(
                crate::conversation::Role::User,
                vec![crate::conversation::Item::text("x".repeat(size))],
            )],
            input_items: Vec::new(),
            response: json!({"id": "r"}),
        }
    }

    #[tokio::test]
    async fn a_key_sees_only_its_own() {
        let c = Conversations::default();
        assert!(c.put("r1", stored(Some("a"), 10)));
        assert!(c.get("r1", Some("a")).await.is_some());
        assert!(c.get("r1", Some("b")).await.is_none());
        assert!(c.get("r1", None).await.is_none());
        assert!(!c.remove("r1", Some("b")).await);
        assert!(c.remove("r1", Some("a")).await);
        assert!(c.get("r1", Some("a")).await.is_none());
    }

    #[test]
    fn the_store_is_bounded() {
        let c = Conversations::new(16 * 1024, DEFAULT_TTL);
        assert!(!c.put("big", stored(None, 2000)), "over a sixteenth");
        for i in 0..100 {
            assert!(c.put(&format!("r{i}"), stored(None, 500)));
        }
        c.entries.run_pending_tasks();
        assert!(c.entries.weighted_size() <= 16 * 1024);
        assert!(c.entries.entry_count() < 100);
    }
}
