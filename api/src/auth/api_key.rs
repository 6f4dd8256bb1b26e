//! API keys: `sk_live_` + 32 random bytes (hex). Only the SHA3-256 hash is stored; the
//! plaintext exists in memory only while it is returned once.

use chainsub_views::KeyStatusView;
use serde_json::Value;
use tokio_postgres::GenericClient;

use super::{ct_eq, sha3};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::{ApiError, Result};
use crate::http::extract::{Caller, caller};
use crate::http::ratelimit::Allowed;
use crate::http::reply::{Handled, Resp};
use crate::merchants::{self, Merchant};

/// The public prefix of every live key.
pub const PREFIX: &str = "sk_live_";

/// A plaintext key. `Debug` is redacted so a key can never reach a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKey({PREFIX}…{})", self.last4())
    }
}

impl ApiKey {
    /// A fresh random key.
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::random();
        Self(format!("{PREFIX}{}", hex::encode(bytes)))
    }

    /// Parses a presented key (prefix + 64 lowercase hex); anything else is not a key.
    pub fn parse(s: &str) -> Option<Self> {
        let rest = s.strip_prefix(PREFIX)?;
        (rest.len() == 64
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(s.to_string()))
    }

    /// SHA3-256 of the key text.
    pub fn hash(&self) -> [u8; 32] {
        sha3(self.0.as_bytes())
    }

    /// The last four characters (shown in key status).
    pub fn last4(&self) -> &str {
        &self.0[self.0.len() - 4..]
    }

    /// The plaintext, for the one response that returns it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// An API-key-authenticated request.
#[derive(Debug, Clone)]
pub struct Authed {
    pub merchant: Merchant,
    pub rate: Allowed,
}

/// What a handler of the merchant API works with: the server's context, the merchant the
/// key belongs to (every query is scoped by it), and the request's `Idempotency-Key`.
#[derive(Clone)]
pub struct Scope {
    pub ctx: Ctx,
    pub merchant: Merchant,
    pub idempotency_key: Option<String>,
}

impl Scope {
    /// Runs `f` for this request once per `Idempotency-Key` ([`crate::idempotency::run`]);
    /// `request` identifies it (method, path and body): the same key with another request
    /// is refused.
    pub async fn once<F, Fut>(&self, request: &str, f: F) -> Result<Resp>
    where
        F: FnOnce(crate::idempotency::Run) -> Fut,
        Fut: Future<Output = Result<Resp>>,
    {
        let key = self.idempotency_key.as_deref();
        let merchant = &self.merchant;
        crate::idempotency::run(&self.ctx, merchant, key, request, std::convert::identity, f).await
    }
}

/// A request whose API key was accepted and counted: its [`Scope`] and the key's rate-limit
/// state, which [`Admitted::serve`] adds to the answer.
pub struct Admitted {
    scope: Scope,
    rate: Allowed,
}

impl Admitted {
    /// Runs `handler` with the request's scope and `input`: an error becomes its error
    /// response, an answer gets the key's `RateLimit` headers.
    pub fn serve<I, F, Fut>(self, input: I, handler: F) -> Handled
    where
        F: FnOnce(Scope, I) -> Fut,
        Fut: Future<Output = Result<Resp>> + Send + 'static,
    {
        let Self { scope, rate } = self;
        let answer = handler(scope, input);
        Box::pin(async move {
            match answer.await {
                Ok(resp) => resp.with_rate(&rate),
                Err(e) => e.into_resp(),
            }
        })
    }
}

/// The filter every API-key route starts with (after its path and method): authenticates
/// the key and counts the request against its limit, or rejects with the 401/429.
pub fn authed(ctx: &Ctx) -> warp::filters::BoxedFilter<(Admitted,)> {
    use warp::Filter;
    with_ctx(ctx.clone())
        .and(caller())
        .and_then(|ctx: Ctx, c: Caller| async move {
            let Authed { merchant, rate } =
                authenticate(&ctx, &c).await.map_err(warp::reject::custom)?;
            let scope = Scope {
                ctx,
                merchant,
                idempotency_key: c.idempotency_key,
            };
            Ok::<_, warp::Rejection>(Admitted { scope, rate })
        })
        .boxed()
}

/// [`authed`] for a route that takes a JSON object body: the body is read first (a body over
/// the limit is refused before the key is looked at, as for every route), the key checked,
/// then the body parsed (415 when it is not JSON, 400 when it is not an object).
pub fn authed_json(
    ctx: &Ctx,
) -> warp::filters::BoxedFilter<(Admitted, serde_json::Map<String, Value>)> {
    use warp::Filter;
    crate::http::reply::body_bytes()
        .and(authed(ctx))
        .and(warp::header::optional::<String>("content-type"))
        .and_then(
            |body: bytes::Bytes, a: Admitted, ct: Option<String>| async move {
                let object = crate::http::reply::parse_json_object(ct.as_deref(), &body)
                    .map_err(warp::reject::custom)?;
                Ok::<_, warp::Rejection>((a, object))
            },
        )
        .untuple_one()
        .boxed()
}

/// Authenticates `Authorization: Bearer sk_live_…` and counts the request against the key's
/// rate limit. Failed attempts count against the caller's IP instead, so guessing is limited.
pub async fn authenticate(ctx: &Ctx, caller: &Caller) -> Result<Authed> {
    let presented = caller
        .authorization
        .as_deref()
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .and_then(ApiKey::parse);
    let Some(key) = presented else {
        ctx.limits.check_client(&caller.client)?;
        return Err(ApiError::bad_key());
    };
    let hash = key.hash();
    if let Some(hit) = ctx.keys.get(&hash) {
        let (merchant, key_id) = hit.found;
        let rate = ctx
            .limits
            .check_key(&ctx.pool, merchant.public_id().as_str())
            .await?;
        if hit.touch {
            let conn = ctx.pool.get().await?;
            chainsub_store::merchants::touch_api_key(&**conn, &merchant, key_id).await?;
        }
        return Ok(Authed { merchant, rate });
    }
    // A caller already refused for failed attempts gets no database lookup until its wait
    // has passed: a flood of well-formed guesses must not cost a round trip each. A live
    // key is looked up all the same: guesses from its caller's address never lock it out.
    if !ctx.live_keys.contains(&hash) {
        ctx.limits.refused_key_guesser(&caller.client)?;
    }
    let before = ctx.keys.generation();
    let conn = ctx.pool.get().await?;
    let looked_up = chainsub_store::merchants::by_api_key_hash(&conn, &hash).await?;
    let result = if looked_up.is_some() {
        "found"
    } else {
        "unknown"
    };
    metrics::counter!("api_key_lookups_total", "result" => result).increment(1);
    let Some((merchant, found)) = looked_up else {
        ctx.limits.check_failed_key(&caller.client)?;
        return Err(ApiError::bad_key());
    };
    // The index lookup found the row; compare again in constant time as defence in depth.
    if !ct_eq(&found.key_hash, &hash) {
        return Err(ApiError::bad_key());
    }
    if found.stale {
        // last_used_at at minute resolution: one write per key per minute, not per request.
        chainsub_store::merchants::touch_api_key(&**conn, &merchant, found.key_id).await?;
    }
    // Given back first: the key's shared budget may take a pooled connection of its own.
    drop(conn);
    let rate = ctx
        .limits
        .check_key(&ctx.pool, merchant.public_id().as_str())
        .await?;
    ctx.keys.insert(
        before,
        hash,
        merchant.id(),
        (merchant.clone(), found.key_id),
    );
    Ok(Authed { merchant, rate })
}

/// Key status: prefix, last 4, created and last used; `key: null` when there is none.
pub async fn status(client: &impl GenericClient, merchant: &Merchant) -> Result<Value> {
    let key = chainsub_store::merchants::api_key_status(client, merchant).await?;
    serde_json::to_value(KeyStatusView::from(key.as_ref()))
        .map_err(|e| ApiError::Internal(format!("serializing a key status: {e}")))
}

/// Creates the merchant's key, or rotates it: the old key is revoked in the same
/// transaction, so it fails from the moment the new one exists.
pub async fn create_or_rotate(
    client: &mut tokio_postgres::Client,
    merchant: &Merchant,
) -> Result<(ApiKey, bool)> {
    let key = ApiKey::generate();
    let rotated = chainsub_store::merchants::replace_api_key(
        client,
        merchant,
        key.hash().as_slice(),
        PREFIX,
        key.last4(),
    )
    .await?;
    Ok((key, rotated))
}

/// Revokes the live key, if any. Returns whether one was revoked.
pub async fn revoke(client: &impl GenericClient, merchant: &Merchant) -> Result<bool> {
    Ok(chainsub_store::merchants::revoke_api_key(client, merchant).await?)
}

/// `api admin create-key --wallet`: the merchant (created if needed) and a fresh key.
pub async fn admin_create_key(
    client: &mut tokio_postgres::Client,
    wallet: alloy::primitives::Address,
) -> Result<(Merchant, ApiKey)> {
    let merchant = merchants::find_or_create(&*client, wallet).await?;
    let (key, _) = create_or_rotate(client, &merchant).await?;
    Ok((merchant, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_prefix_and_redacted_debug() {
        let k = ApiKey::generate();
        assert!(k.expose().starts_with("sk_live_") && k.expose().len() == 8 + 64);
        let dbg = format!("{k:?}");
        assert!(
            !dbg.contains(&k.expose()[8..40]),
            "Debug must not show the key: {dbg}"
        );
        assert_eq!(ApiKey::parse(k.expose()), Some(k.clone()));
        assert_eq!(ApiKey::parse("sk_live_xyz"), None);
        assert_eq!(ApiKey::parse(&k.expose().to_uppercase()), None);
    }
}
