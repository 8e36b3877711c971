//! The builtin tools end to end, through the catalog and the executor (and
//! the HTTP API where the request's context matters): what they do, and
//! every input they must refuse.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use toolgate::context::CallContext;
use toolgate_builtins::address::AddressPolicy;
use toolgate_builtins::web_fetch::Fetcher;
use toolgate_config::format::WebFetchDecl;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, ToolCall, ToolResult, http_client};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{ConfigDir, Gateway, load_catalog, processes_with, repo_root, toolgate_bin};

/// A configuration whose `builtins:` section is `builtins` (YAML, indented
/// by two spaces), with the workspace in `workspace`.
fn config(workspace: &Path, builtins: &str) -> ConfigDir {
    ConfigDir::new(&[(
        "toolgate.yaml",
        &format!(
            "builtins:\n  workspace: {}\n{builtins}",
            workspace.display()
        ),
    )])
}

async fn call(catalog: &Catalog, name: &str, args: Value) -> ToolResult {
    call_in(catalog, name, args, None).await
}

async fn call_in(catalog: &Catalog, name: &str, args: Value, project: Option<&str>) -> ToolResult {
    let ctx = CallContext::new()
        .with_project(project.map(str::to_owned))
        .unwrap();
    Executor::new(http_client().unwrap())
        .run(
            catalog,
            &ToolCall {
                id: "t".into(),
                name: name.into(),
                arguments: args,
            },
            &ctx,
        )
        .await
}

fn ok(r: &ToolResult) -> &Value {
    assert!(r.success, "{:?}", r.error.as_ref().map(ToString::to_string));
    r.data.as_ref().unwrap()
}

/// The error's code and message.
fn err(r: &ToolResult) -> (&'static str, String) {
    assert!(!r.success, "expected an error, got {:?}", r.data);
    let e = r.error.as_ref().unwrap();
    (e.code(), e.to_string())
}

const FILE_TOOLS: &str = "  enabled: [file_read, file_write, file_edit, file_list, file_exists, file_mkdir, file_delete]\n";

struct Files {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
    _dir: ConfigDir,
    catalog: Catalog,
}

impl Files {
    fn workspace(&self) -> PathBuf {
        self.root.path().join("ws")
    }
}

fn files() -> Files {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let dir = config(&ws, FILE_TOOLS);
    let catalog = load_catalog(dir.path(), &[]);
    Files {
        root,
        outside,
        _dir: dir,
        catalog,
    }
}

#[tokio::test]
async fn file_tools_work_inside_the_workspace() {
    let f = files();
    let c = &f.catalog;
    let r = call(
        c,
        "file_write",
        json!({"path": "a/b/c.txt", "content": "one\n"}),
    )
    .await;
    assert_eq!(ok(&r)["bytes_written"], json!(4));
    let r = call(
        c,
        "file_write",
        json!({"path": "a/b/c.txt", "content": "two\n", "mode": "append"}),
    )
    .await;
    ok(&r);
    assert_eq!(
        std::fs::read_to_string(f.workspace().join("a/b/c.txt")).unwrap(),
        "one\ntwo\n"
    );
    let r = call(c, "file_read", json!({"path": "./a/b/c.txt"})).await;
    assert_eq!(ok(&r), &json!("one\ntwo\n"));
    let r = call(
        c,
        "file_read",
        json!({"path": "a/b/c.txt", "start_line": 2, "line_count": 1}),
    )
    .await;
    assert_eq!(ok(&r), &json!("two\n"));

    let r = call(
        c,
        "file_edit",
        json!({"path": "a/b/c.txt", "old_text": "two", "new_text": "2"}),
    )
    .await;
    assert_eq!(ok(&r)["replacements"], json!(1));
    assert_eq!(
        std::fs::read_to_string(f.workspace().join("a/b/c.txt")).unwrap(),
        "one\n2\n"
    );

    let r = call(c, "file_exists", json!({"path": "a/b"})).await;
    assert_eq!(
        ok(&r),
        &json!({"path": "a/b", "exists": true, "type": "dir"})
    );
    let r = call(c, "file_exists", json!({"path": "nope.txt"})).await;
    assert_eq!(ok(&r)["exists"], json!(false));

    let r = call(c, "file_mkdir", json!({"path": "x/y/z"})).await;
    assert_eq!(ok(&r)["created"], json!(true));
    std::fs::write(f.workspace().join("x/y/z/n.md"), "#").unwrap();
    std::fs::write(f.workspace().join("top.md"), "#").unwrap();

    let r = call(c, "file_list", json!({})).await;
    let names: Vec<&str> = ok(&r)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "top.md", "x"]);
    let r = call(c, "file_list", json!({"glob": "**/*.md"})).await;
    let names: Vec<&str> = ok(&r)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["top.md", "x/y/z/n.md"]);
    let r = call(c, "file_list", json!({"path": "x", "glob": "*"})).await;
    assert_eq!(ok(&r)["entries"][0]["path"], json!("y"));

    let r = call(c, "file_delete", json!({"path": "x"})).await;
    let (code, msg) = err(&r);
    assert_eq!(code, "tool_error");
    assert!(
        msg.contains("not empty") && msg.contains("recursive"),
        "{msg}"
    );
    let r = call(c, "file_delete", json!({"path": "x", "recursive": true})).await;
    assert_eq!(ok(&r)["deleted"], json!("dir"));
    assert!(!f.workspace().join("x").exists());
    let r = call(c, "file_delete", json!({"path": "top.md"})).await;
    assert_eq!(ok(&r)["deleted"], json!("file"));
}

#[tokio::test]
async fn file_edit_needs_exactly_one_match() {
    let f = files();
    std::fs::write(f.workspace().join("t.txt"), "a x a x a").unwrap();
    let r = call(
        &f.catalog,
        "file_edit",
        json!({"path": "t.txt", "old_text": "y", "new_text": "z"}),
    )
    .await;
    let (_, msg) = err(&r);
    assert!(msg.contains("0 occurrences"), "{msg}");
    let r = call(
        &f.catalog,
        "file_edit",
        json!({"path": "t.txt", "old_text": "a", "new_text": "z"}),
    )
    .await;
    let (_, msg) = err(&r);
    assert!(msg.contains("occurs 3 times"), "{msg}");
    // Nothing changed.
    assert_eq!(
        std::fs::read_to_string(f.workspace().join("t.txt")).unwrap(),
        "a x a x a"
    );
}

#[tokio::test]
async fn file_tools_refuse_dot_dot_and_absolute_paths() {
    let f = files();
    let secret = f.outside.path().join("secret.txt");
    let escapes = [
        "../outside.txt",
        "a/../../outside.txt",
        "..",
        secret.to_str().unwrap(),
        "/etc/passwd",
    ];
    for tool in [
        "file_read",
        "file_write",
        "file_edit",
        "file_exists",
        "file_mkdir",
        "file_delete",
        "file_list",
    ] {
        for path in escapes {
            let args = match tool {
                "file_write" => json!({"path": path, "content": "x"}),
                "file_edit" => json!({"path": path, "old_text": "top", "new_text": "x"}),
                _ => json!({"path": path}),
            };
            let r = call(&f.catalog, tool, args).await;
            let (code, msg) = err(&r);
            assert_eq!(code, "refused", "{tool} {path}: {msg}");
            assert!(
                msg.contains("`..` is not allowed") || msg.contains("absolute path"),
                "{tool} {path}: {msg}"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret");
    assert!(!f.root.path().join("outside.txt").exists());
    let r = call(&f.catalog, "file_delete", json!({"path": "."})).await;
    assert_eq!(err(&r).0, "refused");
    assert!(f.workspace().exists());
}

#[cfg(unix)]
#[tokio::test]
async fn file_tools_refuse_symlinks_that_lead_outside() {
    use std::os::unix::fs::symlink;
    let f = files();
    let ws = f.workspace();
    symlink(f.outside.path(), ws.join("out_dir")).unwrap();
    symlink(f.outside.path().join("secret.txt"), ws.join("out_file")).unwrap();
    symlink("../", ws.join("up")).unwrap();
    std::fs::write(ws.join("inside.txt"), "fine").unwrap();
    symlink("inside.txt", ws.join("in_link")).unwrap();

    let cases = [
        ("file_read", json!({"path": "out_file"})),
        ("file_read", json!({"path": "out_dir/secret.txt"})),
        ("file_read", json!({"path": "up/ws/inside.txt"})),
        (
            "file_write",
            json!({"path": "out_dir/new.txt", "content": "x"}),
        ),
        (
            "file_write",
            json!({"path": "out_file", "content": "overwritten"}),
        ),
        (
            "file_write",
            json!({"path": "out_dir/deeper/new.txt", "content": "x"}),
        ),
        (
            "file_edit",
            json!({"path": "out_file", "old_text": "top", "new_text": "x"}),
        ),
        ("file_exists", json!({"path": "out_file"})),
        ("file_mkdir", json!({"path": "out_dir/made"})),
        ("file_list", json!({"path": "out_dir"})),
        ("file_delete", json!({"path": "out_dir/secret.txt"})),
    ];
    for (tool, args) in cases {
        let r = call(&f.catalog, tool, args.clone()).await;
        let (code, msg) = err(&r);
        assert_eq!(code, "refused", "{tool} {args}: {msg}");
        assert!(
            msg.contains("outside the workspace"),
            "{tool} {args}: {msg}"
        );
    }
    // Nothing outside was touched.
    assert_eq!(
        std::fs::read_to_string(f.outside.path().join("secret.txt")).unwrap(),
        "top secret"
    );
    let outside: Vec<_> = std::fs::read_dir(f.outside.path()).unwrap().collect();
    assert_eq!(outside.len(), 1);

    // A symlink inside the workspace, to inside, works.
    let r = call(&f.catalog, "file_read", json!({"path": "in_link"})).await;
    assert_eq!(ok(&r), &json!("fine"));
    // Listing shows links without following them.
    let r = call(&f.catalog, "file_list", json!({"glob": "**"})).await;
    let entries = ok(&r)["entries"].as_array().unwrap().clone();
    assert!(
        entries
            .iter()
            .all(|e| !e["path"].as_str().unwrap().contains("secret")),
        "{entries:?}"
    );
    assert!(entries.contains(&json!({"path": "out_dir", "type": "symlink", "size": null})));
    // Deleting a link removes the link, never its target.
    let r = call(&f.catalog, "file_delete", json!({"path": "out_file"})).await;
    assert_eq!(ok(&r)["deleted"], json!("symlink"));
    assert!(f.outside.path().join("secret.txt").exists());
}

#[tokio::test]
async fn a_project_gets_its_own_folder() {
    let f = files();
    let r = call_in(
        &f.catalog,
        "file_write",
        json!({"path": "notes.txt", "content": "acme's"}),
        Some("acme"),
    )
    .await;
    ok(&r);
    assert_eq!(
        std::fs::read_to_string(f.workspace().join("acme/notes.txt")).unwrap(),
        "acme's"
    );
    let r = call_in(
        &f.catalog,
        "file_read",
        json!({"path": "notes.txt"}),
        Some("other"),
    )
    .await;
    assert!(err(&r).1.contains("does not exist"));
    let r = call_in(
        &f.catalog,
        "file_read",
        json!({"path": "../acme/notes.txt"}),
        Some("other"),
    )
    .await;
    assert_eq!(err(&r).0, "refused");
    let r = call(&f.catalog, "file_read", json!({"path": "acme/notes.txt"})).await;
    assert_eq!(ok(&r), &json!("acme's"));
}

#[tokio::test]
async fn the_invoke_api_takes_the_project_from_a_header() {
    let f = files();
    let ws = f.workspace();
    let dir = config(&ws, FILE_TOOLS);
    let gateway = Gateway::start(load_catalog(dir.path(), &[])).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(gateway.url("/v1/tools/file_write/invoke"))
        .header("X-Toolgate-Project", "team-7")
        .json(&json!({"arguments": {"path": "a.txt", "content": "hi"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        std::fs::read_to_string(ws.join("team-7/a.txt")).unwrap(),
        "hi"
    );
    for bad in ["..", "../x", ".hidden", "a/b"] {
        let resp = client
            .post(gateway.url("/v1/tools/file_write/invoke"))
            .header("X-Toolgate-Project", bad)
            .json(&json!({"arguments": {"path": "a.txt", "content": "hi"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{bad}");
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("X-Toolgate-Project"),
            "{body}"
        );
    }
    // The context stays out of what the model sees.
    let tools: Value = client
        .get(gateway.url("/v1/tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = tools.to_string();
    assert!(
        !text.contains("ToolContext") && !text.contains("\"ctx\""),
        "{text}"
    );
    // A refusal is a 422.
    let resp = client
        .post(gateway.url("/v1/tools/file_read/invoke"))
        .json(&json!({"arguments": {"path": "/etc/passwd"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
}

#[tokio::test]
async fn the_chat_loop_injects_the_project() {
    let ws = tempfile::tempdir().unwrap();
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            &format!(
                "builtins:\n  workspace: {}\n  enabled: [file_write]\nupstreams:\n  - name: mock\n    base_url: {}\nmodels:\n  - model: \"mock-*\"\n    upstream: mock\n",
                ws.path().display(),
                model.base_url()
            ),
        ),
        ("tool-sets/files.yaml", "name: files\ntools: [file_write]\n"),
    ]);
    let gateway = Gateway::start(load_catalog(dir.path(), &[])).await;
    let resp = reqwest::Client::new()
        .post(gateway.url("/v1/chat/completions"))
        .header("X-Toolgate-Project", "acme")
        .header("X-Tool-Set", "files")
        .json(&json!({
            "model": "mock-model",
            "messages": [{"role": "user", "content": "call file_write {\"path\": \"from-chat.txt\", \"content\": \"written by the model\"}"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("acme/from-chat.txt")).unwrap(),
        "written by the model"
    );
    // The model was offered the strict schema, without the context.
    let offered = &model.requests()[0]["tools"][0]["function"];
    assert_eq!(offered["strict"], json!(true));
    assert!(offered["parameters"]["properties"].get("ctx").is_none());
}

#[tokio::test]
async fn exec_is_off_unless_enabled() {
    let ws = tempfile::tempdir().unwrap();
    let dir = config(ws.path(), "  enabled: [calculator]\n");
    let catalog = load_catalog(dir.path(), &[]);
    let r = call(&catalog, "exec", json!({"command": "echo hi"})).await;
    assert_eq!(err(&r).0, "unknown_tool");
    // Also not when the whole file says nothing about builtins.
    let dir = ConfigDir::new(&[]);
    let catalog = load_catalog(dir.path(), &[]);
    assert!(catalog.tool("exec").is_none());
    assert!(catalog.tools().next().is_none());
}

fn exec_catalog(ws: &Path, extra: &str) -> (ConfigDir, Catalog) {
    let dir = config(ws, &format!("  enabled: [exec]\n{extra}"));
    let catalog = load_catalog(dir.path(), &[]);
    (dir, catalog)
}

#[tokio::test]
async fn exec_runs_in_the_workspace_and_reports_the_exit_code() {
    let ws = tempfile::tempdir().unwrap();
    let (_d, catalog) = exec_catalog(ws.path(), "");
    let r = call(
        &catalog,
        "exec",
        json!({"command": "echo out; echo err >&2; pwd; exit 7"}),
    )
    .await;
    let v = ok(&r);
    assert_eq!(v["exit_code"], json!(7));
    assert_eq!(
        v["stdout"],
        json!(format!(
            "out\n{}\n",
            ws.path().canonicalize().unwrap().display()
        ))
    );
    assert_eq!(v["stderr"], json!("err\n"));
    let r = call(&catalog, "exec", json!({"command": "  "})).await;
    assert_eq!(err(&r).0, "tool_error");
}

#[tokio::test]
async fn exec_output_is_cut_at_ten_thousand_characters() {
    let ws = tempfile::tempdir().unwrap();
    let (_d, catalog) = exec_catalog(ws.path(), "");
    let r = call(
        &catalog,
        "exec",
        json!({"command": "head -c 25000 /dev/zero | tr '\\0' x"}),
    )
    .await;
    let v = ok(&r);
    let out = v["stdout"].as_str().unwrap();
    let (kept, marker) = out.split_once('\n').unwrap();
    assert_eq!(kept.len(), 10_000);
    assert!(kept.bytes().all(|b| b == b'x'));
    assert!(marker.contains("15000 more characters"), "{marker}");
    assert_eq!(v["truncated"], json!(true));
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn exec_timeout_kills_the_command_and_its_process_group() {
    let ws = tempfile::tempdir().unwrap();
    let (_d, catalog) = exec_catalog(ws.path(), "  exec: { timeout: 30s }\n");
    // (In the command's PID namespace, `$$` and `$!` are not the pids this
    // test sees: the processes are found by a marker in their command line,
    // which both the shell and the sleep carry.)
    let r = call(
        &catalog,
        "exec",
        json!({
            "command": "sleep 300.7113 & echo started > shell.started; wait",
            "timeout_seconds": 1
        }),
    )
    .await;
    let (code, msg) = err(&r);
    assert_eq!(code, "timeout", "{msg}");
    assert!(ws.path().join("shell.started").exists());
    // Killed processes may take a moment to be reaped by their parent.
    for _ in 0..100 {
        if processes_with("300.7113").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        processes_with("300.7113"),
        Vec::<u32>::new(),
        "the shell or its background child survived"
    );
}

/// What a command never needs is refused by the sandbox's seccomp filter:
/// tracing, the kernel's keyrings and performance counters (each of which
/// works inside the sandbox's namespaces without the filter), and new
/// namespaces (which a kernel may also refuse on its own in a nested user
/// namespace, so that line alone proves less); and an allocation past
/// `sandbox.memory_mb` fails.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[tokio::test]
async fn exec_is_refused_what_a_command_never_needs() {
    let ws = tempfile::tempdir().unwrap();
    let (_d, catalog) = exec_catalog(ws.path(), "  sandbox: { memory_mb: 1024 }\n");
    // Raw system calls by number (x86_64), through ctypes: ptrace(PTRACE_TRACEME),
    // keyctl(KEYCTL_GET_KEYRING_ID, session), perf_event_open(NULL, ...):
    // outside the filter the first succeeds and the others fail with
    // another error than EPERM.
    let probe = r#"python3 -c '
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [("ptrace", 101, (0, 0, 0, 0)), ("keyctl", 250, (0, -3, 0)), ("perf_event_open", 298, (0, 0, -1, -1, 0))]:
    r = libc.syscall(nr, *args)
    print(name, "refused" if r == -1 and ctypes.get_errno() == errno.EPERM else "allowed")
'; unshare -U true && echo unshare allowed || echo unshare refused"#;
    let r = call(&catalog, "exec", json!({ "command": probe })).await;
    let v = ok(&r);
    assert_eq!(
        v["stdout"],
        json!("ptrace refused\nkeyctl refused\nperf_event_open refused\nunshare refused\n"),
        "{v}"
    );
    let r = call(
        &catalog,
        "exec",
        json!({"command": "python3 -c 'x = bytearray(256 << 20); print(len(x) >> 20)'; python3 -c 'bytearray(2 << 30)'"}),
    )
    .await;
    let v = ok(&r);
    assert_eq!(v["stdout"], json!("256\n"), "{v}");
    assert!(v["stderr"].as_str().unwrap().contains("MemoryError"), "{v}");
    assert_eq!(v["exit_code"], json!(1));
}

fn python_catalog(ws: &Path, python: &str) -> (ConfigDir, Catalog) {
    let dir = config(
        ws,
        &format!("  enabled: [execute_python]\n  python: {python}\n"),
    );
    let catalog = load_catalog(dir.path(), &[]);
    (dir, catalog)
}

#[tokio::test]
async fn python_reaches_no_os_below_lenient_and_the_workspace_at_lenient() {
    let ws = tempfile::tempdir().unwrap();
    let code = json!({"code": "import os\nprint(os.getcwd())"});
    let (_d, standard) = python_catalog(ws.path(), "{ strictness: standard }");
    let r = call(
        &standard,
        "execute_python",
        json!({"code": "import os\nprint(os.getenv('HOME'))"}),
    )
    .await;
    let (kind, msg) = err(&r);
    assert_eq!(kind, "tool_error", "{msg}");
    assert!(msg.contains("PermissionError"), "{msg}");
    assert!(msg.contains("no access to files"), "{msg}");

    let (_d, lenient) = python_catalog(ws.path(), "{ strictness: lenient }");
    let r = call(&lenient, "execute_python", code).await;
    let out = ok(&r)["stdout"].as_str().unwrap().trim().to_owned();
    assert_eq!(out, ws.path().canonicalize().unwrap().display().to_string());
}

#[tokio::test]
async fn python_levels_compute_and_reach_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let (_d, standard) = python_catalog(ws.path(), "{ strictness: standard }");
    let (_d2, strict) = python_catalog(ws.path(), "{ strictness: strict }");

    // Computation with the interpreter's modules; the last expression's
    // value comes back too.
    let r = call(&standard, "execute_python", json!({"code": "import json, math\nprint(json.dumps({'m': sum([1, 2, 3]) / 3}))\n[x * x for x in range(4)]"})).await;
    assert_eq!(ok(&r)["stdout"], json!("{\"m\": 2.0}\n"));
    assert_eq!(ok(&r)["result"], json!([0, 1, 4, 9]));
    let r = call(
        &strict,
        "execute_python",
        json!({"code": "import math\nprint(math.sqrt(16))"}),
    )
    .await;
    assert_eq!(ok(&r)["stdout"], json!("4.0\n"));

    // What used to be refused by an allow-list does not exist at all.
    let absent = [
        ("import subprocess", "ModuleNotFoundError"),
        ("from os import system", "ImportError"),
        ("import importlib", "ModuleNotFoundError"),
        ("open('/etc/passwd').read()", "PermissionError"),
        ("import os\nos.environ['HOME']", "PermissionError"),
        ("print(().__class__.__bases__)", "AttributeError"),
        ("__import__('os')", "NameError"),
        ("eval('1+1')", "NameError"),
        ("exec('x=1')", "NameError"),
    ];
    for (code, expected) in absent {
        for catalog in [&standard, &strict] {
            let r = call(catalog, "execute_python", json!({ "code": code })).await;
            let (kind, msg) = err(&r);
            assert_eq!(kind, "tool_error", "{code}: {msg}");
            assert!(msg.contains(expected), "{code}: {msg}");
        }
    }
    // Errors in the code come back with their traceback.
    let r = call(&standard, "execute_python", json!({"code": "1/0"})).await;
    let (_, msg) = err(&r);
    assert!(msg.contains("ZeroDivisionError"), "{msg}");
    assert!(msg.contains("line 1"), "{msg}");
    let r = call(
        &standard,
        "execute_python",
        json!({"code": "def f(:\n  pass"}),
    )
    .await;
    assert!(err(&r).1.contains("SyntaxError"), "{}", err(&r).1);
    // Time is bounded.
    let r = call(
        &strict,
        "execute_python",
        json!({"code": "while True:\n  pass"}),
    )
    .await;
    assert_eq!(err(&r).0, "timeout", "{}", err(&r).1);
}

#[tokio::test]
async fn python_has_a_memory_limit_and_a_clean_environment() {
    let ws = tempfile::tempdir().unwrap();
    let (_d, lenient) = python_catalog(ws.path(), "{ strictness: lenient, memory_mb: 256 }");
    let r = call(
        &lenient,
        "execute_python",
        json!({"code": "b = bytearray(1024 * 1024 * 1024)\nprint(len(b))"}),
    )
    .await;
    let (_, msg) = err(&r);
    assert!(msg.contains("MemoryError"), "{msg}");
    // Nothing of the gateway's environment reaches the child but `PATH`
    // (an interpreter shim, like pyenv's, may add its own variables).
    assert!(std::env::var("CARGO_PKG_NAME").is_ok());
    let r = call(
        &lenient,
        "execute_python",
        json!({"code": "import os, json\nprint(json.dumps(dict(os.environ)))"}),
    )
    .await;
    let env: Value = serde_json::from_str(ok(&r)["stdout"].as_str().unwrap()).unwrap();
    // (What a shell sets by itself is no leak.)
    let own = ["PATH", "HOME", "LANG", "SHLVL", "PWD", "OLDPWD", "_"];
    for (key, value) in std::env::vars() {
        if !own.contains(&key.as_str()) && !key.starts_with("PYENV") {
            assert!(
                env.get(&key).is_none_or(|v| v != &json!(value)),
                "{key} leaked"
            );
        }
    }
    assert!(env.get("CARGO_PKG_NAME").is_none(), "{env}");
    assert_eq!(env["HOME"], json!(ws.path().display().to_string()));
    assert_eq!(env["LANG"], json!("C.UTF-8"));
}

#[tokio::test]
async fn python_missing_interpreter_is_an_error_result() {
    let ws = tempfile::tempdir().unwrap();
    let (_d, c) = python_catalog(
        ws.path(),
        "{ strictness: lenient, interpreter: /nonexistent/python3 }",
    );
    let r = call(&c, "execute_python", json!({"code": "print(1)"})).await;
    let (kind, msg) = err(&r);
    assert_eq!(kind, "tool_error");
    assert!(msg.contains("cannot start `/nonexistent/python3`"), "{msg}");
}

/// A local web server for web_fetch: HTML, JSON, binary, redirects; counts
/// the requests it gets.
struct Site {
    addr: std::net::SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Site {
    async fn start() -> Site {
        Site::start_on([127, 0, 0, 1]).await
    }

    async fn start_on(ip: [u8; 4]) -> Site {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        let app = Router::new()
            .route("/page", get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    "<!doctype html><html><head><title>Rust facts</title><script>var tracking = 1;</script></head>\
                     <body><nav>Home | About</nav><article><h1>Rust facts</h1>\
                     <p>Rust is a systems programming language focused on <b>safety</b>, speed and concurrency. \
                     It achieves memory safety without a garbage collector, using ownership and borrowing.</p>\
                     <p>Cargo is its build tool and package manager; its registry hosts the packages of the community.</p>\
                     <ul><li>Ownership</li><li>Borrowing</li></ul>\
                     <p>See <a href=\"https://www.rust-lang.org/\">the website</a>.</p></article></body></html>",
                )
            }))
            .route("/data", get(|| async {
                ([(header::CONTENT_TYPE, "application/json")], r#"{"b":[1,2],"a":{"c":"d"}}"#)
            }))
            .route("/plain", get(|| async { "just text" }))
            .route("/image", get(|| async {
                ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', b'N', b'G', 0, 1, 2, 3])
            }))
            .route("/missing", get(|| async { (StatusCode::NOT_FOUND, "no such page") }))
            .route("/to-localhost", get(|headers: HeaderMap| async move {
                let host = headers.get(header::HOST).unwrap().to_str().unwrap().to_owned();
                let port = host.rsplit(':').next().unwrap().to_owned();
                redirect(&format!("http://localhost:{port}/data"))
            }))
            .route("/to-loopback-ip", get(|headers: HeaderMap| async move {
                let host = headers.get(header::HOST).unwrap().to_str().unwrap().to_owned();
                let port = host.rsplit(':').next().unwrap().to_owned();
                redirect(&format!("http://127.0.0.1:{port}/data"))
            }))
            .route("/to-data", get(|| async { redirect("/data") }))
            .layer(axum::middleware::from_fn(move |req, next: axum::middleware::Next| {
                let counter = Arc::clone(&counter);
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    next.run(req).await
                }
            }));
        let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::from(ip), 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Site { addr, hits }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn redirect(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to.to_owned())]).into_response()
}

fn web_catalog(allow_private: bool, max_chars: usize) -> (ConfigDir, Catalog) {
    let ws = std::env::temp_dir();
    let dir = config(
        &ws,
        &format!(
            "  enabled: [web_fetch]\n  web_fetch: {{ allow_private: {allow_private}, max_chars: {max_chars} }}\n"
        ),
    );
    let catalog = load_catalog(dir.path(), &[]);
    (dir, catalog)
}

#[tokio::test]
async fn web_fetch_refuses_loopback_by_default() {
    let site = Site::start().await;
    let (_d, catalog) = web_catalog(false, 1000);
    let port = site.addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/data"),
        format!("http://localhost:{port}/data"),
        format!("http://[::ffff:127.0.0.1]:{port}/data"),
        format!("http://2130706433:{port}/data"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/".to_owned(),
    ] {
        let r = call(&catalog, "web_fetch", json!({ "url": url })).await;
        let (kind, msg) = err(&r);
        assert_eq!(kind, "refused", "{url}: {msg}");
        assert!(msg.contains("allow_private"), "{url}: {msg}");
    }
    for url in ["file:///etc/passwd", "ftp://example.com/x"] {
        let r = call(&catalog, "web_fetch", json!({ "url": url })).await;
        assert_eq!(err(&r).0, "refused", "{url}");
    }
    assert_eq!(site.hits(), 0, "a refused request reached the server");
}

#[tokio::test]
async fn web_fetch_renders_html_json_and_text_when_allowed() {
    let site = Site::start().await;
    let (_d, catalog) = web_catalog(true, 1000);
    let r = call(&catalog, "web_fetch", json!({"url": site.url("/page")})).await;
    let v = ok(&r);
    assert_eq!(v["kind"], json!("html"));
    assert_eq!(v["title"], json!("Rust facts"));
    let content = v["content"].as_str().unwrap();
    assert!(content.contains("**safety**"), "{content}");
    assert!(
        content.contains("[the website](https://www.rust-lang.org/)"),
        "{content}"
    );
    assert!(
        !content.contains("tracking") && !content.contains("<p>"),
        "{content}"
    );
    assert!(!content.contains("[content truncated"), "{content}");
    // The model may ask for less...
    let r = call(
        &catalog,
        "web_fetch",
        json!({"url": site.url("/page"), "max_chars": 100}),
    )
    .await;
    let (kept, marker) = ok(&r)["content"]
        .as_str()
        .unwrap()
        .split_once("\n[content truncated: ")
        .unwrap();
    assert_eq!(kept.chars().count(), 100);
    assert!(marker.ends_with(" more characters]"), "{marker}");
    // ...but not for more than the configured cap.
    let (_d2, capped) = web_catalog(true, 150);
    let r = call(
        &capped,
        "web_fetch",
        json!({"url": site.url("/page"), "max_chars": 5000}),
    )
    .await;
    let (kept, _) = ok(&r)["content"]
        .as_str()
        .unwrap()
        .split_once("\n[content truncated: ")
        .unwrap();
    assert_eq!(kept.chars().count(), 150);

    let r = call(
        &catalog,
        "web_fetch",
        json!({"url": site.url("/page"), "format": "text", "max_chars": 100}),
    )
    .await;
    let content = ok(&r)["content"].as_str().unwrap().to_owned();
    assert!(
        content.starts_with("Rust is a systems") || content.contains("Rust is a systems"),
        "{content}"
    );
    assert!(!content.contains("**"), "{content}");

    let r = call(&catalog, "web_fetch", json!({"url": site.url("/to-data")})).await;
    let v = ok(&r);
    assert_eq!(v["kind"], json!("json"));
    assert_eq!(v["url"], json!(site.url("/data")));
    assert_eq!(
        v["content"],
        json!("{\n  \"a\": {\n    \"c\": \"d\"\n  },\n  \"b\": [\n    1,\n    2\n  ]\n}")
    );

    let r = call(&catalog, "web_fetch", json!({"url": site.url("/plain")})).await;
    assert_eq!(ok(&r)["content"], json!("just text"));
    let r = call(&catalog, "web_fetch", json!({"url": site.url("/image")})).await;
    assert!(err(&r).1.contains("binary content (image/png, 8 bytes)"));
    let r = call(&catalog, "web_fetch", json!({"url": site.url("/missing")})).await;
    let (kind, msg) = err(&r);
    assert_eq!(kind, "backend_error");
    assert!(msg.contains("HTTP 404"), "{msg}");
    let r = call(&catalog, "web_fetch", json!({"url": "not a url"})).await;
    assert!(err(&r).1.contains("is not a URL"));
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn web_fetch_checks_every_redirect() {
    // The site listens on 127.0.0.2 (Linux routes all of 127/8 to the
    // loopback), and only 127.0.0.1 is refused: the first hop goes through,
    // a redirect to 127.0.0.1 (as an address, or as a name resolving to it)
    // does not, and nothing reaches it.
    let site = Site::start_on([127, 0, 0, 2]).await;
    let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
    let fetcher = Fetcher::with_policy(
        &WebFetchDecl::default(),
        AddressPolicy::custom(move |ip| ip != loopback),
    );

    let e = fetcher
        .fetch(&site.url("/to-loopback-ip"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "refused", "{e}");
    assert!(e.to_string().contains("127.0.0.1"), "{e}");
    assert_eq!(site.hits(), 1);

    let e = fetcher.fetch(&site.url("/to-localhost")).await.unwrap_err();
    assert_eq!(e.code(), "refused", "{e}");
    assert!(
        e.to_string().contains("localhost resolves to 127.0.0.1"),
        "{e}"
    );
    assert_eq!(site.hits(), 2);

    // A redirect to an allowed address is followed.
    let fetched = fetcher.fetch(&site.url("/to-data")).await.unwrap();
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.url.as_str(), site.url("/data"));
    assert_eq!(site.hits(), 4);
}

#[tokio::test]
async fn calculator_text_json_and_weather_through_the_executor() {
    let ws = tempfile::tempdir().unwrap();
    let dir = config(
        ws.path(),
        "  enabled: [calculator, text_process, json_process, get_weather]\n",
    );
    let c = load_catalog(dir.path(), &[]);
    let r = call(&c, "calculator", json!({"expression": "2*(3+4)"})).await;
    assert_eq!(ok(&r), &json!(14));
    let r = call(&c, "calculator", json!({"expression": "2 +* 3"})).await;
    let (kind, msg) = err(&r);
    assert_eq!(kind, "tool_error");
    assert!(msg.contains("unexpected `*` at position 4"), "{msg}");
    // Validation happens before the call: a precision above 15 is refused.
    let r = call(
        &c,
        "calculator",
        json!({"expression": "1", "precision": 16}),
    )
    .await;
    assert_eq!(err(&r).0, "invalid_arguments");
    // A model answering the strict schema sends null for left-out options.
    let r = call(
        &c,
        "calculator",
        json!({"expression": "1/3", "precision": null}),
    )
    .await;
    assert!((ok(&r).as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-12);
    let r = call(
        &c,
        "text_process",
        json!({"text": "a-b", "operation": "split", "pattern": "-", "replacement": null}),
    )
    .await;
    assert_eq!(ok(&r), &json!(["a", "b"]));
    let r = call(
        &c,
        "json_process",
        json!({"input": "[1,", "operation": "validate"}),
    )
    .await;
    assert_eq!(ok(&r)["valid"], json!(false));
    let r = call(
        &c,
        "get_weather",
        json!({"location": "Paris", "unit": "fahrenheit"}),
    )
    .await;
    assert_eq!(ok(&r)["unit"], json!("fahrenheit"));
    // Results of read-only builtins are cached.
    let r = call(&c, "calculator", json!({"expression": "2*(3+4)"})).await;
    assert!(r.cached);
}

#[test]
fn builtin_settings_errors_have_positions_and_hints() {
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            "builtins:\n  enabled: [calculator, calculatr, calculator]\n  exec: { timeout: 0s }\n  python: { memory_mb: 8, extra_modules: { standard: [\"os; rm\"] } }\n  web_fetch: { max_chars: 0 }\n",
        ),
        (
            "tools.d/mine.yaml",
            "tools:\n  - name: get_weather\n    description: Mine.\n    http: { url: \"https://example.com\" }\n",
        ),
    ]);
    // get_weather is not enabled here, so the YAML tool may use the name.
    let out = Catalog::load(dir.path()).unwrap_err().to_string();
    for expected in [
        "toolgate.yaml:2:25: error: there is no builtin tool `calculatr` — name one of: calculator, text_process",
        "toolgate.yaml:2:36: error: builtin `calculator` is enabled twice",
        "toolgate.yaml:3:20: error: the timeout is zero",
        "toolgate.yaml:4:24: error: 8 MiB is too little",
        "`standard` runs on the gateway's own interpreter, which has no file, network or process access and only its own modules",
        "toolgate.yaml:5:27: error: the limit is zero",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(!out.contains("tool `get_weather` is also"), "{out}");
    assert!(out.starts_with("configuration has 6 errors"), "{out}");
}

#[test]
fn a_yaml_tool_with_a_builtins_name_is_an_error_naming_both() {
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", "builtins:\n  enabled: [calculator]\n"),
        (
            "tools.d/mine.yaml",
            "tools:\n  - name: calculator\n    description: Mine.\n    http: { url: \"https://example.com\" }\n",
        ),
    ]);
    let out = Catalog::load(dir.path()).unwrap_err().to_string();
    assert!(
        out.contains("tools.d/mine.yaml:2:11: error: tool `calculator` is also registered as the builtin tool `calculator` (gateway/builtins/src/calculator.rs:"),
        "{out}"
    );
    assert!(
        out.contains("remove the builtin from `builtins.enabled`"),
        "{out}"
    );
}

#[test]
fn tool_sets_name_builtins_like_any_tool() {
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            "builtins:\n  enabled: [calculator, file_read, file_write]\n",
        ),
        (
            "tool-sets/a.yaml",
            "name: a\ntools: [\"file_*\", calculator]\n",
        ),
        ("tool-sets/b.yaml", "name: b\ntools: [file_delete]\n"),
    ]);
    // file_delete is a builtin but not enabled: the set names nothing.
    let out = Catalog::load(dir.path()).unwrap_err().to_string();
    assert!(
        out.contains("tool-sets/b.yaml") && out.contains("file_delete"),
        "{out}"
    );
    std::fs::remove_file(dir.path().join("tool-sets/b.yaml")).unwrap();
    let catalog = Catalog::load(dir.path()).unwrap();
    let set = catalog.set("a").unwrap();
    assert_eq!(set.tools, ["file_read", "file_write", "calculator"]);
}

fn toolgate(args: &[&str]) -> (i32, String, String) {
    toolgate_tests::run_cli(&toolgate_bin(), args)
}

#[test]
fn the_cli_runs_builtins_of_the_shipped_configuration() {
    let root = repo_root();
    let root = root.to_str().unwrap();
    let (code, out, err) = toolgate(&[
        "call",
        "calculator",
        "--config",
        root,
        "--args",
        r#"{"expression": "2*(3+4)"}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "14\n");

    let (code, out, _) = toolgate(&["tools", "--config", root]);
    assert_eq!(code, 0);
    let kinds: Vec<(&str, &str)> = out
        .lines()
        .map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next().unwrap(), parts.next().unwrap())
        })
        .collect();
    assert!(kinds.contains(&("geocode", "http")), "{out}");
    assert!(kinds.contains(&("calculator", "builtin")), "{out}");
    assert!(kinds.contains(&("file_read", "builtin")), "{out}");
    assert!(
        !kinds.iter().any(|(n, _)| *n == "exec"),
        "exec must stay off: {out}"
    );
}
