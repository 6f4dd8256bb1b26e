//! The webhook outbox's one state machine: every transition of a `webhook_outbox` row, for
//! all three writers.
//!
//! ```text
//!   indexer: enqueue (confirmed event) ──> pending ──claim──> delivering ──record──> delivered
//!                                             ^                   │  └──record──> failed
//!        dashboard: retry, resume ────────────┘<──record (retry)──┘        │
//!        dispatcher: release (never sent) ────┘                            │
//!   indexer: retract (reorg, never attempted) ──> row deleted    dashboard: retry ─┘
//!   indexer: retract (reorg, attempted) ──> retracted_at set (+ failed if live), and a new
//!            pending row for its `event.retracted` event
//! ```
//!
//! `delivering` is not a stored status (migration 0026): it is a `pending` row with a live
//! lease (`locked_until` in the future). The claim sets only the lease and the attempt count,
//! columns no index covers, so Postgres updates the row in place (HOT) instead of adding an
//! entry to each of the table's five indexes; readers derive the state with `live_status!`
//! ([`LIVE_STATUS`]).
//!
//! - **Indexer** ([`enqueue`], [`enqueue_confirmed`], [`retract_above`]): a row per
//!   lifecycle event once it has CONFIRMATIONS, in chain order, idempotent per event; a reorg
//!   deletes the rows of undone events that no dispatcher has attempted yet, and retracts the
//!   others (an `event.retracted` event with its own row).
//! - **Dispatcher** ([`due_endpoints`], [`claim`], [`record`], [`release`]): claims are `FOR
//!   UPDATE SKIP LOCKED` plus a lease (`locked_until`), so any number of dispatchers share the
//!   outbox without double delivery, and one that dies mid-delivery only delays its rows
//!   until the lease runs out. Outcomes are fenced by the attempt number.
//! - **Dashboard** ([`retry`], [`resume_held`], [`enqueue_test`]): scoped to the
//!   [`MerchantScope`]; they never take a row a dispatcher holds.

use chainsub_core::ChainId;
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use chainsub_core::OutboxStatus;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient as Cached;
use tokio_postgres::{Client, GenericClient};

use crate::snapshot::stored_snapshot;
use crate::{MerchantScope, Result};

/// The NOTIFY channel dispatchers LISTEN on (migration 0004's trigger signals it on every
/// insert; [`retry`] and [`resume_held`] signal it too).
pub const CHANNEL: &str = "chainsub_webhook_outbox";

/// A delivery's state as readers show it, from the outbox row aliased `o`: a `pending` row
/// under a live lease is `delivering` (see the module docs). A macro so that statements built
/// with `concat!` can include it; [`LIVE_STATUS`] is the same text.
macro_rules! live_status {
    () => {
        "CASE WHEN o.status = 'pending' AND o.locked_until > now() THEN 'delivering' \
         ELSE o.status END"
    };
}
pub(crate) use live_status;
/// [`live_status!`] for a statement over `webhook_outbox o` (tools and tests that read a row's
/// state directly).
pub const LIVE_STATUS: &str = live_status!();

/// Condition shared by every "is this row due" query (`o` is webhook_outbox): waiting, due, and
/// not leased (a lease that ran out frees the row for another dispatcher). The status test is
/// the partial indexes' predicate as written (migrations 0004, 0008), so the planner matches
/// them; no row is stored as `delivering` since migration 0026.
const DUE: &str = "o.status IN ('pending', 'delivering') AND o.next_attempt_at <= now() \
                   AND (o.locked_until IS NULL OR o.locked_until <= now())";

/// A subscription's webhooks go out in chain order: a row waits while an earlier row of the
/// same subscription is pending or being delivered (a failed one no longer holds it back).
/// Rows are enqueued in chain order, so the outbox id is the order.
const IN_ORDER: &str = "(o.subscription_id IS NULL OR NOT EXISTS ( \
    SELECT 1 FROM webhook_outbox p WHERE p.chain_id = o.chain_id \
    AND p.subscription_id = o.subscription_id AND p.id < o.id \
    AND p.status IN ('pending', 'delivering')))";

/// A merchant with due deliveries and a usable endpoint.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub wallet: Vec<u8>,
    pub url: String,
    /// Live secrets (`whsec_…` text), newest first (two during a rotation overlap).
    pub secrets: Vec<String>,
}

/// Merchants that have due rows, a URL, an enabled endpoint and a live secret, oldest due
/// first. Rows of other merchants wait in `pending`: no URL yet, or disabled after a 410.
pub async fn due_endpoints(client: &impl Cached, limit: i64) -> Result<Vec<Endpoint>> {
    static DUE_ENDPOINTS: LazyLock<String> = LazyLock::new(|| {
        format!(
            // A skip scan over the merchants that have live rows (one index probe per
            // merchant instead of reading every due row), then each one's oldest due row.
            "WITH RECURSIVE w AS (
                (SELECT o.merchant_wallet AS wallet FROM webhook_outbox o
                 WHERE o.status IN ('pending', 'delivering') ORDER BY o.merchant_wallet LIMIT 1)
                UNION ALL
                SELECT (SELECT o.merchant_wallet FROM webhook_outbox o
                        WHERE o.status IN ('pending', 'delivering') AND o.merchant_wallet > w.wallet
                        ORDER BY o.merchant_wallet LIMIT 1)
                FROM w WHERE w.wallet IS NOT NULL)
             SELECT m.wallet, m.webhook_url, d.first_due FROM w
             JOIN merchants m ON m.wallet = w.wallet
             CROSS JOIN LATERAL (SELECT o.next_attempt_at AS first_due FROM webhook_outbox o
                                 WHERE o.merchant_wallet = m.wallet AND {DUE}
                                 ORDER BY o.next_attempt_at LIMIT 1) d
             WHERE m.webhook_url IS NOT NULL AND m.webhook_enabled
             ORDER BY d.first_due LIMIT $1"
        )
    });
    let stmt = client.prepare_cached(&DUE_ENDPOINTS).await?;
    let rows = client.query(&stmt, &[&limit]).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let wallets: Vec<Vec<u8>> = rows.iter().map(|r| r.get(0)).collect();
    let mut secrets = live_secrets_by_wallet(client, &wallets).await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let wallet: Vec<u8> = r.get(0);
            let secrets = secrets.remove(&wallet).filter(|s| !s.is_empty())?;
            Some(Endpoint {
                url: r.get(1),
                wallet,
                secrets,
            })
        })
        .collect())
}

async fn live_secrets_by_wallet(
    client: &impl Cached,
    wallets: &[Vec<u8>],
) -> Result<HashMap<Vec<u8>, Vec<String>>> {
    let stmt = client
        .prepare_cached(
            "SELECT m.wallet, s.secret FROM webhook_secrets s JOIN merchants m ON m.id = s.merchant_id
             WHERE m.wallet = ANY($1) AND (s.expires_at IS NULL OR s.expires_at > now())
             ORDER BY s.created_at DESC, s.id DESC",
        )
        .await?;
    let rows = client.query(&stmt, &[&wallets]).await?;
    let mut out: HashMap<Vec<u8>, Vec<String>> = HashMap::new();
    for r in rows {
        out.entry(r.get(0)).or_default().push(r.get(1));
    }
    Ok(out)
}

/// One claimed outbox row.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub event_public_id: String,
    pub test_payload: Option<serde_json::Value>,
    /// This attempt's number (1-based); also the fencing token for recording the outcome.
    pub attempt: i32,
    pub created_at: DateTime<Utc>,
}

/// Claims up to `limit` due rows of each merchant in `wallets` in one statement: counts the
/// attempt and leases them for `lease` (which makes them `delivering`; the stored status stays
/// `pending`, so the update is HOT). Returns (wallet, row).
pub async fn claim(
    client: &impl Cached,
    wallets: &[Vec<u8>],
    limit: i64,
    lease: Duration,
) -> Result<Vec<(Vec<u8>, Claimed)>> {
    static CLAIM: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH c AS (SELECT x.id FROM unnest($1::bytea[]) AS w(wallet)
                        CROSS JOIN LATERAL (
                            SELECT o.id FROM webhook_outbox o WHERE o.merchant_wallet = w.wallet AND {DUE}
                            AND {IN_ORDER}
                            ORDER BY o.next_attempt_at, o.id LIMIT $2 FOR UPDATE SKIP LOCKED) x)
             UPDATE webhook_outbox o SET attempts = o.attempts + 1,
                    locked_until = clock_timestamp() + make_interval(secs => $3)
             FROM c WHERE o.id = c.id
             RETURNING o.id, o.event_public_id, o.test_payload, o.attempts, o.created_at, o.merchant_wallet"
        )
    });
    let stmt = client.prepare_cached(&CLAIM).await?;
    let rows = client
        .query(&stmt, &[&wallets, &limit, &lease.as_secs_f64()])
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get(5),
                Claimed {
                    id: r.get(0),
                    event_public_id: r.get(1),
                    test_payload: r.get(2),
                    attempt: r.get(3),
                    created_at: r.get(4),
                },
            )
        })
        .collect())
}

/// What happened to the row after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextState {
    Delivered,
    /// Try again at this time.
    Retry(DateTime<Utc>),
    /// Schedule exhausted.
    Failed,
}

/// One finished attempt, ready to persist.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub outbox_id: i64,
    pub attempt: i32,
    pub attempted_at: DateTime<Utc>,
    pub url: String,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<String>,
    pub response_excerpt: Option<String>,
    pub next: NextState,
    /// Set when the receiver answered 410: disable this merchant's endpoint.
    pub disable_wallet: Option<Vec<u8>>,
}

/// Persists a batch of attempts and moves their rows on, in one statement (so one round
/// trip and one commit): the attempts, the rows' new states and the endpoints a 410 disabled.
/// A failure is applied only if the row is still ours (same attempt number, still `pending`
/// under a lease): if our lease ran out and another dispatcher took the row, or the dashboard
/// queued it again, that outcome wins.
/// A success is always applied: the receiver has the event.
pub async fn record(client: &impl Cached, outcomes: &[Outcome]) -> Result<()> {
    const RECORD: &str = "WITH attempts AS (
            INSERT INTO webhook_attempts (outbox_id, attempt, attempted_at, url, status_code, latency_ms, error, response_excerpt)
            SELECT a.* FROM unnest($1::bigint[], $2::int[], $3::timestamptz[], $4::text[], $5::int[], $6::int[], $7::text[], $8::text[])
                AS a(outbox_id, attempt, attempted_at, url, status_code, latency_ms, error, response_excerpt)
            WHERE EXISTS (SELECT 1 FROM webhook_outbox o WHERE o.id = a.outbox_id)),
         gone AS (
            UPDATE merchants m SET webhook_enabled = FALSE, webhook_disabled_reason = g.reason
            FROM unnest($11::bytea[], $12::text[]) AS g(wallet, reason)
            WHERE m.wallet = g.wallet AND m.webhook_enabled)
         UPDATE webhook_outbox o SET status = u.status, next_attempt_at = u.next_at, locked_until = NULL,
                last_error = u.err,
                delivered_at = CASE WHEN u.status = 'delivered' THEN clock_timestamp() ELSE o.delivered_at END
         FROM unnest($1::bigint[], $2::int[], $9::text[], $10::timestamptz[], $7::text[]) AS u(id, attempt, status, next_at, err)
         WHERE o.id = u.id
           AND (u.status = 'delivered'
                OR (o.status = 'pending' AND o.locked_until IS NOT NULL AND o.attempts = u.attempt))";
    let ids: Vec<i64> = outcomes.iter().map(|o| o.outbox_id).collect();
    let attempts: Vec<i32> = outcomes.iter().map(|o| o.attempt).collect();
    let at: Vec<DateTime<Utc>> = outcomes.iter().map(|o| o.attempted_at).collect();
    let urls: Vec<&str> = outcomes.iter().map(|o| o.url.as_str()).collect();
    let codes: Vec<Option<i32>> = outcomes.iter().map(|o| o.status_code).collect();
    let latency: Vec<i32> = outcomes.iter().map(|o| o.latency_ms).collect();
    let errors: Vec<Option<&str>> = outcomes.iter().map(|o| o.error.as_deref()).collect();
    let excerpts: Vec<Option<&str>> = outcomes
        .iter()
        .map(|o| o.response_excerpt.as_deref())
        .collect();
    let now = Utc::now();
    let status: Vec<&str> = outcomes
        .iter()
        .map(|o| {
            match o.next {
                NextState::Delivered => OutboxStatus::Delivered,
                NextState::Retry(_) => OutboxStatus::Pending,
                NextState::Failed => OutboxStatus::Failed,
            }
            .as_str()
        })
        .collect();
    let next_at: Vec<DateTime<Utc>> = outcomes
        .iter()
        .map(|o| match o.next {
            NextState::Retry(t) => t,
            _ => now,
        })
        .collect();
    // One reason per endpoint (the first 410 of the batch names it).
    let mut gone: HashMap<&[u8], String> = HashMap::new();
    for o in outcomes {
        if let Some(wallet) = &o.disable_wallet {
            gone.entry(wallet.as_slice()).or_insert_with(|| {
                format!(
                    "endpoint answered 410 Gone at {}",
                    o.attempted_at.to_rfc3339()
                )
            });
        }
    }
    let (gone_wallets, gone_reasons): (Vec<&[u8]>, Vec<String>) = gone.into_iter().unzip();
    let stmt = client.prepare_cached(RECORD).await?;
    client
        .execute(
            &stmt,
            &[
                &ids,
                &attempts,
                &at,
                &urls,
                &codes,
                &latency,
                &errors,
                &excerpts,
                &status,
                &next_at,
                &gone_wallets,
                &gone_reasons,
            ],
        )
        .await?;
    Ok(())
}

/// Hands a claimed row back untouched (no request was sent), undoing the attempt count.
pub async fn release(client: &Client, outbox_id: i64, attempt: i32) -> Result<()> {
    client
        .execute(
            "UPDATE webhook_outbox SET attempts = attempts - 1, locked_until = NULL
             WHERE id = $1 AND attempts = $2 AND status = 'pending' AND locked_until IS NOT NULL",
            &[&outbox_id, &attempt],
        )
        .await?;
    Ok(())
}

/// Rows due now (including those held for merchants without a usable endpoint): the queue
/// depth gauge.
pub async fn queue_depth(client: &Client) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT count(*) FROM webhook_outbox o WHERE o.status IN ('pending', 'delivering') AND o.next_attempt_at <= now()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// The outbox row of a lifecycle event of the batch being written.
#[derive(Debug, Clone, Copy)]
pub struct NewDelivery<'a> {
    /// The event's row id (`chain_events.id`).
    pub event_id: i64,
    pub event_public_id: &'a str,
    pub merchant_wallet: &'a [u8],
    pub subscription_id: Option<i64>,
}

/// Outbox rows for lifecycle events of `chain_id` (in chain order), once each: a row that
/// exists already is left alone. Returns the rows written. The caller knows each event's
/// subscription (the events table is not looked up again).
pub async fn enqueue(
    client: &impl GenericClient,
    chain_id: ChainId,
    events: &[NewDelivery<'_>],
) -> Result<u64> {
    if events.is_empty() {
        return Ok(0);
    }
    let event_ids: Vec<i64> = events.iter().map(|d| d.event_id).collect();
    let ids: Vec<&str> = events.iter().map(|d| d.event_public_id).collect();
    let wallets: Vec<&[u8]> = events.iter().map(|d| d.merchant_wallet).collect();
    let subs: Vec<Option<i64>> = events.iter().map(|d| d.subscription_id).collect();
    Ok(client
        .execute(
            "INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet, chain_id, subscription_id) \
             SELECT u.eid, u.id, u.w, $1, u.sid \
             FROM unnest($5::int8[], $2::text[], $3::bytea[], $4::int8[]) WITH ORDINALITY AS u(eid, id, w, sid, i) \
             ORDER BY u.i \
             ON CONFLICT (event_id) WHERE test_payload IS NULL AND retracted_at IS NULL DO NOTHING",
            &[&chain_id, &ids, &wallets, &subs, &event_ids],
        )
        .await?)
}

/// Outbox rows for lifecycle events the caller has just inserted in the same transaction
/// (in chain order, so ids follow it), with one binary COPY: the sink's path for a batch's
/// confirmed events. A new event has no row yet, so there is nothing to skip — where
/// [`enqueue`]'s `ON CONFLICT` pays a speculative insertion per row; a row that did exist
/// would fail the COPY (the unique live-row index), and with it the batch. The insert
/// trigger wakes dispatchers at commit, as for [`enqueue`]. Returns the rows written.
pub async fn enqueue_new(
    tx: &tokio_postgres::Transaction<'_>,
    chain_id: ChainId,
    events: &[NewDelivery<'_>],
) -> Result<u64> {
    use tokio_postgres::types::Type;
    const TYPES: &[Type] = &[Type::INT8, Type::TEXT, Type::BYTEA, Type::INT8, Type::INT8];
    if events.is_empty() {
        return Ok(0);
    }
    crate::copy::copy_in(
        tx,
        "COPY webhook_outbox (event_id, event_public_id, merchant_wallet, chain_id, \
         subscription_id) FROM STDIN (FORMAT binary)",
        TYPES,
        events,
        |out, d| {
            out.row(&[
                &d.event_id,
                &d.event_public_id,
                &d.merchant_wallet,
                &chain_id,
                &d.subscription_id,
            ])
        },
    )
    .await
}

/// Outbox rows for the stored lifecycle events of `chain_id` up to block `upto` that have
/// none yet (marking them `enqueued`), in chain order. Returns the rows written.
pub async fn enqueue_confirmed(
    client: &impl GenericClient,
    chain_id: ChainId,
    upto: i64,
) -> Result<u64> {
    Ok(client
        .execute(
            "WITH due AS ( \
                 UPDATE chain_events SET enqueued = TRUE \
                 WHERE chain_id = $1 AND NOT enqueued AND kind IS NOT NULL AND block_number <= $2 \
                 RETURNING id, public_id, merchant_wallet, chain_id, subscription_id) \
             INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet, chain_id, subscription_id) \
             SELECT id, public_id, merchant_wallet, chain_id, subscription_id FROM due ORDER BY id \
             ON CONFLICT (event_id) WHERE test_payload IS NULL AND retracted_at IS NULL DO NOTHING",
            &[&chain_id, &upto],
        )
        .await?)
}

/// A reorg undid the blocks of `chain_id` above `above` (back to the common ancestor
/// `ancestor`): deletes the rows of undone events that no dispatcher has attempted, and for
/// every undone event whose webhook was attempted (the merchant may have acted on it) records
/// an `event.retracted` event and queues its webhook. The attempted row is marked
/// `retracted_at` (and stops being retried): it stays as history, and the event id is free
/// for a new row if the event comes back on the new branch. Call before the events are
/// deleted. Returns (rows deleted, retractions written).
pub async fn retract_above(
    client: &impl GenericClient,
    chain_id: ChainId,
    above: i64,
    ancestor: &[u8],
) -> Result<(u64, u64)> {
    // Such a row has no attempts (a claim that sent nothing hands its count back), but
    // attempts have no foreign key to cascade (migration 0024): any are deleted with it.
    let dropped: i64 = client
        .query_one(
            "WITH d AS (DELETE FROM webhook_outbox o USING chain_events e \
                 WHERE e.chain_id = $1 AND e.block_number > $2 AND o.event_id = e.id \
                   AND o.test_payload IS NULL AND o.retracted_at IS NULL \
                   AND o.status = 'pending' AND o.attempts = 0 RETURNING o.id), \
             a AS (DELETE FROM webhook_attempts x USING d WHERE x.outbox_id = d.id) \
             SELECT count(*) FROM d",
            &[&chain_id, &above],
        )
        .await?
        .get(0);
    let retracted = client
        .execute(
            concat!(
            "WITH gone AS ( \
                 SELECT e.*, o.id AS outbox_id FROM chain_events e \
                 JOIN webhook_outbox o ON o.event_id = e.id \
                      AND o.test_payload IS NULL AND o.retracted_at IS NULL \
                 WHERE e.chain_id = $1 AND e.block_number > $2), \
             marked AS ( \
                 UPDATE webhook_outbox o SET retracted_at = clock_timestamp(), locked_until = NULL, \
                        status = CASE WHEN o.status = 'pending' THEN 'failed' \
                                      ELSE o.status END, \
                        last_error = CASE WHEN o.status = 'pending' \
                                          THEN 'retracted: a reorg removed the event' \
                                          ELSE o.last_error END \
                 FROM gone WHERE o.id = gone.outbox_id), \
             written AS ( \
                 INSERT INTO event_retractions (public_id, chain_id, contract, merchant_wallet, \
                     retracted_event_id, retracted_kind, block_number, block_hash, block_time, \
                     transaction_hash, log_index, subscription_id, plan_id, log_amount, \
                     log_subscriber, log_period, log_attempt, log_reason, log_next_retry_at, ",
            stored_snapshot!(""),
            ", ancestor_block, ancestor_hash) \
                 SELECT 'evt_' || md5('chainsub.retraction:' || g.public_id || ':' \
                                      || encode(g.block_hash, 'hex')), \
                     g.chain_id, g.contract, g.merchant_wallet, g.public_id, g.kind, \
                     g.block_number, g.block_hash, g.block_time, g.transaction_hash, g.log_index, \
                     g.subscription_id, g.plan_id, g.log_amount, g.log_subscriber, g.log_period, \
                     g.log_attempt, g.log_reason, g.log_next_retry_at, ",
            stored_snapshot!("g."),
            ", $2, $3 \
                 FROM gone g ORDER BY g.id \
                 ON CONFLICT (public_id) DO NOTHING \
                 RETURNING id, public_id, merchant_wallet, chain_id, subscription_id) \
             INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet, chain_id, subscription_id) \
             SELECT id, public_id, merchant_wallet, chain_id, subscription_id FROM written ORDER BY id"
            ),
            &[&chain_id, &above, &ancestor],
        )
        .await?;
    Ok((dropped.unsigned_abs(), retracted))
}

/// Makes the merchant's waiting deliveries due now (a new URL or a re-enabled endpoint
/// should not sit out backoff earned by the old one) and wakes the dispatchers.
pub async fn resume_held(client: &impl GenericClient, scope: &MerchantScope) -> Result<()> {
    client
        .execute(
            "UPDATE webhook_outbox SET next_attempt_at = now() \
             WHERE merchant_wallet = $1 AND status = 'pending' AND next_attempt_at > now()",
            &[&scope.wallet_bytes()],
        )
        .await?;
    notify(client).await
}

async fn notify(client: &impl GenericClient) -> Result<()> {
    client
        .execute("SELECT pg_notify($1, '')", &[&CHANNEL])
        .await?;
    Ok(())
}

/// Queues a dashboard test event whose body is `payload`, sent as is. Returns the outbox id.
pub async fn enqueue_test(
    client: &impl GenericClient,
    scope: &MerchantScope,
    event_id: &str,
    payload: &serde_json::Value,
) -> Result<i64> {
    let row = client
        .query_one(
            "INSERT INTO webhook_outbox (event_public_id, merchant_wallet, test_payload) \
             VALUES ($1, $2, $3) RETURNING id",
            &[&event_id, &scope.wallet_bytes(), payload],
        )
        .await?;
    Ok(row.get(0))
}

/// What [`retry`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Queued for an immediate attempt.
    Queued,
    /// Being attempted right now (leased by a dispatcher).
    InFlight,
    /// The event was removed by a reorg (its `event.retracted` event went out instead).
    Retracted,
    /// Unknown, or another merchant's.
    NotFound,
}

/// Puts one of the merchant's deliveries back in the queue for an immediate attempt (a
/// failed, delivered or waiting one), unless a dispatcher holds it right now.
pub async fn retry(
    client: &impl GenericClient,
    scope: &MerchantScope,
    outbox_id: i64,
) -> Result<Retry> {
    let queued = client
        .execute(
            "UPDATE webhook_outbox SET status = 'pending', next_attempt_at = now(), \
             locked_until = NULL \
             WHERE id = $1 AND merchant_wallet = $2 AND retracted_at IS NULL \
               AND (locked_until IS NULL OR locked_until <= now())",
            &[&outbox_id, &scope.wallet_bytes()],
        )
        .await?;
    if queued == 1 {
        notify(client).await?;
        return Ok(Retry::Queued);
    }
    let exists = client
        .query_opt(
            "SELECT retracted_at IS NOT NULL FROM webhook_outbox WHERE id = $1 AND merchant_wallet = $2",
            &[&outbox_id, &scope.wallet_bytes()],
        )
        .await?;
    Ok(match exists.map(|r| r.get::<_, bool>(0)) {
        Some(true) => Retry::Retracted,
        Some(false) => Retry::InFlight,
        None => Retry::NotFound,
    })
}
