//! The embedded pin store: the MCP tool definitions the gateway trusts,
//! kept in a file (`pins.json` in the folder `state.pins`, default
//! `.toolgate/pins` under the configuration folder) so a restart trusts what was trusted before
//! it, not what a server lists first after it. A store of one process
//! (replicas share pins through Redis instead): read once, written whole
//! (to a temporary file, then renamed, readable by the gateway's user
//! alone) after each change. A file that cannot be read is logged and
//! replaced at the next change.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

use futures::future::BoxFuture;
use toolgate_mcp_client::PinStore;
use toolgate_mcp_client::session::shared_pins::Unavailable;

/// The largest store file read; a larger one is not read (pinning starts
/// again, and the file is replaced at the next change).
const MAX_FILE: u64 = 64 * 1024 * 1024;

/// By server, then the server's name for each tool: the MCP client's
/// record of its trusted definition.
type Records = BTreeMap<String, BTreeMap<String, String>>;

/// The pins kept in one file.
#[derive(Debug)]
pub struct PinFile {
    path: PathBuf,
    records: Mutex<Option<Records>>,
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
    /// writes them when `f` says it changed them.
    fn with(&self, f: impl FnOnce(&mut Records) -> bool) -> Result<(), Unavailable> {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let records = records.get_or_insert_with(|| self.read());
        if f(records) {
            self.write(records).map_err(|e| {
                tracing::warn!("cannot write the pin store {}: {e}", self.path.display());
                Unavailable
            })?;
        }
        Ok(())
    }

    fn read(&self) -> Records {
        let text = match std::fs::metadata(&self.path) {
            Err(_) => return Records::new(),
            Ok(m) if m.len() > MAX_FILE => {
                tracing::warn!(
                    "the pin store {} is larger than {} MiB; it is not read, and MCP tool definitions are pinned again as first seen",
                    self.path.display(),
                    MAX_FILE >> 20
                );
                return Records::new();
            }
            Ok(_) => std::fs::read(&self.path).unwrap_or_default(),
        };
        serde_json::from_slice(&text).unwrap_or_else(|e| {
            tracing::warn!(
                "the pin store {} cannot be read ({e}); MCP tool definitions are pinned again as first seen",
                self.path.display()
            );
            Records::new()
        })
    }

    fn write(&self, records: &Records) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let temp = self.path.with_extension("tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(&serde_json::to_vec_pretty(records).map_err(std::io::Error::other)?)?;
        file.sync_all()?;
        std::fs::rename(&temp, &self.path)
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
        // A file that is not a store is not read: pinning starts again.
        std::fs::write(&path, b"{not json").unwrap();
        let fresh = PinFile::new(path);
        assert_eq!(fresh.settle("s", &other).await.unwrap()["echo"], "b");
    }
}
