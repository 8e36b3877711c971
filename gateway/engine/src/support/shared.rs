//! State shared by replicas, kept in Redis (or Valkey) when `state.redis`
//! is configured: per-key rate-limit buckets, the results of tools that
//! declare `cache`, and the formatters learned in `auto` mode.
//!
//! - **Rate limits** are one GCRA check in a Lua script (one round trip,
//!   atomic on the server, the server's clock): the same semantics as the
//!   per-process buckets of [`crate::governance::limits`] (a key may use its whole
//!   per-minute amount at once, then gets it back evenly over the minute).
//! - **Cached results** are JSON values under a TTL, keyed by the tool,
//!   a fingerprint of its definition and a hash of the arguments; values
//!   over `max_value_bytes` stay in the replica's own cache.
//! - **Learned formatters** are members of one set.
//! - **Entries** (`entry_*`): bytes kept until deleted, e.g. users'
//!   sealed upstream tokens.
//! - **Pins**: each MCP tool definition the replicas trust (with its
//!   fingerprint), a hash per server (see `toolgate_mcp_client::PinStore`).
//! - **Marks** (`mark`/`marked`): ids under a TTL, e.g. MCP sessions closed
//!   on one replica, so no other one restores them.
//!
//! Every operation is bounded by `state.redis.timeout`. Once the
//! connection is known to be down, operations fail at once with [`Down`]
//! (only those already in flight wait out the timeout), the callers fall
//! back (rate limits by the declared
//! `on_unavailable` policy; caches and formatters to the replica's own),
//! `/readyz` says why, and a supervisor task reconnects with backoff.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::MultiplexedConnection;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolgate_config::format::{RedisDecl, Unavailable};

use crate::support::secrets::Secret;

/// The shared state was not reachable (or answered too late); the caller
/// falls back.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the shared state (Redis) is unavailable")]
pub struct Down;

/// The Redis URL cannot be used (the catalog checks it first).
#[derive(Debug, thiserror::Error)]
#[error("the Redis URL cannot be used: {0}")]
pub struct BadUrl(String);

/// Whether Redis answers, and the last error when it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub up: bool,
    pub error: Option<String>,
}

/// GCRA: KEYS[1] holds the theoretical arrival time (µs, server clock);
/// ARGV[1] is the emission interval (µs), ARGV[2] the burst. Returns
/// `{1, 0}` when allowed, `{0, wait_µs}` when not.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - interval * burst
if allow_at > now then
  return {0, math.ceil(allow_at - now)}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, 0}
";

/// Admits a call to a budget's count (KEYS[1]) while `spent + reserved`
/// is under the limit (ARGV[1]): reserves what the previous call cost, or
/// the call's own guess (ARGV[3]) when larger. `{1, reserved}`, or `{0,
/// spent}` when the budget is spent.
const BUDGET_ADMIT: &str = r"
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')
if spent + reserved >= tonumber(ARGV[1]) then
  return {0, spent}
end
local last = math.max(tonumber(redis.call('HGET', KEYS[1], 'last') or '0'), tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[1], 'reserved', last)
if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return {1, last}
";

/// Replaces a reservation (ARGV[1]) by what the call cost (ARGV[2], which
/// becomes the next reservation); returns what is spent.
/// Deletes a lock only while it is still the caller's: KEYS[1] the lock,
/// ARGV[1] the token it was taken with.
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
";

const BUDGET_SETTLE: &str = r"
redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[1]))
local spent = redis.call('HINCRBY', KEYS[1], 'spent', ARGV[2])
if tonumber(ARGV[3]) == 1 then redis.call('HSET', KEYS[1], 'last', ARGV[2]) end
if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
return spent
";

/// The shared Redis: a multiplexed connection, its health, and the
/// operations the gateway needs.
pub struct Redis {
    client: redis::Client,
    prefix: String,
    timeout: Duration,
    policy: Unavailable,
    max_value_bytes: usize,
    conn: ArcSwapOption<MultiplexedConnection>,
    status: Mutex<Status>,
    /// Woken when an operation finds the connection broken.
    lost: Notify,
    /// When a refused operation was last logged (seconds since the epoch).
    last_refusal_logged: AtomicU64,
    gcra: redis::Script,
    budget_admit: redis::Script,
    budget_settle: redis::Script,
    unlock: redis::Script,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("prefix", &self.prefix)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// A handle on the Redis at `url` (checked by the catalog); nothing is
    /// connected until [`Redis::spawn`].
    pub fn new(url: &Secret, decl: &RedisDecl) -> Result<Arc<Redis>, BadUrl> {
        let url = std::str::from_utf8(url.bytes()).map_err(|_| BadUrl("not UTF-8".into()))?;
        let client = redis::Client::open(url).map_err(|e| BadUrl(describe(&e)))?;
        Ok(Arc::new(Redis {
            client,
            prefix: decl.prefix.clone(),
            timeout: decl.timeout,
            policy: decl.on_unavailable,
            max_value_bytes: decl.max_value_bytes,
            conn: ArcSwapOption::empty(),
            status: Mutex::new(Status {
                up: false,
                error: Some("not connected yet".into()),
            }),
            lost: Notify::new(),
            last_refusal_logged: AtomicU64::new(0),
            gcra: redis::Script::new(GCRA),
            budget_admit: redis::Script::new(BUDGET_ADMIT),
            budget_settle: redis::Script::new(BUDGET_SETTLE),
            unlock: redis::Script::new(UNLOCK),
        }))
    }

    /// What rate limits do while Redis is unavailable.
    pub fn policy(&self) -> Unavailable {
        self.policy
    }

    pub fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Connects now (waiting at most a few timeouts, so a gateway whose
    /// Redis is up starts with it), then keeps the connection: a ping a
    /// second, reconnection with backoff (0.1 s doubling to 2 s) after a
    /// failure, until `stop`.
    pub async fn spawn(self: &Arc<Self>, stop: CancellationToken) {
        self.connect().await;
        let me = Arc::clone(self);
        tokio::spawn(async move { me.supervise(stop).await });
    }

    fn connect_timeout(&self) -> Duration {
        (self.timeout * 4).max(Duration::from_secs(1))
    }

    async fn connect(&self) {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout()))
            .set_response_timeout(Some(self.timeout));
        let attempt = tokio::time::timeout(
            self.connect_timeout(),
            self.client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await;
        match attempt {
            Ok(Ok(conn)) => {
                self.conn.store(Some(Arc::new(conn)));
                self.set_status(None);
            }
            Ok(Err(e)) => self.set_status(Some(describe(&e))),
            Err(_) => self.set_status(Some("connecting timed out".into())),
        }
    }

    async fn supervise(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let up = self.conn.load().is_some();
            let wait = if up {
                backoff = Duration::from_millis(100);
                Duration::from_secs(1)
            } else {
                let wait = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                wait
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
                () = self.lost.notified() => {}
            }
            if self.conn.load().is_none() {
                self.connect().await;
            } else if let Err(e) = self
                .run(|mut c| async move { redis::cmd("PING").query_async::<()>(&mut c).await })
                .await
            {
                tracing::debug!("redis ping failed: {e}");
            }
        }
    }

    /// Records whether Redis answers; logs and meters the transitions.
    fn set_status(&self, error: Option<String>) {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let up = error.is_none();
        if up && !status.up {
            tracing::info!("shared state: Redis answers");
        } else if !up && (status.up || status.error != error) {
            tracing::warn!(
                "shared state: Redis is unavailable ({}); rate limits fall back to `{}`, caches and formatters to this replica's own",
                error.as_deref().unwrap_or_default(),
                policy_name(self.policy)
            );
        }
        *status = Status { up, error };
        crate::support::metrics::record(|m| m.shared_state_up.set(i64::from(up)));
    }

    /// Runs one operation on the connection under the timeout. A broken
    /// connection is dropped (the supervisor reconnects).
    pub(crate) async fn run<T, F, Fut>(&self, op: F) -> Result<T, Down>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let Some(conn) = self.conn.load_full() else {
            return Err(Down);
        };
        let failure = match tokio::time::timeout(self.timeout, op((*conn).clone())).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) if lost(&e) => describe(&e),
            Ok(Err(e)) => {
                // The server answered, with an error (a key of another
                // type, a script refused): this operation falls back, the
                // connection stays.
                self.refused(&e);
                return Err(Down);
            }
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        // Only the connection that failed is dropped: a slow operation on
        // an old one must not throw away the one the supervisor made since.
        let current = Some(conn);
        let previous = self
            .conn
            .compare_and_swap(&current, None::<Arc<MultiplexedConnection>>);
        if let (Some(previous), Some(failed)) = (&*previous, &current)
            && Arc::ptr_eq(previous, failed)
        {
            self.set_status(Some(failure));
            self.lost.notify_one();
        }
        Err(Down)
    }

    /// Logs an error answer, at most once in ten seconds.
    fn refused(&self, e: &redis::RedisError) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.last_refusal_logged.load(Ordering::Relaxed);
        if now >= last + 10
            && self
                .last_refusal_logged
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!("shared state: Redis refused an operation: {}", describe(e));
        }
    }

    pub(crate) fn key(&self, parts: &[&str]) -> String {
        let mut key = self.prefix.clone();
        key.push_str(&parts.join(":"));
        key
    }

    /// Takes one token from the bucket `what` of `key` (`per_minute` a
    /// minute, all of them at once at most). `Ok(Err(wait))`: none left.
    pub async fn take_token(
        &self,
        what: &str,
        key: &str,
        per_minute: u32,
    ) -> Result<Result<(), Duration>, Down> {
        let bucket = self.key(&["rate", what, key]);
        let interval_us = 60_000_000f64 / f64::from(per_minute.max(1));
        let (allowed, wait_us): (i64, i64) = self
            .run(|mut c| async move {
                self.gcra
                    .key(bucket)
                    .arg(interval_us)
                    .arg(per_minute)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(if allowed == 1 {
            Ok(())
        } else {
            Err(Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)))
        })
    }

    /// Admits a call to the budget count `counter` under `limit` (it
    /// reserves the previous call's cost, or `guess` if larger), keeping
    /// the count `ttl_secs` (0: for ever). `Ok(Ok(reserved))`, or
    /// `Ok(Err(spent))` when the budget is spent.
    pub async fn budget_admit(
        &self,
        counter: &str,
        limit: i64,
        guess: i64,
        ttl_secs: i64,
    ) -> Result<Result<i64, i64>, Down> {
        let key = self.key(&["budget", counter]);
        let (admitted, n): (i64, i64) = self
            .run(|mut c| async move {
                self.budget_admit
                    .key(key)
                    .arg(limit)
                    .arg(ttl_secs)
                    .arg(guess)
                    .invoke_async(&mut c)
                    .await
            })
            .await?;
        Ok(if admitted == 1 { Ok(n) } else { Err(n) })
    }

    /// Replaces the reservation `reserved` of `counter` by `actual` (kept
    /// as the next reservation when `learn`); returns what is spent.
    pub async fn budget_settle(
        &self,
        counter: &str,
        reserved: i64,
        actual: i64,
        learn: bool,
        ttl_secs: i64,
    ) -> Result<i64, Down> {
        let key = self.key(&["budget", counter]);
        self.run(|mut c| async move {
            self.budget_settle
                .key(key)
                .arg(reserved)
                .arg(actual)
                .arg(i64::from(learn))
                .arg(ttl_secs)
                .invoke_async(&mut c)
                .await
        })
        .await
    }

    /// What the budget count `counter` holds spent.
    pub async fn budget_spent(&self, counter: &str) -> Result<i64, Down> {
        let key = self.key(&["budget", counter]);
        let spent: Option<i64> = self
            .run(|mut c| async move {
                redis::cmd("HGET")
                    .arg(key)
                    .arg("spent")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(spent.unwrap_or(0))
    }

    /// Adds `fields` to the spend hash of hour `hour`, kept `ttl_secs`.
    pub async fn spend_add(
        &self,
        hour: i64,
        fields: &[(String, i64)],
        ttl_secs: i64,
    ) -> Result<(), Down> {
        let key = self.key(&["spend", &hour.to_string()]);
        let mut pipe = redis::pipe();
        for (field, n) in fields {
            pipe.cmd("HINCRBY").arg(&key).arg(field).arg(*n).ignore();
        }
        pipe.cmd("EXPIRE").arg(&key).arg(ttl_secs).ignore();
        self.run(|mut c| async move { pipe.query_async::<()>(&mut c).await })
            .await
    }

    /// The spend hash of each hour of `hours`.
    pub async fn spend_hours(&self, hours: &[i64]) -> Result<Vec<(i64, Vec<(String, i64)>)>, Down> {
        let mut pipe = redis::pipe();
        for h in hours {
            pipe.cmd("HGETALL")
                .arg(self.key(&["spend", &h.to_string()]));
        }
        let all: Vec<Vec<(String, i64)>> = self
            .run(|mut c| async move { pipe.query_async(&mut c).await })
            .await?;
        Ok(hours.iter().copied().zip(all).collect())
    }

    /// A cached result, if another replica (or this one) stored it.
    pub async fn cache_get(&self, key: &str) -> Result<Option<Value>, Down> {
        let key = self.key(&["cache", key]);
        let raw: Option<Vec<u8>> = self
            .run(|mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await })
            .await?;
        Ok(raw.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Stores a result for `ttl` unless it is over `max_value_bytes`
    /// (`Ok(false)`: not stored).
    pub async fn cache_put(&self, key: &str, value: &Value, ttl: Duration) -> Result<bool, Down> {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        if bytes.len() > self.max_value_bytes || bytes.is_empty() {
            return Ok(false);
        }
        let key = self.key(&["cache", key]);
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.run(|mut c| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(bytes)
                .arg("PX")
                .arg(ms)
                .query_async::<()>(&mut c)
                .await
        })
        .await?;
        Ok(true)
    }

    /// Forgets a cached value.
    pub async fn cache_del(&self, key: &str) -> Result<(), Down> {
        let key = self.key(&["cache", key]);
        self.run(|mut c| async move { redis::cmd("DEL").arg(key).query_async::<()>(&mut c).await })
            .await
    }

    /// A kept entry (bytes, no expiry): e.g. a user's sealed token.
    pub async fn entry_get(&self, parts: &[&str]) -> Result<Option<Vec<u8>>, Down> {
        let key = self.key(parts);
        self.run(|mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await })
            .await
    }

    /// Keeps an entry until it is deleted.
    pub async fn entry_put(&self, parts: &[&str], bytes: &[u8]) -> Result<(), Down> {
        let key = self.key(parts);
        let bytes = bytes.to_vec();
        self.run(|mut c| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(bytes)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Deletes an entry; `true` when there was one.
    pub async fn entry_del(&self, parts: &[&str]) -> Result<bool, Down> {
        let key = self.key(parts);
        let n: i64 = self
            .run(|mut c| async move { redis::cmd("DEL").arg(key).query_async(&mut c).await })
            .await?;
        Ok(n > 0)
    }

    /// Marks `id` of `kind` (e.g. a closed MCP session) for every replica,
    /// for `ttl`.
    pub async fn mark(&self, kind: &str, id: &str, ttl: Duration) -> Result<(), Down> {
        let key = self.key(&[kind, id]);
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.run(|mut c| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("PX")
                .arg(ms)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Whether some replica marked `id` of `kind`.
    pub async fn marked(&self, kind: &str, id: &str) -> Result<bool, Down> {
        let key = self.key(&[kind, id]);
        self.run(|mut c| async move { redis::cmd("EXISTS").arg(key).query_async(&mut c).await })
            .await
    }

    /// Takes the lock `parts` for at most `ttl` unless another holder has
    /// it: the holder's token (to [`unlock`](Self::unlock) with) when taken.
    pub async fn lock(&self, parts: &[&str], ttl: Duration) -> Result<Option<String>, Down> {
        let key = self.key(&[&["lock"][..], parts].concat());
        let token = uuid::Uuid::new_v4().simple().to_string();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let held = token.clone();
        let taken: Option<String> = self
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(held)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(taken.map(|_| token))
    }

    /// Gives back the lock `parts` taken with `token` (a lock that expired
    /// and was taken by another holder is left to it).
    pub async fn unlock(&self, parts: &[&str], token: &str) -> Result<(), Down> {
        let key = self.key(&[&["lock"][..], parts].concat());
        let token = token.to_owned();
        self.run(|mut c| async move {
            self.unlock
                .key(key)
                .arg(token)
                .invoke_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Whether some replica learned that `route` (`upstream/model`) takes
    /// no `tools`.
    pub async fn learned_structured(&self, route: &str) -> Result<bool, Down> {
        let key = self.key(&["formatters", "structured"]);
        let route = route.to_owned();
        self.run(|mut c| async move {
            redis::cmd("SISMEMBER")
                .arg(key)
                .arg(route)
                .query_async(&mut c)
                .await
        })
        .await
    }

    /// Shares that `route` takes no `tools`.
    pub async fn learn_structured(&self, route: &str) -> Result<(), Down> {
        let key = self.key(&["formatters", "structured"]);
        let route = route.to_owned();
        self.run(|mut c| async move {
            redis::cmd("SADD")
                .arg(key)
                .arg(route)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }
}

/// Keeps, in the hash KEYS[1], each tool's record (ARGV: tool, record,
/// tool, …) where none is; answers the records kept, in the same order.
static PINS_SETTLE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
for i = 1, #ARGV, 2 do redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) end
local out = {}
for i = 1, #ARGV, 2 do out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i]) end
return out
",
    )
});

/// The tool definitions the replicas trust: a hash per MCP server
/// (`pins:<server>`), the server's name for each tool to the MCP client's
/// record of its trusted definition.
impl toolgate_mcp_client::PinStore for Redis {
    fn settle<'a>(
        &'a self,
        server: &'a str,
        proposed: &'a [(String, String)],
    ) -> futures::future::BoxFuture<
        'a,
        Result<
            std::collections::HashMap<String, String>,
            toolgate_mcp_client::session::shared_pins::Unavailable,
        >,
    > {
        Box::pin(async move {
            if proposed.is_empty() {
                return Ok(std::collections::HashMap::new());
            }
            let key = self.key(&["pins", server]);
            let recorded: Vec<Option<String>> = self
                .run(|mut c| async move {
                    let mut call = PINS_SETTLE.key(key);
                    for (tool, record) in proposed {
                        call.arg(tool).arg(record);
                    }
                    call.invoke_async(&mut c).await
                })
                .await
                .map_err(|Down| {
                    fell_back("pins", "local");
                    toolgate_mcp_client::session::shared_pins::Unavailable
                })?;
            Ok(proposed
                .iter()
                .zip(recorded)
                .filter_map(|((tool, _), record)| Some((tool.clone(), record?)))
                .collect())
        })
    }

    fn trust<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        record: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<(), toolgate_mcp_client::session::shared_pins::Unavailable>,
    > {
        Box::pin(async move {
            let key = self.key(&["pins", server]);
            self.run(|mut c| async move {
                redis::cmd("HSET")
                    .arg(key)
                    .arg(tool)
                    .arg(record)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
            .map_err(|Down| {
                fell_back("pins", "local");
                toolgate_mcp_client::session::shared_pins::Unavailable
            })
        })
    }
}

/// Counts a fallback in the metrics.
pub fn fell_back(what: &str, fallback: &str) {
    crate::support::metrics::record(|m| {
        m.shared_state_fallbacks
            .with_label_values(&[what, fallback])
            .inc();
    });
}

fn policy_name(policy: Unavailable) -> &'static str {
    match policy {
        Unavailable::Local => "local",
        Unavailable::Open => "open",
        Unavailable::Closed => "closed",
    }
}

/// Whether `e` means the connection is no use: broken, timed out, or a
/// server that cannot take writes now (a replica after a failover, one
/// still loading, one whose primary is down).
fn lost(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(e.code(), Some("READONLY" | "LOADING" | "MASTERDOWN"))
}

/// A Redis error in words (its text names no URL or password).
fn describe(e: &redis::RedisError) -> String {
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl() -> RedisDecl {
        RedisDecl {
            url_env: "X".into(),
            prefix: "t:".into(),
            timeout: Duration::from_millis(100),
            on_unavailable: Unavailable::Local,
            max_value_bytes: 1024,
        }
    }

    #[tokio::test]
    async fn without_a_connection_every_operation_is_down_at_once() {
        let url = Secret::new(b"redis://127.0.0.1:1/0".to_vec());
        let redis = Redis::new(&url, &decl()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!redis.status().up);
        assert!(redis.take_token("requests", "k", 5).await.is_err());
        assert!(redis.cache_get("t:x").await.is_err());
        assert!(redis.learned_structured("u/m").await.is_err());
    }
}
