//! `GET|POST|DELETE /api/v1/auth/keys`: the merchant's API key, dashboard session only.

use bytes::Bytes;
use chainsub_store::merchants::api_key_status;
use chainsub_views::{IssuedKeyView, KeyStatusView};
use serde_json::{Value, json};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::auth::api_key;
use crate::auth::session::{Session, require_session};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::Result;
use crate::http::input::no_fields;
use crate::http::reply::{Resp, body_bytes, handle, parse_json_object};
use crate::routes::any_of;

/// The keys router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let path = || warp::path!("api" / "v1" / "auth" / "keys");
    let get = path()
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(require_session(ctx.clone()))
        .then(|ctx: Ctx, s: Session| handle(async move { get_status(&ctx, &s).await }));
    let post = path()
        .and(warp::post())
        .and(with_ctx(ctx.clone()))
        .and(require_session(ctx.clone()))
        .and(warp::header::optional::<String>("idempotency-key"))
        .and(warp::header::optional::<String>("content-type"))
        .and(body_bytes())
        .then(
            |ctx: Ctx, s: Session, key: Option<String>, ct: Option<String>, body: Bytes| {
                handle(async move { create(&ctx, &s, key.as_deref(), ct.as_deref(), &body).await })
            },
        );
    let delete = path()
        .and(warp::delete())
        .and(with_ctx(ctx.clone()))
        .and(require_session(ctx))
        .then(|ctx: Ctx, s: Session| handle(async move { revoke(&ctx, &s).await }));
    any_of([get.boxed(), post.boxed(), delete.boxed()])
}

async fn get_status(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    Ok(Resp::json(api_key::status(&**conn, &s.merchant).await?))
}

/// A replayed key response must not carry the plaintext (it is never stored).
fn redact_key(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("key".into(), Value::Null);
        o.insert("replayed".into(), json!(true));
    }
    v
}

async fn create(
    ctx: &Ctx,
    s: &Session,
    idem: Option<&str>,
    ct: Option<&str>,
    body: &[u8],
) -> Result<Resp> {
    no_fields(&parse_json_object(ct, body)?)?;
    crate::idempotency::run(
        ctx,
        &s.merchant,
        idem,
        "POST /api/v1/auth/keys",
        redact_key,
        |_| async {
            let mut conn = ctx.pool.get().await?;
            let (key, rotated) = api_key::create_or_rotate(&mut conn, &s.merchant).await?;
            // This process stops accepting the old key before it answers; the others when
            // the trigger's notification reaches them.
            ctx.keys.forget_merchant(s.merchant.id());
            tracing::info!(merchant = %s.merchant.public_id(), rotated, "api key issued");
            let status = api_key_status(&**conn, &s.merchant).await?;
            Ok(Resp::json_view(
                StatusCode::CREATED,
                &IssuedKeyView {
                    object: "api_key",
                    key: key.expose(),
                    rotated,
                    status: KeyStatusView::from(status.as_ref()),
                },
            ))
        },
    )
    .await
}

async fn revoke(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    let revoked = api_key::revoke(&**conn, &s.merchant).await?;
    ctx.keys.forget_merchant(s.merchant.id());
    let status = api_key_status(&**conn, &s.merchant).await?;
    Ok(Resp::view(&KeyStatusView {
        revoked: Some(revoked),
        ..KeyStatusView::from(status.as_ref())
    }))
}
