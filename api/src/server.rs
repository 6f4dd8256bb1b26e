//! Starting and stopping one API server (used by `main` and by the tests, in-process).

use chainsub_core::Listen;
use chainsub_serve::Gate;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use warp::Filter as _;

use crate::app::app;
use crate::config::Config;
use crate::ctx::{AppState, Ctx};
use crate::http::error::{ApiError, Result};
use crate::http::ratelimit::Limits;
use crate::relayer::Relayer;

/// A running server.
pub struct Running {
    /// The bound address (the real port when API_LISTEN asked for port 0).
    pub addr: SocketAddr,
    /// The bound `/metrics` address, when `API_METRICS_LISTEN` is set.
    pub metrics_addr: Option<SocketAddr>,
    pub ctx: Ctx,
    /// One per request loop: dropping or sending stops that loop's accepting.
    stops: Vec<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    key_listener: JoinHandle<()>,
    live_keys: JoinHandle<()>,
}

/// Builds the shared state: pool, limiters, relayer, metrics.
pub fn build_ctx(cfg: Config) -> Result<Ctx> {
    let pool = crate::db::pool(&cfg.database_url, cfg.database_pool_size)?;
    let relayer = Relayer::from_config(&cfg)?.map(Arc::new);
    let reads = match &cfg.read_database_url {
        Some(url) => crate::reads::Reads::with_replica(
            crate::db::pool(url, cfg.database_pool_size)?,
            cfg.read_max_lag_blocks,
        ),
        None => crate::reads::Reads::primary_only(),
    };
    let limits = Limits::new(
        (cfg.rate_limit_key_per_sec, cfg.rate_limit_key_burst),
        (cfg.rate_limit_ip_per_sec, cfg.rate_limit_ip_burst),
        (cfg.rate_limit_health_per_sec, cfg.rate_limit_health_burst),
        crate::http::client_ip::Proxies {
            trusted: cfg.trusted_proxies.clone(),
            header: cfg.forwarded_header,
        },
    );
    Ok(Arc::new(AppState {
        pool,
        reads,
        limits,
        relayer,
        metrics: crate::metrics::install(),
        exports: Arc::new(tokio::sync::Semaphore::new(cfg.ledger_exports_max)),
        live_keys: Arc::new(crate::auth::key_cache::LiveKeys::default()),
        exports_running: Arc::default(),
        delivery_ids: crate::webhook_settings::DeliveryIds::new(
            cfg.checkout_signing_secret.expose(),
        ),
        keys: Arc::new(crate::auth::key_cache::KeyCache::new(Duration::from_secs(
            cfg.api_key_cache_secs,
        ))),
        cfg,
    }))
}

/// The state of one request loop of a sharded server: its own pool of `pool_size`
/// connections (a pool's connections are driven by tasks of the runtime that made them),
/// everything else — rate limits, the relayer and its nonces, export permits — shared, so
/// limits stay per process.
fn shard_ctx(base: &Ctx, pool_size: usize) -> Result<Ctx> {
    let replica = match &base.cfg.read_database_url {
        Some(url) => Some(crate::db::pool(url, pool_size)?),
        None => None,
    };
    Ok(Arc::new(AppState {
        pool: crate::db::pool(&base.cfg.database_url, pool_size)?,
        reads: base.reads.for_loop(replica),
        ..AppState::clone(base)
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
/// `listen` setting is not used). Requests run on the calling runtime.
pub async fn start_on(cfg: Config, listener: std::net::TcpListener) -> Result<Running> {
    start_sharded(cfg, listener, 0).await
}

/// Pool connections each request loop gets at least, by default: a ledger export holds one
/// for its whole stream, and the loop's other requests must not queue behind it.
const MIN_POOL_PER_LOOP: usize = 4;

/// The number of request loops `api serve` runs: `API_SHARDS`, by default one per core but
/// no more than leaves each loop [`MIN_POOL_PER_LOOP`] connections of `DATABASE_POOL_SIZE`.
pub fn shards(cfg: &Config) -> usize {
    cfg.shards.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        cores.min((cfg.database_pool_size / MIN_POOL_PER_LOOP).max(1))
    })
}

/// [`start_on`] with `shards` request loops, each a single-threaded runtime on a thread of
/// its own accepting from the same socket (0: requests run on the calling runtime). The
/// dispatcher, `/metrics` and the limiters' upkeep stay on the calling runtime.
pub async fn start_sharded(
    cfg: Config,
    listener: std::net::TcpListener,
    shards: usize,
) -> Result<Running> {
    if !cfg.no_migrate {
        // Start-up may wait for the database for up to STARTUP_DEADLINE_SECS: meanwhile the
        // socket answers every request 503 `starting` at once instead of holding it
        // unanswered in the backlog.
        let starting = answer_starting(&listener, &cfg.http)?;
        let deadline = Duration::from_secs(cfg.startup_deadline_secs);
        let migrated = crate::db::migrate(&cfg.database_url, deadline).await;
        starting.stop().await;
        let applied = migrated?;
        if !applied.is_empty() {
            tracing::info!(?applied, "applied migrations");
        }
    }
    let Some(keys) = cfg.webhooks.secrets_keys.clone() else {
        return Err(ApiError::Internal(
            "WEBHOOK_SECRETS_KEYS is required: the key(s) that seal webhook signing secrets \
             at rest (`id:<32 bytes, base64>`; see docs/operations.md)"
                .into(),
        ));
    };
    let ctx = build_ctx(cfg)?;
    // Secrets stored before sealing, or sealed with a key that is no longer the first.
    let resealed = crate::webhook_settings::reseal_all(&*ctx.pool.get().await?, &keys).await?;
    if resealed > 0 {
        tracing::info!(
            resealed,
            key = keys.current_id(),
            "webhook signing secrets sealed"
        );
    }
    // Hears key revocations; the key cache serves only while it does.
    let key_listener = tokio::spawn(ctx.keys.clone().listen(ctx.cfg.database_url.clone()));
    let live_keys = tokio::spawn(ctx.live_keys.clone().refresh(ctx.pool.clone()));
    // Measures the read replica's lag for every request loop.
    tokio::spawn(ctx.reads.clone().monitor(
        ctx.pool.clone(),
        ctx.cfg.chain_id,
        Duration::from_millis(200),
    ));
    if let Some(r) = &ctx.relayer {
        // The relayer's balance at start (a warning in /health and the metric if low);
        // later checks happen before each send.
        if let Err(e) = r.ensure_funded().await {
            tracing::warn!(error = %e, "relayer balance check at start");
        }
    }
    let internal = |e: std::io::Error| ApiError::Internal(e.to_string());
    listener.set_nonblocking(true).map_err(internal)?;
    let addr = listener.local_addr().map_err(internal)?;
    let mut metrics_bound = None;
    if let Some(metrics_addr) = ctx.cfg.metrics_listen {
        let l = bind(&metrics_addr)?;
        metrics_bound = l.local_addr().ok();
        let routes = crate::metrics::routes(ctx.clone())
            .map(|r: crate::http::reply::Resp| r.finish("metrics"));
        let gate = Gate::plain("api_metrics", ctx.cfg.http.clone());
        tokio::spawn(chainsub_serve::serve(
            warp::service(routes),
            l,
            gate,
            std::future::pending(),
        ));
    }
    // One gate for every request loop: the caps are per process.
    let gate = api_gate(&ctx);
    chainsub_serve::raise_open_files_limit(&ctx.cfg.http, ctx.cfg.database_pool_size + 64);
    let mut stops = Vec::new();
    let task = if shards == 0 {
        let (stop, stopped) = oneshot::channel::<()>();
        stops.push(stop);
        let listener = tokio::net::TcpListener::from_std(listener).map_err(internal)?;
        tokio::spawn(chainsub_serve::serve(
            warp::service(app(ctx.clone())),
            listener,
            gate,
            async move {
                let _ = stopped.await;
            },
        ))
    } else {
        let total = ctx.cfg.database_pool_size.max(shards);
        let mut done = Vec::new();
        for i in 0..shards {
            // The pool split as evenly as it goes: the same number of database sessions
            // in all as one pool of DATABASE_POOL_SIZE (at least one per loop).
            let size = total / shards + usize::from(i < total % shards);
            let shard = shard_ctx(&ctx, size)?;
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            done.push(spawn_loop(
                i,
                shard,
                listener.try_clone().map_err(internal)?,
                gate.clone(),
                stopped,
            )?);
        }
        tokio::spawn(async move {
            // Each loop drains, then its thread ends; shutdown returns after both.
            for (finished, thread) in done {
                let _ = finished.await;
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
        })
    };
    tracing::info!(%addr, shards, "api listening");
    Ok(Running {
        addr,
        metrics_addr: metrics_bound,
        ctx,
        stops,
        task,
        key_listener,
        live_keys,
    })
}

/// The listener's answer while start-up runs: 503 `starting` to every request.
struct Starting {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Starting {
    /// Stops answering; connections arriving from now on wait for the real server.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

fn answer_starting(
    listener: &std::net::TcpListener,
    limits: &chainsub_serve::HttpLimits,
) -> Result<Starting> {
    let internal = |e: std::io::Error| ApiError::Internal(format!("listener: {e}"));
    let clone = listener.try_clone().map_err(internal)?;
    clone.set_nonblocking(true).map_err(internal)?;
    let clone = tokio::net::TcpListener::from_std(clone).map_err(internal)?;
    let route = warp::any().map(|| {
        let body = serde_json::json!({ "error": {
            "type": "api_error",
            "code": crate::http::codes::Code::Starting.as_str(),
            "message": "the service is starting (waiting for its database); retry shortly",
            "param": null,
        }});
        let reply = warp::reply::with_status(
            warp::reply::json(&body),
            warp::http::StatusCode::SERVICE_UNAVAILABLE,
        );
        let reply = warp::reply::with_header(reply, "retry-after", "1");
        warp::reply::with_header(reply, "connection", "close")
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(chainsub_serve::serve(
        warp::service(route),
        clone,
        Gate::plain("api_starting", limits.clone()),
        async move {
            let _ = stopped.await;
        },
    ));
    Ok(Starting { stop, task })
}

/// One request loop: a thread running a single-threaded runtime that serves `listener`
/// until `stopped`, then drains its connections. The receiver resolves when it is done.
fn spawn_loop(
    i: usize,
    ctx: Ctx,
    listener: std::net::TcpListener,
    gate: Gate,
    stopped: oneshot::Receiver<()>,
) -> Result<(oneshot::Receiver<()>, std::thread::JoinHandle<()>)> {
    let (done, finished) = oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ApiError::Internal(format!("runtime: {e}")))?;
    let thread = std::thread::Builder::new()
        .name(format!("api-loop-{i}"))
        .spawn(move || {
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => {
                        chainsub_serve::serve(warp::service(app(ctx)), listener, gate, async move {
                            let _ = stopped.await;
                        })
                        .await
                    }
                    Err(e) => tracing::error!(error = %e, "request loop {i}: listener"),
                }
            });
            // The runtime (its pool connections' tasks) goes before `done` is sent.
            drop(rt);
            let _ = done.send(());
        })
        .map_err(|e| ApiError::Internal(format!("request loop thread: {e}")))?;
    Ok((finished, thread))
}

impl Running {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets in-flight requests finish, and returns when done.
    pub async fn shutdown(mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        self.key_listener.abort();
        self.live_keys.abort();
    }
}

/// The public listener's gate: `HTTP_*` caps, with `TRUSTED_PROXIES` exempt from the
/// per-client one (a proxy carries many clients' connections).
fn api_gate(ctx: &Ctx) -> Gate {
    let proxies = ctx.cfg.trusted_proxies.clone();
    Gate::new(
        "api",
        ctx.cfg.http.clone(),
        Arc::new(move |ip| proxies.iter().any(|c| c.contains(ip))),
    )
}

/// A tokio listener for a `Listen` setting (an address, or a socket handed over as stdin).
pub fn bind(listen: &Listen) -> Result<tokio::net::TcpListener> {
    listen
        .bind()
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|e| ApiError::Internal(format!("listen on {listen}: {e}")))
}
