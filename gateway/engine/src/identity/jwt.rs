//! Bearer JWTs from an OAuth authorization server (`auth.jwt`): a token
//! signed by one of the issuer's keys (its JWKS), for this gateway
//! (`aud`), not expired, acts as the API key its claim names.
//!
//! Only asymmetric signatures are accepted (RSA, ECDSA, EdDSA: a JWKS holds
//! public keys), with the algorithm the key itself declares when it does.
//! A JWKS from a URL is fetched on first use, again when a token names a
//! key it lacks (at most every [`REFETCH_AFTER`]) and when it is older than
//! [`MAX_AGE`]; the fetch is bounded in bytes and time, and tokens arriving
//! meanwhile wait for it. The HTTP side (401 and its header) is the
//! server's.

use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// A remote JWKS is fetched again for an unknown key at most this often.
pub const REFETCH_AFTER: Duration = Duration::from_secs(30);
/// A remote JWKS is fetched again when older than this, so a key the
/// issuer withdrew stops being trusted.
pub const MAX_AGE: Duration = Duration::from_secs(3600);
/// Largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// Longest a JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a token is refused (said to the client: nothing secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("the token is not a valid JWT: {0}")]
    Malformed(String),
    #[error("the token is signed with {0:?}; only RSA, ECDSA and EdDSA signatures are accepted")]
    Algorithm(Algorithm),
    #[error("the token's signing key is not among the issuer's keys")]
    UnknownKey,
    #[error("the token is not valid: {0}")]
    Invalid(String),
    #[error("the token has no string claim `{0}` naming an API key")]
    NoKeyClaim(String),
    #[error("the issuer's keys cannot be fetched: {0}")]
    Jwks(String),
}

/// A token that holds: the API key it acts as, who it says calls, and all
/// its claims.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The API key the token's key claim names.
    pub key: String,
    /// Its `sub` claim, if a string.
    pub subject: Option<String>,
    pub claims: Value,
    /// The token itself (forwarded or exchanged for upstreams that ask).
    pub token: toolgate::BearerToken,
}

/// Where the issuer's keys come from.
enum Source {
    Fixed(JwkSet),
    Remote {
        url: String,
        http: reqwest::Client,
        keys: ArcSwapOption<JwkSet>,
        /// When the keys were last fetched; held during a fetch.
        fetched: tokio::sync::Mutex<Option<Instant>>,
    },
}

/// Checks tokens of one issuer for one audience.
pub struct JwtVerifier {
    issuer: String,
    audience: String,
    claim: String,
    source: Source,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("claim", &self.claim)
            .finish()
    }
}

/// Parses a JWKS document.
pub fn parse_jwks(text: &str) -> Result<JwkSet, String> {
    serde_json::from_str(text).map_err(|e| format!("not a JWKS document: {e}"))
}

impl JwtVerifier {
    /// A verifier with the keys of `jwks` (read from a file at load).
    pub fn with_keys(issuer: String, audience: String, claim: String, jwks: JwkSet) -> Self {
        JwtVerifier {
            issuer,
            audience,
            claim,
            source: Source::Fixed(jwks),
        }
    }

    /// A verifier fetching its keys from `url` when it needs them.
    pub fn with_url(
        issuer: String,
        audience: String,
        claim: String,
        url: String,
        http: reqwest::Client,
    ) -> Self {
        JwtVerifier {
            issuer,
            audience,
            claim,
            source: Source::Remote {
                url,
                http,
                keys: ArcSwapOption::empty(),
                fetched: tokio::sync::Mutex::new(None),
            },
        }
    }

    /// The issuer, for the protected-resource metadata.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// `true` when `token` has the shape of a JWT (three dot-separated
    /// parts), so it is checked here rather than as an API key.
    pub fn looks_like_jwt(token: &str) -> bool {
        token.split('.').count() == 3 && token.len() > 20
    }

    /// The name of the API key `token` acts as, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Verified, JwtError> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| JwtError::Malformed(e.to_string()))?;
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return Err(JwtError::Algorithm(header.alg));
        }
        let key = self.key(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation)
            .map_err(|e| JwtError::Invalid(e.to_string()))?;
        let key = data
            .claims
            .get(&self.claim)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| JwtError::NoKeyClaim(self.claim.clone()))?;
        let subject = data
            .claims
            .get("sub")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Verified {
            key,
            subject,
            claims: data.claims,
            token: toolgate::BearerToken::new(token),
        })
    }

    /// The decoding key for `kid` (or the only key, when the token names
    /// none), fetching the JWKS again when a remote one lacks it.
    async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, JwtError> {
        let pick = |set: &JwkSet| -> Option<Result<DecodingKey, JwtError>> {
            let jwk = match kid {
                Some(kid) => set.find(kid),
                None if set.keys.len() == 1 => set.keys.first(),
                None => None,
            }?;
            if let Some(declared) = jwk.common.key_algorithm
                && format!("{declared:?}") != format!("{alg:?}")
            {
                return Some(Err(JwtError::Invalid(format!(
                    "the token says {alg:?} but its key is for {declared:?}"
                ))));
            }
            Some(DecodingKey::from_jwk(jwk).map_err(|e| JwtError::Invalid(e.to_string())))
        };
        match &self.source {
            Source::Fixed(set) => pick(set).unwrap_or(Err(JwtError::UnknownKey)),
            Source::Remote {
                url,
                http,
                keys,
                fetched,
            } => {
                // One fetch at a time; the others wait for it and use it.
                let mut last = fetched.lock().await;
                let fresh = last.is_some_and(|t| t.elapsed() < MAX_AGE);
                if fresh
                    && let Some(set) = keys.load_full()
                    && let Some(found) = pick(&set)
                {
                    return found;
                }
                if last.is_some_and(|t| t.elapsed() < REFETCH_AFTER) {
                    return Err(JwtError::UnknownKey);
                }
                let set = fetch(http, url).await?;
                *last = Some(Instant::now());
                let found = pick(&set);
                keys.store(Some(std::sync::Arc::new(set)));
                found.unwrap_or(Err(JwtError::UnknownKey))
            }
        }
    }
}

/// Fetches a JWKS, bounded in bytes and time.
async fn fetch(http: &reqwest::Client, url: &str) -> Result<JwkSet, JwtError> {
    let read = async {
        let mut resp = http
            .get(url)
            .send()
            .await
            .map_err(|e| JwtError::Jwks(e.without_url().to_string()))?;
        if !resp.status().is_success() {
            return Err(JwtError::Jwks(format!("HTTP {}", resp.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| JwtError::Jwks(e.without_url().to_string()))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(JwtError::Jwks(format!(
                    "the document is larger than {MAX_JWKS_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        parse_jwks(&String::from_utf8_lossy(&body)).map_err(JwtError::Jwks)
    };
    tokio::time::timeout(FETCH_TIMEOUT, read)
        .await
        .map_err(|_| JwtError::Jwks(format!("no answer within {FETCH_TIMEOUT:?}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier() -> JwtVerifier {
        let jwks = parse_jwks(r#"{"keys": []}"#).unwrap_or_else(|e| panic!("{e}"));
        JwtVerifier::with_keys(
            "https://issuer.test".into(),
            "toolgate".into(),
            "toolgate_key".into(),
            jwks,
        )
    }

    #[tokio::test]
    async fn shared_secret_signatures_and_garbage_are_refused() {
        let claims = serde_json::json!({"iss": "https://issuer.test", "aud": "toolgate", "exp": 4_000_000_000u64, "toolgate_key": "a"});
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(b"a shared secret of some length"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verifier().verify(&hs).await,
            Err(JwtError::Algorithm(Algorithm::HS256))
        );
        assert!(matches!(
            verifier().verify("a.b.c").await,
            Err(JwtError::Malformed(_))
        ));
        assert!(!JwtVerifier::looks_like_jwt("an-api-key-0123456789"));
        assert!(JwtVerifier::looks_like_jwt(&hs));
    }
}
