//! Secrets sealed at rest: webhook signing secrets are stored encrypted (ChaCha20-Poly1305)
//! under a key from the environment, so a copy of the database (a backup, a replica, a leaked
//! dump) does not sign webhooks.
//!
//! `WEBHOOK_SECRETS_KEYS` is a comma-separated list of `id:key` (the key 32 bytes in standard
//! base64); the first seals, every one opens. A stored secret reads
//! `sealed:v1:<id>:<base64 of nonce (12 bytes) and ciphertext>`, with the owner's wallet as
//! associated data: a sealed secret moved to another merchant's row does not open. Text
//! without the `sealed:` prefix is a secret stored before sealing, read as it is (and
//! sealed again by the API at start). Rotation: put a new key first, keep the old one after
//! it until every process runs with the list and the API has sealed again, then drop it.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

const PREFIX: &str = "sealed:v1:";

/// The sealing keys, current first.
#[derive(Clone)]
pub struct SealingKeys {
    keys: Vec<(String, Key)>,
}

/// Why a key list or a stored secret could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// `WEBHOOK_SECRETS_KEYS` is malformed; the text says how.
    #[error("WEBHOOK_SECRETS_KEYS: {0}")]
    Keys(String),
    /// A stored secret is sealed with a key id (given) that the list does not hold.
    #[error("a stored secret is sealed with key `{0}`, which WEBHOOK_SECRETS_KEYS does not hold")]
    UnknownKey(String),
    /// A stored secret does not decode or decrypt (altered, or moved from another row).
    #[error("a stored secret does not open (altered, or not this row's)")]
    Corrupt,
}

impl fmt::Debug for SealingKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("SealingKeys").field("ids", &ids).finish()
    }
}

impl std::str::FromStr for SealingKeys {
    type Err = SealError;

    fn from_str(s: &str) -> Result<Self, SealError> {
        let mut keys: Vec<(String, Key)> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (id, b64) = item
                .split_once(':')
                .ok_or_else(|| SealError::Keys("each key is `id:base64`".into()))?;
            let id_ok = !id.is_empty()
                && id.len() <= 16
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !id_ok {
                return Err(SealError::Keys(format!(
                    "key id `{id}` must be 1-16 letters, digits, `-` or `_`"
                )));
            }
            if keys.iter().any(|(k, _)| k == id) {
                return Err(SealError::Keys(format!("key id `{id}` is listed twice")));
            }
            let bytes = STANDARD
                .decode(b64)
                .map_err(|_| SealError::Keys(format!("key `{id}` is not base64")))?;
            if bytes.len() != 32 {
                return Err(SealError::Keys(format!(
                    "key `{id}` is {} bytes; it must be 32 (e.g. `openssl rand -base64 32`)",
                    bytes.len()
                )));
            }
            let bytes: [u8; 32] = bytes.try_into().expect("checked: 32 bytes");
            keys.push((id.to_string(), Key::from(bytes)));
        }
        if keys.is_empty() {
            return Err(SealError::Keys("no key given".into()));
        }
        Ok(Self { keys })
    }
}

impl SealingKeys {
    /// The id of the key that seals.
    pub fn current_id(&self) -> &str {
        &self.keys[0].0
    }

    /// `plaintext` sealed under the current key, bound to `owner`.
    pub fn seal(&self, plaintext: &str, owner: &[u8]) -> String {
        let (id, key) = &self.keys[0];
        let nonce: [u8; 12] = rand::random();
        let sealed = ChaCha20Poly1305::new(key)
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: owner,
                },
            )
            .expect("ChaCha20-Poly1305 seals any message of this size");
        let mut out = Vec::with_capacity(12 + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        format!("{PREFIX}{id}:{}", STANDARD.encode(out))
    }

    /// The secret in `stored` (sealed, or text stored before sealing), opened for `owner`.
    pub fn open(&self, stored: &str, owner: &[u8]) -> Result<String, SealError> {
        let Some(rest) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_string());
        };
        let (id, b64) = rest.split_once(':').ok_or(SealError::Corrupt)?;
        let (_, key) = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .ok_or_else(|| SealError::UnknownKey(id.to_string()))?;
        let bytes = STANDARD.decode(b64).map_err(|_| SealError::Corrupt)?;
        if bytes.len() < 12 {
            return Err(SealError::Corrupt);
        }
        let (nonce, sealed) = bytes.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| SealError::Corrupt)?;
        let plain = ChaCha20Poly1305::new(key)
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: sealed,
                    aad: owner,
                },
            )
            .map_err(|_| SealError::Corrupt)?;
        String::from_utf8(plain).map_err(|_| SealError::Corrupt)
    }

    /// Whether `stored` is sealed with the current key (else the API seals it again).
    pub fn is_current(&self, stored: &str) -> bool {
        stored
            .strip_prefix(PREFIX)
            .and_then(|r| r.split_once(':'))
            .is_some_and(|(id, _)| id == self.current_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> String {
        STANDARD.encode([b; 32])
    }

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_for_its_owner() {
        let keys: SealingKeys = format!("k2:{},k1:{}", key(2), key(1)).parse().unwrap();
        let sealed = keys.seal("whsec_abc", b"wallet-a");
        assert!(sealed.starts_with("sealed:v1:k2:"), "{sealed}");
        assert!(!sealed.contains("whsec_abc"));
        assert!(keys.is_current(&sealed));
        assert_eq!(keys.open(&sealed, b"wallet-a").unwrap(), "whsec_abc");
        // Another owner's row, an altered text, a key no longer listed: refused.
        assert_eq!(keys.open(&sealed, b"wallet-b"), Err(SealError::Corrupt));
        let mut altered = sealed.clone();
        altered.pop();
        altered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert!(keys.open(&altered, b"wallet-a").is_err());
        let only_k1: SealingKeys = format!("k1:{}", key(1)).parse().unwrap();
        assert_eq!(
            only_k1.open(&sealed, b"wallet-a"),
            Err(SealError::UnknownKey("k2".into()))
        );
        // An older key still opens what it sealed; text from before sealing reads as is.
        let old = only_k1.seal("whsec_old", b"wallet-a");
        assert_eq!(keys.open(&old, b"wallet-a").unwrap(), "whsec_old");
        assert!(!keys.is_current(&old));
        assert_eq!(keys.open("whsec_plain", b"x").unwrap(), "whsec_plain");
        assert!(!keys.is_current("whsec_plain"));
        // Two seals of one secret differ (fresh nonces).
        assert_ne!(keys.seal("s", b"w"), keys.seal("s", b"w"));
    }

    #[test]
    fn key_lists_are_checked() {
        assert!("".parse::<SealingKeys>().is_err());
        assert!("k1".parse::<SealingKeys>().is_err());
        assert!(
            format!("k1:{}", STANDARD.encode([1u8; 16]))
                .parse::<SealingKeys>()
                .is_err()
        );
        assert!(format!("k 1:{}", key(1)).parse::<SealingKeys>().is_err());
        assert!(
            format!("k1:{},k1:{}", key(1), key(2))
                .parse::<SealingKeys>()
                .is_err()
        );
        let keys: SealingKeys = format!(" a:{} , b:{} ", key(1), key(2)).parse().unwrap();
        assert_eq!(keys.current_id(), "a");
        assert!(
            !format!("{keys:?}").contains(&key(1)),
            "Debug shows ids only"
        );
    }
}
