// Shared by the webhook tests: a real HTTP receiver on port 0 that records every request
// and answers as the test scripts it, plus seeding helpers shaped like the indexer's rows.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chainsub_api::webhook_settings::{self as settings, WebhookUrl};
use chainsub_store::MerchantScope;
use chainsub_webhooks::WebhookConfig;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{Notify, oneshot};
use tokio_postgres::{Client, NoTls};
use warp::Filter;
use warp::http::{HeaderMap, StatusCode};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn webhook_id(&self) -> String {
        self.headers["webhook-id"].to_str().unwrap().to_string()
    }
}

/// How the receiver answers request number `n` (0-based, counted per receiver): a status
/// and optional extra headers.
pub type Script = Arc<dyn Fn(usize, &Received) -> (u16, Vec<(&'static str, String)>) + Send + Sync>;

/// A recording webhook receiver.
pub struct Receiver {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Received>>>,
    /// Notified on every request.
    pub arrived: Arc<Notify>,
    /// While `Some`, every request waits here before answering (a hung endpoint).
    pub gate: Arc<Mutex<Option<Arc<Notify>>>>,
    _stop: oneshot::Sender<()>,
}

impl Receiver {
    /// Answers 200 to everything.
    pub async fn ok() -> Receiver {
        Receiver::start(Arc::new(|_, _| (200, vec![]))).await
    }

    /// Answers by `script`.
    pub async fn start(script: Script) -> Receiver {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let arrived = Arc::new(Notify::new());
        let gate: Arc<Mutex<Option<Arc<Notify>>>> = Arc::default();
        let (g, a, gt) = (got.clone(), arrived.clone(), gate.clone());
        let route = warp::post()
            .and(warp::header::headers_cloned())
            .and(warp::body::bytes())
            .then(move |headers: HeaderMap, body: Bytes| {
                let (got, arrived, gate, script) =
                    (g.clone(), a.clone(), gt.clone(), script.clone());
                async move {
                    let r = Received { headers, body };
                    let n = {
                        let mut got = got.lock().unwrap();
                        got.push(r.clone());
                        got.len() - 1
                    };
                    arrived.notify_waiters();
                    let wait = gate.lock().unwrap().clone();
                    if let Some(w) = wait {
                        w.notified().await;
                    }
                    let (status, headers) = script(n, &r);
                    let mut resp = warp::http::Response::builder()
                        .status(StatusCode::from_u16(status).unwrap());
                    for (k, v) in headers {
                        resp = resp.header(k, v);
                    }
                    Ok::<_, Infallible>(resp.body(format!("answer {n}")).unwrap())
                }
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(
            warp::serve(route)
                .incoming(listener)
                .graceful(async move {
                    let _ = stopped.await;
                })
                .run(),
        );
        Receiver {
            addr,
            got,
            arrived,
            gate,
            _stop: stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.addr.port())
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.got.lock().unwrap().len()
    }

    /// Waits (bounded, generously) until `pred` holds on what was received.
    pub async fn wait_until(&self, what: &str, pred: impl Fn(&[Received]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let notified = self.arrived.notified();
            if pred(&self.got.lock().unwrap()) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for: {what} (received {})", self.count());
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }
}

/// A pool on the test database.
pub fn pool(url: &str) -> Pool {
    let mgr = Manager::from_config(
        url.parse().unwrap(),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(mgr)
        .max_size(8)
        .runtime(Runtime::Tokio1)
        .build()
        .unwrap()
}

/// Millisecond-scale settings that allow loopback receivers.
pub fn fast_config(schedule: &str) -> WebhookConfig {
    WebhookConfig {
        timeout: Duration::from_secs(5),
        retry_schedule: schedule.parse().unwrap(),
        lease: Duration::from_secs(10),
        poll_interval: Duration::from_millis(20),
        allow_loopback: true,
        allow_http: true,
        ..WebhookConfig::default()
    }
}

/// A 20-byte wallet made of one repeated byte.
pub fn wallet(b: u8) -> Vec<u8> {
    vec![b; 20]
}

/// The merchant of wallet `wallet_byte` x 20, created as a dashboard sign-in would, and its
/// scope (what authentication hands the dashboard's code).
pub async fn merchant(client: &Client, wallet_byte: u8) -> MerchantScope {
    chainsub_store::merchants::sign_in(client, alloy::primitives::Address::repeat_byte(wallet_byte))
        .await
        .unwrap()
}

/// Sets the merchant's webhook URL through the dashboard's code path.
pub async fn set_url(client: &mut Client, merchant: &MerchantScope, url: &str) {
    let url = WebhookUrl::parse(url, true).unwrap();
    settings::set_url(client, merchant, Some(&url))
        .await
        .unwrap();
}

/// Queues `n` events for the merchant as outbox rows with a fixed payload (the body the
/// dispatcher sends as is), ids `evt_<prefix>_<i>`.
pub async fn enqueue(client: &Client, wallet_byte: u8, prefix: &str, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("evt_{prefix}_{i}")).collect();
    let payloads: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "event", "type": "webhook.test", "data": {"n": id}}))
        .collect();
    client
        .execute(
            "INSERT INTO webhook_outbox (event_public_id, merchant_wallet, test_payload)
             SELECT id, $2, p FROM unnest($1::text[], $3::jsonb[]) AS u(id, p)",
            &[&ids, &wallet(wallet_byte), &payloads],
        )
        .await
        .unwrap();
    ids
}

/// Runs an in-process dispatcher until the returned sender is dropped or fired.
pub fn spawn_dispatcher(
    db_url: &str,
    cfg: WebhookConfig,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let pool = pool(db_url);
    let url = db_url.to_string();
    let task = tokio::spawn(async move {
        chainsub_webhooks::dispatcher::run(pool, url, cfg, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (stop, task)
}

/// The outbox row of an event: (status, attempts).
pub async fn outbox_state(client: &Client, event_id: &str) -> (String, i32) {
    let r = client
        .query_one(
            "SELECT status, attempts FROM webhook_outbox WHERE event_public_id = $1",
            &[&event_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// Waits (bounded) until the event's outbox row has `status`.
pub async fn wait_status(client: &Client, event_id: &str, status: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (s, a) = outbox_state(client, event_id).await;
        if s == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{event_id} stuck in {s} after {a} attempts, wanted {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Attempts of an event: (attempt, status_code, error).
pub async fn attempts(client: &Client, event_id: &str) -> Vec<(i32, Option<i32>, Option<String>)> {
    client
        .query(
            "SELECT a.attempt, a.status_code, a.error FROM webhook_attempts a
             JOIN webhook_outbox o ON o.id = a.outbox_id WHERE o.event_public_id = $1 ORDER BY a.id",
            &[&event_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}
