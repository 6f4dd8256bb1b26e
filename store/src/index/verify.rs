//! What `indexer verify` reads back to compare with the chain: stored events, ledger rows,
//! plans and webhook outbox rows of a block range, and rows that name nothing.

use chainsub_core::ChainId;
use std::collections::HashMap;
use std::sync::LazyLock;

use alloy::primitives::B256;
use chainsub_core::{LedgerKind, SubscriptionSnapshot};
use tokio_postgres::Client;

use super::write::{LogFields, NewLedgerEntry, NewPlan};
use super::{address, b256};
use crate::chain::Columns;
use crate::snapshot::{SnapshotCols, snapshot_columns};
use crate::{Error, Result};

/// A stored `chain_events` row, as `indexer verify` compares it with the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// `chain_events.id` (0 in a row built from the chain).
    pub id: i64,
    pub block_number: u64,
    pub tx_hash: B256,
    pub log_index: u64,
    pub public_id: String,
    pub contract: Vec<u8>,
    pub block_hash: Vec<u8>,
    pub tx_index: i64,
    pub name: String,
    pub kind: Option<String>,
    pub merchant: Option<Vec<u8>>,
    pub subscription_id: Option<i64>,
    pub plan_id: Option<i64>,
    pub topics: Vec<Vec<u8>>,
    pub data: Vec<u8>,
    /// `None` when a stored `log_*` value is out of its field's range (a hand edit).
    pub fields: Option<LogFields>,
    /// The subscription right after this event (not compared column by column); `Err` with
    /// the reason when a stored value is out of the snapshot's range (a hand edit).
    pub snapshot: std::result::Result<Option<SubscriptionSnapshot>, String>,
    /// Its 1-based place among its subscription's events (not compared column by column).
    pub sequence: Option<i64>,
}

/// The stored events of blocks `from..=to`.
pub async fn events_in_range(
    client: &Client,
    chain_id: ChainId,
    from: u64,
    to: u64,
) -> Result<Vec<StoredEvent>> {
    let rows = client
        .query(
            concat!(
                "SELECT block_number, transaction_hash, log_index, public_id, contract, block_hash,
                 transaction_index, name, kind, merchant_wallet, subscription_id, plan_id, topics,
                 data, log_amount::text, log_subscriber, log_period, log_attempt, log_reason,
                 log_next_retry_at::text, id, sequence, ",
                snapshot_columns!("chain_events"),
                " FROM chain_events WHERE chain_id = $1 AND block_number BETWEEN $2 AND $3"
            ),
            &[&chain_id, &(from as i64), &(to as i64)],
        )
        .await?;
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let snapshot = SnapshotCols::of(first.columns())?;
    rows.iter()
        .map(|r| {
            Ok(StoredEvent {
                block_number: r.get::<_, i64>(0) as u64,
                tx_hash: b256(r.get(1), "transaction_hash")?,
                log_index: r.get::<_, i32>(2) as u64,
                public_id: r.get(3),
                contract: r.get(4),
                block_hash: r.get(5),
                tx_index: r.get::<_, i32>(6) as i64,
                name: r.get(7),
                kind: r.get(8),
                merchant: r.get(9),
                subscription_id: r.get(10),
                plan_id: r.get(11),
                topics: r.get(12),
                data: r.get(13),
                fields: log_fields_at(r, 14).ok(),
                id: r.get(20),
                sequence: r.get(21),
                snapshot: snapshot.read(r).map_err(|e| e.to_string()),
            })
        })
        .collect()
}

/// The six `log_*` columns from `at` on (numerics as text), refusing values the log's types
/// cannot hold.
fn log_fields_at(r: &tokio_postgres::Row, at: usize) -> Result<LogFields> {
    fn num<T: std::str::FromStr>(v: Option<&str>, what: &str) -> Result<Option<T>> {
        v.map(|t| {
            t.parse()
                .map_err(|_| Error::Inconsistent(format!("{what} {t} out of range")))
        })
        .transpose()
    }
    fn small<T: TryFrom<i64>>(v: Option<i64>, what: &str) -> Result<Option<T>> {
        v.map(|n| {
            T::try_from(n).map_err(|_| Error::Inconsistent(format!("{what} {n} out of range")))
        })
        .transpose()
    }
    Ok(LogFields {
        amount: num(r.get(at), "log_amount")?,
        subscriber: r
            .get::<_, Option<&[u8]>>(at + 1)
            .map(|a| address(a, "log_subscriber"))
            .transpose()?,
        period: small(r.get(at + 2), "log_period")?,
        attempt: small(
            r.get::<_, Option<i32>>(at + 3).map(i64::from),
            "log_attempt",
        )?,
        reason: small(r.get::<_, Option<i32>>(at + 4).map(i64::from), "log_reason")?,
        next_retry_at: num(r.get(at + 5), "log_next_retry_at")?,
    })
}

/// Where a stored row's event is: (block number, transaction hash, log index).
pub type EventKey = (u64, B256, u64);

fn event_key(r: &tokio_postgres::Row, at: usize) -> Result<EventKey> {
    Ok((
        r.get::<_, i64>(at) as u64,
        b256(r.get(at + 1), "transaction_hash")?,
        r.get::<_, i32>(at + 2) as u64,
    ))
}

fn secs(t: chrono::DateTime<chrono::Utc>) -> u64 {
    t.timestamp() as u64
}

/// The ledger rows of events in blocks `from..=to`, by their event's position (`event_id`
/// holds the stored event's id).
pub async fn ledger_in_range(
    client: &Client,
    chain_id: ChainId,
    from: u64,
    to: u64,
) -> Result<Vec<(EventKey, NewLedgerEntry)>> {
    let rows = client
        .query(
            "SELECT ce.block_number, ce.transaction_hash, ce.log_index, le.event_id, le.kind,
                 le.subscription_id, abs(le.amount)::text, le.period, le.period_start, le.period_end,
                 le.attempt, le.failure_reason, le.block_time
             FROM ledger_entries le JOIN chain_events ce ON ce.id = le.event_id
             WHERE le.chain_id = $1 AND ce.block_number BETWEEN $2 AND $3",
            &[&chain_id, &(from as i64), &(to as i64)],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let kind: &str = r.get(4);
            let amount: &str = r.get(6);
            Ok((
                event_key(r, 0)?,
                NewLedgerEntry {
                    event_id: r.get(3),
                    subscription_id: r.get(5),
                    kind: LedgerKind::parse(kind)
                        .map_err(|e| Error::Inconsistent(e.to_string()))?,
                    amount: amount
                        .parse()
                        .map_err(|e| Error::Inconsistent(format!("amount {amount}: {e}")))?,
                    period: r.get::<_, i32>(7) as u32,
                    period_start: r
                        .get::<_, Option<chrono::DateTime<chrono::Utc>>>(8)
                        .map(secs),
                    period_end: r
                        .get::<_, Option<chrono::DateTime<chrono::Utc>>>(9)
                        .map(secs),
                    attempt: r.get::<_, i32>(10) as u32,
                    failure_reason: r.get(11),
                    block_time: secs(r.get(12)),
                },
            ))
        })
        .collect()
}

/// A stored `chain_plans` row with the positions of its creating and deactivating events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPlan {
    pub plan: NewPlan,
    pub created_at: EventKey,
    /// The block of its `PlanDeactivated`, if indexed.
    pub deactivated_block: Option<u64>,
}

/// The stored plans with these on-chain ids.
pub async fn plans(client: &Client, chain_id: ChainId, ids: &[i64]) -> Result<Vec<StoredPlan>> {
    let rows = client
        .query(
            "SELECT ce.block_number, ce.transaction_hash, ce.log_index, cp.onchain_id,
                 cp.merchant_wallet, cp.plan_ref, cp.amount::text, cp.created_by, cp.event_id,
                 dce.block_number
             FROM chain_plans cp JOIN chain_events ce ON ce.id = cp.event_id
             LEFT JOIN chain_events dce ON dce.id = cp.deactivated_event_id
             WHERE cp.chain_id = $1 AND cp.onchain_id = ANY($2)",
            &[&chain_id, &ids],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let amount: &str = r.get(6);
            Ok(StoredPlan {
                created_at: event_key(r, 0)?,
                plan: NewPlan {
                    onchain_id: r.get(3),
                    merchant: address(r.get(4), "merchant_wallet")?,
                    plan_ref: b256(r.get(5), "plan_ref")?,
                    amount: amount
                        .parse()
                        .map_err(|e| Error::Inconsistent(format!("amount {amount}: {e}")))?,
                    created_by: address(r.get(7), "created_by")?,
                    event_id: r.get(8),
                },
                deactivated_block: r.get::<_, Option<i64>>(9).map(|b| b as u64),
            })
        })
        .collect()
}

/// A webhook outbox row of an indexed event, as `indexer verify` checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDelivery {
    /// The event's row id the outbox row names (the events page joins on it).
    pub event_id: Option<i64>,
    pub chain_id: Option<ChainId>,
    pub subscription_id: Option<i64>,
    pub merchant_wallet: Vec<u8>,
}

/// The webhook outbox rows of each event of blocks `from..=to`, by event public id.
pub async fn outbox_in_range(
    client: &Client,
    chain_id: ChainId,
    from: u64,
    to: u64,
) -> Result<HashMap<String, Vec<StoredDelivery>>> {
    let rows = client
        .query(
            "SELECT o.event_public_id, o.chain_id, o.subscription_id, o.merchant_wallet, o.event_id
             FROM webhook_outbox o
             JOIN chain_events ce ON ce.public_id = o.event_public_id
             WHERE ce.chain_id = $1 AND ce.block_number BETWEEN $2 AND $3
               AND o.test_payload IS NULL AND o.retracted_at IS NULL",
            &[&chain_id, &(from as i64), &(to as i64)],
        )
        .await?;
    let mut out: HashMap<String, Vec<StoredDelivery>> = HashMap::new();
    for r in rows {
        out.entry(r.get(0)).or_default().push(StoredDelivery {
            event_id: r.get(4),
            chain_id: r.get(1),
            subscription_id: r.get(2),
            merchant_wallet: r.get(3),
        });
    }
    Ok(out)
}

/// Outbox rows (not dashboard tests) whose event is not in the index: `(id, event id,
/// status, event row id)`. Neither the rows of retracted events (a reorg removed the event
/// and an `event.retracted` event said so) nor those of the retractions themselves count, nor
/// those of renewal-at-risk observations (no log: not the index's to check). A row whose
/// event id is stored under another row id than it names counts too (the events page finds a
/// delivery by row id, the dispatcher its body by public id).
pub async fn orphan_outbox(client: &Client) -> Result<Vec<(i64, String, String, Option<i64>)>> {
    let rows = client
        .query(
            "SELECT o.id, o.event_public_id, o.status, o.event_id FROM webhook_outbox o
             WHERE o.test_payload IS NULL AND o.retracted_at IS NULL
               AND NOT EXISTS (SELECT 1 FROM chain_events ce
                               WHERE ce.id = o.event_id AND ce.public_id = o.event_public_id)
               AND NOT EXISTS (SELECT 1 FROM event_retractions r
                               WHERE r.id = o.event_id AND r.public_id = o.event_public_id)
               AND NOT EXISTS (SELECT 1 FROM renewal_risks k
                               WHERE k.id = o.event_id AND k.public_id = o.event_public_id)
             ORDER BY o.id",
            &[],
        )
        .await?;
    Ok(columns4(&rows))
}

/// Webhook attempts whose outbox row does not exist (no foreign key keeps that link since
/// migration 0024; the dispatcher and a reorg's undo do): `(attempt id, outbox row id)`.
pub async fn orphan_attempts(client: &Client) -> Result<Vec<(i64, i64)>> {
    let rows = client
        .query(
            "SELECT a.id, a.outbox_id FROM webhook_attempts a
             WHERE NOT EXISTS (SELECT 1 FROM webhook_outbox o WHERE o.id = a.outbox_id)
             ORDER BY a.id",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The rows derived from events that name an event the index does not hold (no foreign key
/// keeps these links since migration 0022; the sink and its undo do): `(table, the row's key,
/// the column, the event id it names)`, over the whole index of `chain_id`.
pub async fn dangling_event_links(
    client: &Client,
    chain_id: ChainId,
) -> Result<Vec<(&'static str, String, &'static str, i64)>> {
    /// Each link: the table, the row's key as text, the column naming an event.
    const LINKS: [(&str, &str, &str); 5] = [
        (
            "ledger_entries",
            "'subscription ' || x.subscription_id || ' period ' || x.period || ' attempt ' || x.attempt",
            "event_id",
        ),
        ("chain_plans", "'plan ' || x.onchain_id", "event_id"),
        (
            "chain_plans",
            "'plan ' || x.onchain_id",
            "deactivated_event_id",
        ),
        (
            "subscriptions",
            "'onchain ' || x.onchain_id",
            "created_event_id",
        ),
        (
            "subscriptions",
            "'onchain ' || x.onchain_id",
            "last_event_id",
        ),
    ];
    // One statement (built once from the constants above), the links in that order, each
    // one's rows by key: the rows whose named event is not stored.
    static DANGLING: LazyLock<String> = LazyLock::new(|| {
        let branches: Vec<String> = LINKS
            .iter()
            .enumerate()
            .map(|(n, (table, key, column))| {
                format!(
                    "SELECT {n} AS link, {key} AS key, x.{column} AS event FROM {table} x \
                     WHERE x.chain_id = $1 AND x.{column} IS NOT NULL AND NOT EXISTS \
                         (SELECT 1 FROM chain_events ce WHERE ce.id = x.{column} AND ce.chain_id = $1)"
                )
            })
            .collect();
        format!("{} ORDER BY 1, 2", branches.join(" UNION ALL "))
    });
    Ok(client
        .query(DANGLING.as_str(), &[&chain_id])
        .await?
        .iter()
        .map(|r| {
            let (table, _, column) = LINKS[r.get::<_, i32>(0) as usize];
            (table, r.get(1), column, r.get(2))
        })
        .collect())
}

/// The months of `revenue_months` (migration 0031) that differ from the ledger they sum,
/// recomputed over the whole ledger of `chain_id`: `(merchant wallet, month, stored
/// "charges/prorations/refunds/entries" or "none", recomputed the same way or "none")`.
pub async fn revenue_months_drift(
    client: &Client,
    chain_id: ChainId,
) -> Result<Vec<(Vec<u8>, chrono::NaiveDate, String, String)>> {
    let rows = client
        .query(
            "WITH fresh AS (
                 SELECT ce.merchant_wallet,
                        date_trunc('month', e.block_time AT TIME ZONE 'UTC')::date AS month,
                        coalesce(sum(e.amount) FILTER (WHERE e.kind = 'charge'), 0) AS charges,
                        coalesce(sum(e.amount) FILTER (WHERE e.kind = 'proration'), 0) AS prorations,
                        -coalesce(sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0) AS refunds,
                        count(*) AS entries
                   FROM ledger_entries e JOIN chain_events ce ON ce.id = e.event_id
                  WHERE e.chain_id = $1 AND e.kind IN ('charge', 'proration', 'refund')
                  GROUP BY 1, 2),
             stored AS (SELECT merchant_wallet, month, charges, prorations, refunds, entries
                          FROM revenue_months WHERE chain_id = $1)
             SELECT coalesce(s.merchant_wallet, f.merchant_wallet), coalesce(s.month, f.month),
                    coalesce(s.charges || '/' || s.prorations || '/' || s.refunds || '/' || s.entries, 'none'),
                    coalesce(f.charges || '/' || f.prorations || '/' || f.refunds || '/' || f.entries, 'none')
               FROM stored s FULL JOIN fresh f
                 ON f.merchant_wallet = s.merchant_wallet AND f.month = s.month
              WHERE s IS DISTINCT FROM f
              ORDER BY 1, 2",
            &[&chain_id],
        )
        .await?;
    Ok(columns4(&rows))
}

/// The buckets of `subscription_tallies` and the days of `subscription_starts` (migration
/// 0032) that differ from the subscriptions they count, recomputed over every subscription
/// of `chain_id`: `(merchant wallet, the bucket or day, stored
/// "subscriptions/amount/due_amount" or "none", recomputed the same way or "none")`.
pub async fn subscription_tallies_drift(
    client: &Client,
    chain_id: ChainId,
) -> Result<Vec<(Vec<u8>, String, String, String)>> {
    let rows = client
        .query(
            "WITH fresh AS (
                 SELECT merchant_wallet, status, cancel_at_period_end AS cancelling,
                        subscription_due_day(status, next_retry_at, current_period_end) AS due_day,
                        subscription_stopped_day(status, updated_at) AS stopped_day,
                        count(*) AS subscriptions, sum(amount) AS amount,
                        sum(coalesce(pending_amount, amount)) AS due_amount
                   FROM subscriptions WHERE chain_id = $1
                  GROUP BY 1, 2, 3, 4, 5),
             stored AS (SELECT merchant_wallet, status, cancelling, due_day, stopped_day,
                               subscriptions, amount, due_amount
                          FROM subscription_tallies WHERE chain_id = $1),
             fresh_starts AS (
                 SELECT merchant_wallet, (created_at AT TIME ZONE 'UTC')::date AS day,
                        count(*) AS subscriptions
                   FROM subscriptions WHERE chain_id = $1 GROUP BY 1, 2),
             stored_starts AS (SELECT merchant_wallet, day, subscriptions
                                 FROM subscription_starts WHERE chain_id = $1)
             SELECT coalesce(s.merchant_wallet, f.merchant_wallet),
                    format('%s%s, due %s, stopped %s', coalesce(s.status, f.status),
                           CASE WHEN coalesce(s.cancelling, f.cancelling) THEN ' cancelling' ELSE '' END,
                           coalesce(coalesce(s.due_day, f.due_day)::TEXT, '-'),
                           coalesce(coalesce(s.stopped_day, f.stopped_day)::TEXT, '-')),
                    coalesce(s.subscriptions || '/' || s.amount || '/' || s.due_amount, 'none'),
                    coalesce(f.subscriptions || '/' || f.amount || '/' || f.due_amount, 'none')
               FROM stored s FULL JOIN fresh f
                 ON f.merchant_wallet = s.merchant_wallet AND f.status = s.status
                AND f.cancelling = s.cancelling AND f.due_day IS NOT DISTINCT FROM s.due_day
                AND f.stopped_day IS NOT DISTINCT FROM s.stopped_day
              WHERE s IS DISTINCT FROM f
             UNION ALL
             SELECT coalesce(s.merchant_wallet, f.merchant_wallet),
                    'started ' || coalesce(s.day, f.day),
                    coalesce(s.subscriptions::TEXT, 'none'), coalesce(f.subscriptions::TEXT, 'none')
               FROM stored_starts s FULL JOIN fresh_starts f
                 ON f.merchant_wallet = s.merchant_wallet AND f.day = s.day
              WHERE s IS DISTINCT FROM f
              ORDER BY 1, 2",
            &[&chain_id],
        )
        .await?;
    Ok(columns4(&rows))
}

/// The days of `subscription_state_moves` (migration 0034) that differ from the moves the
/// events make, recomputed over every event of `chain_id`: `(merchant wallet, "day state",
/// stored count or "none", recomputed or "none")`.
pub async fn state_moves_drift(
    client: &Client,
    chain_id: ChainId,
) -> Result<Vec<(Vec<u8>, String, String, String)>> {
    let rows = client
        .query(
            "WITH ev AS (
                 SELECT e.merchant_wallet, (e.block_time AT TIME ZONE 'UTC')::date AS day,
                        subscription_state(e.snap_status, e.snap_cancel_at_period_end) AS state,
                        lag(subscription_state(e.snap_status, e.snap_cancel_at_period_end))
                            OVER (PARTITION BY e.subscription_id ORDER BY e.id) AS before
                   FROM chain_events e
                  WHERE e.chain_id = $1 AND e.snap_status IS NOT NULL
                    AND e.subscription_id IS NOT NULL),
             fresh AS (
                 SELECT merchant_wallet, day, state, sum(n) AS subscriptions
                   FROM (SELECT merchant_wallet, day, state, 1 AS n FROM ev
                          WHERE state IS DISTINCT FROM before
                         UNION ALL
                         SELECT merchant_wallet, day, before, -1 FROM ev
                          WHERE before IS NOT NULL AND state IS DISTINCT FROM before) m
                  GROUP BY 1, 2, 3 HAVING sum(n) <> 0),
             stored AS (SELECT merchant_wallet, day, state, subscriptions
                          FROM subscription_state_moves WHERE chain_id = $1)
             SELECT coalesce(s.merchant_wallet, f.merchant_wallet),
                    coalesce(s.day, f.day) || ' ' || coalesce(s.state, f.state),
                    coalesce(s.subscriptions::TEXT, 'none'), coalesce(f.subscriptions::TEXT, 'none')
               FROM stored s FULL JOIN fresh f
                 ON f.merchant_wallet = s.merchant_wallet AND f.day = s.day AND f.state = s.state
              WHERE s.subscriptions IS DISTINCT FROM f.subscriptions
              ORDER BY 1, 2",
            &[&chain_id],
        )
        .await?;
    Ok(columns4(&rows))
}

/// Each row's first four columns: a drift finding's (merchant, key, stored, recomputed).
fn columns4<A, B, C, D>(rows: &[tokio_postgres::Row]) -> Vec<(A, B, C, D)>
where
    A: for<'a> tokio_postgres::types::FromSql<'a>,
    B: for<'a> tokio_postgres::types::FromSql<'a>,
    C: for<'a> tokio_postgres::types::FromSql<'a>,
    D: for<'a> tokio_postgres::types::FromSql<'a>,
{
    rows.iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

/// The highest block any stored event of `chain_id` is in.
pub async fn highest_event_block(client: &Client, chain_id: ChainId) -> Result<Option<u64>> {
    let row = client
        .query_one(
            "SELECT max(block_number) FROM chain_events WHERE chain_id = $1",
            &[&chain_id],
        )
        .await?;
    Ok(row.get::<_, Option<i64>>(0).map(|b| b as u64))
}
