//! Starting and stopping one API server (used by `main` and by the tests, in-process).

use chainsub_core::Listen;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use warp::Filter as _;

use crate::app::app;
use crate::chain::Relayer;
use crate::config::Config;
use crate::ctx::{AppState, Ctx};
use crate::http::error::{ApiError, Result};
use crate::http::ratelimit::Limits;

/// A running server.
pub struct Running {
    /// The bound address (the real port when API_LISTEN asked for port 0).
    pub addr: SocketAddr,
    /// The bound `/metrics` address, when `API_METRICS_LISTEN` is set.
    pub metrics_addr: Option<SocketAddr>,
    pub ctx: Ctx,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Builds the shared state: pool, limiters, relayer, metrics.
pub fn build_ctx(cfg: Config) -> Result<Ctx> {
    let pool = crate::db::pool(&cfg.database_url, cfg.database_pool_size)?;
    let relayer = Relayer::from_config(&cfg)?;
    let limits = Limits::new(
        (cfg.rate_limit_key_per_sec, cfg.rate_limit_key_burst),
        (cfg.rate_limit_ip_per_sec, cfg.rate_limit_ip_burst),
        cfg.trusted_proxies.clone(),
    );
    Ok(Arc::new(AppState {
        pool,
        limits,
        relayer,
        metrics: crate::metrics::install(),
        exports: Arc::new(tokio::sync::Semaphore::new(cfg.ledger_exports_max)),
        cfg,
    }))
}

/// Binds `cfg.listen`, migrates (unless `--no-migrate`) and serves until
/// [`Running::shutdown`].
pub async fn start(cfg: Config) -> Result<Running> {
    let listener = cfg
        .listen
        .bind()
        .map_err(|e| ApiError::Internal(format!("listen on {}: {e}", cfg.listen)))?;
    start_on(cfg, listener).await
}

/// [`start`] on a socket bound beforehand (a harness that must know the port first; the
/// `listen` setting is not used).
pub async fn start_on(cfg: Config, listener: std::net::TcpListener) -> Result<Running> {
    if !cfg.no_migrate {
        let deadline = std::time::Duration::from_secs(cfg.startup_deadline_secs);
        let applied = crate::db::migrate(&cfg.database_url, deadline).await?;
        if !applied.is_empty() {
            tracing::info!(?applied, "applied migrations");
        }
    }
    let ctx = build_ctx(cfg)?;
    if let Some(r) = &ctx.relayer {
        // The relayer's balance at start (a warning in /health and the metric if low);
        // later checks happen before each send.
        if let Err(e) = r.ensure_funded().await {
            tracing::warn!(error = %e, "relayer balance check at start");
        }
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut metrics_bound = None;
    if let Some(metrics_addr) = ctx.cfg.metrics_listen {
        let l = bind(&metrics_addr)?;
        metrics_bound = l.local_addr().ok();
        tokio::spawn(
            warp::serve(
                crate::metrics::routes(ctx.clone())
                    .map(|r: crate::http::reply::Resp| r.finish("metrics")),
            )
            .incoming(l)
            .run(),
        );
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let server = warp::serve(app(ctx.clone()))
        .incoming(listener)
        .graceful(async move {
            let _ = stopped.await;
        });
    let task = tokio::spawn(server.run());
    tracing::info!(%addr, "api listening");
    Ok(Running {
        addr,
        metrics_addr: metrics_bound,
        ctx,
        stop: Some(stop),
        task,
    })
}

impl Running {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, and returns when done.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// A tokio listener for a `Listen` setting (an address, or a socket handed over as stdin).
pub fn bind(listen: &Listen) -> Result<tokio::net::TcpListener> {
    listen
        .bind()
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| ApiError::Internal(format!("listen on {listen}: {e}")))
}
