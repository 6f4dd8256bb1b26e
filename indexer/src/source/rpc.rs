//! The production [`BlockSource`]: an alloy HTTP provider, and `eth_getLogs` read with a
//! byte cap.

use alloy::eips::{BlockId, BlockNumberOrTag};
use alloy::primitives::{Address, B256, Bloom, U64};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, Log};
use alloy::transports::{RpcError, TransportErrorKind};
use async_trait::async_trait;
use chainsub_core::RpcUrl;
use serde::Deserialize;

use super::{BlockSource, SourceError};
use crate::block::{Header, RawLog};

/// Headers are fetched in JSON-RPC batches of this many calls.
const HEADER_BATCH: u64 = 500;

/// The largest `eth_getLogs` answer for a range of blocks read, by default: one that grows
/// past it is abandoned while it arrives and counts as "range too large", so the range
/// shrinks before a dense range is ever held in memory whole (one block is read whole: the
/// fetcher's only other way to read it, the block's receipts, is a larger answer). A node without a limit of its own (anvil) answers a
/// 100-block range of a dense chain with ~100 MB of JSON. 10,000 of our logs (the fetcher's
/// cap by count, above which an answer is discarded anyway) are ~10 MB of JSON.
pub(super) const MAX_LOGS_RESPONSE_BYTES: usize = 16 << 20;

/// Reads blocks and the contract's logs from a JSON-RPC node.
pub struct RpcSource {
    provider: DynProvider,
    contract: Address,
    /// `eth_getLogs` goes through its own HTTP client, so its answer can be read with a cap.
    http: reqwest::Client,
    url: RpcUrl,
    max_logs_response_bytes: usize,
}

/// The header fields we read; serde skips the rest of the block object.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RpcHeader {
    number: U64,
    hash: B256,
    parent_hash: B256,
    timestamp: U64,
    logs_bloom: Bloom,
}

impl From<RpcHeader> for Header {
    fn from(h: RpcHeader) -> Self {
        Self {
            number: h.number.to(),
            hash: h.hash,
            parent_hash: h.parent_hash,
            timestamp: h.timestamp.to(),
            logs_bloom: h.logs_bloom,
        }
    }
}

impl RpcSource {
    /// Connects (lazily) to `rpc_url`.
    pub fn new(rpc_url: &RpcUrl, contract: Address) -> crate::Result<Self> {
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| crate::Error::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            provider: rpc_url.provider(),
            contract,
            http,
            url: rpc_url.clone(),
            max_logs_response_bytes: MAX_LOGS_RESPONSE_BYTES,
        })
    }

    /// Caps `eth_getLogs` answers at `bytes` instead of [`MAX_LOGS_RESPONSE_BYTES`].
    pub fn with_max_logs_response_bytes(mut self, bytes: usize) -> Self {
        self.max_logs_response_bytes = bytes;
        self
    }

    /// The chain id the node reports.
    pub async fn chain_id(&self) -> Result<u64, SourceError> {
        self.provider.get_chain_id().await.map_err(classify)
    }
}

/// A plain HTTP provider for `rpc_url` (no fillers: the indexer only reads); its errors
/// never carry the URL.
pub fn provider(rpc_url: &RpcUrl) -> crate::Result<DynProvider> {
    Ok(rpc_url.provider())
}

/// Sorts a node's error into "shrink the range" or "retry as is". Providers word the first
/// differently; the common words are matched, and a suggested range (`[0x…, 0x…]`, as
/// Alchemy and Infura send) is honoured.
fn classify(e: RpcError<TransportErrorKind>) -> SourceError {
    match &e {
        RpcError::ErrorResp(payload) => {
            let msg = payload.message.to_lowercase();
            let data = payload
                .data
                .as_ref()
                .map(|d| d.get().to_lowercase())
                .unwrap_or_default();
            let text = format!("{msg} {data}");
            let too_large = [
                "too many",
                "too large",
                "range",
                "limit",
                "exceed",
                "response size",
                "query timeout",
            ]
            .iter()
            .any(|w| text.contains(w));
            if too_large {
                SourceError::TooLarge {
                    suggested_to: suggested_end(&text),
                }
            } else {
                SourceError::Transient(e.to_string())
            }
        }
        RpcError::Transport(TransportErrorKind::HttpError(h)) if h.status == 413 => {
            SourceError::TooLarge { suggested_to: None }
        }
        _ => SourceError::Transient(e.to_string()),
    }
}

/// The end of the last `[0xA, 0xB]` range in a provider's message.
fn suggested_end(text: &str) -> Option<u64> {
    let open = text.rfind('[')?;
    let close = open + text[open..].find(']')?;
    let inner = &text[open + 1..close];
    let mut parts = inner.split(',').map(str::trim);
    let _start = parts.next()?;
    let end = parts.next()?.trim_matches('"');
    let hex = end.strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok()
}

/// A JSON-RPC answer to `eth_getLogs`.
#[derive(Deserialize)]
struct LogsAnswer {
    result: Option<Vec<Log>>,
    error: Option<alloy::rpc::json_rpc::ErrorPayload>,
}

fn raw_log(l: Log) -> Result<RawLog, SourceError> {
    let missing = |f: &str| SourceError::Transient(format!("log without {f} (pending?)"));
    if l.removed {
        return Err(SourceError::Transient("log marked removed".into()));
    }
    Ok(RawLog {
        address: l.inner.address,
        block_number: l.block_number.ok_or_else(|| missing("blockNumber"))?,
        block_hash: l.block_hash.ok_or_else(|| missing("blockHash"))?,
        tx_hash: l
            .transaction_hash
            .ok_or_else(|| missing("transactionHash"))?,
        tx_index: l
            .transaction_index
            .ok_or_else(|| missing("transactionIndex"))?,
        log_index: l.log_index.ok_or_else(|| missing("logIndex"))?,
        topics: l.inner.data.topics().to_vec(),
        data: l.inner.data.data.clone(),
    })
}

#[async_trait]
impl BlockSource for RpcSource {
    async fn head(&self) -> Result<u64, SourceError> {
        self.provider.get_block_number().await.map_err(classify)
    }

    async fn finalized(&self) -> Result<Option<u64>, SourceError> {
        let r: Result<Option<RpcHeader>, _> = self
            .provider
            .raw_request(
                "eth_getBlockByNumber".into(),
                (BlockNumberOrTag::Finalized, false),
            )
            .await;
        match r {
            Ok(h) => Ok(h.map(|h| h.number.to())),
            // Nodes without the tag answer with an error; that is "no finalized tag".
            Err(RpcError::ErrorResp(_)) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError> {
        let mut out = Vec::with_capacity((to - from + 1) as usize);
        let mut start = from;
        while start <= to {
            let end = to.min(start + HEADER_BATCH - 1);
            let client = self.provider.client();
            let mut batch = alloy::rpc::client::BatchRequest::new(client);
            let mut waiters = Vec::with_capacity((end - start + 1) as usize);
            for n in start..=end {
                let w = batch
                    .add_call::<_, Option<RpcHeader>>(
                        "eth_getBlockByNumber",
                        &(BlockNumberOrTag::Number(n), false),
                    )
                    .map_err(classify)?;
                waiters.push((n, w));
            }
            batch.send().await.map_err(classify)?;
            for (n, w) in waiters {
                let h = w
                    .await
                    .map_err(classify)?
                    .ok_or_else(|| SourceError::Transient(format!("block {n} not found")))?;
                out.push(h.into());
            }
            start = end + 1;
        }
        Ok(out)
    }

    async fn logs(&self, from: u64, to: u64) -> Result<Vec<RawLog>, SourceError> {
        let filter = Filter::new()
            .address(self.contract)
            .from_block(from)
            .to_block(to);
        let request = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [filter],
        });
        // reqwest's errors name the URL: left out (it may carry the provider's key).
        let transient =
            |e: reqwest::Error| SourceError::Transient(format!("eth_getLogs: {}", e.without_url()));
        let mut resp = self
            .http
            .post(self.url.expose().clone())
            .json(&request)
            .send()
            .await
            .map_err(transient)?;
        if resp.status() == reqwest::StatusCode::PAYLOAD_TOO_LARGE {
            return Err(SourceError::TooLarge { suggested_to: None });
        }
        if !resp.status().is_success() {
            return Err(SourceError::Transient(format!(
                "eth_getLogs: HTTP {}",
                resp.status()
            )));
        }
        // A range of blocks is capped (the fetcher then asks for fewer blocks); one block is
        // not: its only other source, the block's receipts, is a larger answer (a dense
        // block of 7,300 logs, ~17 MB here, went to receipts — 26 MB, read whole).
        let cap = if from < to {
            self.max_logs_response_bytes
        } else {
            usize::MAX
        };
        let expected = resp.content_length().unwrap_or(0) as usize;
        let mut body = Vec::with_capacity(expected.min(cap));
        while let Some(chunk) = resp.chunk().await.map_err(transient)? {
            if body.len() + chunk.len() > cap {
                metrics::counter!("indexer_rpc_errors_total", "call" => "logs_response_capped")
                    .increment(1);
                return Err(SourceError::TooLarge { suggested_to: None });
            }
            body.extend_from_slice(&chunk);
        }
        let answer: LogsAnswer = serde_json::from_slice(&body)
            .map_err(|e| SourceError::Transient(format!("eth_getLogs answer: {e}")))?;
        match answer {
            LogsAnswer {
                error: Some(error), ..
            } => Err(classify(RpcError::ErrorResp(error))),
            LogsAnswer {
                result: Some(logs), ..
            } => logs.into_iter().map(raw_log).collect(),
            _ => Err(SourceError::Transient(
                "eth_getLogs answer without result or error".into(),
            )),
        }
    }

    async fn block_logs(&self, number: u64, hash: B256) -> Result<Vec<RawLog>, SourceError> {
        let receipts = self
            .provider
            .get_block_receipts(BlockId::Hash(hash.into()))
            .await
            .map_err(classify)?
            .ok_or_else(|| SourceError::Transient(format!("no receipts for block {number}")))?;
        let mut out = Vec::new();
        for r in receipts {
            for l in r.inner.logs() {
                if l.inner.address == self.contract {
                    out.push(raw_log(l.clone())?);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggested_range_is_read_from_provider_messages() {
        let alchemy = "log response size exceeded. you can make eth_getlogs requests with up to a 2k \
                       block range. based on your parameters, this block range should work: [0x1f, 0x2a]";
        assert_eq!(suggested_end(alchemy), Some(0x2a));
        let infura =
            "query returned more than 10000 results. try with this block range [0x10, 0x11].";
        assert_eq!(suggested_end(infura), Some(0x11));
        assert_eq!(suggested_end("block range too large"), None);
    }
}
