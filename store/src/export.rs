//! The reconciliation export (`GET /api/v1/ledger`): a merchant's ledger entries for a block
//! (and optionally time) range, in chain order, read in short keyset pages so that any range
//! is served in constant memory and a slow reader holds no snapshot between pages.

use alloy::primitives::Address;
use chainsub_core::ChainId;
use chainsub_core::{EventId, LedgerKind};
use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use crate::chain::{ChainRow, address, ledger_kind, units};
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
    fn from_row(r: &Row) -> Result<Self> {
        let id: &str = r.try_get("public_id")?;
        let kind: &str = r.try_get("kind")?;
        let amount: &str = r.try_get("amount")?;
        let subscriber: Option<&[u8]> = r.try_get("subscriber")?;
        Ok(Self {
            event_id: EventId::parse(id)
                .ok_or_else(|| Error::Inconsistent(format!("event id {id:?}")))?,
            kind: ledger_kind(kind)?,
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

/// `$1` merchant wallet, `$2` merchant id, `$3` chain id, `$4..$5` blocks, `$6..$7` times,
/// `$8` the last row id of the previous page (0 at first), `$9` rows per page. Walks
/// `chain_events_merchant` (wallet, id) in chain order.
const LEDGER_PAGE: &str = "SELECT ce.id AS row_id, ce.public_id, le.kind, abs(le.amount)::TEXT AS amount, le.period, \
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
      AND ce.id > $8 \
    ORDER BY ce.id LIMIT $9";

/// Where a page of the export starts: after this event row (chain order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageAfter(i64);

/// One page of `scope`'s ledger entries in `range`, oldest first: at most `limit` entries
/// after `after`, and where the next page starts (`None` after the last page). One short
/// statement of its own: between pages nothing is held, neither a snapshot nor, in the
/// caller's hands, a connection. Pages join up exactly (keyset on the event row id), and
/// within the confirmed range the rows cannot change between them.
pub async fn ledger_page(
    client: &deadpool_postgres::Client,
    scope: &MerchantScope,
    chain_id: ChainId,
    range: Range,
    after: PageAfter,
    limit: i64,
) -> Result<(Vec<ExportRow>, Option<PageAfter>)> {
    let stmt = client.prepare_cached(LEDGER_PAGE).await?;
    let wallet = scope.wallet_bytes().to_vec();
    let rows = client
        .query(
            &stmt,
            &[
                &wallet,
                &scope.id(),
                &chain_id,
                &range.from_block,
                &range.to_block,
                &range.from_time,
                &range.to_time,
                &after.0,
                &limit,
            ],
        )
        .await?;
    let next = match rows.last() {
        Some(last) if rows.len() as i64 >= limit => Some(PageAfter(last.try_get("row_id")?)),
        _ => None,
    };
    let entries = rows
        .iter()
        .map(ExportRow::from_row)
        .collect::<Result<_>>()?;
    Ok((entries, next))
}
