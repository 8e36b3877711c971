//! The file tools: read, write, edit, list, exists, mkdir and delete,
//! confined to the workspace (see [`workspace`](super::workspace)).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::tool;

use super::workspace::{Workspace, io_error, is_root, relative};
use toolgate::ToolError;
use toolgate::context::ToolContext;

/// Largest file `file_read` and `file_edit` read, in bytes.
const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Most entries `file_list` returns.
const MAX_ENTRIES: usize = 1_000;
/// Deepest folder `file_list` descends into.
const MAX_DEPTH: usize = 32;

/// Read a text file of the workspace, optionally a range of its lines.
#[tool(category = "files")]
pub fn file_read(
    ctx: &ToolContext,
    /// Path relative to the workspace.
    path: String,
    /// First line to return (1-based).
    #[schemars(range(min = 1))]
    start_line: Option<u64>,
    /// How many lines to return from `start_line`.
    #[schemars(range(min = 1))]
    line_count: Option<u64>,
) -> Result<String, ToolError> {
    let ws = Workspace::of(ctx)?;
    let text = read_text(&ws, &path)?;
    if start_line.is_none() && line_count.is_none() {
        return Ok(text);
    }
    let skip = usize::try_from(start_line.unwrap_or(1).saturating_sub(1)).unwrap_or(usize::MAX);
    let take = line_count.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    Ok(text.split_inclusive('\n').skip(skip).take(take).collect())
}

fn read_text(ws: &Workspace, path: &str) -> Result<String, ToolError> {
    let rel = relative(path)?;
    let meta = ws.dir().metadata(&rel).map_err(|e| io_error(&e, path))?;
    if meta.is_dir() {
        return Err(ToolError::Failed(format!(
            "{path:?} is a folder; use file_list to see its content"
        )));
    }
    let mut options = OpenOptions::new();
    options.read(true);
    let file = open_regular(ws.dir(), &rel, &mut options, path)?;
    let len = file.metadata().map_err(|e| io_error(&e, path))?.len();
    if len > MAX_FILE_BYTES {
        return Err(ToolError::Failed(format!(
            "{path:?} is {len} bytes, more than the {MAX_FILE_BYTES} this tool reads"
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&e, path))?;
    String::from_utf8(bytes).map_err(|_| ToolError::Failed(format!("{path:?} is not UTF-8 text")))
}

/// Opens `rel` without blocking (a FIFO would hold the call forever) and
/// refuses anything but a regular file: FIFOs, sockets and devices that
/// code run by a tool may have made in the workspace.
fn open_regular(
    dir: &Dir,
    rel: &Path,
    options: &mut OpenOptions,
    shown: &str,
) -> Result<cap_std::fs::File, ToolError> {
    options.custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY);
    let file = dir
        .open_with(rel, options)
        .map_err(|e| match e.raw_os_error() {
            // A FIFO opened for writing with no reader.
            Some(nix::libc::ENXIO) => not_regular(shown),
            _ => io_error(&e, shown),
        })?;
    if !file.metadata().map_err(|e| io_error(&e, shown))?.is_file() {
        return Err(not_regular(shown));
    }
    Ok(file)
}

fn not_regular(shown: &str) -> ToolError {
    ToolError::Refused(format!(
        "{shown:?} is not a regular file (a FIFO, socket or device); the file tools read and write regular files only"
    ))
}

/// Edits of one file run one at a time: a read-modify-write must not lose
/// another's change. One lock per (workspace folder, path), dropped when
/// unused.
fn lock_path(ws: &Workspace, rel: &Path) -> Arc<Mutex<()>> {
    static LOCKS: LazyLock<Mutex<HashMap<PathBuf, Weak<Mutex<()>>>>> =
        LazyLock::new(Mutex::default);
    let key = ws.root().join(rel);
    let mut locks = LOCKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
        return lock;
    }
    locks.retain(|_, w| w.strong_count() > 0);
    let lock = Arc::new(Mutex::new(()));
    locks.insert(key, Arc::downgrade(&lock));
    lock
}

/// Replaces the content of `rel` at once: written to a temporary file in
/// the same folder, then renamed over it, so a reader sees the old content
/// or the new, never a part. The new file keeps the old one's owner and
/// permissions.
fn replace_atomically(
    ws: &Workspace,
    rel: &Path,
    content: &[u8],
    shown: &str,
) -> Result<(), ToolError> {
    use cap_std::fs::{MetadataExt, PermissionsExt};
    let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
    let name = rel
        .file_name()
        .ok_or_else(|| ToolError::Failed(format!("{shown:?} names no file")))?;
    let tmp_name = format!(
        ".{}.toolgate-{}.tmp",
        name.to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    );
    let tmp = parent.map_or_else(|| PathBuf::from(&tmp_name), |p| p.join(&tmp_name));
    let old = match ws.dir().symlink_metadata(rel) {
        Ok(m) if m.is_file() => Some(m),
        Ok(m) if m.is_dir() => {
            return Err(ToolError::Failed(format!("{shown:?} is a folder")));
        }
        // A link is written through (renaming over it would replace the
        // link): cap-std follows it only while it stays in the workspace.
        Ok(m) if m.file_type().is_symlink() => {
            let mut options = OpenOptions::new();
            options.write(true).truncate(true);
            let mut file = open_regular(ws.dir(), rel, &mut options, shown)?;
            return file.write_all(content).map_err(|e| io_error(&e, shown));
        }
        Ok(_) => return Err(not_regular(shown)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(&e, shown)),
    };
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    let written = ws.dir().open_with(&tmp, &options).and_then(|mut f| {
        f.write_all(content)?;
        if let Some(old) = &old {
            f.set_permissions(cap_std::fs::Permissions::from_mode(old.mode()))?;
            // Only root may give a file away; others keep their own.
            if nix::unistd::geteuid().is_root() {
                std::os::unix::fs::fchown(&f, Some(old.uid()), Some(old.gid()))?;
            }
        }
        f.sync_data()
    });
    let renamed = written.and_then(|()| ws.dir().rename(&tmp, ws.dir(), rel));
    if let Err(e) = renamed {
        let _ = ws.dir().remove_file(&tmp);
        return Err(io_error(&e, shown));
    }
    Ok(())
}

/// How `file_write` writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Replace the file's content (create it if needed).
    #[default]
    Write,
    /// Add to the end of the file (create it if needed).
    Append,
}

/// Write (or append to) a text file of the workspace, creating its parent
/// folders.
#[tool(category = "files")]
pub fn file_write(
    ctx: &ToolContext,
    /// Path relative to the workspace.
    path: String,
    /// The text to write.
    content: String,
    /// `write` (replace, the default) or `append`.
    mode: Option<WriteMode>,
) -> Result<Value, ToolError> {
    let ws = Workspace::of(ctx)?;
    let rel = relative(&path)?;
    if is_root(&rel) {
        return Err(ToolError::Failed(
            "the path names the workspace itself, not a file".into(),
        ));
    }
    if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        ensure_dir(&ws, parent, &path)?;
    }
    let mode = mode.unwrap_or_default();
    let lock = lock_path(&ws, &rel);
    let _one_at_a_time = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match mode {
        WriteMode::Write => replace_atomically(&ws, &rel, content.as_bytes(), &path)?,
        WriteMode::Append => {
            let mut options = OpenOptions::new();
            options.create(true).append(true);
            let mut file = open_regular(ws.dir(), &rel, &mut options, &path)?;
            file.write_all(content.as_bytes())
                .map_err(|e| io_error(&e, &path))?;
        }
    }
    Ok(json!({
        "path": path,
        "bytes_written": content.len(),
        "mode": mode,
    }))
}

/// Replace one exact, unique occurrence of `old_text` with `new_text` in a
/// file of the workspace. Zero or several occurrences is an error saying
/// how many.
#[tool(category = "files")]
pub fn file_edit(
    ctx: &ToolContext,
    /// Path relative to the workspace.
    path: String,
    /// The exact text to replace; it must occur exactly once.
    old_text: String,
    /// The text to put in its place.
    new_text: String,
) -> Result<Value, ToolError> {
    if old_text.is_empty() {
        return Err(ToolError::Failed("`old_text` is empty".into()));
    }
    let ws = Workspace::of(ctx)?;
    let rel = relative(&path)?;
    let lock = lock_path(&ws, &rel);
    let _one_at_a_time = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = read_text(&ws, &path)?;
    let count = text.matches(old_text.as_str()).count();
    match count {
        0 => Err(ToolError::Failed(format!(
            "`old_text` was not found in {path:?} (0 occurrences); copy it exactly from the file"
        ))),
        1 => {
            let size = (text.len() - old_text.len()).saturating_add(new_text.len());
            if size as u64 > MAX_FILE_BYTES {
                return Err(ToolError::Failed(format!(
                    "the edited file would be {size} bytes, more than the {MAX_FILE_BYTES} these tools handle"
                )));
            }
            let edited = text.replacen(old_text.as_str(), &new_text, 1);
            replace_atomically(&ws, &rel, edited.as_bytes(), &path)?;
            Ok(json!({"path": path, "replacements": 1}))
        }
        n => Err(ToolError::Failed(format!(
            "`old_text` occurs {n} times in {path:?}; include more surrounding text so it matches exactly once"
        ))),
    }
}

/// List a folder of the workspace; with a glob (e.g. `**/*.rs`), list every
/// matching file below it instead.
#[tool(category = "files")]
pub fn file_list(
    ctx: &ToolContext,
    /// Folder relative to the workspace (default: the workspace itself).
    path: Option<String>,
    /// A glob over paths relative to the folder: `*.txt` (this folder), `**/*.rs` (any depth).
    glob: Option<String>,
) -> Result<Value, ToolError> {
    let ws = Workspace::of(ctx)?;
    let shown = path.clone().unwrap_or_else(|| ".".into());
    let rel = relative(&shown)?;
    let dir = if is_root(&rel) {
        ws.dir().try_clone().map_err(|e| io_error(&e, &shown))?
    } else {
        ws.dir().open_dir(&rel).map_err(|e| io_error(&e, &shown))?
    };
    let matcher = match glob.as_deref().filter(|g| !g.is_empty()) {
        None => None,
        Some(g) => Some(
            globset::GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .map_err(|e| ToolError::Failed(format!("the glob is invalid: {e}")))?
                .compile_matcher(),
        ),
    };
    let mut entries = Vec::new();
    let mut truncated = false;
    walk(
        &dir,
        std::path::Path::new(""),
        matcher.as_ref(),
        0,
        &mut entries,
        &mut truncated,
    )
    .map_err(|e| io_error(&e, &shown))?;
    entries.sort_by(|a: &Value, b: &Value| a["path"].as_str().cmp(&b["path"].as_str()));
    Ok(json!({"path": shown, "entries": entries, "truncated": truncated}))
}

fn walk(
    dir: &cap_std::fs::Dir,
    prefix: &std::path::Path,
    matcher: Option<&globset::GlobMatcher>,
    depth: usize,
    out: &mut Vec<Value>,
    truncated: &mut bool,
) -> std::io::Result<()> {
    for entry in dir.entries()? {
        if out.len() >= MAX_ENTRIES {
            *truncated = true;
            return Ok(());
        }
        let entry = entry?;
        let name = entry.file_name();
        let rel = prefix.join(&name);
        let file_type = entry.file_type()?;
        let kind = if file_type.is_symlink() {
            "symlink"
        } else if file_type.is_dir() {
            "dir"
        } else {
            "file"
        };
        let shown = rel.to_string_lossy().into_owned();
        let size = if file_type.is_file() {
            entry.metadata().map(|m| m.len()).ok()
        } else {
            None
        };
        match matcher {
            None => out.push(json!({"path": shown, "type": kind, "size": size})),
            Some(m) => {
                if m.is_match(&rel) {
                    out.push(json!({"path": shown, "type": kind, "size": size}));
                }
                // Symlinked folders are not followed.
                if file_type.is_dir() && depth < MAX_DEPTH {
                    let sub = entry.open_dir()?;
                    walk(&sub, &rel, matcher, depth + 1, out, truncated)?;
                }
            }
        }
    }
    Ok(())
}

/// Whether a path exists in the workspace, and what it is.
#[tool(category = "files")]
pub fn file_exists(
    ctx: &ToolContext,
    /// Path relative to the workspace.
    path: String,
) -> Result<Value, ToolError> {
    let ws = Workspace::of(ctx)?;
    let rel = relative(&path)?;
    match ws.dir().metadata(&rel) {
        Ok(meta) => Ok(json!({
            "path": path,
            "exists": true,
            "type": if meta.is_dir() { "dir" } else { "file" },
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(json!({"path": path, "exists": false}))
        }
        Err(e) => Err(io_error(&e, &path)),
    }
}

/// Create a folder in the workspace, with its parents.
#[tool(category = "files")]
pub fn file_mkdir(
    ctx: &ToolContext,
    /// Path relative to the workspace.
    path: String,
) -> Result<Value, ToolError> {
    let ws = Workspace::of(ctx)?;
    let rel = relative(&path)?;
    if is_root(&rel) {
        return Ok(json!({"path": path, "created": false}));
    }
    let created = ensure_dir(&ws, &rel, &path)?;
    Ok(json!({"path": path, "created": created}))
}

/// Makes sure `rel` is a folder, creating it (and its parents) when
/// missing; `true` when it was created. Following `rel` first means a
/// symlink leading outside is refused rather than reported as existing.
fn ensure_dir(ws: &Workspace, rel: &std::path::Path, shown: &str) -> Result<bool, ToolError> {
    match ws.dir().metadata(rel) {
        Ok(meta) if meta.is_dir() => Ok(false),
        Ok(_) => Err(ToolError::Failed(format!(
            "{shown:?}: {} is a file, not a folder",
            rel.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            ws.dir()
                .create_dir_all(rel)
                .map_err(|e| io_error(&e, shown))?;
            Ok(true)
        }
        Err(e) => Err(io_error(&e, shown)),
    }
}

/// Delete a file or folder of the workspace (a folder with content only
/// with `recursive: true`). A symlink is removed, never its target.
#[tool(category = "files")]
pub fn file_delete(
    ctx: &ToolContext,
    /// Path relative to the workspace.
    path: String,
    /// Delete a folder with everything in it.
    recursive: Option<bool>,
) -> Result<Value, ToolError> {
    let ws = Workspace::of(ctx)?;
    let rel = relative(&path)?;
    if is_root(&rel) {
        return Err(ToolError::Refused(
            "the workspace itself cannot be deleted".into(),
        ));
    }
    let meta = ws
        .dir()
        .symlink_metadata(&rel)
        .map_err(|e| io_error(&e, &path))?;
    let kind = if meta.is_dir() {
        if recursive.unwrap_or(false) {
            ws.dir().remove_dir_all(&rel)
        } else {
            ws.dir().remove_dir(&rel)
        }
        .map_err(|e| io_error(&e, &path))?;
        "dir"
    } else {
        ws.dir()
            .remove_file(&rel)
            .map_err(|e| io_error(&e, &path))?;
        if meta.is_symlink() { "symlink" } else { "file" }
    };
    Ok(json!({"path": path, "deleted": kind}))
}
