//! JSON helpers for the objects not yet moved to [`crate::views`] (plans, checkouts, keys,
//! sessions). Chain-derived objects — subscriptions, ledgers, events, webhook bodies — are
//! typed views (`chainsub_views`).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

pub use chainsub_core::address::{checksum as address, hex0x};
pub use chainsub_store::chain::confirmations;

/// RFC 3339 with second precision and `Z`.
pub fn time(t: DateTime<Utc>) -> String {
    chainsub_views::rfc3339(&t)
}

/// The `chain` block of DESIGN §4.
pub struct ChainRef<'a> {
    pub chain_id: i64,
    pub contract: &'a [u8],
    pub block_number: i64,
    pub block_hash: &'a [u8],
    pub transaction_hash: &'a [u8],
    pub log_index: i64,
    pub indexed_block: Option<i64>,
}

impl ChainRef<'_> {
    /// `{chainId, contract, blockNumber, blockHash, transactionHash, logIndex, confirmations}`.
    pub fn to_json(&self) -> Value {
        json!({
            "chainId": self.chain_id,
            "contract": address(self.contract),
            "blockNumber": self.block_number,
            "blockHash": hex0x(self.block_hash),
            "transactionHash": hex0x(self.transaction_hash),
            "logIndex": self.log_index,
            "confirmations": confirmations(self.block_number, self.indexed_block),
        })
    }
}
