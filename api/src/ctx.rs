//! Shared state of one server, handed to every route.

use std::convert::Infallible;
use std::sync::Arc;

use warp::Filter;

use crate::config::Config;
use crate::db::Pool;
use crate::http::ratelimit::Limits;
use crate::relayer::Relayer;

/// Everything a handler needs.
#[derive(Clone)]
pub struct AppState {
    pub cfg: Config,
    pub pool: Pool,
    /// Where reads of the chain index run (primary or replica).
    pub reads: crate::reads::Reads,
    pub limits: Arc<Limits>,
    /// Sends createPlan; `None` when no RELAYER_PRIVATE_KEY is configured.
    pub relayer: Option<Arc<Relayer>>,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// API-key lookups (the merchant and the key's row id), cached while their revocations
    /// can be heard.
    pub keys: Arc<crate::auth::key_cache::KeyCache<(chainsub_store::MerchantScope, i64)>>,
    /// Permits for concurrent ledger exports (`LEDGER_EXPORTS_MAX`).
    pub exports: Arc<tokio::sync::Semaphore>,
    /// Merchants with an export running in this process (one each).
    pub exports_running: Arc<std::sync::Mutex<std::collections::HashSet<i64>>>,
    /// Every live API key's hash (`auth::key_cache::LiveKeys`).
    pub live_keys: Arc<crate::auth::key_cache::LiveKeys>,
    /// Public webhook delivery ids.
    pub delivery_ids: crate::webhook_settings::DeliveryIds,
}

impl AppState {
    /// A connection to read the chain index on, with the height it read ([`crate::reads`]).
    pub async fn read_conn(&self) -> crate::http::error::Result<crate::reads::ReadConn> {
        self.reads.conn(&self.pool, self.cfg.chain_id, None).await
    }

    /// Runs `read` where [`crate::reads::Reads::run`] chooses (replica or primary, again on
    /// the primary when the replica's answer will not do), with the height to report.
    pub async fn read<T, F, Fut>(&self, read: F) -> crate::http::error::Result<(T, Option<i64>)>
    where
        F: Fn(crate::db::Conn) -> Fut,
        Fut: Future<Output = crate::http::error::Result<T>>,
    {
        self.reads.run(&self.pool, self.cfg.chain_id, read).await
    }

    /// [`AppState::read_conn`] on a database whose index has reached `height`, if either has.
    pub async fn read_conn_at_least(
        &self,
        height: i64,
    ) -> crate::http::error::Result<crate::reads::ReadConn> {
        self.reads
            .conn(&self.pool, self.cfg.chain_id, Some(height))
            .await
    }
}

/// Cheap to clone.
pub type Ctx = Arc<AppState>;

/// Hands the context to a filter chain.
pub fn with_ctx(ctx: Ctx) -> impl Filter<Extract = (Ctx,), Error = Infallible> + Clone {
    warp::any().map(move || ctx.clone())
}
