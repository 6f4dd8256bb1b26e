// Shared by the webhook tests: the kit's webhook receiver, and seeding helpers shaped like
// the indexer's rows.

use std::time::Duration;

use chainsub_api::webhook_settings::{self as settings, WebhookUrl};
use chainsub_store::MerchantScope;
use chainsub_store::outbox::LIVE_STATUS;
use chainsub_webhooks::WebhookConfig;
use tokio::sync::oneshot;
use tokio_postgres::Client;

pub(crate) use chainsub_tests::receiver::WebhookReceiver;

pub(crate) use chainsub_tests::db::pool;

/// Millisecond-scale settings that allow loopback receivers.
pub(crate) fn fast_config(schedule: &str) -> WebhookConfig {
    WebhookConfig {
        timeout: Duration::from_secs(5),
        retry_schedule: schedule.parse().unwrap(),
        lease: Duration::from_secs(10),
        poll_interval: Duration::from_millis(20),
        allow_loopback: true,
        allow_http: true,
        secrets_keys: Some(chainsub_tests::test_sealing_keys()),
        ..WebhookConfig::default()
    }
}

/// A 20-byte wallet made of one repeated byte.
pub(crate) fn wallet(b: u8) -> Vec<u8> {
    vec![b; 20]
}

/// The merchant of wallet `wallet_byte` x 20, created as a dashboard sign-in would, and its
/// scope (what authentication hands the dashboard's code).
pub(crate) async fn merchant(client: &Client, wallet_byte: u8) -> MerchantScope {
    chainsub_store::merchants::sign_in(client, alloy::primitives::Address::repeat_byte(wallet_byte))
        .await
        .unwrap()
}

/// Sets the merchant's webhook URL through the dashboard's code path.
pub(crate) async fn set_url(client: &mut Client, merchant: &MerchantScope, url: &str) {
    let url = WebhookUrl::parse(url, true).unwrap();
    settings::set_url(
        client,
        &chainsub_tests::test_sealing_keys(),
        merchant,
        Some(&url),
    )
    .await
    .unwrap();
}

/// Queues `n` events for the merchant as outbox rows with a fixed payload (the body the
/// dispatcher sends as is), ids `evt_<prefix>_<i>`.
pub(crate) async fn enqueue(
    client: &Client,
    wallet_byte: u8,
    prefix: &str,
    n: usize,
) -> Vec<String> {
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
pub(crate) fn spawn_dispatcher(
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
pub(crate) async fn outbox_state(client: &Client, event_id: &str) -> (String, i32) {
    let r = client
        .query_one(
            &format!(
                "SELECT {LIVE_STATUS}, o.attempts FROM webhook_outbox o \
                 WHERE o.event_public_id = $1 AND o.retracted_at IS NULL"
            ),
            &[&event_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// Waits (bounded) until the event's outbox row has `status`.
pub(crate) async fn wait_status(client: &Client, event_id: &str, status: &str) {
    let what = format!("{event_id} to reach {status}");
    chainsub_tests::wait_until(&what, || async {
        outbox_state(client, event_id).await.0 == status
    })
    .await
}

/// Attempts of an event: (attempt, status_code, error).
pub(crate) async fn attempts(
    client: &Client,
    event_id: &str,
) -> Vec<(i32, Option<i32>, Option<String>)> {
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

/// A connection to `db` and merchant 1 whose endpoint is a receiver that holds every request
/// (a hung endpoint) until `release()`.
pub(crate) async fn held_endpoint(db: &chainsub_tests::TestDb) -> (Client, WebhookReceiver) {
    let mut client = db.connect().await;
    let rx = WebhookReceiver::ok().await;
    rx.hold();
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    (client, rx)
}

/// How many outbox rows are in `status`.
pub(crate) async fn count_status(client: &Client, status: &str) -> i64 {
    client
        .query_one(
            &format!("SELECT count(*) FROM webhook_outbox o WHERE {LIVE_STATUS} = $1"),
            &[&status],
        )
        .await
        .unwrap()
        .get(0)
}
