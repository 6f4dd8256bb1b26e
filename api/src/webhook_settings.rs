//! The merchant's endpoint settings and delivery history, as the dashboard reads and
//! changes them: validation and JSON here, the SQL in `chainsub_store::webhooks`, where every
//! statement is keyed by the [`MerchantScope`] — one merchant can never see or touch another's
//! endpoint, secrets or deliveries.

use std::collections::HashMap;
use std::time::Duration;

use chainsub_store::MerchantScope;
use chainsub_store::outbox::{self, Retry};
use chainsub_store::webhooks::{self as store, AttemptRow, DeliveryRow};
use chainsub_views::{AttemptView, ListView, WebhookDeliveryView, WebhookEndpointView};
use chainsub_webhooks::WebhookSecret;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Client;
use url::Url;

use crate::http::error::{ApiError, Result};

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
    merchant: &MerchantScope,
    url: Option<&WebhookUrl>,
) -> Result<()> {
    let url = url.map(|u| u.url().as_str());
    let secret = WebhookSecret::generate();
    Ok(store::set_url(client, merchant, url, secret.expose()).await?)
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
pub async fn reveal_secrets(
    client: &mut Client,
    merchant: &MerchantScope,
) -> Result<Vec<LiveSecret>> {
    let first = WebhookSecret::generate();
    store::reveal_secrets(client, merchant, first.expose())
        .await?
        .into_iter()
        .map(|r| {
            Ok(LiveSecret {
                secret: WebhookSecret::parse(&r.secret).map_err(|_| {
                    ApiError::Internal("malformed webhook secret in database".into())
                })?,
                created_at: r.created_at,
                expires_at: r.expires_at,
            })
        })
        .collect()
}

/// Rotates: the current secret keeps signing for `overlap`, a new one becomes current.
pub async fn rotate_secret(
    client: &mut Client,
    merchant: &MerchantScope,
    overlap: Duration,
) -> Result<WebhookSecret> {
    let secret = WebhookSecret::generate();
    store::rotate_secret(client, merchant, overlap, secret.expose()).await?;
    Ok(secret)
}

/// The endpoint as the dashboard shows it.
pub async fn endpoint(client: &Client, merchant: &MerchantScope) -> Result<Value> {
    let e = store::endpoint(client, merchant).await?;
    serde_json::to_value(WebhookEndpointView::from(&e))
        .map_err(|e| ApiError::Internal(format!("serializing the endpoint: {e}")))
}

/// Re-enables an endpoint disabled after a 410; held deliveries resume.
pub async fn enable(client: &Client, merchant: &MerchantScope) -> Result<()> {
    Ok(store::enable(client, merchant).await?)
}

/// Queues a dashboard test event (its body is `payload`, sent as is). Returns the delivery id.
pub async fn enqueue_test(
    client: &Client,
    merchant: &MerchantScope,
    event_id: &str,
    payload: &Value,
) -> Result<i64> {
    Ok(outbox::enqueue_test(client, merchant, event_id, payload).await?)
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
/// waiting one). A delivery in flight right now, or of an event a reorg removed, is a 409. Unknown or another merchant's
/// delivery is a 404.
pub async fn retry(client: &Client, merchant: &MerchantScope, outbox_id: i64) -> Result<()> {
    match outbox::retry(client, merchant, outbox_id).await? {
        Retry::Queued => Ok(()),
        Retry::InFlight => Err(ApiError::Conflict {
            code: "delivery_in_flight",
            message: "this delivery is being attempted right now".into(),
            param: None,
        }),
        Retry::Retracted => Err(ApiError::Conflict {
            code: "delivery_retracted",
            message: "a reorg removed this event from the chain; its event.retracted event \
                      was sent instead"
                .into(),
            param: None,
        }),
        Retry::NotFound => Err(ApiError::not_found("webhook delivery", Some("id"))),
    }
}

/// The deliveries list: each delivery with its own attempts.
pub fn deliveries_view<'a>(
    rows: &'a [DeliveryRow],
    attempt_rows: &'a [AttemptRow],
    has_more: bool,
) -> ListView<WebhookDeliveryView<'a>> {
    let mut attempts: HashMap<i64, Vec<AttemptView<'a>>> = HashMap::new();
    for a in attempt_rows {
        attempts.entry(a.outbox_id).or_default().push(a.into());
    }
    let data = rows
        .iter()
        .map(|r| {
            let mine = attempts.remove(&r.id).unwrap_or_default();
            WebhookDeliveryView::new(delivery_public_id(r.id), r, mine)
        })
        .collect();
    ListView::new(data, has_more)
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
