//! Requests for approval kept in Redis (`state.redis`), for every replica
//! and across restarts: a call held on one replica is listed and decided
//! on any other, and an approval given is used once, wherever the call is
//! made again.
//!
//! Each request is a hash (`approvals:r:<id>`: the request as JSON, its
//! status, who decided and why) that expires with `approvals.valid_for`;
//! `approvals:b:<binding>` names the latest request of a binding;
//! `approvals:pending` holds the ids still waiting (for
//! `approvals.max_pending`), `approvals:all` every id by the time it was
//! asked (for the list). Every change of status is one script, so two
//! replicas cannot both use one approval or both decide one request.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::shared::{Down, Redis};

use super::{Request, Status};

/// KEYS: the binding's key, the pending set, the list. ARGV: the prefix of
/// request keys, the new id, the new request (JSON), its lifetime (ms),
/// `max_pending`, now (ms). Answers `{"run", by}`, `{"wait", id}`,
/// `{"refused", by, reason}` or `{"full", n}`.
static ASK: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local id = redis.call('GET', KEYS[1])
if id then
  local r = ARGV[1] .. id
  local st = redis.call('HMGET', r, 'status', 'by', 'reason')
  if st[1] == 'approved' then
    redis.call('HSET', r, 'status', 'used')
    return {'run', st[2]}
  elseif st[1] == 'pending' then
    return {'wait', id}
  elseif st[1] == 'refused' then
    return {'refused', st[2], st[3] or ''}
  end
end
for _, p in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if redis.call('EXISTS', ARGV[1] .. p) == 0 then redis.call('SREM', KEYS[2], p) end
end
local n = redis.call('SCARD', KEYS[2])
if n >= tonumber(ARGV[5]) then return {'full', tostring(n)} end
local r = ARGV[1] .. ARGV[2]
redis.call('HSET', r, 'request', ARGV[3], 'status', 'pending')
redis.call('PEXPIRE', r, ARGV[4])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', tonumber(ARGV[6]) - tonumber(ARGV[4]))
return {'wait', ARGV[2]}
",
    )
});

/// KEYS: the request. Uses an approval (`approved` becomes `used`).
/// Answers the status before, with who decided and why (`{}` when gone).
static TAKE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local st = redis.call('HMGET', KEYS[1], 'status', 'by', 'reason')
if not st[1] then return {} end
if st[1] == 'approved' then redis.call('HSET', KEYS[1], 'status', 'used') end
return {st[1], st[2] or '', st[3] or ''}
",
    )
});

/// KEYS: the request, the pending set. ARGV: the new status, by, reason,
/// the id. Answers `{"ok"}`, `{"unknown"}` or `{"decided", status}`.
static DECIDE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'unknown'} end
if st ~= 'pending' then return {'decided', st} end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'by', ARGV[2], 'reason', ARGV[3])
redis.call('SREM', KEYS[2], ARGV[4])
return {'ok'}
",
    )
});

/// What [`ask`] found.
pub(super) enum Asked {
    Run { by: String },
    Wait { id: String },
    Refused { by: String, reason: Option<String> },
    Full(usize),
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

fn record(redis: &Redis, id: &str) -> String {
    redis.key(&["approvals", "r", id])
}

fn text(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// The status a request's fields say.
fn status(name: &str, by: &str, reason: &str) -> Option<Status> {
    let by = by.to_owned();
    Some(match name {
        "pending" => Status::Pending,
        "approved" => Status::Approved { by },
        "refused" => Status::Refused {
            by,
            reason: text(reason),
        },
        "used" => Status::Used { by },
        _ => return None,
    })
}

/// The latest request of `binding` (a digest): an approval to use, a
/// request to wait on, a refusal; else `request` opened, unless
/// `max_pending` wait already.
pub(super) async fn ask(
    redis: &Redis,
    binding: &str,
    request: &Request,
    valid_for: Duration,
    max_pending: usize,
) -> Result<Asked, Down> {
    let keys = [
        redis.key(&["approvals", "b", binding]),
        redis.key(&["approvals", "pending"]),
        redis.key(&["approvals", "all"]),
    ];
    let prefix = record(redis, "");
    let json = serde_json::to_string(request).map_err(|_| Down)?;
    let id = request.id.clone();
    let answer: Vec<String> = redis
        .run(|mut c| async move {
            ASK.key(&keys[0])
                .key(&keys[1])
                .key(&keys[2])
                .arg(prefix)
                .arg(id)
                .arg(json)
                .arg(ms(valid_for))
                .arg(max_pending)
                .arg(now_ms())
                .invoke_async(&mut c)
                .await
        })
        .await?;
    let field = |i: usize| answer.get(i).cloned().unwrap_or_default();
    Ok(match field(0).as_str() {
        "run" => Asked::Run { by: field(1) },
        "refused" => Asked::Refused {
            by: field(1),
            reason: text(&field(2)),
        },
        "full" => Asked::Full(field(1).parse().unwrap_or(max_pending)),
        _ => Asked::Wait { id: field(1) },
    })
}

/// Request `id`'s status, `None` once it expired.
pub(super) async fn status_of(redis: &Redis, id: &str) -> Result<Option<Status>, Down> {
    let key = record(redis, id);
    let (name, by, reason): (Option<String>, Option<String>, Option<String>) = redis
        .run(|mut c| async move {
            redis::cmd("HMGET")
                .arg(key)
                .arg("status")
                .arg("by")
                .arg("reason")
                .query_async(&mut c)
                .await
        })
        .await?;
    Ok(name.and_then(|n| {
        status(
            &n,
            by.as_deref().unwrap_or_default(),
            reason.as_deref().unwrap_or_default(),
        )
    }))
}

/// Takes the decision on `id`: its status before (an `Approved` one is
/// now used, by this call alone), `None` once it expired.
pub(super) async fn take(redis: &Redis, id: &str) -> Result<Option<Status>, Down> {
    let key = record(redis, id);
    let answer: Vec<String> = redis
        .run(|mut c| async move { TAKE.key(key).invoke_async(&mut c).await })
        .await?;
    Ok(match answer.as_slice() {
        [name, by, reason] => status(name, by, reason),
        _ => None,
    })
}

/// What [`decide`] did.
pub(super) enum Decided {
    Done,
    Unknown,
    Already(String),
}

/// Decides `id` (`to` is `Approved` or `Refused`), if it still waits.
pub(super) async fn decide(redis: &Redis, id: &str, to: &Status) -> Result<Decided, Down> {
    let (name, by, reason) = match to {
        Status::Approved { by } => ("approved", by.clone(), String::new()),
        Status::Refused { by, reason } => {
            ("refused", by.clone(), reason.clone().unwrap_or_default())
        }
        Status::Pending | Status::Used { .. } => return Ok(Decided::Unknown),
    };
    let keys = [record(redis, id), redis.key(&["approvals", "pending"])];
    let id = id.to_owned();
    let answer: Vec<String> = redis
        .run(|mut c| async move {
            DECIDE
                .key(&keys[0])
                .key(&keys[1])
                .arg(name)
                .arg(by)
                .arg(reason)
                .arg(id)
                .invoke_async(&mut c)
                .await
        })
        .await?;
    Ok(match answer.first().map(String::as_str) {
        Some("ok") => Decided::Done,
        Some("decided") => Decided::Already(answer.get(1).cloned().unwrap_or_default()),
        _ => Decided::Unknown,
    })
}

/// Request `id` as an approver sees it, `None` once it expired.
pub(super) async fn get(redis: &Redis, id: &str) -> Result<Option<Request>, Down> {
    let key = record(redis, id);
    let (json, name, by, reason, ttl): (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        i64,
    ) = redis
        .run(|mut c| async move {
            redis::pipe()
                .cmd("HGET")
                .arg(&key)
                .arg("request")
                .cmd("HGET")
                .arg(&key)
                .arg("status")
                .cmd("HGET")
                .arg(&key)
                .arg("by")
                .cmd("HGET")
                .arg(&key)
                .arg("reason")
                .cmd("PTTL")
                .arg(&key)
                .query_async(&mut c)
                .await
        })
        .await?;
    let (Some(json), Some(name)) = (json, name) else {
        return Ok(None);
    };
    let Ok(mut request) = serde_json::from_str::<Request>(&json) else {
        return Ok(None);
    };
    let Some(status) = status(
        &name,
        by.as_deref().unwrap_or_default(),
        reason.as_deref().unwrap_or_default(),
    ) else {
        return Ok(None);
    };
    request.status = status;
    request.expires_in_s = u64::try_from(ttl.max(0)).unwrap_or(0) / 1000;
    Ok(Some(request))
}

/// The open requests, newest first, at most `most`.
pub(super) async fn list(redis: &Redis, most: usize) -> Result<Vec<Request>, Down> {
    let all = redis.key(&["approvals", "all"]);
    let last = isize::try_from(most)
        .unwrap_or(isize::MAX)
        .saturating_sub(1);
    let ids: Vec<String> = redis
        .run(|mut c| async move {
            redis::cmd("ZREVRANGE")
                .arg(all)
                .arg(0)
                .arg(last)
                .query_async(&mut c)
                .await
        })
        .await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(request) = get(redis, &id).await? {
            out.push(request);
        }
    }
    Ok(out)
}
