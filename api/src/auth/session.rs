//! Dashboard sessions: a random id in an HttpOnly SameSite=Strict cookie (`__Host-` and
//! `Secure` over TLS); the database holds only its SHA3-256 hash. State-changing calls must
//! echo the session's CSRF token in `X-CSRF-Token`.

use chrono::{DateTime, Utc};
use warp::Filter;
use warp::http::Method;

use super::{ct_eq, random_token, sha3};
use crate::config::Config;
use crate::ctx::{Ctx, with_ctx};
use crate::http::client_ip::{ClientAddr, client_addr};
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::merchants::Merchant;

/// The header that carries the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// A signed-in dashboard session.
#[derive(Clone)]
pub struct Session {
    pub id: i64,
    pub merchant: Merchant,
    pub csrf_token: String,
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("merchant", &self.merchant.public_id())
            .finish_non_exhaustive()
    }
}

/// The cookie name: `__Host-` prefixed when served over https.
pub fn cookie_name(cfg: &Config) -> &'static str {
    if cfg.is_https() {
        "__Host-chainsub_session"
    } else {
        "chainsub_session"
    }
}

/// `Set-Cookie` for a new session.
pub fn set_cookie(cfg: &Config, value: &str, max_age_secs: u64) -> String {
    let secure = if cfg.is_https() { "; Secure" } else { "" };
    format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}",
        cookie_name(cfg)
    )
}

/// `Set-Cookie` that deletes the session cookie.
pub fn clear_cookie(cfg: &Config) -> String {
    set_cookie(cfg, "", 0)
}

/// Creates a session for `merchant`; returns (cookie value, session).
pub async fn create(
    client: &impl tokio_postgres::GenericClient,
    merchant: &Merchant,
    ttl_secs: u64,
) -> Result<(String, Session)> {
    let cookie = random_token(32);
    let csrf = random_token(32);
    let hash = sha3(cookie.as_bytes());
    let (id, expires_at) =
        chainsub_store::merchants::create_session(client, merchant, &hash, &csrf, ttl_secs).await?;
    Ok((
        cookie,
        Session {
            id,
            merchant: merchant.clone(),
            csrf_token: csrf,
            expires_at,
        },
    ))
}

/// Revokes a session (logout).
pub async fn revoke(client: &impl tokio_postgres::GenericClient, s: &Session) -> Result<()> {
    Ok(chainsub_store::merchants::revoke_session(client, &s.merchant, s.id).await?)
}

fn cookie_value(header: Option<&str>, name: &str) -> Option<String> {
    header?
        .split(';')
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// The signed-in merchant's session, or a 401. For any method other than GET/HEAD the
/// `X-CSRF-Token` header must equal the session's token (403 otherwise). Requests count
/// against the per-IP rate limit.
pub fn require_session(
    ctx: Ctx,
) -> impl Filter<Extract = (Session,), Error = warp::Rejection> + Clone {
    with_ctx(ctx)
        .and(warp::method())
        .and(warp::header::optional::<String>("cookie"))
        .and(warp::header::optional::<String>(CSRF_HEADER))
        .and(client_addr())
        .and_then(
            |ctx: Ctx,
             method: Method,
             cookie: Option<String>,
             csrf: Option<String>,
             client: ClientAddr| async move {
                session_of(&ctx, &method, cookie.as_deref(), csrf.as_deref(), &client)
                    .await
                    .map_err(warp::reject::custom)
            },
        )
}

/// The logic of [`require_session`], callable from handlers.
pub async fn session_of(
    ctx: &Ctx,
    method: &Method,
    cookie_header: Option<&str>,
    csrf: Option<&str>,
    client: &ClientAddr,
) -> Result<Session> {
    ctx.limits.check_client(client)?;
    let unauthorized = || ApiError::Unauthorized {
        code: Code::SessionRequired,
        message: "sign in to the dashboard (Sign-In with Ethereum) first".into(),
    };
    let value = cookie_value(cookie_header, cookie_name(&ctx.cfg)).ok_or_else(unauthorized)?;
    let conn = ctx.pool.get().await?;
    let (merchant, found) =
        chainsub_store::merchants::by_session_hash(&conn, sha3(value.as_bytes()).as_slice())
            .await?
            .ok_or_else(unauthorized)?;
    let session = Session {
        id: found.session_id,
        merchant,
        csrf_token: found.csrf_token,
        expires_at: found.expires_at,
    };
    let safe = *method == Method::GET || *method == Method::HEAD;
    if !safe && !csrf.is_some_and(|t| ct_eq(t.as_bytes(), session.csrf_token.as_bytes())) {
        return Err(ApiError::Forbidden {
            code: Code::CsrfTokenInvalid,
            message: format!(
                "state-changing dashboard calls need the session's `{CSRF_HEADER}` header"
            ),
        });
    }
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_value_finds_the_named_cookie_only() {
        let h = Some("a=1; chainsub_session=abc; b=2");
        assert_eq!(cookie_value(h, "chainsub_session").as_deref(), Some("abc"));
        assert_eq!(cookie_value(h, "__Host-chainsub_session"), None);
        assert_eq!(cookie_value(None, "a"), None);
    }
}
