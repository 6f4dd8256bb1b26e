//! A chain's EIP-155 id, and the on-chain ids the contract numbers its plans and
//! subscriptions with. Each is a `u64` on chain and a `BIGINT` in Postgres: the types are
//! built once from either side (a setting, a log, a row) and convert in one place.

use std::fmt;
use std::str::FromStr;

use postgres_types::{FromSql, IsNull, ToSql, Type, accepts, to_sql_checked};

/// Postgres's `BIGINT` holds up to `i64::MAX`: every id here is in `1..=i64::MAX`.
const MAX: u64 = i64::MAX as u64;

macro_rules! chain_number {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u64);

        impl $name {
            /// The id, when it is one (`1..=i64::MAX`).
            pub const fn new(id: u64) -> Option<$name> {
                if id >= 1 && id <= MAX { Some($name(id)) } else { None }
            }

            /// The id as the chain has it.
            pub const fn get(self) -> u64 {
                self.0
            }

            /// The id as Postgres stores it (`BIGINT`).
            pub const fn db(self) -> i64 {
                self.0 as i64
            }

            /// The id of a `BIGINT` column, when it is one.
            pub fn from_db(id: i64) -> Option<$name> {
                u64::try_from(id).ok().and_then($name::new)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                s.parse::<u64>()
                    .ok()
                    .and_then($name::new)
                    .ok_or_else(|| format!("{s:?} is not a {} (1 to {MAX})", $what))
            }
        }

        impl TryFrom<alloy::primitives::U256> for $name {
            type Error = String;
            /// The id of a contract's `uint256` (an event's field, a call's result).
            fn try_from(v: alloy::primitives::U256) -> Result<Self, String> {
                u64::try_from(v)
                    .ok()
                    .and_then($name::new)
                    .ok_or_else(|| format!("{v} is not a {}", $what))
            }
        }

        impl From<$name> for alloy::primitives::U256 {
            fn from(id: $name) -> alloy::primitives::U256 {
                alloy::primitives::U256::from(id.0)
            }
        }

        impl From<$name> for u64 {
            fn from(id: $name) -> u64 {
                id.0
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_u64(self.0)
            }
        }

        impl ToSql for $name {
            fn to_sql(
                &self,
                ty: &Type,
                out: &mut bytes::BytesMut,
            ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
                self.db().to_sql(ty, out)
            }
            accepts!(INT8);
            to_sql_checked!();
        }

        impl<'a> FromSql<'a> for $name {
            fn from_sql(
                ty: &Type,
                raw: &'a [u8],
            ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
                let id = i64::from_sql(ty, raw)?;
                $name::from_db(id).ok_or_else(|| format!("{id} is not a {}", $what).into())
            }
            accepts!(INT8);
        }
    };
}

chain_number!(
    /// A chain's EIP-155 id (`CHAIN_ID`): what every indexed row, event id and signature is
    /// bound to.
    ChainId,
    "chain id"
);

chain_number!(
    /// A subscription's id in the contract (`subscriptions(id)`), numbered from 1.
    OnchainSubscriptionId,
    "subscription id on chain"
);

chain_number!(
    /// A plan's id in the contract (`plans(id)`), numbered from 1.
    OnchainPlanId,
    "plan id on chain"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_one_to_the_largest_bigint_and_round_trips_through_text_and_rows() {
        assert_eq!(ChainId::new(0), None);
        assert_eq!(ChainId::new(MAX + 1), None);
        let id = ChainId::new(31337).unwrap();
        assert_eq!((id.get(), id.db()), (31337, 31337));
        assert_eq!("31337".parse::<ChainId>(), Ok(id));
        assert!("-1".parse::<ChainId>().is_err());
        assert!("0".parse::<ChainId>().is_err());
        assert_eq!(ChainId::from_db(-5), None);
        assert_eq!(OnchainPlanId::from_db(7).map(u64::from), Some(7));
        let mut buf = bytes::BytesMut::new();
        id.to_sql(&Type::INT8, &mut buf).unwrap();
        assert_eq!(ChainId::from_sql(&Type::INT8, &buf).unwrap(), id);
        let zero = 0i64;
        let mut buf = bytes::BytesMut::new();
        zero.to_sql(&Type::INT8, &mut buf).unwrap();
        assert!(OnchainSubscriptionId::from_sql(&Type::INT8, &buf).is_err());
    }
}
