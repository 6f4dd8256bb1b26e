//! `Idempotency-Key` on POST: the first request with a key runs and its response is stored;
//! the same key with the same request replays that response (`Idempotent-Replayed: true`);
//! with a different request it is a 409. A request still in flight makes a concurrent
//! duplicate get a 409 `idempotency_key_in_use`, so two concurrent requests produce one
//! effect. 5xx outcomes are not stored (the client may retry), nor a refusal because the key
//! already belongs to another request. Keys live 24 hours.

use std::future::Future;

use serde_json::Value;
use sha2::{Digest, Sha256};
use warp::http::StatusCode;

use crate::ctx::Ctx;
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

/// Runs `f` at most once per (`scope`, key). `request` identifies the request (method, path
/// and canonical body). `redact` maps the stored body (e.g. to drop a plaintext secret).
pub async fn run<F, Fut>(
    ctx: &Ctx,
    scope: &str,
    key: Option<&str>,
    request: &str,
    redact: fn(Value) -> Value,
    f: F,
) -> Result<Resp>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Resp>>,
{
    let Some(key) = key else {
        return f().await;
    };
    let key = parse_key(key)?;
    let hash = Sha256::digest(request.as_bytes()).to_vec();
    let conn = ctx.pool.get().await?;
    // Expired keys, and in-flight rows abandoned by a crashed process, make room.
    conn.execute(
        "DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND \
         (created_at < now() - interval '24 hours' \
          OR (completed_at IS NULL AND created_at < now() - interval '10 minutes'))",
        &[&scope, &key],
    )
    .await?;
    let inserted = conn
        .execute(
            "INSERT INTO idempotency_keys (scope, key, request_hash) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
            &[&scope, &key, &hash],
        )
        .await?;
    if inserted == 0 {
        let row = conn
            .query_opt(
                "SELECT request_hash, status_code, response_body FROM idempotency_keys \
                 WHERE scope = $1 AND key = $2",
                &[&scope, &key],
            )
            .await?
            .ok_or_else(|| ApiError::Conflict {
                code: "idempotency_key_in_use",
                message: "a request with this Idempotency-Key is in flight; retry shortly".into(),
                param: None,
            })?;
        let stored: Vec<u8> = row.get(0);
        if stored != hash {
            return Err(ApiError::Conflict {
                code: "idempotency_key_reused",
                message: "this Idempotency-Key was used with a different request".into(),
                param: None,
            });
        }
        let (Some(status), Some(body)) = (
            row.get::<_, Option<i32>>(1),
            row.get::<_, Option<String>>(2),
        ) else {
            return Err(ApiError::Conflict {
                code: "idempotency_key_in_use",
                message: "a request with this Idempotency-Key is in flight; retry shortly".into(),
                param: None,
            });
        };
        return Ok(replay(status, &body));
    }
    drop(conn);
    let outcome = f().await;
    // The request found the key already bound to another request (the plan-resume path):
    // that refusal must not bind the key to this request in turn.
    let refused = matches!(
        &outcome,
        Err(ApiError::Conflict {
            code: "idempotency_key_reused",
            ..
        })
    );
    let resp = match outcome {
        Ok(r) => r,
        Err(e) => e.into_resp(),
    };
    let conn = ctx.pool.get().await?;
    if resp.status.is_server_error() || refused {
        conn.execute(
            "DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2",
            &[&scope, &key],
        )
        .await?;
    } else {
        let stored = match &resp.body {
            RespBody::Json(v) => serde_json::json!({ "json": redact(v.clone()) }),
            RespBody::Error(e) => serde_json::json!({ "error": e }),
            _ => serde_json::json!({}),
        };
        conn.execute(
            "UPDATE idempotency_keys SET status_code = $3, response_body = $4, completed_at = now() \
             WHERE scope = $1 AND key = $2",
            &[
                &scope,
                &key,
                &i32::from(resp.status.as_u16()),
                &stored.to_string(),
            ],
        )
        .await?;
    }
    Ok(resp)
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
