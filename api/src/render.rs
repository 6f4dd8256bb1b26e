//! Formatting helpers for the few objects still rendered as JSON values (checkouts, keys,
//! sessions). Plans and everything chain-derived — subscriptions, ledgers, events, webhook
//! bodies — are typed views (`chainsub_views`).

use chrono::{DateTime, Utc};

pub use chainsub_core::address::{checksum as address, hex0x};
pub use chainsub_store::chain::confirmations;

/// RFC 3339 with second precision and `Z`.
pub fn time(t: DateTime<Utc>) -> String {
    chainsub_views::rfc3339(&t)
}
