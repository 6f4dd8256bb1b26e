//! Idempotency keys: one stored response per (merchant, `Idempotency-Key`) for 24 hours, so
//! a retried POST is answered with the first answer instead of acting twice. Keyed by the
//! [`MerchantScope`]: one merchant's key never meets another's.

use tokio_postgres::GenericClient;

use crate::{MerchantScope, Result};

/// What [`claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is ours now: run the request, then [`complete`] or [`release`].
    New,
    /// The same request already finished: replay its stored answer.
    Replay { status: i32, body: String },
    /// The key was used with a different request.
    Reused,
    /// The same request is still running (or its process died within the last 10 minutes).
    InFlight,
}

/// Claims `key` for the request whose hash is `request_hash`. Keys older than 24 hours, and
/// claims left unfinished for 10 minutes, are released first.
pub async fn claim(
    client: &impl GenericClient,
    scope: &MerchantScope,
    key: &str,
    request_hash: &[u8],
) -> Result<Claim> {
    let owner = scope.public_id().as_str();
    client
        .execute(
            "DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND \
             (created_at < now() - interval '24 hours' \
              OR (completed_at IS NULL AND created_at < now() - interval '10 minutes'))",
            &[&owner, &key],
        )
        .await?;
    let inserted = client
        .execute(
            "INSERT INTO idempotency_keys (scope, key, request_hash) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
            &[&owner, &key, &request_hash],
        )
        .await?;
    if inserted == 1 {
        return Ok(Claim::New);
    }
    let row = client
        .query_opt(
            "SELECT request_hash, status_code, response_body FROM idempotency_keys \
             WHERE scope = $1 AND key = $2",
            &[&owner, &key],
        )
        .await?;
    let Some(row) = row else {
        return Ok(Claim::InFlight);
    };
    if row.get::<_, &[u8]>(0) != request_hash {
        return Ok(Claim::Reused);
    }
    Ok(match (row.get(1), row.get(2)) {
        (Some(status), Some(body)) => Claim::Replay { status, body },
        _ => Claim::InFlight,
    })
}

/// Stores the answer to replay for `key`.
pub async fn complete(
    client: &impl GenericClient,
    scope: &MerchantScope,
    key: &str,
    status: i32,
    body: &str,
) -> Result<()> {
    client
        .execute(
            "UPDATE idempotency_keys SET status_code = $3, response_body = $4, \
             completed_at = now() WHERE scope = $1 AND key = $2",
            &[&scope.public_id().as_str(), &key, &status, &body],
        )
        .await?;
    Ok(())
}

/// Forgets `key` (the request failed in a way the client may retry).
pub async fn release(client: &impl GenericClient, scope: &MerchantScope, key: &str) -> Result<()> {
    client
        .execute(
            "DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2",
            &[&scope.public_id().as_str(), &key],
        )
        .await?;
    Ok(())
}
