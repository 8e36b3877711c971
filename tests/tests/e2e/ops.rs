//! Running the gateway for real, in process: hot reload, API keys and tool
//! sets, rate limits, the audit log, limits and metrics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{Backend, ConfigDir, Served, write_atomically};

use crate::mcp_support;

const UPSTREAM_KEY: &str = "upstream-secret-key-42";
const ENV: &[(&str, &str)] = &[
    ("UPSTREAM_KEY", UPSTREAM_KEY),
    ("BOB_KEY", "bob-key-from-the-environment"),
];

fn gateway_yaml(model: &MockLlm, extra: &str) -> String {
    format!(
        "upstreams:
  - name: mock
    base_url: {}
    api_key_env: UPSTREAM_KEY
    read_timeout: 10s
    retries: {{ max_attempts: 1 }}
reload: {{ debounce: 100ms }}
{extra}",
        model.base_url()
    )
}

struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    fn new(s: &Served) -> Client {
        Client {
            base: s.url(""),
            http: reqwest::Client::new(),
        }
    }

    fn with(&self, rb: reqwest::RequestBuilder, key: Option<&str>) -> reqwest::RequestBuilder {
        match key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    async fn get(&self, key: Option<&str>, path: &str) -> (u16, HeaderMap, Value) {
        let r = self
            .with(self.http.get(format!("{}{path}", self.base)), key)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap();
        (
            status,
            headers,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn invoke(&self, key: Option<&str>, tool: &str, args: Value) -> (u16, HeaderMap, Value) {
        let r = self
            .with(
                self.http
                    .post(format!("{}/v1/tools/{tool}/invoke", self.base))
                    .json(&json!({ "arguments": args })),
                key,
            )
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        (status, headers, r.json().await.unwrap())
    }

    async fn chat(&self, key: Option<&str>, body: Value) -> (u16, Value) {
        let r = self
            .with(
                self.http
                    .post(format!("{}/v1/chat/completions", self.base))
                    .json(&body),
                key,
            )
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    /// A streaming chat: the status and the streamed content, or why the
    /// stream is not a complete answer.
    async fn chat_stream(&self, key: Option<&str>, body: Value) -> (u16, Result<String, String>) {
        let r = self
            .with(
                self.http
                    .post(format!("{}/v1/chat/completions", self.base))
                    .json(&body),
                key,
            )
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, stream_content(&text))
    }
}

fn stream_content(text: &str) -> Result<String, String> {
    let mut content = String::new();
    let mut done = false;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))?;
        if let Some(e) = v.get("error") {
            return Err(e.to_string());
        }
        if let Some(c) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            content.push_str(c);
        }
    }
    if done {
        Ok(content)
    } else {
        Err(format!("the stream did not end with [DONE]: {text}"))
    }
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test]
async fn a_valid_change_makes_a_new_tool_callable_without_restart() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml(&model, "")),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
        ("tool-sets/default.yaml", "name: default\ntools: [lookup]\n"),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    let c = Client::new(&s);
    let h = s.health().await;
    assert_eq!(h["catalog"]["version"], 1, "{h}");
    let (status, _, body) = c.invoke(None, "fresh", json!({"q": "x"})).await;
    assert_eq!(status, 404, "{body}");

    write_atomically(
        dir.path(),
        "tools.d/b.yaml",
        &toolgate_tests::lookup_tool(&backend, "fresh", "Freshly added."),
    );
    write_atomically(
        dir.path(),
        "tool-sets/default.yaml",
        "name: default\ntools: [lookup, fresh]\n",
    );
    let h = s.reloaded(2).await;
    assert_eq!(h["catalog"]["last_reload"]["outcome"], "applied", "{h}");
    assert_eq!(h["catalog"]["last_reload"]["trigger"], "watch", "{h}");

    let (status, _, body) = c.invoke(None, "fresh", json!({"q": "new"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"], "new");
    // The chat loop offers and runs it too.
    let (status, body) = c
        .chat(
            None,
            json!({"model": "m", "messages": user("call fresh {\"q\": \"via chat\"}")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [fresh] via chat"
    );
    let requests = model.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["lookup", "fresh"]);

    // The reload is counted in the metrics.
    let (status, _, metrics) = c.get(None, "/metrics").await;
    assert_eq!(status, 200);
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(
        metrics.contains("toolgate_config_reloads_total{outcome=\"applied\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("toolgate_tool_calls_total{outcome=\"ok\",tool=\"fresh\"} 2"));
    assert!(metrics.contains(
        "toolgate_upstream_request_duration_seconds_count{outcome=\"ok\",upstream=\"mock\"}"
    ));
    assert!(metrics.contains("toolgate_tool_loop_iterations_count"));
    assert!(metrics.contains(
        "toolgate_http_requests_total{method=\"POST\",route=\"/v1/tools/{name}/invoke\",status=\"200\"}"
    ));
}

#[tokio::test]
async fn a_broken_change_keeps_the_old_catalog_serving() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml(&model, "")),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    let c = Client::new(&s);

    // An invalid tool name and a second broken file.
    write_atomically(
        dir.path(),
        "tools.d/a.yaml",
        &toolgate_tests::lookup_tool(&backend, "look up", "Look up."),
    );
    write_atomically(dir.path(), "tools.d/b.yaml", "tools: [oops\n");
    let h = s.reload_failed().await;
    assert_eq!(h["catalog"]["version"], 1, "{h}");
    assert_eq!(h["catalog"]["last_reload"]["errors"], 2, "{h}");
    let (status, _, body) = c.invoke(None, "lookup", json!({"q": "still"})).await;
    assert_eq!(status, 200, "the old tool keeps working: {body}");
    assert_eq!(body["data"], "still");

    // Fixed: the next reload applies.
    std::fs::remove_file(dir.path().join("tools.d/b.yaml")).unwrap();
    write_atomically(
        dir.path(),
        "tools.d/a.yaml",
        &toolgate_tests::lookup_tool(&backend, "lookup2", "Renamed."),
    );
    s.reloaded(2).await;
    let (status, _, _) = c.invoke(None, "lookup2", json!({"q": "x"})).await;
    assert_eq!(status, 200);
    let (status, _, _) = c.invoke(None, "lookup", json!({"q": "x"})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn reloads_during_a_stream_of_requests_fail_no_request() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml(&model, "")),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
        ("tool-sets/default.yaml", "name: default\ntools: [lookup]\n"),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..4 {
        let c = Client::new(&s);
        let stop = Arc::clone(&stop);
        let done = Arc::clone(&done);
        clients.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let q = format!("c{i}-{n}");
                // A streamed tool loop whose model calls take a while, so
                // reloads happen while it runs.
                let (status, content) = c
                    .chat_stream(
                        None,
                        json!({"model": "m", "stream": true, "messages": user(&format!("call lookup {{\"q\": \"{q}\"}} [[mock:latency=60]]"))}),
                    )
                    .await;
                match content {
                    Ok(text) if status == 200 && text == format!("Tool results: [lookup] {q}") => {}
                    other => failures.push(format!("stream {status}: {other:?}")),
                }
                let (status, _, body) = c.invoke(None, "lookup", json!({"q": q})).await;
                if status != 200 || body["data"] != json!(q) {
                    failures.push(format!("invoke {status}: {body}"));
                }
                done.fetch_add(2, Ordering::SeqCst);
            }
            failures
        }));
    }
    for round in 0..5u64 {
        // Wait for some traffic on this catalog, then change it.
        let before = done.load(Ordering::SeqCst);
        while done.load(Ordering::SeqCst) < before + 4 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        write_atomically(
            dir.path(),
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", &format!("Look up, version {round}.")),
        );
        write_atomically(
            dir.path(),
            &format!("tools.d/extra{round}.yaml"),
            &toolgate_tests::lookup_tool(&backend, &format!("extra{round}"), "More."),
        );
        s.reloaded(2 + round).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.unwrap());
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(done.load(Ordering::SeqCst) >= 20);
    let h = s.health().await;
    assert_eq!(h["catalog"]["version"], 6, "{h}");
    assert_eq!(h["tools"], 6);
}

const ALICE: &str = "alice-key-0123456789";
const CAROL: &str = "carol-key-0123456789";
const DAVE: &str = "dave-key-01234567890";

fn keys_yaml() -> String {
    format!(
        "auth:
  keys:
    - name: alice
      sha256: {}
      tool_sets: [web]
    - name: bob
      key_env: BOB_KEY
    - name: carol
      sha256: {}
      tool_sets: [web]
      limits: {{ requests_per_minute: 3, tool_calls_per_minute: 1 }}
    - name: dave
      sha256: {}
      tool_sets: [web, admin]
      default_tool_set: admin
      limits: {{ tool_calls_per_minute: 1 }}
defaults:
  tool_set: web
",
        toolgate_engine::identity::auth::digest_hex(ALICE),
        toolgate_engine::identity::auth::digest_hex(CAROL),
        toolgate_engine::identity::auth::digest_hex(DAVE),
    )
}

async fn keyed_setup() -> (Backend, MockLlm, ConfigDir, Served) {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let tools = format!(
        "{}{}",
        toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        toolgate_tests::lookup_tool(&backend, "secret_tool", "Admins only.")
            .trim_start_matches("tools:\n")
    );
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml(&model, &keys_yaml())),
        ("tools.d/a.yaml", &tools),
        ("tool-sets/web.yaml", "name: web\ntools: [lookup]\n"),
        (
            "tool-sets/admin.yaml",
            "name: admin\ntools: [secret_tool]\n",
        ),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    (backend, model, dir, s)
}

fn names(listing: &Value, field: &str) -> Vec<String> {
    listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.pointer(field).and_then(Value::as_str).unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn api_keys_authenticate_and_scope_tool_sets() {
    let (backend, model, _dir, s) = keyed_setup().await;
    let c = Client::new(&s);

    // No key, or an unknown one: 401, everywhere but /healthz.
    for path in ["/v1/tools", "/v1/tool-sets", "/v1/models", "/metrics"] {
        let (status, headers, body) = c.get(None, path).await;
        assert_eq!(status, 401, "{path}: {body}");
        assert_eq!(body["error"]["code"], "missing_api_key");
        assert_eq!(headers["www-authenticate"], "Bearer");
    }
    let (status, _, body) = c.get(Some("not-a-key"), "/v1/tools").await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(body["error"]["type"], "authentication_error");
    let (status, _) = c
        .chat(None, json!({"model": "m", "messages": user("hi")}))
        .await;
    assert_eq!(status, 401);
    let (status, _, _) = c.get(None, "/healthz").await;
    assert_eq!(status, 200);
    // Anthropic's clients send the key as `x-api-key`; errors on
    // /v1/messages come in Anthropic's form.
    let messages = |key: &str| {
        reqwest::Client::new()
            .post(s.url("/v1/messages"))
            .header("x-api-key", key)
            .json(&json!({"model": "m", "max_tokens": 10, "tool_set": "admin", "messages": user("hi")}))
            .send()
    };
    let r = messages("not-a-key").await.unwrap();
    assert_eq!(r.status(), 401);
    let r = messages(ALICE).await.unwrap();
    assert_eq!(r.status(), 403, "the key is accepted, the set is not hers");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "permission_error");

    // alice may use `web` only: listings show only it.
    let (status, _, sets) = c.get(Some(ALICE), "/v1/tool-sets").await;
    assert_eq!(status, 200);
    assert_eq!(names(&sets, "/name"), ["web"]);
    assert_eq!(sets["data"][0]["default"], true);
    let (_, _, tools) = c.get(Some(ALICE), "/v1/tools").await;
    assert_eq!(names(&tools, "/function/name"), ["lookup"]);
    let (status, _, body) = c.get(Some(ALICE), "/v1/tools?tool_set=admin").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "tool_set_not_allowed");
    assert_eq!(body["error"]["type"], "permission_error");
    let (status, _, body) = c
        .invoke(Some(ALICE), "secret_tool", json!({"q": "x"}))
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, _, body) = c.invoke(Some(ALICE), "lookup", json!({"q": "x"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = c
        .chat(
            Some(ALICE),
            json!({"model": "m", "tool_set": "admin", "messages": user("hi")}),
        )
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("alice"));
    // Her default set (the gateway's, which she may use) runs the loop; the
    // request id travels to the model and to the tool.
    let r = reqwest::Client::new()
        .post(s.url("/v1/chat/completions"))
        .bearer_auth(ALICE)
        .header("x-request-id", "req-alice-1")
        .json(&json!({"model": "m", "messages": user("call lookup {\"q\": \"a\"}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-request-id"], "req-alice-1");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["toolgate"]["tool_set"], "web");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [lookup] a"
    );

    // The client's key never reaches the upstream, which gets the gateway's
    // own; neither reaches the HTTP tool.
    let upstream: Vec<HashMap<String, String>> = model.request_headers();
    assert!(!upstream.is_empty());
    for h in &upstream {
        assert_eq!(h["authorization"], format!("Bearer {UPSTREAM_KEY}"));
    }
    assert_eq!(upstream.last().unwrap()["x-request-id"], "req-alice-1");
    let tool_request = backend.requests().pop().unwrap();
    assert_eq!(tool_request.headers["x-request-id"], "req-alice-1");
    assert!(!tool_request.headers.contains_key("authorization"));
    // ... and the upstream's key is never shown to clients.
    for path in ["/v1/tools", "/v1/models", "/v1/tool-sets", "/healthz"] {
        let (_, _, body) = c.get(Some(ALICE), path).await;
        assert!(!body.to_string().contains(UPSTREAM_KEY), "{path}");
    }

    // bob's key comes from the environment and may use every set.
    let bob = "bob-key-from-the-environment";
    let (_, _, sets) = c.get(Some(bob), "/v1/tool-sets").await;
    assert_eq!(names(&sets, "/name"), ["admin", "web"]);
    let (status, body) = c
        .chat(
            Some(bob),
            json!({"model": "m", "tool_set": "admin", "messages": user("call secret_tool {\"q\": \"s\"}")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [secret_tool] s"
    );
    // dave's own default set is `admin`.
    let (_, _, sets) = c.get(Some(DAVE), "/v1/tool-sets").await;
    let default: Vec<&Value> = sets["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["default"] == true)
        .collect();
    assert_eq!(default[0]["name"], "admin");
    let (status, _, metrics) = c.get(Some(bob), "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("toolgate_rejected_requests_total{reason=\"unauthorized\"}")
    );
}

#[tokio::test]
async fn keys_reload_with_the_configuration() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml(&model, "")),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    let c = Client::new(&s);
    let (status, _, _) = c.get(None, "/v1/tools").await;
    assert_eq!(status, 200, "no keys: the API is open");
    write_atomically(
        dir.path(),
        "toolgate.yaml",
        &gateway_yaml(
            &model,
            &format!(
                "auth:\n  keys:\n    - name: alice\n      sha256: {}\n",
                toolgate_engine::identity::auth::digest_hex(ALICE)
            ),
        ),
    );
    s.reloaded(2).await;
    let (status, _, _) = c.get(None, "/v1/tools").await;
    assert_eq!(status, 401);
    let (status, _, _) = c.get(Some(ALICE), "/v1/tools").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after() {
    let (_backend, _model, _dir, s) = keyed_setup().await;
    let c = Client::new(&s);
    // carol: 3 requests and 1 tool call per minute.
    let (status, _, body) = c.invoke(Some(CAROL), "lookup", json!({"q": "1"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, headers, body) = c.invoke(Some(CAROL), "lookup", json!({"q": "2"})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let (status, _, _) = c.get(Some(CAROL), "/v1/tools").await;
    assert_eq!(status, 200);
    // The fourth request of the minute.
    let (status, headers, body) = c.get(Some(CAROL), "/v1/tools").await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Other keys are not affected.
    let (status, _, _) = c.get(Some(ALICE), "/v1/tools").await;
    assert_eq!(status, 200);

    // In a tool loop, a call over the limit is an error the model reads.
    let (status, body) = c
        .chat(
            Some(DAVE),
            json!({"model": "m", "tool_set": "web", "messages": user("call lookup {\"q\": \"a\"} call lookup {\"q\": \"b\"}")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let calls = body["toolgate"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["success"], true);
    assert_eq!(calls[1]["success"], false);
    assert_eq!(calls[1]["error"]["code"], "rate_limited");
}

#[tokio::test]
async fn the_audit_log_has_a_line_per_call_with_secrets_redacted() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let tools = toolgate_tests::fill(
        r#"tools:
  - name: login
    description: Log in.
    parameters:
      type: object
      properties:
        user: { type: string }
        password: { type: string, writeOnly: true }
      required: [user, password]
    http:
      url: "${BACKEND}/echo/login"
      query: { user: "{{ args.user }}" }
      headers: { X-Password: "{{ args.password }}" }
    response:
      select: /params/user
  - name: broken
    description: Always fails.
    parameters:
      type: object
      properties:
        token: { type: string, x-secret: true }
    http:
      url: "${BACKEND}/status/500"
      headers: { X-Token: "{{ args.token }}" }
  - name: slow
    description: Too slow.
    parameters:
      type: object
      properties:
        pin: { type: string, writeOnly: true }
        ms: { type: integer }
    http:
      url: "${BACKEND}/sleep"
      query: { ms: "{{ args.ms }}", pin: "{{ args.pin }}" }
      timeout: 200ms
"#,
        &[("BACKEND", &backend.url())],
    );
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            &gateway_yaml(&model, "audit: { path: audit.jsonl }\n"),
        ),
        ("tools.d/a.yaml", &tools),
        ("tool-sets/web.yaml", "name: web\ntools: [login]\n"),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    let c = Client::new(&s);
    let (status, ok_headers, _) = c
        .invoke(
            None,
            "login",
            json!({"user": "ann", "password": "hunter2-secret"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _, _) = c
        .invoke(None, "broken", json!({"token": "tok-secret-99"}))
        .await;
    assert_eq!(status, 502);
    let (status, _, _) = c
        .invoke(None, "slow", json!({"pin": "pin-secret-1234", "ms": 3000}))
        .await;
    assert_eq!(status, 504);
    let (status, body) = c
        .chat(
            None,
            json!({"model": "m", "tool_set": "web", "messages": user("call login {\"user\": \"bo\", \"password\": \"chat-secret-77\"}")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    // Graceful shutdown flushes the log.
    s.running.shutdown();
    tokio::time::timeout(Duration::from_secs(60), s.running.wait())
        .await
        .expect("the gateway stops")
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    for secret in [
        "hunter2-secret",
        "tok-secret-99",
        "pin-secret-1234",
        "chat-secret-77",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    let by_tool = |t: &str| -> Vec<&Value> { lines.iter().filter(|l| l["tool"] == t).collect() };

    let login = by_tool("login");
    assert_eq!(login.len(), 2);
    let direct = login[0];
    assert_eq!(direct["outcome"], "ok");
    assert_eq!(
        direct["arguments"],
        json!({"user": "ann", "password": "[redacted]"})
    );
    assert_eq!(
        direct["request_id"],
        ok_headers["x-request-id"].to_str().unwrap()
    );
    assert_eq!(direct["key"], Value::Null);
    assert_eq!(direct["bytes"], 3);
    assert!(direct["duration_ms"].as_f64().unwrap() > 0.0);
    assert!(direct["ts"].as_str().unwrap().ends_with('Z'));
    let in_loop = login[1];
    assert_eq!(in_loop["tool_set"], "web");
    assert_eq!(in_loop["call_id"], "call_1_0");
    assert_eq!(
        in_loop["arguments"],
        json!({"user": "bo", "password": "[redacted]"})
    );

    let broken = by_tool("broken")[0];
    assert_eq!(broken["outcome"], "backend_error");
    assert_eq!(broken["arguments"], json!({"token": "[redacted]"}));
    let slow = by_tool("slow")[0];
    assert_eq!(slow["outcome"], "timeout");
    assert_eq!(slow["arguments"], json!({"pin": "[redacted]", "ms": 3000}));
}

#[tokio::test]
async fn limits_are_answered_with_clear_errors() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let limits = "limits:
  max_request_bytes: 4096
  max_messages: 3
  max_tool_argument_bytes: 64
  max_concurrent_loops: 1
  max_concurrent_streams: 1
";
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml(&model, limits)),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
        ("tool-sets/default.yaml", "name: default\ntools: [lookup]\n"),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    let c = Client::new(&s);

    let four = json!([
        {"role": "user", "content": "1"}, {"role": "assistant", "content": "2"},
        {"role": "user", "content": "3"}, {"role": "user", "content": "4"}
    ]);
    let (status, body) = c.chat(None, json!({"model": "m", "messages": four})).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "too_many_messages");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_messages")
    );

    let (status, _, body) = c
        .invoke(None, "lookup", json!({"q": "x".repeat(100)}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_tool_argument_bytes")
    );

    let (status, body) = c
        .chat(
            None,
            json!({"model": "m", "messages": user(&"y".repeat(5000))}),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "request_too_large");

    // One stream (and one loop) at a time.
    let first = {
        let c = Client::new(&s);
        tokio::spawn(async move {
            c.chat_stream(
                None,
                json!({"model": "m", "stream": true, "messages": user("call lookup {\"q\": \"z\"} [[mock:latency=500]]")}),
            )
            .await
        })
    };
    let guards = &s.running.state().guards;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while guards.streams.current() == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = reqwest::Client::new()
        .post(s.url("/v1/chat/completions"))
        .json(&json!({"model": "m", "stream": true, "tool_set": "none", "messages": user("hi")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams");
    let (status, body) = c
        .chat(
            None,
            json!({"model": "m", "messages": user("call lookup {\"q\": \"w\"}")}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "too_many_loops");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_concurrent_loops")
    );
    let (status, content) = first.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(content.unwrap(), "Tool results: [lookup] z");
    // Both places are free again once the stream's response is dropped.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while guards.streams.current() + guards.loops.current() > 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, body) = c
        .chat(
            None,
            json!({"model": "m", "messages": user("call lookup {\"q\": \"w\"}")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn mcp_sessions_survive_reloads_that_do_not_change_their_server() {
    let server = match mcp_support::python_stdio_yaml("py", "py_", "") {
        Some(s) => s,
        None => {
            toolgate_tests::missing("the MCP test server is not installed; run `make setup`");
            return;
        }
    };
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml(&model, "")),
        ("tools.d/mcp.yaml", &format!("mcp_servers:\n{server}")),
        (
            "tools.d/http.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
    ]);
    let s = Served::start(dir.path(), ENV).await;
    let c = Client::new(&s);
    async fn pid(c: &Client) -> String {
        let (status, _, body) = c.invoke(None, "py_pid", json!({})).await;
        assert_eq!(status, 200, "{body}");
        body["data"].as_str().unwrap().trim().to_owned()
    }
    let first = pid(&c).await;

    // Another file changes: the server keeps its session.
    write_atomically(
        dir.path(),
        "tools.d/http.yaml",
        &toolgate_tests::lookup_tool(&backend, "lookup", "Look up, now better."),
    );
    s.reloaded(2).await;
    assert_eq!(pid(&c).await, first, "the MCP session was kept");

    // Its own declaration changes: a new session, and the old one stops.
    let changed = mcp_support::python_stdio_yaml("py", "py_", "    timeout: 20s\n").unwrap();
    write_atomically(
        dir.path(),
        "tools.d/mcp.yaml",
        &format!("mcp_servers:\n{changed}"),
    );
    s.reloaded(3).await;
    let second = pid(&c).await;
    assert_ne!(second, first, "a changed declaration restarts the server");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{first}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting to be reaped.
        if state.is_empty() || state.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the old MCP server process {first} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn one_key_cannot_take_every_place_by_default() {
    let model = MockLlm::start().await;
    let yaml = format!(
        "upstreams:
  - name: mock
    base_url: {}
limits:
  max_concurrent_streams: 4
auth:
  keys:
    - name: a
      key_env: A_KEY
    - name: b
      key_env: B_KEY
",
        model.base_url()
    );
    let dir = ConfigDir::new(&[("toolgate.yaml", yaml.as_str())]);
    let s = Served::start(
        dir.path(),
        &[("A_KEY", "a-key-0123456789"), ("B_KEY", "b-key-0123456789")],
    )
    .await;
    let stream = |key: &'static str, text: &str| {
        reqwest::Client::new()
            .post(s.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(
                &json!({"model": "m", "stream": true, "tool_set": "none", "messages": user(text)}),
            )
            .send()
    };
    // Key a holds half the places (the default share), with slow answers.
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(stream("a-key-0123456789", "wait [[mock:latency=3000]]")))
        .collect();
    let guards = &s.running.state().guards;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while guards.streams.current() < 2 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A third of its own is refused while places are free...
    let r = stream("a-key-0123456789", "one more").await.unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "key_concurrency_limit", "{body}");
    // ...and another key still gets one.
    let r = stream("b-key-0123456789", "hello").await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("[DONE]"));
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), 200);
    }
}

#[tokio::test]
async fn a_stored_response_is_its_key_s_alone() {
    let model = MockLlm::start().await;
    let yaml = format!(
        "upstreams:
  - name: mock
    base_url: {}
auth:
  keys:
    - name: a
      key_env: A_KEY
    - name: b
      key_env: B_KEY
",
        model.base_url()
    );
    let dir = ConfigDir::new(&[("toolgate.yaml", yaml.as_str())]);
    let s = Served::start(
        dir.path(),
        &[("A_KEY", "a-key-0123456789"), ("B_KEY", "b-key-0123456789")],
    )
    .await;
    let http = reqwest::Client::new();
    let created: Value = http
        .post(s.url("/v1/responses"))
        .bearer_auth("a-key-0123456789")
        .json(&json!({"model": "m", "input": "a secret of a", "tool_set": "none"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap();
    let get = |key: &'static str, path: String| http.get(s.url(&path)).bearer_auth(key).send();
    assert_eq!(
        get("a-key-0123456789", format!("/v1/responses/{id}"))
            .await
            .unwrap()
            .status(),
        200
    );
    for path in [
        format!("/v1/responses/{id}"),
        format!("/v1/responses/{id}/input_items"),
    ] {
        assert_eq!(get("b-key-0123456789", path).await.unwrap().status(), 404);
    }
    let r = http
        .post(s.url("/v1/responses"))
        .bearer_auth("b-key-0123456789")
        .json(&json!({"model": "m", "input": "go on", "previous_response_id": id, "tool_set": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .delete(s.url(&format!("/v1/responses/{id}")))
        .bearer_auth("b-key-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        get("a-key-0123456789", format!("/v1/responses/{id}"))
            .await
            .unwrap()
            .status(),
        200
    );
}
