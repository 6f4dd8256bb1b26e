//! The checkout hands out a transaction only for confirmed facts (issue 11, point 5): the
//! plan's on-chain id comes from the index with CONFIRMATIONS, never from the relayer's
//! receipt, and the plan is read on chain (`getPlan`) before any transaction is prepared.
//! Real anvil, the real `indexer` binary, the API in process.

use crate::api_common::{App, Opts, spawn, spawn_indexer};
use alloy::primitives::{Address, B256, U256};
use alloy::sol_types::SolCall;
use chainsub_abi::SubscriptionManager;
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT, MERCHANT_B, OPERATOR};
use serde_json::{Value, json};

const CONFIRMATIONS: u64 = 2;

async fn app() -> (App, String) {
    let app = spawn(Opts {
        chain: true,
        confirmations: Some(CONFIRMATIONS),
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    (app, key)
}

async fn tip(app: &App) -> i64 {
    let c = app.db().await;
    c.query_opt("SELECT block_number FROM indexer_cursor", &[])
        .await
        .unwrap()
        .map_or(-1, |r| r.get(0))
}

async fn head(app: &App) -> i64 {
    use alloy::providers::Provider;
    let chain = app.chain.as_ref().unwrap();
    chain.provider.get_block_number().await.unwrap() as i64
}

async fn wait_indexed(app: &App) {
    let target = head(app).await;
    chainsub_tests::wait_until("the indexer at the chain head", || async {
        tip(app).await >= target
    })
    .await;
}

/// A 9.99 plan and a checkout link for `customer`; the link's URL.
async fn plan_and_checkout(app: &App, key: &str, customer: &str) -> String {
    let plan = app.monthly_plan(key, "Pro").await;
    let plan_id = plan.body["id"].as_str().unwrap().to_string();
    let checkout = app
        .post(
            "/api/v1/checkouts",
            key,
            &json!({"planId": plan_id, "customerExternalId": customer}),
            None,
        )
        .await;
    assert_eq!(checkout.status, 201, "{:?}", checkout.body);
    checkout.body["url"].as_str().unwrap().to_string()
}

/// `GET {checkout}/tx?permit=off&from=` → (status, body) (approve + subscribe).
async fn tx(app: &App, checkout_url: &str, from: Address) -> (u16, Value) {
    let url = format!(
        "{}&permit=off&from={}",
        checkout_url.replacen('?', "/tx?", 1),
        from.to_checksum(None)
    );
    let r = app.api.send(app.http.get(url)).await.unwrap();
    (r.status, r.body)
}

/// The on-chain plan id the `subscribe` step of a `/tx` answer calls.
fn subscribe_plan_id(v: &Value) -> U256 {
    let step = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "subscribe")
        .unwrap_or_else(|| panic!("no subscribe step: {v}"));
    let data: alloy::primitives::Bytes = step["tx"]["data"].as_str().unwrap().parse().unwrap();
    SubscriptionManager::subscribeCall::abi_decode(&data)
        .unwrap()
        .planId
}

/// The relayer's receipt says on-chain plan 1. A reorg then puts another merchant's
/// `createPlan` first, so plan 1 is theirs and ours lands as plan 2. The receipt-first
/// checkout of v1 handed the customer `subscribe(1, …)`: a payment to the other merchant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reorg_gives_the_receipts_plan_id_to_another_merchant_the_checkout_uses_ours() {
    let (app, key) = app().await;
    let _indexer = spawn_indexer(&app, CONFIRMATIONS);
    let chain = app.chain.as_ref().unwrap();
    let plan = app
        .post(
            "/api/v1/plans",
            &key,
            &json!({"name": "Pro", "amount": "9.99", "currency": "USDC", "interval": "month"}),
            None,
        )
        .await;
    assert_eq!(plan.body["status"], "active", "{:?}", plan.body);
    assert_eq!(plan.body["chain"]["onchainPlanId"], 1);
    let plan_ref: B256 = plan.body["provisioning"]["planRef"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let plan_id = plan.body["id"].as_str().unwrap().to_string();

    // The block with our createPlan is replaced: the other merchant's plan first, ours
    // (re-sent by the relayer's account) second.
    let other = DevChain::address(MERCHANT_B);
    let theirs = SubscriptionManager::createPlanCall {
        merchant: other,
        amount: U256::from(1_000_000u64),
        planRef: B256::repeat_byte(0xee),
    };
    let ours = SubscriptionManager::createPlanCall {
        merchant: DevChain::address(MERCHANT),
        amount: U256::from(9_990_000u64),
        planRef: plan_ref,
    };
    chain
        .reorg(
            1,
            &[
                (other, chain.manager, theirs.abi_encode(), 0),
                (
                    DevChain::address(OPERATOR),
                    chain.manager,
                    ours.abi_encode(),
                    0,
                ),
            ],
        )
        .await;
    let onchain = chain.manager().getPlan(U256::from(1)).call().await.unwrap();
    assert_eq!(
        onchain.merchant, other,
        "the reorg gave plan 1 to the other merchant"
    );

    let checkout = app
        .post(
            "/api/v1/checkouts",
            &key,
            &json!({"planId": plan_id, "customerExternalId": "user-1"}),
            None,
        )
        .await;
    assert_eq!(checkout.status, 201, "{:?}", checkout.body);
    let url = checkout.body["url"].as_str().unwrap().to_string();
    let customer = DevChain::address(CUSTOMER);

    // Indexed but not yet confirmed: no transaction at all.
    wait_indexed(&app).await;
    let (status, body) = tx(&app, &url, customer).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("plan_not_active")),
        "{body}"
    );

    // Confirmed: the transaction names our plan, 2 — never the receipt's 1.
    chain.mine(CONFIRMATIONS).await;
    wait_indexed(&app).await;
    let (status, body) = tx(&app, &url, customer).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["planOnchainId"], 2, "{body}");
    assert_eq!(subscribe_plan_id(&body), U256::from(2));
}

/// The index and the API's plan row say one thing, the chain another (a hand edit here; in
/// life a bug or an index behind a reorg): the checkout reads the plan on chain and refuses
/// with a clear error and no transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkout_refuses_when_the_plan_on_chain_differs_from_the_link() {
    let (app, key) = app().await;
    let _indexer = spawn_indexer(&app, CONFIRMATIONS);
    let chain = app.chain.as_ref().unwrap();
    let url = plan_and_checkout(&app, &key, "user-1").await;
    chain.mine(CONFIRMATIONS).await;
    wait_indexed(&app).await;
    let customer = DevChain::address(CUSTOMER);
    assert_eq!(tx(&app, &url, customer).await.0, 200);

    app.db()
        .await
        .execute("UPDATE plans SET amount = 1000000", &[])
        .await
        .unwrap();
    let (status, body) = tx(&app, &url, customer).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("plan_mismatch")),
        "{body}"
    );
    assert!(body.get("steps").is_none());

    // Deactivated on chain (and indexed): refused as inactive, and the page says so.
    app.db()
        .await
        .execute("UPDATE plans SET amount = 9990000", &[])
        .await
        .unwrap();
    chainsub_tests::send_as!(
        DevChain::address(MERCHANT),
        chain.manager().deactivatePlan(U256::from(1))
    );
    wait_indexed(&app).await;
    let (status, body) = tx(&app, &url, customer).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("plan_inactive")),
        "{body}"
    );
    let page = app.api.send(app.http.get(&url)).await.unwrap();
    assert!(
        page.body
            .as_str()
            .unwrap()
            .contains("no longer accepts new subscriptions"),
        "{:?}",
        page.body
    );
}

/// v1 put one customerRef per customer into every subscription: anyone could copy the
/// victim's from the public SubscriptionCreated log, subscribe from their own wallet and
/// cancel, and the merchant received `subscription.cancelled` naming the victim's
/// customerExternalId. Now the reference is made for the connected wallet, and a copied one
/// resolves to no customer — and the subscription says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_reference_copied_into_another_wallets_subscription_names_no_customer() {
    use chainsub_tests::chain::accounts::{CUSTOMER_B, STRANGER};
    let (app, key) = app().await;
    let _indexer = spawn_indexer(&app, CONFIRMATIONS);
    let chain = app.chain.as_ref().unwrap();
    let url = plan_and_checkout(&app, &key, "victim").await;
    chain.mine(CONFIRMATIONS).await;
    wait_indexed(&app).await;

    // The victim subscribes through the checkout.
    let victim = DevChain::address(CUSTOMER);
    chain.mint(victim, 100_000_000).await;
    let victim_subs = app
        .api
        .subscribe_via_checkout(&url, &chain.provider, victim)
        .await
        .unwrap();
    let created = victim_subs
        .last()
        .unwrap()
        .1
        .inner
        .logs()
        .iter()
        .find_map(|l| match chainsub_abi::ContractEvent::decode(&l.inner) {
            Ok(chainsub_abi::ContractEvent::SubscriptionCreated(c)) => Some(c),
            _ => None,
        });
    let copied = created.expect("SubscriptionCreated").customerRef;

    // The attacker copies the reference from the public log, subscribes from their own
    // wallet, and cancels.
    let attacker = DevChain::address(STRANGER);
    chain.mint(attacker, 100_000_000).await;
    chainsub_tests::send_as!(attacker, chain.usdc().approve(chain.manager, U256::MAX));
    let (merchant, amount) = chain.plan_terms(U256::from(1)).await;
    chainsub_tests::send_as!(
        attacker,
        chain
            .manager()
            .subscribe(U256::from(1), merchant, amount, copied)
    );
    chainsub_tests::send_as!(attacker, chain.manager().cancel(U256::from(2)));
    // A second wallet that asks the page for its own reference gets a different one.
    let other = app
        .api
        .checkout_transactions(&url, DevChain::address(CUSTOMER_B))
        .await
        .unwrap();
    let step = other["steps"].as_array().unwrap().last().unwrap().clone();
    let data: alloy::primitives::Bytes = step["tx"]["data"].as_str().unwrap().parse().unwrap();
    let theirs = SubscriptionManager::subscribeCall::abi_decode(&data).unwrap();
    assert_ne!(theirs.customerRef, copied, "the reference is per wallet");
    wait_indexed(&app).await;

    let subs = app.get("/api/v1/subscriptions?limit=10", &key).await;
    let by_wallet = |w: Address| {
        subs.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subscriber"] == w.to_checksum(None))
            .cloned()
            .unwrap_or_else(|| panic!("no subscription of {w}: {:?}", subs.body))
    };
    let v = by_wallet(victim);
    assert_eq!(
        (&v["customerExternalId"], &v["customerReference"]),
        (&json!("victim"), &json!("matched"))
    );
    let a = by_wallet(attacker);
    assert_eq!(
        (&a["customerExternalId"], &a["customerReference"]),
        (&Value::Null, &json!("unmatched")),
        "{a}"
    );
    let events = app
        .get("/api/v1/events?type=subscription.cancelled", &key)
        .await;
    let cancelled = &events.body["data"][0]["data"];
    assert_eq!(cancelled["customerExternalId"], Value::Null, "{cancelled}");
}

/// Issue 14, point 4: the checkout offers a permit only for a token whose EIP-2612 domain it
/// can read and check on chain; anything else (here a contract without `permit`) gets the
/// two-transaction way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_offered_only_for_a_token_with_a_usable_eip2612_domain() {
    use chainsub_api::pages::checkout::{permit_domain, read_provider};
    let chain = DevChain::start().await;
    let provider = read_provider(&chain.anvil.rpc_url()).unwrap();
    let owner = DevChain::address(CUSTOMER_B);
    let domain = permit_domain(
        &provider,
        chainsub_core::ChainId::new(chain.anvil.chain_id).unwrap(),
        chain.usdc,
        owner,
    )
    .await
    .expect("MockUSDC has permit");
    assert_eq!(
        (domain.name.as_str(), domain.version.as_str(), domain.nonce),
        ("Mock USD Coin", "2", U256::ZERO)
    );
    assert!(domain.deadline > domain.block_time);
    // The manager has no name/version/nonces/DOMAIN_SEPARATOR: no permit.
    assert_eq!(
        permit_domain(
            &provider,
            chainsub_core::ChainId::new(chain.anvil.chain_id).unwrap(),
            chain.manager,
            owner
        )
        .await,
        None
    );
    // A wrong chain id makes the computed domain differ from the token's: no permit.
    assert_eq!(
        permit_domain(
            &provider,
            chainsub_core::ChainId::new(chain.anvil.chain_id + 1).unwrap(),
            chain.usdc,
            owner
        )
        .await,
        None
    );
}
