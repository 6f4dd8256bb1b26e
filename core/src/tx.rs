//! A transaction as the chain sender signs it and the journals record it.

use alloy::primitives::B256;

/// A signed transaction, ready to be journaled and broadcast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTx {
    /// The sending key's nonce.
    pub nonce: u64,
    /// The transaction hash, known before broadcast.
    pub hash: B256,
    /// EIP-2718 bytes, broadcast as they are (a re-broadcast can never be a second send).
    pub raw: Vec<u8>,
    /// The gas limit.
    pub gas_limit: u64,
    /// The EIP-1559 max fee per gas, in wei.
    pub max_fee_per_gas: u128,
    /// The EIP-1559 max priority fee (tip) per gas, in wei.
    pub max_priority_fee_per_gas: u128,
}

/// How a mined transaction went.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// Whether the transaction succeeded (receipt status) rather than reverted.
    pub success: bool,
    /// The block it was mined in.
    pub block_number: u64,
    /// The gas it used.
    pub gas_used: u64,
    /// The price paid per gas, in wei.
    pub effective_gas_price: u128,
}
