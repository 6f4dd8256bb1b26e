//! `Idempotency-Key` on POST: the first request with a key runs and its response is stored;
//! the same key with the same request replays that response (`Idempotent-Replayed: true`);
//! with a different request it is a 409. A request still in flight makes a concurrent
//! duplicate get a 409 `idempotency_key_in_use`, so two concurrent requests produce one
//! effect. Only final answers are stored — a success, or a refusal the same request would
//! get again (see [`is_final`]); a 429, a 5xx, "in progress" or a refusal because the
//! key already belongs to another request leave the key free for the retry. An answer that
//! an action is under way — a `202` (a cancellation sent), or a success whose object's
//! `status` is `pending` (a plan being provisioned) — is not replayed as stored: the request
//! runs again under its key and reports where the action stands now (the work itself makes
//! sure that never repeats the effect). Keys live 24 hours.

use std::future::Future;

use serde_json::Value;
use sha2::{Digest, Sha256};
use warp::http::StatusCode;

use chainsub_store::MerchantScope;
use chainsub_store::idempotency::{self as store, Claim};

use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::reply::{Resp, RespBody};

/// A validated key: 1-255 visible ASCII characters.
fn parse_key(k: &str) -> Result<String> {
    if k.is_empty() || k.len() > 255 || !k.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            "`Idempotency-Key` must be 1-255 visible ASCII characters",
        ));
    }
    Ok(k.to_string())
}

/// Whether a request runs for the first time under its key, or again because its stored
/// answer says the action is pending ([`is_pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// The first time (or without an `Idempotency-Key`).
    First,
    /// Again: the stored answer was pending.
    Again,
}

/// Runs `f` at most once per (`merchant`, key) — or again, with [`Run::Again`], when the stored answer
/// says the action is pending ([`is_pending`]). `request` identifies the request (method, path and canonical body).
/// `redact` maps the stored body (e.g. to drop a plaintext secret).
pub async fn run<F, Fut>(
    ctx: &Ctx,
    merchant: &MerchantScope,
    key: Option<&str>,
    request: &str,
    redact: fn(Value) -> Value,
    f: F,
) -> Result<Resp>
where
    F: FnOnce(Run) -> Fut,
    Fut: Future<Output = Result<Resp>>,
{
    let Some(key) = key else {
        return f(Run::First).await;
    };
    let key = parse_key(key)?;
    let hash = Sha256::digest(request.as_bytes()).to_vec();
    let conn = ctx.pool.get().await?;
    let rerun = match store::claim(&**conn, merchant, &key, &hash).await? {
        Claim::New => false,
        Claim::Replay { status, body } if is_pending(status, &body) => true,
        Claim::Replay { status, body } => return Ok(replay(status, &body)),
        Claim::InFlight => {
            return Err(ApiError::Conflict {
                code: Code::IdempotencyKeyInUse,
                message: "a request with this Idempotency-Key is in flight; retry shortly".into(),
                param: None,
            });
        }
        Claim::Reused => {
            return Err(ApiError::Conflict {
                code: Code::IdempotencyKeyReused,
                message: "this Idempotency-Key was used with a different request".into(),
                param: None,
            });
        }
    };
    drop(conn);
    let outcome = f(if rerun { Run::Again } else { Run::First }).await;
    // The request found the key already bound to another request (the plan-resume path),
    // or found the work in progress elsewhere ("retry shortly"): that answer must not bind
    // the key to this request, or a retry with the key would replay it for a day.
    let refused = matches!(
        &outcome,
        Err(ApiError::Conflict {
            // The same work in progress in another request ("retry shortly").
            code: Code::IdempotencyKeyReused | Code::CancellationInProgress,
            ..
        })
    );
    let resp = match outcome {
        Ok(r) => r,
        Err(e) => e.into_resp(),
    };
    let conn = ctx.pool.get().await?;
    if rerun && (refused || !is_final(resp.status)) {
        // The stored pending answer stays the key's until a final one replaces it.
    } else if refused || !is_final(resp.status) {
        store::release(&**conn, merchant, &key).await?;
    } else {
        let stored = match &resp.body {
            RespBody::Json(v) => serde_json::json!({ "json": redact(v.clone()) }),
            RespBody::Error(e) => serde_json::json!({ "error": e }),
            _ => serde_json::json!({}),
        };
        let status = i32::from(resp.status.as_u16());
        store::complete(&**conn, merchant, &key, status, &stored.to_string()).await?;
    }
    Ok(if rerun {
        resp.header("idempotent-replayed", "true")
    } else {
        resp
    })
}

/// Whether the same request would get `status` again, so it is the request's result: a
/// success, a malformed or invalid request (400, 422), an id that names nothing of the
/// merchant's (404: ids are only handed out for what exists), or a conflict with the state it
/// found (409; "in progress" and "key reused" are handled before). Not final: 429 (retry
/// after the time it names) and 5xx.
fn is_final(status: StatusCode) -> bool {
    status.is_success()
        || matches!(
            status,
            StatusCode::BAD_REQUEST
                | StatusCode::NOT_FOUND
                | StatusCode::CONFLICT
                | StatusCode::UNPROCESSABLE_ENTITY
        )
}

/// Whether a stored answer says its action is still under way: a `202`, or a success whose
/// object has `status: "pending"`.
fn is_pending(status: i32, stored: &str) -> bool {
    if status == 202 {
        return true;
    }
    (200..300).contains(&status)
        && serde_json::from_str::<Value>(stored)
            .ok()
            .is_some_and(|v| v["json"]["status"] == "pending")
}

fn replay(status: i32, body: &str) -> Resp {
    let status = StatusCode::from_u16(status as u16).unwrap_or(StatusCode::OK);
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let resp = if let Some(e) = v.get("error") {
        Resp::error(status, e.clone())
    } else {
        Resp::with_status(status, v.get("json").cloned().unwrap_or(Value::Null))
    };
    resp.header("idempotent-replayed", "true")
}
