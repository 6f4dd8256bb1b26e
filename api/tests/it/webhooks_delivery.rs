// Webhook delivery against a real receiver on port 0 and a fresh Postgres per test, with a
// millisecond retry schedule: signing, retries, exhaustion and dashboard retry, 410,
// redirects, Retry-After, fairness, held rows, and the SSRF guard.

use std::sync::Arc;
use std::time::Duration;

use crate::webhooks_common::*;
use chainsub_api::webhook_settings as settings;
use chainsub_tests::TestDb;
use standardwebhooks::Webhook;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn signature_verifies_with_standardwebhooks_and_tampering_or_old_timestamps_fail() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx = WebhookReceiver::ok().await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let ids = enqueue(&client, 1, "sig", 1).await;
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s"));
    rx.wait_until("one delivery", |r| r.len() == 1).await;

    let secret = settings::reveal_secrets(&mut client, &chainsub_tests::test_sealing_keys(), &m)
        .await
        .unwrap();
    assert_eq!(secret.len(), 1);
    let wh = Webhook::new(secret[0].secret.expose()).unwrap();
    let got = &rx.received()[0];
    assert_eq!(got.webhook_id(), ids[0]);
    assert_eq!(got.headers["content-type"], "application/json");
    wh.verify(&got.body, &got.headers)
        .expect("signature verifies");

    let mut tampered = got.body.to_vec();
    tampered[5] ^= 1;
    assert!(
        wh.verify(&tampered, &got.headers).is_err(),
        "tampered body must fail"
    );

    let mut old = got.headers.clone();
    let ts: i64 = old["webhook-timestamp"].to_str().unwrap().parse().unwrap();
    old.insert("webhook-timestamp", (ts - 600).to_string().parse().unwrap());
    assert!(
        wh.verify(&got.body, &old).is_err(),
        "old timestamp must fail"
    );

    let other = Webhook::new(chainsub_webhooks::WebhookSecret::generate().expose()).unwrap();
    assert!(
        other.verify(&got.body, &got.headers).is_err(),
        "another secret must fail"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn during_rotation_both_secrets_verify_and_after_overlap_only_the_new_one_signs() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx = WebhookReceiver::ok().await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let old = settings::reveal_secrets(&mut client, &chainsub_tests::test_sealing_keys(), &m)
        .await
        .unwrap()[0]
        .secret
        .clone();
    let new = settings::rotate_secret(
        &mut client,
        &chainsub_tests::test_sealing_keys(),
        &m,
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let live = settings::reveal_secrets(&mut client, &chainsub_tests::test_sealing_keys(), &m)
        .await
        .unwrap();
    assert_eq!(live.len(), 2);
    assert_eq!(live[0].secret, new, "current secret is listed first");
    assert!(live[0].expires_at.is_none() && live[1].expires_at.is_some());

    enqueue(&client, 1, "rot", 1).await;
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s"));
    rx.wait_until("one delivery", |r| r.len() == 1).await;
    let got = &rx.received()[0];
    let sig = got.headers["webhook-signature"].to_str().unwrap();
    assert_eq!(sig.split(' ').count(), 2, "{sig}");
    for s in [&old, &new] {
        Webhook::new(s.expose())
            .unwrap()
            .verify(&got.body, &got.headers)
            .expect("each secret verifies");
    }

    // A rotation with no overlap: the old secret stops signing at once.
    let newest = settings::rotate_secret(
        &mut client,
        &chainsub_tests::test_sealing_keys(),
        &m,
        Duration::ZERO,
    )
    .await
    .unwrap();
    // Every secret but the current one (the stored texts are sealed: compared by state).
    client
        .execute(
            "UPDATE webhook_secrets SET expires_at = now() - interval '1 second' \
             WHERE expires_at IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    enqueue(&client, 1, "rot2", 1).await;
    rx.wait_until("second delivery", |r| r.len() == 2).await;
    let got = &rx.received()[1];
    assert_eq!(
        got.headers["webhook-signature"]
            .to_str()
            .unwrap()
            .split(' ')
            .count(),
        1
    );
    Webhook::new(newest.expose())
        .unwrap()
        .verify(&got.body, &got.headers)
        .unwrap();
    assert!(
        Webhook::new(new.expose())
            .unwrap()
            .verify(&got.body, &got.headers)
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn receiver_failing_twice_then_200_records_three_attempts_under_one_webhook_id() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx =
        WebhookReceiver::scripted(Arc::new(|n, _| (if n < 2 { 500 } else { 200 }, vec![]))).await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let ids = enqueue(&client, 1, "flaky", 1).await;
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s,10ms,10ms,10ms"));
    wait_status(&client, &ids[0], "delivered").await;

    let got = rx.received();
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|r| r.webhook_id() == ids[0]),
        "one webhook-id across attempts"
    );
    let a = attempts(&client, &ids[0]).await;
    assert_eq!(
        a.iter().map(|(n, code, _)| (*n, *code)).collect::<Vec<_>>(),
        vec![(1, Some(500)), (2, Some(500)), (3, Some(200))]
    );
    assert_eq!(a[0].2.as_deref(), Some("HTTP 500"));
    let excerpt: String = client
        .query_one(
            "SELECT response_excerpt FROM webhook_attempts ORDER BY id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(excerpt, "answer 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exhausted_delivery_is_failed_and_a_dashboard_retry_delivers_it() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = healthy.clone();
    let rx = WebhookReceiver::scripted(Arc::new(move |_, _| {
        (
            if h.load(std::sync::atomic::Ordering::SeqCst) {
                204
            } else {
                503
            },
            vec![],
        )
    }))
    .await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let ids = enqueue(&client, 1, "exh", 1).await;
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s,5ms,5ms"));
    wait_status(&client, &ids[0], "failed").await;
    assert_eq!(attempts(&client, &ids[0]).await.len(), 3);
    assert_eq!(rx.count(), 3);

    healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    let list = delivery_list(&client, &m, 10).await;
    let id = delivery_ids()
        .parse(list[0]["id"].as_str().unwrap())
        .unwrap();
    assert_eq!(list[0]["status"], "failed");
    assert_eq!(list[0]["attempts"].as_array().unwrap().len(), 3);
    settings::retry(&client, &m, id).await.unwrap();
    wait_status(&client, &ids[0], "delivered").await;
    assert_eq!(rx.count(), 4);
    assert!(rx.received().iter().all(|r| r.webhook_id() == ids[0]));

    // Another merchant cannot see or retry it.
    let other = merchant(&client, 2).await;
    assert!(settings::retry(&client, &other, id).await.is_err());
    assert!(
        chainsub_store::webhooks::deliveries(&client, &other, 10, None)
            .await
            .unwrap()
            .0
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gone_410_disables_the_endpoint_and_holds_deliveries_until_re_enabled() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx =
        WebhookReceiver::scripted(Arc::new(|n, _| (if n == 0 { 410 } else { 200 }, vec![]))).await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let first = enqueue(&client, 1, "gone", 1).await;
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s,1h,1h"));
    rx.wait_until("the 410", |r| r.len() == 1).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ep = settings::endpoint(&client, &m).await.unwrap();
        if ep["enabled"] == false {
            assert!(ep["disabledReason"].as_str().unwrap().contains("410"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "endpoint not disabled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let more = enqueue(&client, 1, "held", 3).await;
    // Several poll rounds pass; nothing more may be sent while disabled.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.count(), 1, "no delivery to a disabled endpoint");
    assert_eq!(
        outbox_state(&client, &more[0]).await,
        ("pending".to_string(), 0)
    );

    // Re-enabling makes held deliveries due at once: the 410'd one does not wait out its
    // hour of backoff.
    settings::enable(&client, &m).await.unwrap();
    for id in first.iter().chain(&more) {
        wait_status(&client, id, "delivered").await;
    }
    assert_eq!(rx.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redirects_are_not_followed_and_count_as_failures() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let target = WebhookReceiver::ok().await;
    let loc = target.url();
    let rx =
        WebhookReceiver::scripted(Arc::new(move |_, _| (302, vec![("location", loc.clone())])))
            .await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let ids = enqueue(&client, 1, "redir", 1).await;
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s,5ms"));
    wait_status(&client, &ids[0], "failed").await;
    assert_eq!(rx.count(), 2);
    assert_eq!(target.count(), 0, "redirect target must never be called");
    assert!(
        attempts(&client, &ids[0])
            .await
            .iter()
            .all(|(_, code, _)| *code == Some(302))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_after_pushes_the_next_attempt_back_within_the_cap() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx = WebhookReceiver::scripted(Arc::new(|_, _| {
        (429, vec![("retry-after", "120".to_string())])
    }))
    .await;
    let m = merchant(&client, 1).await;
    set_url(&mut client, &m, &rx.url()).await;
    let ids = enqueue(&client, 1, "ra", 1).await;
    let mut cfg = fast_config("0s,5ms,5ms");
    cfg.retry_after_max = Duration::from_secs(60);
    let (_stop, _task) = spawn_dispatcher(&db.url, cfg);
    wait_status(&client, &ids[0], "pending").await;
    rx.wait_until("first attempt", |r| !r.is_empty()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let delay: f64 = loop {
        let r = client
            .query_one(
                "SELECT o.attempts, EXTRACT(EPOCH FROM o.next_attempt_at - a.attempted_at)::float8
                 FROM webhook_outbox o JOIN webhook_attempts a ON a.outbox_id = o.id
                 WHERE o.event_public_id = $1 ORDER BY a.id DESC LIMIT 1",
                &[&ids[0]],
            )
            .await;
        if let Ok(r) = r {
            break r.get(1);
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Asked for 120 s, capped at 60 s; the 5 ms schedule would have retried at once.
    assert!(
        (59.0..=61.0).contains(&delay),
        "next attempt {delay}s after the 429"
    );
    assert_eq!(rx.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_endpoint_does_not_starve_other_merchants() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let slow = WebhookReceiver::ok().await;
    slow.hold();
    let fast = WebhookReceiver::ok().await;
    let (a, b) = (merchant(&client, 1).await, merchant(&client, 2).await);
    set_url(&mut client, &a, &slow.url()).await;
    set_url(&mut client, &b, &fast.url()).await;
    // The slow merchant's backlog is older, so a FIFO dispatcher would serve it first.
    let slow_ids = enqueue(&client, 1, "slow", 40).await;
    let fast_ids = enqueue(&client, 2, "fast", 20).await;
    let mut cfg = fast_config("0s,5ms");
    cfg.concurrency = 6;
    cfg.per_merchant_concurrency = 2;
    let (_stop, _task) = spawn_dispatcher(&db.url, cfg);
    for id in &fast_ids {
        wait_status(&client, id, "delivered").await;
    }
    assert_eq!(
        slow.count(),
        2,
        "the hung endpoint holds only its own per-merchant share"
    );
    // Release the hung endpoint: its backlog drains too.
    slow.release();
    for id in &slow_ids {
        wait_status(&client, id, "delivered").await;
    }
}

/// Issue 13, point 6: the claimer works ahead of the senders. With a concurrency of 2, 2 rows
/// claimed ahead and a hung endpoint, exactly 2 requests are in flight while 4 rows are
/// claimed, so the next batch is ready the moment a slot frees; released, everything arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dispatcher_claims_ahead_but_sends_at_most_its_concurrency() {
    claims_ahead(2, 2, 4).await;
}

/// `WEBHOOK_CLAIM_AHEAD` sets how far ahead (claim rounds are larger, and so cheaper per
/// delivery, the further ahead): 5 ahead of 2 requests is 7 rows claimed, still 2 sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn how_far_the_dispatcher_claims_ahead_is_set_by_claim_ahead() {
    claims_ahead(2, 5, 7).await;
}

async fn claims_ahead(concurrency: usize, ahead: usize, claimed: i64) {
    let db = TestDb::create().await;
    let (client, rx) = held_endpoint(&db).await;
    let ids = enqueue(&client, 1, "ahead", 10).await;
    let mut cfg = fast_config("0s,5ms");
    cfg.concurrency = concurrency;
    cfg.claim_ahead = ahead;
    cfg.per_merchant_concurrency = 8;
    let (_stop, _task) = spawn_dispatcher(&db.url, cfg);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !(rx.count() == concurrency && count_status(&client, "delivering").await == claimed) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "expected {concurrency} in flight and {claimed} claimed; saw {} and {}",
            rx.count(),
            count_status(&client, "delivering").await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing more goes out while the requests hang.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        rx.count(),
        concurrency,
        "at most WEBHOOK_CONCURRENCY requests in flight"
    );
    assert_eq!(
        count_status(&client, "delivering").await,
        claimed,
        "the concurrency and WEBHOOK_CLAIM_AHEAD claimed, no more"
    );
    rx.release();
    for id in &ids {
        wait_status(&client, id, "delivered").await;
    }
    assert_eq!(rx.count(), 10);
}

/// A stopping dispatcher finishes the requests in flight and hands back the rows it claimed
/// ahead but never sent: they are `pending` again with no attempt counted, for the next
/// dispatcher (not sent during shutdown, not left leased).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_dispatcher_hands_back_the_rows_it_claimed_ahead() {
    let db = TestDb::create().await;
    let (client, rx) = held_endpoint(&db).await;
    let ids = enqueue(&client, 1, "stop", 3).await;
    let mut cfg = fast_config("0s,5ms");
    cfg.concurrency = 1;
    cfg.claim_ahead = 1;
    let (stop, task) = spawn_dispatcher(&db.url, cfg);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !(rx.count() == 1 && count_status(&client, "delivering").await == 2) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never claimed ahead"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(()).unwrap();
    // Let the dispatcher see the stop before the hung request (and so its slot) comes back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    rx.release();
    task.await.unwrap();
    // Of the two claimed, the one sent is delivered; the other was handed back unsent, and
    // the third was never claimed.
    let mut states = Vec::new();
    for id in &ids {
        states.push(outbox_state(&client, id).await);
    }
    states.sort();
    assert_eq!(
        states,
        [
            ("delivered".to_string(), 1),
            ("pending".to_string(), 0),
            ("pending".to_string(), 0)
        ]
    );
    assert_eq!(rx.count(), 1, "nothing new is sent while stopping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timeout_is_a_failed_attempt() {
    let db = TestDb::create().await;
    let (client, rx) = held_endpoint(&db).await;
    let ids = enqueue(&client, 1, "slow", 1).await;
    let mut cfg = fast_config("0s");
    cfg.timeout = Duration::from_millis(200);
    let (_stop, _task) = spawn_dispatcher(&db.url, cfg);
    wait_status(&client, &ids[0], "failed").await;
    let a = attempts(&client, &ids[0]).await;
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].1, None);
    assert_eq!(a[0].2.as_deref(), Some("timeout"));
    rx.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_of_a_merchant_without_url_are_held_until_one_is_set() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx = WebhookReceiver::ok().await;
    let m = merchant(&client, 1).await;
    let ids = enqueue(&client, 1, "nourl", 3).await;
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        outbox_state(&client, &ids[0]).await,
        ("pending".to_string(), 0)
    );
    set_url(&mut client, &m, &rx.url()).await;
    for id in &ids {
        wait_status(&client, id, "delivered").await;
    }
    assert_eq!(rx.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_url_resolving_to_a_private_address_is_refused_unless_allowed() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx = WebhookReceiver::ok().await;
    let m = merchant(&client, 1).await;
    // `localhost` resolves to loopback: refused by the default policy.
    let url = format!("http://localhost:{}/hook", rx.addr.port());
    set_url(&mut client, &m, &url).await;
    let ids = enqueue(&client, 1, "ssrf", 1).await;
    let mut cfg = fast_config("0s");
    cfg.allow_loopback = false;
    let (stop, task) = spawn_dispatcher(&db.url, cfg);
    wait_status(&client, &ids[0], "failed").await;
    let a = attempts(&client, &ids[0]).await;
    assert!(a[0].2.as_deref().unwrap().starts_with("blocked:"), "{a:?}");
    assert_eq!(rx.count(), 0, "nothing may reach a blocked address");
    stop.send(()).unwrap();
    task.await.unwrap();

    // Allowed explicitly, the same URL is delivered to.
    let (_stop, _task) = spawn_dispatcher(&db.url, fast_config("0s"));
    let list = delivery_list(&client, &m, 1).await;
    let id = delivery_ids()
        .parse(list[0]["id"].as_str().unwrap())
        .unwrap();
    settings::retry(&client, &m, id).await.unwrap();
    wait_status(&client, &ids[0], "delivered").await;
    assert_eq!(rx.count(), 1);
}

/// The dashboard's deliveries list (`data`) as JSON.
async fn delivery_list(
    client: &tokio_postgres::Client,
    m: &chainsub_store::MerchantScope,
    limit: i64,
) -> serde_json::Value {
    let (rows, attempts, more) = chainsub_store::webhooks::deliveries(client, m, limit, None)
        .await
        .unwrap();
    serde_json::to_value(settings::deliveries_view(
        &delivery_ids(),
        &rows,
        &attempts,
        more,
    ))
    .unwrap()["data"]
        .clone()
}

/// The delivery id codec of a server with the test kit's checkout secret.
fn delivery_ids() -> settings::DeliveryIds {
    settings::DeliveryIds::new(crate::api_common::SECRET)
}

/// The dispatcher's connections commit asynchronously (its bookkeeping is re-done by
/// redelivery if Postgres loses it) and plan each execution; the API's connections keep
/// synchronous commit and generic plans, and never plan a parallel query; neither compiles a
/// statement with JIT (a generic plan's cost passes `jit_above_cost` on large tables).
#[tokio::test]
async fn only_the_dispatchers_pool_commits_asynchronously() {
    let db = TestDb::create().await;
    let settings = |pool: deadpool_postgres::Pool| async move {
        let c = pool.get().await.unwrap();
        let row = c
            .query_one(
                "SELECT current_setting('synchronous_commit'), current_setting('plan_cache_mode'),
                     current_setting('max_parallel_workers_per_gather'), current_setting('jit')",
                &[],
            )
            .await
            .unwrap();
        (
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2),
            row.get::<_, String>(3),
        )
    };
    let dispatcher = chainsub_api::db::dispatcher_pool(&db.url, 1).unwrap();
    let api = chainsub_api::db::pool(&db.url, 1).unwrap();
    let (commit, plans, _, jit) = settings(dispatcher).await;
    assert_eq!(
        (commit.as_str(), plans.as_str(), jit.as_str()),
        ("off", "force_custom_plan", "off")
    );
    assert_eq!(
        settings(api).await,
        (
            "on".into(),
            "force_generic_plan".into(),
            "0".into(),
            "off".into()
        )
    );
}

/// Issue 46, point 18: an http URL saved while WEBHOOK_ALLOW_HTTP was on is not delivered to
/// once it is off: each attempt fails as blocked and nothing reaches the receiver.
#[tokio::test]
async fn an_http_url_is_not_delivered_to_once_http_is_off() {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let rx = WebhookReceiver::ok().await;
    let m = merchant(&client, 1).await;
    assert!(rx.url().starts_with("http://"));
    set_url(&mut client, &m, &rx.url()).await;
    let ids = enqueue(&client, 1, "plain", 1).await;
    let config = chainsub_webhooks::WebhookConfig {
        allow_http: false,
        ..fast_config("0s,5ms")
    };
    let (_stop, _task) = spawn_dispatcher(&db.url, config);
    wait_status(&client, &ids[0], "failed").await;
    let tried = attempts(&client, &ids[0]).await;
    assert_eq!(tried.len(), 2);
    for (_, status, error) in &tried {
        assert_eq!(*status, None);
        assert!(
            error.as_deref().unwrap().starts_with("blocked: http"),
            "{tried:?}"
        );
    }
    assert_eq!(rx.count(), 0);
}
