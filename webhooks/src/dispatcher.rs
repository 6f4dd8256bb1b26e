//! The dispatcher: claims due outbox rows, delivers them with bounded concurrency and
//! per-merchant fairness, and persists every attempt. Runs inside `api serve` and alone as
//! `api dispatch`; any number of copies can share one database.
//!
//! Shape: one claimer loop (woken by LISTEN/NOTIFY on new outbox rows, by finished
//! deliveries, or by a poll tick for due retries) spawns one task per claimed row; finished
//! attempts go through a channel to one writer that persists them in batches. Nothing is
//! marked done before the writer commits, so a crash anywhere leaves leased rows that
//! another dispatcher redelivers when the lease runs out (at-least-once, same webhook-id).
//!
//! The claimer works ahead: it holds up to `WEBHOOK_CLAIM_AHEAD` (256) claimed rows beyond
//! the `WEBHOOK_CONCURRENCY` (64) requests in flight, so a claim round (a few queries,
//! whatever it claims) runs while earlier rows are being sent instead of between them, and
//! each round claims a large batch: it claims again once half of the rows ahead have gone
//! out. Each round's statements visit every merchant with due rows, so the size of the
//! round is what Postgres pays per delivery: with 64 rows ahead (rounds of ~32) Postgres
//! spent 110–175 ms of CPU per 1,000 deliveries on the webhook benchmark, with 256 ahead
//! 84 (issue 13). Before the claimer worked ahead at all, each round claimed the ~16 rows
//! that had just finished, and a dispatcher spent its time waiting for the next round.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{Notify, Semaphore, mpsc};

use super::config::WebhookConfig;
use super::delivery::{Attempt, Deliverer};
use super::payload;
use super::signing::WebhookSecret;
use crate::error::Result;
use chainsub_store::outbox::{self as store, Claimed, NextState, Outcome};
use deadpool_postgres::Pool;

/// The NOTIFY channel the 0004 trigger signals on every outbox insert.
pub use chainsub_store::outbox::CHANNEL;
/// Merchants considered per claim round (the oldest-due first).
const MERCHANTS_PER_ROUND: i64 = 256;
/// Attempts persisted per transaction at most.
const WRITE_BATCH: usize = 512;

/// A merchant's endpoint with its secrets parsed; `None` (skipped, rows wait) when none of
/// its stored secrets is usable.
struct Endpoint {
    wallet: Vec<u8>,
    url: String,
    secrets: Vec<WebhookSecret>,
}

impl Endpoint {
    /// `e` with its secrets opened (`cfg`'s sealing keys) and parsed.
    fn of(cfg: &WebhookConfig, e: store::Endpoint) -> Option<Self> {
        let secrets: Vec<WebhookSecret> = e
            .secrets
            .iter()
            .filter_map(|stored| {
                let text = match cfg.open_secret(stored, &e.wallet) {
                    Ok(text) => text,
                    Err(err) => {
                        tracing::error!(error = %err, "a webhook signing secret does not open; skipping it");
                        return None;
                    }
                };
                match WebhookSecret::parse(&text) {
                    Ok(s) => Some(s),
                    Err(_) => {
                        tracing::error!("webhook_secrets holds a malformed secret; skipping it");
                        None
                    }
                }
            })
            .collect();
        (!secrets.is_empty()).then_some(Self {
            wallet: e.wallet,
            url: e.url,
            secrets,
        })
    }
}

struct Shared {
    cfg: WebhookConfig,
    pool: Pool,
    deliverer: Deliverer,
    /// Woken by NOTIFY, by finished deliveries and by retries requested from the dashboard.
    wake: Notify,
    /// Claimed rows not yet finished (waiting to be sent or being sent), at most
    /// [`Shared::claim_capacity`].
    inflight: AtomicUsize,
    /// Requests in flight, at most `WEBHOOK_CONCURRENCY`.
    sending: Semaphore,
    per_merchant: Mutex<HashMap<Vec<u8>, usize>>,
    outcomes: mpsc::UnboundedSender<Outcome>,
    stopping: AtomicBool,
}

/// Runs a dispatcher until `shutdown` resolves, then stops claiming, lets in-flight
/// deliveries finish (each is bounded by the timeout) and persists their outcomes.
pub async fn run(
    pool: Pool,
    database_url: String,
    cfg: WebhookConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    if cfg.lease <= cfg.timeout * 2 {
        // Allowed (tests use it to force redelivery), but rows claimed ahead wait for a
        // request slot, and one whose lease could run out during its request is handed back
        // unsent (`may_send`): with a short lease that happens often.
        tracing::warn!(lease = ?cfg.lease, timeout = ?cfg.timeout,
            "WEBHOOK_LEASE should exceed twice WEBHOOK_TIMEOUT; rows may be handed back unsent, and a slow delivery duplicated");
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        deliverer: Deliverer::new(cfg.clone()),
        pool,
        wake: Notify::new(),
        inflight: AtomicUsize::new(0),
        sending: Semaphore::new(cfg.concurrency.max(1)),
        per_merchant: Mutex::new(HashMap::new()),
        outcomes: tx,
        stopping: AtomicBool::new(false),
        cfg,
    });
    let writer = tokio::spawn(write_outcomes(shared.pool.clone(), rx, shared.cfg.lease));
    let listener = tokio::spawn(listen(database_url, shared.clone()));
    let gauge = tokio::spawn(queue_gauge(shared.pool.clone()));
    tracing::info!(
        concurrency = shared.cfg.concurrency,
        per_merchant = shared.cfg.per_merchant_concurrency,
        "webhook dispatcher started"
    );

    tokio::pin!(shutdown);
    let claimer = claim_loop(shared.clone());
    tokio::select! {
        _ = claimer => {}
        _ = &mut shutdown => {}
    }
    shared.stopping.store(true, Ordering::SeqCst);
    listener.abort();
    gauge.abort();
    // Rows still waiting for a request slot are handed back; requests in flight finish.
    while shared.inflight.load(Ordering::SeqCst) > 0 {
        // Deliveries notify `wake` as they finish; the tick covers a lost wakeup.
        let _ = tokio::time::timeout(Duration::from_millis(100), shared.wake.notified()).await;
    }
    // The last sender goes with `shared`; the writer drains the channel and ends.
    drop(shared);
    let _ = writer.await;
    tracing::info!("webhook dispatcher stopped");
    Ok(())
}

impl Shared {
    /// Claimed rows held at most: the requests in flight and `WEBHOOK_CLAIM_AHEAD` more
    /// waiting their turn.
    fn claim_capacity(&self) -> usize {
        self.cfg
            .concurrency
            .max(1)
            .saturating_add(self.cfg.claim_ahead)
    }
}

/// Whether the claimer runs a round now, holding `inflight` claimed rows of `capacity`: at
/// once when nothing is claimed (a lone event goes out without waiting), otherwise once
/// half of the rows claimed ahead have gone out (with nothing claimed ahead, as soon as a
/// request slot is free), so that each round claims a batch rather than the few rows that
/// just finished.
fn claim_now(inflight: usize, capacity: usize, claim_ahead: usize) -> bool {
    let spare = capacity.saturating_sub(inflight);
    inflight == 0 || spare >= claim_ahead.div_ceil(2).max(1)
}

async fn claim_loop(shared: Arc<Shared>) {
    let mut backoff = Duration::from_millis(100);
    let capacity = shared.claim_capacity();
    loop {
        let inflight = shared.inflight.load(Ordering::SeqCst);
        let spare = capacity.saturating_sub(inflight);
        // Under load, claim in batches rather than one row per finished delivery: each round
        // costs a few queries whatever it claims ([`claim_now`]).
        if !claim_now(inflight, capacity, shared.cfg.claim_ahead) {
            let _ = tokio::time::timeout(shared.cfg.poll_interval, shared.wake.notified()).await;
            continue;
        }
        let claimed = if spare == 0 {
            0
        } else {
            match claim_round(&shared, spare).await {
                Ok(n) => {
                    backoff = Duration::from_millis(100);
                    n
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claiming webhooks failed; backing off");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    0
                }
            }
        };
        if claimed == 0 {
            let _ = tokio::time::timeout(shared.cfg.poll_interval, shared.wake.notified()).await;
        }
    }
}

/// One round: find merchants with due work, share the spare capacity among them (each
/// limited by its per-merchant cap), claim, and spawn the deliveries. Returns how many
/// rows were claimed.
async fn claim_round(shared: &Arc<Shared>, spare: usize) -> Result<usize> {
    let conn = shared.pool.get().await?;
    let endpoints: Vec<Endpoint> = store::due_endpoints(&conn, MERCHANTS_PER_ROUND)
        .await?
        .into_iter()
        .filter_map(|e| Endpoint::of(&shared.cfg, e))
        .collect();
    let rooms: Vec<(Endpoint, usize)> = {
        let busy = shared.per_merchant.lock().expect("per-merchant lock");
        endpoints
            .into_iter()
            .filter_map(|e| {
                let used = busy.get(&e.wallet).copied().unwrap_or(0);
                let room = shared.cfg.per_merchant_concurrency.saturating_sub(used);
                (room > 0).then_some((e, room))
            })
            .collect()
    };
    if rooms.is_empty() {
        return Ok(0);
    }
    // An equal share each (rounded up), so a merchant with a deep backlog cannot take the
    // whole round; leftovers go to the next round.
    let share = spare.div_ceil(rooms.len());
    let mut budget = spare;
    let mut wanted = Vec::new();
    for (e, room) in rooms {
        let n = room.min(share).min(budget);
        if n == 0 {
            break;
        }
        budget -= n;
        wanted.push((e, n));
    }
    // One statement per distinct quota (usually one or two), not one per merchant.
    let lease = shared.cfg.lease;
    let mut by_quota: HashMap<usize, Vec<Vec<u8>>> = HashMap::new();
    for (e, n) in &wanted {
        by_quota.entry(*n).or_default().push(e.wallet.clone());
    }
    // The leases start in the claim statement: time them (conservatively) from before it.
    let claimed_at = std::time::Instant::now();
    let claims = futures::future::join_all(
        by_quota
            .iter()
            .map(|(n, wallets)| store::claim(&conn, wallets, *n as i64, lease)),
    )
    .await;
    let mut claimed_by_wallet: HashMap<Vec<u8>, Vec<Claimed>> = HashMap::new();
    for c in claims {
        for (wallet, row) in c? {
            claimed_by_wallet.entry(wallet).or_default().push(row);
        }
    }
    let mut batches = Vec::new();
    for (e, _) in wanted {
        if let Some(claimed) = claimed_by_wallet.remove(&e.wallet) {
            batches.push((e, claimed));
        }
    }
    let rows: Vec<&Claimed> = batches.iter().flat_map(|(_, c)| c.iter()).collect();
    let count = rows.len();
    if count == 0 {
        return Ok(0);
    }
    let mut bodies = payload::bodies(&conn, &rows).await?;
    drop(conn);
    for (endpoint, claimed) in batches {
        let endpoint = Arc::new(endpoint);
        {
            let mut busy = shared.per_merchant.lock().expect("per-merchant lock");
            *busy.entry(endpoint.wallet.clone()).or_default() += claimed.len();
        }
        shared.inflight.fetch_add(claimed.len(), Ordering::SeqCst);
        for row in claimed {
            let body = bodies.remove(&row.id);
            tokio::spawn(deliver(
                shared.clone(),
                endpoint.clone(),
                row,
                body,
                claimed_at,
            ));
        }
    }
    Ok(count)
}

/// Whether a row claimed `waited` ago may still be sent: what is left of its lease must
/// outlast the request (or, with a lease set shorter than the timeout — tests force
/// redelivery that way — be at least half the lease). A row claimed ahead waits for a request
/// slot; one that waited too long is handed back instead, so a lease never runs out while its
/// request is in flight and another dispatcher cannot send the same row meanwhile.
fn may_send(waited: Duration, lease: Duration, timeout: Duration) -> bool {
    lease.saturating_sub(waited) >= timeout.min(lease / 2)
}

async fn deliver(
    shared: Arc<Shared>,
    endpoint: Arc<Endpoint>,
    row: Claimed,
    body: Option<Vec<u8>>,
    claimed_at: std::time::Instant,
) {
    let outcome = match body {
        Some(body) => {
            // The semaphore is never closed.
            let _permit = shared.sending.acquire().await;
            let stale = !may_send(claimed_at.elapsed(), shared.cfg.lease, shared.cfg.timeout);
            if stale || shared.stopping.load(Ordering::SeqCst) {
                // Not sent: back to `pending` for the next claim (this dispatcher's or
                // another's). Stopping, only requests already in flight are finished.
                hand_back(&shared, &row, stale).await;
                None
            } else {
                Some(
                    shared
                        .deliverer
                        .send(Attempt {
                            outbox_id: row.id,
                            attempt: row.attempt,
                            msg_id: &row.event_public_id,
                            url: &endpoint.url,
                            secrets: &endpoint.secrets,
                            body: &body,
                            wallet: &endpoint.wallet,
                        })
                        .await,
                )
            }
        }
        // The event row is gone (it never should be once confirmed): nothing to send, ever.
        None => Some(Outcome {
            outbox_id: row.id,
            attempt: row.attempt,
            attempted_at: Utc::now(),
            url: endpoint.url.clone(),
            status_code: None,
            latency_ms: 0,
            error: Some("event not found; nothing to deliver".into()),
            response_excerpt: None,
            next: NextState::Failed,
            disable_wallet: None,
        }),
    };
    if let Some(outcome) = outcome {
        record_outcome(&shared, &row, outcome);
    }
    {
        let mut busy = shared.per_merchant.lock().expect("per-merchant lock");
        if let Some(n) = busy.get_mut(&endpoint.wallet) {
            *n -= 1;
            if *n == 0 {
                busy.remove(&endpoint.wallet);
            }
        }
    }
    shared.inflight.fetch_sub(1, Ordering::SeqCst);
    shared.wake.notify_one();
}

/// Hands a claimed, unsent row back (its attempt uncounted). If that fails, its lease runs
/// out and it is claimed again anyway.
async fn hand_back(shared: &Shared, row: &Claimed, stale: bool) {
    let reason = if stale { "lease" } else { "shutdown" };
    metrics::counter!("chainsub_webhook_handed_back_total", "reason" => reason).increment(1);
    let res: Result<()> = async {
        let conn = shared.pool.get().await?;
        Ok(store::release(&conn, row.id, row.attempt).await?)
    }
    .await;
    if let Err(e) = res {
        tracing::warn!(error = %e, outbox_id = row.id, "handing back an unsent webhook failed; its lease will expire");
    }
}

/// Passes a finished attempt to the writer.
fn record_outcome(shared: &Shared, row: &Claimed, outcome: Outcome) {
    if outcome.next == NextState::Delivered && row.attempt == 1 {
        let age = (Utc::now() - row.created_at).to_std().unwrap_or_default();
        metrics::histogram!("chainsub_webhook_enqueue_to_delivery_seconds")
            .record(age.as_secs_f64());
    }
    // The writer outlives every delivery; a send error only happens if it panicked, and
    // then the lease brings the row back.
    let _ = shared.outcomes.send(outcome);
}

/// Persists outcomes in batches. A failed write is retried for up to one lease; after
/// that the rows are left to expire and be redelivered (at-least-once).
async fn write_outcomes(pool: Pool, mut rx: mpsc::UnboundedReceiver<Outcome>, lease: Duration) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(o) => batch.push(o),
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        let mut wait = Duration::from_millis(50);
        loop {
            let res: Result<()> = async {
                let conn = pool.get().await?;
                Ok(store::record(&conn, &batch).await?)
            }
            .await;
            match res {
                Ok(()) => break,
                Err(e) if started.elapsed() < lease => {
                    tracing::warn!(error = %e, n = batch.len(), "persisting webhook attempts failed; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::error!(error = %e, n = batch.len(), "dropping webhook attempt records; leases will expire and rows be redelivered");
                    break;
                }
            }
        }
    }
}

/// LISTEN on [`CHANNEL`] and wake the claimer on every notification (and on every
/// (re)subscription: anything inserted meanwhile is found by that round), reconnecting forever.
async fn listen(database_url: String, shared: Arc<Shared>) {
    use chainsub_store::listen::{Heard, Timing, listen_forever};
    listen_forever(
        &database_url,
        CHANNEL,
        Timing::default(),
        |heard| {
            if heard != Heard::Lost {
                shared.wake.notify_one();
            }
        },
        || shared.stopping.load(Ordering::SeqCst),
    )
    .await
}

/// Publishes the number of due rows every few seconds.
async fn queue_gauge(pool: Pool) {
    loop {
        if let Ok(conn) = pool.get().await
            && let Ok(n) = store::queue_depth(&conn).await
        {
            metrics::gauge!("chainsub_webhook_queue_depth").set(n as f64);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::{claim_now, may_send};
    use std::time::Duration;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_claimer_claims_in_batches_of_half_what_it_holds_ahead() {
        // 64 requests in flight and 64 rows ahead (before WEBHOOK_CLAIM_AHEAD, the fixed
        // setting): a round once 32 are free.
        assert!(claim_now(0, 128, 64), "nothing claimed: at once");
        assert!(!claim_now(97, 128, 64));
        assert!(claim_now(96, 128, 64));
        // 448 ahead: rounds of at least 224 rows.
        assert!(!claim_now(289, 512, 448));
        assert!(claim_now(288, 512, 448));
        // Nothing ahead: a round whenever a request slot is free.
        assert!(!claim_now(64, 64, 0));
        assert!(claim_now(63, 64, 0));
    }

    #[test]
    fn a_row_is_sent_only_while_its_lease_outlasts_the_request() {
        // Defaults: 60 s lease, 15 s timeout.
        assert!(may_send(S(0), S(60), S(15)));
        assert!(may_send(S(45), S(60), S(15)));
        assert!(!may_send(S(46), S(60), S(15)));
        assert!(!may_send(S(90), S(60), S(15)));
        // A lease shorter than the timeout (tests forcing redelivery): half the lease left.
        assert!(may_send(Duration::ZERO, S(1), S(30)));
        assert!(may_send(Duration::from_millis(500), S(1), S(30)));
        assert!(!may_send(Duration::from_millis(501), S(1), S(30)));
    }
}
