//! API keys: who may call the gateway, with which tool sets, how often.
//!
//! Keys are declared in `toolgate.yaml` (`auth.keys`), validated with the
//! rest of the configuration (so they reload with it), and kept only as
//! SHA-256 digests: the configuration holds the digest (`sha256`) or names
//! an environment variable holding the key (`key_env`, hashed at load). A
//! presented key is hashed and looked up; the key itself is never stored,
//! logged or compared byte by byte.
//!
//! The HTTP side (reading `Authorization`, answering 401/403/429) is in
//! [`crate::api`]; this module only decides.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use indexmap::IndexMap;
use sha2::{Digest, Sha256};

use crate::catalog::ToolSet;
use crate::tool::is_valid_name;
use toolgate_config::format::ApiKeyDecl;
use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, GatewayFile};

/// One validated API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Who holds it (logs, audit log).
    pub name: String,
    /// The tool sets it may use; `None` for all.
    pub tool_sets: Option<BTreeSet<String>>,
    /// The set used when a request names none.
    pub default_tool_set: Option<String>,
    pub requests_per_minute: Option<NonZeroU32>,
    pub tool_calls_per_minute: Option<NonZeroU32>,
    pub max_concurrent_loops: Option<NonZeroU32>,
    pub max_concurrent_streams: Option<NonZeroU32>,
    /// The projects the key may use, the first by default; empty: any.
    pub projects: Vec<String>,
}

impl ApiKey {
    /// The project a request of this key works in: the one it names (if
    /// the key may use it) or the key's first. `Err` names the refusal.
    pub fn project(&self, asked: Option<String>) -> Result<Option<String>, String> {
        match asked {
            None => Ok(self.projects.first().cloned()),
            Some(p) if self.projects.is_empty() || self.projects.contains(&p) => Ok(Some(p)),
            Some(p) => Err(format!(
                "API key `{}` may not use the project `{p}`; it may use: {}",
                self.name,
                self.projects.join(", ")
            )),
        }
    }

    /// `true` when the key may use the tool set `name`.
    pub fn may_use(&self, name: &str) -> bool {
        self.tool_sets.as_ref().is_none_or(|s| s.contains(name))
    }
}

/// The configured keys. Empty: the API is open.
#[derive(Debug, Default)]
pub struct ApiKeys {
    by_digest: HashMap<[u8; 32], Arc<ApiKey>>,
}

impl ApiKeys {
    /// `true` when at least one key is configured, so every request but
    /// `/healthz` must present one.
    pub fn required(&self) -> bool {
        !self.by_digest.is_empty()
    }

    /// The key `presented` is, if it is one.
    pub fn find(&self, presented: &str) -> Option<Arc<ApiKey>> {
        self.by_digest.get(&digest(presented)).cloned()
    }

    /// The key called `name`.
    pub fn by_name(&self, name: &str) -> Option<&Arc<ApiKey>> {
        self.by_digest.values().find(|k| k.name == name)
    }

    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

/// SHA-256 of a key.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Lower-case hex of SHA-256 of a key, as `auth.keys[].sha256` wants it.
pub fn digest_hex(key: &str) -> String {
    digest(key).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The bearer token of an `Authorization` header value, if it is one.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Validates `auth.keys`, collecting every error with its position.
/// `default_set` is the gateway's default tool set, if any.
pub(crate) fn check(
    file: &Loaded<GatewayFile>,
    sets: &IndexMap<String, ToolSet>,
    default_set: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> ApiKeys {
    let mut keys = ApiKeys::default();
    let mut names: HashMap<&str, toolgate_config::Pos> = HashMap::new();
    let set_names = || {
        sets.keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (i, decl) in file.value.auth.keys.iter().enumerate() {
        let at = |p: &str| file.pos(&format!("auth.keys[{i}]{p}"));
        let before = diags.iter().filter(|d| d.is_error()).count();
        let err = |diags: &mut Vec<Diagnostic>, p: &str, msg: String, hint: String| {
            diags.push(Diagnostic::error(&file.file, at(p), msg, hint));
        };
        if !is_valid_name(&decl.name) {
            err(
                diags,
                ".name",
                format!("API key name {:?} is invalid", decl.name),
                "use 1-64 letters, digits, `_` or `-`".into(),
            );
        } else if let Some(other) = names.get(decl.name.as_str()) {
            err(
                diags,
                ".name",
                format!(
                    "API key `{}` is also declared at {}:{}:{}",
                    decl.name, file.file, other.line, other.column
                ),
                "give every key its own name".into(),
            );
        } else {
            names.insert(&decl.name, at(".name"));
        }
        let digest = key_digest(decl, &at, &file.file, env, diags);
        let tool_sets = check_sets(decl, sets, &at, &file.file, &set_names, diags);
        let default_tool_set = match &decl.default_tool_set {
            Some(name) if !sets.contains_key(name) => {
                err(
                    diags,
                    ".default_tool_set",
                    format!("the tool set `{name}` does not exist"),
                    format!("name one of: {}", set_names()),
                );
                None
            }
            Some(name) if !tool_sets.as_ref().is_none_or(|s| s.contains(name)) => {
                err(
                    diags,
                    ".default_tool_set",
                    format!("the key may not use its default tool set `{name}`"),
                    "add it to the key's `tool_sets`".into(),
                );
                None
            }
            Some(name) => Some(name.clone()),
            // The gateway's default, when the key may use it.
            None => default_set
                .filter(|d| tool_sets.as_ref().is_none_or(|s| s.contains(*d)))
                .map(str::to_owned),
        };
        let mut limit = |p: &str, value: Option<u32>| -> Option<NonZeroU32> {
            let value = value?;
            let nz = NonZeroU32::new(value);
            if nz.is_none() {
                err(
                    diags,
                    p,
                    "a limit of 0 would refuse everything".into(),
                    "give a positive number, or remove the limit".into(),
                );
            }
            nz
        };
        let requests_per_minute = limit(
            ".limits.requests_per_minute",
            decl.limits.requests_per_minute,
        );
        let tool_calls_per_minute = limit(
            ".limits.tool_calls_per_minute",
            decl.limits.tool_calls_per_minute,
        );
        let max_concurrent_loops = limit(
            ".limits.max_concurrent_loops",
            decl.limits.max_concurrent_loops,
        );
        let max_concurrent_streams = limit(
            ".limits.max_concurrent_streams",
            decl.limits.max_concurrent_streams,
        );
        for (j, p) in decl.projects.iter().enumerate() {
            if !crate::tool::context::is_valid_project(p) {
                err(
                    diags,
                    &format!(".projects[{j}]"),
                    format!("{p:?} is not a valid project name"),
                    "use 1-64 letters, digits, `_`, `-` or `.`, starting with a letter or digit"
                        .into(),
                );
            }
        }
        if diags.iter().filter(|d| d.is_error()).count() != before {
            continue;
        }
        let Some(digest) = digest else { continue };
        let key = Arc::new(ApiKey {
            name: decl.name.clone(),
            tool_sets,
            default_tool_set,
            requests_per_minute,
            tool_calls_per_minute,
            max_concurrent_loops,
            max_concurrent_streams,
            projects: decl.projects.clone(),
        });
        if let Some(other) = keys.by_digest.insert(digest, key) {
            diags.push(Diagnostic::error(
                &file.file,
                at(""),
                format!(
                    "API keys `{}` and `{}` are the same key",
                    other.name, decl.name
                ),
                "give every holder a key of their own",
            ));
        }
    }
    keys
}

/// The digest of a key declaration: `sha256` or `key_env`, exactly one.
fn key_digest(
    decl: &ApiKeyDecl,
    at: &dyn Fn(&str) -> toolgate_config::Pos,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<[u8; 32]> {
    match (&decl.sha256, &decl.key_env) {
        (Some(_), Some(_)) => {
            diags.push(Diagnostic::error(
                file,
                at(".key_env"),
                "the key has both `sha256` and `key_env`",
                "keep one: the digest of the key, or the variable holding it",
            ));
            None
        }
        (None, None) => {
            diags.push(Diagnostic::error(
                file,
                at(""),
                format!("API key `{}` has neither `sha256` nor `key_env`", decl.name),
                "add `sha256:` with the hex SHA-256 of the key (`printf %s \"$KEY\" | sha256sum`), or `key_env:` naming a variable that holds it",
            ));
            None
        }
        (Some(hex), None) => {
            let parsed = parse_hex_digest(&hex.to_ascii_lowercase());
            if parsed.is_none() {
                diags.push(Diagnostic::error(
                    file,
                    at(".sha256"),
                    "`sha256` is not a SHA-256 digest (64 hex digits)",
                    "write the output of `printf %s \"$KEY\" | sha256sum` (without the trailing `-`), never the key itself",
                ));
            }
            parsed
        }
        (None, Some(var)) => match env(var).filter(|v| !v.trim().is_empty()) {
            Some(key) if key.trim().len() >= 16 => Some(digest(key.trim())),
            Some(_) => {
                diags.push(Diagnostic::error(
                    file,
                    at(".key_env"),
                    format!("the key in {var} is shorter than 16 characters"),
                    "use a long random key, e.g. from `openssl rand -hex 32`",
                ));
                None
            }
            None => {
                diags.push(Diagnostic::error(
                    file,
                    at(".key_env"),
                    format!(
                        "environment variable {var} (the API key `{}`) is not set",
                        decl.name
                    ),
                    "set it, or use `sha256:` with the key's digest",
                ));
                None
            }
        },
    }
}

fn check_sets(
    decl: &ApiKeyDecl,
    sets: &IndexMap<String, ToolSet>,
    at: &dyn Fn(&str) -> toolgate_config::Pos,
    file: &str,
    set_names: &dyn Fn() -> String,
    diags: &mut Vec<Diagnostic>,
) -> Option<BTreeSet<String>> {
    if decl.tool_sets.iter().any(|s| s == "*") {
        return None;
    }
    let mut allowed = BTreeSet::new();
    for (j, name) in decl.tool_sets.iter().enumerate() {
        if sets.contains_key(name) {
            allowed.insert(name.clone());
        } else {
            diags.push(Diagnostic::error(
                file,
                at(&format!(".tool_sets[{j}]")),
                format!("the tool set `{name}` does not exist"),
                format!("name one of: {} (or `\"*\"` for all)", set_names()),
            ));
        }
    }
    Some(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_hex_sha256() {
        // printf %s secret | sha256sum
        assert_eq!(
            digest_hex("secret"),
            "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
        );
        assert_eq!(
            parse_hex_digest(&digest_hex("secret")),
            Some(digest("secret"))
        );
        assert_eq!(parse_hex_digest("zz"), None);
        assert_eq!(parse_hex_digest(&"g".repeat(64)), None);
    }

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("abc"), None);
    }
}
