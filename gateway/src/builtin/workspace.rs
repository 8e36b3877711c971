//! The workspace: the one folder the file tools (and `exec`,
//! `execute_python`) may touch.
//!
//! Two layers keep a path inside it:
//! 1. a lexical check with a clear message: absolute paths and `..`
//!    components are refused outright;
//! 2. every operation goes through a `cap_std::fs::Dir` opened on the
//!    workspace, which resolves each path component itself (with
//!    `openat2(RESOLVE_BENEATH)` where available) and refuses any that would
//!    lead outside, symlinks included, without a window between check and
//!    use.
//!
//! With a project in the context, the workspace is `<workspace>/<project>/`.

use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::Dir;

use crate::tool::ToolError;
use crate::tool::context::{ToolContext, is_valid_project};

/// An opened workspace folder.
#[derive(Debug)]
pub struct Workspace {
    dir: Dir,
    root: PathBuf,
}

impl Workspace {
    /// The workspace of a call: `<workspace>/<project>/` when the context
    /// names a project, else the workspace itself; created when missing.
    pub fn of(ctx: &ToolContext) -> Result<Workspace, ToolError> {
        Workspace::open(&ctx.builtins().workspace, ctx.project.as_deref())
    }

    /// Opens `root` (or `root/project`), creating it when missing.
    pub fn open(root: &Path, project: Option<&str>) -> Result<Workspace, ToolError> {
        let root = match project {
            Some(p) if !is_valid_project(p) => {
                return Err(ToolError::Refused(format!("project {p:?} is invalid")));
            }
            Some(p) => root.join(p),
            None => root.to_owned(),
        };
        std::fs::create_dir_all(&root)
            .map_err(|e| ToolError::Failed(format!("the workspace cannot be created: {e}")))?;
        let dir = Dir::open_ambient_dir(&root, cap_std::ambient_authority())
            .map_err(|e| ToolError::Failed(format!("the workspace cannot be opened: {e}")))?;
        Ok(Workspace { dir, root })
    }

    /// The opened folder; every path given to it stays inside.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The folder's path (for the working directory of child processes).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Checks a path given by the model and returns it relative to the
/// workspace, `.` components removed (`.` itself for the workspace root).
pub fn relative(path: &str) -> Result<PathBuf, ToolError> {
    if path.contains('\0') {
        return Err(ToolError::Refused("the path contains a NUL byte".into()));
    }
    let p = Path::new(path);
    if p.is_absolute() || path.starts_with('/') || path.starts_with('\\') {
        return Err(ToolError::Refused(format!(
            "absolute path {path:?} refused: give a path relative to the workspace"
        )));
    }
    let mut out = PathBuf::new();
    for component in p.components() {
        match component {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(ToolError::Refused(format!(
                    "path {path:?} refused: `..` is not allowed, paths stay inside the workspace"
                )));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(ToolError::Refused(format!(
                    "absolute path {path:?} refused: give a path relative to the workspace"
                )));
            }
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    Ok(out)
}

/// `true` when a relative path (from [`relative`]) is the workspace root.
pub fn is_root(path: &Path) -> bool {
    path == Path::new(".")
}

/// Turns an I/O error on `path` into a tool error: an escape (through a
/// symlink) is a refusal, the rest say what went wrong.
pub fn io_error(e: &io::Error, path: &str) -> ToolError {
    if is_escape(e) {
        return ToolError::Refused(format!(
            "path {path:?} refused: it leads outside the workspace (through a symlink)"
        ));
    }
    match e.kind() {
        io::ErrorKind::NotFound => ToolError::Failed(format!("{path:?} does not exist")),
        io::ErrorKind::AlreadyExists => ToolError::Failed(format!("{path:?} already exists")),
        io::ErrorKind::PermissionDenied => {
            ToolError::Failed(format!("{path:?}: permission denied"))
        }
        io::ErrorKind::IsADirectory => ToolError::Failed(format!("{path:?} is a folder")),
        io::ErrorKind::NotADirectory => {
            ToolError::Failed(format!("a parent of {path:?} is not a folder"))
        }
        io::ErrorKind::DirectoryNotEmpty => ToolError::Failed(format!(
            "the folder {path:?} is not empty; pass `recursive: true` to delete it with its content"
        )),
        _ => ToolError::Failed(format!("{path:?}: {e}")),
    }
}

/// cap-std's error for a path that would leave the folder (its message is
/// the only thing telling it apart from other permission errors).
fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
        && e.to_string().contains("outside of the filesystem")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_check() {
        assert_eq!(relative("a/b.txt").unwrap(), PathBuf::from("a/b.txt"));
        assert_eq!(relative("./a/./b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(relative("").unwrap(), PathBuf::from("."));
        assert_eq!(relative(".").unwrap(), PathBuf::from("."));
        assert!(is_root(&relative("./").unwrap()));
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/..",
            "..",
            "\\x",
            "a\0b",
        ] {
            let e = relative(bad).unwrap_err();
            assert_eq!(e.code(), "refused", "{bad}: {e}");
        }
    }
}
