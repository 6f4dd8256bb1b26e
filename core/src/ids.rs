//! Typed, prefixed public ids, all from one macro: `plan_…`, `sub_…`, `evt_…`, `chk_…`,
//! `mer_…`. A value of one of these types was parsed (or generated) once and is valid; a
//! plan id can never be passed where a subscription id is expected. Merchants see them as
//! opaque strings; only the prefixes are promised.

use std::fmt;
use std::str::FromStr;

use alloy::primitives::{B256, keccak256};

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
    |b| b.len() == 32 && b.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
);
prefixed_id!(
    /// A subscription: `sub_<on-chain id>` (decimal, no leading zero, 1 to i64::MAX: the
    /// index stores the contract's sequence number as a bigint).
    SubscriptionId,
    "sub_",
    |b| !b.is_empty()
        && !b.starts_with('0')
        && b.bytes().all(|c| c.is_ascii_digit())
        && b.parse::<i64>().is_ok()
);

impl EventId {
    /// The id of the log at (`chain_id`, `tx_hash`, `log_index`). Stable for the same log
    /// across reorgs (the same transaction re-mined in another block keeps its id), so a
    /// merchant can deduplicate webhooks by it.
    pub fn of_log(chain_id: u64, tx_hash: B256, log_index: u64) -> EventId {
        let mut buf = [0u8; 8 + 32 + 8];
        buf[..8].copy_from_slice(&chain_id.to_be_bytes());
        buf[8..40].copy_from_slice(tx_hash.as_slice());
        buf[40..].copy_from_slice(&log_index.to_be_bytes());
        let h = keccak256(buf);
        EventId(format!("evt_{}", alloy::hex::encode(&h[..16])))
    }
}

impl SubscriptionId {
    /// The id of on-chain subscription `n` (`None` for 0, which the contract never assigns,
    /// or for a number beyond i64::MAX).
    pub fn from_onchain(n: u64) -> Option<SubscriptionId> {
        SubscriptionId::parse(&format!("sub_{n}"))
    }

    /// The contract's subscription number.
    pub fn onchain(&self) -> i64 {
        // Validated at construction: it parses as a positive i64.
        self.0[4..].parse().expect("a parsed subscription id")
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
        assert!(SubscriptionId::parse("sub_01").is_none());
        assert!(SubscriptionId::parse("sub_9223372036854775807").is_some());
        assert!(SubscriptionId::parse("sub_9223372036854775808").is_none());
        assert_eq!(SubscriptionId::parse("sub_42").unwrap().onchain(), 42);
        assert_eq!(SubscriptionId::from_onchain(7).unwrap().as_str(), "sub_7");
        assert!(SubscriptionId::from_onchain(0).is_none());
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
    fn ids_serialize_as_their_text() {
        let id = SubscriptionId::from_onchain(9).unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"sub_9\"");
    }
}
