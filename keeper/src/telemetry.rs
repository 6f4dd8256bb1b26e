//! Health and Prometheus metrics over HTTP (`/health`, `/metrics`), and the metric names.

use chainsub_core::Listen;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use tokio::sync::watch;
use warp::Filter;
use warp::http::StatusCode;

use super::error::Result;

/// Metric names, in one place so dashboards and tests agree.
pub mod names {
    /// Counter, label `action` (charge|end): transactions first broadcast for a step.
    pub const SENDS: &str = "keeper_sends_total";
    /// Renewal-at-risk checks made, by outcome (`ok`, `at_risk`, `failed`).
    pub const RENEWAL_CHECKS: &str = "keeper_renewal_checks_total";
    /// Counter: `subscription.trial_will_end` notices recorded.
    pub const TRIAL_NOTICES: &str = "keeper_trial_notices_total";
    /// Counter, label `reason`: due steps not sent (not_due, not_live, reverted,
    /// futile_deferred, budget, concurrency).
    pub const SKIPPED: &str = "keeper_skipped_total";
    /// Counter, label `result` (mined|reverted): receipts recorded.
    pub const RECEIPTS: &str = "keeper_receipts_total";
    /// Counter: stuck transactions replaced with the same nonce and a higher fee.
    pub const REPLACEMENTS: &str = "keeper_replacements_total";
    /// Counter: mined keeper transactions a reorg took out of the chain (re-broadcast).
    pub const REORGED: &str = "keeper_reorged_total";
    /// Counter: sent transactions the node no longer held, neither mined nor in its pool (a
    /// reorg removed them before their receipt was recorded, or the node dropped them);
    /// re-broadcast byte for byte.
    pub const LOST: &str = "keeper_lost_transactions_total";
    /// Counter: broadcasts the node refused for good.
    pub const REJECTED: &str = "keeper_rejected_total";
    /// Counter: passes that ended in an error.
    pub const PASS_ERRORS: &str = "keeper_pass_errors_total";
    /// Histogram: pass duration in seconds.
    pub const PASS_SECONDS: &str = "keeper_pass_duration_seconds";
    /// Gauge: steps sent and not yet mined.
    pub const IN_FLIGHT: &str = "keeper_in_flight";
    /// Gauge: due steps found in the last pass.
    pub const DUE: &str = "keeper_due";
    /// Gauge: wei spent (and reserved by in-flight transactions) in the budget window.
    pub const SPENT_WEI: &str = "keeper_gas_spent_in_window_wei";
    /// Gauge: 1 while the gas budget stops sends.
    pub const BUDGET_EXHAUSTED: &str = "keeper_budget_exhausted";
    /// Gauge: latest block timestamp seen.
    pub const CHAIN_TIME: &str = "keeper_chain_time_seconds";
    /// Gauge: 1 while this process holds the per-chain keeper lock.
    pub const LOCK_HELD: &str = "keeper_lock_held";
    /// Counter: steps abandoned after reverting on chain more often than
    /// KEEPER_MAX_REVERT_RETRIES allows (alert on any increase).
    pub const ABANDONED: &str = "keeper_steps_abandoned_total";
    /// Gauge: abandoned steps in the journal.
    pub const ABANDONED_STEPS: &str = "keeper_abandoned_steps";
    /// Counter: lock sessions lost (the keeper reconnected and took the lock again or
    /// stood by).
    pub const LOCK_LOST: &str = "keeper_lock_lost_total";
    /// Gauge: live subscriptions past their due time whose due step the journal holds as
    /// mined in a block the index has passed — renewals that stopped without an error. Alert
    /// on anything above 0.
    pub const STRANDED: &str = "keeper_stranded_subscriptions";
    /// Gauge: the keeper account's ETH balance in wei.
    pub const BALANCE_WEI: &str = "keeper_balance_wei";
}

/// What `/health` reports.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// starting | standby (another keeper holds the lock) | ok | degraded (last pass failed)
    /// | budget_exhausted | stranded (see `stranded`) | reconnecting (lost its lock session;
    /// sends stopped).
    pub status: &'static str,
    pub chain_id: u64,
    pub keeper_address: String,
    pub lock_held: bool,
    pub chain_time: Option<u64>,
    pub last_pass_at: Option<String>,
    pub last_error: Option<String>,
    pub in_flight: usize,
    pub due: usize,
    pub budget_wei: String,
    pub spent_in_window_wei: String,
    pub budget_exhausted: bool,
    /// Steps abandoned after too many on-chain reverts (each needs an operator).
    pub abandoned: i64,
    /// Live subscriptions the keeper will not charge again (`keeper_stranded_subscriptions`;
    /// each needs an operator).
    pub stranded: i64,
    /// When the last pass ended (liveness).
    #[serde(skip)]
    pub last_pass: Option<std::time::Instant>,
}

/// How long the lock holder's pass loop may go without finishing a pass before `/live`
/// fails (a wedged process; passes are bounded by RPC and database timeouts).
pub const STALL: std::time::Duration = std::time::Duration::from_secs(120);

impl Health {
    /// Readiness: 503 while starting, while the last pass failed (its database or node
    /// unreachable, reads failing) or while reconnecting after losing its lock session; a
    /// standby waiting on the lock is ready.
    pub fn readiness(&self) -> StatusCode {
        match self.status {
            "degraded" | "starting" | "reconnecting" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::OK,
        }
    }

    /// Liveness: 503 when the lock holder has not finished a pass for `stall` (a standby
    /// blocked on the lock, or a keeper still starting, is alive).
    pub fn liveness(&self, stall: std::time::Duration) -> StatusCode {
        match self.last_pass {
            Some(at) if self.lock_held && at.elapsed() > stall => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::OK,
        }
    }
}

/// Shared, updated by the keeper loop, read by `/health`.
pub type SharedHealth = Arc<Mutex<Health>>;

/// Installs the global Prometheus recorder and its upkeep (once per process).
pub fn install_metrics() -> std::result::Result<PrometheusHandle, String> {
    let handle = chainsub_core::metrics::install()
        .ok_or_else(|| "another recorder is installed".to_string())?;
    // Every counter on every scrape from the start (`register_counters`).
    chainsub_core::metrics::register_counters(&[
        names::SENDS,
        names::RENEWAL_CHECKS,
        names::TRIAL_NOTICES,
        names::SKIPPED,
        names::RECEIPTS,
        names::REPLACEMENTS,
        names::REORGED,
        names::LOST,
        names::REJECTED,
        names::PASS_ERRORS,
        names::ABANDONED,
        names::LOCK_LOST,
    ]);
    Ok(handle)
}

/// Binds `addr` and serves `/health` (= `/ready`), `/live` and `/metrics` until `shutdown` flips to true. Returns
/// the bound address (useful with port 0).
pub async fn serve(
    listen: Listen,
    limits: chainsub_serve::HttpLimits,
    health: SharedHealth,
    prometheus: PrometheusHandle,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::from_std(listen.bind()?)?;
    let bound = listener.local_addr()?;
    let ready_health = health.clone();
    let health_route = warp::path("health")
        .or(warp::path("ready"))
        .unify()
        .and(warp::path::end())
        .map(move || {
            let h = ready_health.lock().expect("health lock").clone();
            warp::reply::with_status(warp::reply::json(&h), h.readiness())
        });
    let live_route = warp::path("live").and(warp::path::end()).map(move || {
        let code = health.lock().expect("health lock").liveness(STALL);
        let status = if code == StatusCode::OK {
            "alive"
        } else {
            "stalled"
        };
        warp::reply::with_status(
            warp::reply::json(&serde_json::json!({ "status": status })),
            code,
        )
    });
    let metrics_route = warp::path("metrics")
        .and(warp::path::end())
        .map(move || prometheus.render());
    let routes = warp::get().and(health_route.or(live_route).or(metrics_route));
    chainsub_serve::raise_open_files_limit(&limits, 64);
    let gate = chainsub_serve::Gate::plain("keeper", limits);
    tokio::spawn(chainsub_serve::serve(
        warp::service(routes),
        listener,
        gate,
        async move {
            while !*shutdown.borrow_and_update() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        },
    ));
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Issue 46, point 8: the keeper's listener closes a connection that sends nothing.
    #[tokio::test]
    async fn the_listener_closes_idle_connections_and_answers_others() {
        let limits = chainsub_serve::HttpLimits {
            idle_timeout_secs: 1,
            ..Default::default()
        };
        let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
            .build_recorder()
            .handle();
        let (_stop, stopped) = watch::channel(false);
        let listen: Listen = "127.0.0.1:0".parse().unwrap();
        let addr = serve(listen, limits, SharedHealth::default(), prometheus, stopped)
            .await
            .unwrap();
        chainsub_tests::net::assert_idle_closed_while_answering(addr, "/live").await;
    }

    #[test]
    fn readiness_fails_while_starting_or_after_a_failed_pass() {
        let mut h = Health {
            status: "starting",
            ..Health::default()
        };
        assert_eq!(h.readiness(), StatusCode::SERVICE_UNAVAILABLE);
        for (status, code) in [
            ("standby", StatusCode::OK),
            ("ok", StatusCode::OK),
            ("budget_exhausted", StatusCode::OK),
            ("degraded", StatusCode::SERVICE_UNAVAILABLE),
        ] {
            h.status = status;
            assert_eq!(h.readiness(), code, "{status}");
        }
    }

    #[test]
    fn liveness_fails_only_for_a_lock_holder_whose_passes_stopped() {
        let mut h = Health::default();
        assert_eq!(h.liveness(Duration::ZERO), StatusCode::OK, "no pass yet");
        h.last_pass = Instant::now().checked_sub(Duration::from_secs(5));
        assert_eq!(
            h.liveness(Duration::ZERO),
            StatusCode::OK,
            "a standby waits"
        );
        h.lock_held = true;
        assert_eq!(h.liveness(Duration::from_secs(60)), StatusCode::OK);
        assert_eq!(
            h.liveness(Duration::from_secs(1)),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
