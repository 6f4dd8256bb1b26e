//! The merchant's endpoint settings and delivery history, as the dashboard reads and
//! changes them. Every query is keyed by the session's merchant id, so one merchant can
//! never see or touch another's endpoint or deliveries.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_postgres::Client;
use url::Url;

use crate::http::error::{ApiError, Result};
use chainsub_webhooks::WebhookSecret;

/// Longest accepted webhook URL.
const MAX_URL_LEN: usize = 2048;

/// A webhook URL as accepted at the boundary: absolute, `https` (or `http` when the
/// server allows it for local development), with a host and without credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl(Url);

impl WebhookUrl {
    /// Parses and checks a URL (the SSRF address check happens separately, after DNS).
    pub fn parse(s: &str, allow_http: bool) -> Result<WebhookUrl> {
        let bad = |m: &str| ApiError::invalid("url", m.to_string());
        if s.len() > MAX_URL_LEN {
            return Err(bad("webhook URL is too long (max 2048 characters)"));
        }
        let url = Url::parse(s.trim()).map_err(|_| bad("webhook URL is not an absolute URL"))?;
        match url.scheme() {
            "https" => {}
            "http" if allow_http => {}
            "http" => return Err(bad("webhook URL must use https")),
            _ => return Err(bad("webhook URL must be an https URL")),
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("webhook URL has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("webhook URL must not contain credentials"));
        }
        if url.fragment().is_some() {
            return Err(bad("webhook URL must not contain a fragment"));
        }
        Ok(WebhookUrl(url))
    }

    /// The URL.
    pub fn url(&self) -> &Url {
        &self.0
    }
}

/// Sets (or with `None` removes) the endpoint URL. Setting a URL re-enables an endpoint
/// disabled by a 410 (the merchant has fixed it) and creates the first signing secret.
pub async fn set_url(
    client: &mut Client,
    merchant_id: i64,
    url: Option<&WebhookUrl>,
) -> Result<()> {
    let tx = client.transaction().await?;
    let n = tx
        .execute(
            "UPDATE merchants SET webhook_url = $2, webhook_enabled = TRUE, webhook_disabled_reason = NULL
             WHERE id = $1",
            &[&merchant_id, &url.map(|u| u.url().as_str())],
        )
        .await?;
    if n == 0 {
        return Err(ApiError::not_found("merchant", None));
    }
    ensure_secret_in(&tx, merchant_id).await?;
    if url.is_some() {
        resume_held(&tx, merchant_id).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Makes the merchant's waiting deliveries due now (a new URL or a re-enabled endpoint
/// should not sit out backoff earned by the old one) and wakes the dispatchers.
async fn resume_held(client: &impl tokio_postgres::GenericClient, merchant_id: i64) -> Result<()> {
    client
        .execute(
            "UPDATE webhook_outbox SET next_attempt_at = now()
             WHERE merchant_wallet = (SELECT wallet FROM merchants WHERE id = $1)
               AND status = 'pending' AND next_attempt_at > now()",
            &[&merchant_id],
        )
        .await?;
    client
        .execute("SELECT pg_notify('chainsub_webhook_outbox', '')", &[])
        .await?;
    Ok(())
}

async fn ensure_secret_in(tx: &tokio_postgres::Transaction<'_>, merchant_id: i64) -> Result<()> {
    // Serialize with rotations of the same merchant.
    tx.execute(
        "SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE",
        &[&merchant_id],
    )
    .await?;
    tx.execute(
        "INSERT INTO webhook_secrets (merchant_id, secret)
         SELECT $1, $2 WHERE NOT EXISTS
           (SELECT 1 FROM webhook_secrets WHERE merchant_id = $1 AND expires_at IS NULL)",
        &[&merchant_id, &WebhookSecret::generate().expose()],
    )
    .await?;
    Ok(())
}

/// A live signing secret.
#[derive(Debug, Clone)]
pub struct LiveSecret {
    pub secret: WebhookSecret,
    pub created_at: DateTime<Utc>,
    /// `None` for the current secret; set for the previous one during an overlap.
    pub expires_at: Option<DateTime<Utc>>,
}

/// The live secrets (current first), creating the first one if the merchant has none.
pub async fn reveal_secrets(client: &mut Client, merchant_id: i64) -> Result<Vec<LiveSecret>> {
    let tx = client.transaction().await?;
    ensure_secret_in(&tx, merchant_id).await?;
    let rows = tx
        .query(
            "SELECT secret, created_at, expires_at FROM webhook_secrets
             WHERE merchant_id = $1 AND (expires_at IS NULL OR expires_at > now())
             ORDER BY (expires_at IS NULL) DESC, created_at DESC, id DESC",
            &[&merchant_id],
        )
        .await?;
    tx.commit().await?;
    rows.iter()
        .map(|r| {
            let text: String = r.get(0);
            Ok(LiveSecret {
                secret: WebhookSecret::parse(&text).map_err(|_| {
                    ApiError::Internal("malformed webhook secret in database".into())
                })?,
                created_at: r.get(1),
                expires_at: r.get(2),
            })
        })
        .collect()
}

/// Rotates: the current secret keeps signing for `overlap`, a new one becomes current.
pub async fn rotate_secret(
    client: &mut Client,
    merchant_id: i64,
    overlap: Duration,
) -> Result<WebhookSecret> {
    let tx = client.transaction().await?;
    let locked = tx
        .execute(
            "SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE",
            &[&merchant_id],
        )
        .await?;
    if locked == 0 {
        return Err(ApiError::not_found("merchant", None));
    }
    tx.execute(
        "UPDATE webhook_secrets SET expires_at = now() + make_interval(secs => $2)
         WHERE merchant_id = $1 AND expires_at IS NULL",
        &[&merchant_id, &overlap.as_secs_f64()],
    )
    .await?;
    let secret = WebhookSecret::generate();
    tx.execute(
        "INSERT INTO webhook_secrets (merchant_id, secret) VALUES ($1, $2)",
        &[&merchant_id, &secret.expose()],
    )
    .await?;
    tx.commit().await?;
    Ok(secret)
}

/// The endpoint as the dashboard shows it.
pub async fn endpoint(client: &Client, merchant_id: i64) -> Result<Value> {
    let row = client
        .query_opt(
            "SELECT webhook_url, webhook_enabled, webhook_disabled_reason FROM merchants WHERE id = $1",
            &[&merchant_id],
        )
        .await?
        .ok_or_else(|| ApiError::not_found("merchant", None))?;
    Ok(json!({
        "object": "webhook_endpoint",
        "url": row.get::<_, Option<String>>(0),
        "enabled": row.get::<_, bool>(1),
        "disabledReason": row.get::<_, Option<String>>(2),
    }))
}

/// Re-enables an endpoint disabled after a 410; held deliveries resume.
pub async fn enable(client: &Client, merchant_id: i64) -> Result<()> {
    client
        .execute(
            "UPDATE merchants SET webhook_enabled = TRUE, webhook_disabled_reason = NULL WHERE id = $1",
            &[&merchant_id],
        )
        .await?;
    resume_held(client, merchant_id).await
}

/// Queues a dashboard test event (its body is `payload`, sent as is). Returns the delivery id.
pub async fn enqueue_test(
    client: &Client,
    merchant_id: i64,
    event_id: &str,
    payload: &Value,
) -> Result<i64> {
    let row = client
        .query_opt(
            "INSERT INTO webhook_outbox (event_public_id, merchant_wallet, test_payload)
             SELECT $2, wallet, $3 FROM merchants WHERE id = $1 RETURNING id",
            &[&merchant_id, &event_id, payload],
        )
        .await?
        .ok_or_else(|| ApiError::not_found("merchant", None))?;
    Ok(row.get(0))
}

/// `whd_<n>`: the public id of a delivery (an outbox row).
pub fn delivery_public_id(id: i64) -> String {
    format!("whd_{id}")
}

/// The outbox id inside `whd_<n>`.
pub fn parse_delivery_id(s: &str) -> Option<i64> {
    let digits = s.strip_prefix("whd_")?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Puts a delivery back in the queue for an immediate attempt (a failed, delivered or
/// waiting one). A delivery in flight right now is a 409. Unknown or another merchant's
/// delivery is a 404.
pub async fn retry(client: &Client, merchant_id: i64, outbox_id: i64) -> Result<()> {
    let row = client
        .query_opt(
            "SELECT o.status, (o.locked_until IS NOT NULL AND o.locked_until > now())
             FROM webhook_outbox o JOIN merchants m ON m.wallet = o.merchant_wallet
             WHERE o.id = $2 AND m.id = $1",
            &[&merchant_id, &outbox_id],
        )
        .await?
        .ok_or_else(|| ApiError::not_found("webhook delivery", Some("id")))?;
    let (status, leased): (String, bool) = (row.get(0), row.get(1));
    if status == "delivering" && leased {
        return Err(ApiError::Conflict {
            code: "delivery_in_flight",
            message: "this delivery is being attempted right now".into(),
            param: None,
        });
    }
    client
        .execute(
            "UPDATE webhook_outbox SET status = 'pending', next_attempt_at = now(), locked_until = NULL
             WHERE id = $1 AND merchant_wallet = (SELECT wallet FROM merchants WHERE id = $2)
             AND (status <> 'delivering' OR locked_until IS NULL OR locked_until <= now())",
            &[&outbox_id, &merchant_id],
        )
        .await?;
    client
        .execute("SELECT pg_notify('chainsub_webhook_outbox', '')", &[])
        .await?;
    Ok(())
}

/// Recent deliveries, newest first, each with its attempts (newest first). `before` is a
/// delivery id to page from.
pub async fn deliveries(
    client: &Client,
    merchant_id: i64,
    limit: i64,
    before: Option<i64>,
) -> Result<(Vec<Value>, bool)> {
    let rows = client
        .query(
            "SELECT o.id, o.event_public_id, o.test_payload IS NOT NULL, o.status, o.attempts,
                    o.next_attempt_at, o.last_error, o.created_at, o.delivered_at,
                    COALESCE(o.test_payload->>'type', e.kind)
             FROM webhook_outbox o JOIN merchants m ON m.wallet = o.merchant_wallet
             LEFT JOIN chain_events e ON e.public_id = o.event_public_id AND o.test_payload IS NULL
             WHERE m.id = $1 AND ($2::bigint IS NULL OR o.id < $2)
             ORDER BY o.id DESC LIMIT $3",
            &[&merchant_id, &before, &(limit + 1)],
        )
        .await?;
    let has_more = rows.len() as i64 > limit;
    let rows = &rows[..rows.len().min(limit as usize)];
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    let attempt_rows = client
        .query(
            "SELECT outbox_id, attempt, attempted_at, url, status_code, latency_ms, error, response_excerpt
             FROM webhook_attempts WHERE outbox_id = ANY($1) ORDER BY outbox_id, id DESC",
            &[&ids],
        )
        .await?;
    let mut attempts: HashMap<i64, Vec<Value>> = HashMap::new();
    for a in attempt_rows {
        attempts.entry(a.get(0)).or_default().push(json!({
            "attempt": a.get::<_, i32>(1),
            "attemptedAt": rfc3339(a.get(2)),
            "url": a.get::<_, String>(3),
            "statusCode": a.get::<_, Option<i32>>(4),
            "latencyMs": a.get::<_, Option<i32>>(5),
            "error": a.get::<_, Option<String>>(6),
            "responseExcerpt": a.get::<_, Option<String>>(7),
        }));
    }
    let data = rows
        .iter()
        .map(|r| {
            let id: i64 = r.get(0);
            let status: String = r.get(3);
            json!({
                "id": delivery_public_id(id),
                "object": "webhook_delivery",
                "eventId": r.get::<_, String>(1),
                "eventType": r.get::<_, Option<String>>(9),
                "test": r.get::<_, bool>(2),
                "status": status,
                "attemptCount": r.get::<_, i32>(4),
                "nextAttemptAt": matches!(status.as_str(), "pending" | "delivering")
                    .then(|| rfc3339(r.get(5))),
                "lastError": r.get::<_, Option<String>>(6),
                "createdAt": rfc3339(r.get(7)),
                "deliveredAt": r.get::<_, Option<DateTime<Utc>>>(8).map(rfc3339),
                "attempts": attempts.remove(&id).unwrap_or_default(),
            })
        })
        .collect();
    Ok((data, has_more))
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_must_be_https_unless_local_dev() {
        assert!(WebhookUrl::parse("https://example.com/hooks", false).is_ok());
        assert!(WebhookUrl::parse("http://example.com/hooks", false).is_err());
        assert!(WebhookUrl::parse("http://example.com/hooks", true).is_ok());
        for bad in [
            "ftp://example.com/",
            "example.com/hooks",
            "https://user:pw@example.com/",
            "https://example.com/#frag",
            "",
        ] {
            assert!(WebhookUrl::parse(bad, true).is_err(), "{bad}");
        }
        let long = format!("https://example.com/{}", "a".repeat(3000));
        assert!(WebhookUrl::parse(&long, false).is_err());
    }

    #[test]
    fn delivery_ids_round_trip_and_reject_garbage() {
        assert_eq!(parse_delivery_id(&delivery_public_id(42)), Some(42));
        for bad in [
            "whd_",
            "whd_01",
            "whd_x",
            "evt_1",
            "whd_99999999999999999999",
        ] {
            assert_eq!(parse_delivery_id(bad), None, "{bad}");
        }
    }
}
