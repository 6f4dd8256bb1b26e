//! Webhooks (DESIGN §7): Standard Webhooks signing, the outbox dispatcher, the SSRF guard,
//! and the merchant's endpoint settings.
//!
//! Delivery contract, as merchants see it:
//! - at-least-once: the same event may arrive more than once; `webhook-id` (the event id)
//!   is the same on every attempt, so receivers deduplicate on it;
//! - 2xx is success; anything else (3xx included: redirects are not followed), a timeout or
//!   a refused connection is a failure retried on the schedule, then `failed`;
//! - a 410 disables the endpoint: deliveries are held (`pending`) until the merchant
//!   re-enables it or sets a new URL;
//! - events of a merchant without a webhook URL are held (`pending`) too, and are delivered
//!   once a URL is set (they are always readable through `GET /api/v1/events`).

pub mod config;
pub mod delivery;
pub mod dispatcher;
pub mod payload;
pub mod schedule;
pub mod settings;
pub mod signing;
pub mod ssrf;
pub mod store;

pub use config::WebhookConfig;
pub use signing::WebhookSecret;

use std::future::Future;
use std::net::SocketAddr;

use crate::ctx::Ctx;
use crate::error::Result;

/// Runs the dispatcher inside `api serve`, on the server's pool, until `shutdown`.
pub async fn run_dispatcher(ctx: Ctx, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
    dispatcher::run(
        ctx.pool.clone(),
        ctx.cfg.database_url.clone(),
        ctx.cfg.webhooks.clone(),
        shutdown,
    )
    .await
}

/// `api dispatch`: only what a standalone dispatcher needs (no chain, no listener).
#[derive(Debug, Clone, clap::Args)]
pub struct DispatchArgs {
    /// Postgres connection string.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Maximum Postgres connections in the pool.
    #[arg(long, env = "DATABASE_POOL_SIZE", default_value_t = 8)]
    pub database_pool_size: usize,
    /// Do not apply pending migrations at start.
    #[arg(long, env = "NO_MIGRATE")]
    pub no_migrate: bool,
    /// Listen address for Prometheus `/metrics` of this dispatcher.
    #[arg(long, env = "DISPATCH_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub webhooks: WebhookConfig,
}

/// Runs a standalone dispatcher until `shutdown` (SIGTERM in `main`).
pub async fn run_standalone(
    args: DispatchArgs,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    if !args.no_migrate {
        crate::db::migrate(&args.database_url).await?;
    }
    let pool = crate::db::pool(&args.database_url, args.database_pool_size)?;
    if let Some(addr) = args.metrics_listen {
        let handle = crate::metrics::install();
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| crate::error::ApiError::Internal(format!("bind {addr}: {e}")))?;
        use warp::Filter as _;
        let route = warp::path!("metrics").map(move || {
            let text = handle.as_ref().map(|h| h.render()).unwrap_or_default();
            warp::reply::with_header(text, "content-type", "text/plain; version=0.0.4")
        });
        tokio::spawn(warp::serve(route).incoming(listener).run());
    }
    dispatcher::run(pool, args.database_url, args.webhooks, shutdown).await
}
