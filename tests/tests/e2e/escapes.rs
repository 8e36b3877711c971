//! The escape suite: model-written code trying to get out, as an attacker
//! would, against the three places code runs — the gateway's interpreter
//! (`execute_python` at `standard` and `strict`, and code mode's
//! programs), lenient Python (CPython in the children's sandbox) and
//! `exec`. Each case is its own test; each asserts that the attempt got
//! nothing: no file outside the workspace, none of the gateway's memory,
//! secrets or environment, no network, no process outliving the call, no
//! unbounded time, memory, recursion or output.
//!
//! The test process plays the gateway: its environment holds a secret
//! (`CARGO_MANIFEST_DIR`), a file outside the workspace holds another, and
//! it listens on a local port that no code may reach.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::context::CallContext;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, ToolCall, ToolResult, http_client};
use toolgate_tests::{ConfigDir, load_catalog, processes_with};

const SECRET: &str = "escape-suite-secret-7f3a";

struct Setup {
    ws: tempfile::TempDir,
    outside: tempfile::TempDir,
    dir: ConfigDir,
    catalog: Catalog,
}

fn setup() -> Setup {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), SECRET).unwrap();
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            &format!(
                "builtins:\n  workspace: {}\n  enabled: [exec, execute_python]\n  python: {{ strictness: lenient, memory_mb: 256 }}\n  exec: {{ timeout: 5s }}\n",
                ws.path().display()
            ),
        ),
        ("secret.yaml", &format!("# {SECRET}\n")),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    Setup {
        ws,
        outside,
        dir,
        catalog,
    }
}

impl Setup {
    fn secret_file(&self) -> String {
        self.outside.path().join("secret.txt").display().to_string()
    }

    async fn run(&self, tool: &str, args: Value) -> ToolResult {
        Executor::new(http_client().unwrap())
            .run(
                &self.catalog,
                &ToolCall {
                    id: "escape".into(),
                    name: tool.into(),
                    arguments: args,
                },
                &CallContext::new(),
            )
            .await
    }

    /// Interpreted Python (`strict` or `standard`).
    async fn interpreted(&self, level: &str, code: &str) -> String {
        outcome(
            &self
                .run("execute_python", json!({"code": code, "strictness": level}))
                .await,
        )
    }

    async fn lenient(&self, code: &str) -> String {
        outcome(&self.run("execute_python", json!({ "code": code })).await)
    }

    async fn exec(&self, command: &str) -> String {
        outcome(&self.run("exec", json!({ "command": command })).await)
    }
}

/// Everything a call gave back, data or error, as one text.
fn outcome(r: &ToolResult) -> String {
    match (&r.data, &r.error) {
        (_, Some(e)) => format!("error {}: {e}", e.code()),
        (Some(d), None) => d.to_string(),
        (None, None) => String::new(),
    }
}

/// No secret of the gateway in `out`.
fn no_secret(out: &str) {
    assert!(!out.contains(SECRET), "a secret escaped: {out}");
    let manifest = env!("CARGO_MANIFEST_DIR");
    assert!(
        !out.contains(manifest),
        "the gateway's environment escaped: {out}"
    );
}

fn refused(out: &str, any_of: &[&str]) {
    no_secret(out);
    assert!(
        any_of.iter().any(|w| out.contains(w)),
        "expected one of {any_of:?}: {out}"
    );
}

/// A port only the gateway listens on; `false` once anything connected.
struct Listener(TcpListener);

impl Listener {
    fn start() -> Listener {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        Listener(l)
    }
    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }
    fn untouched(&self) -> bool {
        matches!(self.0.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
    }
}

// --- the interpreter ------------------------------------------------------

#[tokio::test]
async fn interpreter_open_reads_no_file() {
    let s = setup();
    let out = s
        .interpreted("strict", &format!("open('{}').read()", s.secret_file()))
        .await;
    refused(&out, &["PermissionError"]);
}

#[tokio::test]
async fn interpreter_pathlib_reads_no_file_and_lists_no_folder() {
    let s = setup();
    let code = format!(
        "from pathlib import Path\nprint(list(Path('/').iterdir()))\nPath('{}').read_text()",
        s.secret_file()
    );
    refused(
        &s.interpreted("standard", &code).await,
        &["PermissionError"],
    );
}

#[tokio::test]
async fn interpreter_writes_no_file() {
    let s = setup();
    let target = s.outside.path().join("written");
    let code = format!("open('{}', 'w').write('x')", target.display());
    refused(
        &s.interpreted("standard", &code).await,
        &["PermissionError"],
    );
    assert!(!target.exists());
}

#[tokio::test]
async fn interpreter_has_no_environment() {
    let s = setup();
    for code in [
        "import os\nos.environ",
        "import os\nos.getenv('CARGO_MANIFEST_DIR')",
    ] {
        refused(&s.interpreted("standard", code).await, &["PermissionError"]);
    }
}

#[tokio::test]
async fn interpreter_has_no_subprocess_socket_or_ctypes() {
    let s = setup();
    for module in [
        "subprocess",
        "socket",
        "ctypes",
        "importlib",
        "signal",
        "multiprocessing",
    ] {
        let out = s.interpreted("standard", &format!("import {module}")).await;
        refused(&out, &["ModuleNotFoundError"]);
    }
}

#[tokio::test]
async fn interpreter_os_runs_no_command() {
    let s = setup();
    for code in [
        "import os\nos.system('id')",
        "import os\nos.popen('id').read()",
        "import os\nos.fork()",
    ] {
        refused(
            &s.interpreted("standard", code).await,
            &["AttributeError", "PermissionError"],
        );
    }
}

#[tokio::test]
async fn interpreter_import_and_eval_tricks_do_not_exist() {
    let s = setup();
    for code in [
        "__import__('os').system('id')",
        "eval('1+1')",
        "exec('import os')",
        "compile('1', 'x', 'eval')",
        "__builtins__",
        "globals()['__builtins__']",
    ] {
        refused(&s.interpreted("standard", code).await, &["NameError"]);
    }
}

#[tokio::test]
async fn interpreter_attribute_walks_reach_nothing() {
    let s = setup();
    for code in [
        "().__class__.__base__.__subclasses__()",
        "(1).__class__.__mro__[-1].__subclasses__()",
        "print.__self__",
        "(lambda: 0).__globals__",
        "(lambda: 0).__code__",
    ] {
        let out = s.interpreted("strict", code).await;
        refused(&out, &["AttributeError", "NameError"]);
    }
}

#[tokio::test]
async fn interpreter_module_attribute_tricks_reach_nothing() {
    let s = setup();
    for code in [
        "import json\njson.os",
        "import re\nre.sys.modules",
        "import sys\nsys.modules['os'].system('id')",
        "import sys\nsys._getframe()",
        "import typing\ntyping.sys.modules",
    ] {
        let out = s.interpreted("strict", code).await;
        refused(&out, &["AttributeError", "KeyError", "NameError"]);
    }
}

#[tokio::test]
async fn interpreter_asyncio_starts_no_process() {
    let s = setup();
    let code = "import asyncio\nasync def f():\n    await asyncio.create_subprocess_exec('id')\nasyncio.run(f())";
    refused(&s.interpreted("standard", code).await, &["AttributeError"]);
}

#[tokio::test]
async fn interpreter_infinite_loop_is_stopped() {
    let s = setup();
    let out = s.interpreted("strict", "while True:\n    pass").await;
    assert!(out.starts_with("error timeout"), "{out}");
}

#[tokio::test]
async fn interpreter_deep_recursion_is_stopped() {
    let s = setup();
    let out = s
        .interpreted("strict", "def f(n):\n    return f(n + 1)\nf(0)")
        .await;
    refused(&out, &["RecursionError"]);
}

#[tokio::test]
async fn interpreter_one_huge_value_is_refused_before_it_is_built() {
    let s = setup();
    refused(
        &s.interpreted("strict", "x = 'x' * (10 ** 12)").await,
        &["MemoryError"],
    );
}

#[tokio::test]
async fn interpreter_memory_growth_is_stopped() {
    let s = setup();
    let out = s
        .interpreted(
            "standard",
            "a = []\nwhile True:\n    a.append('y' * 1000000)",
        )
        .await;
    refused(&out, &["memory", "MemoryError"]);
}

#[tokio::test]
async fn interpreter_huge_output_is_cut() {
    let s = setup();
    let r = s
        .run(
            "execute_python",
            json!({"code": "for i in range(200000):\n    print('z' * 100)", "strictness": "standard"}),
        )
        .await;
    let data = r.data.expect("a result");
    assert_eq!(data["truncated"], json!(true));
    assert!(
        data["stdout"].as_str().unwrap().len() <= 40_000,
        "{}",
        data["stdout"].as_str().unwrap().len()
    );
}

// --- lenient Python (CPython in the sandbox) ------------------------------

#[tokio::test]
async fn lenient_reads_no_file_outside_the_workspace() {
    let s = setup();
    let out = s
        .lenient(&format!("print(open('{}').read())", s.secret_file()))
        .await;
    refused(&out, &["PermissionError", "Permission denied"]);
}

#[tokio::test]
async fn lenient_reads_not_the_gateway_s_configuration() {
    let s = setup();
    let out = s
        .lenient(&format!(
            "import os\nprint(os.listdir('{0}'))\nprint(open('{0}/secret.yaml').read())",
            s.dir.path().display()
        ))
        .await;
    refused(&out, &["PermissionError", "Permission denied"]);
}

#[tokio::test]
async fn lenient_reads_not_the_gateway_s_memory_or_environment() {
    let s = setup();
    let pid = std::process::id();
    for file in ["environ", "mem", "cmdline", "maps"] {
        let out = s
            .lenient(&format!(
                "print(open('/proc/{pid}/{file}', 'rb').read(4096))"
            ))
            .await;
        refused(
            &out,
            &["PermissionError", "Permission denied", "FileNotFoundError"],
        );
    }
}

#[tokio::test]
async fn lenient_has_no_gateway_environment() {
    let s = setup();
    let out = s
        .lenient("import os\nprint(sorted(os.environ.items()))")
        .await;
    no_secret(&out);
}

#[tokio::test]
async fn lenient_writes_nothing_outside_the_workspace() {
    let s = setup();
    let target = s.outside.path().join("written");
    let out = s
        .lenient(&format!("open('{}', 'w').write('x')", target.display()))
        .await;
    refused(&out, &["PermissionError", "Permission denied"]);
    assert!(!target.exists());
    // Inside the workspace it may.
    let out = s
        .lenient("open('mine.txt', 'w').write('ok')\nprint(open('mine.txt').read())")
        .await;
    assert!(out.contains("ok"), "{out}");
    assert!(s.ws.path().join("mine.txt").exists());
}

#[tokio::test]
async fn lenient_reaches_no_network() {
    let s = setup();
    let listener = Listener::start();
    let out = s
        .lenient(&format!(
            "import socket\ns = socket.create_connection(('127.0.0.1', {}), timeout=2)\nprint('connected')",
            listener.port()
        ))
        .await;
    assert!(!out.contains("connected\\n"), "{out}");
    assert!(listener.untouched(), "code connected to the gateway's port");
}

#[tokio::test]
async fn lenient_cannot_signal_the_gateway() {
    let s = setup();
    let pid = std::process::id();
    let out = s
        .lenient(&format!(
            "import os, signal\nos.kill({pid}, signal.SIGTERM)\nprint('sent')"
        ))
        .await;
    assert!(!out.contains("sent"), "{out}");
}

#[tokio::test]
async fn lenient_processes_do_not_outlive_the_call() {
    let s = setup();
    let code = "import subprocess\nsubprocess.Popen(['sleep', '311.4157'], start_new_session=True)\nprint('started')";
    let out = s.lenient(code).await;
    assert!(out.contains("started"), "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(processes_with("311.4157"), Vec::<u32>::new());
}

#[tokio::test]
async fn lenient_fork_bomb_is_bounded() {
    let s = setup();
    let code = "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; time.sleep(30)\n        n += 1\nexcept OSError as e:\n    print('stopped after', n, e)";
    let out = s.lenient(code).await;
    assert!(out.contains("stopped after"), "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(processes_with("time.sleep(30)").is_empty());
}

#[tokio::test]
async fn lenient_memory_bomb_is_stopped() {
    let s = setup();
    let out = s
        .lenient("b = bytearray(8 * 1024 ** 3)\nprint(len(b))")
        .await;
    refused(&out, &["MemoryError"]);
}

#[tokio::test]
async fn lenient_time_bomb_is_killed() {
    let s = setup();
    let out = s.lenient("import time\ntime.sleep(3600)").await;
    assert!(out.starts_with("error timeout"), "{out}");
}

// --- exec -----------------------------------------------------------------

#[tokio::test]
async fn exec_reads_no_file_outside_the_workspace() {
    let s = setup();
    let out = s.exec(&format!("cat {}", s.secret_file())).await;
    refused(&out, &["Permission denied"]);
}

#[tokio::test]
async fn exec_symlinks_lead_nowhere() {
    let s = setup();
    let out = s
        .exec(&format!("ln -s {} link && cat link", s.secret_file()))
        .await;
    refused(&out, &["Permission denied"]);
}

#[tokio::test]
async fn exec_sees_no_other_users_files_or_home() {
    let s = setup();
    for command in ["ls /root /home", "cat /etc/shadow", "ls /tmp"] {
        let out = s.exec(command).await;
        refused(&out, &["Permission denied", "No such file"]);
    }
}

#[tokio::test]
async fn exec_reaches_no_network() {
    let s = setup();
    let listener = Listener::start();
    let out = s
        .exec(&format!(
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {}), timeout=2); print('connected')\"",
            listener.port()
        ))
        .await;
    assert!(!out.contains("connected\\n"), "{out}");
    assert!(listener.untouched(), "exec connected to the gateway's port");
}

#[tokio::test]
async fn exec_reads_not_the_gateway_s_process() {
    let s = setup();
    let pid = std::process::id();
    let out = s
        .exec(&format!("cat /proc/{pid}/environ; ls /proc/{pid}/"))
        .await;
    refused(&out, &["Permission denied", "No such file"]);
}

#[tokio::test]
async fn exec_background_processes_do_not_outlive_the_call() {
    let s = setup();
    let out = s
        .exec("setsid sleep 312.4157 & nohup sleep 312.4157 & echo ok")
        .await;
    assert!(out.contains("ok"), "{out}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(processes_with("312.4157"), Vec::<u32>::new());
}

#[tokio::test]
async fn exec_time_bomb_is_killed() {
    let s = setup();
    let out = s.exec("sleep 3600").await;
    assert!(out.starts_with("error timeout"), "{out}");
}

#[tokio::test]
async fn exec_huge_output_is_cut() {
    let s = setup();
    let r = s
        .run("exec", json!({"command": "yes | head -c 50000000"}))
        .await;
    let data = r.data.expect("a result");
    assert!(data["stdout"].as_str().unwrap().len() < 100_000);
}
