//! Operating the keeper: the gas budget, the funds pre-check, one keeper per chain, health
//! and metrics, and a clean stop on SIGTERM.

use crate::support::{DAY, Stack, Step, due_subscription, http_get, spawn, wait_exit, wait_health};
use chainsub_abi::EndReason;
use chainsub_tests::Reserved;
use chainsub_tests::chain::accounts;

#[tokio::test(flavor = "multi_thread")]
async fn spent_gas_budget_stops_sends_and_once_exits_with_status_2() {
    let (stack, sub) = due_subscription(3).await;

    let status = stack.keeper_once(&["--gas-budget-wei", "1000"]);
    assert_eq!(
        status.code(),
        Some(2),
        "budget exhaustion is reported in the exit status"
    );
    assert_eq!(stack.steps(sub).await, vec![]);
    assert_eq!(stack.journal(sub).await, vec![]);

    // A budget that fits one charge admits exactly that one.
    stack.keeper_pass();
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn budget_exhaustion_is_reported_on_health_and_metrics() {
    let (stack, sub) = due_subscription(3).await;
    let socket = Reserved::new();
    let port = socket.port;
    let mut keeper = spawn(stack.keeper_on(&socket), &["--gas-budget-wei", "1000"]);

    let health = wait_health(port, |h| h["status"] == "budget_exhausted");
    assert_eq!(health["budgetExhausted"], true);
    assert_eq!(health["lockHeld"], true);
    assert_eq!(health["budgetWei"], "1000");
    let (code, metrics) = http_get(port, "/metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("keeper_budget_exhausted 1"), "{metrics}");
    assert!(
        metrics.contains("keeper_skipped_total{reason=\"budget\"}"),
        "{metrics}"
    );
    assert_eq!(stack.steps(sub).await, vec![]);

    // SIGTERM: a clean exit.
    let status = keeper.terminate(30).expect("keeper exits on SIGTERM");
    assert!(status.success(), "{status}");
}

/// The keeper refuses a key that another sender uses: the contract's operator key is the API
/// relayer's, and two senders on one nonce replace each other's transactions silently.
#[tokio::test(flavor = "multi_thread")]
async fn the_keeper_refuses_to_start_with_the_operators_key() {
    let (stack, sub) = due_subscription(3).await;
    let out = stack
        .keeper()
        .env(
            "KEEPER_PRIVATE_KEY",
            chainsub_tests::chain::DEV_KEYS[accounts::OPERATOR],
        )
        .arg("--once")
        .stdout(std::process::Stdio::piped())
        .output()
        .expect("run keeper");
    assert_eq!(out.status.code(), Some(1));
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("KEEPER_PRIVATE_KEY is the contract operator's key"),
        "{log}"
    );
    assert!(
        !log.contains('\x1b'),
        "no colour codes in a log that is not a terminal: {log}"
    );
    assert_eq!(stack.steps(sub).await, vec![], "nothing was sent");
}

/// The watchdog. A due subscription whose due step the journal already holds as mined, in a
/// block the index has passed, is one the keeper would never offer again (what a step identity
/// that misses a way the contract records an attempt leaves behind). It is reported — the
/// gauge, `/health`, `--once` exit 4 — instead of sitting past due in silence.
#[tokio::test(flavor = "multi_thread")]
async fn a_due_subscription_whose_step_is_journaled_as_mined_is_reported_stranded() {
    let (stack, sub) = due_subscription(3).await;
    stack
        .pg
        .execute(
            "INSERT INTO keeper_steps (chain_id, contract, subscription_id, period, attempt, due_at,
                 action, keeper_address, nonce, status, block_number)
             SELECT chain_id, $2, onchain_id, period + 1, failed_attempts + 1, current_period_end,
                 'charge', $3, 0, 'mined', 1
             FROM subscriptions WHERE chain_id = $1 AND onchain_id = $4",
            &[
                &(stack.chain.anvil.chain_id as i64),
                &stack.chain.manager.as_slice(),
                &crate::support::keeper_address().as_slice(),
                &(sub as i64),
            ],
        )
        .await
        .unwrap();

    // The planted step sits in block 1: settled at any depth below the head.
    let settled = ["--reorg-depth", "2"];
    assert_eq!(stack.keeper_once(&settled).code(), Some(4));
    assert_eq!(stack.steps(sub).await, vec![], "nothing was sent for it");

    let socket = Reserved::new();
    let port = socket.port;
    let _keeper = spawn(stack.keeper_on(&socket), &settled);
    let health = wait_health(port, |h| h["status"] == "stranded");
    assert_eq!(health["stranded"], 1);
    let (_, metrics) = http_get(port, "/metrics");
    assert!(
        metrics.contains("keeper_stranded_subscriptions 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn healthy_keeper_reports_ok_and_counts_sends_in_metrics() {
    let (stack, sub) = due_subscription(3).await;
    let socket = Reserved::new();
    let port = socket.port;
    let mut keeper = spawn(stack.keeper_on(&socket), &[]);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            1,
        )
        .await;
    let health = wait_health(port, |h| h["status"] == "ok" && h["inFlight"] == 0);
    assert_eq!(health["stranded"], 0);
    assert_eq!(
        health["keeperAddress"].as_str().unwrap().to_lowercase(),
        crate::support::keeper_address().to_string().to_lowercase()
    );
    assert_eq!(http_get(port, "/ready").0, 200);
    let (code, live) = http_get(port, "/live");
    assert_eq!((code, live.as_str()), (200, r#"{"status":"alive"}"#));
    let (code, metrics) = http_get(port, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("keeper_sends_total{action=\"charge\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("keeper_receipts_total{result=\"mined\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("keeper_lock_held 1"), "{metrics}");
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert!(keeper.terminate(30).expect("exits").success());
}

/// A `--once` run right after another (cron, a loop, CI) may find the lock still held by the
/// previous run's session, which the server ends a moment after that process exits: it waits
/// out such a moment instead of exiting 3. (Seen in CI: back-to-back `keeper --once` passes,
/// the second exiting 3.)
#[tokio::test(flavor = "multi_thread")]
async fn once_waits_a_moment_for_a_lock_being_released() {
    let stack = Stack::start().await;
    let key = chainsub_migrations::locks::keeper(stack.chain.anvil.chain_id as i64);
    let holder = stack.db.connect().await;
    let got: bool = holder
        .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
        .await
        .unwrap()
        .get(0);
    assert!(got);
    // The holder's session ends 300 ms after the run starts.
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        drop(holder);
    });
    let status = tokio::task::block_in_place(|| stack.keeper_once(&[]));
    release.await.unwrap();
    assert!(status.success(), "keeper --once: {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn second_keeper_on_the_same_chain_stands_by_until_the_first_is_gone() {
    let stack = Stack::start().await;
    let socket = Reserved::new();
    let port = socket.port;
    let first = spawn(stack.keeper_on(&socket), &[]);
    wait_health(port, |h| h["lockHeld"] == true);

    // --once gives up with status 3 (after a 2 s grace); a long-running one waits as a standby.
    assert_eq!(stack.keeper_once(&[]).code(), Some(3));
    let standby_socket = Reserved::new();
    let standby_port = standby_socket.port;
    let _standby = spawn(stack.keeper_on(&standby_socket), &[]);
    wait_health(standby_port, |h| {
        h["status"] == "standby" && h["lockHeld"] == false
    });

    // The first one dies; the standby takes over.
    first.kill();
    wait_health(standby_port, |h| {
        h["lockHeld"] == true && h["status"] == "ok"
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn precheck_defers_a_futile_charge_then_sends_it_so_the_failure_counts() {
    // Allowance for the first period only: the renewal cannot be pulled.
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let sub = stack.subscribe(accounts::CUSTOMER, plan, 1).await;
    let period_end = stack
        .chain
        .manager()
        .getSubscription(alloy::primitives::U256::from(sub))
        .call()
        .await
        .unwrap()
        .periodEnd;
    // A minute past the period end: due, but well inside the deferral.
    let now = stack.chain.now().await;
    stack.chain.increase_time(period_end - now + 60).await;
    stack.sync_index().await;
    let precheck = ["--precheck-funds", "--futile-defer-secs", "7200"];

    stack.keeper_once(&precheck);
    assert_eq!(
        stack.steps(sub).await,
        vec![],
        "deferred while the customer may top up"
    );
    assert_eq!(stack.journal(sub).await, vec![]);

    // After the deferral the attempt is sent anyway: the grace rules need recorded failures.
    stack.chain.increase_time(7200).await;
    stack.sync_index().await;
    assert!(stack.keeper_once(&precheck).success());
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Failed {
            period: 2,
            attempt: 1
        }]
    );

    // The retries follow, each deferred the same way, and the third failure ends it.
    for recorded in 1..3 {
        stack.sync_index().await;
        stack.chain.increase_time(DAY + 60).await;
        stack.sync_index().await;
        stack.keeper_once(&precheck);
        assert_eq!(stack.steps(sub).await.len(), recorded, "retry deferred too");
        stack.chain.increase_time(7200).await;
        stack.sync_index().await;
        stack.keeper_once(&precheck);
    }
    assert_eq!(
        stack.steps(sub).await,
        vec![
            Step::Failed {
                period: 2,
                attempt: 1
            },
            Step::Failed {
                period: 2,
                attempt: 2
            },
            Step::Failed {
                period: 2,
                attempt: 3
            },
            Step::Ended(EndReason::PaymentFailed),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn precheck_sends_at_once_when_the_subscriber_can_pay() {
    let (stack, sub) = due_subscription(3).await;
    assert!(
        stack
            .keeper_once(&["--precheck-funds", "--futile-defer-secs", "7200"])
            .success()
    );
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn keeper_refuses_a_chain_id_that_the_rpc_does_not_serve() {
    let stack = Stack::start().await;
    let mut cmd = stack.keeper();
    cmd.env("CHAIN_ID", "1");
    let mut child = spawn(cmd, &["--once"]);
    let status = wait_exit(&mut child);
    assert_eq!(status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn keeper_that_loses_its_lock_session_stops_sending_and_takes_the_lock_again() {
    let stack = Stack::start().await;
    let socket = Reserved::new();
    let port = socket.port;
    let mut keeper = spawn(stack.keeper_on(&socket), &[]);
    wait_health(port, |h| h["lockHeld"] == true && h["status"] == "ok");

    // Terminate the keeper's lock session on the server. Advisory locks are per database and
    // every test's keeper takes the same key (one chain id), so only this test's database
    // counts: tests running beside this one hold the key in theirs.
    let lock_key = chainsub_migrations::locks::keeper(stack.chain.anvil.chain_id as i64);
    let killed = stack.lock_sessions(lock_key, true).await;
    assert_eq!(killed, 1, "exactly one session held the keeper lock");

    // Issue 11, point 11: it stops sending, reconnects and takes the lock again (it used to
    // exit, and renewals stopped until a supervisor restarted it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !http_get(port, "/metrics")
        .1
        .contains("keeper_lock_lost_total 1")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the lost lock session was never noticed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    wait_health(port, |h| h["lockHeld"] == true && h["status"] == "ok");
    assert!(
        keeper.0.try_wait().unwrap().is_none(),
        "the keeper is still running"
    );
    let holders = stack.lock_sessions(lock_key, false).await;
    assert_eq!(
        holders, 1,
        "the keeper holds the lock again, in a new session"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unfunded_keeper_is_refused_by_the_node_then_charges_once_topped_up() {
    use alloy::primitives::U256;
    use alloy::providers::Provider;

    let (stack, sub) = due_subscription(3).await;
    let set_balance = |wei: U256| {
        let provider = stack.chain.provider.clone();
        async move {
            let _: serde_json::Value = provider
                .raw_request(
                    "anvil_setBalance".into(),
                    (crate::support::keeper_address(), wei),
                )
                .await
                .unwrap();
        }
    };
    set_balance(U256::from(1_000u64)).await;
    stack.keeper_once(&[]);
    assert_eq!(stack.steps(sub).await, vec![]);
    assert_eq!(stack.journal(sub).await, vec![(2, 1, "failed".to_string())]);

    set_balance(U256::from(10u64).pow(U256::from(18u64))).await;
    assert!(stack.keeper_once(&[]).success());
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(stack.journal(sub).await, vec![(2, 1, "mined".to_string())]);
    let statuses: Vec<String> = stack
        .pg
        .query("SELECT status FROM keeper_txs ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // The retry may sign the very same bytes (same nonce and fees) or new ones; either way
    // exactly one transaction was mined and the refused one never was.
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("mined"),
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| *s == "mined").count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(stack.keeper_tx_count().await, 1);
}

/// Issue 12, point 5: the database and the node both down when the keeper starts, back
/// after 2 and 4 s: the keeper waits for them (migrations, the node's chain id and the
/// contract's token, its lock session) instead of exiting 1, then takes its lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_and_a_node_down_at_start_up_are_waited_for() {
    use chainsub_tests::proxy::{Proxy, target_of, via};
    let stack = Stack::start().await;
    let pg = Proxy::start_disabled(target_of(&stack.db.url)).await;
    let rpc = Proxy::start_disabled(target_of(&stack.chain.anvil.url)).await;
    let socket = Reserved::new();
    let mut cmd = stack.keeper_on(&socket);
    cmd.env("DATABASE_URL", via(&stack.db.url, pg.addr))
        .env("RPC_URL", via(&stack.chain.anvil.url, rpc.addr));
    let mut keeper = spawn(cmd, &[]);
    for (down, what) in [(&pg, "the database"), (&rpc, "the node")] {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        assert!(
            keeper.0.try_wait().unwrap().is_none(),
            "the keeper gave up while {what} was down"
        );
        down.enable();
    }
    let port = socket.port;
    tokio::task::spawn_blocking(move || {
        wait_health(port, |h| h["lockHeld"] == true && h["status"] == "ok")
    })
    .await
    .unwrap();
    assert!(keeper.0.try_wait().unwrap().is_none());
}

/// Issue 12, point 4 (keeper): a frozen keeper (SIGSTOP) keeps its lock session open, so no
/// standby used to take over and renewals stopped. Its lock session now ends on the server
/// after KEEPER_LOCK_IDLE_TIMEOUT_MS without the heartbeat; the standby takes the lock;
/// woken (SIGCONT), the old keeper finds its lock session gone and stands by.
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_keeper_is_replaced_and_stands_by_when_it_wakes() {
    let stack = Stack::start().await;
    let socket = Reserved::new();
    let port = socket.port;
    let mut cmd = stack.keeper_on(&socket);
    cmd.env("KEEPER_LOCK_IDLE_TIMEOUT_MS", "2000");
    let mut first = spawn(cmd, &[]);
    wait_health(port, |h| h["lockHeld"] == true);
    let standby_socket = Reserved::new();
    let standby_port = standby_socket.port;
    let _standby = spawn(stack.keeper_on(&standby_socket), &[]);
    wait_health(standby_port, |h| h["status"] == "standby");

    first.signal("-STOP");
    wait_health(standby_port, |h| {
        h["lockHeld"] == true && h["status"] == "ok"
    });
    first.signal("-CONT");
    // Woken, it finds its lock session gone, stops sending and stands by behind the keeper
    // that took over.
    wait_health(port, |h| h["status"] == "standby" && h["lockHeld"] == false);
    assert!(first.0.try_wait().unwrap().is_none());
}

/// Issue 11, point 11: the database goes away during a renewal wave (every connection cut and
/// new ones refused for 3 s, as a Postgres restart looks from the keeper) — the keeper used to
/// exit within seconds. It stays up, reconnects, takes its lock again, and every due
/// subscription is charged exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_restart_during_a_renewal_wave_charges_every_due_subscription_once() {
    use chainsub_tests::proxy::{Proxy, target_of, via};
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let mut subs = Vec::new();
    for c in [accounts::CUSTOMER, accounts::CUSTOMER_B, 6, 7, 8, 9] {
        subs.push(stack.subscribe(c, plan, 3).await);
    }
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;

    let pg = Proxy::start(target_of(&stack.db.url)).await;
    let socket = Reserved::new();
    let port = socket.port;
    let mut cmd = stack.keeper_on(&socket);
    cmd.env("DATABASE_URL", via(&stack.db.url, pg.addr));
    // Two renewals per transaction: three sends, the wave spans the outage.
    let mut keeper = spawn(cmd, &["--concurrency", "2", "--charges-per-tx", "2"]);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status IN ('sent', 'mined')",
            1,
        )
        .await;
    pg.disable();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        keeper.0.try_wait().unwrap().is_none(),
        "the keeper exited while its database was down"
    );
    pg.enable();
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            subs.len() as i64,
        )
        .await;
    tokio::task::spawn_blocking(move || {
        wait_health(port, |h| h["lockHeld"] == true && h["status"] == "ok")
    })
    .await
    .unwrap();
    stack.assert_each_charged_once(&subs).await;
    assert_eq!(stack.keeper_tx_count().await, subs.len() as u64 / 2);
    assert!(keeper.0.try_wait().unwrap().is_none());
}
