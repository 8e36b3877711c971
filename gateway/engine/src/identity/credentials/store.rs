//! Where users' upstream tokens are kept, sealed ([`super::seal`]): in the
//! embedded store (a folder only the gateway's user can read, a file per
//! connection and user) or, with `state.redis`, in Redis for every replica.
//! Neither holds a token in the clear, nor a user's name: entries are
//! named by the SHA-256 of the user's subject.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::Digest as _;

use crate::support::shared::Redis;

/// The largest entry read (a sealed token record is a few KiB).
const MAX_ENTRY: u64 = 64 * 1024;

/// The store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the token store at {path} cannot be used: {error}")]
    Files { path: String, error: String },
    #[error("the token store (Redis) is unavailable")]
    Down,
}

/// Where tokens are kept.
#[derive(Debug, Clone)]
pub enum Store {
    Files(PathBuf),
    Redis(Arc<Redis>),
}

/// The name an entry is kept under: the SHA-256 of the subject, in hex.
pub fn entry_name(subject: &str) -> String {
    sha2::Sha256::digest(subject.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Store {
    fn path(dir: &Path, connection: &str, subject: &str) -> PathBuf {
        dir.join(connection).join(entry_name(subject))
    }

    fn files_error(path: &Path, error: impl std::fmt::Display) -> StoreError {
        StoreError::Files {
            path: path.display().to_string(),
            error: error.to_string(),
        }
    }

    /// The sealed entry of `subject` at `connection`, if any.
    pub async fn get(
        &self,
        connection: &str,
        subject: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Store::Files(dir) => {
                let path = Self::path(dir, connection, subject);
                blocking(move || read_entry(&path)).await
            }
            Store::Redis(redis) => redis
                .entry_get(&["connections", connection, &entry_name(subject)])
                .await
                .map_err(|_| StoreError::Down),
        }
    }

    /// Keeps `sealed` as the entry of `subject` at `connection`.
    pub async fn put(
        &self,
        connection: &str,
        subject: &str,
        sealed: Vec<u8>,
    ) -> Result<(), StoreError> {
        match self {
            Store::Files(dir) => {
                let path = Self::path(dir, connection, subject);
                blocking(move || write_entry(&path, &sealed)).await
            }
            Store::Redis(redis) => redis
                .entry_put(&["connections", connection, &entry_name(subject)], &sealed)
                .await
                .map_err(|_| StoreError::Down),
        }
    }

    /// Forgets the entry of `subject` at `connection`; `true` when there was one.
    pub async fn delete(&self, connection: &str, subject: &str) -> Result<bool, StoreError> {
        match self {
            Store::Files(dir) => {
                let path = Self::path(dir, connection, subject);
                match tokio::fs::remove_file(&path).await {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                    Err(e) => Err(Self::files_error(&path, e)),
                }
            }
            Store::Redis(redis) => redis
                .entry_del(&["connections", connection, &entry_name(subject)])
                .await
                .map_err(|_| StoreError::Down),
        }
    }
}

/// How long a replica may hold the lock on one user's token while it
/// renews it (a renewal takes one request to the authorization server,
/// itself bounded by the HTTP client's timeout).
pub const RENEWAL_LOCK: std::time::Duration = std::time::Duration::from_secs(15);

impl Store {
    /// Takes the lock every replica sharing this store honours before it
    /// renews `subject`'s token at `connection`: `Some` (the holder's
    /// token) when taken, `None` while another replica holds it. The
    /// embedded store belongs to one process, whose own lock suffices.
    pub async fn lock(
        &self,
        connection: &str,
        subject: &str,
    ) -> Result<Option<String>, StoreError> {
        match self {
            Store::Files(_) => Ok(Some(String::new())),
            Store::Redis(redis) => redis
                .lock(
                    &["connections", connection, &entry_name(subject)],
                    RENEWAL_LOCK,
                )
                .await
                .map_err(|_| StoreError::Down),
        }
    }

    /// Gives back the lock [`lock`](Self::lock) took.
    pub async fn unlock(&self, connection: &str, subject: &str, token: &str) {
        if let Store::Redis(redis) = self
            && redis
                .unlock(&["connections", connection, &entry_name(subject)], token)
                .await
                .is_err()
        {
            tracing::warn!(
                connection,
                "could not give back a token's renewal lock; it expires by itself"
            );
        }
    }
}

/// File work, off the runtime's threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Files {
            path: String::new(),
            error: e.to_string(),
        })?
}

fn read_entry(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Store::files_error(path, e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_ENTRY + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Store::files_error(path, e))?;
    if bytes.len() as u64 > MAX_ENTRY {
        return Err(Store::files_error(path, "the entry is larger than 64 KiB"));
    }
    Ok(Some(bytes))
}

/// Writes an entry whole (a temporary file renamed over it), readable by
/// the gateway's user only, in folders only it can enter.
fn write_entry(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let dir = path
        .parent()
        .ok_or_else(|| Store::files_error(path, "no folder"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Store::files_error(dir, e))?;
    let temp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| Store::files_error(&temp, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| Store::files_error(&temp, e))?;
    std::fs::rename(&temp, path).map_err(|e| Store::files_error(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_embedded_store_keeps_entries_private_and_named_by_a_digest() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::Files(dir.path().join("connections"));
        assert_eq!(store.get("github", "alice").await.unwrap(), None);
        store
            .put("github", "alice", b"sealed".to_vec())
            .await
            .unwrap();
        assert_eq!(
            store.get("github", "alice").await.unwrap().as_deref(),
            Some(&b"sealed"[..])
        );
        assert_eq!(store.get("github", "bob").await.unwrap(), None);
        let file = dir
            .path()
            .join("connections/github")
            .join(entry_name("alice"));
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let folder = std::fs::metadata(dir.path().join("connections/github")).unwrap();
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
        assert!(!file.to_string_lossy().contains("alice"));
        assert!(store.delete("github", "alice").await.unwrap());
        assert!(!store.delete("github", "alice").await.unwrap());
    }
}
