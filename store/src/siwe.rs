//! Sign-In with Ethereum nonces: issued to anyone (rate limited by the API), each consumed
//! at most once by the sign-in that checks it.

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;

use crate::Result;

/// Stores `nonce`, valid for `ttl_secs`; returns when it expires. Nonces that expired more
/// than a day ago are trimmed here rather than by a separate job.
pub async fn issue_nonce(
    client: &impl GenericClient,
    nonce: &str,
    ttl_secs: u64,
) -> Result<DateTime<Utc>> {
    let expires = client
        .query_one(
            "INSERT INTO siwe_nonces (nonce, expires_at) \
             VALUES ($1, now() + make_interval(secs => $2)) RETURNING expires_at",
            &[&nonce, &(ttl_secs as f64)],
        )
        .await?
        .get(0);
    client
        .execute(
            "DELETE FROM siwe_nonces WHERE expires_at < now() - interval '1 day'",
            &[],
        )
        .await?;
    Ok(expires)
}

/// Consumes `nonce`: true when it was issued, unexpired and unused — and it is used from
/// now on (the statement that checks it marks it, so two sign-ins cannot both pass).
pub async fn consume_nonce(client: &impl GenericClient, nonce: &str) -> Result<bool> {
    let n = client
        .execute(
            "UPDATE siwe_nonces SET used_at = now() \
             WHERE nonce = $1 AND used_at IS NULL AND expires_at > now()",
            &[&nonce],
        )
        .await?;
    Ok(n == 1)
}
