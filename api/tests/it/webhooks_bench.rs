// Webhook dispatcher benchmark (ignored by default; run `bench/webhooks.sh`). Spawns 1 and
// then 3 `api dispatch` processes against a fresh database and a local always-200 receiver,
// and prints a table. The events are lifecycle events as the indexer stores them (a renewal
// with its subscription snapshot), so each body is rendered from its `chain_events` row as
// in production (~1.25 KB); a bare HTTP client then sends the very bodies the receiver got.
// - throughput: N events committed in one transaction, deliveries/s until the last arrives;
// - latency: events committed one per transaction at a steady rate, commit -> receiver
//   arrival, p50/p99 (the receiver runs in this process, so both ends share one clock).

use std::collections::HashMap;
use std::convert::Infallible;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chainsub_api::webhook_settings::{self as settings, WebhookUrl};
use chainsub_tests::{ChildGuard, TestDb, bin_path};
use tokio::sync::Notify;
use warp::Filter;
use warp::http::HeaderMap;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default)]
struct Arrivals {
    at: Mutex<HashMap<String, Instant>>,
    /// The body of each first arrival, by `webhook-id`.
    bodies: Mutex<HashMap<String, bytes::Bytes>>,
    dupes: Mutex<usize>,
    notify: Notify,
}

async fn receiver() -> (Arc<Arrivals>, u16) {
    let arrivals = Arc::new(Arrivals::default());
    let a = arrivals.clone();
    let route = warp::post()
        .and(warp::header::headers_cloned())
        .and(warp::body::bytes())
        .then(move |h: HeaderMap, body: bytes::Bytes| {
            let a = a.clone();
            async move {
                let now = Instant::now();
                let id = h["webhook-id"].to_str().unwrap_or_default().to_string();
                if a.at.lock().unwrap().insert(id.clone(), now).is_some() {
                    *a.dupes.lock().unwrap() += 1;
                } else {
                    a.bodies.lock().unwrap().insert(id, body);
                }
                a.notify.notify_waiters();
                Ok::<_, Infallible>(warp::reply())
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(warp::serve(route).incoming(listener).run());
    (arrivals, port)
}

async fn wait_for(arrivals: &Arrivals, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let notified = arrivals.notify.notified();
        if arrivals.at.lock().unwrap().len() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "bench stalled");
        let _ = tokio::time::timeout(Duration::from_millis(20), notified).await;
    }
}

fn dispatcher(db_url: &str) -> ChildGuard {
    ChildGuard(
        Command::new(bin_path("api"))
            .arg("dispatch")
            .env("DATABASE_URL", db_url)
            .env("WEBHOOK_ALLOW_LOOPBACK", "true")
            .env("WEBHOOK_ALLOW_HTTP", "true")
            .env(
                "WEBHOOK_SECRETS_KEYS",
                chainsub_tests::TEST_WEBHOOK_SECRETS_KEYS,
            )
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn api dispatch"),
    )
}

/// What delivery costs without the dispatcher: the same receiver, the same number of
/// requests in flight (the dispatcher's default `WEBHOOK_CONCURRENCY`, 64; the per-merchant
/// cap of 8 never binds with requests spread round-robin over 8+ merchants), each request
/// signed like a webhook (Standard Webhooks HMAC, the same three headers) with the same body
/// a dispatcher delivered for that event — and no database. Deliveries/s until the receiver
/// has them all.
async fn bare_client(merchants: usize, bodies: &[(String, bytes::Bytes)]) -> (f64, usize) {
    use futures::StreamExt;
    let (arrivals, port) = receiver().await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let secret = chainsub_webhooks::signing::WebhookSecret::generate();
    let t0 = Instant::now();
    futures::stream::iter(bodies.iter().enumerate())
        .map(|(i, (id, body))| {
            let (client, secret) = (&client, &secret);
            async move {
                let ts = chrono::Utc::now().timestamp();
                let sig = secret.sign(id, ts, body);
                let resp = client
                    .post(format!("http://127.0.0.1:{port}/m{}", i % merchants))
                    .header("content-type", "application/json")
                    .header("webhook-id", id)
                    .header("webhook-timestamp", ts.to_string())
                    .header("webhook-signature", sig)
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                assert!(resp.status().is_success());
            }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    wait_for(&arrivals, bodies.len()).await;
    let per_sec = bodies.len() as f64 / t0.elapsed().as_secs_f64();
    let dupes = *arrivals.dupes.lock().unwrap();
    (per_sec, dupes)
}

/// CPU seconds so far of the dispatchers, of every Postgres process, and of this process
/// (the receiver and the test's own client).
fn cpu_now(dispatchers: &[u32]) -> (f64, HashMap<u32, f64>, f64) {
    use chainsub_tests::{cpu_seconds, pids_named};
    let d = dispatchers.iter().map(|p| cpu_seconds(*p)).sum();
    let pg = pids_named("postgres")
        .into_iter()
        .map(|p| (p, cpu_seconds(p)))
        .collect();
    (d, pg, cpu_seconds(std::process::id()))
}

/// CPU used between two [`cpu_now`] readings: (dispatchers, Postgres, receiver) seconds.
/// A Postgres process that started in between counts from zero.
fn cpu_between(a: &(f64, HashMap<u32, f64>, f64), b: &(f64, HashMap<u32, f64>, f64)) -> [f64; 3] {
    let pg =
        b.1.iter()
            .map(|(pid, t)| t - a.1.get(pid).copied().unwrap_or(0.0))
            .sum();
    [b.0 - a.0, pg, b.2 - a.2]
}

struct Row {
    dispatchers: usize,
    events: usize,
    per_sec: f64,
    /// CPU seconds of the throughput phase: dispatchers, Postgres, receiver.
    cpu: [f64; 3],
    wall: f64,
    p50: Duration,
    p99: Duration,
    dupes: usize,
    /// The bodies of the throughput phase as the receiver got them.
    bodies: Vec<(String, bytes::Bytes)>,
}

/// Stores one renewal event per (`$1` public id, `$2` merchant wallet), as the indexer
/// stores a `SubscriptionCharged` log: its log fields and the subscription's snapshot. Event
/// k of a call is subscription (and block) `$3` + k: one event per subscription, so no
/// delivery waits for an earlier event of its subscription (the dispatcher's in-order rule).
const EVENTS: &str = "INSERT INTO chain_events (public_id, chain_id, contract, block_number,
        block_hash, block_time, transaction_hash, transaction_index, log_index, name, kind,
        merchant_wallet, subscription_id, topics, data, enqueued, sequence, log_amount,
        log_subscriber, log_period, log_attempt, snap_id, snap_status,
        snap_cancel_at_period_end, snap_period, snap_period_start, snap_period_end,
        snap_next_payment_at, snap_failed_attempts, snap_subscriber, snap_customer_external_id,
        snap_amount, snap_plan_onchain_id)
    SELECT u.id, 31337, '\\xcccccccccccccccccccccccccccccccccccccccc'::bytea, 1000 + $3::int8 + u.n,
        decode(md5('b' || u.id) || md5('B' || u.id), 'hex'),
        timestamptz '2026-01-01' + make_interval(secs => u.n * 12),
        decode(md5('t' || u.id) || md5('T' || u.id), 'hex'), 0, 0, 'SubscriptionCharged',
        'subscription.charged', u.w, $3::int8 + u.n, ARRAY[decode(md5('topic'), 'hex')],
        decode(repeat('00', 96), 'hex'), TRUE, 2, 9990000, decode(repeat('44', 20), 'hex'), 2, 1,
        'sub_' || md5('s' || u.id), 'active', false, 2, timestamptz '2026-02-01T00:00:00Z',
        timestamptz '2026-03-01T00:00:00Z', timestamptz '2026-03-01T00:00:00Z', 0,
        decode(repeat('44', 20), 'hex'), 'cust-' || ($3::int8 + u.n), 9990000, 1
    FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS u(id, w, n)";

/// The outbox rows of the events `$1` (what the indexer writes once they are confirmed).
const OUTBOX: &str = "INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet,
        chain_id, subscription_id)
    SELECT e.id, e.public_id, e.merchant_wallet, e.chain_id, e.subscription_id
    FROM chain_events e WHERE e.public_id = ANY($1) ORDER BY e.id";

async fn run(dispatchers: usize, merchants: usize, events: usize, latency_events: usize) -> Row {
    let db = TestDb::create().await;
    let mut client = db.connect().await;
    let (arrivals, port) = receiver().await;
    let mut wallets = Vec::new();
    for i in 0..merchants {
        let wallet = vec![i as u8 + 1; 20];
        let merchant = chainsub_store::merchants::sign_in(
            &client,
            alloy::primitives::Address::from_slice(&wallet),
        )
        .await
        .unwrap();
        let url = WebhookUrl::parse(&format!("http://127.0.0.1:{port}/m{i}"), true).unwrap();
        settings::set_url(
            &mut client,
            &chainsub_tests::test_sealing_keys(),
            &merchant,
            Some(&url),
        )
        .await
        .unwrap();
        wallets.push(wallet);
    }
    let procs: Vec<ChildGuard> = (0..dispatchers).map(|_| dispatcher(&db.url)).collect();
    // Let every dispatcher finish migrating and start listening.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Throughput: the events stored first, their outbox rows in one big commit, then time
    // until the last arrival.
    let ids: Vec<String> = (0..events).map(|i| format!("evt_{i:032x}")).collect();
    let ws: Vec<Vec<u8>> = (0..events)
        .map(|i| wallets[i % merchants].clone())
        .collect();
    client.execute(EVENTS, &[&ids, &ws, &0i64]).await.unwrap();
    let pids: Vec<u32> = procs.iter().map(|p| p.id()).collect();
    let tx = client.transaction().await.unwrap();
    tx.execute(OUTBOX, &[&ids]).await.unwrap();
    let cpu0 = cpu_now(&pids);
    tx.commit().await.unwrap();
    let t0 = Instant::now();
    wait_for(&arrivals, events).await;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_between(&cpu0, &cpu_now(&pids));
    let per_sec = events as f64 / wall;
    let bodies = {
        let got = arrivals.bodies.lock().unwrap();
        ids.iter().map(|id| (id.clone(), got[id].clone())).collect()
    };

    // Latency: one event per transaction, ~200/s, commit -> arrival.
    let mut committed = HashMap::new();
    for i in 0..latency_events {
        let id = format!("evt_{:032x}", (1u64 << 40) + i as u64);
        let ids = vec![id.clone()];
        client
            .execute(
                EVENTS,
                &[
                    &ids,
                    &vec![wallets[i % merchants].clone()],
                    &((events + i) as i64),
                ],
            )
            .await
            .unwrap();
        client.execute(OUTBOX, &[&ids]).await.unwrap();
        committed.insert(id, Instant::now());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    wait_for(&arrivals, events + latency_events).await;
    let at = arrivals.at.lock().unwrap().clone();
    let mut lat: Vec<Duration> = committed
        .iter()
        .map(|(id, c)| at[id].saturating_duration_since(*c))
        .collect();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
    drop(procs);
    let dupes = *arrivals.dupes.lock().unwrap();
    Row {
        dispatchers,
        events,
        per_sec,
        cpu,
        wall,
        p50: pct(0.50),
        p99: pct(0.99),
        dupes,
        bodies,
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run bench/webhooks.sh"]
async fn webhook_dispatch_benchmark() {
    let events = env_or("BENCH_EVENTS", 20_000);
    let merchants = env_or("BENCH_MERCHANTS", 100);
    let latency_events = env_or("BENCH_LATENCY_EVENTS", 500);
    let load_before = chainsub_tests::load_average();
    let mut rows = Vec::new();
    for d in [1, 3] {
        rows.push(run(d, merchants, events, latency_events).await);
    }
    let (bare, bare_dupes) = bare_client(merchants, &rows[0].bodies).await;
    let body_bytes: usize = rows[0].bodies.iter().map(|(_, b)| b.len()).sum();
    println!();
    println!(
        "webhook dispatch: {merchants} merchants, local always-200 receiver, default WEBHOOK_* settings"
    );
    println!(
        "| dispatchers | events | deliveries/s | commit->receive p50 | p99 | duplicates | vs bare client |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} | {:.1} ms | {:.1} ms | {} | {:.0} % |",
            r.dispatchers,
            r.events,
            r.per_sec,
            r.p50.as_secs_f64() * 1e3,
            r.p99.as_secs_f64() * 1e3,
            r.dupes,
            100.0 * r.per_sec / bare
        );
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    for r in &rows {
        let per_k = |s: f64| 1e6 * s / r.events as f64;
        println!(
            "webhook cpu: {} dispatcher(s): {:.0} / {:.0} / {:.0} ms per 1,000 deliveries (dispatchers / Postgres / receiver); {:.2} of {cores} cores busy",
            r.dispatchers,
            per_k(r.cpu[0]),
            per_k(r.cpu[1]),
            per_k(r.cpu[2]),
            r.cpu.iter().sum::<f64>() / r.wall
        );
    }
    println!(
        "webhook bare client: {bare:.0} deliveries/s ({events} requests, 64 in flight, signed, the dispatcher's bodies (mean {} bytes), no database; {bare_dupes} duplicates)",
        body_bytes / events.max(1)
    );
    println!(
        "webhook scaling: 3 dispatchers deliver {:.2}x what 1 delivers",
        rows[1].per_sec / rows[0].per_sec
    );
    println!(
        "webhook load average: before {load_before}, after {}",
        chainsub_tests::load_average()
    );
}
