//! Typed, prefixed public ids, all from one macro: `plan_…`, `sub_…`, `evt_…`, `chk_…`,
//! `mer_…`. A value of one of these types was parsed (or generated) once and is valid; a
//! plan id can never be passed where a subscription id is expected. Merchants see them as
//! opaque strings; only the prefixes are promised.

use std::fmt;
use std::str::FromStr;

use alloy::primitives::{B256, keccak256};
use sha2::{Digest, Sha256};

/// Defines a prefixed id type: the text is `prefix` followed by a body that `valid` accepts.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $valid:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The prefix every id of this type starts with.
            pub const PREFIX: &'static str = $prefix;

            /// Parses the full text; `None` for anything that is not an id of this type.
            pub fn parse(s: &str) -> Option<Self> {
                let body = s.strip_prefix($prefix)?;
                let valid: fn(&str) -> bool = $valid;
                valid(body).then(|| Self(s.to_string()))
            }

            /// A new id with a random body of `bytes` random bytes as lowercase hex.
            pub fn random(bytes: usize) -> Self {
                let body: Vec<u8> = (0..bytes).map(|_| rand_byte()).collect();
                Self(format!("{}{}", $prefix, alloy::hex::encode(body)))
            }

            /// The full text, prefix included.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                Self::parse(s).ok_or(InvalidId($prefix))
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(&s).ok_or_else(|| serde::de::Error::custom(InvalidId($prefix)))
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

/// A text that is not an id of the expected type (the prefix it should have had).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not an id of the form {0}…")]
pub struct InvalidId(pub &'static str);

fn rand_byte() -> u8 {
    rand::random()
}

/// 1 to `max` characters of `0-9 a-z`: the body of every randomly generated id.
fn lower_alnum(body: &str, max: usize) -> bool {
    !body.is_empty()
        && body.len() <= max
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

prefixed_id!(
    /// A plan (`plan_<24 hex>` when we make one; up to 59 of `0-9 a-z` parse).
    PlanId,
    "plan_",
    |b| lower_alnum(b, 59)
);
prefixed_id!(
    /// A checkout link (`chk_<24 hex>`).
    CheckoutId,
    "chk_",
    |b| lower_alnum(b, 59)
);
prefixed_id!(
    /// A merchant (`mer_<24 hex>`).
    MerchantId,
    "mer_",
    |b| lower_alnum(b, 59)
);
prefixed_id!(
    /// A chain event: `evt_<32 hex>` = keccak256(chain id ‖ tx hash ‖ log index), truncated.
    EventId,
    "evt_",
    lower_hex_32
);
prefixed_id!(
    /// A subscription: `sub_<32 hex>` = sha256 of its creating transaction and on-chain
    /// number, truncated ([`SubscriptionId::of_creation`]). Opaque: unlike the contract's
    /// sequence number (served under `chain.onchainSubscriptionId`), it reveals nothing about
    /// how many subscriptions the platform has.
    SubscriptionId,
    "sub_",
    lower_hex_32
);

/// Exactly 32 of `0-9 a-f`: the body of ids derived from a hash.
fn lower_hex_32(body: &str) -> bool {
    body.len() == 32
        && body
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

impl EventId {
    /// The id of the log at (`chain_id`, `tx_hash`, `log_index`). Stable for the same log
    /// across reorgs (the same transaction re-mined in another block keeps its id), so a
    /// merchant can deduplicate webhooks by it.
    pub fn of_log(chain_id: u64, tx_hash: B256, log_index: u64) -> Self {
        let mut buf = [0u8; 8 + 32 + 8];
        buf[..8].copy_from_slice(&chain_id.to_be_bytes());
        buf[8..40].copy_from_slice(tx_hash.as_slice());
        buf[40..].copy_from_slice(&log_index.to_be_bytes());
        let h = keccak256(buf);
        Self(format!("evt_{}", alloy::hex::encode(&h[..16])))
    }
}

impl SubscriptionId {
    /// Domain separation: no other id hashes the same bytes.
    const DOMAIN: &'static [u8] = b"chainsub.subscription";

    /// The id of on-chain subscription `onchain_id`, created by transaction `tx_hash` on
    /// `chain_id`: `sub_` + hex(sha256(DOMAIN ‖ chain id ‖ tx hash ‖ on-chain id)[..16]),
    /// integers as 8 big-endian bytes. Deterministic, so a re-index from the chain gives every
    /// subscription the id it had; migration 0007 computes the same in SQL (`sha256`,
    /// `int8send`) for rows indexed before this scheme.
    pub fn of_creation(chain_id: u64, tx_hash: B256, onchain_id: u64) -> Self {
        let mut h = Sha256::new();
        h.update(Self::DOMAIN);
        h.update(chain_id.to_be_bytes());
        h.update(tx_hash.as_slice());
        h.update(onchain_id.to_be_bytes());
        let digest = h.finalize();
        Self(format!("sub_{}", alloy::hex::encode(&digest[..16])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_id_type_takes_only_its_own_prefix_and_body() {
        assert!(PlanId::parse("plan_0a1b2c").is_some());
        assert!(PlanId::parse("sub_1").is_none());
        assert!(PlanId::parse("plan_").is_none());
        assert!(PlanId::parse("plan_ABC").is_none());
        assert!(PlanId::parse("plan_a\0b").is_none());
        assert!(PlanId::parse(&format!("plan_{}", "a".repeat(60))).is_none());
        assert!(
            SubscriptionId::parse("sub_1").is_none(),
            "sequence numbers are not ids"
        );
        assert!(SubscriptionId::parse("sub_0123456789abcdef0123456789abcdef").is_some());
        assert!(SubscriptionId::parse("sub_0123456789abcdef0123456789abcdeF").is_none());
        assert!(EventId::parse("evt_0123456789abcdef0123456789abcdef").is_some());
        assert!(EventId::parse("evt_0123456789abcdef0123456789abcdeF").is_none());
        assert_eq!("chk_x".parse::<CheckoutId>().unwrap().as_str(), "chk_x");
        assert_eq!(
            "x".parse::<MerchantId>().unwrap_err().to_string(),
            "not an id of the form mer_…"
        );
    }

    #[test]
    fn random_ids_parse_back() {
        let p = PlanId::random(12);
        assert_eq!(p.as_str().len(), 5 + 24);
        assert_eq!(PlanId::parse(p.as_str()), Some(p));
    }

    #[test]
    fn event_id_is_stable_and_distinct_per_log() {
        let tx = B256::repeat_byte(7);
        assert_eq!(EventId::of_log(1, tx, 3), EventId::of_log(1, tx, 3));
        assert_ne!(EventId::of_log(1, tx, 3), EventId::of_log(1, tx, 4));
        assert_ne!(EventId::of_log(1, tx, 3), EventId::of_log(2, tx, 3));
        let id = EventId::of_log(1, tx, 3);
        assert_eq!(EventId::parse(id.as_str()), Some(id));
    }

    #[test]
    fn subscription_ids_are_stable_opaque_and_distinct() {
        let tx = B256::repeat_byte(7);
        let a = SubscriptionId::of_creation(31337, tx, 1);
        assert_eq!(a, SubscriptionId::of_creation(31337, tx, 1));
        assert_ne!(a, SubscriptionId::of_creation(31337, tx, 2));
        assert_ne!(a, SubscriptionId::of_creation(1, tx, 1));
        assert_ne!(
            a,
            SubscriptionId::of_creation(31337, B256::repeat_byte(8), 1)
        );
        assert_eq!(SubscriptionId::parse(a.as_str()).as_ref(), Some(&a));
        assert!(!a.as_str().contains("_1"), "{a}");
        // The value migration 0007 computes in SQL for the same inputs (checked against
        // Postgres by migrations/tests/migrate.rs).
        assert_eq!(a.as_str(), "sub_c077d0f3e209e3880ef27cf2b7c01d8c");
    }

    #[test]
    fn ids_serialize_as_their_text() {
        let id = SubscriptionId::of_creation(1, B256::ZERO, 9);
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{id}\""));
    }
}
