//! Dashboard webhook settings (session + CSRF only; spec rule 5: the webhook URL is set in
//! the dashboard, never with the API key). JSON endpoints the `/dashboard/developers` page
//! calls:
//!
//! | Method | Path | |
//! |---|---|---|
//! | GET | /dashboard/api/webhook | endpoint: url, enabled, disabledReason |
//! | PUT | /dashboard/api/webhook/url | `{"url": "https://…" \| null}`; validated + SSRF-checked |
//! | GET | /dashboard/api/webhook/secret | reveal the live signing secret(s) |
//! | POST | /dashboard/api/webhook/secret/rotate | new secret; the old one signs during the overlap (an older one stops) |
//! | POST | /dashboard/api/webhook/secret/revoke-previous | the previous secret stops signing now |
//! | POST | /dashboard/api/webhook/enable | re-enable after a 410 |
//! | POST | /dashboard/api/webhook/test | queue a `webhook.test` event |
//! | GET | /dashboard/api/webhook/deliveries | recent deliveries with their attempts |
//! | POST | /dashboard/api/webhook/deliveries/{id}/retry | attempt again now |

use bytes::Bytes;
use chainsub_core::OutboxStatus;
use chainsub_views::{
    PreviousSecretView, QueuedDeliveryView, RotatedSecretView, WebhookSecretsView,
};
use serde_json::{Value, json};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::auth::session::{Session, require_session};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::{ApiError, Result};
use crate::http::extract::{check_fields, check_params, method_fallback, param, query_pairs};
use crate::http::reply::{Resp, body_bytes, handle, parse_json_object};
use crate::webhook_settings::{self as settings, WebhookUrl};

/// The webhook settings router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let base = warp::path("dashboard")
        .and(warp::path("api"))
        .and(warp::path("webhook"));
    let session = require_session(ctx.clone());

    let get_endpoint = warp::path::end()
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(session.clone())
        .then(|ctx: Ctx, s: Session| handle(async move { endpoint(&ctx, &s).await }));
    let endpoint_path = get_endpoint
        .or(warp::path::end().and(method_fallback("GET")))
        .unify();

    let put_url = warp::path!("url")
        .and(warp::put())
        .and(with_ctx(ctx.clone()))
        .and(session.clone())
        .and(warp::header::optional::<String>("content-type"))
        .and(body_bytes())
        .then(|ctx: Ctx, s: Session, ct: Option<String>, body: Bytes| {
            handle(async move { set_url(&ctx, &s, ct.as_deref(), &body).await })
        });
    let url_path = put_url
        .or(warp::path!("url").and(method_fallback("PUT")))
        .unify();

    let reveal = warp::path!("secret")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(session.clone())
        .then(|ctx: Ctx, s: Session| handle(async move { reveal(&ctx, &s).await }));
    let secret_path = reveal
        .or(warp::path!("secret").and(method_fallback("GET")))
        .unify();

    let rotate = post(&ctx, warp::path!("secret" / "rotate").boxed(), |ctx, s| {
        Box::pin(async move { rotate(&ctx, &s).await })
    });
    let revoke = post(
        &ctx,
        warp::path!("secret" / "revoke-previous").boxed(),
        |ctx, s| Box::pin(async move { revoke_previous(&ctx, &s).await }),
    );
    let enable = post(&ctx, warp::path!("enable").boxed(), |ctx, s| {
        Box::pin(async move { enable(&ctx, &s).await })
    });
    let test = post(&ctx, warp::path!("test").boxed(), |ctx, s| {
        Box::pin(async move { send_test(&ctx, &s).await })
    });

    let list = warp::path!("deliveries")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(session.clone())
        .and(query_pairs())
        .then(|ctx: Ctx, s: Session, q: Vec<(String, String)>| {
            handle(async move { deliveries(&ctx, &s, &q).await })
        });
    let list_path = list
        .or(warp::path!("deliveries").and(method_fallback("GET")))
        .unify();

    let retry = warp::path!("deliveries" / String / "retry")
        .and(warp::post())
        .and(with_ctx(ctx.clone()))
        .and(session)
        .then(|id: String, ctx: Ctx, s: Session| handle(async move { retry(&ctx, &s, &id).await }));
    let retry_path = retry
        .or(warp::path!("deliveries" / String / "retry")
            .and(method_fallback("POST"))
            .map(|_: String, r: Resp| r))
        .unify();

    base.and(
        endpoint_path
            .or(url_path)
            .unify()
            .or(secret_path)
            .unify()
            .or(rotate)
            .unify()
            .or(revoke)
            .unify()
            .or(enable)
            .unify()
            .or(test)
            .unify()
            .or(list_path)
            .unify()
            .or(retry_path)
            .unify(),
    )
    .boxed()
}

type Handler =
    fn(Ctx, Session) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Resp>> + Send>>;

/// A bodiless POST route with its 405 fallback.
fn post(ctx: &Ctx, path: BoxedFilter<()>, handler: Handler) -> BoxedFilter<(Resp,)> {
    let call = path
        .clone()
        .and(warp::post())
        .and(with_ctx(ctx.clone()))
        .and(require_session(ctx.clone()))
        .then(move |ctx: Ctx, s: Session| handle(async move { handler(ctx, s).await }));
    call.or(path.and(method_fallback("POST"))).unify().boxed()
}

async fn endpoint(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    Ok(Resp::json(settings::endpoint(&conn, &s.merchant).await?))
}

async fn set_url(ctx: &Ctx, s: &Session, ct: Option<&str>, body: &[u8]) -> Result<Resp> {
    let obj = parse_json_object(ct, body)?;
    let cfg = &ctx.cfg.webhooks;
    let url = match obj.get("url") {
        Some(Value::String(u)) => {
            let url = WebhookUrl::parse(u, cfg.allow_http)?;
            // Refuse now what delivery would refuse anyway (delivery checks again after DNS).
            cfg.address_policy()
                .resolve(url.url())
                .await
                .map_err(|b| ApiError::invalid("url", format!("webhook URL refused: {b}")))?;
            Some(url)
        }
        Some(Value::Null) => None,
        Some(_) => return Err(ApiError::invalid("url", "`url` must be a string or null")),
        None => return Err(ApiError::missing("url")),
    };
    check_fields(&obj, &["url"])?;
    let mut conn = ctx.pool.get().await?;
    settings::set_url(
        &mut conn,
        settings::keys(&ctx.cfg)?,
        &s.merchant,
        url.as_ref(),
    )
    .await?;
    tracing::info!(merchant = %s.merchant.public_id(), set = url.is_some(), "webhook URL changed");
    Ok(Resp::json(settings::endpoint(&conn, &s.merchant).await?))
}

async fn reveal(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let mut conn = ctx.pool.get().await?;
    let live = settings::reveal_secrets(&mut conn, settings::keys(&ctx.cfg)?, &s.merchant).await?;
    let current = live.iter().find(|l| l.expires_at.is_none());
    let previous = live
        .iter()
        .filter(|l| l.expires_at.is_some())
        .map(|l| PreviousSecretView {
            secret: l.secret.expose(),
            expires_at: l.expires_at,
        })
        .collect();
    Ok(Resp::view(&WebhookSecretsView {
        object: "webhook_secret",
        secret: current.map(|c| c.secret.expose()),
        created_at: current.map(|c| c.created_at),
        previous,
    }))
}

async fn rotate(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let mut conn = ctx.pool.get().await?;
    let overlap = ctx.cfg.webhooks.secret_overlap;
    let secret =
        settings::rotate_secret(&mut conn, settings::keys(&ctx.cfg)?, &s.merchant, overlap).await?;
    tracing::info!(merchant = %s.merchant.public_id(), "webhook secret rotated");
    let until = chrono::Utc::now() + chrono::Duration::from_std(overlap).unwrap_or_default();
    Ok(Resp::view(&RotatedSecretView {
        object: "webhook_secret",
        secret: secret.expose(),
        previous_expires_at: until,
    }))
}

/// Ends the previous secret's overlap now: deliveries are signed with the current one only.
async fn revoke_previous(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    let revoked = settings::revoke_previous_secret(&conn, &s.merchant).await?;
    tracing::info!(merchant = %s.merchant.public_id(), revoked, "previous webhook secret revoked");
    reveal(ctx, s).await
}

async fn enable(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    settings::enable(&conn, &s.merchant).await?;
    Ok(Resp::json(settings::endpoint(&conn, &s.merchant).await?))
}

async fn send_test(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    let id = format!("evt_test_{}", crate::domain::random_hex(16));
    let payload = json!({
        "id": id,
        "object": "event",
        "type": "webhook.test",
        "createdAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "data": {"message": "Test event from the Chainsub dashboard"},
        "chain": null,
    });
    let delivery = settings::enqueue_test(&conn, &s.merchant, &id, &payload).await?;
    Ok(Resp::json_view(
        StatusCode::ACCEPTED,
        &QueuedDeliveryView {
            id: &ctx.delivery_ids.public(delivery),
            object: "webhook_delivery",
            event_id: Some(&id),
            status: OutboxStatus::Pending,
        },
    ))
}

async fn deliveries(ctx: &Ctx, s: &Session, q: &[(String, String)]) -> Result<Resp> {
    check_params(q, &["limit", "startingAfter"])?;
    let limit = match param(q, "limit") {
        None => 20,
        Some(l) => l
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| {
                ApiError::invalid("limit", "`limit` must be an integer from 1 to 100")
            })?,
    };
    let before = param(q, "startingAfter")
        .map(|id| {
            ctx.delivery_ids
                .parse(id)
                .ok_or_else(|| ApiError::invalid("startingAfter", "not a delivery id"))
        })
        .transpose()?;
    let conn = ctx.pool.get().await?;
    let (rows, attempts, has_more) =
        chainsub_store::webhooks::deliveries(&**conn, &s.merchant, limit, before).await?;
    Ok(Resp::view(&settings::deliveries_view(
        &ctx.delivery_ids,
        &rows,
        &attempts,
        has_more,
    )))
}

async fn retry(ctx: &Ctx, s: &Session, id: &str) -> Result<Resp> {
    let outbox_id = ctx
        .delivery_ids
        .parse(id)
        .ok_or_else(|| ApiError::not_found("webhook delivery", Some("id")))?;
    let conn = ctx.pool.get().await?;
    settings::retry(&conn, &s.merchant, outbox_id).await?;
    Ok(Resp::json_view(
        StatusCode::ACCEPTED,
        &QueuedDeliveryView {
            id,
            object: "webhook_delivery",
            event_id: None,
            status: OutboxStatus::Pending,
        },
    ))
}
