//! Past one machine: replicas sharing state in a real `redis-server`
//! (rate limits, cached results, learned formatters; Redis stopped and
//! back), readiness and draining, ConfigMap-style reloads, JSON logs, and
//! two replicas behind nginx: one restarted under load, one killed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{Backend, ConfigDir, RedisServer, Server, fill, free_port, user};

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-0123456789";

/// Two keys (alice: 4 requests a minute; bob: unlimited, an approver), a cached lookup
/// tool, a route whose model rejects `tools` (so `auto` learns), and the
/// shared state in the Redis of `REDIS_URL`.
fn shared_config(backend: &Backend, model: &MockLlm, extra: &str) -> ConfigDir {
    let gateway = fill(
        r#"upstreams:
  - name: mock
    base_url: ${MODEL}
    retries: { max_attempts: 1 }
models:
  - model: "*"
    upstream: mock
    formatter: auto
auth:
  keys:
    - name: alice
      sha256: ${ALICE}
      limits: { requests_per_minute: 4 }
    - name: bob
      sha256: ${BOB}
      approver: true
state:
  redis:
    url_env: REDIS_URL
    prefix: "test:${PREFIX}:"
    timeout: 200ms
${EXTRA}
"#,
        &[
            ("MODEL", &model.base_url()),
            ("ALICE", &toolgate_engine::identity::auth::digest_hex(ALICE)),
            ("BOB", &toolgate_engine::identity::auth::digest_hex(BOB)),
            ("PREFIX", &free_port().to_string()),
            ("EXTRA", extra),
        ],
    );
    // The shared lookup tool, its results cached.
    let tools = toolgate_tests::lookup_tool(backend, "lookup", "Look something up.")
        .replace("    http:\n", "    cache: { ttl: 10m }\n    http:\n");
    ConfigDir::new(&[
        ("toolgate.yaml", &gateway),
        ("tools.d/lookup.yaml", &tools),
        ("tool-sets/default.yaml", "name: default\ntools: [lookup]\n"),
    ])
}

async fn get(url: &str, key: Option<&str>) -> (u16, Value) {
    let mut rb = reqwest::Client::new().get(url);
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn post(url: &str, key: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn invoke(s: &Server, key: &str, q: &str) -> (u16, Value) {
    post(
        &s.url("/v1/tools/lookup/invoke"),
        key,
        json!({"arguments": {"q": q}}),
    )
    .await
}

async fn chat(s: &Server, key: &str, text: &str) -> (u16, Value) {
    post(
        &s.url("/v1/chat/completions"),
        key,
        json!({"model": "no-tools-model", "messages": user(text)}),
    )
    .await
}

/// Waits (at most 15 s) until `/healthz` says Redis is `state` (`up` or
/// `down`); the whole `/healthz`.
async fn redis_state(s: &Server, state: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, body) = get(&s.url("/healthz"), None).await;
        if body["shared_state"]["redis"] == state {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Redis is not {state}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `/readyz` of a replica whose Redis is down under a falling-back policy:
/// ready (every replica shares the outage), and degraded, saying why.
async fn ready_but_degraded(s: &Server) {
    let (status, body) = get(&s.url("/readyz"), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["degraded"][0].as_str().unwrap().contains("Redis"),
        "{body}"
    );
}

/// Waits (at most 15 s) until `/readyz` answers `status`; its body.
async fn readiness(s: &Server, status: u16) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (got, body) = get(&s.url("/readyz"), None).await;
        if got == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz stayed {got}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn replicas_share_rate_limits_caches_and_formatters_through_redis() {
    let mut redis = RedisServer::start().await;
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = shared_config(&backend, &model, "");
    let env = [("REDIS_URL", redis.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = Server::start(dir.path(), &env).await;
    let b = Server::start(dir.path(), &env).await;
    redis_state(&a, "up").await;
    redis_state(&b, "up").await;

    // alice may make 4 requests a minute in all, alternating replicas.
    let mut statuses = Vec::new();
    for i in 0..8 {
        let s = if i % 2 == 0 { &a } else { &b };
        statuses.push(get(&s.url("/v1/tools"), Some(ALICE)).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429, 429, 429]);

    // A result cached through one replica is a hit through the other.
    let (status, first) = invoke(&a, BOB, "shared").await;
    assert_eq!((status, &first["data"]), (200, &json!("shared")), "{first}");
    assert_ne!(first["cached"], true, "{first}");
    let (status, second) = invoke(&b, BOB, "shared").await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["cached"], true, "{second}");
    assert_eq!(second["data"], "shared");
    assert_eq!(backend.hits(), 1, "the backend answered once");

    // A model found on one replica to reject `tools` gets the structured
    // prompt from the start on the other.
    let (status, body) = chat(&a, BOB, "hello [[mock:reject-tools]]").await;
    assert_eq!(status, 200, "{body}");
    let before = model.requests().len();
    let (status, body) = chat(&b, BOB, "hello again [[mock:reject-tools]]").await;
    assert_eq!(status, 200, "{body}");
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        before + 1,
        "one model call, no rejected attempt"
    );
    assert!(
        requests[before].get("tools").is_none(),
        "{}",
        requests[before]
    );

    // Redis stops: both replicas say so, and go on serving with their own
    // rate limits (the default policy) and caches: no 500.
    redis.stop();
    let health = redis_state(&a, "down").await;
    assert!(health["shared_state"]["error"].is_string(), "{health}");
    ready_but_degraded(&a).await;
    redis_state(&b, "down").await;
    ready_but_degraded(&b).await;
    let (status, body) = invoke(&a, BOB, "while-down").await;
    assert_eq!(
        (status, &body["data"]),
        (200, &json!("while-down")),
        "{body}"
    );
    // A's own copy of what it fetched (B read it from Redis: no copy).
    let (status, body) = invoke(&a, BOB, "shared").await;
    assert_eq!(
        (status, body["cached"].clone()),
        (200, json!(true)),
        "{body}"
    );
    let (status, body) = chat(&a, BOB, "no redis [[mock:reject-tools]]").await;
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = get(&a.url("/metrics"), Some(BOB)).await;
    assert_eq!(status, 200);
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(metrics.contains("toolgate_shared_state_up 0"), "{metrics}");
    assert!(
        metrics
            .contains("toolgate_shared_state_fallbacks_total{fallback=\"local\",what=\"cache\"}"),
        "{metrics}"
    );
    // alice: this replica's own bucket now (fresh: Redis counted before),
    // still a limit (`local`, not `open`).
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get(&a.url("/v1/tools"), Some(ALICE)).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429]);

    // Redis back (empty, as after a crash): shared again.
    let _redis = RedisServer::start_on(redis.port).await;
    redis_state(&a, "up").await;
    redis_state(&b, "up").await;
    let (_, first) = invoke(&b, BOB, "after").await;
    assert_ne!(first["cached"], true, "{first}");
    let (_, second) = invoke(&a, BOB, "after").await;
    assert_eq!(second["cached"], true, "{second}");
    let mut statuses = Vec::new();
    for i in 0..6 {
        let s = if i % 2 == 0 { &b } else { &a };
        statuses.push(get(&s.url("/v1/tools"), Some(ALICE)).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
}

/// One MCP request to the gateway's MCP face (`/mcp`), as bob, in
/// `session` when given; the status and the session id it answers with.
async fn mcp(s: &Server, session: Option<&str>, body: Value) -> (u16, Option<String>) {
    let mut rb = reqwest::Client::new()
        .post(s.url("/mcp"))
        .bearer_auth(BOB)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body);
    if let Some(id) = session {
        rb = rb.header("mcp-session-id", id);
    }
    let r = rb.send().await.unwrap();
    let id = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), id)
}

#[tokio::test]
async fn an_mcp_session_closed_on_one_replica_is_closed_on_all() {
    let redis = RedisServer::start().await;
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = shared_config(&backend, &model, "mcp: { session_secret_env: MCP_SECRET }");
    let url = redis.url();
    let env = [
        ("REDIS_URL", url.as_str()),
        ("MCP_SECRET", "a-secret-shared-by-every-replica-0123456789"),
    ];
    let a = Server::start(dir.path(), &env).await;
    let b = Server::start(dir.path(), &env).await;
    let (status, id) = mcp(
        &a,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
    )
    .await;
    assert_eq!(status, 200);
    let id = id.unwrap();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // Any replica serves the session (it is signed)...
    assert_eq!(mcp(&b, Some(&id), list.clone()).await.0, 200);
    // ...until it is closed, on whichever replica.
    let r = reqwest::Client::new()
        .delete(a.url("/mcp"))
        .bearer_auth(BOB)
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(mcp(&a, Some(&id), list.clone()).await.0, 404);
    assert_eq!(
        mcp(&b, Some(&id), list).await.0,
        404,
        "the other replica knows"
    );
}

#[tokio::test]
async fn with_a_closed_policy_rate_limited_requests_are_refused_while_redis_is_down() {
    let mut redis = RedisServer::start().await;
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = shared_config(&backend, &model, "");
    let text = std::fs::read_to_string(dir.path().join("toolgate.yaml")).unwrap();
    std::fs::write(
        dir.path().join("toolgate.yaml"),
        text.replace(
            "timeout: 200ms",
            "timeout: 200ms\n    on_unavailable: closed",
        ),
    )
    .unwrap();
    let url = redis.url();
    let a = Server::start(dir.path(), &[("REDIS_URL", url.as_str())]).await;
    readiness(&a, 200).await;
    redis.stop();
    // Under `closed` the replica is not ready: it refuses what it cannot check.
    let body = readiness(&a, 503).await;
    assert!(
        body["reasons"][0].as_str().unwrap().contains("Redis"),
        "{body}"
    );
    // alice has a rate limit: refused with 503 and a reason; bob has none.
    let (status, body) = get(&a.url("/v1/tools"), Some(ALICE)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "shared_state_unavailable", "{body}");
    let (status, _) = get(&a.url("/v1/tools"), Some(BOB)).await;
    assert_eq!(status, 200);
}

/// A CA and a certificate for `localhost` signed by it, made with the
/// `openssl` command: `ca.pem`, `server.pem`, `server.key` in the folder.
fn certificates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        dir.path().join("ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=toolgate test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "ext",
    ]);
    dir
}

/// `rediss://`: a managed Redis is usually reached over TLS, verified
/// against the system's roots (here, `SSL_CERT_FILE` naming the test CA).
#[tokio::test]
async fn redis_over_tls_is_verified_and_shared() {
    let certs = certificates();
    let password = "s3cret-redis-password";
    let redis = RedisServer::start_tls(certs.path(), password).await;
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = shared_config(&backend, &model, "");
    let url = format!("rediss://:{password}@localhost:{}/0", redis.port);
    let ca = certs.path().join("ca.pem").to_string_lossy().into_owned();
    let env = [("REDIS_URL", url.as_str()), ("SSL_CERT_FILE", ca.as_str())];
    let a = Server::start(dir.path(), &env).await;
    let b = Server::start(dir.path(), &env).await;
    redis_state(&a, "up").await;
    redis_state(&b, "up").await;
    let (_, first) = invoke(&a, BOB, "tls").await;
    assert_ne!(first["cached"], true, "{first}");
    let (_, second) = invoke(&b, BOB, "tls").await;
    assert_eq!(second["cached"], true, "{second}");
    // Without the CA, the certificate is refused, and why is said.
    let c = Server::start(dir.path(), &[("REDIS_URL", url.as_str())]).await;
    let health = redis_state(&c, "down").await;
    let reason = health["shared_state"]["error"].as_str().unwrap();
    assert!(reason.contains("certificate"), "{health}");
    // A wrong password: refused, said so.
    let wrong = url.replace(password, "not-the-password");
    let d = Server::start(
        dir.path(),
        &[
            ("REDIS_URL", wrong.as_str()),
            ("SSL_CERT_FILE", ca.as_str()),
        ],
    )
    .await;
    let body = redis_state(&d, "down").await;
    assert!(
        body["shared_state"]["error"]
            .as_str()
            .unwrap()
            .contains("Password authentication failed"),
        "{body}"
    );
    for s in [&a, &b, &c, &d] {
        let log = s.log();
        assert!(
            !log.contains(password) && !log.contains("not-the-password"),
            "{log}"
        );
    }
    assert!(!body.to_string().contains("not-the-password"), "{body}");
}

#[tokio::test]
async fn a_gateway_whose_redis_is_down_at_start_serves_and_says_so() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = shared_config(&backend, &model, "");
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let a = Server::start(dir.path(), &[("REDIS_URL", url.as_str())]).await;
    redis_state(&a, "down").await;
    ready_but_degraded(&a).await;
    let (status, body) = invoke(&a, BOB, "x").await;
    assert_eq!(status, 200, "{body}");
    let _redis = RedisServer::start_on(port).await;
    redis_state(&a, "up").await;
    let (status, body) = get(&a.url("/readyz"), None).await;
    assert_eq!((status, body), (200, json!({"ready": true})));
}

#[tokio::test]
async fn sigterm_drains_before_the_listener_closes() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            &format!(
                "upstreams: [{{ name: mock, base_url: {} }}]\nshutdown: {{ drain_delay: 2s }}\n",
                model.base_url()
            ),
        ),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
    ]);
    let mut s = Server::start(dir.path(), &[]).await;
    readiness(&s, 200).await;
    s.signal(Signal::SIGTERM);
    let body = readiness(&s, 503).await;
    assert_eq!(body["reasons"][0], "shutting down", "{body}");
    // Still serving, and telling each client to go elsewhere next time.
    let r = reqwest::Client::new()
        .post(s.url("/v1/tools/lookup/invoke"))
        .json(&json!({"arguments": {"q": "draining"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["connection"], "close");
    assert_eq!(s.exited().await, 0);
    let log = s.log();
    assert!(log.contains("draining"), "{log}");
}

#[tokio::test]
async fn logs_can_be_json_lines() {
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[(
        "toolgate.yaml",
        &format!(
            "upstreams: [{{ name: mock, base_url: {} }}]\n",
            model.base_url()
        ),
    )]);
    let s = Server::start(dir.path(), &[("TOOLGATE_LOG_FORMAT", "json")]).await;
    let line = s.logged("listening on").await;
    let parsed: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(parsed["level"], "INFO", "{parsed}");
    assert!(
        parsed["fields"]["message"]
            .as_str()
            .unwrap()
            .starts_with("listening on http://"),
        "{parsed}"
    );
}

/// A Kubernetes ConfigMap volume: each file a symlink through `..data`,
/// which is swapped atomically to a new folder on update (the files'
/// symlinks themselves never change).
#[tokio::test]
async fn a_configmap_update_is_reloaded() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let root = tempfile::tempdir().unwrap();
    let write_version = |name: &str, max_messages: u32| {
        let dir = root.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("toolgate.yaml"),
            format!(
                "upstreams: [{{ name: mock, base_url: {} }}]\nreload: {{ debounce: 100ms }}\nlimits: {{ max_messages: {max_messages} }}\n",
                model.base_url()
            ),
        )
        .unwrap();
    };
    let link = |target: &str| {
        let tmp = root.path().join("..data_tmp");
        std::os::unix::fs::symlink(target, &tmp).unwrap();
        std::fs::rename(&tmp, root.path().join("..data")).unwrap();
    };
    write_version("..2026_11_25_01", 100);
    link("..2026_11_25_01");
    std::os::unix::fs::symlink("..data/toolgate.yaml", root.path().join("toolgate.yaml")).unwrap();
    std::fs::create_dir(root.path().join("tools.d")).unwrap();
    std::fs::write(
        root.path().join("tools.d/tools.yaml"),
        toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
    )
    .unwrap();

    let s = Server::start(root.path(), &[]).await;
    assert_eq!(s.version().await, 1);

    write_version("..2026_11_25_02", 200);
    link("..2026_11_25_02");
    std::fs::remove_dir_all(root.path().join("..2026_11_25_01")).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while s.version().await < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not reloaded:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = s.invoke("lookup", json!({"q": "y"})).await;
    assert_eq!(status, 200, "{body}");
}

/// Two replicas behind nginx (the Debian package), clients sending chat
/// completions without pause, one replica stopped with SIGTERM (draining)
/// and started again mid-run: every client request succeeds.
#[tokio::test]
async fn a_replica_restarted_under_load_behind_nginx_fails_no_request() {
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[(
        "toolgate.yaml",
        &format!(
            "upstreams: [{{ name: mock, base_url: {}, retries: {{ max_attempts: 1 }} }}]\nshutdown: {{ drain_delay: 1s, grace: 10s }}\n",
            model.base_url()
        ),
    )]);
    let ports = [free_port(), free_port()];
    let listen = |p: u16| format!("127.0.0.1:{p}");
    let mut a = Server::start_on(dir.path(), &[], &listen(ports[0])).await;
    let _b = Server::start_on(dir.path(), &[], &listen(ports[1])).await;
    let nginx = Nginx::start(&ports).await;

    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..8 {
        let (ok, failed, stop) = (Arc::clone(&ok), Arc::clone(&failed), Arc::clone(&stop));
        let url = nginx.url("/v1/chat/completions");
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let r = http
                    .post(&url)
                    .json(&json!({"model": "m", "messages": user(&format!("client {c} request {i}"))}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => {
                        let why = format!("{}: {}", r.status(), r.text().await.unwrap_or_default());
                        failed.lock().unwrap().push(why);
                    }
                    Err(e) => failed.lock().unwrap().push(e.to_string()),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.signal(Signal::SIGTERM);
    assert_eq!(a.exited().await, 0);
    let during = ok.load(Ordering::Relaxed);
    let _a = Server::start_on(dir.path(), &[], &listen(ports[0])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let failed = failed.lock().unwrap().clone();
    let ok = ok.load(Ordering::Relaxed);
    assert!(
        failed.is_empty(),
        "{} of {} failed: {failed:?}\nnginx: {}",
        failed.len(),
        ok + failed.len(),
        nginx.log()
    );
    assert!(
        during > 50 && ok > during,
        "too little load to show anything: {during}, {ok}"
    );
}

/// Two replicas sharing Redis behind nginx (round robin), one killed with
/// SIGKILL (no draining) once what it served was written: every stored
/// response stays readable and continuable, the spend counted stays
/// counted, and a call held for approval on the killed replica is approved
/// on the other and runs there, through the replica left.
#[tokio::test]
async fn what_replicas_share_outlives_one_killed_behind_nginx() {
    let redis = RedisServer::start().await;
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = shared_config(
        &backend,
        &model,
        "approvals: { wait: 1s }\npolicies:\n  - name: payments\n    tools: [lookup]\n    when: 'args.q.contains(\"payment\")'\n    action: approve\n    reason: payments need a person",
    );
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let ports = [free_port(), free_port()];
    let listen = |p: u16| format!("127.0.0.1:{p}");
    let mut a = Server::start_on(dir.path(), &env, &listen(ports[0])).await;
    let b = Server::start_on(dir.path(), &env, &listen(ports[1])).await;
    let nginx = Nginx::start(&ports).await;
    // Through nginx, so that each replica serves some of each.
    let mut ids = Vec::new();
    for i in 0..4 {
        let (status, created) = post(
            &nginx.url("/v1/responses"),
            BOB,
            json!({"model": "m", "input": format!("remember word {i}"), "tool_set": "none"}),
        )
        .await;
        assert_eq!(status, 200, "{created}");
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    for i in 0..4 {
        let (status, answer) = post(
            &nginx.url("/v1/chat/completions"),
            BOB,
            json!({"model": "m", "messages": user(&format!("chat {i}")), "tool_set": "none"}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
    }
    let model_calls = |url: String| async move {
        let (status, spend) = get(&url, Some(BOB)).await;
        assert_eq!(status, 200, "{spend}");
        spend["data"][0]["model_calls"].as_i64().unwrap_or(0)
    };
    // Written in the background: wait until both replicas see all of it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut seen = 0;
        for id in &ids {
            for s in [&a, &b] {
                let (status, _) = get(&s.url(&format!("/v1/responses/{id}")), Some(BOB)).await;
                seen += usize::from(status == 200);
            }
        }
        let counted = model_calls(b.url("/v1/spend?group_by=key")).await;
        if seen == 2 * ids.len() && counted >= 8 {
            assert_eq!(counted, 8, "each call counted once");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{seen} of {} reads, {counted} of 8 calls counted",
            2 * ids.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A call held for approval on the replica to be killed.
    let (status, held) = invoke(&a, ALICE, "payment of 7").await;
    assert_eq!(status, 403, "{held}");
    assert_eq!(held["error"]["code"], "approval_pending", "{held}");
    // Round robin gave the replica to be killed some of them.
    let (_, metrics) = get(&a.url("/metrics"), Some(BOB)).await;
    let metrics = metrics.as_str().unwrap_or_default();
    let served_by_a: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("toolgate_http_requests_total{")
                && l.contains("route=\"/v1/responses\"")
                && l.contains("method=\"POST\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        served_by_a >= 1.0,
        "nginx sent replica a nothing:\n{metrics}"
    );
    a.signal(Signal::SIGKILL);
    a.exited().await;
    // Everything through nginx now reaches b alone.
    for (i, id) in ids.iter().enumerate() {
        let (status, _) = get(&nginx.url(&format!("/v1/responses/{id}")), Some(BOB)).await;
        assert_eq!(status, 200, "{id} was lost with the replica");
        let (status, answer) = post(
            &nginx.url("/v1/responses"),
            BOB,
            json!({"model": "m", "input": "which word?", "previous_response_id": id, "tool_set": "none"}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        let sent = model.requests();
        let last = sent.last().unwrap();
        assert!(
            last["messages"]
                .to_string()
                .contains(&format!("remember word {i}")),
            "{last}"
        );
    }
    // The held call, decided through nginx, runs through nginx.
    let (_, listing) = get(&nginx.url("/v1/approvals"), Some(BOB)).await;
    let pending: Vec<&Value> = listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "pending" && r["tool"] == "lookup")
        .collect();
    assert_eq!(pending.len(), 1, "{listing}");
    let id = pending[0]["id"].as_str().unwrap();
    let (status, decided) = post(
        &nginx.url(&format!("/v1/approvals/{id}")),
        BOB,
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    let (status, ran) = post(
        &nginx.url("/v1/tools/lookup/invoke"),
        ALICE,
        json!({"arguments": {"q": "payment of 7"}}),
    )
    .await;
    assert_eq!(status, 200, "{ran}");
    assert_eq!(ran["data"], "payment of 7", "{ran}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counted = model_calls(nginx.url("/v1/spend?group_by=key")).await;
        if counted == 12 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline && counted < 12,
            "{counted} calls counted, 12 made"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// nginx as the load balancer in front of replicas (round robin, keep-alive
/// to the replicas, the next replica tried when one refuses the connection).
struct Nginx {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    async fn start(replicas: &[u16]) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let servers: String = replicas
            .iter()
            .map(|p| format!("server 127.0.0.1:{p} max_fails=0;"))
            .collect();
        let d = dir.path().display();
        let conf = format!(
            "worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d};
  proxy_temp_path {d};
  fastcgi_temp_path {d};
  uwsgi_temp_path {d};
  scgi_temp_path {d};
  upstream replicas {{ {servers} keepalive 16; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      # The client's own Host: the replicas have no keys, so they answer
      # only to loopback names (not to `replicas`).
      proxy_set_header Host $host;
      proxy_next_upstream error timeout;
    }}
  }}
}}
"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let nginx = ["/usr/sbin/nginx", "nginx"]
            .into_iter()
            .find(|n| std::path::Path::new(n).exists())
            .unwrap_or("nginx");
        let child = std::process::Command::new(nginx)
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run nginx ({e}): `make deb` installs it"));
        toolgate_tests::wait_for_port(port).await;
        Nginx {
            child,
            port,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    /// SIGTERM, so the master stops its workers (SIGKILL would leave them
    /// running, holding the port).
    fn drop(&mut self) {
        use nix::sys::signal::kill;
        use nix::unistd::Pid;
        let pid = Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = kill(pid, Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_stored_response_is_continued_read_and_deleted_on_any_replica() {
    let redis = RedisServer::start().await;
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = shared_config(&backend, &model, "");
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let a = Server::start(dir.path(), &env).await;
    let b = Server::start(dir.path(), &env).await;
    let http = reqwest::Client::new();
    let created: Value = http
        .post(a.url("/v1/responses"))
        .bearer_auth(BOB)
        .json(&json!({"model": "m", "input": "remember avocado", "tool_set": "none"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    // Written in the background: the other replica sees it shortly.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = http
            .get(b.url(&format!("/v1/responses/{id}")))
            .bearer_auth(BOB)
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            let got: Value = r.json().await.unwrap();
            assert_eq!(got["id"], json!(id));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica b never saw {id}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another key does not, on either replica.
    for s in [&a, &b] {
        let r = http
            .get(s.url(&format!("/v1/responses/{id}")))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    }
    // Continued on b, with a's conversation.
    let r = http
        .post(b.url("/v1/responses"))
        .bearer_auth(BOB)
        .json(&json!({"model": "m", "input": "what was it?", "previous_response_id": id, "tool_set": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let sent = model.requests();
    let last = sent.last().unwrap();
    assert!(
        last["messages"].to_string().contains("remember avocado"),
        "{last}"
    );
    // Deleted on b: gone from a too.
    let r = http
        .delete(b.url(&format!("/v1/responses/{id}")))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .get(a.url(&format!("/v1/responses/{id}")))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// Waits (at most 30 s) until `check` holds of the replica's `/v1/tools`
/// (the description of each tool by name, and the unavailable ones'
/// reasons); returns them.
async fn tools_until(
    s: &Server,
    what: &str,
    check: impl Fn(&Value, &Value) -> bool,
) -> (Value, Value) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, listing) = get(&s.url("/v1/tools"), Some(BOB)).await;
        assert_eq!(status, 200, "{listing}");
        let described: serde_json::Map<String, Value> = listing["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["function"]["name"].as_str().unwrap().to_owned(),
                    t["function"]["description"].clone(),
                )
            })
            .collect();
        let unavailable: serde_json::Map<String, Value> = listing["unavailable"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|u| (u["name"].as_str().unwrap().to_owned(), u["reason"].clone()))
            .collect();
        let (described, unavailable) = (Value::Object(described), Value::Object(unavailable));
        if check(&described, &unavailable) {
            return (described, unavailable);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {described} {unavailable}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The held changes a replica lists (waiting at most 30 s for one).
async fn held_changes(s: &Server) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, held) = get(&s.url("/v1/tool-changes"), Some(BOB)).await;
        assert_eq!(status, 200, "{held}");
        let data = held["data"].as_array().unwrap().clone();
        if !data.is_empty() {
            return data;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no change held: {held}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The first definition of the Python test server's `echo`.
const FIRST_ECHO: &str = "Echo a message back.";

/// One real MCP server (the Python SDK's test server over streamable
/// HTTP) behind replicas sharing a real Redis, and replica a, which pinned
/// its tools before the server changed `echo` (a rug pull): a holds the
/// change. `None` when the test server is not installed.
struct Pulled {
    _mcp: crate::mcp_support::HttpServer,
    redis: RedisServer,
    _backend: Backend,
    _model: MockLlm,
    dir: ConfigDir,
    a: Server,
}

impl Pulled {
    async fn start() -> Option<Pulled> {
        let mcp = crate::mcp_support::HttpServer::start().await?;
        let redis = RedisServer::start().await;
        let backend = Backend::start().await;
        let model = MockLlm::start().await;
        let dir = shared_config(&backend, &model, "");
        std::fs::write(
            dir.path().join("tools.d/mcp.yaml"),
            format!(
                "mcp_servers:\n  - name: py\n    transport: http\n    url: {}\n    tools: {{ include: [echo, rug_pull], prefix: py_ }}\n",
                mcp.url
            ),
        )
        .unwrap();
        let a = Server::start(dir.path(), &[("REDIS_URL", redis.url().as_str())]).await;
        tools_until(&a, "replica a lists the server", |d, _| {
            d["py_echo"] == FIRST_ECHO
        })
        .await;
        let (status, pulled) = post(
            &a.url("/v1/tools/py_rug_pull/invoke"),
            BOB,
            json!({"arguments": {}}),
        )
        .await;
        assert_eq!(
            (status, &pulled["data"]),
            (200, &json!("pulled")),
            "{pulled}"
        );
        Some(Pulled {
            _mcp: mcp,
            redis,
            _backend: backend,
            _model: model,
            dir,
            a,
        })
    }

    /// Another replica of the same configuration.
    async fn replica(&self) -> Server {
        Server::start(self.dir.path(), &[("REDIS_URL", self.redis.url().as_str())]).await
    }
}

#[tokio::test]
async fn replicas_trust_the_same_tool_definitions() {
    // One MCP server behind two replicas. It changes a tool after the
    // first replica pinned it; a replica started after the change holds
    // it too (it does not trust what it lists first) and serves the
    // trusted definition, a change accepted on one replica is taken by
    // the other, and a replica started after the acceptance trusts the
    // accepted definition.
    let pulled = require!(Pulled::start().await);
    let (a, first) = (&pulled.a, FIRST_ECHO);
    let [held_a] = &held_changes(a).await[..] else {
        panic!("one change held on a")
    };
    assert_eq!(held_a["tool"], "echo");
    // A replica that starts now lists the changed definition first: it
    // holds the change too, and serves the definition a trusted
    // (`keep_old`), which it never saw itself.
    let b = pulled.replica().await;
    let [held_b] = &held_changes(&b).await[..] else {
        panic!("one change held on b")
    };
    tools_until(&b, "replica b serves the trusted definition", |d, _| {
        d["py_echo"] == first
    })
    .await;
    assert_eq!(held_b["pinned_fingerprint"], held_a["pinned_fingerprint"]);
    assert_eq!(held_b["pinned"], held_a["pinned"]);
    assert_eq!(held_b["fingerprint"], held_a["fingerprint"]);
    assert!(
        held_b["now"]["description"]
            .as_str()
            .unwrap()
            .contains("id_rsa")
    );
    // Accepted on b: b takes it, and a (polling) takes it too.
    let (status, accepted) = post(
        &b.url("/v1/tool-changes/py/echo"),
        BOB,
        json!({"fingerprint": held_b["fingerprint"]}),
    )
    .await;
    assert_eq!(status, 200, "{accepted}");
    for s in [&b, a] {
        tools_until(s, "the accepted definition is served", |d, _| {
            d["py_echo"].as_str().is_some_and(|t| t.contains("id_rsa"))
        })
        .await;
        let (_, held) = get(&s.url("/v1/tool-changes"), Some(BOB)).await;
        assert_eq!(held["data"], json!([]), "{held}");
    }
    // A replica started now trusts the accepted definition at once.
    let c = pulled.replica().await;
    tools_until(
        &c,
        "a new replica serves the accepted definition",
        |d, _| d["py_echo"].as_str().is_some_and(|t| t.contains("id_rsa")),
    )
    .await;
    let (_, held) = get(&c.url("/v1/tool-changes"), Some(BOB)).await;
    assert_eq!(held["data"], json!([]), "{held}");
}

#[tokio::test]
async fn a_restart_trusts_what_was_trusted_before_it() {
    // Without Redis, pins are kept in the embedded store: a server that
    // changed a tool while the gateway was down (or before it restarted)
    // does not get the change trusted by the restart.
    let mcp = require!(crate::mcp_support::HttpServer::start().await);
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            &format!(
                "auth:\n  keys:\n    - name: bob\n      sha256: {}\n      approver: true\n",
                toolgate_engine::identity::auth::digest_hex(BOB)
            ),
        ),
        (
            "tools.d/mcp.yaml",
            &format!(
                "mcp_servers:\n  - name: py\n    transport: http\n    url: {}\n    tools: {{ include: [echo, rug_pull], prefix: py_ }}\n",
                mcp.url
            ),
        ),
    ]);
    let first = "Echo a message back.";
    let mut a = Server::start(dir.path(), &[]).await;
    tools_until(&a, "the server is listed", |d, _| d["py_echo"] == first).await;
    a.signal(Signal::SIGTERM);
    assert_eq!(a.exited().await, 0);
    // The server changes the tool while the gateway is down.
    let pulled = Server::start(dir.path(), &[]).await;
    tools_until(&pulled, "the server is listed again", |d, _| {
        d.get("py_rug_pull").is_some()
    })
    .await;
    let (status, _) = post(
        &pulled.url("/v1/tools/py_rug_pull/invoke"),
        BOB,
        json!({"arguments": {}}),
    )
    .await;
    assert_eq!(status, 200);
    drop(pulled);
    let b = Server::start(dir.path(), &[]).await;
    let [held] = &held_changes(&b).await[..] else {
        panic!("one change held after the restart")
    };
    assert!(
        held["now"]["description"]
            .as_str()
            .unwrap()
            .contains("id_rsa")
    );
    tools_until(&b, "the trusted definition is served", |d, _| {
        d["py_echo"] == first
    })
    .await;
    assert!(dir.path().join(".toolgate/pins/pins.json").exists());
}

#[tokio::test]
async fn a_redis_that_lost_its_pins_changes_no_replica_s_trust() {
    // Redis is flushed while a replica holds a changed tool; a replica
    // started then records what the server lists now, as seen first. The
    // running replica keeps the definition it trusted: only a change a
    // person accepted replaces a pin a replica holds.
    let pulled = require!(Pulled::start().await);
    let (a, first, url) = (&pulled.a, FIRST_ECHO, pulled.redis.url());
    held_changes(a).await;
    let flushed = std::process::Command::new("redis-cli")
        .args(["-u", &url, "FLUSHALL"])
        .output()
        .expect("redis-cli (Debian's redis-tools, beside redis-server) runs");
    assert!(flushed.status.success(), "{flushed:?}");
    let b = pulled.replica().await;
    tools_until(&b, "replica b lists the server", |d, _| {
        d.get("py_echo").is_some()
    })
    .await;
    // Replica a polls every 2 s: give it three rounds.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (_, listing) = get(&a.url("/v1/tools"), Some(BOB)).await;
    let echo = listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "py_echo")
        .map(|t| t["function"]["description"].clone());
    assert_eq!(echo, Some(json!(first)), "{listing}");
    assert_eq!(held_changes(a).await.len(), 1);
}
