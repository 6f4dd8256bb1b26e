//! One HTTP attempt: resolve and check the endpoint (SSRF guard), sign, POST with a timeout,
//! never follow redirects, keep a bounded excerpt of the answer, and decide what happens next.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use url::Url;

use super::config::WebhookConfig;
use super::schedule::{apply_retry_after, parse_retry_after};
use super::signing::{WebhookSecret, signature_header};
use chainsub_store::outbox::{NextState, Outcome};

/// Bytes of a receiver's answer kept for the dashboard.
pub const EXCERPT_BYTES: usize = 1024;
/// Pinned clients kept for connection reuse before the cache is cleared.
const MAX_CLIENTS: usize = 512;

/// Sends attempts. Holds one reqwest client per (host, checked addresses), because each
/// client is pinned to the addresses the SSRF guard approved, and reusing it keeps
/// keep-alive connections warm.
pub struct Deliverer {
    cfg: WebhookConfig,
    clients: Mutex<HashMap<(String, Vec<SocketAddr>), reqwest::Client>>,
}

/// The request to send for one claimed row.
pub struct Attempt<'a> {
    /// The outbox row's id.
    pub outbox_id: i64,
    /// This attempt's number (1-based).
    pub attempt: i32,
    /// The event's public id, sent (and signed) as `webhook-id`.
    pub msg_id: &'a str,
    /// The merchant's endpoint URL.
    pub url: &'a str,
    /// The endpoint's live signing secrets, newest first.
    pub secrets: &'a [WebhookSecret],
    /// The JSON body to POST.
    pub body: &'a [u8],
    /// The merchant's wallet (whose endpoint a 410 disables).
    pub wallet: &'a [u8],
}

/// How an attempt ended, before it becomes an [`Outcome`].
#[derive(Debug)]
enum Answer {
    Status {
        code: u16,
        excerpt: String,
        retry_after: Option<Duration>,
    },
    Error(String),
}

impl Deliverer {
    /// A deliverer for these settings.
    pub fn new(cfg: WebhookConfig) -> Self {
        Self {
            cfg,
            clients: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, host: &str, addrs: &[SocketAddr]) -> Result<reqwest::Client, reqwest::Error> {
        let key = (host.to_string(), addrs.to_vec());
        let mut clients = self.clients.lock().expect("client cache lock");
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.cfg.timeout)
            .connect_timeout(self.cfg.timeout)
            // A proxy would resolve the host itself and bypass the pinned, checked address.
            .no_proxy()
            .resolve_to_addrs(host, addrs)
            .user_agent(concat!("Chainsub-Webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    /// Performs one attempt and returns what to persist.
    pub async fn send(&self, a: Attempt<'_>) -> Outcome {
        let attempted_at = Utc::now();
        let started = Instant::now();
        let answer = self.exchange(&a).await;
        let latency = started.elapsed();
        let latency_ms = i32::try_from(latency.as_millis()).unwrap_or(i32::MAX);
        metrics::histogram!("chainsub_webhook_attempt_seconds").record(latency.as_secs_f64());

        let (status_code, error, excerpt, retry_after) = match answer {
            Answer::Status {
                code,
                excerpt,
                retry_after,
            } => {
                let err = (!(200..300).contains(&code)).then(|| format!("HTTP {code}"));
                (Some(i32::from(code)), err, Some(excerpt), retry_after)
            }
            Answer::Error(e) => (None, Some(e), None, None),
        };
        let success = error.is_none();
        let gone = status_code == Some(410);
        let next = if success {
            NextState::Delivered
        } else {
            match self.cfg.retry_schedule.next_delay(a.attempt) {
                None => NextState::Failed,
                Some(d) => {
                    let d = apply_retry_after(d, retry_after, self.cfg.retry_after_max);
                    NextState::Retry(
                        Utc::now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX),
                    )
                }
            }
        };
        let outcome = match &next {
            NextState::Delivered => "delivered",
            NextState::Retry(_) => "retry",
            NextState::Failed => "failed",
        };
        metrics::counter!("chainsub_webhook_attempts_total", "outcome" => outcome).increment(1);
        if success {
            tracing::debug!(
                outbox_id = a.outbox_id,
                msg_id = a.msg_id,
                attempt = a.attempt,
                latency_ms,
                "webhook delivered"
            );
        } else {
            tracing::info!(
                outbox_id = a.outbox_id,
                msg_id = a.msg_id,
                attempt = a.attempt,
                latency_ms,
                error = error.as_deref().unwrap_or_default(),
                outcome,
                "webhook attempt failed"
            );
        }
        Outcome {
            outbox_id: a.outbox_id,
            attempt: a.attempt,
            attempted_at,
            url: a.url.to_string(),
            status_code,
            latency_ms,
            error,
            response_excerpt: excerpt,
            next,
            disable_wallet: gone.then(|| a.wallet.to_vec()),
        }
    }

    async fn exchange(&self, a: &Attempt<'_>) -> Answer {
        let url = match Url::parse(a.url) {
            Ok(u) if u.scheme() == "https" || (u.scheme() == "http" && self.cfg.allow_http) => u,
            // A plain-http URL saved while WEBHOOK_ALLOW_HTTP was on is not delivered to once
            // it is off.
            Ok(u) if u.scheme() == "http" => {
                return Answer::Error(
                    "blocked: http URLs are not delivered to (WEBHOOK_ALLOW_HTTP is off)".into(),
                );
            }
            _ => return Answer::Error("invalid webhook URL".into()),
        };
        let addrs = match self.cfg.address_policy().resolve(&url).await {
            Ok(addrs) => addrs,
            Err(blocked) => return Answer::Error(format!("blocked: {blocked}")),
        };
        let host = url.host_str().unwrap_or_default();
        let client = match self.client(host, &addrs) {
            Ok(c) => c,
            Err(e) => return Answer::Error(format!("client: {e}")),
        };
        let timestamp = Utc::now().timestamp();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let sig = signature_header(a.secrets, a.msg_id, timestamp, a.body);
        for (name, value) in [
            ("webhook-id", a.msg_id.to_string()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", sig),
        ] {
            match HeaderValue::from_str(&value) {
                Ok(v) => headers.insert(name, v),
                Err(_) => return Answer::Error(format!("unencodable {name} header")),
            };
        }
        let resp = match client
            .post(url)
            .headers(headers)
            .body(a.body.to_vec())
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => return Answer::Error(describe(&e)),
        };
        let code = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, Utc::now()));
        let excerpt = read_excerpt(resp).await;
        Answer::Status {
            code,
            excerpt,
            retry_after,
        }
    }
}

/// Reads at most [`EXCERPT_BYTES`] of the body; a body that errors or times out midway
/// still leaves what arrived (the status code already decided the outcome).
async fn read_excerpt(mut resp: reqwest::Response) -> String {
    let mut buf = Vec::new();
    while buf.len() < EXCERPT_BYTES {
        match resp.chunk().await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
            _ => break,
        }
    }
    buf.truncate(EXCERPT_BYTES);
    let mut s = String::from_utf8_lossy(&buf).into_owned();
    // Postgres TEXT cannot hold NUL.
    s.retain(|c| c != '\0');
    s
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".to_string()
    } else if e.is_connect() {
        format!("connect: {}", root_cause(e))
    } else {
        format!("request: {}", root_cause(e))
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}
