//! Stored responses of the Responses face (`store`, `previous_response_id`,
//! `GET`/`DELETE /v1/responses/{id}`): each kept with its owner (the API
//! key that made it; a key sees only its own), the conversation so far as
//! chat messages (what a follow-up continues), its input items and the
//! response object. Bounded: entries live for a TTL, the store holds at most
//! a total of bytes (least recently used leave first), and an entry larger
//! than a sixteenth of it is not kept. Kept in this process: replicas do
//! not share them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// One stored response.
#[derive(Debug)]
pub struct Stored {
    /// The API key that made it (`None` without keys).
    pub owner: Option<String>,
    /// The conversation as chat messages, the answer last (instructions
    /// left out: they are not carried over).
    pub messages: Vec<Value>,
    /// The request's input items, as sent.
    pub input_items: Vec<Value>,
    /// The response object.
    pub response: Value,
}

impl Stored {
    /// Its size in bytes, as the bound counts it.
    fn weight(&self) -> u64 {
        let bytes: usize = self
            .messages
            .iter()
            .map(|m| m.to_string().len())
            .sum::<usize>()
            + self
                .input_items
                .iter()
                .map(|m| m.to_string().len())
                .sum::<usize>()
            + self.response.to_string().len();
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }
}

/// The store.
#[derive(Clone)]
pub struct Conversations {
    entries: moka::sync::Cache<String, Arc<Stored>>,
    max_entry: u64,
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
        }
    }

    /// Keeps `stored` under `id`; `false` when it is too large to keep.
    pub fn put(&self, id: &str, stored: Stored) -> bool {
        if stored.weight() > self.max_entry {
            return false;
        }
        self.entries.insert(id.to_owned(), Arc::new(stored));
        true
    }

    /// The response `id`, if `owner` made it and it is still kept.
    pub fn get(&self, id: &str, owner: Option<&str>) -> Option<Arc<Stored>> {
        self.entries.get(id).filter(|s| s.owner.as_deref() == owner)
    }

    /// Forgets the response `id` of `owner`; `false` when there is none.
    pub fn remove(&self, id: &str, owner: Option<&str>) -> bool {
        if self.get(id, owner).is_none() {
            return false;
        }
        self.entries.invalidate(id);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(owner: Option<&str>, size: usize) -> Stored {
        Stored {
            owner: owner.map(str::to_owned),
            messages: vec![json!({"role": "user", "content": "x".repeat(size)})],
            input_items: Vec::new(),
            response: json!({"id": "r"}),
        }
    }

    #[test]
    fn a_key_sees_only_its_own() {
        let c = Conversations::default();
        assert!(c.put("r1", stored(Some("a"), 10)));
        assert!(c.get("r1", Some("a")).is_some());
        assert!(c.get("r1", Some("b")).is_none());
        assert!(c.get("r1", None).is_none());
        assert!(!c.remove("r1", Some("b")));
        assert!(c.remove("r1", Some("a")));
        assert!(c.get("r1", Some("a")).is_none());
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
