//! The whole stack end to end: `indexer`, `api` (serving, with its webhook dispatcher) and
//! `keeper` as separate processes on one anvil and one Postgres database, driven only
//! through the chain and the API, the way a merchant and its customers would.
//!
//! It walks spec §1's call sequence (SIWE session -> `POST /auth/keys` -> plans -> checkouts
//! -> subscriptions -> events), brings two subscriptions through all six event kinds
//! (A: created, charged, renewal charged, cancel_at_period_end_set, ended; B: created,
//! charged, payment_failed, cancelled), reorgs B's first cancellation out while it is still
//! inside the CONFIRMATIONS window, and then checks that every event the API lists arrived
//! as a signed webhook with the same id (and nothing else did), that every ledger entry and
//! event carries the block and transaction the chain's receipts show, and that
//! `indexer verify` finds no difference. Build the binaries first:
//! `cargo build -p chainsub-indexer -p chainsub-keeper -p chainsub-api --bins` (scripts/test does).

use std::collections::{BTreeMap, BTreeSet};

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT};
use chainsub_tests::chain::dev_key;
use chainsub_tests::merchant::{ApiClient, wait_for};
use chainsub_tests::receiver::WebhookReceiver;
use chainsub_tests::services::{Services, test_env};
use chainsub_tests::{DevChain, TestDb};
use serde_json::Value;

const CONFIRMATIONS: u64 = 3;
const USDC: u64 = 1_000_000;

async fn head(chain: &DevChain) -> u64 {
    chain.provider.get_block_number().await.unwrap()
}

/// Waits until the API's health says the index reached the chain's current head.
async fn wait_indexed(api: &ApiClient, chain: &DevChain, services: &mut Services) {
    services.wait_indexed(api, chain).await;
}

async fn subscription(api: &ApiClient, key: &str, id: &str) -> Value {
    api.get_ok(&format!("/api/v1/subscriptions/{id}"), key)
        .await
        .unwrap()
}

/// Waits until subscription `id` satisfies `pred`.
async fn wait_sub(
    api: &ApiClient,
    key: &str,
    id: &str,
    what: &str,
    pred: fn(&Value) -> bool,
) -> Value {
    wait_for(what, 90, || async {
        let s = subscription(api, key, id).await;
        Ok(pred(&s).then_some(s))
    })
    .await
    .unwrap()
}

fn ledger_count(s: &Value, kind: &str) -> usize {
    s["ledger"]
        .as_array()
        .map_or(0, |l| l.iter().filter(|e| e["type"] == kind).count())
}

/// Moves chain time past `rfc3339` and mines a block.
async fn advance_past(chain: &DevChain, rfc3339: &str) {
    let target = chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp() as u64;
    let now = chain.now().await;
    chain.increase_time(target.saturating_sub(now) + 1).await;
}

/// The `chain` block of an event or ledger entry equals what the node's receipt says: same
/// block number and hash, and the log at that index is the contract's.
async fn assert_matches_receipt(chain: &DevChain, what: &str, c: &Value) {
    let tx: B256 = c["transactionHash"].as_str().unwrap().parse().unwrap();
    let receipt = chain
        .provider
        .get_transaction_receipt(tx)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: no receipt for {tx} on chain"));
    let block_hash: B256 = c["blockHash"].as_str().unwrap().parse().unwrap();
    assert_eq!(receipt.block_hash, Some(block_hash), "{what}: block hash");
    assert_eq!(
        receipt.block_number,
        c["blockNumber"].as_u64(),
        "{what}: block number"
    );
    let log_index = c["logIndex"].as_u64().unwrap();
    let log = receipt
        .inner
        .logs()
        .iter()
        .find(|l| l.log_index == Some(log_index))
        .unwrap_or_else(|| panic!("{what}: receipt has no log {log_index}"));
    assert_eq!(
        log.address(),
        chain.manager,
        "{what}: emitted by the contract"
    );
    assert_eq!(
        c["contract"].as_str().unwrap().parse::<Address>().unwrap(),
        chain.manager
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_lifecycle_through_three_processes_delivers_all_six_kinds_survives_a_reorg_and_verifies()
 {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let (a_wallet, b_wallet) = (DevChain::address(CUSTOMER), DevChain::address(CUSTOMER_B));
    for w in [a_wallet, b_wallet] {
        chain.mint(w, 1_000 * USDC).await;
    }
    let receiver = WebhookReceiver::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut services = Services::start(test_env(&chain, &db, CONFIRMATIONS));
    let api = services.api_client().await;

    // §1: the merchant signs in with its wallet, gets its key, sets its webhook URL.
    let session = api.sign_in(&dev_key(MERCHANT)).await.unwrap();
    let key = api.create_key(&session).await.unwrap();
    let (status, key_status) = api
        .session_call(reqwest::Method::GET, "/api/v1/auth/keys", &session, None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{key_status}");
    assert!(
        key_status.to_string().contains(&key[key.len() - 4..]),
        "key status shows the last 4: {key_status}"
    );
    let secret = api.set_webhook(&session, &receiver.url()).await.unwrap();
    receiver.set_secret(&secret);

    // Plans and checkouts with the key.
    let plan = api.create_plan(&key, "E2E Pro", "5.00").await.unwrap();
    let plan_id = plan["id"].as_str().unwrap();
    assert_matches_receipt(&chain, "plan", &plan["chain"]).await;
    let plans = api.get_ok("/api/v1/plans", &key).await.unwrap();
    assert!(
        plans["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == plan_id)
    );
    // The checkout hands out transactions only for a plan indexed with CONFIRMATIONS.
    chain.mine(CONFIRMATIONS).await;
    let checkout_a = api.create_checkout(&key, plan_id, "user-a").await.unwrap();
    let checkout_b = api.create_checkout(&key, plan_id, "user-b").await.unwrap();

    // Both customers subscribe as the checkout page has them: one permit signature, then one
    // transaction (`subscribeWithPermit`).
    for (checkout, wallet) in [(&checkout_a, a_wallet), (&checkout_b, b_wallet)] {
        let url = checkout["url"].as_str().unwrap();
        let steps = api
            .subscribe_via_checkout(url, &chain.provider, wallet)
            .await
            .unwrap();
        let names: Vec<&str> = steps.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, ["subscribe"]);
    }
    // B takes its allowance back, so its renewal will fail.
    chainsub_tests::send_as!(b_wallet, chain.usdc().approve(chain.manager, U256::ZERO));
    chain.mine(CONFIRMATIONS).await;
    wait_indexed(&api, &chain, &mut services).await;

    let find = |customer: &'static str| {
        let api = api.clone();
        let key = key.clone();
        async move {
            let list = api
                .get_ok(
                    &format!("/api/v1/subscriptions?customerExternalId={customer}"),
                    &key,
                )
                .await
                .unwrap();
            let data = list["data"].as_array().unwrap();
            assert_eq!(data.len(), 1, "{customer}: {list}");
            data[0].clone()
        }
    };
    let (sub_a, sub_b) = (find("user-a").await, find("user-b").await);
    let (a, b) = (
        sub_a["id"].as_str().unwrap().to_string(),
        sub_b["id"].as_str().unwrap().to_string(),
    );
    assert_eq!(sub_a["planId"], plan_id);
    assert_eq!(sub_a["status"], "active");
    assert_eq!(
        sub_b["subscriber"]
            .as_str()
            .unwrap()
            .parse::<Address>()
            .unwrap(),
        b_wallet
    );
    // Ids are opaque (issue 10): not the contract's sequence number, which is served under
    // `chain`, but a hash of the creating transaction that any re-index derives again.
    let onchain = |s: &Value| s["chain"]["onchainSubscriptionId"].as_u64().unwrap();
    for s in [&sub_a, &sub_b] {
        let id = s["id"].as_str().unwrap();
        let tx: B256 = s["chain"]["transactionHash"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let want = chainsub_core::SubscriptionId::of_creation(31337, tx, onchain(s));
        assert_eq!(id, want.as_str(), "{s}");
        assert!(!id.ends_with(&format!("_{}", onchain(s))), "{id}");
    }
    let (onchain_a, onchain_b) = (U256::from(onchain(&sub_a)), U256::from(onchain(&sub_b)));

    // A month later the keeper renews A and B's pull fails.
    let later = [&sub_a, &sub_b]
        .iter()
        .map(|s| s["currentPeriodEnd"].as_str().unwrap().to_string())
        .max()
        .unwrap();
    advance_past(&chain, &later).await;
    wait_sub(&api, &key, &a, "A renewed by the keeper", |s| {
        ledger_count(s, "charge") == 2
    })
    .await;
    let failed = wait_sub(&api, &key, &b, "B past due", |s| s["status"] == "past_due").await;
    assert_eq!(failed["ledger"].as_array().unwrap().len(), 2, "{failed}");

    // A asks to stop at the period end; B cancels, but the block is reorged out while it
    // has fewer than CONFIRMATIONS confirmations.
    chainsub_tests::send_as!(a_wallet, chain.manager().cancelAtPeriodEnd(onchain_a));
    chain.mine(CONFIRMATIONS).await;
    chainsub_tests::send_as!(b_wallet, chain.manager().cancel(onchain_b));
    wait_indexed(&api, &chain, &mut services).await;
    let doomed: Vec<Value> = api
        .get_ok(
            &format!("/api/v1/events?subscriptionId={b}&type=subscription.cancelled"),
            &key,
        )
        .await
        .unwrap()["data"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(doomed.len(), 1, "the cancellation is indexed: {doomed:?}");
    let doomed_id = doomed[0]["id"].as_str().unwrap().to_string();
    assert!(
        doomed[0]["delivery"].is_null(),
        "not queued before confirmation"
    );
    assert_eq!(subscription(&api, &key, &b).await["status"], "cancelled");

    let _: Value = chain
        .provider
        .raw_request("anvil_reorg".into(), (1u64, Vec::<Value>::new()))
        .await
        .expect("anvil_reorg");
    chain.mine(CONFIRMATIONS + 2).await;
    wait_indexed(&api, &chain, &mut services).await;
    let after = subscription(&api, &key, &b).await;
    assert_eq!(
        after["status"], "past_due",
        "the reorg undid the cancel: {after}"
    );
    let (status, _) = api
        .get(&format!("/api/v1/events/{doomed_id}"), &key)
        .await
        .unwrap();
    assert_eq!(status, 404, "the reorged-out event is gone from the API");

    // B cancels again (a new log, a new id), and A's period runs out: the keeper ends it.
    chainsub_tests::send_as!(b_wallet, chain.manager().cancel(onchain_b));
    let a_now = subscription(&api, &key, &a).await;
    assert_eq!(a_now["cancelAtPeriodEnd"], true);
    advance_past(&chain, a_now["currentPeriodEnd"].as_str().unwrap()).await;
    wait_sub(&api, &key, &a, "A ended by the keeper", |s| {
        s["status"] == "ended"
    })
    .await;
    chain.mine(CONFIRMATIONS).await;
    wait_indexed(&api, &chain, &mut services).await;
    assert_eq!(subscription(&api, &key, &b).await["status"], "cancelled");

    // Every event the API lists arrives as a verified webhook with the same id and type.
    let events = api.all_events(&key, 0).await.unwrap();
    let listed: BTreeMap<String, String> = events
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_string(),
                e["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let kinds: BTreeSet<&str> = listed.values().map(String::as_str).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "subscription.cancel_at_period_end_set",
            "subscription.cancelled",
            "subscription.charged",
            "subscription.created",
            "subscription.ended",
            "subscription.payment_failed",
        ])
    );
    assert_eq!(listed.len(), 9, "A: 5 events, B: 4 events: {listed:?}");
    wait_for("a webhook for every listed event", 60, || async {
        let got: BTreeSet<String> = receiver
            .received()
            .iter()
            .filter(|d| d.verified)
            .map(|d| d.id.clone())
            .collect();
        Ok(listed.keys().all(|id| got.contains(id)).then_some(()))
    })
    .await
    .unwrap();
    services.assert_alive();
    let received = receiver.received();
    for d in &received {
        assert!(d.verified, "signature of {} rejected: {:?}", d.id, d.error);
        assert_eq!(
            listed.get(&d.id),
            Some(&d.kind),
            "webhook {} ({}) is not an event the API lists: a phantom",
            d.id,
            d.kind
        );
        assert_eq!(d.json["id"], d.id.as_str(), "payload id = webhook-id");
    }
    assert!(
        received.iter().all(|d| d.id != doomed_id),
        "no webhook for the reorged-out event"
    );
    // docs/event-examples.md shows each type's fields.
    crate::guide_snippets::assert_examples_hold(&received);
    // Every metric the alert rules and dashboards name is on the running processes' scrape.
    crate::operators_kit::assert_named_metrics_scraped(&services.scrape().await);
    // The dispatcher records a delivery once the receiver has answered (its writer commits
    // outcomes in batches), so the list read above, before the webhooks arrived, may still
    // show some as pending or delivering: read it again until every one is recorded.
    let events = wait_for("every listed event's delivery recorded", 60, || async {
        let now = api.all_events(&key, 0).await.unwrap();
        Ok(now
            .iter()
            .all(|e| e["delivery"]["status"] == "delivered")
            .then_some(now))
    })
    .await
    .unwrap();
    assert_eq!(events.len(), listed.len(), "{events:?}");
    for e in &events {
        assert!(listed.contains_key(e["id"].as_str().unwrap()), "{e}");
        assert_matches_receipt(&chain, e["id"].as_str().unwrap(), &e["chain"]).await;
    }

    // Ledger entries and subscriptions carry the chain's own block and tx.
    for id in [&a, &b] {
        let s = subscription(&api, &key, id).await;
        assert_matches_receipt(&chain, id, &s["chain"]).await;
        for entry in s["ledger"].as_array().unwrap() {
            assert_matches_receipt(&chain, &format!("{id} ledger"), &entry["chain"]).await;
            assert!(
                listed.contains_key(entry["id"].as_str().unwrap()),
                "{entry}"
            );
        }
    }
    let a_final = subscription(&api, &key, &a).await;
    assert_eq!(ledger_count(&a_final, "charge"), 2);

    // The reconciliation tool agrees with the index over the whole chain.
    let (clean, report) = services.verify(head(&chain).await);
    assert!(clean, "indexer verify found differences:\n{report}");

    // SIGTERM: each service exits cleanly.
    for (name, mut child) in services.children.drain(..).rev() {
        let status = child
            .terminate(30)
            .unwrap_or_else(|| panic!("{name} ignored SIGTERM"));
        assert!(status.success(), "{name} exited {status}");
    }
    let _ = std::fs::remove_dir_all(&services.logs);
}

/// Issue 10, point 7: indexer, api (with its dispatcher) and keeper as processes, given a
/// `DATABASE_URL` with `sslmode=verify-full` and the local cluster's certificate as the CA,
/// hold only TLS connections to the database, and do their work (the API answers from it,
/// the indexer moves its cursor).
#[tokio::test]
async fn every_service_talks_to_postgres_over_verified_tls() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let mut env = test_env(&chain, &db, 0);
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_host(Some("localhost")).unwrap();
    url.set_query(Some(
        "sslmode=verify-full&sslrootcert=/etc/ssl/certs/ssl-cert-snakeoil.pem",
    ));
    for (k, v) in &mut env {
        if k == "DATABASE_URL" {
            *v = url.to_string();
        }
    }
    let mut services = Services::start(env);
    let probe = db.connect().await;
    let http = reqwest::Client::new();
    let health = format!("{}/api/v1/health", services.api.url());
    wait_for("the api to answer from the database", 30, || async {
        let ok = http
            .get(&health)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        Ok(ok.then_some(()))
    })
    .await
    .unwrap();
    wait_for("the indexer's cursor", 30, || async {
        let n: i64 = probe
            .query_one("SELECT count(*) FROM indexer_cursor", &[])
            .await?
            .get(0);
        Ok((n > 0).then_some(()))
    })
    .await
    .unwrap();
    // indexer writer, keeper lock and pool, api pool and webhook LISTEN: at least four.
    let (tls, plain) = wait_for("the services' connections", 30, || async {
        let row = probe
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
                 FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid \
                 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
                &[],
            )
            .await?;
        let (tls, plain): (i64, i64) = (row.get(0), row.get(1));
        Ok((tls >= 4).then_some((tls, plain)))
    })
    .await
    .unwrap();
    services.assert_alive();
    assert_eq!(
        plain, 0,
        "{plain} plaintext connections next to {tls} TLS ones"
    );
}
