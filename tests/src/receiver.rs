//! The one webhook receiver of every test: a real HTTP server on port 0 that records each
//! request (headers and raw body), checks its Standard Webhooks signature with the
//! `standardwebhooks` crate (what a merchant would use) once a secret is set, and answers as
//! told: by default 204 when the signature verifies and 401 when it does not; [`ok`] answers
//! 200 to everything; [`scripted`] answers request number `n` as a script says. While a
//! [`gate`](WebhookReceiver::gate) is set, every request waits on it (a hung endpoint).
//!
//! [`ok`]: WebhookReceiver::ok
//! [`scripted`]: WebhookReceiver::scripted

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{Notify, oneshot};
use warp::Filter;
use warp::http::{HeaderMap, StatusCode};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `webhook-id` (the event id).
    pub id: String,
    /// The payload's `type`.
    pub kind: String,
    pub headers: HeaderMap,
    /// The body as received, byte for byte.
    pub body: Bytes,
    /// The body parsed (`null` when it is not JSON).
    pub json: Value,
    /// Whether the signature checked out against the secret set at the time.
    pub verified: bool,
    /// Why not, when it did not.
    pub error: Option<String>,
}

impl Delivery {
    /// The `webhook-id` header.
    pub fn webhook_id(&self) -> String {
        self.id.clone()
    }
}

/// How the receiver answers request number `n` (0-based, per receiver): a status and extra
/// headers.
pub type Script = Arc<dyn Fn(usize, &Delivery) -> (u16, Vec<(&'static str, String)>) + Send + Sync>;

#[derive(Default)]
struct State {
    secret: Option<String>,
    got: Vec<Delivery>,
}

/// A running receiver; stops when dropped.
pub struct WebhookReceiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Notified on every request.
    pub arrived: Arc<Notify>,
    /// While `Some`, every request waits here before answering.
    pub gate: Arc<Mutex<Option<Arc<Notify>>>>,
    _stop: oneshot::Sender<()>,
}

impl WebhookReceiver {
    /// Listens on `addr` (port 0 picks one); 204 when the signature verifies, else 401.
    pub async fn start(addr: SocketAddr) -> Result<Self> {
        let script: Script = Arc::new(|_, d| (if d.verified { 204 } else { 401 }, vec![]));
        Self::listen(addr, script).await
    }

    /// On 127.0.0.1, answering 200 to everything.
    pub async fn ok() -> Self {
        Self::scripted(Arc::new(|_, _| (200, vec![]))).await
    }

    /// On 127.0.0.1, answering by `script`.
    pub async fn scripted(script: Script) -> Self {
        Self::listen(([127, 0, 0, 1], 0).into(), script)
            .await
            .expect("bind a webhook receiver on 127.0.0.1:0")
    }

    async fn listen(addr: SocketAddr, script: Script) -> Result<Self> {
        let state: Arc<Mutex<State>> = Arc::default();
        let arrived = Arc::new(Notify::new());
        let gate: Arc<Mutex<Option<Arc<Notify>>>> = Arc::default();
        let (st, ar, gt) = (state.clone(), arrived.clone(), gate.clone());
        let route = warp::post()
            .and(warp::header::headers_cloned())
            .and(warp::body::bytes())
            .then(move |headers: HeaderMap, body: Bytes| {
                let (state, arrived, gate, script) =
                    (st.clone(), ar.clone(), gt.clone(), script.clone());
                async move {
                    let (d, n) = {
                        let mut s = state.lock().unwrap();
                        let d = check(s.secret.as_deref(), headers, body);
                        s.got.push(d.clone());
                        (d, s.got.len() - 1)
                    };
                    arrived.notify_waiters();
                    let wait = gate.lock().unwrap().clone();
                    if let Some(w) = wait {
                        // Registered before looking again, so a release in between (which
                        // takes the gate, then notifies) is never missed.
                        let notified = w.notified();
                        tokio::pin!(notified);
                        notified.as_mut().enable();
                        let still = gate
                            .lock()
                            .unwrap()
                            .as_ref()
                            .is_some_and(|g| Arc::ptr_eq(g, &w));
                        if still {
                            notified.await;
                        }
                    }
                    let (status, headers) = script(n, &d);
                    let mut resp = warp::http::Response::builder()
                        .status(StatusCode::from_u16(status).expect("a status code"));
                    for (k, v) in headers {
                        resp = resp.header(k, v);
                    }
                    Ok::<_, Infallible>(resp.body(format!("answer {n}")).expect("a response"))
                }
            });
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(
            warp::serve(route)
                .incoming(listener)
                .graceful(async move {
                    let _ = stopped.await;
                })
                .run(),
        );
        Ok(Self {
            addr,
            state,
            arrived,
            gate,
            _stop: stop,
        })
    }

    /// Holds every request from now on (a hung endpoint) until [`release`](Self::release).
    pub fn hold(&self) {
        *self.gate.lock().unwrap() = Some(Arc::new(Notify::new()));
    }

    /// Lets the held requests, and every later one, through.
    pub fn release(&self) {
        if let Some(gate) = self.gate.lock().unwrap().take() {
            gate.notify_waiters();
        }
    }

    /// The URL to give the dashboard.
    pub fn url(&self) -> String {
        format!("http://{}/webhooks/chainsub", self.addr)
    }

    /// The signing secret (`whsec_…`) requests are checked against from now on.
    pub fn set_secret(&self, secret: &str) {
        self.state.lock().unwrap().secret = Some(secret.to_string());
    }

    /// Everything received so far, in arrival order.
    pub fn received(&self) -> Vec<Delivery> {
        self.state.lock().unwrap().got.clone()
    }

    /// How many requests arrived.
    pub fn count(&self) -> usize {
        self.state.lock().unwrap().got.len()
    }

    /// Waits (bounded, generously: 60 s) until `pred` holds on what was received.
    pub async fn wait_until(&self, what: &str, pred: impl Fn(&[Delivery]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let notified = self.arrived.notified();
            if pred(&self.state.lock().unwrap().got) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for: {what} (received {})",
                self.count()
            );
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }
}

// docs/integration.md shows this function, from its doc comment to its end, as the Rust way
// to verify a delivery (tests/tests/it/guide_snippets.rs holds the two equal).
/// The event a delivery carries, or why it must be refused: the Standard Webhooks signature
/// of the raw body as received, checked with the endpoint's signing secret (`whsec_…`).
pub fn verify_delivery(
    secret: &str,
    raw_body: &[u8],
    headers: &HeaderMap,
) -> Result<Value, String> {
    let webhook = standardwebhooks::Webhook::new(secret).map_err(|e| format!("bad secret: {e}"))?;
    webhook
        .verify(raw_body, headers)
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(raw_body).map_err(|e| e.to_string())
}

fn check(secret: Option<&str>, headers: HeaderMap, body: Bytes) -> Delivery {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let kind = json["type"].as_str().unwrap_or_default().to_string();
    let outcome = match secret {
        None => Err("no secret configured yet".to_string()),
        Some(s) => verify_delivery(s, &body, &headers).map(|_| ()),
    };
    Delivery {
        id,
        kind,
        headers,
        body,
        json,
        verified: outcome.is_ok(),
        error: outcome.err(),
    }
}
