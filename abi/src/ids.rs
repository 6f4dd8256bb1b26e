//! Public identifiers of chain-derived objects that the indexer writes: `evt_…` from a log.
//! (Subscription ids are [`chainsub_core::SubscriptionId::of_creation`].) They are opaque to
//! merchants; only their prefixes are promised.

use alloy::primitives::B256;
use chainsub_core::EventId;

/// `evt_<32 hex>` of the log at (`chain_id`, `tx_hash`, `log_index`): [`EventId::of_log`].
pub fn event_id(chain_id: u64, tx_hash: B256, log_index: u64) -> String {
    EventId::of_log(chain_id, tx_hash, log_index).to_string()
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
}
