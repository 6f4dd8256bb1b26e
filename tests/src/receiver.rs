//! A merchant's webhook endpoint: a real HTTP server that checks every request's Standard
//! Webhooks signature with the `standardwebhooks` crate (what a merchant would use), answers
//! 204 when it verifies and 401 when it does not, and records what it got.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::oneshot;
use warp::Filter;
use warp::http::{HeaderMap, StatusCode};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `webhook-id` (the event id).
    pub id: String,
    /// The payload's `type`.
    pub kind: String,
    pub body: Value,
    /// Whether the signature checked out against the secret set at the time.
    pub verified: bool,
    /// Why not, when it did not.
    pub error: Option<String>,
}

#[derive(Default)]
struct State {
    secret: Option<String>,
    got: Vec<Delivery>,
}

/// A running receiver; stops when dropped.
pub struct WebhookReceiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    _stop: oneshot::Sender<()>,
}

impl WebhookReceiver {
    /// Listens on `addr` (port 0 picks one).
    pub async fn start(addr: SocketAddr) -> Result<WebhookReceiver> {
        let state: Arc<Mutex<State>> = Arc::default();
        let st = state.clone();
        let route = warp::post()
            .and(warp::header::headers_cloned())
            .and(warp::body::bytes())
            .map(move |headers: HeaderMap, body: Bytes| {
                let delivery = check(&st.lock().unwrap().secret, &headers, &body);
                let status = if delivery.verified {
                    StatusCode::NO_CONTENT
                } else {
                    StatusCode::UNAUTHORIZED
                };
                st.lock().unwrap().got.push(delivery);
                warp::reply::with_status(warp::reply(), status)
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
        Ok(WebhookReceiver {
            addr,
            state,
            _stop: stop,
        })
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
}

fn check(secret: &Option<String>, headers: &HeaderMap, body: &[u8]) -> Delivery {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let kind = parsed["type"].as_str().unwrap_or_default().to_string();
    let outcome = match secret {
        None => Err("no secret configured yet".to_string()),
        Some(s) => standardwebhooks::Webhook::new(s)
            .map_err(|e| format!("bad secret: {e}"))
            .and_then(|w| w.verify(body, headers).map_err(|e| e.to_string())),
    };
    Delivery {
        id,
        kind,
        body: parsed,
        verified: outcome.is_ok(),
        error: outcome.err(),
    }
}
