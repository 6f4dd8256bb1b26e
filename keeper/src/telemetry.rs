//! Health and Prometheus metrics over HTTP (`/health`, `/metrics`), and the metric names.

use chainsub_core::Listen;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use tokio::sync::watch;
use warp::Filter;
use warp::http::StatusCode;

use super::error::Result;

/// Metric names, in one place so dashboards and tests agree.
pub mod names {
    /// Counter, label `action` (charge|end): transactions first broadcast for a step.
    pub const SENDS: &str = "keeper_sends_total";
    /// Counter, label `reason`: due steps not sent (not_due, not_live, reverted,
    /// futile_deferred, budget, concurrency).
    pub const SKIPPED: &str = "keeper_skipped_total";
    /// Counter, label `result` (mined|reverted): receipts recorded.
    pub const RECEIPTS: &str = "keeper_receipts_total";
    /// Counter: stuck transactions replaced with the same nonce and a higher fee.
    pub const REPLACEMENTS: &str = "keeper_replacements_total";
    /// Counter: mined keeper transactions a reorg took out of the chain (re-broadcast).
    pub const REORGED: &str = "keeper_reorged_total";
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
    /// Gauge: the keeper account's ETH balance in wei.
    pub const BALANCE_WEI: &str = "keeper_balance_wei";
}

/// What `/health` reports.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// starting | standby (another keeper holds the lock) | ok | degraded (last pass failed)
    /// | budget_exhausted.
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
}

/// Shared, updated by the keeper loop, read by `/health`.
pub type SharedHealth = Arc<Mutex<Health>>;

/// Installs the global Prometheus recorder.
pub fn install_metrics() -> std::result::Result<PrometheusHandle, String> {
    PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| e.to_string())
}

/// Binds `addr` and serves `/health` and `/metrics` until `shutdown` flips to true. Returns
/// the bound address (useful with port 0).
pub async fn serve(
    listen: Listen,
    health: SharedHealth,
    prometheus: PrometheusHandle,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::from_std(listen.bind()?)?;
    let bound = listener.local_addr()?;
    let health_route = warp::path("health").and(warp::path::end()).map(move || {
        let h = health.lock().expect("health lock").clone();
        // A standby is healthy (it is waiting on purpose); a failing pass is not.
        let code = match h.status {
            "degraded" | "starting" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::OK,
        };
        warp::reply::with_status(warp::reply::json(&h), code)
    });
    let metrics_route = warp::path("metrics")
        .and(warp::path::end())
        .map(move || prometheus.render());
    let routes = warp::get().and(health_route.or(metrics_route));
    let server = warp::serve(routes).incoming(listener).graceful(async move {
        while !*shutdown.borrow_and_update() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
    });
    tokio::spawn(server.run());
    Ok(bound)
}
