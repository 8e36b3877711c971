//! Running a child process for `exec` and `execute_python`: a clean
//! environment, a timeout, and output read under a cap, inside a sandbox:
//!
//! - **its own PID namespace** (`unshare --pid --fork --kill-child`, with a
//!   user namespace when the gateway is not root): the command is the
//!   namespace's first process, so when it ends or is killed the kernel
//!   kills everything it started, `setsid` and double forks included;
//! - **a process limit** (`prlimit --nproc`, `builtins.sandbox.max_processes`)
//!   and **a memory limit** per process (`prlimit --data`,
//!   `builtins.sandbox.memory_mb`);
//! - **a seccomp filter** (set by `toolgate confine` with Landlock): no
//!   tracing, new namespaces, mounts, keyrings, BPF, performance counters,
//!   modules or io_uring;
//! - **another user** when the gateway runs as root (`setpriv`, the
//!   `builtins.sandbox.user`): the code has none of root's rights and cannot
//!   read the gateway's memory or environment (which the gateway also
//!   makes non-dumpable, see [`protect_gateway`]).
//!
//! The wrappers are util-linux's; where the namespace cannot be made (no
//! privilege, no user namespaces) the child still runs in its own process
//! group, which is killed when the call ends, with a warning logged once.
//! The group is killed when the command ends, on timeout, and when the call
//! is dropped (the executor's timeout, a client that went away).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use toolgate::ToolError;

/// How children are contained, resolved from `builtins.sandbox`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The uid and gid children switch to (only when the gateway is root).
    pub user: Option<(u32, u32)>,
    /// `RLIMIT_NPROC` of the children.
    pub max_processes: u32,
    /// Children may use the network.
    pub network: bool,
    /// Children run even where they cannot be confined.
    pub allow_unconfined: bool,
    /// `RLIMIT_DATA` of the children, in bytes.
    pub memory_bytes: u64,
}

impl Sandbox {
    /// Resolves `decl`: the user only matters (and must exist) when the
    /// gateway runs as root.
    pub fn resolve(decl: &toolgate_config::format::SandboxDecl) -> Result<Sandbox, String> {
        let user = if nix::unistd::geteuid().is_root() {
            Some(lookup_user(&decl.user)?)
        } else {
            None
        };
        Ok(Sandbox {
            user,
            max_processes: decl.max_processes,
            network: decl.network,
            allow_unconfined: decl.allow_unconfined,
            memory_bytes: decl.memory_mb.saturating_mul(1024 * 1024),
        })
    }

    /// No user switch, the default process limit (tests, embedders).
    pub fn unprivileged() -> Sandbox {
        let decl = toolgate_config::format::SandboxDecl::default();
        Sandbox {
            user: None,
            max_processes: decl.max_processes,
            network: decl.network,
            allow_unconfined: decl.allow_unconfined,
            memory_bytes: decl.memory_mb.saturating_mul(1024 * 1024),
        }
    }
}

/// The uid and gid of a user name or number.
fn lookup_user(user: &str) -> Result<(u32, u32), String> {
    let found = match user.parse::<u32>() {
        Ok(uid) => nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)),
        Err(_) => nix::unistd::User::from_name(user),
    };
    match found {
        Ok(Some(u)) if u.uid.is_root() => Err(format!(
            "the sandbox user `{user}` is root, which would give code run by tools every right of the gateway"
        )),
        Ok(Some(u)) => Ok((u.uid.as_raw(), u.gid.as_raw())),
        Ok(None) => match user.parse::<u32>() {
            // A bare number need not have a passwd entry.
            Ok(uid) if uid != 0 => Ok((uid, uid)),
            _ => Err(format!("there is no user `{user}` on this machine")),
        },
        Err(e) => Err(format!("cannot look up the user `{user}`: {e}")),
    }
}

/// Makes the gateway's process non-dumpable: another process of the same
/// user (code run by a tool, when the gateway is not root) can then no
/// longer read its memory or `/proc/<pid>/environ`, where the upstream keys
/// and tool secrets live. Called once at start.
pub fn protect_gateway() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(
            "cannot make the gateway non-dumpable: {e}; code run by tools as the gateway's user could read its secrets"
        );
    }
}

/// Whether children can get a PID namespace here, probed once.
static NAMESPACES: tokio::sync::OnceCell<bool> = tokio::sync::OnceCell::const_new();

/// The `unshare` arguments that give a child its own PID namespace, and
/// an empty network namespace unless it may use the network.
fn unshare_args(network: bool) -> Vec<&'static str> {
    let mut args = vec!["--pid", "--fork", "--kill-child"];
    if !network {
        args.insert(0, "--net");
    }
    if !nix::unistd::geteuid().is_root() {
        args.splice(0..0, ["--user", "--map-current-user"]);
    }
    args
}

async fn namespaces_work() -> bool {
    *NAMESPACES
        .get_or_init(|| async {
            let ok = tokio::process::Command::new("unshare")
                .args(unshare_args(false))
                .arg("true")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await
                .is_ok_and(|s| s.success());
            if !ok {
                tracing::warn!(
                    "code run by tools cannot get a PID namespace here (`unshare` missing or not permitted): processes it starts in a new session may outlive the call"
                );
            }
            ok
        })
        .await
}

/// Folders every child may read and run programs from (besides the
/// folders of its `PATH` and its interpreter's): the system's programs and
/// libraries, and the few files of `/etc` programs read to start.
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/dev/urandom",
    "/dev/random",
];

/// Devices every child may write.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// What a child may read: [`SYSTEM_READ`], its `PATH`'s folders, and the
/// installation its program lives in (an interpreter under `/opt` or a
/// home folder: the folder two levels above the program's real path).
fn readable(spec: &ChildSpec) -> Vec<String> {
    let mut paths: Vec<String> = SYSTEM_READ.iter().map(|p| (*p).to_owned()).collect();
    let search = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    paths.extend(
        search
            .split(':')
            .filter(|d| !d.is_empty())
            .map(str::to_owned),
    );
    let program = std::path::Path::new(&spec.program);
    let found = if program.is_absolute() {
        Some(program.to_path_buf())
    } else {
        search
            .split(':')
            .map(|d| std::path::Path::new(d).join(program))
            .find(|p| p.is_file())
    };
    if let Some(install) = found
        .and_then(|p| p.canonicalize().ok())
        .and_then(|p| {
            p.parent()
                .and_then(std::path::Path::parent)
                .map(std::path::Path::to_path_buf)
        })
        .filter(|p| p.components().count() > 2)
    {
        paths.push(install.to_string_lossy().into_owned());
    }
    paths
}

/// The program and arguments that run `spec` inside the sandbox, or why
/// it cannot be confined (then it does not run, unless the configuration
/// allows unconfined children).
async fn sandboxed(spec: &ChildSpec) -> Result<(String, Vec<String>), ToolError> {
    let mut argv: Vec<String> = Vec::new();
    if namespaces_work().await {
        argv.push("unshare".into());
        argv.extend(
            unshare_args(spec.sandbox.network)
                .into_iter()
                .map(str::to_owned),
        );
        argv.push("--".into());
    } else if !spec.sandbox.allow_unconfined {
        return Err(ToolError::Failed(
            "code cannot be confined here: no PID and network namespace can be made (`unshare` is missing or not permitted), so what it starts could outlive the call and it would see the network; it was not run. Give the gateway the right to make namespaces, or set builtins.sandbox.allow_unconfined: true to run it anyway".into(),
        ));
    }
    // Landlock: the workspace and the system's programs, nothing else.
    let toolgate = toolgate_code::binary().map_err(ToolError::Failed)?;
    argv.push(toolgate.to_string_lossy().into_owned());
    argv.push(toolgate_code::CONFINE_ARG.into());
    for path in readable(spec) {
        argv.extend(["--read".into(), path]);
    }
    argv.extend([
        "--write".into(),
        spec.workspace.to_string_lossy().into_owned(),
    ]);
    for device in DEVICES {
        argv.extend(["--write".into(), (*device).to_owned()]);
    }
    if spec.sandbox.network {
        argv.push("--network".into());
    }
    if spec.sandbox.allow_unconfined {
        argv.push("--allow-unconfined".into());
    }
    argv.push("--".into());
    argv.extend([
        "prlimit".into(),
        format!("--nproc={0}:{0}", spec.sandbox.max_processes),
        format!("--data={0}:{0}", spec.sandbox.memory_bytes),
        "--".into(),
    ]);
    if let Some((uid, gid)) = spec.sandbox.user {
        argv.extend([
            "setpriv".into(),
            format!("--reuid={uid}"),
            format!("--regid={gid}"),
            "--clear-groups".into(),
            "--".into(),
        ]);
    }
    argv.push(spec.program.clone());
    argv.extend(spec.args.iter().cloned());
    let program = argv.remove(0);
    Ok((program, argv))
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub program: String,
    pub args: Vec<String>,
    /// Written to the child's stdin, which is then closed.
    pub stdin: Option<Vec<u8>>,
    pub cwd: PathBuf,
    /// The folder it may write in (and read): the workspace.
    pub workspace: PathBuf,
    /// The whole environment of the child (the gateway's is not inherited,
    /// so its secrets stay out).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Characters kept of stdout and of stderr.
    pub max_chars: usize,
    pub sandbox: Sandbox,
}

/// What a child did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildOutput {
    /// The exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The output was longer than the cap and was cut.
    pub truncated: bool,
    /// It ran out of time and its group was killed.
    pub timed_out: bool,
}

/// Kills a process group when dropped, unless disarmed.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill(&self) {
        if let Some(pid) = self.0 {
            // ESRCH (already gone) is fine.
            let _ = killpg(pid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The environment children get: the gateway's `PATH` (a standard one when
/// it has none), `HOME` set to the working folder, a UTF-8 locale; nothing
/// else, so the gateway's secrets stay out.
pub fn base_env(home: &std::path::Path) -> Vec<(String, String)> {
    let path = std::env::var("PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    vec![
        ("PATH".into(), path),
        ("HOME".into(), home.to_string_lossy().into_owned()),
        ("LANG".into(), "C.UTF-8".into()),
    ]
}

/// Runs a child to completion (or timeout).
pub async fn run(mut spec: ChildSpec) -> Result<ChildOutput, ToolError> {
    // A sandbox user cannot use folders only the gateway's user may enter
    // (an interpreter shim under /root): its PATH keeps the others.
    if spec.sandbox.user.is_some() {
        for (k, v) in &mut spec.env {
            if k == "PATH" {
                *v = v
                    .split(':')
                    .filter(|d| searchable_by_anyone(std::path::Path::new(d)))
                    .collect::<Vec<_>>()
                    .join(":");
            }
        }
    }
    // The wrappers start whatever the program is: say clearly when it is
    // not there, as a direct start would.
    let search = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    if !is_program(&spec.program, search.unwrap_or_default()) {
        return Err(ToolError::Failed(format!(
            "cannot start `{}`: no such program",
            spec.program
        )));
    }
    let (program, args) = sandboxed(&spec).await?;
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| ToolError::Failed(format!("cannot start `{program}`: {e}")))?;
    let mut guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    );

    if let (Some(input), Some(mut stdin)) = (spec.stdin.clone(), child.stdin.take()) {
        tokio::spawn(async move {
            // A child that does not read its input is not an error here.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let max_bytes = spec.max_chars.saturating_mul(4).max(1024);
    let stdout = child
        .stdout
        .take()
        .map(|s| tokio::spawn(read_capped(s, max_bytes)));
    let stderr = child
        .stderr
        .take()
        .map(|s| tokio::spawn(read_capped(s, max_bytes)));

    let (status, timed_out) = match tokio::time::timeout(spec.timeout, child.wait()).await {
        Ok(status) => (status, false),
        Err(_) => {
            guard.kill();
            (child.wait().await, true)
        }
    };
    // Whatever the command left running in its group goes too.
    guard.kill();
    guard.0 = None;
    let status =
        status.map_err(|e| ToolError::Failed(format!("waiting for the child failed: {e}")))?;

    let collect = |task: Option<tokio::task::JoinHandle<(Vec<u8>, usize)>>| async move {
        let Some(task) = task else {
            return (Vec::new(), 0);
        };
        // A process that left the group may still hold the pipe: do not wait
        // for it forever.
        let abort = task.abort_handle();
        match tokio::time::timeout(Duration::from_secs(2), task).await {
            Ok(Ok(out)) => out,
            _ => {
                abort.abort();
                (Vec::new(), 0)
            }
        }
    };
    let (out, out_dropped) = collect(stdout).await;
    let (err, err_dropped) = collect(stderr).await;
    let (stdout, cut_out) = text(&out, out_dropped, spec.max_chars);
    let (stderr, cut_err) = text(&err, err_dropped, spec.max_chars);

    use std::os::unix::process::ExitStatusExt;
    // The confinement refused: say why, not as the command's failure.
    if status.code() == Some(toolgate_code::confine::NOT_CONFINED)
        && stderr.starts_with("toolgate confine:")
    {
        return Err(ToolError::Failed(format!(
            "the command was not run: {}",
            stderr.trim_end()
        )));
    }
    Ok(ChildOutput {
        exit_code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        truncated: cut_out || cut_err,
        timed_out,
    })
}

/// `true` when every folder from `/` down to `dir` may be entered by any
/// user (the sandbox user is neither owner nor group of the gateway's).
fn searchable_by_anyone(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.is_absolute()
        && dir
            .ancestors()
            .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// `true` when `program` names an executable file, directly (with a `/`) or
/// in one of the `search` folders.
fn is_program(program: &str, search: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(std::path::Path::new(program));
    }
    search
        .split(':')
        .filter(|d| !d.is_empty())
        .any(|d| executable(&std::path::Path::new(d).join(program)))
}

/// Reads everything, keeping the first `max` bytes; returns them and how
/// many bytes were dropped.
async fn read_capped<R: AsyncRead + Unpin>(mut reader: R, max: usize) -> (Vec<u8>, usize) {
    let mut kept = Vec::new();
    let mut dropped = 0usize;
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                let take = room.min(n);
                kept.extend_from_slice(&buf[..take]);
                dropped += n - take;
            }
        }
    }
    (kept, dropped)
}

/// Decodes output and cuts it at `max` characters with a visible marker.
fn text(bytes: &[u8], dropped_bytes: usize, max: usize) -> (String, bool) {
    let s = String::from_utf8_lossy(bytes);
    let total = s.chars().count();
    if total <= max && dropped_bytes == 0 {
        return (s.into_owned(), false);
    }
    let end = s.char_indices().nth(max).map_or(s.len(), |(i, _)| i);
    let more_chars = total.saturating_sub(max);
    let marker = if dropped_bytes > 0 {
        format!("\n[output truncated: {more_chars} more characters and {dropped_bytes} more bytes]")
    } else {
        format!("\n[output truncated: {more_chars} more characters]")
    };
    (format!("{}{marker}", &s[..end]), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutting() {
        assert_eq!(text(b"hello", 0, 10), ("hello".into(), false));
        assert_eq!(
            text("héllo".as_bytes(), 0, 2),
            ("hé\n[output truncated: 3 more characters]".into(), true)
        );
        assert_eq!(
            text(b"ab", 7, 5),
            (
                "ab\n[output truncated: 0 more characters and 7 more bytes]".into(),
                true
            )
        );
    }

    #[tokio::test]
    async fn runs_with_a_clean_environment() {
        let dir = tempfile::tempdir().unwrap();
        // Cargo sets it for the test process; the child must not see it.
        assert!(std::env::var("CARGO_PKG_NAME").is_ok());
        let out = run(ChildSpec {
            program: "sh".into(),
            args: vec![
                "-c".into(),
                "echo \"[$CARGO_PKG_NAME]\" $HOME; pwd; exit 3".into(),
            ],
            stdin: None,
            cwd: dir.path().to_owned(),
            workspace: dir.path().to_owned(),
            env: base_env(dir.path()),
            timeout: Duration::from_secs(30),
            max_chars: 1000,
            sandbox: Sandbox::unprivileged(),
        })
        .await
        .unwrap();
        assert_eq!(out.exit_code, Some(3));
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(
            out.stdout,
            format!("[] {}\n{}\n", dir.path().display(), real.display())
        );
        assert!(!out.timed_out);
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error() {
        let e = run(ChildSpec {
            program: "/nonexistent/toolgate-nothing".into(),
            args: vec![],
            stdin: None,
            cwd: std::env::temp_dir(),
            workspace: std::env::temp_dir(),
            env: vec![],
            timeout: Duration::from_secs(5),
            max_chars: 100,
            sandbox: Sandbox::unprivileged(),
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("cannot start"), "{e}");
    }
}
