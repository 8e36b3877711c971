//! Sealing what the gateway keeps or hands out for users' connections
//! (stored tokens, connect links, the OAuth `state`): AES-256-GCM with a
//! random nonce, bound to what the sealed text is for (its purpose, the
//! connection and the user), under the key of `connections.key_env`.
//!
//! A sealed text starts with the first four bytes of the SHA-256 of the
//! key that sealed it: a text sealed under `previous_key_env` is still
//! opened (and the store seals it again under the current key), one sealed
//! under any other key is refused.

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine as _;
use sha2::Digest as _;

/// The version byte every sealed text starts with.
const VERSION: u8 = 1;

/// A key that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BadKey {
    #[error("is not 32 bytes in base64 or hex (it decodes to {0} bytes)")]
    Length(usize),
    #[error("is not base64 or hex")]
    Encoding,
}

/// A sealed text that cannot be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unsealed {
    #[error("it was sealed under a key this gateway does not have")]
    UnknownKey,
    #[error("it is damaged, or was sealed for something else")]
    Damaged,
}

/// One key: its AES-256-GCM key and its fingerprint.
struct Key {
    aead: RandomizedNonceKey,
    id: [u8; 4],
}

impl Key {
    fn new(bytes: &[u8]) -> Result<Key, BadKey> {
        let aead = RandomizedNonceKey::new(&AES_256_GCM, bytes)
            .map_err(|_| BadKey::Length(bytes.len()))?;
        let digest = sha2::Sha256::digest(bytes);
        let mut id = [0; 4];
        id.copy_from_slice(&digest[..4]);
        Ok(Key { aead, id })
    }
}

/// The current key and, during a rotation, the previous one.
pub struct Seal {
    current: Key,
    previous: Option<Key>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal(..)")
    }
}

/// Reads a key written in base64 (standard or URL-safe, padded or not) or
/// hex; it must be 32 bytes.
pub fn decode_key(text: &str) -> Result<Vec<u8>, BadKey> {
    let text = text.trim();
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| BadKey::Encoding)?
    } else {
        let cleaned = text.trim_end_matches('=');
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(cleaned)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cleaned))
            .map_err(|_| BadKey::Encoding)?
    };
    if bytes.len() != 32 {
        return Err(BadKey::Length(bytes.len()));
    }
    Ok(bytes)
}

impl Seal {
    pub fn new(current: &[u8], previous: Option<&[u8]>) -> Result<Seal, BadKey> {
        Ok(Seal {
            current: Key::new(current)?,
            previous: previous.map(Key::new).transpose()?,
        })
    }

    /// `plain` sealed for `context` (what it is for, and whose).
    pub fn seal(&self, context: &[u8], plain: &[u8]) -> Vec<u8> {
        let mut buffer = plain.to_vec();
        let nonce = match self
            .current
            .aead
            .seal_in_place_append_tag(Aad::from(context), &mut buffer)
        {
            Ok(nonce) => nonce,
            // Sealing fails only for inputs of gigabytes; nothing sealed
            // here comes near that, and an empty text never opens.
            Err(_) => return Vec::new(),
        };
        let mut out = Vec::with_capacity(1 + 4 + NONCE_LEN + buffer.len());
        out.push(VERSION);
        out.extend_from_slice(&self.current.id);
        out.extend_from_slice(nonce.as_ref());
        out.extend_from_slice(&buffer);
        out
    }

    /// The text `sealed` holds, if it was sealed for `context` under one of
    /// the keys; and whether that was the previous key (so the caller can
    /// seal it again under the current one).
    pub fn open(&self, context: &[u8], sealed: &[u8]) -> Result<(Vec<u8>, bool), Unsealed> {
        if sealed.len() < 1 + 4 + NONCE_LEN || sealed[0] != VERSION {
            return Err(Unsealed::Damaged);
        }
        let id = &sealed[1..5];
        let (key, old) = if id == self.current.id {
            (&self.current, false)
        } else {
            match &self.previous {
                Some(p) if id == p.id => (p, true),
                _ => return Err(Unsealed::UnknownKey),
            }
        };
        let nonce = Nonce::try_assume_unique_for_key(&sealed[5..5 + NONCE_LEN])
            .map_err(|_| Unsealed::Damaged)?;
        let mut buffer = sealed[5 + NONCE_LEN..].to_vec();
        let plain = key
            .aead
            .open_in_place(nonce, Aad::from(context), &mut buffer)
            .map_err(|_| Unsealed::Damaged)?;
        Ok((plain.to_vec(), old))
    }

    /// [`seal`](Self::seal) as URL-safe base64, for links and `state`.
    pub fn seal_text(&self, context: &[u8], plain: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.seal(context, plain))
    }

    /// [`open`](Self::open) of URL-safe base64.
    pub fn open_text(&self, context: &[u8], sealed: &str) -> Result<Vec<u8>, Unsealed> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(sealed.trim_end_matches('='))
            .map_err(|_| Unsealed::Damaged)?;
        self.open(context, &bytes).map(|(plain, _)| plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 32] = [7; 32];
    const B: [u8; 32] = [9; 32];

    #[test]
    fn a_sealed_text_opens_only_for_its_context_and_keys() {
        let seal = Seal::new(&A, None).unwrap();
        let sealed = seal.seal(b"token\0github\0alice", b"secret");
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(
            seal.open(b"token\0github\0alice", &sealed).unwrap(),
            (b"secret".to_vec(), false)
        );
        // Another user's context: refused (a token cannot be moved).
        assert_eq!(
            seal.open(b"token\0github\0bob", &sealed),
            Err(Unsealed::Damaged)
        );
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            seal.open(b"token\0github\0alice", &flipped),
            Err(Unsealed::Damaged)
        );
        // Rotation: the new key reads the old key's text, and says so.
        let rotated = Seal::new(&B, Some(&A)).unwrap();
        assert_eq!(
            rotated.open(b"token\0github\0alice", &sealed).unwrap(),
            (b"secret".to_vec(), true)
        );
        // Without the old key: refused, named as such.
        let other = Seal::new(&B, None).unwrap();
        assert_eq!(
            other.open(b"token\0github\0alice", &sealed),
            Err(Unsealed::UnknownKey)
        );
        assert_eq!(seal.open(b"x", b"short"), Err(Unsealed::Damaged));
    }

    #[test]
    fn keys_are_read_in_base64_or_hex_and_must_be_32_bytes() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(A);
        assert_eq!(decode_key(&b64).unwrap(), A.to_vec());
        let hex: String = A.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(decode_key(&hex).unwrap(), A.to_vec());
        assert!(matches!(decode_key("c2hvcnQ="), Err(BadKey::Length(5))));
        assert!(matches!(decode_key("not a key!"), Err(BadKey::Encoding)));
    }
}
