//! The `chain` block of docs/design.md §4.

use alloy::primitives::{Address, B256};
use chainsub_store::ChainRow;
use serde::Serialize;

use crate::json::{self, WriteJson};

/// `{chainId, contract, blockNumber, blockHash, transactionHash, logIndex, confirmations}`,
/// plus the on-chain numbers of the subscription or plan where the object has them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainView {
    pub chain_id: chainsub_core::ChainId,
    #[serde(serialize_with = "super::checksummed")]
    pub contract: Address,
    pub block_number: i64,
    pub block_hash: B256,
    pub transaction_hash: B256,
    pub log_index: i64,
    pub confirmations: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub onchain_subscription_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub onchain_plan_id: Option<i64>,
}

impl From<&ChainRow> for ChainView {
    fn from(c: &ChainRow) -> Self {
        Self {
            chain_id: c.chain_id,
            contract: c.contract,
            block_number: c.block_number,
            block_hash: c.block_hash,
            transaction_hash: c.transaction_hash,
            log_index: c.log_index,
            confirmations: c.confirmations(),
            onchain_subscription_id: None,
            onchain_plan_id: None,
        }
    }
}

impl WriteJson for ChainView {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"chainId\":");
        json::int(out, self.chain_id.get());
        json::raw(out, ",\"contract\":");
        json::address(out, &self.contract);
        json::raw(out, ",\"blockNumber\":");
        json::int(out, self.block_number);
        json::raw(out, ",\"blockHash\":");
        json::hash(out, &self.block_hash);
        json::raw(out, ",\"transactionHash\":");
        json::hash(out, &self.transaction_hash);
        json::raw(out, ",\"logIndex\":");
        json::int(out, self.log_index);
        json::raw(out, ",\"confirmations\":");
        json::int(out, self.confirmations);
        if let Some(id) = self.onchain_subscription_id {
            json::raw(out, ",\"onchainSubscriptionId\":");
            json::int(out, id);
        }
        if let Some(id) = self.onchain_plan_id {
            json::raw(out, ",\"onchainPlanId\":");
            json::int(out, id);
        }
        json::raw(out, "}");
    }
}
