//! Where blocks and logs come from. [`BlockSource`] is the raw chain (the RPC node in
//! production, an in-process fake chain in the simulation test); [`Fetcher`] sits on top and
//! makes it trustworthy: retries with backoff, an adaptive `eth_getLogs` range, and checks
//! that every answer is internally consistent before anything downstream sees it.

mod fetcher;
mod rpc;

pub use fetcher::{FetchConfig, Fetcher, NodeTrouble};
pub use rpc::{RpcSource, provider};

use alloy::primitives::B256;
use async_trait::async_trait;

use crate::block::{Header, RawLog};

/// How a source call failed, as far as the fetcher needs to know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The node refused or could not deliver the range (too many results, response too
    /// large, timeout). `suggested_to` is the last block of a range the node proposed.
    #[error("range too large (suggested end {suggested_to:?})")]
    TooLarge { suggested_to: Option<u64> },
    /// Anything worth retrying as is: connection errors, 5xx, rate limits, missing blocks.
    #[error("transient: {0}")]
    Transient(String),
}

/// The raw chain. Implementations report what the node said; they do not retry or verify.
#[async_trait]
pub trait BlockSource: Send + Sync + 'static {
    /// The latest block number.
    async fn head(&self) -> Result<u64, SourceError>;
    /// The node's `finalized` block number, `None` when the node has no such tag.
    async fn finalized(&self) -> Result<Option<u64>, SourceError>;
    /// Headers `from..=to`, in order. A missing block is a `Transient` error.
    async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError>;
    /// The watched contract's logs in blocks `from..=to`.
    async fn logs(&self, from: u64, to: u64) -> Result<Vec<RawLog>, SourceError>;
    /// The watched contract's logs of one block by hash, by a route that does not depend on
    /// a log-count limit (receipts). Used when a single block is too large for `logs`.
    async fn block_logs(&self, number: u64, hash: B256) -> Result<Vec<RawLog>, SourceError>;
}
