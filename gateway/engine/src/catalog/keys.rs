//! `auth.keys` checked and resolved into the [`ApiKeys`] the server
//! authenticates with.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use indexmap::IndexMap;
use toolgate_config::format::ApiKeyDecl;
use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, GatewayFile};

use super::ToolSet;
use crate::identity::auth::{ApiKey, ApiKeys, digest, parse_hex_digest};
use crate::tools::tool::is_valid_name;

/// Validates `auth.keys`, collecting every error with its position.
/// `default_set` is the gateway's default tool set, if any.
pub(crate) fn check(
    file: &Loaded<GatewayFile>,
    sets: &IndexMap<String, ToolSet>,
    default_set: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    dir: &std::path::Path,
    diags: &mut Vec<Diagnostic>,
) -> ApiKeys {
    let mut keys = ApiKeys::default();
    let mut names: HashMap<&str, toolgate_config::Pos> = HashMap::new();
    // Every project some key is pinned to: no unpinned key sees inside them.
    let claimed: std::sync::Arc<std::collections::BTreeSet<String>> = std::sync::Arc::new(
        file.value
            .auth
            .keys
            .iter()
            .flat_map(|k| k.projects.iter().cloned())
            .filter(|p| p != crate::identity::auth::ANY_PROJECT)
            .collect(),
    );
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
            if p != crate::identity::auth::ANY_PROJECT
                && !crate::tools::tool::context::is_valid_project(p)
            {
                err(
                    diags,
                    &format!(".projects[{j}]"),
                    format!("{p:?} is not a valid project name"),
                    "use 1-64 letters, digits, `_`, `-` or `.`, starting with a letter or digit (or `*`: the whole workspace and any project no key lists)"
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
            claimed: std::sync::Arc::clone(&claimed),
            console: decl.console,
            approver: decl.approver,
        });
        if let Some(other) = keys.insert(digest, key) {
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
    if let Some(decl) = &file.value.auth.jwt
        && let Some(jwt) = jwt_verifier(file, dir, decl, diags)
    {
        if keys.is_empty() {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos("auth.jwt"),
                "`auth.jwt` makes tokens act as API keys, but no key is declared",
                "declare in `auth.keys` the keys tokens may name (their sets and limits apply)",
            ));
        }
        keys.set_jwt(jwt);
    }
    keys
}

/// `auth.jwt`: its issuer, audience, claim and exactly one JWKS source
/// (a file read now, or an `https` URL, or `http` to this machine).
fn jwt_verifier(
    file: &Loaded<GatewayFile>,
    dir: &std::path::Path,
    decl: &toolgate_config::format::JwtDecl,
    diags: &mut Vec<Diagnostic>,
) -> Option<crate::identity::jwt::JwtVerifier> {
    let at = |p: &str| file.pos(&format!("auth.jwt{p}"));
    let mut err = |p: &str, msg: String, hint: &str| {
        diags.push(Diagnostic::error(&file.file, at(p), msg, hint));
    };
    for (field, value) in [
        (".issuer", &decl.issuer),
        (".audience", &decl.audience),
        (".key_claim", &decl.key_claim),
    ] {
        if value.trim().is_empty() {
            err(
                field,
                format!("`auth.jwt{field}` is empty"),
                "set it: tokens are checked against it",
            );
            return None;
        }
    }
    let (issuer, audience, claim) = (
        decl.issuer.clone(),
        decl.audience.clone(),
        decl.key_claim.clone(),
    );
    match (&decl.jwks_url, &decl.jwks_file) {
        (Some(_), Some(_)) | (None, None) => {
            err(
                "",
                "`auth.jwt` needs exactly one of `jwks_url` and `jwks_file`".into(),
                "name where the issuer's public keys are: its JWKS URL, or a file holding them",
            );
            None
        }
        (None, Some(path)) => {
            let text = match std::fs::read_to_string(dir.join(path)) {
                Ok(text) => text,
                Err(e) => {
                    err(
                        ".jwks_file",
                        format!("cannot read {path}: {e}"),
                        "give a path relative to the configuration folder",
                    );
                    return None;
                }
            };
            match crate::identity::jwt::parse_jwks(&text) {
                Ok(jwks) => Some(crate::identity::jwt::JwtVerifier::with_keys(
                    issuer, audience, claim, jwks,
                )),
                Err(e) => {
                    err(
                        ".jwks_file",
                        format!("{path}: {e}"),
                        "the file must hold the issuer's JWKS: {\"keys\": [...]}",
                    );
                    None
                }
            }
        }
        (Some(url), None) => {
            let parsed = url::Url::parse(url).ok();
            let acceptable = parsed.as_ref().is_some_and(|u| {
                u.scheme() == "https"
                    || (u.scheme() == "http"
                        && matches!(u.host_str(), Some("localhost" | "127.0.0.1" | "[::1]")))
            });
            if !acceptable {
                err(
                    ".jwks_url",
                    format!("{url:?} is not an https URL"),
                    "the keys that vouch for tokens must come over https (http only from this machine)",
                );
                return None;
            }
            match crate::tools::tool::http::client() {
                Ok(http) => Some(crate::identity::jwt::JwtVerifier::with_url(
                    issuer,
                    audience,
                    claim,
                    url.clone(),
                    http,
                )),
                Err(e) => {
                    err(
                        ".jwks_url",
                        format!("no HTTP client for the JWKS: {e}"),
                        "this is a bug; please report it",
                    );
                    None
                }
            }
        }
    }
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
