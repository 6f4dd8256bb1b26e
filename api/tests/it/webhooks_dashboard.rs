// The dashboard's webhook endpoints over real HTTP (session cookie + CSRF, never the API
// key), and the end-to-end path from an indexed event to a signed webhook whose body is the
// Event object `GET /api/v1/events` returns.

use crate::api_common::{SNAP_COLUMNS, snap_from_json};
use crate::webhooks_common::*;
use alloy::primitives::Address;
use chainsub_api::server::{self, Running};
use chainsub_api::{Config, merchants};
use chainsub_tests::TestDb;
use clap::Parser;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use standardwebhooks::Webhook;
use tokio::sync::oneshot;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    cfg: Config,
}

async fn start(db: &TestDb, extra: &[&str]) -> Running {
    start_with_keys(db, Some(chainsub_tests::TEST_WEBHOOK_SECRETS_KEYS), extra)
        .await
        .unwrap()
}

/// [`start`] with `keys` as WEBHOOK_SECRETS_KEYS (none when `None`).
async fn start_with_keys(
    db: &TestDb,
    keys: Option<&str>,
    extra: &[&str],
) -> chainsub_api::http::error::Result<Running> {
    let mut args = vec![
        "api",
        "--database-url",
        &db.url,
        "--listen",
        "127.0.0.1:0",
        "--contract-address",
        "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "--usdc-address",
        "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
        "--checkout-signing-secret",
        "test-checkout-secret",
        "--no-migrate",
        "--rate-limit-ip-per-sec",
        "1000",
        "--rate-limit-ip-burst",
        "1000",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    if let Some(keys) = keys {
        args.extend_from_slice(&["--webhook-secrets-keys", keys]);
    }
    args.extend_from_slice(extra);
    server::start(Cli::parse_from(args).cfg).await
}

/// The server's dispatcher, run in process until [`Dispatcher::stop`].
struct Dispatcher {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<chainsub_api::http::error::Result<()>>,
}

impl Dispatcher {
    fn start(running: &Running) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(chainsub_api::dispatch::run_dispatcher(
            running.ctx.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

/// Flags of a server whose dispatcher delivers to a local receiver at once.
const DELIVERING: &[&str] = &[
    "--webhook-allow-http",
    "--webhook-allow-loopback",
    "--webhook-poll-interval",
    "20ms",
];

/// A signed-in dashboard user: (merchant id, cookie header, csrf token).
async fn sign_in(
    running: &Running,
    db: &TestDb,
    wallet_byte: u8,
) -> (chainsub_store::MerchantScope, String, String) {
    let client = db.connect().await;
    let m = merchants::find_or_create(&client, Address::repeat_byte(wallet_byte))
        .await
        .unwrap();
    let (cookie, session) = chainsub_api::auth::session::create(&client, &m, 3600)
        .await
        .unwrap();
    let name = chainsub_api::auth::session::cookie_name(&running.ctx.cfg);
    (m, format!("{name}={cookie}"), session.csrf_token)
}

struct Dash {
    base: String,
    cookie: String,
    csrf: String,
    http: reqwest::Client,
}

impl Dash {
    /// The dashboard of the merchant with wallet `0xbb…bb` (`wallet_byte`), signed in.
    async fn sign_in(running: &Running, db: &TestDb, wallet_byte: u8) -> Self {
        let (_m, cookie, csrf) = sign_in(running, db, wallet_byte).await;
        Self {
            base: running.url(),
            cookie,
            csrf,
            http: reqwest::Client::new(),
        }
    }

    /// Sets the webhook URL (200 expected).
    async fn set_url(&self, url: &str) {
        let (status, body) = self
            .call(
                Method::PUT,
                "/dashboard/api/webhook/url",
                Some(json!({ "url": url })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("x-csrf-token", &self.csrf);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_url_is_set_only_with_a_session_and_csrf_and_is_validated() {
    let db = TestDb::create().await;
    let running = start(&db, &[]).await;
    let (_m, cookie, csrf) = sign_in(&running, &db, 0x11).await;
    let mut pg = db.connect().await;
    let (_, key) =
        chainsub_api::auth::api_key::admin_create_key(&mut pg, Address::repeat_byte(0x11))
            .await
            .unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/dashboard/api/webhook/url", running.url());
    let body = json!({"url": "https://93.184.215.14/hooks"});

    let r = http.put(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "no session");
    let r = http
        .put(&url)
        .bearer_auth(key.expose())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "the API key cannot set the webhook URL"
    );
    let r = http
        .put(&url)
        .header("cookie", &cookie)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "no CSRF token");

    let dash = Dash {
        base: running.url(),
        cookie,
        csrf,
        http,
    };
    for bad in [
        "http://93.184.215.14/hooks",     // plain http outside local-dev mode
        "https://127.0.0.1/hooks",        // loopback
        "https://localhost/hooks",        // resolves to loopback
        "https://10.1.2.3/hooks",         // private
        "https://169.254.169.254/latest", // metadata
        "https://[::ffff:192.168.0.1]/",  // v4-mapped private
        "not a url",
    ] {
        let (status, err) = dash
            .call(
                Method::PUT,
                "/dashboard/api/webhook/url",
                Some(json!({"url": bad})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {err}");
        assert_eq!(err["error"]["param"], "url", "{bad}");
    }
    let (status, ep) = dash
        .call(Method::PUT, "/dashboard/api/webhook/url", Some(body))
        .await;
    assert_eq!(status, StatusCode::OK, "{ep}");
    assert_eq!(ep["url"], "https://93.184.215.14/hooks");
    let (_, ep) = dash.call(Method::GET, "/dashboard/api/webhook", None).await;
    assert_eq!(ep["url"], "https://93.184.215.14/hooks");
    assert_eq!(ep["enabled"], true);
    let (status, ep) = dash
        .call(
            Method::PUT,
            "/dashboard/api/webhook/url",
            Some(json!({"url": null})),
        )
        .await;
    assert_eq!((status, ep["url"].clone()), (StatusCode::OK, Value::Null));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_reveals_rotates_sends_test_events_lists_and_retries_deliveries() {
    let db = TestDb::create().await;
    let running = start(&db, DELIVERING).await;
    let dispatcher = Dispatcher::start(&running);
    let rx = WebhookReceiver::ok().await;
    let dash = Dash::sign_in(&running, &db, 0x22).await;
    dash.set_url(&rx.url()).await;

    let (_, s1) = dash
        .call(Method::GET, "/dashboard/api/webhook/secret", None)
        .await;
    let secret1 = s1["secret"].as_str().unwrap().to_string();
    assert!(secret1.starts_with("whsec_"));
    assert_eq!(s1["previous"], json!([]));

    let (status, t1) = dash
        .call(Method::POST, "/dashboard/api/webhook/test", None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    rx.wait_until("test event", |r| r.len() == 1).await;
    let got = rx.received()[0].clone();
    assert_eq!(got.webhook_id(), t1["eventId"].as_str().unwrap());
    Webhook::new(&secret1)
        .unwrap()
        .verify(&got.body, &got.headers)
        .unwrap();
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body["type"], "webhook.test");
    // The test event is the OpenAPI document's `webhook.test`: its body and its id.
    let doc: Value = serde_json::from_str(chainsub_api::routes::openapi::OPENAPI_JSON).unwrap();
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "$ref": "#/components/schemas/TestEvent",
    });
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&root)
        .unwrap();
    assert!(validator.is_valid(&body), "{body}");
    let id_pattern = doc["webhooks"]["webhook.test"]["post"]["parameters"][0]["schema"]["pattern"]
        .as_str()
        .unwrap();
    assert_eq!(id_pattern, "^evt_test_[0-9a-f]{32}$");
    let id = got.webhook_id();
    assert!(
        id.len() == 41
            && id.starts_with("evt_test_")
            && id[9..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{id}"
    );

    let (status, s2) = dash
        .call(Method::POST, "/dashboard/api/webhook/secret/rotate", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let secret2 = s2["secret"].as_str().unwrap().to_string();
    assert_ne!(secret1, secret2);
    let (_, live) = dash
        .call(Method::GET, "/dashboard/api/webhook/secret", None)
        .await;
    assert_eq!(live["secret"], secret2.as_str());
    assert_eq!(live["previous"][0]["secret"], secret1.as_str());
    dash.call(Method::POST, "/dashboard/api/webhook/test", None)
        .await;
    rx.wait_until("second test event", |r| r.len() == 2).await;
    let got = rx.received()[1].clone();
    for s in [&secret1, &secret2] {
        Webhook::new(s)
            .unwrap()
            .verify(&got.body, &got.headers)
            .unwrap();
    }

    // Both deliveries are listed, newest first, with their attempt.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let list = loop {
        let (_, list) = dash
            .call(
                Method::GET,
                "/dashboard/api/webhook/deliveries?limit=10",
                None,
            )
            .await;
        if list["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["status"] == "delivered")
        {
            break list;
        }
        assert!(tokio::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["id"], t1["id"]);
    assert_eq!(data[1]["attempts"][0]["statusCode"], 200);
    assert_eq!(data[1]["attempts"][0]["responseExcerpt"], "answer 0");

    // Retry the first: delivered again under the same webhook-id.
    let path = format!(
        "/dashboard/api/webhook/deliveries/{}/retry",
        t1["id"].as_str().unwrap()
    );
    let (status, _) = dash.call(Method::POST, &path, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    rx.wait_until("retried delivery", |r| r.len() == 3).await;
    assert_eq!(
        rx.received()[2].webhook_id(),
        t1["eventId"].as_str().unwrap()
    );

    // Unknown ids and another merchant's deliveries are 404.
    let (status, _) = dash
        .call(
            Method::POST,
            "/dashboard/api/webhook/deliveries/whd_0123456789abcdef/retry",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let other = Dash::sign_in(&running, &db, 0x33).await;
    let (status, _) = other.call(Method::POST, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, theirs) = other
        .call(Method::GET, "/dashboard/api/webhook/deliveries", None)
        .await;
    assert_eq!(theirs["data"], json!([]));

    // The dispatcher's metrics are served with the API's.
    let metrics = reqwest::get(format!("http://{}/metrics", running.metrics_addr.unwrap()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "chainsub_webhook_attempts_total",
        "chainsub_webhook_attempt_seconds",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }

    // Issue 46, point 19: two more rotations within the overlap leave the current secret
    // and one previous live (each rotation used to add a signature to every delivery), and
    // the previous one can be revoked at once.
    for _ in 0..2 {
        dash.call(Method::POST, "/dashboard/api/webhook/secret/rotate", None)
            .await;
    }
    let (_, live) = dash
        .call(Method::GET, "/dashboard/api/webhook/secret", None)
        .await;
    assert_eq!(live["previous"].as_array().unwrap().len(), 1, "{live}");
    let signatures = |got: &chainsub_tests::receiver::Delivery| {
        got.headers
            .get("webhook-signature")
            .unwrap()
            .to_str()
            .unwrap()
            .split(' ')
            .count()
    };
    let n = rx.received().len();
    dash.call(Method::POST, "/dashboard/api/webhook/test", None)
        .await;
    rx.wait_until("a test event", |r| r.len() == n + 1).await;
    assert_eq!(signatures(&rx.received()[n]), 2, "current and one previous");
    let (status, live) = dash
        .call(
            Method::POST,
            "/dashboard/api/webhook/secret/revoke-previous",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{live}");
    assert_eq!(live["previous"], json!([]), "{live}");
    let current = live["secret"].as_str().unwrap().to_string();
    dash.call(Method::POST, "/dashboard/api/webhook/test", None)
        .await;
    rx.wait_until("another test event", |r| r.len() == n + 2)
        .await;
    let got = rx.received()[n + 1].clone();
    assert_eq!(signatures(&got), 1, "the current secret alone");
    Webhook::new(&current)
        .unwrap()
        .verify(&got.body, &got.headers)
        .unwrap();

    dispatcher.stop().await;
    running.shutdown().await;
}

/// The subscription of [`index_charged_event`]'s event.
fn charged_sub_id() -> String {
    chainsub_core::SubscriptionId::of_creation(31337, [0xabu8; 32].into(), 1).to_string()
}

/// Inserts a confirmed `subscription.charged` event as the indexer would, plus its outbox row.
async fn index_charged_event(client: &tokio_postgres::Client, merchant: Address) -> String {
    let tx = [0xabu8; 32];
    let event_id = chainsub_abi::ids::event_id(31337, tx.into(), 2);
    let subscriber = "0x2222222222222222222222222222222222222222";
    let snapshot = json!({
        "id": charged_sub_id(), "status": "active", "cancelAtPeriodEnd": false, "period": 2,
        "currentPeriodStart": "2026-01-01T00:00:00Z", "currentPeriodEnd": "2026-02-01T00:00:00Z",
        "nextPaymentAt": "2026-02-01T00:00:00Z", "failedAttempts": 0, "subscriber": subscriber,
        "customerExternalId": "user_42", "amount": "9990000", "planOnchainId": 1
    });
    client
        .execute(
            &format!(
                "INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash,
                    block_time, transaction_hash, transaction_index, log_index, name, kind,
                    merchant_wallet, subscription_id, plan_id, topics, data, log_amount,
                    log_subscriber, log_period, log_attempt, {SNAP_COLUMNS}, enqueued, sequence)
                 VALUES ($1, 31337, $2, 42, $3, '2026-01-01T00:00:00Z', $4, 0, 2,
                    'SubscriptionCharged', 'subscription.charged', $5, 1, 1, ARRAY[]::bytea[],
                    ''::bytea, 9990000, $6, 2, 1, {}, TRUE, 1)",
                snap_from_json(7)
            ),
            &[
                &event_id,
                &hex_bytes("5FbDB2315678afecb367f032d93F642f64180aa3"),
                &vec![0xcdu8; 32],
                &tx.to_vec(),
                &merchant.as_slice().to_vec(),
                &hex_bytes(&subscriber[2..]),
                &snapshot,
            ],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet)
             SELECT id, public_id, $2 FROM chain_events WHERE public_id = $1",
            &[&event_id, &merchant.as_slice().to_vec()],
        )
        .await
        .unwrap();
    event_id
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_indexed_event_is_delivered_as_the_same_event_object_the_api_lists() {
    let db = TestDb::create().await;
    let running = start(&db, DELIVERING).await;
    let dispatcher = Dispatcher::start(&running);
    let rx = WebhookReceiver::ok().await;
    let wallet = Address::repeat_byte(0x44);
    let (m, _, _) = sign_in(&running, &db, 0x44).await;
    let mut pg = db.connect().await;
    set_url(&mut pg, &m, &rx.url()).await;
    let (_, key) = chainsub_api::auth::api_key::admin_create_key(&mut pg, wallet)
        .await
        .unwrap();
    let event_id = index_charged_event(&pg, wallet).await;
    wait_status(&pg, &event_id, "delivered").await;

    let got = rx.received()[0].clone();
    assert_eq!(got.webhook_id(), event_id);
    let secret = chainsub_api::webhook_settings::reveal_secrets(
        &mut pg,
        &chainsub_tests::test_sealing_keys(),
        &m,
    )
    .await
    .unwrap();
    Webhook::new(secret[0].secret.expose())
        .unwrap()
        .verify(&got.body, &got.headers)
        .unwrap();

    let raw = reqwest::Client::new()
        .get(format!("{}/api/v1/events", running.url()))
        .bearer_auth(key.expose())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let list: Value = serde_json::from_str(&raw).unwrap();
    let mut listed = list["data"][0].clone();
    assert_eq!(listed["id"], event_id.as_str());
    // The API adds the webhook's own delivery status after the event; the rest is the
    // webhook body, byte for byte.
    let delivery = listed.as_object_mut().unwrap().remove("delivery").unwrap();
    assert_eq!(delivery["status"], "delivered");
    assert_eq!(delivery["attempts"], 1);
    let body_text = String::from_utf8(got.body.to_vec()).unwrap();
    let open = &body_text[..body_text.len() - 1];
    assert!(
        raw.contains(&format!("{open},\"delivery\":")),
        "webhook body {body_text} is not the listed event's text in {raw}"
    );
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body, listed);
    assert_eq!(body["type"], "subscription.charged");
    assert_eq!(body["data"]["subscriptionId"], charged_sub_id());

    dispatcher.stop().await;
    running.shutdown().await;
}

/// Issue 46, point 21: signing secrets were stored as plain text, so any copy of the
/// database (a backup, a replica, a dump) could sign webhooks. They are now sealed under
/// WEBHOOK_SECRETS_KEYS: the API refuses to start without a key, seals secrets stored before
/// sealing at start, seals again under a new first key (rotation), and reveals and signs with
/// the same secrets as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn signing_secrets_are_sealed_at_rest_and_the_sealing_key_rotates() {
    let db = TestDb::create().await;
    let client = db.connect().await;
    let m = merchants::find_or_create(&client, Address::repeat_byte(0x33))
        .await
        .unwrap();
    // A secret stored before sealing.
    let legacy = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    client
        .execute(
            "INSERT INTO webhook_secrets (merchant_id, secret) VALUES ($1, $2)",
            &[&m.id(), &legacy],
        )
        .await
        .unwrap();
    let stored = || async {
        db.connect()
            .await
            .query("SELECT secret FROM webhook_secrets ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<String>>()
    };

    // No key, no API.
    let refused = start_with_keys(&db, None, &[])
        .await
        .err()
        .expect("refused");
    assert!(
        refused.to_string().contains("WEBHOOK_SECRETS_KEYS"),
        "{refused}"
    );

    let running = start(&db, DELIVERING).await;
    let rows = stored().await;
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].starts_with("sealed:v1:test:"),
        "sealed at start: {}",
        rows[0]
    );
    assert!(!rows[0].contains(&legacy[6..]));

    let dispatcher = Dispatcher::start(&running);
    let rx = WebhookReceiver::ok().await;
    let dash = Dash::sign_in(&running, &db, 0x33).await;
    dash.set_url(&rx.url()).await;
    let (_, s) = dash
        .call(Method::GET, "/dashboard/api/webhook/secret", None)
        .await;
    assert_eq!(s["secret"], legacy, "the same secret, opened");

    // A rotation's new secret is sealed too; deliveries are signed with what the dashboard shows.
    let (_, rotated) = dash
        .call(Method::POST, "/dashboard/api/webhook/secret/rotate", None)
        .await;
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    let rows = stored().await;
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert!(
            r.starts_with("sealed:v1:test:") && !r.contains("whsec_"),
            "{r}"
        );
    }
    dash.call(Method::POST, "/dashboard/api/webhook/test", None)
        .await;
    rx.wait_until("test event", |r| r.len() == 1).await;
    let got = rx.received()[0].clone();
    for secret in [legacy, new_secret.as_str()] {
        Webhook::new(secret)
            .unwrap()
            .verify(&got.body, &got.headers)
            .unwrap();
    }
    dispatcher.stop().await;
    running.shutdown().await;

    // Key rotation: a new key first, the old one after it; the API seals again at start.
    let next = format!(
        "next:{},{}",
        "ZWZnaGlqa2xtbm9wcXJzdHV2d3h5ent8fX5/gIGCg4Q=",
        chainsub_tests::TEST_WEBHOOK_SECRETS_KEYS
    );
    let running = start_with_keys(&db, Some(&next), &[]).await.unwrap();
    for r in stored().await {
        assert!(r.starts_with("sealed:v1:next:"), "{r}");
    }
    let dash = Dash::sign_in(&running, &db, 0x33).await;
    let (_, s) = dash
        .call(Method::GET, "/dashboard/api/webhook/secret", None)
        .await;
    assert_eq!(s["secret"], new_secret.as_str());
    assert_eq!(s["previous"][0]["secret"], legacy);
    running.shutdown().await;
}
