//! The dispatcher's SQL: discovering due work, claiming it under a lease, and recording
//! outcomes. Claims are `FOR UPDATE SKIP LOCKED` plus a lease (`locked_until`), so any
//! number of dispatchers share the outbox without double delivery, and a dispatcher that
//! dies mid-delivery only delays its rows until the lease runs out.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::Client;

use super::signing::WebhookSecret;
use crate::error::Result;

/// Condition shared by every "is this row due" query (`o` is webhook_outbox).
const DUE: &str = "o.status IN ('pending', 'delivering') AND o.next_attempt_at <= now() \
                   AND (o.locked_until IS NULL OR o.locked_until <= now())";

/// A merchant with due deliveries and a usable endpoint.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub wallet: Vec<u8>,
    pub url: String,
    /// Live secrets, newest first (two during a rotation overlap).
    pub secrets: Vec<WebhookSecret>,
}

/// Merchants that have due rows, a URL, an enabled endpoint and a live secret, oldest due
/// first. Rows of other merchants wait in `pending`: no URL yet, or disabled after a 410.
pub async fn due_endpoints(client: &Client, limit: i64) -> Result<Vec<Endpoint>> {
    let rows = client
        .query(
            &format!(
                // A skip scan over the merchants that have live rows (one index probe per
                // merchant instead of reading every due row), then each one's oldest due row.
                "WITH RECURSIVE w AS (
                    (SELECT o.merchant_wallet AS wallet FROM webhook_outbox o
                     WHERE o.status IN ('pending', 'delivering') ORDER BY o.merchant_wallet LIMIT 1)
                    UNION ALL
                    SELECT (SELECT o.merchant_wallet FROM webhook_outbox o
                            WHERE o.status IN ('pending', 'delivering') AND o.merchant_wallet > w.wallet
                            ORDER BY o.merchant_wallet LIMIT 1)
                    FROM w WHERE w.wallet IS NOT NULL)
                 SELECT m.wallet, m.webhook_url, d.first_due FROM w
                 JOIN merchants m ON m.wallet = w.wallet
                 CROSS JOIN LATERAL (SELECT o.next_attempt_at AS first_due FROM webhook_outbox o
                                     WHERE o.merchant_wallet = m.wallet AND {DUE}
                                     ORDER BY o.next_attempt_at LIMIT 1) d
                 WHERE m.webhook_url IS NOT NULL AND m.webhook_enabled
                 ORDER BY d.first_due LIMIT $1"
            ),
            &[&limit],
        )
        .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let wallets: Vec<Vec<u8>> = rows.iter().map(|r| r.get(0)).collect();
    let mut secrets = live_secrets_by_wallet(client, &wallets).await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let wallet: Vec<u8> = r.get(0);
            let secrets = secrets.remove(&wallet).filter(|s| !s.is_empty())?;
            Some(Endpoint {
                url: r.get(1),
                wallet,
                secrets,
            })
        })
        .collect())
}

async fn live_secrets_by_wallet(
    client: &Client,
    wallets: &[Vec<u8>],
) -> Result<HashMap<Vec<u8>, Vec<WebhookSecret>>> {
    let rows = client
        .query(
            "SELECT m.wallet, s.secret FROM webhook_secrets s JOIN merchants m ON m.id = s.merchant_id
             WHERE m.wallet = ANY($1) AND (s.expires_at IS NULL OR s.expires_at > now())
             ORDER BY s.created_at DESC, s.id DESC",
            &[&wallets],
        )
        .await?;
    let mut out: HashMap<Vec<u8>, Vec<WebhookSecret>> = HashMap::new();
    for r in rows {
        let text: String = r.get(1);
        match WebhookSecret::parse(&text) {
            Ok(s) => out.entry(r.get(0)).or_default().push(s),
            Err(_) => tracing::error!("webhook_secrets holds a malformed secret; skipping it"),
        }
    }
    Ok(out)
}

/// One claimed outbox row.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    pub event_public_id: String,
    pub test_payload: Option<serde_json::Value>,
    /// This attempt's number (1-based); also the fencing token for recording the outcome.
    pub attempt: i32,
    pub created_at: DateTime<Utc>,
}

/// Claims up to `limit` due rows of each merchant in `wallets` in one statement: marks them
/// `delivering`, counts the attempt, and leases them for `lease`. Returns (wallet, row).
pub async fn claim(
    client: &Client,
    wallets: &[Vec<u8>],
    limit: i64,
    lease: Duration,
) -> Result<Vec<(Vec<u8>, Claimed)>> {
    let rows = client
        .query(
            &format!(
                "WITH c AS (SELECT x.id FROM unnest($1::bytea[]) AS w(wallet)
                            CROSS JOIN LATERAL (
                                SELECT o.id FROM webhook_outbox o WHERE o.merchant_wallet = w.wallet AND {DUE}
                                ORDER BY o.next_attempt_at, o.id LIMIT $2 FOR UPDATE SKIP LOCKED) x)
                 UPDATE webhook_outbox o SET status = 'delivering', attempts = o.attempts + 1,
                        locked_until = clock_timestamp() + make_interval(secs => $3)
                 FROM c WHERE o.id = c.id
                 RETURNING o.id, o.event_public_id, o.test_payload, o.attempts, o.created_at, o.merchant_wallet"
            ),
            &[&wallets, &limit, &lease.as_secs_f64()],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get(5),
                Claimed {
                    id: r.get(0),
                    event_public_id: r.get(1),
                    test_payload: r.get(2),
                    attempt: r.get(3),
                    created_at: r.get(4),
                },
            )
        })
        .collect())
}

/// What happened to the row after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextState {
    Delivered,
    /// Try again at this time.
    Retry(DateTime<Utc>),
    /// Schedule exhausted.
    Failed,
}

/// One finished attempt, ready to persist.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub outbox_id: i64,
    pub attempt: i32,
    pub attempted_at: DateTime<Utc>,
    pub url: String,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<String>,
    pub response_excerpt: Option<String>,
    pub next: NextState,
    /// Set when the receiver answered 410: disable this merchant's endpoint.
    pub disable_wallet: Option<Vec<u8>>,
}

/// Persists a batch of attempts and moves their rows on, in one transaction. A failure is
/// applied only if the row is still ours (same attempt number, still `delivering`): if our
/// lease ran out and another dispatcher took the row, its outcome wins. A success is always
/// applied: the receiver has the event.
pub async fn record(client: &mut Client, outcomes: &[Outcome]) -> Result<()> {
    let tx = client.transaction().await?;
    let ids: Vec<i64> = outcomes.iter().map(|o| o.outbox_id).collect();
    let attempts: Vec<i32> = outcomes.iter().map(|o| o.attempt).collect();
    let at: Vec<DateTime<Utc>> = outcomes.iter().map(|o| o.attempted_at).collect();
    let urls: Vec<&str> = outcomes.iter().map(|o| o.url.as_str()).collect();
    let codes: Vec<Option<i32>> = outcomes.iter().map(|o| o.status_code).collect();
    let latency: Vec<i32> = outcomes.iter().map(|o| o.latency_ms).collect();
    let errors: Vec<Option<&str>> = outcomes.iter().map(|o| o.error.as_deref()).collect();
    let excerpts: Vec<Option<&str>> = outcomes
        .iter()
        .map(|o| o.response_excerpt.as_deref())
        .collect();
    tx.execute(
        "INSERT INTO webhook_attempts (outbox_id, attempt, attempted_at, url, status_code, latency_ms, error, response_excerpt)
         SELECT * FROM unnest($1::bigint[], $2::int[], $3::timestamptz[], $4::text[], $5::int[], $6::int[], $7::text[], $8::text[])",
        &[&ids, &attempts, &at, &urls, &codes, &latency, &errors, &excerpts],
    )
    .await?;
    let now = Utc::now();
    let status: Vec<&str> = outcomes
        .iter()
        .map(|o| match o.next {
            NextState::Delivered => "delivered",
            NextState::Retry(_) => "pending",
            NextState::Failed => "failed",
        })
        .collect();
    let next_at: Vec<DateTime<Utc>> = outcomes
        .iter()
        .map(|o| match o.next {
            NextState::Retry(t) => t,
            _ => now,
        })
        .collect();
    tx.execute(
        "UPDATE webhook_outbox o SET status = u.status, next_attempt_at = u.next_at, locked_until = NULL,
                last_error = u.err,
                delivered_at = CASE WHEN u.status = 'delivered' THEN clock_timestamp() ELSE o.delivered_at END
         FROM unnest($1::bigint[], $2::int[], $3::text[], $4::timestamptz[], $5::text[]) AS u(id, attempt, status, next_at, err)
         WHERE o.id = u.id
           AND (u.status = 'delivered' OR (o.status = 'delivering' AND o.attempts = u.attempt))",
        &[&ids, &attempts, &status, &next_at, &errors],
    )
    .await?;
    for o in outcomes {
        if let Some(wallet) = &o.disable_wallet {
            tx.execute(
                "UPDATE merchants SET webhook_enabled = FALSE, webhook_disabled_reason = $2
                 WHERE wallet = $1 AND webhook_enabled",
                &[
                    wallet,
                    &format!(
                        "endpoint answered 410 Gone at {}",
                        o.attempted_at.to_rfc3339()
                    ),
                ],
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Hands a claimed row back untouched (no request was sent), undoing the attempt count.
pub async fn release(client: &Client, outbox_id: i64, attempt: i32) -> Result<()> {
    client
        .execute(
            "UPDATE webhook_outbox SET status = 'pending', attempts = attempts - 1, locked_until = NULL
             WHERE id = $1 AND attempts = $2 AND status = 'delivering'",
            &[&outbox_id, &attempt],
        )
        .await?;
    Ok(())
}

/// Rows due now (including those held for merchants without a usable endpoint): the queue
/// depth gauge.
pub async fn queue_depth(client: &Client) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT count(*) FROM webhook_outbox o WHERE o.status IN ('pending', 'delivering') AND o.next_attempt_at <= now()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}
