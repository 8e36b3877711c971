//! The embedded pin store: the MCP tool definitions the gateway trusts,
//! kept in a file (`pins.json` in the folder `state.pins`, default
//! `.toolgate/pins` under the configuration folder) so a restart trusts what was trusted before
//! it, not what a server lists first after it. A store of one process
//! (replicas share pins through Redis instead): read once, written whole
//! (to a temporary file, then renamed, readable by the gateway's user
//! alone) after each change. A file that cannot be read is moved aside
//! and said in the log.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

use futures::future::BoxFuture;
use toolgate_mcp_client::PinStore;
use toolgate_mcp_client::session::shared_pins::Unavailable;

/// The largest store file read; a larger one is moved aside.
const MAX_FILE: u64 = 64 * 1024 * 1024;

/// By server, then the server's name for each tool: the MCP client's
/// record of its trusted definition.
type Records = BTreeMap<String, BTreeMap<String, String>>;

/// The pins kept in one file.
#[derive(Debug)]
pub struct PinFile {
    path: PathBuf,
    /// The records (read at the first use), and whether a write of them
    /// failed since (it is tried again at the next use).
    records: Mutex<Option<(Records, bool)>>,
}

impl PinFile {
    /// The store kept in `path` (read at its first use).
    pub fn new(path: PathBuf) -> PinFile {
        PinFile {
            path,
            records: Mutex::new(None),
        }
    }

    /// Runs `f` on the records (read from the file first, once), and
    /// writes them when `f` says it changed them, or when an earlier
    /// write failed.
    fn with(&self, f: impl FnOnce(&mut Records) -> bool) -> Result<(), Unavailable> {
        let mut state = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let state = state.get_or_insert_with(|| (self.read(), false));
        let changed = f(&mut state.0);
        if changed || state.1 {
            if let Err(e) = self.write(&state.0) {
                state.1 = true;
                tracing::warn!(
                    "cannot write the pin store {}: {e}; make its folder writable by the gateway's user, or name another with `state.pins` (kept in memory meanwhile)",
                    self.path.display()
                );
                return Err(Unavailable);
            }
            state.1 = false;
        }
        Ok(())
    }

    /// The records in the file: none when there is no file. A file that
    /// cannot be read as a store is moved aside (`.bad`), said in the log,
    /// and pinning starts again.
    fn read(&self) -> Records {
        let text = match std::fs::metadata(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Records::new(),
            Ok(m) if m.len() > MAX_FILE => Err(format!("it is larger than {} MiB", MAX_FILE >> 20)),
            _ => std::fs::read(&self.path).map_err(|e| e.to_string()),
        };
        match text.and_then(|t| serde_json::from_slice(&t).map_err(|e| e.to_string())) {
            Ok(records) => records,
            Err(why) => {
                let aside = self.path.with_extension("json.bad");
                let moved = std::fs::rename(&self.path, &aside).is_ok();
                tracing::error!(
                    "the pin store {} cannot be read ({why}); {} MCP tool definitions are pinned again as first seen — restore the file from a backup to keep what was trusted",
                    self.path.display(),
                    if moved {
                        format!("it was moved to {};", aside.display())
                    } else {
                        "it could not be moved aside;".to_owned()
                    }
                );
                Records::new()
            }
        }
    }

    fn write(&self, records: &Records) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(records).map_err(std::io::Error::other)?;
        toolgate_mcp_client::oauth::write_private(&self.path, &bytes)
    }
}

impl PinStore for PinFile {
    fn settle<'a>(
        &'a self,
        server: &'a str,
        proposed: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<HashMap<String, String>, Unavailable>> {
        Box::pin(async move {
            let mut kept = HashMap::new();
            self.with(|records| {
                let tools = records.entry(server.to_owned()).or_default();
                let mut changed = false;
                for (tool, record) in proposed {
                    let now = tools.entry(tool.clone()).or_insert_with(|| {
                        changed = true;
                        record.clone()
                    });
                    kept.insert(tool.clone(), now.clone());
                }
                changed
            })?;
            Ok(kept)
        })
    }

    fn trust<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        record: &'a str,
    ) -> BoxFuture<'a, Result<(), Unavailable>> {
        Box::pin(async move {
            self.with(|records| {
                records
                    .entry(server.to_owned())
                    .or_default()
                    .insert(tool.to_owned(), record.to_owned());
                true
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pins_outlive_the_process_that_kept_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins/pins.json");
        let first = PinFile::new(path.clone());
        let proposed = [("echo".to_owned(), "a".to_owned())];
        assert_eq!(first.settle("s", &proposed).await.unwrap()["echo"], "a");
        // What is kept wins over what is proposed.
        let other = [("echo".to_owned(), "b".to_owned())];
        assert_eq!(first.settle("s", &other).await.unwrap()["echo"], "a");
        // Read by the next process.
        let next = PinFile::new(path.clone());
        assert_eq!(next.settle("s", &other).await.unwrap()["echo"], "a");
        next.trust("s", "echo", "b").await.unwrap();
        let third = PinFile::new(path.clone());
        assert_eq!(third.settle("s", &proposed).await.unwrap()["echo"], "b");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A file that is not a store is moved aside: pinning starts again.
        std::fs::write(&path, b"{not json").unwrap();
        let fresh = PinFile::new(path.clone());
        assert_eq!(fresh.settle("s", &other).await.unwrap()["echo"], "b");
        assert_eq!(
            std::fs::read(path.with_extension("json.bad")).unwrap(),
            b"{not json"
        );
    }
}
