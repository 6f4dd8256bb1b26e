//! The merchant's endpoint settings and delivery history, as the dashboard reads and
//! changes them: validation and JSON here, the SQL in `chainsub_store::webhooks`, where every
//! statement is keyed by the [`MerchantScope`] — one merchant can never see or touch another's
//! endpoint, secrets or deliveries.

use chainsub_core::sealed::SealingKeys;
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

use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};

/// Longest accepted webhook URL.
const MAX_URL_LEN: usize = 2048;

/// A webhook URL as accepted at the boundary: absolute, `https` (or `http` when the
/// server allows it for local development), with a host and without credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl(Url);

impl WebhookUrl {
    /// Parses and checks a URL (the SSRF address check happens separately, after DNS).
    pub fn parse(s: &str, allow_http: bool) -> Result<Self> {
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
        Ok(Self(url))
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
    keys: &SealingKeys,
    merchant: &MerchantScope,
    url: Option<&WebhookUrl>,
) -> Result<()> {
    let url = url.map(|u| u.url().as_str());
    let secret = seal(keys, merchant, &WebhookSecret::generate());
    Ok(store::set_url(client, merchant, url, &secret).await?)
}

/// `secret` as stored: sealed under the current key, bound to the merchant's wallet.
fn seal(keys: &SealingKeys, merchant: &MerchantScope, secret: &WebhookSecret) -> String {
    keys.seal(secret.expose(), merchant.wallet_bytes())
}

/// The sealing keys of `cfg`: `api serve` refuses to start without them, so a missing one
/// here is a bug.
pub fn keys(cfg: &crate::config::Config) -> Result<&SealingKeys> {
    cfg.webhooks
        .secrets_keys
        .as_ref()
        .ok_or_else(|| ApiError::Internal("WEBHOOK_SECRETS_KEYS is not set".into()))
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
    keys: &SealingKeys,
    merchant: &MerchantScope,
) -> Result<Vec<LiveSecret>> {
    let first = seal(keys, merchant, &WebhookSecret::generate());
    store::reveal_secrets(client, merchant, &first)
        .await?
        .into_iter()
        .map(|r| {
            let text = keys
                .open(&r.secret, merchant.wallet_bytes())
                .map_err(|e| ApiError::Internal(format!("webhook secret: {e}")))?;
            Ok(LiveSecret {
                secret: WebhookSecret::parse(&text).map_err(|_| {
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
    keys: &SealingKeys,
    merchant: &MerchantScope,
    overlap: Duration,
) -> Result<WebhookSecret> {
    let secret = WebhookSecret::generate();
    store::rotate_secret(client, merchant, overlap, &seal(keys, merchant, &secret)).await?;
    Ok(secret)
}

/// Seals every stored signing secret that is not sealed with the current key: secrets
/// stored before sealing, and after a key rotation those of the older keys. `api serve` runs
/// it at start; returns how many it sealed again.
pub async fn reseal_all(client: &Client, keys: &SealingKeys) -> Result<u64> {
    let mut n = 0;
    for row in store::all_secrets(client).await? {
        if keys.is_current(&row.secret) {
            continue;
        }
        let text = keys
            .open(&row.secret, &row.wallet)
            .map_err(|e| ApiError::Internal(format!("webhook secret {}: {e}", row.id)))?;
        let sealed = keys.seal(&text, &row.wallet);
        n += store::replace_secret(client, row.id, &row.secret, &sealed).await?;
    }
    Ok(n)
}

/// Ends the previous secret's overlap now; the count of secrets ended (0 or 1).
pub async fn revoke_previous_secret(client: &Client, merchant: &MerchantScope) -> Result<u64> {
    Ok(store::revoke_previous_secrets(client, merchant).await?)
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

/// Public delivery ids: `whd_` and 16 hex digits, the outbox row's id under a keyed
/// permutation of 64-bit numbers (a Feistel network over its two halves, round keys derived
/// from the service's checkout signing secret). Opaque like the other ids — consecutive
/// deliveries do not have consecutive ids, so they reveal nothing of the platform's volume —
/// with no column to store or index on the indexer's write path. Changing
/// `CHECKOUT_SIGNING_SECRET` changes every delivery's id (they are only shown in the
/// dashboard).
#[derive(Clone)]
pub struct DeliveryIds {
    rounds: [[u8; 32]; 8],
}

impl DeliveryIds {
    pub fn new(secret: &str) -> Self {
        use sha2::{Digest, Sha256};
        let mut rounds = [[0u8; 32]; 8];
        for (i, key) in rounds.iter_mut().enumerate() {
            let mut h = Sha256::new();
            h.update(b"chainsub delivery ids\0");
            h.update([i as u8]);
            h.update(secret.as_bytes());
            *key = h.finalize().into();
        }
        Self { rounds }
    }

    fn f(key: &[u8; 32], half: u32) -> u32 {
        use sha2::{Digest, Sha256};
        let d = Sha256::new()
            .chain_update(key)
            .chain_update(half.to_be_bytes())
            .finalize();
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    fn permute(&self, n: u64, forward: bool) -> u64 {
        let (mut l, mut r) = ((n >> 32) as u32, n as u32);
        if forward {
            for key in &self.rounds {
                (l, r) = (r, l ^ Self::f(key, r));
            }
        } else {
            for key in self.rounds.iter().rev() {
                (l, r) = (r ^ Self::f(key, l), l);
            }
        }
        (u64::from(l) << 32) | u64::from(r)
    }

    /// The public id of outbox row `id`.
    pub fn public(&self, id: i64) -> String {
        format!("whd_{:016x}", self.permute(id as u64, true))
    }

    /// The outbox row of a public id; `None` for anything [`DeliveryIds::public`] never made.
    pub fn parse(&self, s: &str) -> Option<i64> {
        let hex = s.strip_prefix("whd_")?;
        if hex.len() != 16 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let id = self.permute(u64::from_str_radix(hex, 16).ok()?, false) as i64;
        (id > 0).then_some(id)
    }
}

/// Puts a delivery back in the queue for an immediate attempt (a failed, delivered or
/// waiting one). A delivery in flight right now, or of an event a reorg removed, is a 409. Unknown or another merchant's
/// delivery is a 404.
pub async fn retry(client: &Client, merchant: &MerchantScope, outbox_id: i64) -> Result<()> {
    match outbox::retry(client, merchant, outbox_id).await? {
        Retry::Queued => Ok(()),
        Retry::InFlight => Err(ApiError::Conflict {
            code: Code::DeliveryInFlight,
            message: "this delivery is being attempted right now".into(),
            param: None,
        }),
        Retry::Retracted => Err(ApiError::Conflict {
            code: Code::DeliveryRetracted,
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
    ids: &DeliveryIds,
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
            WebhookDeliveryView::new(ids.public(r.id), r, mine)
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

    /// Issue 46, point 23: delivery ids used to be `whd_<outbox id>`.
    #[test]
    fn delivery_ids_are_opaque_round_trip_and_reject_garbage() {
        let ids = DeliveryIds::new("secret");
        let mut seen = std::collections::HashSet::new();
        for n in (1..2_000).chain([i64::MAX, 1 << 40]) {
            let public = ids.public(n);
            assert_eq!(public.len(), 20, "{public}");
            assert_eq!(ids.parse(&public), Some(n));
            assert!(seen.insert(public));
        }
        // Ids in outbox order are in no order: about as many rise as fall.
        let rising = (1..1_000)
            .filter(|n| ids.public(*n) < ids.public(n + 1))
            .count();
        assert!((300..700).contains(&rising), "{rising} of 999 rise");
        // Neighbours do not look like neighbours.
        let (a, b) = (ids.public(1000), ids.public(1001));
        let same = a
            .bytes()
            .zip(b.bytes())
            .skip(4)
            .filter(|(x, y)| x == y)
            .count();
        assert!(same < 8, "{a} {b}");
        // Another secret, other ids.
        assert_ne!(DeliveryIds::new("other").public(1000), a);
        for bad in [
            "whd_",
            "whd_42",
            "whd_x",
            "evt_1",
            "whd_ABCDEF0123456789",
            "whd_00000000000000001",
        ] {
            assert_eq!(ids.parse(bad), None, "{bad}");
        }
    }
}
