//! Operations: `/health` (indexed block, head, lag) and Prometheus `/metrics`.

use chainsub_core::Listen;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;
use warp::Filter;

/// Live figures shared by the pipeline and the health endpoint.
#[derive(Debug, Default)]
pub struct Status {
    chain_id: u64,
    indexed: AtomicU64,
    head: AtomicU64,
    writer: AtomicBool,
}

impl Status {
    /// Fresh status for `chain_id`.
    pub fn new(chain_id: u64) -> Arc<Status> {
        Arc::new(Status {
            chain_id,
            ..Default::default()
        })
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

    /// Whether this process holds the writer lock.
    pub fn set_writer(&self, w: bool) {
        self.writer.store(w, Ordering::Relaxed);
        metrics::gauge!("indexer_is_writer").set(if w { 1.0 } else { 0.0 });
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

    /// The `/health` body.
    pub fn health(&self) -> serde_json::Value {
        json!({
            "status": "ok",
            "chainId": self.chain_id,
            "writer": self.writer.load(Ordering::Relaxed),
            "indexedBlock": self.indexed.load(Ordering::Relaxed),
            "headBlock": self.head(),
            "lagBlocks": self.lag(),
        })
    }
}

/// Installs the global Prometheus recorder (once per process).
pub fn install_metrics() -> crate::Result<PrometheusHandle> {
    PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| crate::Error::Config(format!("metrics recorder: {e}")))
}

/// Serves `/health` and `/metrics` until the process ends; returns the bound address.
pub async fn serve(
    listen: Listen,
    status: Arc<Status>,
    metrics: PrometheusHandle,
) -> crate::Result<SocketAddr> {
    let health = warp::path("health")
        .and(warp::path::end())
        .map(move || warp::reply::json(&status.health()));
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
    tokio::spawn(warp::serve(health.or(prom)).incoming(listener).run());
    tracing::info!(%addr, "health and metrics listening");
    Ok(addr)
}
