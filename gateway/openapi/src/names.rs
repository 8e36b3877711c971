//! Tool and argument names: tool names from `operationId` (else method and
//! path) fitted to `^[A-Za-z0-9_-]{1,64}$` and never colliding, argument
//! names as template identifiers.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

/// The longest tool name.
pub const MAX_NAME: usize = 64;

/// `raw` with every character outside `A-Z a-z 0-9 _ -` as `_`, runs of
/// `_` collapsed, no `_` or `-` at either end.
pub fn sanitize(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    let out = out.trim_matches(['_', '-']);
    if out.is_empty() {
        "operation".into()
    } else {
        out.into()
    }
}

/// The name of an operation without an `operationId`: `get_pets_petId`.
pub fn from_method_and_path(method: &str, path: &str) -> String {
    sanitize(&format!("{method}_{}", path.replace(['{', '}'], "")))
}

/// Hands out unique tool names.
#[derive(Debug, Default)]
pub struct Names {
    used: HashSet<String>,
}

impl Names {
    /// `prefix` + `base`, or, when that is too long or taken, its start and
    /// an 8-character hash of `key` (the operation's method and path), so
    /// the same spec always gives the same names.
    pub fn assign(&mut self, prefix: &str, base: &str, key: &str) -> String {
        let name = format!("{prefix}{base}");
        if name.len() <= MAX_NAME && self.used.insert(name.clone()) {
            return name;
        }
        let stem: String = name.chars().take(MAX_NAME - 9).collect();
        let stem = stem.trim_end_matches(['_', '-']);
        for round in 0u32.. {
            let hash = Sha256::digest(format!("{key}#{round}"));
            let suffix: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
            let candidate = format!("{stem}_{suffix}");
            if self.used.insert(candidate.clone()) {
                return candidate;
            }
        }
        unreachable!("u32 rounds of hashing cannot all collide")
    }
}

/// `name` as a template identifier (`args.<ident>`): `A-Z a-z 0-9 _`, not
/// starting with a digit.
pub fn ident(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `true` for a cookie name (an RFC 6265 token): also what keeps a name
/// from carrying template syntax into the `Cookie` header's template.
pub fn is_cookie_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$&'*+-.^_`|~".contains(c))
}

/// `s` cut to `max` characters, with `…` when cut.
pub(crate) fn cap(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_unique_and_stable() {
        assert_eq!(sanitize("repos/get-content"), "repos_get-content");
        assert_eq!(sanitize("  weird name!!"), "weird_name");
        assert_eq!(sanitize("???"), "operation");
        assert_eq!(
            from_method_and_path("get", "/pets/{petId}"),
            "get_pets_petId"
        );

        let mut names = Names::default();
        assert_eq!(names.assign("gh_", "list", "GET /a"), "gh_list");
        let second = names.assign("gh_", "list", "GET /b");
        assert!(
            second.starts_with("gh_list_") && second.len() == 16,
            "{second}"
        );
        let long = "x".repeat(100);
        let a = names.assign("", &long, "GET /long");
        assert_eq!(a.len(), MAX_NAME);
        let mut again = Names::default();
        assert_eq!(again.assign("", &long, "GET /long"), a);
        for name in [second, a] {
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            );
        }
    }

    #[test]
    fn identifiers() {
        assert_eq!(ident("X-Request-Id"), "X_Request_Id");
        assert_eq!(ident("filter[status]"), "filter_status_");
        assert_eq!(ident("2fa"), "_2fa");
    }
}
