//! `indexer verify`: re-read the contract's logs for a block range and compare them, row by
//! row, with `chain_events`. The reconciliation team's tool; it writes nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use alloy::primitives::{Address, B256};
use chainsub_store::index::StoredEvent;
use tokio_postgres::Client;

use crate::Result;
use crate::map::{self, MappedEvent};
use crate::source::{BlockSource, FetchConfig, Fetcher};

/// Position of a log: block number, transaction hash, log index.
pub type LogKey = (u64, B256, u64);

/// One difference between the chain and the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// On the chain, not in the database.
    Missing(LogKey),
    /// In the database, not on the chain.
    Extra(LogKey),
    /// In both, with these columns differing.
    Different(LogKey, Vec<&'static str>),
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = |f: &mut fmt::Formatter<'_>, (b, tx, li): &LogKey| {
            write!(f, "block {b} tx {tx} log {li}")
        };
        match self {
            Difference::Missing(k) => {
                write!(f, "missing: ")?;
                key(f, k)
            }
            Difference::Extra(k) => {
                write!(f, "extra:   ")?;
                key(f, k)
            }
            Difference::Different(k, cols) => {
                write!(f, "differs: ")?;
                key(f, k)?;
                write!(f, " ({})", cols.join(", "))
            }
        }
    }
}

/// The row the chain says `chain_events` should hold for `e`.
fn expected(contract: Address, e: &MappedEvent) -> StoredEvent {
    StoredEvent {
        block_number: e.block_number,
        tx_hash: e.tx_hash,
        log_index: e.log_index,
        public_id: e.public_id.clone(),
        contract: contract.to_vec(),
        block_hash: e.block_hash.to_vec(),
        tx_index: e.tx_index as i64,
        name: e.name.to_string(),
        kind: e.kind.map(|k| k.as_str().to_string()),
        merchant: e.merchant.map(|m| m.to_vec()),
        subscription_id: e.subscription_id,
        plan_id: e.plan_id,
        topics: e.topics.iter().map(|t| t.to_vec()).collect(),
        data: e.data.to_vec(),
        decoded: e.decoded.clone(),
    }
}

fn diff_columns(a: &StoredEvent, b: &StoredEvent) -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! cmp {
        ($($f:ident),*) => { $( if a.$f != b.$f { out.push(stringify!($f)); } )* };
    }
    cmp!(
        public_id,
        contract,
        block_hash,
        tx_index,
        name,
        kind,
        merchant,
        subscription_id,
        plan_id,
        topics,
        data,
        decoded
    );
    out
}

/// Compares blocks `from..=to` of the chain with the database.
pub async fn verify<S: BlockSource + ?Sized>(
    chain_id: u64,
    contract: Address,
    fetch: FetchConfig,
    source: Arc<S>,
    client: &Client,
    from: u64,
    to: u64,
) -> Result<Vec<Difference>> {
    let mut fetcher = Fetcher::new(source, contract, fetch);
    let mut chain: BTreeMap<LogKey, StoredEvent> = BTreeMap::new();
    let mut next = from;
    while next <= to {
        let blocks = fetcher.fetch(next, to).await;
        for b in &blocks {
            for e in map::map_block(chain_id, b)? {
                chain.insert(
                    (e.block_number, e.tx_hash, e.log_index),
                    expected(contract, &e),
                );
            }
        }
        next = blocks.last().map(|b| b.number + 1).unwrap_or(to + 1);
    }
    let mut db: BTreeMap<LogKey, StoredEvent> = BTreeMap::new();
    for row in chainsub_store::index::events_in_range(client, chain_id as i64, from, to).await? {
        db.insert((row.block_number, row.tx_hash, row.log_index), row);
    }
    let mut out = Vec::new();
    for (k, want) in &chain {
        match db.remove(k) {
            None => out.push(Difference::Missing(*k)),
            Some(have) => {
                let cols = diff_columns(want, &have);
                if !cols.is_empty() {
                    out.push(Difference::Different(*k, cols));
                }
            }
        }
    }
    out.extend(db.into_keys().map(Difference::Extra));
    out.sort_by_key(|d| match d {
        Difference::Missing(k) | Difference::Extra(k) | Difference::Different(k, _) => *k,
    });
    Ok(out)
}
