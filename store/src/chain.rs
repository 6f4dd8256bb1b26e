//! The `chain` facts every chain-derived row carries (DESIGN §4): where a log sits on chain,
//! and how deep under the indexer's tip it is.

use alloy::primitives::{Address, B256};
use tokio_postgres::Row;

use crate::{Error, Result};

/// Chain id, contract, block, transaction and log of one fact, and the indexer's tip when it
/// was read. Columns: `chain_id, contract, block_number, block_hash, transaction_hash,
/// log_index, indexed_block`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainRow {
    pub chain_id: i64,
    pub contract: Address,
    pub block_number: i64,
    pub block_hash: B256,
    pub transaction_hash: B256,
    pub log_index: i64,
    /// The indexer's cursor (`None` before its first block).
    pub indexed_block: Option<i64>,
}

/// Column positions of a row type, found by name in a result's columns (see `columns!`).
pub(crate) trait Columns: Sized {
    fn of(columns: &[tokio_postgres::Column]) -> Result<Self>;
}

/// A row type's own columns and the [`ChainRow`] it carries.
pub(crate) struct WithChain<C> {
    pub(crate) own: C,
    pub(crate) chain: ChainCols,
}

impl<C: Columns> Columns for WithChain<C> {
    fn of(columns: &[tokio_postgres::Column]) -> Result<Self> {
        Ok(WithChain {
            own: C::of(columns)?,
            chain: ChainCols::of(columns)?,
        })
    }
}

/// Types each row of a result with `at`, finding the column positions once, from the first
/// row (every row of a result has the same columns).
pub(crate) fn typed_by<C: Columns, T>(
    at: fn(&Row, &C) -> Result<T>,
) -> impl FnMut(Row) -> Result<T> {
    let mut cols: Option<C> = None;
    move |r| {
        let c = match &cols {
            Some(c) => c,
            None => cols.insert(C::of(r.columns())?),
        };
        at(&r, c)
    }
}

columns! {
    /// Where [`ChainRow`]'s columns are in a result.
    ChainCols {
        chain_id,
        contract,
        block_number,
        block_hash,
        transaction_hash,
        log_index,
        indexed_block,
    }
}

impl ChainRow {
    /// Reads the standard columns of a row.
    pub(crate) fn from_row(r: &Row) -> Result<ChainRow> {
        ChainRow::at(r, &ChainCols::of(r.columns())?)
    }

    /// Reads the standard columns of a row whose positions are known.
    pub(crate) fn at(r: &Row, c: &ChainCols) -> Result<ChainRow> {
        Ok(ChainRow {
            chain_id: r.try_get(c.chain_id)?,
            contract: address(r.try_get(c.contract)?)?,
            block_number: r.try_get(c.block_number)?,
            block_hash: b256(r.try_get(c.block_hash)?)?,
            transaction_hash: b256(r.try_get(c.transaction_hash)?)?,
            log_index: i64::from(r.try_get::<_, i32>(c.log_index)?),
            indexed_block: r.try_get(c.indexed_block)?,
        })
    }

    /// Blocks from this one to the indexer's tip, both counted (0 when the tip is unknown or
    /// below it).
    pub fn confirmations(&self) -> i64 {
        confirmations(self.block_number, self.indexed_block)
    }
}

/// Confirmations of `block_number` given the indexer's tip (0 when unknown).
pub fn confirmations(block_number: i64, indexed_block: Option<i64>) -> i64 {
    indexed_block.map_or(0, |tip| (tip - block_number + 1).max(0))
}

/// A 20-byte column as an address.
pub(crate) fn address(bytes: &[u8]) -> Result<Address> {
    Address::try_from(bytes)
        .map_err(|_| Error::Inconsistent(format!("an address of {} bytes", bytes.len())))
}

/// A 32-byte column as a hash.
pub(crate) fn b256(bytes: &[u8]) -> Result<B256> {
    B256::try_from(bytes)
        .map_err(|_| Error::Inconsistent(format!("a hash of {} bytes", bytes.len())))
}

/// A NUMERIC(78,0) read as text: base units, `None` beyond u128 (no USDC amount is).
pub(crate) fn units(text: &str) -> Option<u128> {
    text.parse().ok()
}

/// How far the indexer has followed a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The last block it indexed.
    pub indexed_block: i64,
    /// The chain head it last saw.
    pub head_block: Option<i64>,
}

/// The indexer's cursor on `chain_id` (`None` before its first batch).
pub async fn cursor(
    client: &impl deadpool_postgres::GenericClient,
    chain_id: i64,
) -> Result<Option<Cursor>> {
    let stmt = client
        .prepare_cached("SELECT block_number, head_number FROM indexer_cursor WHERE chain_id = $1")
        .await?;
    Ok(client
        .query_opt(&stmt, &[&chain_id])
        .await?
        .map(|r| Cursor {
            indexed_block: r.get(0),
            head_block: r.get(1),
        }))
}
