//! The dashboard's webhook settings: the endpoint, its signing secrets, and recent
//! deliveries with their attempts (times with milliseconds: attempts are seconds apart).

use chainsub_core::OutboxStatus;
use chainsub_store::webhooks::{AttemptRow, DeliveryRow, Endpoint};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::rfc3339_millis;

/// `GET/PUT /api/v1/webhooks/endpoint`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEndpointView<'a> {
    pub object: &'static str,
    pub url: Option<&'a str>,
    pub enabled: bool,
    pub disabled_reason: Option<&'a str>,
}

impl<'a> From<&'a Endpoint> for WebhookEndpointView<'a> {
    fn from(e: &'a Endpoint) -> Self {
        WebhookEndpointView {
            object: "webhook_endpoint",
            url: e.url.as_deref(),
            enabled: e.enabled,
            disabled_reason: e.disabled_reason.as_deref(),
        }
    }
}

/// The signing secrets (revealed): the current one and those still signing during a rotation.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSecretsView<'a> {
    pub object: &'static str,
    pub secret: Option<&'a str>,
    #[serde(serialize_with = "super::opt_time")]
    pub created_at: Option<DateTime<Utc>>,
    pub previous: Vec<PreviousSecretView<'a>>,
}

/// A rotated-out secret and when it stops signing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviousSecretView<'a> {
    pub secret: &'a str,
    #[serde(serialize_with = "super::opt_time")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// `POST /api/v1/webhooks/secret/rotate`: the new secret, shown once.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotatedSecretView<'a> {
    pub object: &'static str,
    pub secret: &'a str,
    #[serde(serialize_with = "super::time")]
    pub previous_expires_at: DateTime<Utc>,
}

/// A delivery just queued (a test event or a retry).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedDeliveryView<'a> {
    pub id: &'a str,
    pub object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<&'a str>,
    pub status: OutboxStatus,
}

/// One delivery (an outbox row) with its attempts, newest first.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDeliveryView<'a> {
    /// `whd_` and 16 hex digits (opaque: `webhook_settings::DeliveryIds`).
    pub id: String,
    pub object: &'static str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub test: bool,
    pub status: OutboxStatus,
    pub attempt_count: i32,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<&'a str>,
    pub created_at: String,
    pub delivered_at: Option<String>,
    /// Waiting for this earlier event of the same subscription (delivered in chain order).
    pub held_by: Option<&'a str>,
    pub attempts: Vec<AttemptView<'a>>,
}

impl<'a> WebhookDeliveryView<'a> {
    /// `r` as `id`, with `attempts` (already newest first).
    pub fn new(id: String, r: &'a DeliveryRow, attempts: Vec<AttemptView<'a>>) -> Self {
        let waiting = matches!(r.status, OutboxStatus::Pending | OutboxStatus::Delivering);
        WebhookDeliveryView {
            id,
            object: "webhook_delivery",
            event_id: &r.event_id,
            event_type: r.event_type.as_deref(),
            test: r.test,
            status: r.status,
            attempt_count: r.attempts,
            next_attempt_at: waiting.then(|| rfc3339_millis(&r.next_attempt_at)),
            last_error: r.last_error.as_deref(),
            created_at: rfc3339_millis(&r.created_at),
            delivered_at: r.delivered_at.as_ref().map(rfc3339_millis),
            held_by: r.held_by.as_deref(),
            attempts,
        }
    }
}

/// One HTTP attempt of a delivery.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView<'a> {
    pub attempt: i32,
    pub attempted_at: String,
    pub url: &'a str,
    pub status_code: Option<i32>,
    pub latency_ms: Option<i32>,
    pub error: Option<&'a str>,
    pub response_excerpt: Option<&'a str>,
}

impl<'a> From<&'a AttemptRow> for AttemptView<'a> {
    fn from(a: &'a AttemptRow) -> Self {
        AttemptView {
            attempt: a.attempt,
            attempted_at: rfc3339_millis(&a.attempted_at),
            url: &a.url,
            status_code: a.status_code,
            latency_ms: a.latency_ms,
            error: a.error.as_deref(),
            response_excerpt: a.response_excerpt.as_deref(),
        }
    }
}
