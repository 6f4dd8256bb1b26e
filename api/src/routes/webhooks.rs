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
use serde::Deserialize;
use serde_json::{Value, json};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::auth::session::{Session, require_session};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::{ApiError, Result};
use crate::http::input::{self, query_of};
use crate::http::reply::{Handled, Resp, body_bytes, handle, parse_json_object};
use crate::pagination::Limit;
use crate::routes::any_of;
use crate::webhook_settings::{self as settings, WebhookUrl};

/// The webhook settings router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let session = || with_ctx(ctx.clone()).and(require_session(ctx.clone()));
    let base = || warp::path!("dashboard" / "api" / "webhook" / ..);
    let get_endpoint = base()
        .and(warp::path::end())
        .and(warp::get())
        .and(session())
        .then(|ctx: Ctx, s: Session| handle(async move { endpoint(&ctx, &s).await }));
    let put_url = base()
        .and(warp::path!("url"))
        .and(warp::put())
        .and(session())
        .and(warp::header::optional::<String>("content-type"))
        .and(body_bytes())
        .then(|ctx: Ctx, s: Session, ct: Option<String>, body: Bytes| {
            handle(async move { set_url(&ctx, &s, ct.as_deref(), &body).await })
        });
    let reveal = base()
        .and(warp::path!("secret"))
        .and(warp::get())
        .and(session())
        .then(|ctx: Ctx, s: Session| handle(async move { reveal(&ctx, &s).await }));
    let deliveries = base()
        .and(warp::path!("deliveries"))
        .and(warp::get())
        .and(session())
        .and(query_of())
        .then(|ctx: Ctx, s: Session, q: ListDeliveries| {
            handle(async move { deliveries(&ctx, &s, q).await })
        });
    let retry = base()
        .and(warp::path!("deliveries" / String / "retry"))
        .and(warp::post())
        .and(session())
        .then(|id: String, ctx: Ctx, s: Session| handle(async move { retry(&ctx, &s, &id).await }));
    let post = |path: BoxedFilter<()>, handler: Handler| {
        base()
            .and(path)
            .and(warp::post())
            .and(session())
            .then(move |ctx: Ctx, s: Session| handler(ctx, s))
            .boxed()
    };
    any_of([
        get_endpoint.boxed(),
        put_url.boxed(),
        reveal.boxed(),
        post(warp::path!("secret" / "rotate").boxed(), |ctx, s| {
            handle(async move { rotate(&ctx, &s).await })
        }),
        post(
            warp::path!("secret" / "revoke-previous").boxed(),
            |ctx, s| handle(async move { revoke_previous(&ctx, &s).await }),
        ),
        post(warp::path!("enable").boxed(), |ctx, s| {
            handle(async move { enable(&ctx, &s).await })
        }),
        post(warp::path!("test").boxed(), |ctx, s| {
            handle(async move { send_test(&ctx, &s).await })
        }),
        deliveries.boxed(),
        retry.boxed(),
    ])
}

/// A bodiless POST's handler.
type Handler = fn(Ctx, Session) -> Handled;

async fn endpoint(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    Ok(Resp::json(settings::endpoint(&conn, &s.merchant).await?))
}

/// The body of `PUT /dashboard/api/webhook/url`: a URL, or `null` to stop deliveries.
#[derive(Debug, Deserialize)]
struct SetUrl {
    url: Value,
}

async fn set_url(ctx: &Ctx, s: &Session, ct: Option<&str>, body: &[u8]) -> Result<Resp> {
    let SetUrl { url } = input::body(&parse_json_object(ct, body)?)?;
    let cfg = &ctx.cfg.webhooks;
    let url = match url {
        Value::String(u) => {
            let url = WebhookUrl::parse(&u, cfg.allow_http)?;
            // Refuse now what delivery would refuse anyway (delivery checks again after DNS).
            cfg.address_policy()
                .resolve(url.url())
                .await
                .map_err(|b| ApiError::invalid("url", format!("webhook URL refused: {b}")))?;
            Some(url)
        }
        Value::Null => None,
        _ => return Err(ApiError::invalid("url", "`url` must be a string or null")),
    };
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

/// The query of the deliveries list: newest first, `startingAfter` a delivery id.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListDeliveries {
    #[serde(default, deserialize_with = "input::param")]
    limit: Option<Limit>,
    #[serde(default)]
    starting_after: Option<String>,
}

async fn deliveries(ctx: &Ctx, s: &Session, q: ListDeliveries) -> Result<Resp> {
    let limit = q.limit.map_or(20, |l| l.0);
    let before = q
        .starting_after
        .map(|id| {
            ctx.delivery_ids
                .parse(&id)
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
