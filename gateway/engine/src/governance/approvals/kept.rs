//! The embedded store of the requests for approval, without `state.redis`:
//! one file (`approvals.json` in `approvals.store`, default
//! `.toolgate/approvals` under the configuration folder) holding every
//! request still open or decided, with the time it is forgotten. Read once
//! at start; written whole (to a temporary file, then renamed, readable by
//! the gateway's user alone) after each change. A file that cannot be read
//! is moved aside (`.bad`) and said in the log.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::Request;

/// The largest store file read; a larger one is moved aside.
const MAX_FILE: u64 = 64 * 1024 * 1024;

/// A request as kept: with the time it is forgotten.
#[derive(Serialize, Deserialize)]
pub(super) struct Kept {
    #[serde(flatten)]
    pub request: Request,
    /// Milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
}

/// Milliseconds since the Unix epoch, now.
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How long from now until `at_ms`.
pub(super) fn until(at_ms: u64) -> Duration {
    Duration::from_millis(at_ms.saturating_sub(now_ms()))
}

/// The file of the store.
#[derive(Debug)]
pub(super) struct File {
    path: PathBuf,
}

impl File {
    pub fn new(path: PathBuf) -> File {
        File { path }
    }

    /// The requests in the file not yet expired: none when there is no
    /// file. A file that cannot be read as a store is moved aside.
    pub fn read(&self) -> Vec<Kept> {
        let now = now_ms();
        let mut kept = read(&self.path);
        kept.retain(|k| k.expires_at_ms > now);
        kept
    }

    /// Writes `requests` over the file; a failure is said in the log (the
    /// requests stay in memory, and the next change writes them all).
    pub fn write(&self, requests: impl Iterator<Item = Kept>) {
        let mut requests: Vec<Kept> = requests.collect();
        let mut bytes = serde_json::to_vec(&requests);
        // Too large to be read back: the arguments (shown to approvers,
        // not needed to decide or to run) are left out.
        if bytes.as_ref().is_ok_and(|b| b.len() as u64 > MAX_FILE) {
            for k in &mut requests {
                k.request.arguments = None;
            }
            bytes = serde_json::to_vec(&requests);
        }
        let written = bytes
            .map_err(std::io::Error::other)
            .and_then(|bytes| toolgate_mcp_client::oauth::write_private(&self.path, &bytes));
        if let Err(e) = written {
            tracing::warn!(
                "cannot write the approvals store {}: {e}; make its folder writable by the gateway's user, or name another with `approvals.store` (kept in memory meanwhile; a restart would forget them)",
                self.path.display()
            );
        }
    }
}

fn read(path: &Path) -> Vec<Kept> {
    let text = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Ok(m) if m.len() > MAX_FILE => Err(format!("it is larger than {} MiB", MAX_FILE >> 20)),
        _ => std::fs::read(path).map_err(|e| e.to_string()),
    };
    match text.and_then(|t| serde_json::from_slice(&t).map_err(|e| e.to_string())) {
        Ok(kept) => kept,
        Err(why) => {
            let aside = path.with_extension("json.bad");
            let moved = std::fs::rename(path, &aside).is_ok();
            tracing::error!(
                "the approvals store {} cannot be read ({why}); {} the requests for approval it held are forgotten",
                path.display(),
                if moved {
                    format!("it was moved to {};", aside.display())
                } else {
                    "it could not be moved aside;".to_owned()
                }
            );
            Vec::new()
        }
    }
}
