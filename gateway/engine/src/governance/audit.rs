//! The audit log: one JSON line per tool call, to a file or stdout.
//!
//! The executor hands each finished call to [`AuditLog::record`], which puts
//! it on a bounded queue and returns; a writer task serialises the lines and
//! writes them in batches, flushing whenever the queue runs empty. The
//! request path only waits when the writer is [`QUEUE`] lines behind
//! (counted in `toolgate_audit_queue_waits_total`): a line is never
//! dropped. [`AuditLog::flush`] returns once everything recorded before it
//! is written and synced; graceful shutdown calls it last.
//!
//! Secrets: arguments are written with every property the tool's schema
//! marks `writeOnly: true` or `x-secret: true` replaced by `"[redacted]"`
//! (or only as a digest, or not at all: `audit.arguments`). Results and
//! error messages are never written, only their size and the outcome code.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use toolgate_config::format::{AuditArguments, AuditDecl};

/// Lines the queue holds before `record` waits.
pub const QUEUE: usize = 8192;

/// What replaces a secret value.
pub const REDACTED: &str = "[redacted]";

/// One audit line.
#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    /// When the call finished, RFC 3339 in UTC.
    pub ts: String,
    pub request_id: String,
    /// The API key's name, when keys are configured.
    pub key: Option<String>,
    /// Who called: the bearer token's `sub`, else the key's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub tool_set: Option<String>,
    pub tool: String,
    /// The caller's id for the call (the model's `tool_call_id`).
    pub call_id: String,
    /// The arguments, secrets redacted (`audit.arguments: redacted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// SHA-256 of the redacted arguments' canonical JSON
    /// (`audit.arguments: digest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments_sha256: Option<String>,
    /// `ok`, or the error code (`timeout`, `backend_error`, ...).
    pub outcome: &'static str,
    pub duration_ms: f64,
    /// Size of what the caller got back (the result's text, or the error
    /// message), in bytes.
    pub bytes: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

enum Msg {
    Line(Box<AuditEntry>),
    Flush(oneshot::Sender<()>),
}

/// The sending side of the audit log. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AuditLog {
    tx: mpsc::Sender<Msg>,
    arguments: AuditArguments,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Line(_) => f.write_str("Line"),
            Msg::Flush(_) => f.write_str("Flush"),
        }
    }
}

/// Why the audit log could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the audit log {path}: {source}")]
pub struct OpenError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

enum Sink {
    File(tokio::io::BufWriter<tokio::fs::File>),
    Stdout(tokio::io::BufWriter<tokio::io::Stdout>),
}

impl Sink {
    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::File(w) => w.write_all(bytes).await,
            Sink::Stdout(w) => w.write_all(bytes).await,
        }
    }

    async fn flush(&mut self, sync: bool) -> std::io::Result<()> {
        match self {
            Sink::File(w) => {
                w.flush().await?;
                if sync {
                    w.get_ref().sync_data().await?;
                }
                Ok(())
            }
            Sink::Stdout(w) => w.flush().await,
        }
    }
}

impl AuditLog {
    /// Opens the log `decl` names (a path relative to `dir`, or `-` for
    /// stdout) and starts its writer task.
    pub async fn open(decl: &AuditDecl, dir: &Path) -> Result<AuditLog, OpenError> {
        let sink = if decl.path == "-" {
            Sink::Stdout(tokio::io::BufWriter::new(tokio::io::stdout()))
        } else {
            let path = dir.join(&decl.path);
            let file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .await
                .map_err(|source| OpenError {
                    path: path.display().to_string(),
                    source,
                })?;
            Sink::File(tokio::io::BufWriter::new(file))
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_lines(rx, sink));
        Ok(AuditLog {
            tx,
            arguments: decl.arguments,
        })
    }

    /// Queues a line; waits only when the queue is full.
    pub async fn record(&self, entry: AuditEntry) {
        match self.tx.try_send(Msg::Line(Box::new(entry))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(msg)) => {
                crate::support::metrics::record(|m| m.audit_waits.inc());
                if self.tx.send(msg).await.is_err() {
                    tracing::error!("the audit writer has stopped; an audit line was lost");
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::error!("the audit writer has stopped; an audit line was lost");
            }
        }
    }

    /// Waits until every line recorded before is written (and synced to
    /// disk for a file).
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg::Flush(ack)).await.is_ok() {
            let _ = done.await;
        }
    }

    /// The arguments as this log writes them: `(arguments, digest)`.
    pub fn arguments(
        &self,
        schema: Option<&Value>,
        args: &Value,
    ) -> (Option<Value>, Option<String>) {
        render_arguments(self.arguments, schema, args)
    }

    /// How this log writes arguments.
    pub fn arguments_mode(&self) -> AuditArguments {
        self.arguments
    }
}

/// A call's arguments as `mode` writes them: `(arguments, digest)`, every
/// secret redacted first.
pub fn render_arguments(
    mode: AuditArguments,
    schema: Option<&Value>,
    args: &Value,
) -> (Option<Value>, Option<String>) {
    if mode == AuditArguments::None {
        return (None, None);
    }
    let redacted = match schema {
        Some(schema) => redact(schema, args),
        // Unknown tool: no schema says what is secret, so nothing is shown.
        None => Value::String(REDACTED.to_owned()),
    };
    match mode {
        AuditArguments::Digest => (None, Some(sha256_hex(&toolgate::canonical_json(&redacted)))),
        _ => (Some(redacted), None),
    }
}

/// The longest arguments [`Recent`] keeps, in characters of JSON; longer
/// ones are kept as their JSON text cut there.
pub const RECENT_ARGUMENT_CHARS: usize = 2048;

/// The last calls, newest first, for the console: a ring of audit entries
/// of fixed size, whose arguments are cut at [`RECENT_ARGUMENT_CHARS`].
#[derive(Debug)]
pub struct Recent {
    capacity: usize,
    entries: std::sync::Mutex<std::collections::VecDeque<AuditEntry>>,
}

impl Recent {
    /// A ring keeping the last `capacity` calls.
    pub fn new(capacity: usize) -> Recent {
        Recent {
            capacity,
            entries: std::sync::Mutex::new(std::collections::VecDeque::with_capacity(capacity)),
        }
    }

    /// Keeps `entry`, forgetting the oldest when full.
    pub fn push(&self, mut entry: AuditEntry) {
        if self.capacity == 0 {
            return;
        }
        if let Some(args) = &entry.arguments {
            let text = args.to_string();
            if text.chars().count() > RECENT_ARGUMENT_CHARS {
                let cut: String = text.chars().take(RECENT_ARGUMENT_CHARS).collect();
                entry.arguments = Some(Value::String(format!("{cut}…")));
            }
        }
        let mut entries = self.lock();
        if entries.len() == self.capacity {
            entries.pop_back();
        }
        entries.push_front(entry);
    }

    /// The calls kept, newest first, that `keep` accepts, at most `limit`.
    pub fn list(&self, limit: usize, keep: impl Fn(&AuditEntry) -> bool) -> Vec<AuditEntry> {
        self.lock()
            .iter()
            .filter(|e| keep(e))
            .take(limit)
            .cloned()
            .collect()
    }

    /// The tools of the calls kept that `keep` accepts, each once.
    pub fn tools(&self, keep: impl Fn(&AuditEntry) -> bool) -> std::collections::BTreeSet<String> {
        self.lock()
            .iter()
            .filter(|e| keep(e))
            .map(|e| e.tool.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<AuditEntry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

async fn write_lines(mut rx: mpsc::Receiver<Msg>, mut sink: Sink) {
    let mut batch = Vec::with_capacity(256);
    let mut failed = false;
    loop {
        if rx.recv_many(&mut batch, 256).await == 0 {
            break;
        }
        let mut acks = Vec::new();
        for msg in batch.drain(..) {
            match msg {
                Msg::Line(entry) => {
                    let mut line = serde_json::to_vec(&entry).unwrap_or_default();
                    line.push(b'\n');
                    if let Err(e) = sink.write(&line).await
                        && !std::mem::replace(&mut failed, true)
                    {
                        tracing::error!("cannot write the audit log: {e}");
                    }
                }
                Msg::Flush(ack) => {
                    if let Err(e) = sink.flush(true).await {
                        tracing::error!("cannot flush the audit log: {e}");
                    }
                    acks.push(ack);
                }
            }
        }
        if rx.is_empty()
            && let Err(e) = sink.flush(false).await
            && !std::mem::replace(&mut failed, true)
        {
            tracing::error!("cannot flush the audit log: {e}");
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
    let _ = sink.flush(true).await;
}

pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `true` when a schema marks its value secret.
fn is_secret(schema: &Value) -> bool {
    ["writeOnly", "x-secret"]
        .iter()
        .any(|k| schema.get(*k) == Some(&Value::Bool(true)))
}

/// `args` with every value the schema marks secret (`writeOnly: true` or
/// `x-secret: true`, at any depth: properties, `patternProperties`,
/// `additionalProperties`, `prefixItems`, `items`, local `$ref`s and the
/// branches of `allOf`/`anyOf`/`oneOf`/`if`/`then`/`else`)
/// replaced by `"[redacted]"`.
pub fn redact(schema: &Value, args: &Value) -> Value {
    Redactor { root: schema }.value(schema, args, 0)
}

/// Deeper than this, values are redacted whole (schemas are not that deep;
/// a value this deep is more likely an attack on the walk).
const MAX_DEPTH: usize = 64;

struct Redactor<'a> {
    root: &'a Value,
}

impl<'a> Redactor<'a> {
    /// The schemas that apply to a value: `schema`, its `$ref` target and
    /// its combinator branches, flattened.
    fn applicable(&self, schema: &'a Value, out: &mut Vec<&'a Value>, depth: usize) {
        if depth > 8 || !schema.is_object() {
            return;
        }
        out.push(schema);
        if let Some(target) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| self.root.pointer(pointer))
        {
            self.applicable(target, out, depth + 1);
        }
        for k in ["allOf", "anyOf", "oneOf"] {
            for branch in schema
                .get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.applicable(branch, out, depth + 1);
            }
        }
        // A value may be described by either branch of a condition.
        for k in ["if", "then", "else"] {
            if let Some(branch) = schema.get(k) {
                self.applicable(branch, out, depth + 1);
            }
        }
    }

    /// The schemas of property `key` in `schema`: its `properties` entry and
    /// every `patternProperties` entry whose pattern matches, else
    /// `additionalProperties`. A pattern that does not compile (within a
    /// size limit) is taken to match: redacting too much is the safe side.
    fn property_schemas(schema: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
        let before = out.len();
        if let Some(s) = schema.get("properties").and_then(|p| p.get(key)) {
            out.push(s);
        }
        if let Some(patterns) = schema.get("patternProperties").and_then(Value::as_object) {
            for (pattern, s) in patterns {
                let matches = regex::RegexBuilder::new(pattern)
                    .size_limit(1 << 16)
                    .build()
                    .map_or(true, |re| re.is_match(key));
                if matches {
                    out.push(s);
                }
            }
        }
        if out.len() == before
            && let Some(s) = schema.get("additionalProperties").filter(|a| a.is_object())
        {
            out.push(s);
        }
    }

    fn value(&self, schema: &'a Value, v: &Value, depth: usize) -> Value {
        let mut schemas = Vec::new();
        self.applicable(schema, &mut schemas, 0);
        if schemas.iter().any(|s| is_secret(s)) || depth > MAX_DEPTH {
            return Value::String(REDACTED.to_owned());
        }
        match v {
            Value::Object(map) => {
                let mut out = Map::with_capacity(map.len());
                for (k, item) in map {
                    let mut subs: Vec<&Value> = Vec::new();
                    for s in &schemas {
                        Self::property_schemas(s, k, &mut subs);
                    }
                    out.insert(k.clone(), self.any_of(&subs, item, depth));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        // `prefixItems[i]` describes item i; `items` the
                        // rest (or all, without `prefixItems`).
                        let subs: Vec<&Value> = schemas
                            .iter()
                            .filter_map(|s| {
                                s.get("prefixItems")
                                    .and_then(Value::as_array)
                                    .and_then(|p| p.get(i))
                                    .or_else(|| s.get("items").filter(|i| i.is_object()))
                            })
                            .collect();
                        self.any_of(&subs, item, depth)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// A value several schemas describe: secret if any says so.
    fn any_of(&self, subs: &[&'a Value], v: &Value, depth: usize) -> Value {
        match subs {
            [] => v.clone(),
            [one] => self.value(one, v, depth + 1),
            many => {
                // Redact with each; a value any of them redacts stays redacted.
                let mut out = v.clone();
                for s in many {
                    out = merge_redactions(out, self.value(s, v, depth + 1));
                }
                out
            }
        }
    }
}

fn merge_redactions(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::String(s), _) | (_, Value::String(s)) if s == REDACTED => Value::String(s),
        (Value::Object(mut x), Value::Object(mut y)) => {
            for (k, v) in x.iter_mut() {
                if let Some(w) = y.remove(k) {
                    *v = merge_redactions(std::mem::take(v), w);
                }
            }
            Value::Object(x)
        }
        (Value::Array(x), Value::Array(y)) => Value::Array(
            x.into_iter()
                .zip(y)
                .map(|(a, b)| merge_redactions(a, b))
                .collect(),
        ),
        (a, _) => a,
    }
}

/// The time now, RFC 3339 in UTC with milliseconds.
pub fn now_rfc3339() -> String {
    humantime_serde::re::humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Milliseconds, for `duration_ms`.
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_under_pattern_properties_and_prefix_items_are_redacted() {
        let schema = json!({
            "type": "object",
            "properties": {
                "headers": {"type": "object", "patternProperties": {"^x-token": {"type": "string", "writeOnly": true}}},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string", "x-secret": true}]}
            }
        });
        let args =
            json!({"headers": {"x-token-a": "s1", "accept": "json"}, "pair": ["user", "s2"]});
        assert_eq!(
            redact(&schema, &args),
            json!({"headers": {"x-token-a": "[redacted]", "accept": "json"}, "pair": ["user", "[redacted]"]})
        );
    }

    #[test]
    fn secret_properties_are_redacted_at_any_depth() {
        let schema = json!({
            "type": "object",
            "properties": {
                "user": {"type": "string"},
                "password": {"type": "string", "writeOnly": true},
                "auth": {"$ref": "#/$defs/Auth"},
                "tokens": {"type": "array", "items": {"type": "string", "x-secret": true}},
                "maybe": {"anyOf": [{"type": "null"}, {"type": "string", "writeOnly": true}]},
                "headers": {"type": "object", "additionalProperties": {"type": "string", "writeOnly": true}}
            },
            "$defs": {"Auth": {"type": "object", "properties": {"key": {"type": "string", "x-secret": true}, "realm": {"type": "string"}}}}
        });
        let args = json!({
            "user": "ann",
            "password": "hunter2",
            "auth": {"key": "k-123", "realm": "r"},
            "tokens": ["a", "b"],
            "maybe": "s3cret",
            "headers": {"X-Key": "v"},
            "extra": "kept"
        });
        let out = redact(&schema, &args);
        assert_eq!(
            out,
            json!({
                "user": "ann",
                "password": REDACTED,
                "auth": {"key": REDACTED, "realm": "r"},
                "tokens": [REDACTED, REDACTED],
                "maybe": REDACTED,
                "headers": {"X-Key": REDACTED},
                "extra": "kept"
            })
        );
        let text = out.to_string();
        for secret in ["hunter2", "k-123", "s3cret"] {
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn a_line_is_one_json_object() {
        let e = AuditEntry {
            ts: now_rfc3339(),
            request_id: "r".into(),
            key: None,
            subject: None,
            tool_set: Some("s".into()),
            tool: "t".into(),
            call_id: "c".into(),
            arguments: None,
            arguments_sha256: Some(sha256_hex("{}")),
            outcome: "ok",
            duration_ms: 1.5,
            bytes: 3,
            cached: false,
            truncated: false,
        };
        let line = serde_json::to_string(&e).unwrap_or_default();
        assert!(!line.contains('\n'));
        assert!(line.contains("\"arguments_sha256\":\"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\""));
        assert!(!line.contains("\"cached\""));
        assert!(e.ts.ends_with('Z'));
    }

    #[test]
    fn recent_keeps_the_last_calls_newest_first_with_arguments_cut() {
        let entry = |tool: &str, args: Value| AuditEntry {
            ts: now_rfc3339(),
            request_id: "r".into(),
            key: Some("k".into()),
            subject: None,
            tool_set: None,
            tool: tool.into(),
            call_id: "c".into(),
            arguments: Some(args),
            arguments_sha256: None,
            outcome: "ok",
            duration_ms: 1.0,
            bytes: 0,
            cached: false,
            truncated: false,
        };
        let recent = Recent::new(3);
        for i in 0..5 {
            recent.push(entry(&format!("t{i}"), json!({"i": i})));
        }
        let tools: Vec<String> = recent
            .list(10, |_| true)
            .into_iter()
            .map(|e| e.tool)
            .collect();
        assert_eq!(tools, ["t4", "t3", "t2"]);
        assert_eq!(recent.list(1, |e| e.tool != "t4")[0].tool, "t3");
        assert_eq!(recent.tools(|_| true).len(), 3);
        recent.push(entry("big", json!({"text": "x".repeat(10_000)})));
        let big = &recent.list(1, |_| true)[0];
        let Some(Value::String(cut)) = &big.arguments else {
            panic!("{:?}", big.arguments)
        };
        assert_eq!(cut.chars().count(), RECENT_ARGUMENT_CHARS + 1);
        assert!(cut.ends_with('…'));
        let none = Recent::new(0);
        none.push(entry("t", json!({})));
        assert!(none.list(10, |_| true).is_empty());
    }
}
