//! Running a child process for `exec` and `execute_python`: its own process
//! group, a clean environment, a timeout after which the whole group is
//! killed, and output read under a cap.
//!
//! The group is also killed when the command ends (nothing it started in
//! the background outlives the call) and when the call is dropped (the
//! executor's timeout, a client that went away).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::tool::ToolError;

/// What to run.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub program: String,
    pub args: Vec<String>,
    /// Written to the child's stdin, which is then closed.
    pub stdin: Option<Vec<u8>>,
    pub cwd: PathBuf,
    /// The whole environment of the child (the gateway's is not inherited,
    /// so its secrets stay out).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Characters kept of stdout and of stderr.
    pub max_chars: usize,
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
pub async fn run(spec: ChildSpec) -> Result<ChildOutput, ToolError> {
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
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
        .map_err(|e| ToolError::Failed(format!("cannot start `{}`: {e}", spec.program)))?;
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
    Ok(ChildOutput {
        exit_code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        truncated: cut_out || cut_err,
        timed_out,
    })
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
            env: base_env(dir.path()),
            timeout: Duration::from_secs(30),
            max_chars: 1000,
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
            env: vec![],
            timeout: Duration::from_secs(5),
            max_chars: 100,
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("cannot start"), "{e}");
    }
}
