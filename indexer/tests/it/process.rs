//! The indexer as an operating system process: killed with SIGKILL mid-backfill, or run twice
//! against one database.

use std::time::Duration;

use crate::common::*;
use alloy::primitives::B256;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT, MERCHANT_B};
use chainsub_tests::{DevChain, Reserved, TestDb};
use rand::{Rng, SeedableRng};

/// `plans` plans with every customer subscribed to each, then `empty` empty blocks.
async fn busy_chain(plans: u8, empty: u64) -> DevChain {
    let chain = DevChain::start().await;
    let customers = [CUSTOMER, CUSTOMER_B, 6, 7, 8];
    for c in customers {
        fund(&chain, DevChain::address(c), 1_000 * USDC).await;
    }
    for p in 0..plans {
        let merchant = DevChain::address(if p % 2 == 0 { MERCHANT } else { MERCHANT_B });
        let plan = create_plan(&chain, merchant, USDC, B256::repeat_byte(p + 1)).await;
        for c in customers {
            subscribe(&chain, DevChain::address(c), plan, B256::ZERO).await;
            chain.mine(7).await;
        }
    }
    chain.mine(empty).await;
    chain
}

fn seed() -> u64 {
    let seed = std::env::var("INDEXER_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (INDEXER_TEST_SEED={seed} reproduces the kill times)");
    seed
}

#[tokio::test]
async fn kill_9_during_backfill_then_restart_gives_the_uninterrupted_state() {
    let chain = busy_chain(12, 1500).await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
    // Small ranges so the backfill is many transactions and a kill lands inside one.
    let env = [("INDEXER_INITIAL_RANGE", "4"), ("INDEXER_MAX_RANGE", "8")];
    let head = chain_head(&chain).await.0 as i64;
    let mut progress = Vec::new();
    for _ in 0..6 {
        // Kill at a random point of the backfill: once the cursor passes a random target,
        // after a random few milliseconds more (inside the next transaction, usually).
        let at = cursor(&client)
            .await
            .map_or(chain.deploy_block as i64, |c| c.0);
        let target = at + rng.random_range(1..=((head - at) / 4).max(1));
        let mut child = spawn_indexer(&chain, &db, &Reserved::new(), &env);
        wait_until("cursor passes the kill target", || {
            let client = &client;
            async move { cursor(client).await.is_some_and(|c| c.0 >= target) }
        })
        .await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..8))).await;
        child.0.kill().expect("kill -9");
        child.0.wait().unwrap();
        progress.push(cursor(&client).await.map(|c| c.0));
    }
    eprintln!("cursor after each kill: {progress:?} (head {head})");
    assert!(
        progress.iter().all(|p| p.is_some_and(|n| n < head)),
        "every kill must land mid-backfill: {progress:?}"
    );
    let _final_run = spawn_indexer(&chain, &db, &Reserved::new(), &env);
    wait_for_head(&client, &chain).await;
    drop(_final_run);
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

#[tokio::test]
async fn second_indexer_waits_as_standby_and_takes_over_when_the_writer_dies() {
    let Scene {
        chain,
        db,
        client,
        plan,
    } = Scene::start().await;
    fund(&chain, DevChain::address(CUSTOMER_B), 10 * USDC).await;

    let (socket_a, socket_b) = (Reserved::new(), Reserved::new());
    let (port_a, port_b) = (socket_a.port, socket_b.port);
    let mut a = spawn_indexer(&chain, &db, &socket_a, &[]);
    wait_until("A becomes the writer", || async {
        health(port_a).await["writer"] == true
    })
    .await;
    let _b = spawn_indexer(&chain, &db, &socket_b, &[]);
    assert_eq!(health(port_b).await["writer"], false, "B waits");

    subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    wait_for_head(&client, &chain).await;
    assert_eq!(
        health(port_b).await["writer"],
        false,
        "B still waits while A lives"
    );
    assert_eq!(epoch(&client).await, 1, "only A ever claimed the cursor");

    a.0.kill().expect("kill -9 A");
    a.0.wait().unwrap();
    subscribe(&chain, DevChain::address(CUSTOMER_B), plan, B256::ZERO).await;
    wait_for_head(&client, &chain).await;
    assert_eq!(health(port_b).await["writer"], true, "B took over");
    assert_eq!(epoch(&client).await, 2);
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

/// Issue 46, point 22: a writer whose session is ended under it (a fail-over, an operator's
/// `pg_terminate_backend`) and whose lock a standby takes resumes as a standby, and says so:
/// its `/health` used to stay 503 with the old session's failure for good.
#[tokio::test]
async fn a_demoted_writer_is_ready_again_as_a_standby() {
    let Scene {
        chain, db, client, ..
    } = Scene::start().await;
    let (socket_a, socket_b) = (Reserved::new(), Reserved::new());
    let (port_a, port_b) = (socket_a.port, socket_b.port);
    let _a = spawn_indexer(&chain, &db, &socket_a, &[]);
    wait_until("A becomes the writer", || async {
        health(port_a).await["writer"] == true
    })
    .await;
    let _b = spawn_indexer(&chain, &db, &socket_b, &[]);
    wait_until("B waits as a standby", || async {
        health(port_b).await["status"] == "standby"
    })
    .await;
    client
        .execute(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l \
             JOIN pg_database d ON d.oid = l.database \
             WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    wait_until("B becomes the writer", || async {
        health(port_b).await["writer"] == true
    })
    .await;
    wait_until("A is ready again, as a standby", || async {
        let h = health(port_a).await;
        h["status"] == "standby"
            && h["writer"] == false
            && http_status(port_a, "/health") == Some(200)
    })
    .await;
}

async fn epoch(c: &tokio_postgres::Client) -> i64 {
    c.query_one("SELECT writer_epoch FROM indexer_cursor", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn sigterm_stops_cleanly_and_health_and_metrics_are_served() {
    let Scene {
        chain,
        db,
        client,
        plan,
    } = Scene::start().await;
    subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    let socket = Reserved::new();
    let port = socket.port;
    let mut child = spawn_indexer(&chain, &db, &socket, &[]);
    wait_for_head(&client, &chain).await;
    let head = chain_head(&chain).await.0;
    // The cursor row commits before the process's own health state is updated: wait for
    // health to say so too (CI once read it in between: indexedBlock 1, head 6).
    let h = chainsub_tests::wait_for_some("health to show the head", || async {
        let h = health(port).await;
        (h["indexedBlock"] == head && h["lagBlocks"] == 0).then_some(h)
    })
    .await;
    assert_eq!(h["indexedBlock"], head);
    assert_eq!(h["lagBlocks"], 0);
    let metrics = http_get(port, "/metrics").expect("metrics");
    for name in [
        "indexer_blocks_total",
        "indexer_events_total",
        "indexer_lag_blocks",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    let status = child.terminate(10).expect("exits after SIGTERM");
    assert!(status.success(), "clean exit: {status:?}");
}

/// Issue 12, point 5: the database and the node both down when the indexer starts (a
/// proxy in front of each refuses connections), the database back after 2 s and the node
/// after 4 s: the indexer waits for them (migrations, then the node's chain id) instead
/// of exiting 1, and indexes to the head.
#[tokio::test]
async fn a_database_and_a_node_down_at_start_up_are_waited_for() {
    use chainsub_tests::proxy::{Proxy, target_of, via};
    let Scene {
        chain, db, client, ..
    } = Scene::start().await;
    let pg = Proxy::start_disabled(target_of(&db.url)).await;
    let rpc = Proxy::start_disabled(target_of(&chain.anvil.url)).await;
    let (db_url, rpc_url) = (via(&db.url, pg.addr), via(&chain.anvil.url, rpc.addr));
    let env = [
        ("DATABASE_URL", db_url.as_str()),
        ("RPC_URL", rpc_url.as_str()),
    ];
    let socket = Reserved::new();
    let port = socket.port;
    let mut child = spawn_indexer(&chain, &db, &socket, &env);
    // Issue 46, point 22: not ready while start-up waits (it used to say 200 `standby`).
    wait_until("the health listener", || async move {
        http_status(port, "/health").is_some()
    })
    .await;
    let h = health(port).await;
    assert_eq!(h["status"], "starting", "{h}");
    assert_eq!(http_status(port, "/health"), Some(503));
    for (down, up) in [(&pg, "the database"), (&rpc, "the node")] {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the indexer gave up while {up} was down"
        );
        down.enable();
    }
    wait_for_head(&client, &chain).await;
    assert!(child.0.try_wait().unwrap().is_none());
}

/// Issue 12, point 3: readiness tells the truth about a dependency that goes away (a proxy
/// in front of it refuses and cuts connections) while the indexer follows the head: 200
/// `ok`, then 503 `unavailable` with a reason starting with `reason` while `/live` stays
/// 200 (retrying is not wedged), then 200 again when it returns. It used to answer 200
/// "ok" throughout: with the database down (an idle writer touched nothing) and with the
/// node down (the fetcher retries forever inside a step).
async fn readiness_follows(setting: &str, reason: &str) {
    use chainsub_tests::proxy::{Proxy, target_of, via};
    let Scene {
        chain, db, client, ..
    } = Scene::start().await;
    let target = if setting == "DATABASE_URL" {
        db.url.clone()
    } else {
        chain.anvil.url.clone()
    };
    let proxy = Proxy::start(target_of(&target)).await;
    let url = via(&target, proxy.addr);
    let socket = Reserved::new();
    let port = socket.port;
    let _child = spawn_indexer(&chain, &db, &socket, &[(setting, url.as_str())]);
    wait_for_head(&client, &chain).await;
    wait_until("ready", || async move {
        http_status(port, "/health") == Some(200)
    })
    .await;

    proxy.disable();
    wait_until("readiness to fail", || async move {
        http_status(port, "/health") == Some(503)
    })
    .await;
    let h = health(port).await;
    assert_eq!(h["status"], "unavailable", "{h}");
    assert!(h["reasons"][0].as_str().unwrap().starts_with(reason), "{h}");
    assert_eq!(http_status(port, "/live"), Some(200), "retrying is alive");

    proxy.enable();
    wait_until("readiness to come back", || async move {
        http_status(port, "/health") == Some(200)
    })
    .await;
}

#[tokio::test]
async fn readiness_fails_with_the_reason_while_the_database_is_down() {
    readiness_follows("DATABASE_URL", "database unreachable").await;
}

#[tokio::test]
async fn readiness_fails_with_the_reason_while_the_node_is_down() {
    readiness_follows("RPC_URL", "node unreachable").await;
}

/// The HTTP status of GET `path` on 127.0.0.1:`port`, `None` when nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    chainsub_tests::http_get(port, path).map(|(code, _)| code)
}

/// Issue 12, point 4: a frozen writer (SIGSTOP: its TCP connection stays open and its kernel
/// still answers) is replaced in bounded time: its Postgres session ends after
/// INDEXER_WRITER_IDLE_TIMEOUT_MS without a statement, the standby takes the lock and
/// indexes new blocks; woken up (SIGCONT), the old writer finds its session gone and writes
/// nothing. The index equals a fresh one. Before, the standby never took over.
#[tokio::test]
async fn a_frozen_writer_is_replaced_and_cannot_write_when_it_wakes() {
    let Scene {
        chain,
        db,
        client,
        plan,
    } = Scene::start().await;
    fund(&chain, DevChain::address(CUSTOMER_B), 10 * USDC).await;
    let env = [("INDEXER_WRITER_IDLE_TIMEOUT_MS", "2000")];
    let (socket_a, socket_b) = (Reserved::new(), Reserved::new());
    let (port_a, port_b) = (socket_a.port, socket_b.port);
    let a = spawn_indexer(&chain, &db, &socket_a, &env);
    wait_until("A becomes the writer", || async {
        health(port_a).await["writer"] == true
    })
    .await;
    let _b = spawn_indexer(&chain, &db, &socket_b, &env);
    assert_eq!(health(port_b).await["writer"], false, "B waits");
    wait_for_head(&client, &chain).await;

    a.signal("-STOP");
    subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    wait_for_head(&client, &chain).await;
    assert_eq!(health(port_b).await["writer"], true, "B took over");
    assert_eq!(epoch(&client).await, 2);

    a.signal("-CONT");
    subscribe(&chain, DevChain::address(CUSTOMER_B), plan, B256::ZERO).await;
    wait_for_head(&client, &chain).await;
    wait_until("A notices it lost its session", || async {
        health(port_a).await["writer"] == false
    })
    .await;
    assert_eq!(epoch(&client).await, 2, "A never claimed the cursor again");
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

/// Issue 12, point 3: a reorg deeper than the finality window under the `halt` policy. The
/// indexer used to exit 1 (and, restarted, halt again at the same block, answering
/// nothing); it now stays up, /health answers 503 with the halt as its reason while /live
/// stays 200 (waiting for an operator, not wedged), and SIGTERM ends it with status 3.
#[tokio::test]
async fn a_halt_on_a_deep_reorg_is_reported_on_health_and_the_process_stays_up() {
    let Scene {
        chain, db, client, ..
    } = Scene::start().await;
    chain.mine(10).await;
    let socket = Reserved::new();
    let port = socket.port;
    let env = [("INDEXER_FINALITY_DEPTH", "2")];
    let mut child = spawn_indexer(&chain, &db, &socket, &env);
    wait_for_head(&client, &chain).await;
    chain.reorg(6, &[]).await;
    wait_until("readiness to report the halt", || async move {
        let h = health(port).await;
        h["status"] == "unavailable"
            && h["reasons"][0]
                .as_str()
                .is_some_and(|r| r.starts_with("halted: reorg deeper than the finality window"))
    })
    .await;
    assert_eq!(http_status(port, "/live"), Some(200));
    assert!(child.0.try_wait().unwrap().is_none(), "still up");
    let status = child.terminate(10).expect("exits after SIGTERM");
    assert_eq!(status.code(), Some(3), "{status:?}");
}

/// The writer's session is bounded on the server (INDEXER_WRITER_IDLE_TIMEOUT_MS) so that a
/// frozen writer is replaced; a healthy writer waiting on its node must not lose it. With
/// the node down for 4 s and a 2.5 s bound, the writer keeps its session (it pings while the
/// stream waits) and goes on with the same epoch; without the pings the server ended the
/// session and the indexer reclaimed the cursor under a new epoch.
#[tokio::test]
async fn a_writer_waiting_on_its_node_keeps_its_bounded_session() {
    use chainsub_tests::proxy::{Proxy, target_of, via};
    let Scene {
        chain,
        db,
        client,
        plan,
    } = Scene::start().await;
    let rpc = Proxy::start(target_of(&chain.anvil.url)).await;
    let rpc_url = via(&chain.anvil.url, rpc.addr);
    let env = [
        ("RPC_URL", rpc_url.as_str()),
        ("INDEXER_WRITER_IDLE_TIMEOUT_MS", "2500"),
    ];
    let _child = spawn_indexer(&chain, &db, &Reserved::new(), &env);
    wait_for_head(&client, &chain).await;
    assert_eq!(epoch(&client).await, 1);
    rpc.disable();
    tokio::time::sleep(Duration::from_secs(4)).await;
    rpc.enable();
    subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    wait_for_head(&client, &chain).await;
    assert_eq!(epoch(&client).await, 1, "the writer kept its session");
}

/// An indexer left running while a newer release migrates the database: the migration moves
/// the writer epoch on (as 0020 does), so the old writer's next batch is fenced, and when it
/// takes the writer lock again it finds a migration it does not know and exits (status 1,
/// saying so) instead of writing rows the newer schema keeps differently.
#[tokio::test]
async fn a_writer_stops_when_a_newer_release_has_migrated_its_database() {
    let Scene {
        chain,
        db,
        client,
        plan,
    } = Scene::start().await;
    let socket = Reserved::new();
    let mut child = spawn_indexer(&chain, &db, &socket, &[]);
    wait_for_head(&client, &chain).await;
    let before: i64 = client
        .query_one("SELECT count(*) FROM chain_events", &[])
        .await
        .unwrap()
        .get(0);
    client
        .batch_execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'newer', 'x');
             UPDATE indexer_cursor SET writer_epoch = writer_epoch + 1;",
        )
        .await
        .unwrap();
    subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    let status = chainsub_tests::wait_for_some("the old writer to exit", || {
        let exited = child.0.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert_eq!(status.code(), Some(1), "{status:?}");
    let after: i64 = client
        .query_one("SELECT count(*) FROM chain_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, before, "nothing written after the newer migration");
}
