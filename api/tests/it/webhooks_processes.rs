// Dispatchers as separate `api dispatch` processes on one database (build the binary
// first: `cargo build -p chainsub-api --bins`): exactly-once delivery across three of them,
// and no loss when one is killed mid-delivery.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::webhooks_common::*;
use chainsub_tests::{ChildGuard, TestDb, bin_path};

fn dispatcher_process(db_url: &str, extra: &[(&str, &str)]) -> ChildGuard {
    let mut cmd = Command::new(bin_path("api"));
    cmd.arg("dispatch")
        .env("DATABASE_URL", db_url)
        .env("WEBHOOK_ALLOW_LOOPBACK", "true")
        .env("WEBHOOK_ALLOW_HTTP", "true")
        .env(
            "WEBHOOK_SECRETS_KEYS",
            chainsub_tests::TEST_WEBHOOK_SECRETS_KEYS,
        )
        .env("WEBHOOK_POLL_INTERVAL", "20ms")
        .env("WEBHOOK_RETRY_SCHEDULE", "0s,10ms,10ms")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    ChildGuard(cmd.spawn().expect("spawn api dispatch"))
}

async fn wait_all_delivered(client: &tokio_postgres::Client, n: i64) {
    let what = format!("all {n} events delivered");
    chainsub_tests::wait_until(&what, || async {
        let done: i64 = client
            .query_one(
                "SELECT count(*) FROM webhook_outbox WHERE status = 'delivered'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        done == n
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_dispatcher_processes_deliver_1000_events_exactly_once() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx = WebhookReceiver::ok().await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let mut procs: Vec<ChildGuard> = (0..3).map(|_| dispatcher_process(&db.url, &[])).collect();
    // Queued while all three run, in batches as the indexer commits blocks.
    let mut ids = Vec::new();
    for batch in 0..10 {
        ids.extend(enqueue(&client, 1, &format!("b{batch}"), 100).await);
    }
    wait_all_delivered(&client, 1000).await;
    rx.wait_until("1000 requests", |r| r.len() >= 1000).await;
    // Give a straggling duplicate the chance to show up before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut by_id: HashMap<String, usize> = HashMap::new();
    for r in rx.received() {
        *by_id.entry(r.webhook_id()).or_default() += 1;
    }
    assert_eq!(by_id.len(), 1000, "every event arrived");
    let dupes: Vec<_> = by_id.iter().filter(|(_, n)| **n != 1).collect();
    assert!(dupes.is_empty(), "delivered more than once: {dupes:?}");
    assert!(ids.iter().all(|id| by_id.contains_key(id)));
    let attempts: i64 = client
        .query_one("SELECT count(*) FROM webhook_attempts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 1000, "one attempt recorded per event");
    for p in &mut procs {
        let status = p.terminate(30).expect("dispatcher exits on SIGTERM");
        assert!(status.success(), "{status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_a_dispatcher_mid_delivery_loses_nothing() {
    let db = TestDb::create().await;
    let (client, rx) = held_endpoint(&db).await;
    let ids = enqueue(&client, 1, "kill", 5).await;

    // A short lease, so the victim's claims come back quickly.
    let lease = [("WEBHOOK_LEASE", "1s"), ("WEBHOOK_TIMEOUT", "30s")];
    let victim = dispatcher_process(&db.url, &lease);
    rx.wait_until("the victim's requests in flight", |r| r.len() == 5)
        .await;
    let in_flight: Vec<String> = rx.received().iter().map(|r| r.webhook_id()).collect();
    victim.kill();
    // Claimed, not finished: one attempt counted under a lease (stored as `pending` since
    // migration 0026; the one-second lease may already have run out, so not read as the
    // derived `delivering`).
    let r = client
        .query_one(
            "SELECT status, attempts, locked_until IS NOT NULL FROM webhook_outbox \
             WHERE event_public_id = $1",
            &[&ids[0]],
        )
        .await
        .unwrap();
    let claimed: (String, i32, bool) = (r.get(0), r.get(1), r.get(2));
    assert_eq!(
        (claimed.0.as_str(), claimed.1, claimed.2),
        ("pending", 1, true),
        "claimed, not finished"
    );

    rx.release();
    let _survivor = dispatcher_process(&db.url, &lease);
    wait_all_delivered(&client, 5).await;

    let got: Vec<String> = rx.received().iter().map(|r| r.webhook_id()).collect();
    for id in &ids {
        assert!(in_flight.contains(id));
        assert_eq!(
            got.iter().filter(|g| *g == id).count(),
            2,
            "{id}: redelivered once, same webhook-id"
        );
        let (status, attempts) = outbox_state(&client, id).await;
        assert_eq!((status.as_str(), attempts), ("delivered", 2));
    }
}
