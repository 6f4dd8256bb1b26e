//! Dashboard sign-in (SIWE): `POST /api/v1/auth/nonce`, `POST|GET|DELETE /api/v1/auth/session`.
//!
//! These endpoints ignore `Idempotency-Key`: a nonce and a session are single-use secrets
//! by design, and replaying a stored `Set-Cookie` would mean storing a session secret.

use crate::http::client_ip::{ClientAddr, client_addr};
use crate::http::codes::Code;

use bytes::Bytes;
use chainsub_views::{DeletedView, NonceView, SessionView};
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::session::{self, Session, require_session};
use crate::auth::siwe::{SiweMessage, verify_signature};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::{ApiError, Result};
use crate::http::reply::{Resp, body_bytes, handle, parse_json_object};
use crate::routes::any_of;

/// The sign-in router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let nonce = warp::path!("api" / "v1" / "auth" / "nonce")
        .and(warp::post())
        .and(with_ctx(ctx.clone()))
        .and(client_addr())
        .then(|ctx: Ctx, client: ClientAddr| handle(async move { new_nonce(&ctx, &client).await }));
    let session = || warp::path!("api" / "v1" / "auth" / "session");
    let sign_in = session()
        .and(warp::post())
        .and(with_ctx(ctx.clone()))
        .and(client_addr())
        .and(warp::header::optional::<String>("content-type"))
        .and(body_bytes())
        .then(
            |ctx: Ctx, client: ClientAddr, ct: Option<String>, body: Bytes| {
                handle(async move { sign_in(&ctx, &client, ct.as_deref(), &body).await })
            },
        );
    let current = session()
        .and(warp::get())
        .and(require_session(ctx.clone()))
        .map(|s: Session| Resp::view(&session_view(&s)));
    let logout = session()
        .and(warp::delete())
        .and(with_ctx(ctx.clone()))
        .and(require_session(ctx))
        .then(|ctx: Ctx, s: Session| handle(async move { logout(&ctx, &s).await }));
    any_of([
        nonce.boxed(),
        sign_in.boxed(),
        current.boxed(),
        logout.boxed(),
    ])
}

fn session_view(s: &Session) -> SessionView<'_> {
    SessionView::new(&s.merchant, &s.csrf_token, s.expires_at)
}

async fn new_nonce(ctx: &Ctx, client: &ClientAddr) -> Result<Resp> {
    ctx.limits.check_client(client)?;
    let nonce = crate::auth::random_token(16);
    let conn = ctx.pool.get().await?;
    let expires =
        chainsub_store::siwe::issue_nonce(&**conn, &nonce, ctx.cfg.siwe_nonce_ttl_secs).await?;
    let (domain, uri) = (ctx.cfg.siwe_domain(), ctx.cfg.base());
    Ok(Resp::json_view(
        warp::http::StatusCode::CREATED,
        &NonceView {
            object: "siwe_nonce",
            nonce: &nonce,
            expires_at: expires,
            domain: &domain,
            uri: &uri,
            chain_id: ctx.cfg.chain_id,
            version: "1",
            statement: "Sign in to the Chainsub dashboard",
        },
    ))
}

async fn sign_in(ctx: &Ctx, client: &ClientAddr, ct: Option<&str>, body: &[u8]) -> Result<Resp> {
    ctx.limits.check_client(client)?;
    let body = parse_json_object(ct, body)?;
    let text = body
        .get("message")
        .ok_or_else(|| ApiError::missing("message"))?
        .as_str()
        .ok_or_else(|| ApiError::invalid("message", "`message` must be a string"))?;
    let signature = body
        .get("signature")
        .ok_or_else(|| ApiError::missing("signature"))?
        .as_str()
        .ok_or_else(|| ApiError::invalid("signature", "`signature` must be a string"))?;
    let msg = SiweMessage::parse(text)?;
    msg.check(&ctx.cfg, chrono::Utc::now())?;
    verify_signature(text, signature, msg.address)?;
    let mut conn = ctx.pool.get().await?;
    let tx = conn.transaction().await?;
    if !chainsub_store::siwe::consume_nonce(&*tx, &msg.nonce).await? {
        return Err(ApiError::Unauthorized {
            code: Code::SiweNonceInvalid,
            message: "the nonce is unknown, expired or already used; request a new one".into(),
        });
    }
    let merchant = crate::merchants::find_or_create(&*tx, msg.address).await?;
    let (cookie, s) = session::create(&*tx, &merchant, ctx.cfg.session_ttl_secs).await?;
    tx.commit().await?;
    tracing::info!(merchant = %merchant.public_id(), "dashboard sign-in");
    Ok(Resp::view(&session_view(&s)).header(
        "set-cookie",
        &session::set_cookie(&ctx.cfg, &cookie, ctx.cfg.session_ttl_secs),
    ))
}

async fn logout(ctx: &Ctx, s: &Session) -> Result<Resp> {
    let conn = ctx.pool.get().await?;
    session::revoke(&**conn, s).await?;
    Ok(Resp::view(&DeletedView {
        object: "session",
        deleted: true,
    })
    .header("set-cookie", &session::clear_cookie(&ctx.cfg)))
}
