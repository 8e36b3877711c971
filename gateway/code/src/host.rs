//! The gateway's side: start a worker, hand it the program, run the calls
//! it asks for, and read how it ended, under a wall-clock deadline that
//! counts only the time the program itself runs.

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::protocol::{FailureKind, FromWorker, MAX_LINE, Printed, ToWorker, WorkerLimits};

/// The argument that makes the `toolgate` binary a worker.
pub const WORKER_ARG: &str = "code-worker";

/// What one program may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Interpreter time (tool calls not counted), also the wall-clock time
    /// the gateway waits for the program between calls.
    pub time: Duration,
    /// Memory of the worker process.
    pub memory_bytes: u64,
    /// Printed output kept.
    pub max_output: usize,
    /// Tool calls one program may make.
    pub max_calls: u32,
    /// Depth of the program's own calls.
    pub max_recursion: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            time: Duration::from_secs(10),
            memory_bytes: 256 * 1024 * 1024,
            max_output: 64 * 1024,
            max_calls: 50,
            max_recursion: 200,
        }
    }
}

/// A call a program makes.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub name: String,
    pub args: Vec<Value>,
    pub kwargs: Map<String, Value>,
}

/// How a program ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The value of its last expression, or why it has none.
    pub value: Result<Value, Failure>,
    pub printed: Printed,
    /// The calls it made (each one ran, whatever happened after).
    pub calls: u32,
}

/// Why a program has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

/// The `toolgate` binary: this process's, or for a test harness (a binary
/// in a `deps` folder) the one built beside it; `TOOLGATE_WORKER_BIN`
/// names another.
pub fn binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
                if let Some(bin) = std::env::var_os("TOOLGATE_WORKER_BIN") {
                    // Absolute: workers start in `/`.
                    return std::path::absolute(PathBuf::from(bin))
                        .map_err(|e| format!("TOOLGATE_WORKER_BIN: {e}"));
                }
                let exe = std::env::current_exe()
                    .map_err(|e| format!("cannot find the gateway's own binary: {e}"))?;
                match exe.parent() {
                    Some(dir) if dir.file_name().is_some_and(|n| n == "deps") => dir
                        .parent()
                        .map(|up| up.join("toolgate"))
                        .filter(|bin| bin.is_file())
                        .ok_or_else(|| {
                            "no `toolgate` binary beside this test binary: build it first (`cargo build -p toolgate-server`)".to_owned()
                        }),
                    _ => Ok(exe),
                }
            })
            .clone()
}

/// The program a worker process runs: the `toolgate` binary with
/// [`WORKER_ARG`].
#[derive(Debug, Clone)]
pub struct Worker {
    program: PathBuf,
    args: Vec<OsString>,
    user: Option<(u32, u32)>,
}

impl Worker {
    /// A worker started as `program args…`, as another user when `user` is
    /// set (the gateway must then be root).
    pub fn new(program: PathBuf, args: Vec<OsString>, user: Option<(u32, u32)>) -> Worker {
        Worker {
            program,
            args,
            user,
        }
    }

    /// This process's binary as a worker (`toolgate code-worker`).
    pub fn current() -> Result<Worker, String> {
        Ok(Worker::new(binary()?, vec![WORKER_ARG.into()], None))
    }

    /// The same worker, run as `user` (uid, gid) — when that user can run
    /// the binary at all: a binary under a folder only the gateway's user
    /// may enter (`/root/...`) runs as the gateway's user, confined the
    /// same way, with a warning logged once.
    pub fn as_user(mut self, user: Option<(u32, u32)>) -> Worker {
        static WARNED: std::sync::Once = std::sync::Once::new();
        if user.is_some() && !runnable_by_anyone(&self.program) {
            WARNED.call_once(|| {
                tracing::warn!(
                    "the code worker `{}` cannot be run by the sandbox user (a folder above it is closed to others): programs run as the gateway's user, confined",
                    self.program.display()
                );
            });
            self.user = None;
            return self;
        }
        self.user = user;
        self
    }

    /// Runs `code`, which may call `functions`; each call is handed to
    /// `on_call`, whose `Err` is raised in the program as a `RuntimeError`.
    pub async fn run<F, Fut>(
        &self,
        code: &str,
        functions: &[String],
        limits: &Limits,
        mut on_call: F,
    ) -> Outcome
    where
        F: FnMut(Call) -> Fut,
        Fut: Future<Output = Result<Value, String>>,
    {
        let mut calls = 0u32;
        let mut child = match self.spawn() {
            Ok(child) => child,
            Err(e) => return worker_failure(format!("cannot start the interpreter: {e}"), 0),
        };
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return worker_failure("the interpreter's pipes are missing".into(), 0);
        };
        let errors = tokio::spawn(read_capped(stderr, 16 * 1024));
        let mut stdout = BufReader::new(stdout);
        let start = ToWorker::Start {
            code: code.to_owned(),
            functions: functions.to_vec(),
            limits: WorkerLimits {
                time_ms: u64::try_from(limits.time.as_millis()).unwrap_or(u64::MAX),
                max_output: limits.max_output,
                max_calls: limits.max_calls,
                max_recursion: limits.max_recursion,
                memory_bytes: limits.memory_bytes,
            },
        };
        // The program's own running time, across its calls; a second more
        // for the process to start and answer.
        let mut budget = limits.time + Duration::from_secs(1);
        if let Err(e) = send(&mut stdin, &start).await {
            return died(&mut child, errors, e, calls, limits).await;
        }
        loop {
            let began = tokio::time::Instant::now();
            let line = match tokio::time::timeout(budget, read_line(&mut stdout)).await {
                Err(_) => {
                    let _ = child.kill().await;
                    return Outcome {
                        value: Err(Failure {
                            kind: FailureKind::Timeout,
                            message: format!(
                                "the program ran longer than its {} s",
                                limits.time.as_secs_f64()
                            ),
                        }),
                        printed: Printed::default(),
                        calls,
                    };
                }
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => {
                    return died(&mut child, errors, String::new(), calls, limits).await;
                }
                Ok(Err(e)) => return died(&mut child, errors, e, calls, limits).await,
            };
            budget = budget.saturating_sub(began.elapsed());
            let message: FromWorker = match serde_json::from_slice(&line) {
                Ok(m) => m,
                Err(e) => {
                    let _ = child.kill().await;
                    return worker_failure(
                        format!("the interpreter's answer is broken: {e}"),
                        calls,
                    );
                }
            };
            match message {
                FromWorker::Call { name, args, kwargs } => {
                    calls += 1;
                    let reply = match on_call(Call { name, args, kwargs }).await {
                        Ok(value) => ToWorker::Return { value },
                        Err(message) => ToWorker::Raise { message },
                    };
                    if let Err(e) = send(&mut stdin, &reply).await {
                        return died(&mut child, errors, e, calls, limits).await;
                    }
                }
                FromWorker::Done { value, printed } => {
                    let _ = child.wait().await;
                    return Outcome {
                        value: Ok(value),
                        printed,
                        calls,
                    };
                }
                FromWorker::Failed {
                    kind,
                    message,
                    printed,
                } => {
                    let _ = child.wait().await;
                    return Outcome {
                        value: Err(Failure { kind, message }),
                        printed,
                        calls,
                    };
                }
            }
        }
    }

    fn spawn(&self) -> std::io::Result<Child> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env_clear()
            // mimalloc (the binary's allocator) otherwise maps its first
            // 1 GiB arena writable at start, before the memory limit is
            // set: the limit then counts all of it, and the program's next
            // mapping fails however little it uses. Committed on demand,
            // the arena counts what the program uses.
            .env("MIMALLOC_ARENA_EAGER_COMMIT", "0")
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        command.spawn()
    }
}

/// `true` when any user may run `program`: every folder above it can be
/// entered by others, and it may be executed by others.
fn runnable_by_anyone(program: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.permissions().mode());
    mode(program).is_ok_and(|m| m & 0o001 != 0)
        && program
            .ancestors()
            .skip(1)
            .all(|dir| dir.as_os_str().is_empty() || mode(dir).is_ok_and(|m| m & 0o001 != 0))
}

fn worker_failure(message: String, calls: u32) -> Outcome {
    Outcome {
        value: Err(Failure {
            kind: FailureKind::Worker,
            message,
        }),
        printed: Printed::default(),
        calls,
    }
}

/// The worker ended without answering: a limit of its process, or a fault.
async fn died(
    child: &mut Child,
    errors: tokio::task::JoinHandle<String>,
    why: String,
    calls: u32,
    limits: &Limits,
) -> Outcome {
    let _ = child.start_kill();
    let status = child.wait().await.ok();
    let stderr = errors.await.unwrap_or_default();
    let signal = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
    // What the worker said before it died, for the operator (a limit and
    // a fault can end it with the same signal).
    tracing::warn!(
        signal,
        status = ?status,
        stderr = %stderr.chars().rev().take(2000).collect::<String>().chars().rev().collect::<String>(),
        "a code-mode worker ended without answering"
    );
    let (kind, message) = match signal {
        Some(sig) if sig == libc::SIGXCPU || sig == libc::SIGKILL => (
            FailureKind::Timeout,
            format!(
                "the program used more than its {} s of CPU time",
                limits.time.as_secs_f64()
            ),
        ),
        Some(sig) if sig == libc::SIGABRT || sig == libc::SIGSEGV || sig == libc::SIGBUS => (
            FailureKind::Limit,
            format!(
                "the program needed more than its {} MiB of memory",
                limits.memory_bytes / (1024 * 1024)
            ),
        ),
        _ => (
            FailureKind::Worker,
            format!(
                "the interpreter stopped ({}){}{}",
                status.map_or("no status".to_owned(), |s| s.to_string()),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {why}")
                },
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!("\n{}", stderr.trim_end())
                }
            ),
        ),
    };
    Outcome {
        value: Err(Failure { kind, message }),
        printed: Printed::default(),
        calls,
    }
}

async fn send(stdin: &mut ChildStdin, message: &ToWorker) -> Result<(), String> {
    let mut line = serde_json::to_vec(message).map_err(|e| e.to_string())?;
    line.push(b'\n');
    stdin.write_all(&line).await.map_err(|e| e.to_string())?;
    stdin.flush().await.map_err(|e| e.to_string())
}

async fn read_line(
    reader: &mut BufReader<tokio::process::ChildStdout>,
) -> Result<Option<Vec<u8>>, String> {
    let mut line = Vec::new();
    let n = reader
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Ok(None);
    }
    if n > MAX_LINE {
        return Err(format!("an answer longer than {MAX_LINE} bytes"));
    }
    Ok(Some(line))
}

async fn read_capped(mut reader: impl AsyncRead + Unpin, cap: usize) -> String {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}
