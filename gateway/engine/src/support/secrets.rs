//! Keeping secrets out of what the gateway says: a [`Secret`] never shows
//! in logs or `Debug` output, and a [`Scrubber`] replaces
//! every secret it was given, in every encoding the gateway itself applies
//! when it sends one (raw, percent-encoded, form-encoded, JSON-escaped,
//! base64), with `[redacted]`.
//!
//! Error messages built from a backend's or an upstream's answer go through
//! one before they reach a client, a model, the logs or the audit log: a
//! backend that echoes the request cannot hand its credentials on.

use base64::Engine;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// A secret that never appears in logs or `Debug` output.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Shorter values are not scrubbed: replacing every `a` or `1` in a message
/// would destroy it and protect nothing.
const MIN_SECRET_CHARS: usize = 4;

/// The text that replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Replaces secrets, in all their encodings, in text.
#[derive(Debug, Clone, Default)]
pub struct Scrubber {
    /// Every form of every secret, longest first (so a longer form is
    /// replaced before a shorter one inside it).
    needles: Vec<String>,
}

impl Scrubber {
    /// A scrubber of `secrets`.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Scrubber {
        let mut s = Scrubber::default();
        for secret in secrets {
            s.add(secret);
        }
        s
    }

    /// Adds one secret (in all its forms). A value sent as a whole header
    /// (`Basic dXNlcjpwYXNz`) is added whole and by its credential, the
    /// last word (the scheme word is no secret).
    pub fn add(&mut self, secret: &str) {
        let mut forms = vec![secret.to_owned()];
        if let Some((_, last)) = secret.trim().rsplit_once(char::is_whitespace) {
            forms.push(last.to_owned());
        }
        let mut all = Vec::new();
        for form in forms {
            if form.chars().count() < MIN_SECRET_CHARS {
                continue;
            }
            all.push(utf8_percent_encode(&form, NON_ALPHANUMERIC).to_string());
            all.push(url::form_urlencoded::byte_serialize(form.as_bytes()).collect());
            if let Ok(json) = serde_json::to_string(&form) {
                all.push(json.trim_matches('"').to_owned());
            }
            all.push(base64::engine::general_purpose::STANDARD.encode(form.as_bytes()));
            all.push(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(form.as_bytes()));
            all.push(form);
        }
        for form in all {
            if !self.needles.contains(&form) {
                self.needles.push(form);
            }
        }
        self.needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    }

    /// `true` when there is nothing to scrub.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// `text` with every secret replaced.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for needle in &self.needles {
            if out.contains(needle.as_str()) {
                out = out.replace(needle.as_str(), REDACTED);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_encoding_is_scrubbed() {
        let secret = "s3cr3t/key+with space&\"quote\"";
        let s = Scrubber::new([secret]);
        let encodings = [
            secret.to_owned(),
            utf8_percent_encode(secret, NON_ALPHANUMERIC).to_string(),
            url::form_urlencoded::byte_serialize(secret.as_bytes()).collect(),
            serde_json::to_string(secret).unwrap(),
            base64::engine::general_purpose::STANDARD.encode(secret),
        ];
        for e in encodings {
            let out = s.scrub(&format!("backend said: {e} (end)"));
            assert!(!out.contains("s3cr3t"), "{e} -> {out}");
            assert!(out.contains(REDACTED), "{out}");
        }
    }

    #[test]
    fn a_basic_header_is_scrubbed_whole_and_by_its_token() {
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("user:pass")
        );
        let s = Scrubber::new([header.as_str()]);
        assert_eq!(s.scrub("got dXNlcjpwYXNz"), "got [redacted]");
        assert_eq!(s.scrub(&format!("echo: {header}")), "echo: [redacted]");
        assert_eq!(s.scrub("Basic auth failed"), "Basic auth failed");
    }

    #[test]
    fn short_values_are_left_alone() {
        let s = Scrubber::new(["ab"]);
        assert!(s.is_empty());
        assert_eq!(s.scrub("abc"), "abc");
    }
}
