//! `GET /api/v1/health`: no auth; 503 while the database is unreachable.

use std::time::Duration;

use serde_json::json;
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::ctx::{Ctx, with_ctx};
use crate::http::error::ApiError;
use crate::http::extract::method_fallback;
use crate::http::reply::{Resp, respond};

/// The health router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let get = warp::get()
        .and(with_ctx(ctx))
        .then(|ctx: Ctx| async move { respond(health(&ctx).await) });
    warp::path!("api" / "v1" / "health")
        .and(get.or(method_fallback("GET")).unify())
        .boxed()
}

async fn health(ctx: &Ctx) -> Result<Resp, ApiError> {
    let base = json!({
        "object": "health",
        "version": env!("CARGO_PKG_VERSION"),
        "docs": format!("{}/api/v1/openapi.json", ctx.cfg.base()),
    });
    // Bounded: a hung database must not hang the health check.
    let probe = tokio::time::timeout(Duration::from_secs(3), async {
        let conn = ctx.pool.get().await?;
        let row = conn
            .query_opt(
                "SELECT block_number, head_number FROM indexer_cursor WHERE chain_id = $1",
                &[&(ctx.cfg.chain_id as i64)],
            )
            .await?;
        Ok::<_, ApiError>(row.map(|r| (r.get::<_, i64>(0), r.get::<_, Option<i64>>(1))))
    })
    .await;
    let mut body = base;
    match probe {
        Ok(Ok(cursor)) => {
            let (indexed, head) = match cursor {
                Some((i, h)) => (Some(i), h),
                None => (None, None),
            };
            let lag = match (indexed, head) {
                (Some(i), Some(h)) => Some((h - i).max(0)),
                _ => None,
            };
            body["status"] = json!("ok");
            body["database"] = json!("ok");
            body["chain"] = json!({
                "chainId": ctx.cfg.chain_id,
                "contract": ctx.cfg.contract_address.to_checksum(None),
                "indexedBlock": indexed,
                "headBlock": head,
                "lagBlocks": lag,
            });
            Ok(Resp::json(body))
        }
        Ok(Err(e)) => Ok(unavailable(body, ctx, &e.to_string())),
        Err(_) => Ok(unavailable(body, ctx, "database probe timed out")),
    }
}

fn unavailable(mut body: serde_json::Value, ctx: &Ctx, why: &str) -> Resp {
    tracing::warn!(error = %why, "health: database unreachable");
    body["status"] = json!("unavailable");
    body["database"] = json!("unreachable");
    body["chain"] = json!({
        "chainId": ctx.cfg.chain_id,
        "contract": ctx.cfg.contract_address.to_checksum(None),
        "indexedBlock": null, "headBlock": null, "lagBlocks": null,
    });
    Resp::with_status(StatusCode::SERVICE_UNAVAILABLE, body)
}
