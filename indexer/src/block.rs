//! The values that flow through the pipeline.

use alloy::primitives::{Address, B256, Bloom, Bytes};

/// Where the index stands: the last block whose effects are committed.
pub use chainsub_store::index::Cursor;

/// A block header, as much of it as the indexer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub number: u64,
    pub hash: B256,
    pub parent_hash: B256,
    pub timestamp: u64,
    pub logs_bloom: Bloom,
}

/// One log of the watched contract, with its position on the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLog {
    pub address: Address,
    pub block_number: u64,
    pub block_hash: B256,
    pub tx_hash: B256,
    pub tx_index: u64,
    pub log_index: u64,
    pub topics: Vec<B256>,
    pub data: Bytes,
}

/// A verified block: its header fields and the contract's logs in it, by log index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub number: u64,
    pub hash: B256,
    pub parent_hash: B256,
    pub timestamp: u64,
    pub logs: Vec<RawLog>,
}

impl Block {
    /// This block as a cursor position.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            number: self.number,
            hash: self.hash,
        }
    }
}
