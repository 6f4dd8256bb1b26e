//! Standard Webhooks signing: `webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{ts}.{body}")>`
//! where the key is the base64-decoded part of a `whsec_<base64>` secret. During a rotation
//! overlap every live secret signs and the signatures are space-separated, so a receiver
//! holding either secret verifies (<https://www.standardwebhooks.com/>).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const PREFIX: &str = "whsec_";
/// 24 random bytes, as Svix generates them: comfortably above the 128-bit floor.
const SECRET_BYTES: usize = 24;

/// A signing secret `whsec_<base64>`. Parsed once, so the key bytes are always valid.
/// `Debug` is redacted: secrets must never reach logs.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    text: String,
    key: Vec<u8>,
}

/// A string that is not `whsec_<base64 of at least 16 bytes>`.
#[derive(Debug, thiserror::Error)]
#[error("invalid webhook secret (expected whsec_<base64>)")]
pub struct InvalidSecret;

impl WebhookSecret {
    /// A fresh random secret.
    pub fn generate() -> Self {
        let mut key = vec![0u8; SECRET_BYTES];
        rand::rng().fill_bytes(&mut key);
        Self {
            text: format!("{PREFIX}{}", STANDARD.encode(&key)),
            key,
        }
    }

    /// Parses `whsec_<base64>`.
    pub fn parse(s: &str) -> Result<Self, InvalidSecret> {
        let b64 = s.strip_prefix(PREFIX).ok_or(InvalidSecret)?;
        let key = STANDARD.decode(b64).map_err(|_| InvalidSecret)?;
        if key.len() < 16 {
            return Err(InvalidSecret);
        }
        Ok(Self {
            text: s.to_string(),
            key,
        })
    }

    /// The `whsec_…` text the merchant copies into its verifier.
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// `v1,<base64 signature>` of one message under this secret.
    pub fn sign(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(whsec_[redacted])")
    }
}

/// The `webhook-signature` header value: one `v1,…` per live secret, newest first,
/// space-separated.
pub fn signature_header(
    secrets: &[WebhookSecret],
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|s| s.sign(msg_id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secret_round_trips_through_parse() {
        let s = WebhookSecret::generate();
        assert!(s.expose().starts_with("whsec_"));
        assert_eq!(WebhookSecret::parse(s.expose()).unwrap(), s);
    }

    #[test]
    fn parse_rejects_wrong_prefix_bad_base64_and_short_keys() {
        for bad in ["sk_abc", "whsec_***", "whsec_AAAA", ""] {
            assert!(WebhookSecret::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn signature_matches_the_standard_webhooks_reference_vector() {
        // The vector from the Standard Webhooks spec and its reference libraries.
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            s.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn header_carries_one_signature_per_secret_space_separated() {
        let (a, b) = (WebhookSecret::generate(), WebhookSecret::generate());
        let h = signature_header(&[a.clone(), b.clone()], "evt_1", 10, b"{}");
        assert_eq!(
            h,
            format!(
                "{} {}",
                a.sign("evt_1", 10, b"{}"),
                b.sign("evt_1", 10, b"{}")
            )
        );
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let s = WebhookSecret::generate();
        assert!(!format!("{s:?}").contains(&s.expose()[6..]));
    }
}
