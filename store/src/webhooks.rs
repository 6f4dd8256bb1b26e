//! A merchant's webhook endpoint, signing secrets and delivery history, as the dashboard
//! reads and changes them (the outbox transitions it triggers are [`crate::outbox`]'s). Every function takes the [`MerchantScope`] and every statement — reads,
//! UPDATEs and INSERTs alike — is keyed by it, so one merchant can never see or touch
//! another's endpoint, secrets or deliveries.

use std::time::Duration;

use chainsub_core::OutboxStatus;
use chrono::{DateTime, Utc};
use tokio_postgres::Client;
use tokio_postgres::GenericClient;

use crate::outbox::live_status;
use crate::{Error, MerchantScope, Result, outbox};

/// The endpoint settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub url: Option<String>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
}

/// A stored signing secret that is still live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRow {
    /// `whsec_…` text.
    pub secret: String,
    pub created_at: DateTime<Utc>,
    /// `None` for the current secret; set for the previous one during an overlap.
    pub expires_at: Option<DateTime<Utc>>,
}

/// One delivery (outbox row) of the merchant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub id: i64,
    pub event_id: String,
    pub test: bool,
    pub status: OutboxStatus,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub event_type: Option<String>,
    /// A waiting delivery held back by an earlier event of the same subscription still
    /// pending (webhooks of a subscription go out in chain order): that event's id.
    pub held_by: Option<String>,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    pub outbox_id: i64,
    pub attempt: i32,
    pub attempted_at: DateTime<Utc>,
    pub url: String,
    pub status_code: Option<i32>,
    pub latency_ms: Option<i32>,
    pub error: Option<String>,
    pub response_excerpt: Option<String>,
}

/// Sets (or with `None` removes) the endpoint URL. Setting a URL re-enables an endpoint
/// disabled by a 410 (the merchant has fixed it), creates the first signing secret (text
/// `new_secret`, used only if there is none) and makes held deliveries due.
pub async fn set_url(
    client: &mut Client,
    scope: &MerchantScope,
    url: Option<&str>,
    new_secret: &str,
) -> Result<()> {
    let tx = client.transaction().await?;
    tx.execute(
        "UPDATE merchants SET webhook_url = $2, webhook_enabled = TRUE, \
         webhook_disabled_reason = NULL WHERE id = $1",
        &[&scope.id(), &url],
    )
    .await?;
    ensure_secret(&tx, scope, new_secret).await?;
    if url.is_some() {
        outbox::resume_held(&tx, scope).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Re-enables an endpoint disabled after a 410; held deliveries resume.
pub async fn enable(client: &impl GenericClient, scope: &MerchantScope) -> Result<()> {
    client
        .execute(
            "UPDATE merchants SET webhook_enabled = TRUE, webhook_disabled_reason = NULL \
             WHERE id = $1",
            &[&scope.id()],
        )
        .await?;
    outbox::resume_held(client, scope).await
}

/// The endpoint settings.
pub async fn endpoint(client: &impl GenericClient, scope: &MerchantScope) -> Result<Endpoint> {
    let row = client
        .query_one(
            "SELECT webhook_url, webhook_enabled, webhook_disabled_reason FROM merchants \
             WHERE id = $1",
            &[&scope.id()],
        )
        .await?;
    Ok(Endpoint {
        url: row.get(0),
        enabled: row.get(1),
        disabled_reason: row.get(2),
    })
}

/// Creates the current secret (`new_secret`) unless there is one; serialized with rotations
/// of the same merchant.
async fn ensure_secret(
    tx: &tokio_postgres::Transaction<'_>,
    scope: &MerchantScope,
    new_secret: &str,
) -> Result<()> {
    tx.execute(
        "SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE",
        &[&scope.id()],
    )
    .await?;
    tx.execute(
        "INSERT INTO webhook_secrets (merchant_id, secret) \
         SELECT $1, $2 WHERE NOT EXISTS \
           (SELECT 1 FROM webhook_secrets WHERE merchant_id = $1 AND expires_at IS NULL)",
        &[&scope.id(), &new_secret],
    )
    .await?;
    Ok(())
}

/// The live secrets (current first), creating the first one (`new_secret`) if there is none.
pub async fn reveal_secrets(
    client: &mut Client,
    scope: &MerchantScope,
    new_secret: &str,
) -> Result<Vec<SecretRow>> {
    let tx = client.transaction().await?;
    ensure_secret(&tx, scope, new_secret).await?;
    let rows = tx
        .query(
            "SELECT secret, created_at, expires_at FROM webhook_secrets \
             WHERE merchant_id = $1 AND (expires_at IS NULL OR expires_at > now()) \
             ORDER BY (expires_at IS NULL) DESC, created_at DESC, id DESC",
            &[&scope.id()],
        )
        .await?;
    tx.commit().await?;
    Ok(rows
        .iter()
        .map(|r| SecretRow {
            secret: r.get(0),
            created_at: r.get(1),
            expires_at: r.get(2),
        })
        .collect())
}

/// Rotates: the current secret keeps signing for `overlap`, `new_secret` becomes current.
pub async fn rotate_secret(
    client: &mut Client,
    scope: &MerchantScope,
    overlap: Duration,
    new_secret: &str,
) -> Result<()> {
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE",
        &[&scope.id()],
    )
    .await?;
    // At most the current secret and one previous live: an earlier previous one ends now
    // (N rotations within the overlap would otherwise sign every delivery N times).
    tx.execute(
        "UPDATE webhook_secrets SET expires_at = now() \
         WHERE merchant_id = $1 AND expires_at > now()",
        &[&scope.id()],
    )
    .await?;
    tx.execute(
        "UPDATE webhook_secrets SET expires_at = now() + make_interval(secs => $2) \
         WHERE merchant_id = $1 AND expires_at IS NULL",
        &[&scope.id(), &overlap.as_secs_f64()],
    )
    .await?;
    tx.execute(
        "INSERT INTO webhook_secrets (merchant_id, secret) VALUES ($1, $2)",
        &[&scope.id(), &new_secret],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// A stored signing secret with its merchant's wallet (what sealing binds it to).
#[derive(Debug, Clone)]
pub struct StoredSecret {
    pub id: i64,
    pub wallet: Vec<u8>,
    pub secret: String,
}

/// Every stored signing secret, live or not (the API seals them again at start).
pub async fn all_secrets(client: &impl GenericClient) -> Result<Vec<StoredSecret>> {
    let rows = client
        .query(
            "SELECT s.id, m.wallet, s.secret FROM webhook_secrets s \
             JOIN merchants m ON m.id = s.merchant_id ORDER BY s.id",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StoredSecret {
            id: r.get(0),
            wallet: r.get(1),
            secret: r.get(2),
        })
        .collect())
}

/// Replaces secret `id`'s stored text `old` with `new` (the same secret sealed again); 0 when
/// it changed meanwhile.
pub async fn replace_secret(
    client: &impl GenericClient,
    id: i64,
    old: &str,
    new: &str,
) -> Result<u64> {
    Ok(client
        .execute(
            "UPDATE webhook_secrets SET secret = $3 WHERE id = $1 AND secret = $2",
            &[&id, &old, &new],
        )
        .await?)
}

/// Ends the previous secret's overlap now (after a leak, say): only the current secret signs
/// from the next delivery on. Returns how many secrets it ended (0 or 1).
pub async fn revoke_previous_secrets(
    client: &impl GenericClient,
    scope: &MerchantScope,
) -> Result<u64> {
    Ok(client
        .execute(
            "UPDATE webhook_secrets SET expires_at = now() \
             WHERE merchant_id = $1 AND expires_at > now()",
            &[&scope.id()],
        )
        .await?)
}

/// The merchant's deliveries, newest first, `limit` of them from before outbox id `before`,
/// with their attempts (newest first) and whether there are more.
pub async fn deliveries(
    client: &impl GenericClient,
    scope: &MerchantScope,
    limit: i64,
    before: Option<i64>,
) -> Result<(Vec<DeliveryRow>, Vec<AttemptRow>, bool)> {
    let rows = client
        .query(
            concat!(
                "SELECT o.id, o.event_public_id, o.test_payload IS NOT NULL, ",
                live_status!(),
                ", o.attempts, \
                    o.next_attempt_at, o.last_error, o.created_at, o.delivered_at, \
                    COALESCE(o.test_payload->>'type', e.kind, \
                             CASE WHEN r.id IS NOT NULL THEN 'event.retracted' END, \
                             CASE WHEN k.id IS NOT NULL THEN 'subscription.renewal_at_risk' END), \
                    CASE WHEN o.status IN ('pending', 'delivering') AND o.subscription_id IS NOT NULL THEN \
                        (SELECT p.event_public_id FROM webhook_outbox p \
                          WHERE p.chain_id = o.chain_id AND p.subscription_id = o.subscription_id \
                            AND p.id < o.id AND p.status IN ('pending', 'delivering') \
                          ORDER BY p.id LIMIT 1) END \
             FROM webhook_outbox o \
             LEFT JOIN chain_events e ON e.public_id = o.event_public_id AND o.test_payload IS NULL \
             LEFT JOIN event_retractions r ON r.public_id = o.event_public_id \
             LEFT JOIN renewal_risks k ON k.public_id = o.event_public_id \
             WHERE o.merchant_wallet = $1 AND ($2::bigint IS NULL OR o.id < $2) \
             ORDER BY o.id DESC LIMIT $3"
            ),
            &[&scope.wallet_bytes(), &before, &(limit + 1)],
        )
        .await?;
    let has_more = rows.len() as i64 > limit;
    let deliveries = rows
        .iter()
        .take(limit.max(0) as usize)
        .map(|r| {
            Ok(DeliveryRow {
                id: r.get(0),
                event_id: r.get(1),
                test: r.get(2),
                status: OutboxStatus::parse(r.get(3))
                    .map_err(|e| Error::Inconsistent(e.to_string()))?,
                attempts: r.get(4),
                next_attempt_at: r.get(5),
                last_error: r.get(6),
                created_at: r.get(7),
                delivered_at: r.get(8),
                event_type: r.get(9),
                held_by: r.get(10),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let ids: Vec<i64> = deliveries.iter().map(|d| d.id).collect();
    let attempts = client
        .query(
            "SELECT a.outbox_id, a.attempt, a.attempted_at, a.url, a.status_code, a.latency_ms, \
                    a.error, a.response_excerpt \
             FROM webhook_attempts a JOIN webhook_outbox o ON o.id = a.outbox_id \
             WHERE a.outbox_id = ANY($1) AND o.merchant_wallet = $2 \
             ORDER BY a.outbox_id, a.id DESC",
            &[&ids, &scope.wallet_bytes()],
        )
        .await?
        .iter()
        .map(|a| AttemptRow {
            outbox_id: a.get(0),
            attempt: a.get(1),
            attempted_at: a.get(2),
            url: a.get(3),
            status_code: a.get(4),
            latency_ms: a.get(5),
            error: a.get(6),
            response_excerpt: a.get(7),
        })
        .collect();
    Ok((deliveries, attempts, has_more))
}
