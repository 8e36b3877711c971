//! Any message a client can make up, in either revision of MCP — 2025-11-25
//! in a session, 2026-07-28 stateless with its context in each request's
//! `_meta` — gets an answer in JSON-RPC's terms or a refusal: never a 5xx,
//! never a hang, and the gateway serves the next client as before. The
//! methods are MCP's (and made-up ones), the ids, params and `_meta` any
//! JSON, some bodies not JSON at all. `PROPTEST_CASES` sets how many
//! (`make fuzz` runs many).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate_tests::{ConfigDir, Served};

const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "server/discover",
    "subscriptions/listen",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "sampling/createMessage",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A field that is sometimes what MCP expects and sometimes anything.
fn field(expected: Value) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        12 => Just(Some(expected)),
        1 => json_value().prop_map(Some),
        1 => Just(None),
    ]
}

/// The 2026-07-28 request context, whole, partial or wrong.
fn meta() -> impl Strategy<Value = Option<Value>> {
    (
        field(json!("2026-07-28")),
        field(json!({"elicitation": {}, "roots": {}})),
        field(json!({"name": "fuzz", "version": "1"})),
        field(json!("debug")),
        field(json!("tok-1")),
    )
        .prop_map(|(version, caps, info, level, progress)| {
            let mut m = Map::new();
            let keys = [
                "io.modelcontextprotocol/protocolVersion",
                "io.modelcontextprotocol/clientCapabilities",
                "io.modelcontextprotocol/clientInfo",
                "io.modelcontextprotocol/logLevel",
                "progressToken",
            ];
            for (k, v) in keys.into_iter().zip([version, caps, info, level, progress]) {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Some(Value::Object(m))
        })
}

/// What a method's params hold when a client means them.
fn template(method: &str) -> Value {
    match method {
        "initialize" => json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"}}),
        "tools/call" => json!({"name": "calculator", "arguments": {"expression": "6*7"}}),
        "prompts/get" => json!({"name": "p", "arguments": {"a": "b"}}),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            json!({"uri": "file:///etc/passwd"})
        }
        "completion/complete" => json!({"ref": {"type": "ref/prompt", "name": "p"},
            "argument": {"name": "a", "value": "b"}}),
        "logging/setLevel" => json!({"level": "debug"}),
        "tasks/get" | "tasks/result" | "tasks/cancel" => json!({"taskId": "task-1"}),
        "tools/list" | "prompts/list" | "resources/list" | "tasks/list" => json!({"cursor": "c"}),
        "notifications/cancelled" => json!({"requestId": 1, "reason": "r"}),
        "notifications/progress" => json!({"progressToken": "t", "progress": 1}),
        "sampling/createMessage" => json!({"messages": [], "maxTokens": 1}),
        _ => json!({}),
    }
}

/// A method's params: its template with each field kept, changed to any
/// JSON or left out, the 2026-07-28 context in `_meta` (whole, partial or
/// wrong), now and then an extra field; or any JSON, or none.
fn params(method: &str) -> BoxedStrategy<Option<Value>> {
    let Value::Object(fields) = template(method) else {
        unreachable!("templates are objects")
    };
    let fields: Vec<_> = fields
        .into_iter()
        .map(|(k, v)| field(v).prop_map(move |v| (k.clone(), v)))
        .collect();
    let known = (
        fields,
        meta(),
        prop::option::weighted(0.1, (".{0,6}", json_value())),
    )
        .prop_map(|(fields, meta, extra)| {
            let mut p: Map<String, Value> = fields
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            if let Some(meta) = meta {
                p.insert("_meta".into(), meta);
            }
            if let Some((k, v)) = extra {
                p.insert(k, v);
            }
            Some(Value::Object(p))
        });
    prop_oneof![
        8 => known,
        1 => json_value().prop_map(Some),
        1 => Just(None),
    ]
    .boxed()
}

/// The headers a 2026-07-28 client sends beside a message: its method,
/// and the tool, prompt or resource it names.
fn routing_headers(message: &Value) -> Vec<(&'static str, String)> {
    let Some(method) = message["method"].as_str() else {
        return Vec::new();
    };
    let mut headers = vec![("mcp-method", method.to_owned())];
    let name = match method {
        "tools/call" | "prompts/get" => message["params"]["name"].as_str(),
        "resources/read" => message["params"]["uri"].as_str(),
        _ => None,
    };
    if let Some(name) = name {
        headers.push(("mcp-name", name.to_owned()));
    }
    headers
}

type Headers = Vec<(&'static str, String)>;

/// One message's body and the routing headers a client would send with
/// it (sometimes left out): a request or notification of any method, id
/// and params; now and then a batch, or bytes that are not JSON.
fn body() -> impl Strategy<Value = (Vec<u8>, Headers)> {
    let method = prop_oneof![
        8 => prop::sample::select(METHODS).prop_map(Value::from),
        1 => json_value(),
    ];
    let id = prop_oneof![
        6 => Just(Some(json!(7))),
        3 => any::<i64>().prop_map(|i| Some(json!(i))),
        3 => ".{0,8}".prop_map(|s| Some(json!(s))),
        1 => Just(Some(Value::Null)),
        1 => Just(Some(json!({"id": 1}))),
        2 => Just(None),
    ]
    .boxed();
    let message = method
        .prop_flat_map(|m| {
            let p = params(m.as_str().unwrap_or_default());
            (Just(m), p)
        })
        .prop_flat_map(move |(m, p)| {
            let no_id = prop::bool::weighted(0.8);
            (Just(m), id.clone(), Just(p), field(json!("2.0")), no_id)
        })
        .prop_map(|(m, mut id, p, v, no_id)| {
            // A notification has no id (most of the time).
            if no_id && m.as_str().is_some_and(|m| m.starts_with("notifications/")) {
                id = None;
            }
            let mut o = Map::new();
            if let Some(v) = v {
                o.insert("jsonrpc".into(), v);
            }
            o.insert("method".into(), m);
            if let Some(id) = id {
                o.insert("id".into(), id);
            }
            if let Some(p) = p {
                o.insert("params".into(), p);
            }
            Value::Object(o)
        })
        .boxed();
    prop_oneof![
        8 => (message.clone(), prop::bool::weighted(0.8)).prop_map(|(m, send)| {
            let headers = if send { routing_headers(&m) } else { Vec::new() };
            (m.to_string().into_bytes(), headers)
        }),
        1 => prop::collection::vec(message, 0..3)
            .prop_map(|b| (Value::from(b).to_string().into_bytes(), Vec::new())),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| (b, Vec::new())),
        1 => (1usize..20_000).prop_map(|depth| {
            (format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes(), Vec::new())
        }),
    ]
}

struct Client {
    http: reqwest::Client,
    url: String,
}

impl Client {
    async fn post(
        &self,
        revision: &str,
        session: Option<&str>,
        body: Vec<u8>,
        headers: &[(&str, String)],
    ) -> (u16, String, String) {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", revision)
            .body(body);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let r = req.send().await.expect("an answer, in time");
        let status = r.status().as_u16();
        let kind = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        (status, kind, r.text().await.expect("the whole answer"))
    }

    /// A 2025-11-25 session, opened the way every client opens one.
    async fn session(&self) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"}}});
        let r = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .unwrap();
        let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        r.text().await.unwrap();
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, _, _) = self
            .post("2025-11-25", Some(&id), done.to_string().into_bytes(), &[])
            .await;
        assert_eq!(status, 202);
        id
    }
}

#[test]
fn a_body_that_is_not_a_message_is_a_jsonrpc_error() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = calc_config();
    rt.block_on(async {
        let served = Served::start(dir.path(), &[]).await;
        let client = Client {
            http: reqwest::Client::new(),
            url: served.url("/mcp"),
        };
        for (body, code) in [
            (&b"{not json"[..], -32700),
            (&b"[[[[1"[..], -32700),
            (&br#"{"jsonrpc": "2.0", "id": 1}"#[..], -32600),
            (&br#"{"jsonrpc": "2.0", "method": 7, "id": 1}"#[..], -32600),
        ] {
            for revision in ["2025-11-25", "2026-07-28"] {
                let (status, kind, text) = client.post(revision, None, body.to_vec(), &[]).await;
                assert_eq!((status, kind.as_str()), (400, "application/json"), "{text}");
                let error: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(error["jsonrpc"], "2.0");
                assert_eq!(error["id"], Value::Null);
                assert_eq!(error["error"]["code"], code, "{error}");
            }
        }
    });
}

fn calc_config() -> ConfigDir {
    ConfigDir::new(&[
        (
            "toolgate.yaml",
            "upstreams:\n  - name: none\n    base_url: http://127.0.0.1:9/v1\nbuiltins:\n  enabled: [calculator]\ndefaults:\n  tool_set: calc\n",
        ),
        ("tool-sets/calc.yaml", "name: calc\ntools: [calculator]\n"),
    ])
}

/// The JSON-RPC messages of an answer: its JSON body, or its events' data.
fn messages(kind: &str, text: &str) -> Vec<Value> {
    if kind.starts_with("text/event-stream") {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{d}: {e}")))
            .collect()
    } else {
        vec![serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))]
    }
}

#[test]
fn any_mcp_message_in_either_revision_is_answered_or_refused() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = calc_config();
    let served = rt.block_on(Served::start(dir.path(), &[]));
    let client = Client {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap(),
        url: served.url("/mcp"),
    };
    let config = ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(96),
        ..ProptestConfig::default()
    };
    proptest!(config, |((body, headers) in body(), stateless in any::<bool>())| {
        rt.block_on(async {
            let (revision, session) = if stateless {
                ("2026-07-28", None)
            } else {
                ("2025-11-25", Some(client.session().await))
            };
            let headers = if stateless { headers } else { Vec::new() };
            let (status, kind, text) = client.post(revision, session.as_deref(), body.clone(), &headers).await;
            let sent = String::from_utf8_lossy(&body);
            assert!(status < 500, "{revision} {sent} → {status} {text}");
            if status >= 400 {
                // A refusal in JSON: the transport's in JSON-RPC's terms.
                assert!(kind.starts_with("application/json"), "{revision} {sent} → {status} {kind} {text}");
                let refusal: Value = serde_json::from_str(&text).unwrap();
                assert!(
                    refusal["error"].is_object(),
                    "{revision} {sent} → {status} {refusal}"
                );
            }
            if status == 200 {
                for m in messages(&kind, &text) {
                    assert_eq!(m["jsonrpc"], "2.0", "{revision} {sent} → {m}");
                    assert!(
                        m.get("result").is_some() || m.get("error").is_some() || m.get("method").is_some(),
                        "{revision} {sent} → {m}"
                    );
                }
            }
        });
    });
    // The gateway still serves a client as before.
    rt.block_on(async {
        let session = client.session().await;
        let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "calculator", "arguments": {"expression": "6*7"}}});
        let (status, kind, text) = client
            .post(
                "2025-11-25",
                Some(&session),
                call.to_string().into_bytes(),
                &[],
            )
            .await;
        assert_eq!(status, 200, "{text}");
        let answer = messages(&kind, &text).pop().unwrap();
        assert!(answer["result"].to_string().contains("42"), "{answer}");
    });
}
