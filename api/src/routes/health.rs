//! `GET /api/v1/health`: no auth, a per-client limit of its own (`RATE_LIMIT_HEALTH_*`, so
//! monitors polling it never spend a client's API or sign-in budget, and a flood of it
//! cannot reach the database); `ok`, or 503 `degraded` while the database is unreachable,
//! and the chain index's position. What only the operator should see — the database and the
//! relayer's funds — is on the metrics listener's `GET /health` ([`operator`]).

use std::time::Duration;

use chainsub_views::{HealthChainView, HealthView, OperatorHealthView};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::ctx::{Ctx, with_ctx};
use crate::http::client_ip::{ClientAddr, client_addr};
use crate::http::error::ApiError;
use crate::http::reply::{Resp, handle};

/// The health router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    warp::path!("api" / "v1" / "health")
        .and(warp::get())
        .and(with_ctx(ctx))
        .and(client_addr())
        .then(|ctx: Ctx, client: ClientAddr| handle(async move { health(&ctx, &client).await }))
        .boxed()
}

async fn health(ctx: &Ctx, client: &ClientAddr) -> Result<Resp, ApiError> {
    let rate = ctx.limits.check_health(client)?;
    let probe = probe(ctx).await;
    let status = if probe.database == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok(Resp::json_view(status, &probe.public).with_rate(&rate))
}

/// `GET /health` on the metrics listener: the public health, the database and the
/// relayer's funds; 503 while the database is unreachable.
pub async fn operator(ctx: &Ctx) -> Resp {
    let probe = probe(ctx).await;
    let status = if probe.database == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Resp::json_view(status, &probe)
}

async fn probe(ctx: &Ctx) -> OperatorHealthView {
    // Bounded: a hung database must not hang the health check.
    let probe = tokio::time::timeout(Duration::from_secs(3), async {
        let conn = ctx.pool.get().await?;
        Ok::<_, ApiError>(chainsub_store::chain::cursor(&conn, ctx.cfg.chain_id).await?)
    })
    .await;
    let relayer = ctx.relayer.as_ref().map_or("none", |r| r.funding_status());
    let why = match probe {
        Ok(Ok(cursor)) => {
            let indexed = cursor.map(|c| c.indexed_block);
            let head = cursor.and_then(|c| c.head_block);
            let lag = indexed.zip(head).map(|(i, h)| (h - i).max(0));
            return OperatorHealthView {
                public: view(ctx, "ok", indexed, head, lag),
                database: "ok",
                relayer,
            };
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "database probe timed out".to_string(),
    };
    tracing::warn!(error = %why, "health: database unreachable");
    OperatorHealthView {
        public: view(ctx, "degraded", None, None, None),
        database: "unreachable",
        relayer,
    }
}

fn view(
    ctx: &Ctx,
    status: &'static str,
    indexed_block: Option<i64>,
    head_block: Option<i64>,
    lag_blocks: Option<i64>,
) -> HealthView {
    HealthView {
        object: "health",
        version: env!("CARGO_PKG_VERSION"),
        docs: format!("{}/api/v1/openapi.json", ctx.cfg.base()),
        status,
        chain: HealthChainView {
            chain_id: ctx.cfg.chain_id,
            contract: ctx.cfg.contract_address,
            indexed_block,
            head_block,
            lag_blocks,
        },
    }
}
