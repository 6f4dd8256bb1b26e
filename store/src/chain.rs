//! The `chain` facts every chain-derived row carries (docs/design.md §4): where a log sits on chain,
//! and how deep under the indexer's tip it is.

use alloy::primitives::{Address, B256};
use chainsub_core::ChainId;
use tokio_postgres::Row;

use crate::{Error, Result};

/// Chain id, contract, block, transaction and log of one fact, and the indexer's tip when it
/// was read. Columns: `chain_id, contract, block_number, block_hash, transaction_hash,
/// log_index, indexed_block`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainRow {
    pub chain_id: ChainId,
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
        Ok(Self {
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
    pub(crate) fn from_row(r: &Row) -> Result<Self> {
        Self::at(r, &ChainCols::of(r.columns())?)
    }

    /// Reads the standard columns of a row whose positions are known.
    pub(crate) fn at(r: &Row, c: &ChainCols) -> Result<Self> {
        Ok(Self {
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

/// A `timestamptz` read from its wire form (big-endian microseconds since 2000-01-01 UTC) in
/// a few instructions. chrono's own `FromSql` builds its epoch date and adds a checked
/// duration on every value: ~200 instructions, 5 % of a subscriptions page (callgrind).
/// Same values and the same refusals (infinity, out of chrono's range) as chrono's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Time(pub(crate) chrono::DateTime<chrono::Utc>);

/// 2000-01-01T00:00:00Z in Unix microseconds.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

impl<'a> tokio_postgres::types::FromSql<'a> for Time {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let micros = i64::from_be_bytes(raw.try_into().map_err(|_| "invalid message length")?);
        micros
            .checked_add(PG_EPOCH_MICROS)
            .and_then(chrono::DateTime::from_timestamp_micros)
            .map(Time)
            .ok_or_else(|| "value too large to decode".into())
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        *ty == tokio_postgres::types::Type::TIMESTAMPTZ
    }
}

/// A `timestamptz` column (see [`Time`]).
pub(crate) fn time(r: &Row, idx: usize) -> Result<chrono::DateTime<chrono::Utc>> {
    Ok(r.try_get::<_, Time>(idx)?.0)
}

/// A nullable `timestamptz` column (see [`Time`]).
pub(crate) fn opt_time(r: &Row, idx: usize) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
    Ok(r.try_get::<_, Option<Time>>(idx)?.map(|t| t.0))
}

/// A NUMERIC(78,0) read as text: base units, `None` beyond u128 (no USDC amount is).
/// A ledger row's `kind` column.
pub(crate) fn ledger_kind(text: &str) -> Result<chainsub_core::LedgerKind> {
    chainsub_core::LedgerKind::parse(text).map_err(|e| Error::Inconsistent(e.to_string()))
}

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
    chain_id: ChainId,
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use tokio_postgres::types::{FromSql, Type};

    #[test]
    fn times_read_as_chrono_reads_them() {
        let mut values: Vec<i64> = (-2_000i64..2_000)
            .map(|i| i.wrapping_mul(7_919_000_000_013))
            .collect();
        values.extend([0, 1, -1, i64::MAX, i64::MIN, i64::MAX - PG_EPOCH_MICROS + 1]);
        for v in values {
            let raw = v.to_be_bytes();
            let ours = Time::from_sql(&Type::TIMESTAMPTZ, &raw).map(|t| t.0).ok();
            let chrono = DateTime::<Utc>::from_sql(&Type::TIMESTAMPTZ, &raw).ok();
            assert_eq!(ours, chrono, "{v}");
        }
        assert!(Time::from_sql(&Type::TIMESTAMPTZ, &[0; 7]).is_err());
        assert!(Time::accepts(&Type::TIMESTAMPTZ) && !Time::accepts(&Type::TIMESTAMP));
    }
}
