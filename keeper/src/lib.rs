//! The renewal keeper (docs/design.md §8): finds due subscriptions in the index and sends
//! `SubscriptionManager.chargeMany(ids)` — up to `--charges-per-tx` renewals per
//! transaction, `charge(id)` for a lone one — with its own key.
//!
//! How it stays safe:
//! - **Due by chain time.** "Due" compares the latest block's timestamp (never the wall
//!   clock) with the index's `current_period_end`, or `next_retry_at` for a past-due
//!   subscription, exactly as the contract's `nextAttemptAt` does. Every candidate is then
//!   preflighted with `eth_estimateGas`; a call that would revert (`NotDue`, `NotLive`: the
//!   index may lag the chain) is skipped, not sent.
//! - **One send per step, also across restarts.** A step is (subscription, period being
//!   charged, counted attempt, when it fell due) — attempt 0 is the end of a
//!   cancel-at-period-end subscription; the due time tells apart the retries of a pull that
//!   failed for a token-side reason, which counts no attempt. The
//!   keeper signs locally, commits the steps of a transaction with its nonce and signed bytes
//!   to `keeper_steps` / `keeper_txs` (unique on the step; the transaction names every step
//!   it carries) and only then broadcasts. A restarted keeper
//!   resumes open rows: a receipt closes them, a transaction that never reached the node is
//!   re-broadcast byte for byte, and one stuck past `--replace-after-ms` is replaced with the
//!   SAME nonce and a higher fee, so at most one of its transactions can ever be mined.
//! - **Reorgs.** A step closed within `--reorg-depth` blocks of the head is re-checked each
//!   pass; if a reorg removed its transaction, the step reopens and the same journaled bytes
//!   (same nonce) are re-broadcast. A step still `sent` whose transaction the node no longer
//!   holds (neither mined nor pooled: a reorg removed it before its receipt was recorded, or
//!   the node dropped it) is re-broadcast the same way on the next pass.
//! - **Batches.** The receipt decides each step of a `chargeMany` on its own: acted on (an
//!   event of the contract names the id) or skipped by the contract (no longer due or live
//!   when mined; closed without a tx hash, so it is taken up again while due). A step that
//!   reverted on chain is retried alone.
//! - **Reverted on chain.** A charge that passed its preflight and still reverted (state
//!   changed before it was mined, too little gas) is sent again after a backoff, with a new
//!   nonce and 50% more gas, up to `--max-revert-retries` times; then the step is abandoned
//!   and reported (metric, error log with subscription and period, `/health`). v1 closed it
//!   for good and never renewed that subscription again.
//! - **Nonces.** One counter, initialised from the node's pending nonce (and never below an
//!   open journal row), handed out and broadcast in order under one lock; "nonce too low"
//!   re-syncs it from the node. A refused broadcast leaves a gap, so the counter re-syncs;
//!   a step that provably never reached the chain (refused by the node, or its nonce taken by
//!   a foreign transaction) is closed as failed without a tx hash and may be taken up again
//!   (e.g. once an unfunded keeper is topped up).
//! - **Watchdog.** Each pass counts subscriptions past due whose due step the journal holds
//!   as mined more than `--reorg-depth` blocks below the index's cursor
//!   (`keeper_stranded_subscriptions`, `/health`, `--once` exit 4): renewals that stopped
//!   without an error.
//! - **Bounded work.** At most `--concurrency` transactions in flight; preflights run in
//!   parallel up to the same bound.
//! - **Only the service's subscriptions.** Anyone can create plans on the contract; the
//!   keeper charges subscriptions of plans the API provisioned (and of `--allow-merchants`,
//!   or all with `--charge-any-plan`), and each merchant's charges may use at most
//!   `--merchant-gas-budget` gas per window, so one merchant's thousands of tiny
//!   subscriptions cannot spend the global budget before the others' renewals.
//! - **Gas budget.** Fees paid in the window plus the worst case of in-flight transactions;
//!   a send that would exceed `--gas-budget-wei` is not made, health says
//!   `budget_exhausted` and `--once` exits with status 2. Replacements of a stuck
//!   transaction are exempt: they rescue a send the budget already admitted.
//! - **Futile attempts and grace.** The contract only ends a subscription after 3 RECORDED
//!   failures, so skipping a charge that would fail would leave it past due forever. With
//!   `--precheck-funds`, an attempt whose subscriber lacks balance or allowance is deferred
//!   for `--futile-defer-secs` of chain time after it fell due (the customer may still top
//!   up), then sent anyway so that the failure is recorded and the grace clock moves on.
//!   Deferral therefore delays the end of a non-paying subscription by at most 3 x that.
//! - **One keeper per chain.** A session advisory lock (`locks::keeper(chain_id)`); a second
//!   keeper waits as a hot standby. Losing the lock connection stops sends at once; the
//!   keeper then reconnects (as long as it runs) and takes the lock again or stands by, and
//!   its next session resumes the journal — a Postgres restart no longer stops renewals.

pub mod chain;
pub mod config;
pub mod error;
mod reconcile;
mod send;
pub mod telemetry;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

pub use config::Config;
pub use error::{Error, Result};

use chain::Chain;
use chainsub_store::keeper::Store;
use chainsub_store::startup;
use telemetry::{Health, SharedHealth, names};

/// How a keeper run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Stopped by a signal, or `--once` finished normally.
    Done,
    /// `--once` finished but the gas budget stopped at least one send.
    BudgetExhausted,
    /// `--once` found another keeper holding the lock.
    LockBusy,
    /// `--once` finished but the watchdog found stranded subscriptions (see
    /// [`PassReport::stranded`]): renewals that stopped without an error.
    Stranded,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    pub due: usize,
    pub sent: usize,
    pub skipped: usize,
    pub budget_stopped: bool,
    /// The gas budget or the in-flight bound held due sends back: the next pass starts
    /// after `--busy-interval-ms`, not the poll interval.
    pub more_due: bool,
    /// Live subscriptions past their due time that the keeper will never offer again: the
    /// journal holds their due step as mined, in a block the index has passed
    /// (`chainsub_store::keeper::Store::stranded`). Never 0 without a bug.
    pub stranded: i64,
}

/// A keeper that holds the lock for its chain.
pub struct Keeper {
    cfg: Config,
    chain: Chain,
    store: Store,
    /// The next nonce to hand out; None = read it from the node before the next send.
    nonce: tokio::sync::Mutex<Option<u64>>,
    lock_client: Arc<tokio_postgres::Client>,
    health: SharedHealth,
}

/// Runs the keeper until SIGTERM/SIGINT (or one pass with `--once`).
pub async fn run(
    cfg: Config,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
) -> Result<Exit> {
    cfg.validate().map_err(Error::Config)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received; finishing the current pass");
        let _ = stop_tx.send(true);
    });

    let health: SharedHealth = Arc::new(Mutex::new(Health {
        status: "starting",
        chain_id: cfg.chain_id.get(),
        keeper_address: cfg.keeper_private_key.0.address().to_string(),
        budget_wei: cfg.gas_budget_wei.to_string(),
        ..Health::default()
    }));
    let bound = telemetry::serve(
        cfg.metrics_listen,
        cfg.http.clone(),
        health.clone(),
        prometheus,
        stop_rx.clone(),
    )
    .await?;
    tracing::info!(%bound, "health and metrics listening");

    // TLS as DATABASE_URL's sslmode says (the one connector of every binary).
    let db = chainsub_store::pg::Database::from_url(&cfg.database_url)
        .map_err(|e| Error::Config(e.to_string()))?;
    let deadline = std::time::Duration::from_secs(cfg.startup_deadline_secs);
    if !cfg.no_migrate {
        let applied = startup::migrate(&db, deadline).await?;
        tracing::info!(?applied, "migrations checked");
    }
    let manager = db.manager(deadpool_postgres::ManagerConfig {
        recycling_method: deadpool_postgres::RecyclingMethod::Fast,
    });
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(cfg.concurrency + 2)
        .build()?;

    // An RPC failure can pass (the node starting or restarting); a wrong chain or contract
    // cannot.
    let chain = startup::retry(
        "connect to the node",
        deadline,
        |e: &Error| matches!(e, Error::Rpc(_)),
        || {
            Chain::connect(
                &cfg.rpc_url,
                cfg.chain_id,
                cfg.contract_address,
                cfg.keeper_private_key.0.clone(),
            )
        },
    )
    .await?;
    let mut store = Store::new(pool, cfg.chain_id, cfg.contract_address, chain.keeper)?
        .with_revert_retries(cfg.max_revert_retries)
        .with_scope(chainsub_store::keeper::ChargeScope {
            any_plan: cfg.charge_any_plan,
            allow_merchants: cfg.allow_merchants.clone(),
        });
    let (mut cfg, mut chain) = (cfg, chain);
    let key = chainsub_migrations::locks::keeper(cfg.chain_id.db());
    // One lock session after another: a keeper whose lock connection is lost (a Postgres
    // restart, a network cut, its session ended on the server while it was frozen) stops
    // sending at once, reconnects, and takes the lock again or stands by. Everything it
    // had in flight is in the journal, which the next session's first pass resumes.
    let mut session: u64 = 0;
    loop {
        session += 1;
        let Some(lock_client) =
            take_lock(&cfg, &db, key, deadline, session, &health, stop_rx.clone()).await?
        else {
            return Ok(if cfg.once { Exit::LockBusy } else { Exit::Done });
        };
        // A keeper that stops talking without dying (frozen, partitioned) must lose the lock
        // in bounded time, or no standby ever takes over: bound the lock session on the
        // server and keep it busy from a heartbeat while this process runs (see
        // `bound_lock_session`).
        let lock_client = Arc::new(lock_client);
        bound_lock_session(&lock_client, cfg.lock_idle_timeout()).await?;
        metrics::gauge!(names::LOCK_HELD).set(1.0);
        health.lock().expect("health lock").lock_held = true;
        tracing::info!(keeper = %chain.keeper, chain_id = %cfg.chain_id, contract = %cfg.contract_address, session, "keeper lock taken");

        let keeper = Keeper {
            cfg,
            chain,
            store,
            // A new session re-reads the nonce from the node (and the journal).
            nonce: tokio::sync::Mutex::new(None),
            lock_client,
            health: health.clone(),
        };
        match keeper.run_loop(stop_rx.clone()).await {
            Err(Error::LockLost) if !keeper.cfg.once => {
                metrics::gauge!(names::LOCK_HELD).set(0.0);
                metrics::counter!(names::LOCK_LOST).increment(1);
                {
                    let mut h = health.lock().expect("health lock");
                    h.lock_held = false;
                    h.status = "reconnecting";
                }
                tracing::warn!(
                    session,
                    "the keeper lock's connection is gone; sends stopped, reconnecting to take the lock again"
                );
                Keeper {
                    cfg,
                    chain,
                    store,
                    ..
                } = keeper;
            }
            other => return other,
        }
    }
}

/// How long `--once` waits for a lock held by someone else before it gives up (exit 3): long
/// enough for the server to end the session of a run that just exited, short against any
/// schedule that runs `--once`.
const ONCE_LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Connects a lock session and takes the keeper lock, standing by while another keeper holds
/// it. Connection failures are retried (the first session within the start-up deadline;
/// later ones for as long as the process runs: a keeper that lost its database keeps trying
/// instead of exiting). `None` when stopped, or with `--once` when another keeper still holds it
/// after [`ONCE_LOCK_GRACE`].
async fn take_lock(
    cfg: &Config,
    db: &chainsub_store::pg::Database,
    key: i64,
    deadline: std::time::Duration,
    session: u64,
    health: &SharedHealth,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<tokio_postgres::Client>> {
    let mut once_waited: Option<Instant> = None;
    loop {
        let client = if session == 1 {
            startup::connect(db, deadline).await?
        } else {
            match db.connect().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "keeper lock session: database unreachable; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                        _ = stop.wait_for(|s| *s) => return Ok(None),
                    }
                }
            }
        };
        loop {
            let got: bool = match chainsub_store::pg::try_lock(&client, key).await {
                Ok(got) => got,
                // The new connection broke too: connect again.
                Err(e) if client.is_closed() => {
                    tracing::warn!(error = %e, "keeper lock session dropped while standing by");
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            if got {
                return Ok(Some(client));
            }
            if cfg.once {
                // The holder may be the previous `--once` run, whose session the server ends
                // a moment after that process exits: wait that moment out, then give up.
                if once_waited.get_or_insert_with(Instant::now).elapsed() < ONCE_LOCK_GRACE {
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => continue,
                        _ = stop.wait_for(|s| *s) => return Ok(None),
                    }
                }
                tracing::warn!("another keeper holds the lock for this chain; nothing to do");
                return Ok(None);
            }
            set_status(health, "standby");
            tracing::info!("another keeper holds the lock for this chain; waiting as a standby");
            tokio::select! {
                _ = tokio::time::sleep(cfg.poll_interval()) => {}
                _ = stop.wait_for(|s| *s) => return Ok(None),
            }
        }
    }
}

impl Keeper {
    async fn run_loop(&self, mut stop: watch::Receiver<bool>) -> Result<Exit> {
        loop {
            let report = self.pass_with_health().await;
            if self.cfg.once {
                let report = report?;
                // Record the receipts of what this pass sent (a dev chain has mined most of
                // it by now; a busy one may not have: the next run resumes those).
                self.reconcile().await?;
                self.refresh_in_flight().await?;
                return Ok(if report.budget_stopped {
                    Exit::BudgetExhausted
                } else if report.stranded > 0 {
                    Exit::Stranded
                } else {
                    Exit::Done
                });
            }
            if matches!(report, Err(Error::LockLost)) {
                return Err(Error::LockLost);
            }
            // A renewal wave held back by the in-flight bound goes on as receipts come in.
            let pause = match report {
                Ok(PassReport { more_due: true, .. }) => self.cfg.busy_interval(),
                _ => self.cfg.poll_interval(),
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|s| *s) => {
                    tracing::info!("keeper stopped");
                    return Ok(Exit::Done);
                }
            }
        }
    }

    async fn pass_with_health(&self) -> Result<PassReport> {
        let started = Instant::now();
        let result = self.pass().await;
        metrics::histogram!(names::PASS_SECONDS).record(started.elapsed().as_secs_f64());
        let mut h = self.health.lock().expect("health lock");
        h.last_pass_at = Some(chrono::Utc::now().to_rfc3339());
        h.last_pass = Some(Instant::now());
        match &result {
            Ok(report) => {
                h.status = if report.budget_stopped {
                    "budget_exhausted"
                } else if report.stranded > 0 {
                    "stranded"
                } else {
                    "ok"
                };
                h.last_error = None;
                h.due = report.due;
                h.stranded = report.stranded;
                h.budget_exhausted = report.budget_stopped;
                tracing::debug!(?report, "pass done");
            }
            Err(e) => {
                metrics::counter!(names::PASS_ERRORS).increment(1);
                h.status = "degraded";
                h.last_error = Some(e.to_string());
                tracing::error!(error = %e, "keeper pass failed");
            }
        }
        result
    }

    /// One pass: resume in-flight sends, then send every due step the budget allows.
    pub async fn pass(&self) -> Result<PassReport> {
        self.ensure_lock()?;
        self.reconcile().await?;
        let chain_now = self.chain.chain_time().await?;
        metrics::gauge!(names::CHAIN_TIME).set(chain_now as f64);
        self.health.lock().expect("health lock").chain_time = Some(chain_now);
        if let Ok(balance) = self.chain.keeper_balance().await {
            metrics::gauge!(names::BALANCE_WEI).set(f64::from(balance));
        }
        let mut report = self.send_due(chain_now).await?;
        self.refresh_in_flight().await?;
        report.stranded = self
            .store
            .stranded(chain_datetime(chain_now), self.cfg.reorg_depth)
            .await?;
        metrics::gauge!(names::STRANDED).set(report.stranded as f64);
        if report.stranded > 0 {
            tracing::error!(
                stranded = report.stranded,
                "subscriptions are past due with their due step journaled as mined in a block the \
                 index has passed: the keeper will not charge them again until an operator acts"
            );
        }
        // Warnings never hold renewals up: a failed check is logged and tried next pass.
        if let Err(e) = self.check_renewals(chain_now).await {
            metrics::counter!(names::RENEWAL_CHECKS, "outcome" => "failed").increment(1);
            tracing::warn!(error = %e, "renewal-at-risk checks failed; trying again next pass");
        }
        if let Err(e) = self.notice_trials(chain_now).await {
            tracing::warn!(error = %e, "trial notices failed; trying again next pass");
        }
        Ok(report)
    }

    /// Trial notices: each trial ending within `--trial-will-end-lead-secs` gets one
    /// `subscription.trial_will_end` event, observed at the latest block.
    async fn notice_trials(&self, chain_now: u64) -> Result<()> {
        let lead = self.cfg.trial_will_end_lead_secs;
        if lead == 0 {
            return Ok(());
        }
        let due = self
            .store
            .trials_to_notice(chain_datetime(chain_now), lead, self.cfg.batch_size)
            .await?;
        if due.is_empty() {
            return Ok(());
        }
        let (number, hash, time) = self.chain.latest_block().await?;
        let noticed = self
            .store
            .record_trial_notices(&due, (number, hash, chain_datetime(time)))
            .await?;
        if !noticed.is_empty() {
            metrics::counter!(names::TRIAL_NOTICES).increment(noticed.len() as u64);
            tracing::info!(subscriptions = ?noticed, block = number, "trials end soon: noticed");
        }
        Ok(())
    }

    /// Renewal-at-risk warnings: each active subscription whose renewal falls due within
    /// `--renewal-risk-lead-secs` is checked once for that period — balance and allowance
    /// at one block — and a `subscription.renewal_at_risk` event is recorded per shortfall.
    async fn check_renewals(&self, chain_now: u64) -> Result<()> {
        let lead = self.cfg.renewal_risk_lead_secs;
        if lead == 0 {
            return Ok(());
        }
        let upcoming = self
            .store
            .renewals_to_check(chain_datetime(chain_now), lead, self.cfg.batch_size)
            .await?;
        if upcoming.is_empty() {
            return Ok(());
        }
        let (number, hash, time) = self.chain.latest_block().await?;
        for sub in &upcoming {
            let (balance, allowance) = self.chain.funds_at(sub.subscriber, Some(hash)).await?;
            let seen = chainsub_store::keeper::FundsObservation {
                block_number: number,
                block_hash: hash,
                block_time: chain_datetime(time),
                balance,
                allowance,
            };
            let reasons = self.store.record_renewal_check(sub, &seen).await?;
            let outcome = if reasons.is_empty() { "ok" } else { "at_risk" };
            metrics::counter!(names::RENEWAL_CHECKS, "outcome" => outcome).increment(1);
            if !reasons.is_empty() {
                tracing::info!(
                    subscription = %sub.onchain_id,
                    period = sub.period,
                    ?reasons,
                    block = number,
                    "renewal at risk"
                );
            }
        }
        Ok(())
    }

    async fn refresh_in_flight(&self) -> Result<()> {
        let open = self.store.open_count().await?;
        let spent = self
            .store
            .spent_in_window(self.cfg.budget_window_secs)
            .await?;
        let abandoned = self.store.abandoned_count().await?;
        metrics::gauge!(names::ABANDONED_STEPS).set(abandoned as f64);
        metrics::gauge!(names::IN_FLIGHT).set(open as f64);
        metrics::gauge!(names::SPENT_WEI).set(spent as f64);
        let mut h = self.health.lock().expect("health lock");
        h.in_flight = open;
        h.abandoned = abandoned;
        h.spent_in_window_wei = spent.to_string();
        Ok(())
    }

    /// The lock is a session lock: if its connection is gone another keeper may hold it now.
    fn ensure_lock(&self) -> Result<()> {
        if self.lock_client.is_closed() {
            metrics::gauge!(names::LOCK_HELD).set(0.0);
            return Err(Error::LockLost);
        }
        Ok(())
    }
}

/// Server-side bounds on the lock session (`store::pg::bound_lock_session`) and a heartbeat
/// task that sends an empty query every second while the process runs. A frozen keeper
/// stops the heartbeat, the server ends the session after `idle`, the lock is free for a
/// standby, and the woken keeper finds its lock session closed, stops sending (`LockLost`)
/// and reconnects: it stands by while the other keeper holds the lock.
async fn bound_lock_session(
    client: &Arc<tokio_postgres::Client>,
    idle: std::time::Duration,
) -> Result<()> {
    chainsub_store::pg::bound_lock_session(client, idle).await?;
    let heartbeat = client.clone();
    tokio::spawn(async move {
        while chainsub_store::pg::ping(&heartbeat).await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    Ok(())
}

fn set_status(health: &SharedHealth, status: &'static str) {
    health.lock().expect("health lock").status = status;
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Converts a block timestamp to the index's time type.
fn chain_datetime(ts: u64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(ts as i64, 0).unwrap_or_default()
}
