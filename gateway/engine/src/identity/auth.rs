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
//! the server's `api` module; this module only decides.

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use sha2::{Digest, Sha256};

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
    /// The projects the key may use, the first by default (`"*"`: any
    /// project no key is pinned to, and the whole workspace); empty: its
    /// own folder alone.
    pub projects: Vec<String>,
    /// Every project some key of the configuration is pinned to.
    pub claimed: Arc<BTreeSet<String>>,
    /// What the key may do with the console.
    pub console: toolgate_config::format::ConsoleAccess,
    /// It may decide calls waiting for approval.
    pub approver: bool,
}

/// The grant of every project no key is pinned to, and of the whole
/// workspace, in a key's `projects`.
pub const ANY_PROJECT: &str = "*";

impl ApiKey {
    /// The project a request of this key works in. A key's files live in
    /// a folder of its own, `key-<name>`, unless the configuration grants
    /// it projects: then the one it names (if listed) or its first. A key
    /// granted `"*"` may name any project no key is pinned to, and works in
    /// the whole workspace when it names none. `Err` names the refusal.
    pub fn project(&self, asked: Option<String>) -> Result<Option<String>, String> {
        let anywhere = self.projects.iter().any(|p| p == ANY_PROJECT);
        let granted: Vec<&String> = self.projects.iter().filter(|p| *p != ANY_PROJECT).collect();
        match asked {
            Some(p) if granted.contains(&&p) => Ok(Some(p)),
            Some(p) if anywhere && !self.claimed.contains(&p) => Ok(Some(p)),
            Some(p) if anywhere => Err(format!(
                "the project `{p}` belongs to the API keys granted it, and API key `{}` is not one: list it in the key's `projects` to use it",
                self.name
            )),
            Some(p) if granted.is_empty() && p == self.own_folder() => Ok(Some(p)),
            Some(p) => Err(format!(
                "API key `{}` may not use the project `{p}`: a project is shared by the keys that list it in their `projects`{}",
                self.name,
                if granted.is_empty() {
                    format!("; this key works in its own folder `{}`", self.own_folder())
                } else {
                    format!(
                        "; this key may use: {}",
                        granted
                            .iter()
                            .map(|p| p.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            )),
            None if anywhere => Ok(None),
            None => match granted.first() {
                Some(first) => Ok(Some((*first).clone())),
                None => {
                    let own = self.own_folder();
                    if self.claimed.contains(&own) {
                        return Err(format!(
                            "API key `{}` has no project and its own folder `{own}` is another key's project: give the key `projects`",
                            self.name
                        ));
                    }
                    Ok(Some(own))
                }
            },
        }
    }

    /// The folder of a key granted no project.
    fn own_folder(&self) -> String {
        format!("key-{}", self.name).chars().take(64).collect()
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
    /// Bearer JWTs accepted besides the keys (`auth.jwt`).
    jwt: Option<Arc<crate::identity::jwt::JwtVerifier>>,
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

    /// The verifier of `auth.jwt`, when tokens of an authorization server
    /// are accepted.
    pub fn jwt(&self) -> Option<&Arc<crate::identity::jwt::JwtVerifier>> {
        self.jwt.as_ref()
    }

    pub(crate) fn set_jwt(&mut self, jwt: crate::identity::jwt::JwtVerifier) {
        self.jwt = Some(Arc::new(jwt));
    }

    /// The key called `name`.
    pub fn by_name(&self, name: &str) -> Option<&Arc<ApiKey>> {
        self.by_digest.values().find(|k| k.name == name)
    }

    /// Adds `key`; returns the key that had the same digest, if one did.
    pub(crate) fn insert(&mut self, digest: [u8; 32], key: Arc<ApiKey>) -> Option<Arc<ApiKey>> {
        self.by_digest.insert(digest, key)
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

pub(crate) fn parse_hex_digest(hex: &str) -> Option<[u8; 32]> {
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
