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
//! With a project in the context, the workspace is `<workspace>/<project>/`,
//! opened through the workspace's `Dir` without following a symlink: code
//! run by a tool can make `<workspace>/p` a link (to `/`, or to another
//! project), and such a project is refused, not followed.
//!
//! When code runs as a sandbox user (the gateway is root), the workspace
//! folder is handed to that user so the code can write in it.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Component, Path, PathBuf};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use toolgate::ToolError;
use toolgate::context::{ToolContext, is_valid_project};

/// An opened workspace folder.
#[derive(Debug)]
pub struct Workspace {
    dir: Dir,
    root: PathBuf,
}

impl Workspace {
    /// The workspace of a call: `<workspace>/<project>/` when the context
    /// names a project, else the workspace itself; created when missing,
    /// and owned by the sandbox user when there is one.
    pub fn of(ctx: &ToolContext) -> Result<Workspace, ToolError> {
        let settings = crate::settings(ctx)?;
        let owner = settings.sandbox().ok().and_then(|s| s.user);
        Workspace::open_for(&settings.workspace, ctx.project.as_deref(), owner)
    }

    /// Opens `root` (or `root/project`), creating it when missing.
    pub fn open(root: &Path, project: Option<&str>) -> Result<Workspace, ToolError> {
        Workspace::open_for(root, project, None)
    }

    /// [`open`](Self::open), handing the folder to `owner` (uid, gid).
    pub fn open_for(
        root: &Path,
        project: Option<&str>,
        owner: Option<(u32, u32)>,
    ) -> Result<Workspace, ToolError> {
        if let Some(p) = project
            && !is_valid_project(p)
        {
            return Err(ToolError::Refused(format!("project {p:?} is invalid")));
        }
        // The configured folder is the operator's: opened as configured.
        std::fs::create_dir_all(root)
            .map_err(|e| ToolError::Failed(format!("the workspace cannot be created: {e}")))?;
        let base = Dir::open_ambient_dir(root, cap_std::ambient_authority())
            .map_err(|e| ToolError::Failed(format!("the workspace cannot be opened: {e}")))?;
        let (dir, root) = match project {
            None => (base, root.to_owned()),
            Some(p) => (open_project(&base, p)?, root.join(p)),
        };
        if let Some((uid, gid)) = owner {
            use cap_std::fs::MetadataExt;
            let meta = dir
                .dir_metadata()
                .map_err(|e| ToolError::Failed(format!("the workspace cannot be read: {e}")))?;
            if meta.uid() != uid {
                // The configured folder by its (trusted) path; a project
                // folder by the descriptor opened without following links.
                let given = match project {
                    None => std::os::unix::fs::chown(&root, Some(uid), Some(gid)),
                    Some(_) => std::os::unix::fs::fchown(dir.as_fd(), Some(uid), Some(gid)),
                };
                given.map_err(|e| {
                    ToolError::Failed(format!(
                        "the workspace cannot be given to the sandbox user: {e}"
                    ))
                })?;
            }
        }
        Ok(Workspace { dir, root })
    }

    /// The opened folder; every path given to it stays inside.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The folder's path (for `HOME` of child processes and messages).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The working directory for a child: the opened folder itself, by its
    /// descriptor (the child changes into it before it starts, so no
    /// symlink swapped in meanwhile can move it elsewhere). Valid while
    /// `self` lives.
    pub fn cwd(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_fd().as_raw_fd()))
    }
}

/// Opens (creating it when missing) the project folder `name` inside
/// `base`, refusing a symlink.
fn open_project(base: &Dir, name: &str) -> Result<Dir, ToolError> {
    match base.create_dir(name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error(&e, name)),
    }
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW);
    match base.open_with(name, &options) {
        Ok(file) => Ok(Dir::from_std_file(file.into_std())),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::ELOOP | nix::libc::ENOTDIR)
            ) =>
        {
            Err(ToolError::Refused(format!(
                "the project folder {name:?} is a symlink or not a folder; refusing to follow it"
            )))
        }
        Err(e) => Err(io_error(&e, name)),
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
