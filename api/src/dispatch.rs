//! The webhook dispatcher ([`chainsub_webhooks`]) as the `api` binary runs it: inside
//! `serve` on a pool of its own, or alone as `api dispatch` with its own metrics listener.

use chainsub_core::Listen;
use std::future::Future;

use chainsub_webhooks::{WebhookConfig, dispatcher};

use crate::ctx::Ctx;
use crate::http::error::Result;

/// Runs the dispatcher inside `api serve` until `shutdown`, on a pool of its own (default
/// planning, at most 8 connections) so that deliveries never wait behind API requests.
pub async fn run_dispatcher(ctx: Ctx, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
    let size = ctx.cfg.database_pool_size.min(8);
    let pool = crate::db::dispatcher_pool(&ctx.cfg.database_url, size)?;
    Ok(dispatcher::run(
        pool,
        ctx.cfg.database_url.clone(),
        ctx.cfg.webhooks.clone(),
        shutdown,
    )
    .await?)
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
    pub metrics_listen: Option<Listen>,
    #[command(flatten)]
    pub webhooks: WebhookConfig,
}

/// Runs a standalone dispatcher until `shutdown` (SIGTERM in `main`).
pub async fn run_standalone(
    args: DispatchArgs,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    if args.webhooks.secrets_keys.is_none() {
        tracing::warn!(
            "WEBHOOK_SECRETS_KEYS is not set: this dispatcher cannot open sealed signing \
             secrets, so it delivers only for merchants whose secrets predate sealing"
        );
    }
    if !args.no_migrate {
        crate::db::migrate(
            &args.database_url,
            chainsub_store::startup::DEFAULT_DEADLINE,
        )
        .await?;
    }
    let pool = crate::db::dispatcher_pool(&args.database_url, args.database_pool_size)?;
    if let Some(addr) = args.metrics_listen {
        let handle = crate::metrics::install();
        let listener = crate::server::bind(&addr)?;
        use warp::Filter as _;
        let route = warp::path!("metrics").map(move || {
            let text = handle.as_ref().map(|h| h.render()).unwrap_or_default();
            warp::reply::with_header(text, "content-type", "text/plain; version=0.0.4")
        });
        let gate = chainsub_serve::Gate::plain("dispatcher_metrics", Default::default());
        tokio::spawn(chainsub_serve::serve(
            warp::service(route),
            listener,
            gate,
            std::future::pending(),
        ));
    }
    Ok(dispatcher::run(pool, args.database_url, args.webhooks, shutdown).await?)
}
