//! `GET /api/v1/health`: no auth; 503 while the database is unreachable.

use std::time::Duration;

use chainsub_views::{HealthChainView, HealthView};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::ctx::{Ctx, with_ctx};
use crate::http::error::ApiError;
use crate::http::extract::method_fallback;
use crate::http::reply::{Resp, handle};

/// The health router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let get = warp::get()
        .and(with_ctx(ctx))
        .then(|ctx: Ctx| handle(async move { health(&ctx).await }));
    warp::path!("api" / "v1" / "health")
        .and(get.or(method_fallback("GET")).unify())
        .boxed()
}

async fn health(ctx: &Ctx) -> Result<Resp, ApiError> {
    // Bounded: a hung database must not hang the health check.
    let probe = tokio::time::timeout(Duration::from_secs(3), async {
        let conn = ctx.pool.get().await?;
        Ok::<_, ApiError>(chainsub_store::chain::cursor(&conn, ctx.cfg.chain_id as i64).await?)
    })
    .await;
    let why = match probe {
        Ok(Ok(cursor)) => {
            let indexed = cursor.map(|c| c.indexed_block);
            let head = cursor.and_then(|c| c.head_block);
            let lag = indexed.zip(head).map(|(i, h)| (h - i).max(0));
            return Ok(Resp::view(&view(ctx, "ok", "ok", indexed, head, lag)));
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "database probe timed out".to_string(),
    };
    tracing::warn!(error = %why, "health: database unreachable");
    Ok(Resp::json_view(
        StatusCode::SERVICE_UNAVAILABLE,
        &view(ctx, "unavailable", "unreachable", None, None, None),
    ))
}

fn view(
    ctx: &Ctx,
    status: &'static str,
    database: &'static str,
    indexed_block: Option<i64>,
    head_block: Option<i64>,
    lag_blocks: Option<i64>,
) -> HealthView {
    HealthView {
        object: "health",
        version: env!("CARGO_PKG_VERSION"),
        docs: format!("{}/api/v1/openapi.json", ctx.cfg.base()),
        status,
        database,
        relayer: ctx.relayer.as_ref().map_or("none", |r| r.funding_status()),
        chain: HealthChainView {
            chain_id: ctx.cfg.chain_id,
            contract: ctx.cfg.contract_address,
            indexed_block,
            head_block,
            lag_blocks,
        },
    }
}
