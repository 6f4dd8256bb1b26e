//! A transaction as the chain sender signs it and the journals record it.

use alloy::primitives::B256;

/// A signed transaction, ready to be journaled and broadcast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTx {
    pub nonce: u64,
    pub hash: B256,
    /// EIP-2718 bytes, broadcast as they are (a re-broadcast can never be a second send).
    pub raw: Vec<u8>,
    pub gas_limit: u64,
    pub max_fee_per_gas: u128,
    pub max_priority_fee_per_gas: u128,
}

/// How a mined transaction went.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub success: bool,
    pub block_number: u64,
    pub gas_used: u64,
    pub effective_gas_price: u128,
}
