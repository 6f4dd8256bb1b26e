//! The batch's writes: every insert is one statement per table per transaction, whatever
//! the number of rows — a binary COPY for rows that are new by construction (events, new
//! subscriptions), an `UNNEST` statement where rows may exist — and the reads the writer's
//! subscription fold needs first.

use chainsub_core::ChainId;
use std::collections::HashMap;

use alloy::primitives::{Address, B256, U256};
use chainsub_core::{
    LedgerKind, PendingPlanChange, SubscriptionId, SubscriptionState, SubscriptionStatus, ts,
};
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};

use super::{address, b256};
use crate::copy::{Numeric, copy_in};
use crate::{Error, Result};

fn i32_of(v: u64, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::Inconsistent(format!("{what} {v} does not fit INTEGER")))
}

/// The fields of a log that events serve, as typed columns of `chain_events` (`log_amount`,
/// `log_subscriber`, `log_period`, `log_attempt`, `log_reason`, `log_next_retry_at`;
/// migration 0021). The rest of the log is its `topics` and `data`, which decode to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogFields {
    pub amount: Option<U256>,
    pub subscriber: Option<Address>,
    pub period: Option<u32>,
    pub attempt: Option<u8>,
    pub reason: Option<u8>,
    pub next_retry_at: Option<u64>,
}

/// One log of a batch, as `chain_events` stores it.
#[derive(Debug, Clone, Copy)]
pub struct NewEvent<'a> {
    pub public_id: &'a str,
    pub block_number: u64,
    pub block_hash: &'a B256,
    pub block_time: u64,
    pub tx_hash: &'a B256,
    pub tx_index: u64,
    pub log_index: u64,
    /// Solidity event name (`Unknown` when the log does not decode).
    pub name: &'a str,
    /// The lifecycle event type, for events merchants see.
    pub kind: Option<&'a str>,
    pub merchant: Option<&'a Address>,
    pub subscription_id: Option<i64>,
    pub plan_id: Option<i64>,
    pub topics: &'a [B256],
    pub data: &'a [u8],
    pub fields: &'a LogFields,
    /// The subscription right after this event: its snapshot (`snap_*` columns,
    /// [`SubscriptionState::snapshot`]).
    pub snapshot: Option<&'a SubscriptionState>,
    /// Confirmed in this batch: its outbox row is written with it.
    pub enqueued: bool,
    /// Its place among its subscription's events, from the fold ([`SubscriptionState::events`]
    /// right after it); `None` for an event of no subscription, or of one the index does not
    /// project (created before the start block): that one is numbered from the stored events.
    pub sequence: Option<u64>,
}

/// A ledger row for an event of the batch (`SubscriptionCharged`, `PaymentFailed`, a
/// prorated `PlanChanged`, `SubscriptionRefunded`). `amount` is the event's (a magnitude):
/// a refund's is stored negative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLedgerEntry {
    pub event_id: i64,
    pub subscription_id: i64,
    pub kind: LedgerKind,
    pub amount: U256,
    pub period: u32,
    pub period_start: Option<u64>,
    pub period_end: Option<u64>,
    pub attempt: u32,
    pub failure_reason: Option<String>,
    pub block_time: u64,
}

/// A `chain_plans` row for a `PlanCreated` of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPlan {
    pub onchain_id: i64,
    pub merchant: Address,
    pub plan_ref: B256,
    pub amount: U256,
    pub created_by: Address,
    pub event_id: i64,
}

/// A stored log of a subscription, to fold again after a reorg.
#[derive(Debug, Clone)]
pub struct StoredLog {
    pub id: i64,
    pub block_number: u64,
    pub block_time: u64,
    pub tx_hash: B256,
    pub topics: Vec<B256>,
    pub data: Vec<u8>,
}

/// The sink's COPY of `chain_events`, and its columns' types in order.
const COPY_EVENTS: &str = "COPY chain_events (id, public_id, chain_id, contract, block_number, \
    block_hash, block_time, transaction_hash, transaction_index, log_index, name, kind, \
    merchant_wallet, subscription_id, plan_id, topics, data, log_amount, log_subscriber, \
    log_period, log_attempt, log_reason, log_next_retry_at, snap_id, snap_status, \
    snap_cancel_at_period_end, snap_period, snap_period_start, snap_period_end, \
    snap_next_payment_at, snap_failed_attempts, snap_subscriber, snap_customer_external_id, \
    snap_amount, snap_plan_onchain_id, snap_trial_end, snap_pending_plan_onchain_id, \
    snap_pending_amount, enqueued, sequence) \
    FROM STDIN (FORMAT binary)";
const EVENT_TYPES: &[Type] = &[
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::BYTEA,
    Type::INT8,
    Type::BYTEA,
    Type::TIMESTAMPTZ,
    Type::BYTEA,
    Type::INT4,
    Type::INT4,
    Type::TEXT,
    Type::TEXT,
    Type::BYTEA,
    Type::INT8,
    Type::INT8,
    Type::BYTEA_ARRAY,
    Type::BYTEA,
    Type::NUMERIC,
    Type::BYTEA,
    Type::INT8,
    Type::INT4,
    Type::INT4,
    Type::NUMERIC,
    Type::TEXT,
    Type::TEXT,
    Type::BOOL,
    Type::INT4,
    Type::TIMESTAMPTZ,
    Type::TIMESTAMPTZ,
    Type::TIMESTAMPTZ,
    Type::INT2,
    Type::BYTEA,
    Type::TEXT,
    Type::NUMERIC,
    Type::INT8,
    Type::TIMESTAMPTZ,
    Type::INT8,
    Type::NUMERIC,
    Type::BOOL,
    Type::INT8,
];

/// Inserts `events` (in chain order) with one binary COPY; returns their `chain_events.id`s,
/// in order. The ids are taken from the table's sequence first, in one statement, so they
/// follow chain order; a row already present (same chain, block hash and log index) fails
/// the COPY, and with it the batch: the cursor check makes re-applying a block impossible.
/// The COPY streams in chunks ([`crate::copy::CHUNK`]), so a dense block's rows never sit in
/// one message (a 7,300-event block's INSERT was one ~40 MB bind message before).
pub async fn insert_events(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    contract: &Address,
    events: &[NewEvent<'_>],
) -> Result<Vec<i64>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids: Vec<i64> = tx
        .query(
            "SELECT nextval('chain_events_id_seq') FROM generate_series(1, $1::int8)",
            &[&(events.len() as i64)],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ids.sort_unstable();
    let sequences = number_events(tx, chain_id, events).await?;
    for e in events {
        if e.topics.len() > 4 {
            return Err(Error::Inconsistent("log with more than 4 topics".into()));
        }
        i32_of(e.tx_index, "transaction index")?;
        i32_of(e.log_index, "log index")?;
        if let Some(s) = e.snapshot {
            i32_of(s.period.into(), "period")?;
        }
    }
    let rows = events.iter().zip(&ids).zip(&sequences);
    copy_in(tx, COPY_EVENTS, EVENT_TYPES, rows, |out, ((e, id), seq)| {
        let f = e.fields;
        let topics: Vec<&[u8]> = e.topics.iter().map(|t| t.as_slice()).collect();
        let s = e.snapshot;
        out.row(&[
            id,
            &e.public_id,
            &chain_id,
            &contract.as_slice(),
            &(e.block_number as i64),
            &e.block_hash.as_slice(),
            &ts(e.block_time),
            &e.tx_hash.as_slice(),
            &(e.tx_index as i32),
            &(e.log_index as i32),
            &e.name,
            &e.kind,
            &e.merchant.map(|a| a.as_slice()),
            &e.subscription_id,
            &e.plan_id,
            &topics,
            &e.data,
            &f.amount.map(Numeric),
            &f.subscriber.as_ref().map(|a| a.as_slice()),
            &f.period.map(i64::from),
            &f.attempt.map(i32::from),
            &f.reason.map(i32::from),
            &f.next_retry_at.map(|t| Numeric(U256::from(t))),
            &s.map(|s| s.public_id.as_str()),
            &s.map(|s| s.status.as_str()),
            &s.map(|s| s.cancel_at_period_end),
            &s.map(|s| s.period as i32),
            &s.map(|s| ts(s.current_period_start)),
            &s.map(|s| ts(s.current_period_end)),
            &s.and_then(|s| s.next_payment_at().map(ts)),
            &s.map(|s| i16::from(s.failed_attempts)),
            &s.map(|s| s.subscriber.as_slice()),
            &s.and_then(|s| s.customer_external_id.as_deref()),
            &s.map(|s| Numeric(s.amount)),
            &s.map(|s| s.plan_onchain_id),
            &s.and_then(|s| s.trial_end.map(ts)),
            &s.and_then(|s| s.pending_plan_change.map(|p| p.plan_onchain_id)),
            &s.and_then(|s| s.pending_plan_change.map(|p| Numeric(p.amount))),
            &e.enqueued,
            seq,
        ])
    })
    .await
    .map_err(|e| match e {
        Error::Db(db) if db.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            Error::Inconsistent(format!("an event of the batch is already stored: {db}"))
        }
        e => e,
    })?;
    Ok(ids)
}

/// Each event's `sequence`: the fold's where it gave one; for an event of a subscription the
/// index does not project (created before the start block), the subscription's last stored
/// event's sequence — or, where that one has none (written by a release before migration
/// 0019), the count of its stored events — plus the event's place among the batch's events
/// of that subscription. One statement for all such subscriptions, and only when there are.
async fn number_events(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    events: &[NewEvent<'_>],
) -> Result<Vec<Option<i64>>> {
    let mut unknown: Vec<i64> = events
        .iter()
        .filter(|e| e.sequence.is_none())
        .filter_map(|e| e.subscription_id)
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    let mut last: HashMap<i64, i64> = HashMap::new();
    if !unknown.is_empty() {
        for r in tx
            .query(
                "SELECT u.sid,
                     COALESCE((SELECT x.sequence FROM chain_events x
                               WHERE x.chain_id = $1 AND x.subscription_id = u.sid
                               ORDER BY x.id DESC LIMIT 1),
                              (SELECT count(*) FROM chain_events x
                               WHERE x.chain_id = $1 AND x.subscription_id = u.sid))
                 FROM unnest($2::int8[]) AS u(sid)",
                &[&chain_id, &unknown],
            )
            .await?
        {
            last.insert(r.get(0), r.get(1));
        }
    }
    Ok(events
        .iter()
        .map(|e| match (e.sequence, e.subscription_id) {
            (Some(n), _) => Some(n as i64),
            (None, Some(sid)) => last.get_mut(&sid).map(|n| {
                *n += 1;
                *n
            }),
            (None, None) => None,
        })
        .collect())
}

/// Inserts ledger rows; a refund's amount negative.
pub async fn insert_ledger(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    entries: &[NewLedgerEntry],
) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let eid: Vec<i64> = entries.iter().map(|l| l.event_id).collect();
    let sid: Vec<i64> = entries.iter().map(|l| l.subscription_id).collect();
    let kind: Vec<&str> = entries.iter().map(|l| l.kind.as_str()).collect();
    let amount: Vec<String> = entries.iter().map(|l| l.amount.to_string()).collect();
    let period: Vec<i32> = entries.iter().map(|l| l.period as i32).collect();
    let ps: Vec<_> = entries.iter().map(|l| l.period_start.map(ts)).collect();
    let pe: Vec<_> = entries.iter().map(|l| l.period_end.map(ts)).collect();
    let attempt: Vec<i32> = entries.iter().map(|l| l.attempt as i32).collect();
    let reason: Vec<Option<&str>> = entries
        .iter()
        .map(|l| l.failure_reason.as_deref())
        .collect();
    let bt: Vec<_> = entries.iter().map(|l| ts(l.block_time)).collect();
    tx.execute(
        "INSERT INTO ledger_entries (event_id, chain_id, subscription_id, kind, amount, period,
             period_start, period_end, attempt, failure_reason, block_time)
         SELECT u.eid, $1, u.sid, u.kind,
             CASE WHEN u.kind = 'refund' THEN -u.amount::numeric ELSE u.amount::numeric END,
             u.period, u.ps, u.pe, u.attempt, u.reason, u.bt
         FROM unnest($2::int8[], $3::int8[], $4::text[], $5::text[], $6::int4[],
             $7::timestamptz[], $8::timestamptz[], $9::int4[], $10::text[], $11::timestamptz[])
           AS u(eid, sid, kind, amount, period, ps, pe, attempt, reason, bt)",
        &[
            &chain_id, &eid, &sid, &kind, &amount, &period, &ps, &pe, &attempt, &reason, &bt,
        ],
    )
    .await?;
    Ok(())
}

/// Inserts `chain_plans` rows.
pub async fn insert_plans(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    plans: &[NewPlan],
) -> Result<()> {
    if plans.is_empty() {
        return Ok(());
    }
    let id: Vec<i64> = plans.iter().map(|p| p.onchain_id).collect();
    let m: Vec<&[u8]> = plans.iter().map(|p| p.merchant.as_slice()).collect();
    let r: Vec<&[u8]> = plans.iter().map(|p| p.plan_ref.as_slice()).collect();
    let a: Vec<String> = plans.iter().map(|p| p.amount.to_string()).collect();
    let c: Vec<&[u8]> = plans.iter().map(|p| p.created_by.as_slice()).collect();
    let e: Vec<i64> = plans.iter().map(|p| p.event_id).collect();
    tx.execute(
        "INSERT INTO chain_plans (chain_id, onchain_id, merchant_wallet, plan_ref, amount,
             created_by, event_id)
         SELECT $1, u.id, u.m, u.r, u.a::numeric, u.c, u.e
         FROM unnest($2::int8[], $3::bytea[], $4::bytea[], $5::text[], $6::bytea[], $7::int8[])
           AS u(id, m, r, a, c, e)",
        &[&chain_id, &id, &m, &r, &a, &c, &e],
    )
    .await?;
    Ok(())
}

/// Records plans' trials: `(on-chain plan id, trial days)` from `PlanTrial`. Call after
/// [`insert_plans`] (the plan's `PlanCreated` comes first, in the same transaction).
pub async fn set_plan_trials(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    trials: &[(i64, u16)],
) -> Result<()> {
    if trials.is_empty() {
        return Ok(());
    }
    let id: Vec<i64> = trials.iter().map(|t| t.0).collect();
    let days: Vec<i32> = trials.iter().map(|t| i32::from(t.1)).collect();
    tx.execute(
        "UPDATE chain_plans cp SET trial_days = u.days
         FROM unnest($2::int8[], $3::int4[]) AS u(id, days)
         WHERE cp.chain_id = $1 AND cp.onchain_id = u.id",
        &[&chain_id, &id, &days],
    )
    .await?;
    Ok(())
}

/// Marks plans deactivated: `(on-chain plan id, PlanDeactivated event id)`. Call after
/// [`insert_plans`], so a plan created and deactivated in one batch exists by then.
pub async fn mark_plans_deactivated(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    deactivations: &[(i64, i64)],
) -> Result<()> {
    if deactivations.is_empty() {
        return Ok(());
    }
    let id: Vec<i64> = deactivations.iter().map(|d| d.0).collect();
    let e: Vec<i64> = deactivations.iter().map(|d| d.1).collect();
    tx.execute(
        "UPDATE chain_plans cp SET deactivated_event_id = u.e
         FROM unnest($2::int8[], $3::int8[]) AS u(id, e)
         WHERE cp.chain_id = $1 AND cp.onchain_id = u.id",
        &[&chain_id, &id, &e],
    )
    .await?;
    Ok(())
}

fn state_of_row(r: &tokio_postgres::Row) -> Result<SubscriptionState> {
    let status: &str = r.get(8);
    let amount: &str = r.get(5);
    let secs = |i: usize| r.get::<_, chrono::DateTime<chrono::Utc>>(i).timestamp() as u64;
    Ok(SubscriptionState {
        onchain_id: r.get(0),
        public_id: SubscriptionId::parse(r.get(1)).ok_or_else(|| {
            Error::Inconsistent(format!("subscription id {:?}", r.get::<_, &str>(1)))
        })?,
        merchant: address(r.get(2), "merchant_wallet")?,
        subscriber: address(r.get(3), "subscriber")?,
        plan_onchain_id: r.get(4),
        amount: amount
            .parse::<U256>()
            .map_err(|e| Error::Inconsistent(format!("amount {amount}: {e}")))?,
        customer_ref: b256(r.get(6), "customer_ref")?,
        customer_external_id: r.get(7),
        status: SubscriptionStatus::parse(status)
            .map_err(|e| Error::Inconsistent(e.to_string()))?,
        cancel_at_period_end: r.get(9),
        period: r.get::<_, i32>(10) as u32,
        current_period_start: secs(11),
        current_period_end: secs(12),
        failed_attempts: r.get::<_, i32>(13) as u8,
        next_retry_at: r
            .get::<_, Option<chrono::DateTime<chrono::Utc>>>(14)
            .map(|t| t.timestamp() as u64),
        ended_reason: r.get(15),
        created_event: r.get(16),
        last_event: r.get(17),
        created_at: secs(18),
        updated_at: secs(19),
        events: r.get::<_, i64>(20) as u64,
        trial_end: r
            .get::<_, Option<chrono::DateTime<chrono::Utc>>>(21)
            .map(|t| t.timestamp() as u64),
        pending_plan_change: match (r.get::<_, Option<i64>>(22), r.get::<_, Option<&str>>(23)) {
            (Some(plan_onchain_id), Some(amount)) => Some(PendingPlanChange {
                plan_onchain_id,
                amount: amount
                    .parse::<U256>()
                    .map_err(|e| Error::Inconsistent(format!("pending amount {amount}: {e}")))?,
            }),
            _ => None,
        },
    })
}

/// The stored state of the given subscriptions.
pub async fn load_subscriptions(
    tx: &impl GenericClient,
    chain_id: ChainId,
    ids: &[i64],
) -> Result<HashMap<i64, SubscriptionState>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = tx
        .query(
            "SELECT onchain_id, public_id, merchant_wallet, subscriber, plan_onchain_id,
                 amount::text, customer_ref, customer_external_id, status, cancel_at_period_end,
                 period, current_period_start, current_period_end, failed_attempts,
                 next_retry_at, ended_reason, created_event_id, last_event_id, created_at,
                 updated_at, event_count, trial_end, pending_plan_onchain_id,
                 pending_amount::text
             FROM subscriptions WHERE chain_id = $1 AND onchain_id = ANY($2)",
            &[&chain_id, &ids],
        )
        .await?;
    rows.iter()
        .map(|r| state_of_row(r).map(|s| (s.onchain_id, s)))
        .collect()
}

const COPY_SUBSCRIPTIONS: &str = "COPY subscriptions (chain_id, onchain_id, public_id, \
    merchant_wallet, subscriber, plan_onchain_id, amount, customer_ref, customer_external_id, \
    status, cancel_at_period_end, period, current_period_start, current_period_end, \
    failed_attempts, next_retry_at, ended_reason, created_event_id, last_event_id, created_at, \
    updated_at, event_count, trial_end, pending_plan_onchain_id, pending_amount) \
    FROM STDIN (FORMAT binary)";
const SUBSCRIPTION_TYPES: &[Type] = &[
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::BYTEA,
    Type::BYTEA,
    Type::INT8,
    Type::NUMERIC,
    Type::BYTEA,
    Type::TEXT,
    Type::TEXT,
    Type::BOOL,
    Type::INT4,
    Type::TIMESTAMPTZ,
    Type::TIMESTAMPTZ,
    Type::INT4,
    Type::TIMESTAMPTZ,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TIMESTAMPTZ,
    Type::TIMESTAMPTZ,
    Type::INT8,
    Type::TIMESTAMPTZ,
    Type::INT8,
    Type::NUMERIC,
];

/// Inserts the rows of subscriptions created in this batch with one binary COPY (the writer
/// loaded every stored subscription the batch touches first, so none of these exists; one
/// that did would fail the COPY and the batch).
pub async fn insert_subscriptions(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    subs: &[SubscriptionState],
) -> Result<()> {
    if subs.is_empty() {
        return Ok(());
    }
    copy_in(
        tx,
        COPY_SUBSCRIPTIONS,
        SUBSCRIPTION_TYPES,
        subs,
        |out, s| {
            out.row(&[
                &chain_id,
                &s.onchain_id,
                &s.public_id.as_str(),
                &s.merchant.as_slice(),
                &s.subscriber.as_slice(),
                &s.plan_onchain_id,
                &Numeric(s.amount),
                &s.customer_ref.as_slice(),
                &s.customer_external_id,
                &s.status.as_str(),
                &s.cancel_at_period_end,
                &(s.period as i32),
                &ts(s.current_period_start),
                &ts(s.current_period_end),
                &(s.failed_attempts as i32),
                &s.next_retry_at.map(ts),
                &s.ended_reason,
                &s.created_event,
                &s.last_event,
                &ts(s.created_at),
                &ts(s.updated_at),
                &(s.events as i64),
                &s.trial_end.map(ts),
                &s.pending_plan_change.map(|p| p.plan_onchain_id),
                &s.pending_plan_change.map(|p| Numeric(p.amount)),
            ])
        },
    )
    .await?;
    Ok(())
}

/// Inserts or replaces subscription rows.
pub async fn upsert_subscriptions(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    subs: &[SubscriptionState],
) -> Result<()> {
    if subs.is_empty() {
        return Ok(());
    }
    let col = |f: fn(&SubscriptionState) -> i64| subs.iter().map(f).collect::<Vec<i64>>();
    let id = col(|s| s.onchain_id);
    let plan = col(|s| s.plan_onchain_id);
    let ce = col(|s| s.created_event);
    let le = col(|s| s.last_event);
    let evc = col(|s| s.events as i64);
    let pubid: Vec<&str> = subs.iter().map(|s| s.public_id.as_str()).collect();
    let m: Vec<&[u8]> = subs.iter().map(|s| s.merchant.as_slice()).collect();
    let sub: Vec<&[u8]> = subs.iter().map(|s| s.subscriber.as_slice()).collect();
    let amount: Vec<String> = subs.iter().map(|s| s.amount.to_string()).collect();
    let cref: Vec<&[u8]> = subs.iter().map(|s| s.customer_ref.as_slice()).collect();
    let ext: Vec<Option<&str>> = subs
        .iter()
        .map(|s| s.customer_external_id.as_deref())
        .collect();
    let status: Vec<&str> = subs.iter().map(|s| s.status.as_str()).collect();
    let cape: Vec<bool> = subs.iter().map(|s| s.cancel_at_period_end).collect();
    let period: Vec<i32> = subs.iter().map(|s| s.period as i32).collect();
    let ps: Vec<_> = subs.iter().map(|s| ts(s.current_period_start)).collect();
    let pe: Vec<_> = subs.iter().map(|s| ts(s.current_period_end)).collect();
    let fa: Vec<i32> = subs.iter().map(|s| s.failed_attempts as i32).collect();
    let nra: Vec<_> = subs.iter().map(|s| s.next_retry_at.map(ts)).collect();
    let er: Vec<Option<&str>> = subs.iter().map(|s| s.ended_reason.as_deref()).collect();
    let ca: Vec<_> = subs.iter().map(|s| ts(s.created_at)).collect();
    let ua: Vec<_> = subs.iter().map(|s| ts(s.updated_at)).collect();
    let te: Vec<_> = subs.iter().map(|s| s.trial_end.map(ts)).collect();
    let pp: Vec<Option<i64>> = subs
        .iter()
        .map(|s| s.pending_plan_change.map(|p| p.plan_onchain_id))
        .collect();
    let pa: Vec<Option<String>> = subs
        .iter()
        .map(|s| s.pending_plan_change.map(|p| p.amount.to_string()))
        .collect();
    tx.execute(
        "INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet, subscriber,
             plan_onchain_id, amount, customer_ref, customer_external_id, status,
             cancel_at_period_end, period, current_period_start, current_period_end,
             failed_attempts, next_retry_at, ended_reason, created_event_id, last_event_id,
             created_at, updated_at, event_count, trial_end, pending_plan_onchain_id,
             pending_amount)
         SELECT $1, u.id, u.pubid, u.m, u.sub, u.plan, u.amount::numeric, u.cref, u.ext, u.status,
             u.cape, u.period, u.ps, u.pe, u.fa, u.nra, u.er, u.ce, u.le, u.ca, u.ua, u.evc, u.te,
             u.pp, u.pa::numeric
         FROM unnest($2::int8[], $3::text[], $4::bytea[], $5::bytea[], $6::int8[], $7::text[],
             $8::bytea[], $9::text[], $10::text[], $11::bool[], $12::int4[], $13::timestamptz[],
             $14::timestamptz[], $15::int4[], $16::timestamptz[], $17::text[], $18::int8[],
             $19::int8[], $20::timestamptz[], $21::timestamptz[], $22::int8[],
             $23::timestamptz[], $24::int8[], $25::text[])
           AS u(id, pubid, m, sub, plan, amount, cref, ext, status, cape, period, ps, pe, fa, nra,
                er, ce, le, ca, ua, evc, te, pp, pa)
         ON CONFLICT (chain_id, onchain_id) DO UPDATE SET
             plan_onchain_id = EXCLUDED.plan_onchain_id, amount = EXCLUDED.amount,
             trial_end = EXCLUDED.trial_end,
             pending_plan_onchain_id = EXCLUDED.pending_plan_onchain_id,
             pending_amount = EXCLUDED.pending_amount,
             status = EXCLUDED.status, cancel_at_period_end = EXCLUDED.cancel_at_period_end,
             period = EXCLUDED.period, current_period_start = EXCLUDED.current_period_start,
             current_period_end = EXCLUDED.current_period_end,
             failed_attempts = EXCLUDED.failed_attempts, next_retry_at = EXCLUDED.next_retry_at,
             ended_reason = EXCLUDED.ended_reason, last_event_id = EXCLUDED.last_event_id,
             updated_at = EXCLUDED.updated_at, event_count = EXCLUDED.event_count",
        &[
            &chain_id, &id, &pubid, &m, &sub, &plan, &amount, &cref, &ext, &status, &cape, &period,
            &ps, &pe, &fa, &nra, &er, &ce, &le, &ca, &ua, &evc, &te, &pp, &pa,
        ],
    )
    .await?;
    Ok(())
}

/// The customer external id for each `(customer_ref, merchant, subscriber)`: the checkout's
/// customer only when the reference was made for that merchant AND that subscribing wallet
/// (`checkout_wallet_refs`); `None` for a zero reference, a subscription made outside our
/// checkout, or a reference copied into another wallet's subscription.
pub async fn resolve_customers(
    tx: &impl GenericClient,
    refs: &[(B256, Address, Address)],
) -> Result<Vec<Option<String>>> {
    let wanted: Vec<usize> = (0..refs.len()).filter(|&i| !refs[i].0.is_zero()).collect();
    let mut out = vec![None; refs.len()];
    if wanted.is_empty() {
        return Ok(out);
    }
    let r: Vec<&[u8]> = wanted.iter().map(|&i| refs[i].0.as_slice()).collect();
    let w: Vec<&[u8]> = wanted.iter().map(|&i| refs[i].1.as_slice()).collect();
    let s: Vec<&[u8]> = wanted.iter().map(|&i| refs[i].2.as_slice()).collect();
    let rows = tx
        .query(
            "SELECT (SELECT c.customer_external_id FROM checkout_wallet_refs c
                     JOIN merchants m ON m.id = c.merchant_id
                     WHERE c.customer_ref = u.r AND m.wallet = u.w AND c.wallet = u.s)
             FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) WITH ORDINALITY AS u(r, w, s, i)
             ORDER BY u.i",
            &[&r, &w, &s],
        )
        .await?;
    for (row, &i) in rows.iter().zip(&wanted) {
        out[i] = row.get(0);
    }
    Ok(out)
}

/// The stored logs of the given subscriptions, in chain order per subscription.
pub async fn subscription_logs(
    tx: &impl GenericClient,
    chain_id: ChainId,
    ids: &[i64],
) -> Result<Vec<StoredLog>> {
    let rows = tx
        .query(
            "SELECT id, block_time, topics, data, transaction_hash, block_number FROM chain_events
             WHERE chain_id = $1 AND subscription_id = ANY($2)
             ORDER BY subscription_id, block_number, log_index",
            &[&chain_id, &ids],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let topics: Vec<&[u8]> = r.get(2);
            Ok(StoredLog {
                id: r.get(0),
                block_number: r.get::<_, i64>(5) as u64,
                block_time: r.get::<_, chrono::DateTime<chrono::Utc>>(1).timestamp() as u64,
                topics: topics
                    .iter()
                    .map(|t| b256(t, "topic"))
                    .collect::<Result<_>>()?,
                data: r.get(3),
                tx_hash: b256(r.get(4), "transaction_hash")?,
            })
        })
        .collect()
}
