//! The attack suite: one test per class of attack SECURITY.md names, each
//! made the way a hostile client, model, backend or piece of code would
//! make it. Crash-class inputs go to a real `toolgate serve` process, which
//! must answer `/healthz` after each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::context::CallContext;
use toolgate_engine::executor::{Executor, ToolCall, http_client};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{Backend, ConfigDir, Served, Server, load_catalog, processes_with, user};

/// A gateway configuration for attacks: the hostile scripted model as the
/// upstream (a small answer cap and deadline), every builtin that reads
/// untrusted text or runs code, one set `all` holding them, and `extra`
/// appended to toolgate.yaml.
fn attack_config(ws: &Path, model: &MockLlm, extra: &str) -> ConfigDir {
    let yaml = format!(
        "upstreams:
  - name: hostile
    base_url: {}
    api_key_env: UPSTREAM_KEY
    timeout: 3s
    retries: {{ max_attempts: 1 }}
models:
  - model: '*'
    upstream: hostile
    formatter: function_calling
limits:
  max_upstream_response_bytes: 1048576
  header_timeout: 1s
  body_timeout: 1s
defaults:
  tool_set: all
builtins:
  workspace: {}
  enabled: [calculator, text_process, json_process, file_read, file_write, file_edit, file_list, exec, execute_python, spawn]
  python: {{ strictness: lenient }}
{extra}",
        model.base_url(),
        ws.display()
    );
    ConfigDir::new(&[
        ("toolgate.yaml", &yaml),
        (
            "tool-sets/all.yaml",
            "name: all\ntools: [calculator, text_process, json_process, 'file_*', exec, execute_python, spawn]\n",
        ),
    ])
}

const UPSTREAM_KEY: &str = "upstream-secret-9f8e7d6c5b4a";

async fn invoke(base: &str, key: Option<&str>, tool: &str, args: Value) -> (u16, Value) {
    invoke_in(base, key, None, tool, args).await
}

async fn invoke_in(
    base: &str,
    key: Option<&str>,
    project: Option<&str>,
    tool: &str,
    args: Value,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/v1/tools/{tool}/invoke"))
        .json(&json!({ "arguments": args }));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(p) = project {
        req = req.header("x-toolgate-project", p);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// One `tools/call` through the MCP face (`/mcp`, the key's default set),
/// in a session of its own: the status and the answer's text.
async fn mcp_call(
    base: &str,
    key: &str,
    project: Option<&str>,
    tool: &str,
    args: Value,
) -> (u16, String) {
    let post = |session: Option<&str>, body: Value| {
        let mut req = reqwest::Client::new()
            .post(format!("{base}/mcp"))
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        if let Some(id) = session {
            req = req.header("mcp-session-id", id);
        }
        if let Some(p) = project {
            req = req.header("x-toolgate-project", p);
        }
        req.send()
    };
    let r = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
    )
    .await
    .unwrap();
    let Some(session) = r.headers().get("mcp-session-id") else {
        let status = r.status().as_u16();
        return (status, r.text().await.unwrap());
    };
    let session = session.to_str().unwrap().to_owned();
    r.text().await.unwrap();
    post(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await
    .unwrap();
    let r = post(
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}),
    )
    .await
    .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn chat(base: &str, key: Option<&str>, body: Value) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .timeout(Duration::from_secs(60))
        .json(&body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

async fn assert_healthy(base: &str, after: &str) {
    let r = reqwest::Client::new()
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("/healthz failed after {after}: {e}"));
    assert_eq!(r.status(), 200, "/healthz after {after}");
}

/// The message of an error result from the invoke API.
fn error_of(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------
// 1, 2, 4: inputs that crashed the process (deep recursion, amplification,
// a hostile model) go to a real `toolgate serve`; it answers `/healthz`
// after each.

#[tokio::test]
async fn crash_class_inputs_leave_the_gateway_serving() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let server = Server::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let base = server.url("");

    // 1. Recursion: a JSONPath of 1,500 nested parentheses (3,000 is
    // refused for its length alone), a document nested 100,000 deep, an
    // expression nested 50,000 deep.
    let path = format!("$[?{}@.a{}]", "(".repeat(1500), ")".repeat(1500));
    let (status, v) = invoke(
        &base,
        None,
        "json_process",
        json!({"input": "[{\"a\": 1}]", "operation": "select", "path": path}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert!(error_of(&v).contains("nests"), "{v}");
    assert_healthy(&base, "a deep JSONPath").await;
    let negations = format!("$[?{}@.a]", "!".repeat(2000));
    let (status, v) = invoke(
        &base,
        None,
        "json_process",
        json!({"input": "[]", "operation": "select", "path": negations}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_healthy(&base, "a JSONPath of 3,000 negations").await;
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let (status, v) = invoke(
        &base,
        None,
        "json_process",
        json!({"input": deep, "operation": "pretty"}),
    )
    .await;
    assert!(status >= 400 && status != 500, "{status} {v}");
    assert_healthy(&base, "a document nested 100,000 deep").await;
    let expr = format!("{}1{}", "(".repeat(50_000), ")".repeat(50_000));
    let (status, v) = invoke(&base, None, "calculator", json!({ "expression": expr })).await;
    assert!(status >= 400 && status != 500, "{status} {v}");
    assert_healthy(&base, "a deep expression").await;

    // 2. Amplification: refused before the output exists.
    let (status, v) = invoke(
        &base,
        None,
        "text_process",
        json!({"text": "a".repeat(120_000), "operation": "replace", "pattern": "a", "replacement": "b".repeat(120_000)}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert!(error_of(&v).contains("would be"), "{v}");
    assert_healthy(&base, "text_process replace amplification").await;
    let (status, v) = invoke(
        &base,
        None,
        "text_process",
        json!({"text": "a".repeat(100_000), "operation": "regex_replace", "pattern": "a+", "replacement": "$0".repeat(20_000)}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_healthy(&base, "regex_replace amplification").await;
    let nested = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let doc = format!("[{}]", vec![nested; 1_200].join(","));
    let (status, v) = invoke(
        &base,
        None,
        "json_process",
        json!({"input": doc, "operation": "pretty"}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_healthy(&base, "pretty-printing amplification").await;
    let wide = format!(
        "[{}]",
        vec!["\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\""; 5_000].join(",")
    );
    let selectors = format!("$[{}]", vec!["*"; 200].join(","));
    let (status, v) = invoke(
        &base,
        None,
        "json_process",
        json!({"input": wide, "operation": "select", "path": selectors}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_healthy(&base, "JSONPath selection amplification").await;

    // 4. A hostile model: a streamed call index of 1,000,000,000, a turn of
    // 500 calls, answers over the byte cap, answers that trickle.
    let ask =
        |text: &str, stream: bool| json!({"model": "m", "stream": stream, "messages": user(text)});
    let (status, body) = chat(&base, None, ask("[[mock:huge-index]]", true)).await;
    assert_eq!(status, 200);
    assert!(body.contains("index 1000000000"), "{body}");
    assert_healthy(&base, "a huge streamed tool-call index").await;
    let (status, body) = chat(&base, None, ask("[[mock:many-calls=500]]", false)).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("max_tool_calls_per_turn"), "{body}");
    for stream in [false, true] {
        let (status, body) = chat(&base, None, ask("[[mock:huge=50000000]]", stream)).await;
        if stream {
            assert!(
                body.contains("upstream_response_too_large") || body.contains("more than 1048576"),
                "{body}"
            );
        } else {
            assert_eq!(status, 502, "{body}");
            assert!(body.contains("max_upstream_response_bytes"), "{body}");
        }
        assert_healthy(&base, "a 50 MB answer").await;
        let (status, body) = chat(&base, None, ask("[[mock:trickle=200]]", stream)).await;
        if stream {
            assert!(body.contains("did not answer in time"), "{status} {body}");
        } else {
            assert_eq!(status, 504, "{body}");
        }
        assert_healthy(&base, "a trickling answer").await;
    }
    // The transparent proxy (no tool set) is cut at the deadline too: the
    // gateway ends the body (3 s), long before the client would give up.
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .timeout(Duration::from_secs(30))
        .json(&json!({"model": "m", "tool_set": "none", "messages": user("[[mock:trickle=200]]")}))
        .send()
        .await
        .unwrap();
    match r.text().await {
        Ok(body) => assert!(body.len() < 100, "{body}"),
        Err(e) => assert!(!e.is_timeout(), "the proxied trickle was never cut: {e}"),
    }
    assert_healthy(&base, "a trickling proxied answer").await;
}

// ---------------------------------------------------------------------------
// 3. Code run by tools cannot read the gateway's secrets.

#[cfg(target_os = "linux")]
#[tokio::test]
async fn code_run_by_tools_cannot_read_the_gateways_secrets() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let server = Server::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let base = server.url("");
    let pid = server.pid();
    let (status, v) = invoke(
        &base,
        None,
        "exec",
        json!({"command": format!("cat /proc/{pid}/environ; grep -a -l upstream-secret /proc/[0-9]*/environ; cat /proc/{pid}/cmdline; echo done")}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let out = v.to_string();
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains(UPSTREAM_KEY), "exec read the key: {out}");
    let code = format!(
        "import os\nfor p in ['/proc/{pid}/environ', '/proc/{pid}/mem']:\n    try:\n        print(open(p, 'rb').read(100000))\n    except Exception as e:\n        print('refused', type(e).__name__)\nprint(os.environ)\n"
    );
    let (status, v) = invoke(&base, None, "execute_python", json!({ "code": code })).await;
    assert_eq!(status, 200, "{v}");
    let out = v.to_string();
    assert!(out.contains("refused"), "{out}");
    assert!(!out.contains(UPSTREAM_KEY), "Python read the key: {out}");
}

// ---------------------------------------------------------------------------
// 9. Nothing a command starts outlives the call; forks are bounded.

async fn gone(marker: &str) -> bool {
    for _ in 0..100 {
        if processes_with(marker).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn nothing_a_command_starts_outlives_the_call() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let served = Served::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let base = served.url("");

    // A new session, in the background.
    let (status, v) = invoke(
        &base,
        None,
        "exec",
        json!({"command": "setsid -f sleep 61.4171; sleep 0.3; echo started"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(gone("61.4171").await, "setsid -f sleep survived the call");

    // A double fork with setsid, from Python.
    let code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execvp('sleep', ['sleep', '62.4171'])\n    os._exit(0)\ntime.sleep(0.3)\nprint('forked')\n";
    let (status, v) = invoke(&base, None, "execute_python", json!({ "code": code })).await;
    assert_eq!(status, 200, "{v}");
    assert!(
        gone("62.4171").await,
        "a double-forked child survived the call"
    );

    // A fork bomb stops at the process limit, and leaves nothing behind.
    let (status, v) = invoke(
        &base,
        None,
        "exec",
        json!({"command": "n=0; while [ $n -lt 200 ]; do sleep 63.4171 & n=$((n+1)); done; echo spawned"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let stderr = v["data"]["stderr"].as_str().unwrap_or_default();
    assert!(
        stderr.contains("fork") || stderr.contains("Resource temporarily unavailable"),
        "200 background processes started with a limit of 64: {v}"
    );
    assert!(gone("63.4171").await, "the fork bomb's processes survived");
}

// ---------------------------------------------------------------------------
// 5, 6. HTTP tools: no redirects unless declared, no secrets to another
// origin, no Referer; secrets scrubbed in every encoding.

#[tokio::test]
async fn http_tools_follow_redirects_only_as_declared_and_never_carry_secrets_away() {
    let a = Backend::start().await;
    let b = Backend::start().await;
    let dir = ConfigDir::fixture(
        r#"
--- toolgate.yaml
--- tools.d/r.yaml
env:
  API_KEY: required
tools:
  - name: plain
    description: follows nothing
    parameters: {type: object, properties: {to: {type: string}}, required: [to]}
    http:
      url: "${A}/redirect?to={{ args.to }}"
      headers: {X-Api-Key: "{{ env.API_KEY }}"}
  - name: same_origin
    description: follows its own origin
    parameters: {type: object, properties: {to: {type: string}}, required: [to]}
    http:
      url: "${A}/redirect?to={{ args.to }}"
      headers: {X-Api-Key: "{{ env.API_KEY }}"}
      redirects: {max: 2}
  - name: to_cdn
    description: may go to b
    parameters: {type: object, properties: {to: {type: string}}, required: [to]}
    http:
      url: "${A}/redirect?to={{ args.to }}"
      headers: {X-Api-Key: "{{ env.API_KEY }}"}
      redirects: {max: 2, origins: ["${B}"]}
"#,
        &[("A", &a.url()), ("B", &b.url())],
    );
    let catalog = load_catalog(dir.path(), &[("API_KEY", "k-secret-123")]);
    let exec = Executor::new(http_client().unwrap());
    let call = |name: &str, to: String| ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: json!({ "to": to }),
    };
    let ctx = CallContext::new();

    // Not declared: not followed, and b hears nothing.
    let r = exec
        .run(
            &catalog,
            &call("plain", format!("{}/echo/x", b.url())),
            &ctx,
        )
        .await;
    let e = r.error.unwrap().to_string();
    assert!(e.contains("not followed"), "{e}");
    assert_eq!(b.hits(), 0);
    // Its own origin: followed with its headers.
    let r = exec
        .run(&catalog, &call("same_origin", "/echo/here".into()), &ctx)
        .await;
    assert!(r.success, "{:?}", r.error);
    let here = a
        .requests()
        .into_iter()
        .find(|q| q.path == "/echo/here")
        .unwrap();
    assert_eq!(
        here.headers.get("x-api-key").map(String::as_str),
        Some("k-secret-123")
    );
    // Another origin it does not list: refused.
    let r = exec
        .run(
            &catalog,
            &call("same_origin", format!("{}/echo/y", b.url())),
            &ctx,
        )
        .await;
    assert!(r.error.unwrap().to_string().contains("another origin"));
    assert_eq!(b.hits(), 0);
    // A listed origin: followed without the tool's headers, no Referer.
    let r = exec
        .run(
            &catalog,
            &call("to_cdn", format!("{}/echo/cdn", b.url())),
            &ctx,
        )
        .await;
    assert!(r.success, "{:?}", r.error);
    let got = b.requests().pop().unwrap();
    assert_eq!(got.path, "/echo/cdn");
    assert!(!got.headers.contains_key("x-api-key"), "{:?}", got.headers);
    assert!(!got.headers.contains_key("referer"), "{:?}", got.headers);
    assert!(
        a.requests()
            .iter()
            .all(|q| !q.headers.contains_key("referer"))
    );
}

#[tokio::test]
async fn secrets_are_scrubbed_in_every_encoding_the_gateway_applied() {
    let backend = Backend::start().await;
    let secret = "s3cr3t/+key&x y=z";
    let dir = ConfigDir::fixture(
        r#"
--- toolgate.yaml
--- tools.d/l.yaml
env:
  SECRET: required
  BASIC: required
tools:
  - name: leaky
    description: a backend that repeats the request in its errors
    parameters: {type: object, properties: {}}
    http:
      url: "${BACKEND}/echo-error"
      query: {api_key: "{{ env.SECRET }}"}
      headers: {Authorization: "Basic {{ env.BASIC }}", X-Token: "{{ env.SECRET }}"}
"#,
        &[("BACKEND", &backend.url())],
    );
    let basic = "dXNlcjpwYXNzd29yZA==";
    let catalog = load_catalog(dir.path(), &[("SECRET", secret), ("BASIC", basic)]);
    let r = Executor::new(http_client().unwrap())
        .run(
            &catalog,
            &ToolCall {
                id: "c".into(),
                name: "leaky".into(),
                arguments: json!({}),
            },
            &CallContext::new(),
        )
        .await;
    let e = r.error.unwrap().to_string();
    assert!(e.contains("HTTP 400"), "{e}");
    let forms = [
        secret.to_owned(),
        url::form_urlencoded::byte_serialize(secret.as_bytes()).collect(),
        percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC)
            .to_string(),
        "s3cr3t".to_owned(),
        basic.to_owned(),
    ];
    for f in forms {
        assert!(!e.contains(&f), "{f} leaked: {e}");
    }
    assert!(e.contains("[redacted]"), "{e}");

    // The gateway's own upstream key, echoed by the upstream.
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let served = Served::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let (status, body) = chat(
        &served.url(""),
        None,
        json!({"model": "m", "messages": user("[[mock:echo-auth]]")}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(!body.contains(UPSTREAM_KEY), "{body}");
    assert!(body.contains("[redacted]"), "{body}");
}

// ---------------------------------------------------------------------------
// 7. The workspace: a project that is a symlink is refused; keys are pinned
// to their projects.

#[tokio::test]
async fn projects_cannot_escape_and_keys_are_pinned_to_theirs() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let keys = "auth:
  keys:
    - name: bob
      key_env: BOB_KEY
      projects: [bob]
    - name: admin
      key_env: ADMIN_KEY
      projects: [admin, shared]
    - name: carol
      key_env: CAROL_KEY
    - name: dave
      key_env: DAVE_KEY
      projects: [shared]
    - name: root
      key_env: ROOT_KEY
      projects: [\"*\"]
";
    let dir = attack_config(ws.path(), &model, keys);
    let served = Served::start(
        dir.path(),
        &[
            ("UPSTREAM_KEY", UPSTREAM_KEY),
            ("BOB_KEY", "bob-key-1234567890"),
            ("ADMIN_KEY", "admin-key-1234567890"),
            ("CAROL_KEY", "carol-key-1234567890"),
            ("DAVE_KEY", "dave-key-1234567890"),
            ("ROOT_KEY", "root-key-1234567890"),
        ],
    )
    .await;
    let base = served.url("");
    let (admin, bob) = (Some("admin-key-1234567890"), Some("bob-key-1234567890"));
    let carol = Some("carol-key-1234567890");
    let (status, v) = invoke(
        &base,
        admin,
        "file_write",
        json!({"path": "secret.txt", "content": "admin only"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(ws.path().join("admin/secret.txt").exists());
    // Without a header, bob works in his own project.
    let (status, v) = invoke(&base, bob, "file_read", json!({"path": "secret.txt"})).await;
    assert_eq!(status, 502, "{v}");
    assert!(error_of(&v).contains("does not exist"), "{v}");
    // Naming another project is refused.
    let (status, v) = invoke_in(
        &base,
        bob,
        Some("admin"),
        "file_read",
        json!({"path": "secret.txt"}),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    // A key pinned to no project sees inside none of the pinned ones: not
    // through the workspace's root (it works in a folder of its own)...
    let (status, v) = invoke(
        &base,
        carol,
        "file_read",
        json!({"path": "admin/secret.txt"}),
    )
    .await;
    assert!(!v.to_string().contains("admin only"), "{status} {v}");
    let (status, v) = invoke(
        &base,
        carol,
        "file_write",
        json!({"path": "mine.txt", "content": "c"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(ws.path().join("key-carol/mine.txt").exists());
    // ...nor by naming one, nor any project at all: a key granted none
    // has its own folder alone (keys share no files by default).
    let (status, v) = invoke_in(
        &base,
        carol,
        Some("admin"),
        "file_read",
        json!({"path": "secret.txt"}),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    let (status, v) = invoke_in(
        &base,
        carol,
        Some("open"),
        "file_write",
        json!({"path": "x.txt", "content": "x"}),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    assert!(error_of(&v).contains("own folder `key-carol`"), "{v}");
    assert!(!ws.path().join("open").exists());
    // A project granted to two keys is theirs to share.
    let (status, v) = invoke_in(
        &base,
        admin,
        Some("shared"),
        "file_write",
        json!({"path": "plan.txt", "content": "shared plan"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = invoke_in(
        &base,
        Some("dave-key-1234567890"),
        Some("shared"),
        "file_read",
        json!({"path": "plan.txt"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(v.to_string().contains("shared plan"), "{v}");
    // A key granted `*` works in the whole workspace, and names any
    // project no key lists, not one another key lists.
    let (status, v) = invoke_in(
        &base,
        Some("root-key-1234567890"),
        Some("open"),
        "file_write",
        json!({"path": "x.txt", "content": "x"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert!(ws.path().join("open/x.txt").exists());
    let (status, v) = invoke(
        &base,
        Some("root-key-1234567890"),
        "file_read",
        json!({"path": "key-carol/mine.txt"}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = invoke_in(
        &base,
        Some("root-key-1234567890"),
        Some("bob"),
        "file_read",
        json!({"path": "by-mcp.txt"}),
    )
    .await;
    assert_eq!(status, 403, "{v}");
    // The MCP face builds the same context: bob's calls work in his
    // project, and naming another is refused.
    let bob_key = "bob-key-1234567890";
    let (status, text) = mcp_call(
        &base,
        bob_key,
        None,
        "file_write",
        json!({"path": "by-mcp.txt", "content": "x"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(ws.path().join("bob/by-mcp.txt").exists(), "{text}");
    assert!(!ws.path().join("by-mcp.txt").exists());
    let (status, text) = mcp_call(
        &base,
        bob_key,
        None,
        "file_read",
        json!({"path": "secret.txt"}),
    )
    .await;
    assert!(status == 200 && !text.contains("admin only"), "{text}");
    let (status, text) = mcp_call(
        &base,
        bob_key,
        Some("admin"),
        "file_read",
        json!({"path": "secret.txt"}),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(!text.contains("admin only"), "{text}");
    // A project folder made a symlink (code can make one) is not followed:
    // neither to `/` nor to another project.
    std::fs::create_dir_all(ws.path().join("bob")).unwrap();
    std::fs::remove_dir_all(ws.path().join("bob")).unwrap();
    std::os::unix::fs::symlink("/", ws.path().join("bob")).unwrap();
    let (status, v) = invoke(&base, bob, "file_list", json!({"path": "."})).await;
    assert_eq!(status, 422, "{v}");
    assert!(error_of(&v).contains("symlink"), "{v}");
    std::fs::remove_file(ws.path().join("bob")).unwrap();
    std::os::unix::fs::symlink("admin", ws.path().join("bob")).unwrap();
    let (status, v) = invoke(&base, bob, "file_read", json!({"path": "secret.txt"})).await;
    assert_eq!(status, 422, "{v}");
    assert!(!v.to_string().contains("admin only"), "{v}");
}

// ---------------------------------------------------------------------------
// 8, 15. Special files are refused without blocking; edits of one file are
// atomic and one at a time.

#[cfg(target_os = "linux")]
#[tokio::test]
async fn special_files_are_refused_and_edits_are_atomic() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let served = Served::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let base = served.url("");
    nix::unistd::mkfifo(
        &ws.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o666),
    )
    .unwrap();
    // More calls than the blocking pool has threads: none may hang.
    let calls = (0..80).map(|i| {
        let base = base.clone();
        async move {
            if i % 2 == 0 {
                invoke(&base, None, "file_read", json!({"path": "fifo"})).await
            } else {
                invoke(
                    &base,
                    None,
                    "file_edit",
                    json!({"path": "fifo", "old_text": "a", "new_text": "b"}),
                )
                .await
            }
        }
    });
    for (status, v) in futures::future::join_all(calls).await {
        assert_eq!(status, 422, "{v}");
        assert!(error_of(&v).contains("not a regular file"), "{v}");
    }
    let (status, v) = invoke(
        &base,
        None,
        "file_write",
        json!({"path": "fifo", "content": "x"}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    let (status, v) = invoke(
        &base,
        None,
        "file_write",
        json!({"path": "fifo", "content": "x", "mode": "append"}),
    )
    .await;
    assert_eq!(status, 422, "{v}");
    assert_healthy(&base, "FIFO reads").await;

    // 24 concurrent edits of one file, each replacing its own marker, with
    // reads in between: every edit lands, no read sees a partial file.
    let original: String = (0..24).map(|i| format!("line m{i}.\n")).collect();
    std::fs::write(ws.path().join("shared.txt"), &original).unwrap();
    let edits = (0..24).map(|i| {
        let base = base.clone();
        async move {
            invoke(
                &base,
                None,
                "file_edit",
                json!({"path": "shared.txt", "old_text": format!("m{i}."), "new_text": format!("EDITED{i}.")}),
            )
            .await
        }
    });
    let reads = (0..24).map(|_| {
        let base = base.clone();
        async move { invoke(&base, None, "file_read", json!({"path": "shared.txt"})).await }
    });
    let (edits, reads) = futures::future::join(
        futures::future::join_all(edits),
        futures::future::join_all(reads),
    )
    .await;
    for (status, v) in edits {
        assert_eq!(status, 200, "{v}");
    }
    for (_, v) in reads {
        let text = v["data"].as_str().unwrap_or_default();
        assert_eq!(text.lines().count(), 24, "a read saw a partial file: {v}");
    }
    let text = std::fs::read_to_string(ws.path().join("shared.txt")).unwrap();
    for i in 0..24 {
        assert!(
            text.contains(&format!("EDITED{i}.")),
            "edit {i} was lost:\n{text}"
        );
    }
}

// ---------------------------------------------------------------------------
// 10. Slow clients: half-sent headers and bodies are cut off; the gateway
// keeps answering.

fn raw_connection(addr: &str, send: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(send).unwrap();
    s
}

/// What the server sends before it closes the connection; `None` when it
/// still holds it open after 20 s.
fn read_until_closed(mut s: TcpStream) -> Option<String> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Some(String::new()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_cannot_starve_others() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let yaml = std::fs::read_to_string(dir.path().join("toolgate.yaml")).unwrap();
    std::fs::write(
        dir.path().join("toolgate.yaml"),
        yaml.replace(
            "  body_timeout: 1s\n",
            "  body_timeout: 1s\n  max_connections: 100\n",
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let addr = server.addr.clone();
    // More half-sent requests than the connection cap.
    let slow: Vec<TcpStream> = (0..250)
        .map(|_| raw_connection(&addr, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n"))
        .collect();
    assert_healthy(&server.url(""), "250 half-sent headers").await;
    // Each is closed once the header deadline passes.
    let first = slow.into_iter().next().unwrap();
    let answer = tokio::task::spawn_blocking(move || read_until_closed(first))
        .await
        .unwrap()
        .expect("a half-sent request was held open");
    assert!(answer.is_empty() || answer.contains("408"), "{answer}");
    // A body that never completes gets 408, on the router's routes and on
    // chat completions, which connections serve without it (`api::direct`).
    for path in ["/v1/tools/calculator/invoke", "/v1/chat/completions"] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"argu"
        );
        let body = raw_connection(&addr, request.as_bytes());
        let answer = tokio::task::spawn_blocking(move || read_until_closed(body))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("a half-sent body to {path} was held open"));
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(
            answer.to_ascii_lowercase().contains("x-request-id:"),
            "{path}: {answer}"
        );
    }
    assert_healthy(&server.url(""), "a slow body").await;
}

/// A gateway that may open 200 files (so 68 connections), with a header
/// deadline of a minute (what lets a health check in is not it), and what
/// it runs with.
async fn capped_gateway() -> (MockLlm, tempfile::TempDir, ConfigDir, Server) {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let yaml = std::fs::read_to_string(dir.path().join("toolgate.yaml")).unwrap();
    std::fs::write(
        dir.path().join("toolgate.yaml"),
        yaml.replace("  header_timeout: 1s\n", "  header_timeout: 60s\n"),
    )
    .unwrap();
    let server = Server::start_with_files(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)], 200).await;
    // (200 - 64) / 2 connections, not the configured 4,096.
    server
        .logged("the gateway holds at most 68 connections")
        .await;
    (model, ws, dir, server)
}

#[tokio::test]
async fn the_gateway_keeps_within_the_files_it_may_open_and_health_checks_get_in() {
    let (_model, _ws, _dir, server) = capped_gateway().await;
    let addr = server.addr.clone();
    // More half-sent requests than the process could hold open.
    let slow: Vec<TcpStream> = (0..220)
        .map(|_| {
            raw_connection(
                &addr,
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n",
            )
        })
        .collect();
    // The oldest of them make room: the health check is answered long
    // before the header deadline.
    let started = std::time::Instant::now();
    assert_healthy(
        &server.url(""),
        "220 half-sent requests under a 200-file limit",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    drop(slow);
}

#[tokio::test]
async fn idle_keep_alive_connections_make_room_at_the_cap() {
    let (_model, _ws, _dir, server) = capped_gateway().await;
    let addr = server.addr.clone();
    // 100 clients each make a request and keep their connection, idle.
    let mut idle = Vec::new();
    let mut answered = 0;
    for _ in 0..100 {
        let mut s = raw_connection(&addr, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 512];
        // The 69th and later get a place only if idle ones make room.
        if s.read(&mut buf)
            .is_ok_and(|n| buf[..n].starts_with(b"HTTP/1.1 200"))
        {
            answered += 1;
        }
        idle.push(s);
    }
    assert_eq!(
        answered, 100,
        "each client was answered without waiting for a place"
    );
    // At the cap, the oldest idle connections make room: the health check
    // is answered long before their minute is up.
    let started = std::time::Instant::now();
    assert_healthy(
        &server.url(""),
        "100 idle keep-alive connections under a 200-file limit",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    drop(idle);
}

// ---------------------------------------------------------------------------
// 11. Per-key fairness: sub-agents count against the key; a key's own caps
// on concurrent loops leave other keys alone.

#[tokio::test]
async fn sub_agents_count_against_the_key_and_keys_have_their_own_caps() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let keys = "auth:
  keys:
    - name: small
      key_env: SMALL_KEY
      limits: { requests_per_minute: 3, max_concurrent_loops: 1 }
    - name: other
      key_env: OTHER_KEY
";
    let dir = attack_config(ws.path(), &model, keys);
    let yaml = std::fs::read_to_string(dir.path().join("toolgate.yaml")).unwrap();
    std::fs::write(
        dir.path().join("toolgate.yaml"),
        yaml.replace(
            "  python: { strictness: lenient }\n",
            "  python: { strictness: lenient }\n  spawn: { max_tasks: 10, concurrency: 2, max_iterations: 2 }\n",
        ),
    )
    .unwrap();
    let served = Served::start(
        dir.path(),
        &[
            ("UPSTREAM_KEY", UPSTREAM_KEY),
            ("SMALL_KEY", "small-key-1234567890"),
            ("OTHER_KEY", "other-key-1234567890"),
        ],
    )
    .await;
    let base = served.url("");
    let tasks: Vec<String> = (0..10).map(|i| format!("task {i}")).collect();
    let before = model.requests().len();
    let (status, body) = chat(
        &base,
        Some("small-key-1234567890"),
        json!({"model": "m", "messages": user(&format!("call spawn {}", json!({"tasks": tasks})))}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let model_calls = model.requests().len() - before;
    // The request itself is one of the 3 per minute: 2 sub-agents at most
    // (each one model call), and the parent's two calls.
    assert!(
        model_calls <= 4,
        "{model_calls} model calls for a key allowed 3 requests a minute"
    );
    assert!(body.contains("each sub-agent is one"), "{body}");

    // One loop at a time for `small`; `other` is not affected.
    let other = served.url("");
    let slow = tokio::spawn(async move {
        chat(
            &other,
            Some("other-key-1234567890"),
            json!({"model": "m", "messages": user("[[mock:latency=1500]] hi")}),
        )
        .await
    });
    let slow_small = {
        let base = base.clone();
        tokio::spawn(async move {
            chat(
                &base,
                Some("small-key-1234567890"),
                json!({"model": "m", "messages": user("[[mock:latency=1500]] hi")}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = chat(
        &base,
        Some("small-key-1234567890"),
        json!({"model": "m", "messages": user("hi")}),
    )
    .await;
    // Either its loop cap (503) or its request rate (429): never a third
    // concurrent loop.
    assert!(status == 503 || status == 429, "{status} {body}");
    assert_eq!(slow.await.unwrap().0, 200);
    let _ = slow_small.await;
}

// ---------------------------------------------------------------------------
// 12, 13. Template values cannot reshape URLs or form bodies; a raw text
// body that inserts arguments is flagged by `check`.

#[tokio::test]
async fn object_arguments_and_form_bodies_are_encoded() {
    let backend = Backend::start().await;
    let dir = ConfigDir::fixture(
        r#"
--- toolgate.yaml
--- tools.d/e.yaml
tools:
  - name: by_object
    description: an object in the URL
    parameters: {type: object, properties: {o: {type: object}}, required: [o]}
    http:
      url: "${BACKEND}/echo/{{ args.o }}?fixed=1"
  - name: form
    description: a form body
    parameters: {type: object, properties: {t: {type: string}}, required: [t]}
    http:
      method: POST
      url: "${BACKEND}/echo/form"
      body:
        text: "name={{ args.t }}&role=user"
        content_type: application/x-www-form-urlencoded
"#,
        &[("BACKEND", &backend.url())],
    );
    let catalog = load_catalog(dir.path(), &[]);
    let exec = Executor::new(http_client().unwrap());
    let run = |name: &str, args: Value| ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: args,
    };
    let r = exec
        .run(
            &catalog,
            &run("by_object", json!({"o": {"?injected=1&x": "#y"}})),
            &CallContext::new(),
        )
        .await;
    assert!(r.success, "{:?}", r.error);
    let got = backend.requests().pop().unwrap();
    assert_eq!(got.query.as_deref(), Some("fixed=1"), "{got:?}");
    assert!(
        !got.path.contains('?') && !got.path.contains('#'),
        "{got:?}"
    );
    let r = exec
        .run(
            &catalog,
            &run("form", json!({"t": "x&role=admin"})),
            &CallContext::new(),
        )
        .await;
    assert!(r.success, "{:?}", r.error);
    let got = backend.requests().pop().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got.body),
        "name=x%26role%3Dadmin&role=user"
    );

    // A plain-text body inserting an argument: `check` warns.
    let dir = ConfigDir::fixture(
        r#"
--- toolgate.yaml
--- tools.d/raw.yaml
tools:
  - name: raw
    description: raw text
    parameters: {type: object, properties: {t: {type: string}}, required: [t]}
    http:
      method: POST
      url: "${BACKEND}/echo/raw"
      body: {text: "value={{ args.t }}"}
"#,
        &[("BACKEND", &backend.url())],
    );
    let (code, out, err) = toolgate_tests::run_cli(
        &toolgate_tests::toolgate_bin(),
        &["check", "--config", dir.path().to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("inserts arguments as they are"),
        "{out}{err}"
    );
}

// ---------------------------------------------------------------------------
// 16. A caller may tighten execute_python's level, never loosen it.

#[tokio::test]
async fn python_strictness_can_only_be_tightened() {
    let model = MockLlm::start().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = attack_config(ws.path(), &model, "");
    let served = Served::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let base = served.url("");
    let code = "import os\nprint(os.getenv('PATH') is not None)";
    let (status, v) = invoke(&base, None, "execute_python", json!({"code": code})).await;
    assert_eq!(status, 200, "lenient reads its environment: {v}");
    assert_eq!(v["data"]["stdout"], json!("True\n"), "{v}");
    let (_, v) = invoke(
        &base,
        None,
        "execute_python",
        json!({"code": code, "strictness": "strict"}),
    )
    .await;
    assert_eq!(
        v["error"]["code"],
        json!("tool_error"),
        "strict has no environment: {v}"
    );
    assert!(v.to_string().contains("PermissionError"), "{v}");
    // Configured strict: asking for lenient changes nothing.
    let ws2 = tempfile::tempdir().unwrap();
    let dir = attack_config(ws2.path(), &model, "");
    let yaml = std::fs::read_to_string(dir.path().join("toolgate.yaml")).unwrap();
    std::fs::write(
        dir.path().join("toolgate.yaml"),
        yaml.replace("strictness: lenient", "strictness: strict"),
    )
    .unwrap();
    let strict = Served::start(dir.path(), &[("UPSTREAM_KEY", UPSTREAM_KEY)]).await;
    let (status, v) = invoke(
        &strict.url(""),
        None,
        "execute_python",
        json!({"code": code, "strictness": "lenient"}),
    )
    .await;
    assert_eq!(
        v["error"]["code"],
        json!("tool_error"),
        "a caller loosened the level: {v}"
    );
    assert!(v.to_string().contains("PermissionError"), "{status} {v}");
}
