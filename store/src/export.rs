//! The reconciliation export (`GET /api/v1/ledger`): a merchant's ledger entries for a block
//! (and optionally time) range, in chain order, read as a stream of rows so that any range
//! is served in constant memory.

use alloy::primitives::Address;
use chainsub_core::{EventId, LedgerKind};
use chrono::{DateTime, Utc};
use futures::{Stream, TryStreamExt};
use tokio_postgres::Row;

use crate::chain::{ChainRow, address, units};
use crate::{Error, MerchantScope, Result};

/// Which entries: blocks `from_block..=to_block`, and block times in `[from_time, to_time)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from_block: i64,
    pub to_block: i64,
    pub from_time: Option<DateTime<Utc>>,
    pub to_time: Option<DateTime<Utc>>,
}

/// One exported ledger entry, with everything needed to find it again on chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRow {
    pub event_id: EventId,
    pub kind: LedgerKind,
    /// Base units.
    pub amount: u128,
    pub period: i32,
    pub attempt: i32,
    pub failure_reason: Option<String>,
    pub block_time: DateTime<Utc>,
    pub chain: ChainRow,
    /// The subscription's (or else the log's indexed `subscriber` topic).
    pub subscriber: Address,
    pub onchain_subscription_id: i64,
    /// `None` for a subscription created before the index's start block.
    pub subscription_id: Option<String>,
    pub onchain_plan_id: Option<i64>,
    /// `None` for a plan this service did not provision.
    pub plan_id: Option<String>,
    pub customer_external_id: Option<String>,
}

impl ExportRow {
    fn from_row(r: &Row) -> Result<ExportRow> {
        let id: &str = r.try_get("public_id")?;
        let kind: &str = r.try_get("kind")?;
        let amount: &str = r.try_get("amount")?;
        let subscriber: Option<&[u8]> = r.try_get("subscriber")?;
        Ok(ExportRow {
            event_id: EventId::parse(id)
                .ok_or_else(|| Error::Inconsistent(format!("event id {id:?}")))?,
            kind: LedgerKind::parse(kind).map_err(|e| Error::Inconsistent(e.to_string()))?,
            amount: units(amount)
                .ok_or_else(|| Error::Inconsistent(format!("ledger amount {amount}")))?,
            period: r.try_get("period")?,
            attempt: r.try_get("attempt")?,
            failure_reason: r.try_get("failure_reason")?,
            block_time: r.try_get("block_time")?,
            chain: ChainRow::from_row(r)?,
            subscriber: address(subscriber.unwrap_or_default())?,
            onchain_subscription_id: r.try_get("onchain_subscription_id")?,
            subscription_id: r.try_get("subscription_public_id")?,
            onchain_plan_id: r.try_get("plan_onchain_id")?,
            plan_id: r.try_get("plan_public_id")?,
            customer_external_id: r.try_get("customer_external_id")?,
        })
    }
}

/// `$1` merchant wallet, `$2` merchant id, `$3` chain id, `$4..$5` blocks, `$6..$7` times.
/// Walks `chain_events_merchant` (wallet, id) in chain order.
const LEDGER: &str = "SELECT ce.public_id, le.kind, le.amount::TEXT AS amount, le.period, \
    le.attempt, le.failure_reason, le.block_time, ce.chain_id, ce.contract, ce.block_number, \
    ce.block_hash, ce.transaction_hash, ce.log_index, NULL::BIGINT AS indexed_block, \
    COALESCE(s.subscriber, substring(ce.topics[4] from 13)) AS subscriber, le.subscription_id AS onchain_subscription_id, \
    s.public_id AS subscription_public_id, s.plan_onchain_id, p.public_id AS plan_public_id, \
    s.customer_external_id \
    FROM chain_events ce \
    JOIN ledger_entries le ON le.event_id = ce.id \
    LEFT JOIN subscriptions s ON s.chain_id = le.chain_id AND s.onchain_id = le.subscription_id \
    LEFT JOIN chain_plans cp ON cp.chain_id = s.chain_id AND cp.onchain_id = s.plan_onchain_id \
    LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = $2 \
    WHERE ce.merchant_wallet = $1 AND ce.kind IS NOT NULL AND ce.chain_id = $3 \
      AND ce.block_number BETWEEN $4 AND $5 \
      AND ($6::timestamptz IS NULL OR ce.block_time >= $6) \
      AND ($7::timestamptz IS NULL OR ce.block_time < $7) \
    ORDER BY ce.id";

/// `scope`'s ledger entries in `range`, oldest first, as they arrive from Postgres (nothing
/// is buffered here: a slow reader holds the query back, not memory).
pub async fn ledger<'a>(
    client: &'a deadpool_postgres::Client,
    scope: &MerchantScope,
    chain_id: i64,
    range: Range,
) -> Result<impl Stream<Item = Result<ExportRow>> + Send + 'a> {
    let stmt = client.prepare_cached(LEDGER).await?;
    let wallet = scope.wallet_bytes().to_vec();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
        &wallet,
        &scope.id(),
        &chain_id,
        &range.from_block,
        &range.to_block,
        &range.from_time,
        &range.to_time,
    ];
    let rows = client.query_raw(&stmt, params).await?;
    Ok(rows
        .map_err(Error::from)
        .and_then(|r| async move { ExportRow::from_row(&r) }))
}
