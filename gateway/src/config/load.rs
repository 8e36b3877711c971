//! Reading a configuration folder: `toolgate.yaml`, `tools.d/*.yaml` and
//! `tool-sets/*.yaml`, each parsed into its typed form.
//!
//! A file that does not parse is reported (with serde_yaml's position) and
//! left out; the other files are still read so every error shows at once.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::diag::Diagnostic;
use super::format::{GatewayFile, ToolFile, ToolSetFile};
use super::span::{Pos, SpanIndex};

/// A parsed file and where its values stand.
#[derive(Debug)]
pub struct Loaded<T> {
    /// Path relative to the configuration folder, for messages.
    pub file: String,
    pub spans: SpanIndex,
    pub value: T,
}

impl<T> Loaded<T> {
    /// The position of the value at `path` (see [`SpanIndex::find`]).
    pub fn pos(&self, path: &str) -> Pos {
        self.spans.find(path)
    }
}

/// Everything read from a configuration folder, before validation.
#[derive(Debug)]
pub struct RawConfig {
    pub dir: PathBuf,
    pub gateway: Loaded<GatewayFile>,
    pub tool_files: Vec<Loaded<ToolFile>>,
    pub set_files: Vec<Loaded<ToolSetFile>>,
}

pub const GATEWAY_FILE: &str = "toolgate.yaml";
pub const TOOLS_DIR: &str = "tools.d";
pub const SETS_DIR: &str = "tool-sets";

/// Reads and parses every file of the folder. Parse errors are appended to
/// `diags`; the files that failed are left out of the result.
pub fn load_dir(dir: &Path, diags: &mut Vec<Diagnostic>) -> RawConfig {
    let gateway_path = dir.join(GATEWAY_FILE);
    let gateway = if gateway_path.exists() {
        parse_file(dir, &gateway_path, diags)
    } else {
        None
    }
    .unwrap_or_else(|| Loaded {
        file: GATEWAY_FILE.to_owned(),
        spans: SpanIndex::default(),
        value: GatewayFile::default(),
    });
    let tool_files = yaml_files(dir, TOOLS_DIR, diags)
        .into_iter()
        .filter_map(|p| parse_file(dir, &p, diags))
        .collect();
    let set_files = yaml_files(dir, SETS_DIR, diags)
        .into_iter()
        .filter_map(|p| parse_file(dir, &p, diags))
        .collect();
    RawConfig {
        dir: dir.to_owned(),
        gateway,
        tool_files,
        set_files,
    }
}

/// The `.yaml`/`.yml` files of `dir/sub`, sorted by name. A missing folder
/// is empty, not an error.
fn yaml_files(dir: &Path, sub: &str, diags: &mut Vec<Diagnostic>) -> Vec<PathBuf> {
    let folder = dir.join(sub);
    let entries = match std::fs::read_dir(&folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            diags.push(Diagnostic::error(
                sub,
                Pos { line: 1, column: 1 },
                format!("cannot read the folder: {e}"),
                "check that it exists and is readable",
            ));
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    files.sort();
    files
}

fn display_path(dir: &Path, path: &Path) -> String {
    path.strip_prefix(dir)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn parse_file<T: DeserializeOwned + Default>(
    dir: &Path,
    path: &Path,
    diags: &mut Vec<Diagnostic>,
) -> Option<Loaded<T>> {
    let file = display_path(dir, path);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            diags.push(Diagnostic::error(
                &file,
                Pos { line: 1, column: 1 },
                format!("cannot read the file: {e}"),
                "check that it is readable UTF-8 text",
            ));
            return None;
        }
    };
    parse_text(&file, &text, diags)
}

/// Parses one file's text. Public for tests and for `toolgate check` on
/// single files.
pub fn parse_text<T: DeserializeOwned + Default>(
    file: &str,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Loaded<T>> {
    let is_empty = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    if is_empty {
        return Some(Loaded {
            file: file.to_owned(),
            spans: SpanIndex::default(),
            value: T::default(),
        });
    }
    match serde_yaml::from_str::<T>(text) {
        Ok(value) => Some(Loaded {
            file: file.to_owned(),
            spans: SpanIndex::new(text),
            value,
        }),
        Err(e) => {
            let pos = e
                .location()
                .map(|l| Pos {
                    line: l.line(),
                    column: l.column(),
                })
                .unwrap_or(Pos { line: 1, column: 1 });
            let (message, hint) = describe_yaml_error(&e.to_string());
            diags.push(Diagnostic::error(file, pos, message, hint));
            None
        }
    }
}

/// Turns serde_yaml's message into (what is wrong, how to fix it).
fn describe_yaml_error(raw: &str) -> (String, String) {
    // serde_yaml appends " at line L column C"; the position is shown apart.
    let message = match raw.rfind(" at line ") {
        Some(cut) => raw[..cut].to_owned(),
        None => raw.to_owned(),
    };
    let hint = if message.contains("unknown field") {
        "remove the field or fix its spelling (`toolgate schema` lists every field)"
    } else if message.contains("missing field") {
        "add the field (`toolgate schema` lists every field)"
    } else if message.contains("unknown variant") {
        "use one of the values listed"
    } else if message.contains("invalid type") {
        "give the value the type the message names"
    } else {
        "fix the YAML syntax at this position"
    };
    (message, hint.to_owned())
}
