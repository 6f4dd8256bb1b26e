//! Public identifiers of chain-derived objects. The indexer writes them and the API parses
//! them, so both live here. They are opaque to merchants; only their prefixes are promised.

use alloy::primitives::B256;
use chainsub_core::{EventId, SubscriptionId};

/// `evt_<32 hex>` of the log at (`chain_id`, `tx_hash`, `log_index`): [`EventId::of_log`].
pub fn event_id(chain_id: u64, tx_hash: B256, log_index: u64) -> String {
    EventId::of_log(chain_id, tx_hash, log_index).to_string()
}

/// `sub_<on-chain id>`.
pub fn subscription_id(onchain_id: u64) -> String {
    format!("{}{onchain_id}", SubscriptionId::PREFIX)
}

/// The on-chain id inside a `sub_…` id; `None` for anything else.
pub fn parse_subscription_id(id: &str) -> Option<u64> {
    SubscriptionId::parse(id).map(|s| s.onchain() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_id_is_stable_and_distinct_per_log() {
        let tx = B256::repeat_byte(7);
        assert_eq!(event_id(1, tx, 3), event_id(1, tx, 3));
        assert_ne!(event_id(1, tx, 3), event_id(1, tx, 4));
        assert_ne!(event_id(1, tx, 3), event_id(2, tx, 3));
        assert!(event_id(1, tx, 3).starts_with("evt_") && event_id(1, tx, 3).len() == 36);
    }

    #[test]
    fn subscription_ids_round_trip_and_reject_garbage() {
        assert_eq!(parse_subscription_id(&subscription_id(42)), Some(42));
        for bad in [
            "sub_",
            "sub_01",
            "sub_-1",
            "sub_1a",
            "plan_1",
            "sub_99999999999999999999999",
        ] {
            assert_eq!(parse_subscription_id(bad), None, "{bad}");
        }
    }
}
