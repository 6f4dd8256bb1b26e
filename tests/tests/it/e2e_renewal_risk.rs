//! Renewal-at-risk warnings (issue 14, point 3) through the three processes: three days (the
//! default lead) before a renewal falls due, the keeper reads each subscriber's USDC balance
//! and allowance at one block; a shortfall becomes a `subscription.renewal_at_risk` event —
//! listed by `GET /api/v1/events`, delivered as a signed webhook — marked as an observation
//! (`chain: null`, `observation` names the block), at most once per period and reason.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT, STRANGER};
use chainsub_tests::chain::dev_key;
use chainsub_tests::merchant::{ApiClient, wait_for};
use chainsub_tests::receiver::WebhookReceiver;
use chainsub_tests::services::{Services, test_env};
use chainsub_tests::{DevChain, TestDb, send_as};
use serde_json::Value;

const CONFIRMATIONS: u64 = 1;
const PRICE: u64 = 5_000_000;
const RISK: &str = "subscription.renewal_at_risk";

async fn risks(api: &ApiClient, key: &str, extra: &str) -> Vec<Value> {
    api.get_ok(&format!("/api/v1/events?type={RISK}&limit=100{extra}"), key)
        .await
        .unwrap()["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn checks(db: &TestDb) -> i64 {
    db.connect()
        .await
        .query_one("SELECT count(*) FROM renewal_checks", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn short_allowance_or_balance_before_a_renewal_is_one_observed_event_and_webhook_each() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let receiver = WebhookReceiver::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut services = Services::start(test_env(&chain, &db, CONFIRMATIONS));
    let api = services.api_client().await;
    let session = api.sign_in(&dev_key(MERCHANT)).await.unwrap();
    let key = api.create_key(&session).await.unwrap();
    let secret = api.set_webhook(&session, &receiver.url()).await.unwrap();
    receiver.set_secret(&secret);
    let plan = api.create_plan(&key, "Risky", "5.00").await.unwrap();
    let plan_onchain = U256::from(plan["chain"]["onchainPlanId"].as_u64().unwrap());
    let other_plan = api.create_plan(&key, "Risky too", "5.00").await.unwrap();
    let other_plan_onchain = U256::from(other_plan["chain"]["onchainPlanId"].as_u64().unwrap());
    let merchant = DevChain::address(MERCHANT);

    // A allows exactly one payment (the first): its allowance is 0 after. B holds exactly one
    // payment: its balance is 0 after. C is fine.
    let (a, b, c) = (
        DevChain::address(CUSTOMER),
        DevChain::address(CUSTOMER_B),
        DevChain::address(STRANGER),
    );
    let subscribe = |who: Address, balance: u64, allowance: U256, plan: U256| {
        let chain = &chain;
        async move {
            chain.mint(who, balance).await;
            send_as!(who, chain.usdc().approve(chain.manager, allowance));
            send_as!(
                who,
                chain
                    .manager()
                    .subscribe(plan, merchant, U256::from(PRICE), B256::ZERO)
            );
        }
    };
    subscribe(a, 100 * PRICE, U256::from(PRICE), plan_onchain).await;
    subscribe(b, PRICE, U256::MAX, plan_onchain).await;
    subscribe(c, 100 * PRICE, U256::MAX, plan_onchain).await;
    // D subscribes to both plans, with an allowance left for one renewal only: each renewal
    // alone is covered, both together are not. The first due is fine, the second at risk.
    let d = DevChain::address(6);
    subscribe(d, 100 * PRICE, U256::from(2 * PRICE), plan_onchain).await;
    subscribe(d, 0, U256::from(2 * PRICE), other_plan_onchain).await;
    // E holds and allows exactly one payment: short of both, one event for each reason.
    let e_wallet = DevChain::address(7);
    subscribe(e_wallet, PRICE, U256::from(PRICE), plan_onchain).await;
    chain.mine(CONFIRMATIONS).await;
    services.wait_indexed(&api, &chain).await;
    let subs = api.get_ok("/api/v1/subscriptions", &key).await.unwrap();
    let subs = subs["data"].as_array().unwrap().clone();
    assert_eq!(subs.len(), 6, "{subs:?}");
    // The oldest subscription of `who` (D has two).
    let id_of = |who: Address| {
        subs.iter()
            .rev()
            .find(|s| s["subscriber"] == who.to_checksum(None))
            .map(|s| s["id"].as_str().unwrap().to_string())
            .unwrap()
    };
    let d_second = subs[1]["id"].as_str().unwrap().to_string();
    let due_of = |id: &str| {
        subs.iter()
            .find(|s| s["id"] == id)
            .map(|s| s["currentPeriodEnd"].as_str().unwrap().to_string())
            .unwrap()
    };
    let due = due_of(&id_of(a));

    // A month before the due date: not yet. (A negative: give the keeper passes to act.)
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(checks(&db).await, 0, "no check before the lead");

    // Two days before the due date: inside the three-day lead.
    let due_ts = chrono::DateTime::parse_from_rfc3339(&due)
        .unwrap()
        .timestamp() as u64;
    let now = chain.now().await;
    chain.increase_time(due_ts - now - 2 * 86_400).await;
    chain.mine(1).await;
    let listed = wait_for("five renewal-at-risk events", 60, || async {
        let l = risks(&api, &key, "").await;
        Ok((l.len() >= 5).then_some(l))
    })
    .await
    .unwrap();
    assert_eq!(listed.len(), 5, "{listed:?}");
    // E: one event per reason, distinct ids.
    let e_reasons: std::collections::BTreeSet<&str> = listed
        .iter()
        .filter(|e| e["data"]["subscriptionId"] == id_of(e_wallet).as_str())
        .filter_map(|e| e["data"]["renewalAtRisk"]["reason"].as_str())
        .collect();
    assert_eq!(
        e_reasons,
        ["allowance", "balance"].into_iter().collect(),
        "{listed:?}"
    );
    // D's second renewal: 5.00 due, 10.00 needed by then with its first, 5.00 allowed.
    let e = listed
        .iter()
        .find(|e| e["data"]["subscriptionId"] == d_second.as_str())
        .unwrap_or_else(|| panic!("no event for D's second subscription: {listed:?}"));
    let risk = &e["data"]["renewalAtRisk"];
    assert_eq!(
        (&risk["reason"], &risk["amountDue"], &risk["amountRequired"]),
        (
            &Value::from("allowance"),
            &Value::from("5.00"),
            &Value::from("10.00")
        ),
        "{e}"
    );
    assert_eq!(
        (&risk["available"], &risk["shortfall"]),
        (&Value::from("5.00"), &Value::from("5.00")),
        "{e}"
    );
    assert_eq!(risk["dueAt"], due_of(&d_second).as_str(), "{e}");
    for (who, reason) in [(a, "allowance"), (b, "balance")] {
        let e = listed
            .iter()
            .find(|e| e["data"]["subscriptionId"] == id_of(who).as_str())
            .unwrap_or_else(|| panic!("no event for {who}: {listed:?}"));
        assert_eq!(e["type"], RISK);
        assert_eq!(e["chain"], Value::Null, "an observation, not a log: {e}");
        assert_eq!(e["data"]["txHash"], Value::Null, "{e}");
        let risk = &e["data"]["renewalAtRisk"];
        assert_eq!(risk["reason"], reason, "{e}");
        assert_eq!(
            (&risk["amountDue"], &risk["available"], &risk["shortfall"]),
            (
                &Value::from("5.00"),
                &Value::from("0.00"),
                &Value::from("5.00")
            ),
            "{e}"
        );
        assert_eq!(risk["amountRequired"], "5.00", "{e}");
        // Each subscription's own due date (they started seconds apart).
        assert_eq!(risk["dueAt"], due_of(&id_of(who)).as_str(), "{e}");
        assert_eq!(risk["period"], 2, "{e}");
        assert_eq!(e["data"]["subscriberAddress"], who.to_checksum(None), "{e}");
        // The observed block is a block of the chain, by number and hash.
        let o = &e["observation"];
        let block = chain
            .provider
            .get_block_by_number(o["blockNumber"].as_u64().unwrap().into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            o["blockHash"].as_str().unwrap().parse::<B256>().unwrap(),
            block.header.hash,
            "{e}"
        );
        assert_eq!(
            o["contract"].as_str().unwrap().parse::<Address>().unwrap(),
            chain.manager
        );
        // One subscription's events: the filter finds it.
        let one = risks(&api, &key, &format!("&subscriptionId={}", id_of(who))).await;
        assert_eq!(one.len(), 1, "{one:?}");
        // GET /events/{id} serves the same object.
        let got = api
            .get_ok(
                &format!("/api/v1/events/{}", e["id"].as_str().unwrap()),
                &key,
            )
            .await
            .unwrap();
        assert_eq!(got["data"], e["data"]);
    }

    // Both delivered as signed webhooks with the listed ids.
    receiver
        .wait_until("both warnings delivered", |got| {
            got.iter().filter(|d| d.kind == RISK).count() >= 5
        })
        .await;
    let delivered: Vec<_> = receiver
        .received()
        .into_iter()
        .filter(|d| d.kind == RISK)
        .collect();
    assert_eq!(delivered.len(), 5);
    for d in &delivered {
        assert!(d.verified, "{:?}", d.error);
        assert!(listed.iter().any(|e| e["id"] == d.id.as_str()));
        assert_eq!(d.json["chain"], Value::Null);
    }

    // Once per period and reason: more passes and more time inside the lead add nothing.
    chain.increase_time(3_600).await;
    chain.mine(2).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(risks(&api, &key, "").await.len(), 5);
    assert_eq!(
        checks(&db).await,
        6,
        "one check per subscription and period"
    );
    assert_eq!(
        receiver
            .received()
            .iter()
            .filter(|d| d.kind == RISK)
            .count(),
        5
    );
    // Reconciliation is not confused by the observations: their webhooks are no orphans.
    services.wait_indexed(&api, &chain).await;
    let head = chain.provider.get_block_number().await.unwrap();
    let (ok, report) = services.verify(head);
    assert!(ok, "indexer verify: {report}");
    services.assert_alive();
}
