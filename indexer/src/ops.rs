//! Operations: readiness (`/health`, `/ready`), liveness (`/live`) and Prometheus
//! `/metrics`.
//!
//! Readiness is honest: 503 with the reasons while the last session failed (database or
//! node unreachable, until a step succeeds again), while the writer lags the head by more
//! than `INDEXER_MAX_LAG_BLOCKS`, and while the node's head is below the index (a node
//! behind or on another chain). A hot standby is ready (200, `standby`). Liveness fails
//! only when the writer's loop has not moved for [`STALL`] (a wedged process); a standby
//! blocked on the writer lock is waiting by design.

use chainsub_core::Listen;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use warp::Filter;
use warp::http::StatusCode;

/// How long the writer's loop may go without a beat before liveness fails. Every step is
/// bounded by RPC and database timeouts far below it.
pub const STALL: Duration = Duration::from_secs(120);

/// Live figures shared by the pipeline and the health endpoints.
#[derive(Debug, Default)]
pub struct Status {
    chain_id: u64,
    indexed: AtomicU64,
    head: AtomicU64,
    writer: AtomicBool,
    /// Start-up (migrations, the node's chain id) is over: until then the process is
    /// `starting`, not ready.
    started: AtomicBool,
    /// Readiness bound on the writer's lag in blocks (0: none).
    max_lag: AtomicU64,
    /// Why the last session failed, until a step succeeds again.
    fault: Mutex<Option<String>>,
    /// Unix milliseconds of the writer loop's last beat.
    beat: AtomicU64,
    /// The node's failures while the fetcher retries (inside a step).
    node: Arc<crate::source::NodeTrouble>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Status {
    /// Fresh status for `chain_id`.
    pub fn new(chain_id: u64) -> Arc<Self> {
        let s = Arc::new(Self {
            chain_id,
            ..Default::default()
        });
        s.beat();
        s
    }

    /// Readiness fails while the writer lags by more than `blocks` (0: never).
    pub fn set_max_lag(&self, blocks: u64) {
        self.max_lag.store(blocks, Ordering::Relaxed);
    }

    /// Records the last committed block.
    pub fn set_indexed(&self, n: u64) {
        self.indexed.store(n, Ordering::Relaxed);
        self.publish();
    }

    /// Records the chain head seen.
    pub fn set_head(&self, n: u64) {
        self.head.store(n, Ordering::Relaxed);
        self.publish();
    }

    /// The chain head seen last.
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Relaxed)
    }

    /// Start-up is over: the process runs its sessions from now on.
    pub fn set_started(&self) {
        self.started.store(true, Ordering::Relaxed);
    }

    /// Whether this process holds the writer lock.
    pub fn set_writer(&self, w: bool) {
        self.writer.store(w, Ordering::Relaxed);
        metrics::gauge!("indexer_is_writer").set(if w { 1.0 } else { 0.0 });
    }

    /// A session failed (`Some`, with why) or a step succeeded again (`None`).
    pub fn set_fault(&self, why: Option<String>) {
        metrics::gauge!("indexer_session_failing").set(if why.is_some() { 1.0 } else { 0.0 });
        *self.fault.lock().expect("fault lock") = why;
    }

    /// The writer's loop moved (a step ended): the node answered.
    pub fn beat(&self) {
        self.beat.store(now_ms(), Ordering::Relaxed);
        self.node.clear();
    }

    /// Where the fetcher reports a failing node.
    pub fn node_trouble(&self) -> Arc<crate::source::NodeTrouble> {
        self.node.clone()
    }

    fn lag(&self) -> u64 {
        self.head()
            .saturating_sub(self.indexed.load(Ordering::Relaxed))
    }

    fn publish(&self) {
        metrics::gauge!("indexer_indexed_block").set(self.indexed.load(Ordering::Relaxed) as f64);
        metrics::gauge!("indexer_head_block").set(self.head() as f64);
        metrics::gauge!("indexer_lag_blocks").set(self.lag() as f64);
    }

    /// Why this process is not ready (empty: ready).
    pub fn reasons(&self) -> Vec<String> {
        let mut why = Vec::new();
        if !self.started.load(Ordering::Relaxed) {
            why.push(
                "starting: migrations and the node's chain id (retried until STARTUP_DEADLINE_SECS)"
                    .to_string(),
            );
        }
        if let Some(fault) = self.fault.lock().expect("fault lock").clone() {
            why.push(fault);
        }
        if let Some(node) = self.node.failing() {
            why.push(format!(
                "node unreachable or inconsistent, retrying: {node}"
            ));
        }
        if self.writer.load(Ordering::Relaxed) {
            let (indexed, head) = (self.indexed.load(Ordering::Relaxed), self.head());
            let max = self.max_lag.load(Ordering::Relaxed);
            if max > 0 && self.lag() > max {
                why.push(format!(
                    "lag {} blocks exceeds INDEXER_MAX_LAG_BLOCKS={max}",
                    self.lag()
                ));
            }
            if head > 0 && head < indexed {
                why.push(format!(
                    "the node's head {head} is below the indexed block {indexed} (a node behind, or not on our chain)"
                ));
            }
        }
        why
    }

    /// Readiness: the status code and the `/health` body.
    pub fn health(&self) -> (StatusCode, serde_json::Value) {
        let reasons = self.reasons();
        let writer = self.writer.load(Ordering::Relaxed);
        let starting = !self.started.load(Ordering::Relaxed);
        let (code, status) = match (reasons.is_empty(), writer) {
            _ if starting => (StatusCode::SERVICE_UNAVAILABLE, "starting"),
            (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            (true, true) => (StatusCode::OK, "ok"),
            (true, false) => (StatusCode::OK, "standby"),
        };
        let body = json!({
            "status": status,
            "reasons": reasons,
            "chainId": self.chain_id,
            "writer": writer,
            "indexedBlock": self.indexed.load(Ordering::Relaxed),
            "headBlock": self.head(),
            "lagBlocks": self.lag(),
        });
        (code, body)
    }

    /// Liveness: 503 when the writer's loop has not moved for `stall`.
    pub fn liveness(&self, stall: Duration) -> (StatusCode, serde_json::Value) {
        // A retry inside a step is activity too: the loop waits for the node, it is not
        // wedged.
        let last = self
            .beat
            .load(Ordering::Relaxed)
            .max(self.node.last_activity_ms());
        let since = now_ms().saturating_sub(last);
        let writer = self.writer.load(Ordering::Relaxed);
        if writer && since > stall.as_millis() as u64 {
            let body = json!({ "status": "stalled", "lastBeatMsAgo": since });
            return (StatusCode::SERVICE_UNAVAILABLE, body);
        }
        (
            StatusCode::OK,
            json!({ "status": "alive", "lastBeatMsAgo": since }),
        )
    }
}

/// Installs the global Prometheus recorder and its upkeep (once per process).
pub fn install_metrics() -> crate::Result<PrometheusHandle> {
    let handle = chainsub_core::metrics::install()
        .ok_or_else(|| crate::Error::Config("metrics recorder: another one is installed".into()))?;
    // Every counter on every scrape from the start (`register_counters`).
    chainsub_core::metrics::register_counters(&[
        "indexer_blocks_total",
        "indexer_events_total",
        "indexer_outbox_enqueued_total",
        "indexer_reorgs_total",
        "indexer_deep_reorgs_total",
        "indexer_reorged_sent_events_total",
        "indexer_rpc_errors_total",
        "indexer_rpc_retries_total",
        "indexer_bloom_retries_total",
        "indexer_session_restarts_total",
    ]);
    Ok(handle)
}

/// Serves `/health` (= `/ready`), `/live` and `/metrics` until the process ends; returns the
/// bound address.
pub async fn serve(
    listen: Listen,
    limits: chainsub_serve::HttpLimits,
    status: Arc<Status>,
    metrics: PrometheusHandle,
) -> crate::Result<SocketAddr> {
    let reply = |(code, body): (StatusCode, serde_json::Value)| {
        warp::reply::with_status(warp::reply::json(&body), code)
    };
    let st = status.clone();
    let ready = warp::path("health")
        .or(warp::path("ready"))
        .unify()
        .and(warp::path::end())
        .map(move || reply(st.health()));
    let live = warp::path("live")
        .and(warp::path::end())
        .map(move || reply(status.liveness(STALL)));
    let prom = warp::path("metrics")
        .and(warp::path::end())
        .map(move || metrics.render());
    let listener = listen
        .bind()
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| crate::Error::Config(format!("INDEXER_METRICS_LISTEN {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| crate::Error::Config(e.to_string()))?;
    chainsub_serve::raise_open_files_limit(&limits, 64);
    let gate = chainsub_serve::Gate::plain("indexer", limits);
    tokio::spawn(chainsub_serve::serve(
        warp::service(ready.or(live).or(prom)),
        listener,
        gate,
        std::future::pending(),
    ));
    tracing::info!(%addr, "health and metrics listening");
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 46, point 8: the indexer's listener closes a connection that sends nothing.
    #[tokio::test]
    async fn the_listener_closes_idle_connections_and_answers_others() {
        let limits = chainsub_serve::HttpLimits {
            idle_timeout_secs: 1,
            ..Default::default()
        };
        let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
            .build_recorder()
            .handle();
        let listen: Listen = "127.0.0.1:0".parse().unwrap();
        let addr = serve(listen, limits, Status::new(1), prometheus)
            .await
            .unwrap();
        chainsub_tests::net::assert_idle_closed_while_answering(addr, "/metrics").await;
    }

    #[test]
    fn a_writer_is_ready_until_it_lags_or_its_session_fails() {
        let s = Status::new(1);
        s.set_max_lag(10);
        // Issue 46, point 22: while start-up retries the database or the node, not ready.
        let (code, body) = s.health();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["status"], "starting");
        s.set_started();
        assert_eq!(s.health().1["status"], "standby", "not the writer yet");
        s.set_writer(true);
        s.set_head(100);
        s.set_indexed(95);
        assert_eq!(s.health().0, StatusCode::OK);
        s.set_indexed(80);
        let (code, body) = s.health();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body["reasons"][0]
                .as_str()
                .unwrap()
                .contains("lag 20 blocks"),
            "{body}"
        );
        s.set_indexed(100);
        s.set_fault(Some("database: connection refused".into()));
        let (code, body) = s.health();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["reasons"][0], "database: connection refused");
        s.set_fault(None);
        s.set_head(90);
        let (code, body) = s.health();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body["reasons"][0]
                .as_str()
                .unwrap()
                .contains("below the indexed block")
        );
    }

    #[test]
    fn liveness_fails_only_for_a_writer_whose_loop_stopped() {
        let s = Status::new(1);
        assert_eq!(
            s.liveness(Duration::ZERO).0,
            StatusCode::OK,
            "a standby waits by design"
        );
        s.set_writer(true);
        s.beat.store(now_ms() - 5_000, Ordering::Relaxed);
        assert_eq!(s.liveness(Duration::from_secs(60)).0, StatusCode::OK);
        assert_eq!(
            s.liveness(Duration::from_secs(1)).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
