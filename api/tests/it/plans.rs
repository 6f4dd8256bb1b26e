//! Plans provisioned on a real anvil by the relayer, provisioning failures and retries, and
//! checkouts — with every validation error naming its field.

use crate::api_common::{
    App, Opts, Proxy, api_process, seed_chain_plan, seed_cursor, seed_subscription, spawn,
    spawn_with, target_of, via,
};
use alloy::primitives::{B256, U256};
use chainsub_tests::chain::accounts::{MERCHANT, MERCHANT_B, STRANGER};
use chainsub_tests::{DevChain, TestDb};
use serde_json::{Value, json};

fn plan_body(name: &str) -> Value {
    json!({ "name": name, "amount": "9.99", "currency": "USDC", "interval": "month" })
}

async fn chain_app() -> (App, String) {
    let app = spawn(Opts {
        chain: true,
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    (app, key)
}

async fn plan_count(app: &App) -> U256 {
    app.chain
        .as_ref()
        .unwrap()
        .manager()
        .planCount()
        .call()
        .await
        .unwrap()
}

#[tokio::test]
async fn created_plan_is_provisioned_on_chain_with_its_chain_block() {
    let (app, key) = chain_app().await;
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Pro Monthly"), None)
        .await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let plan = r.body;
    assert!(plan["id"].as_str().unwrap().starts_with("plan_"));
    assert_eq!(plan["object"], "plan");
    assert_eq!(plan["status"], "active");
    assert_eq!(plan["amount"], "9.99");
    assert_eq!(plan["currency"], "USDC");
    assert_eq!(plan["interval"], "month");
    assert_eq!(plan["slug"], "pro-monthly");
    let chain = &plan["chain"];
    assert_eq!(chain["chainId"], 31337);
    assert_eq!(chain["onchainPlanId"], 1);
    assert!(chain["transactionHash"].as_str().unwrap().len() == 66);
    assert!(chain["blockNumber"].as_i64().unwrap() > 0);

    // The chain agrees: merchant, amount in base units, and the planRef we show.
    let dev = app.chain.as_ref().unwrap();
    let onchain = dev.manager().getPlan(U256::from(1)).call().await.unwrap();
    assert_eq!(onchain.merchant, DevChain::address(MERCHANT));
    assert_eq!(onchain.amount, U256::from(9_990_000u64));
    let plan_ref: B256 = plan["provisioning"]["planRef"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(onchain.planRef, plan_ref);

    let got = app
        .get(
            &format!("/api/v1/plans/{}", plan["id"].as_str().unwrap()),
            &key,
        )
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["chain"], plan["chain"]);
    let list = app.get("/api/v1/plans", &key).await;
    assert_eq!(list.body["object"], "list");
    assert_eq!(list.body["data"][0]["id"], plan["id"]);
    assert_eq!(list.body["hasMore"], false);
}

#[tokio::test]
async fn a_plan_with_a_trial_is_created_with_it_on_chain() {
    let (app, key) = chain_app().await;
    for (n, days) in [(1u64, json!(14)), (2, json!(30.0))] {
        let mut body = plan_body(&format!("Trial {n}"));
        body["trialDays"] = days.clone();
        let r = app.post("/api/v1/plans", &key, &body, None).await;
        assert_eq!(r.status, 201, "{:?}", r.body);
        let want = days.as_f64().unwrap() as u16;
        assert_eq!(r.body["trialDays"], want);
        let onchain = app
            .chain
            .as_ref()
            .unwrap()
            .manager()
            .getPlan(U256::from(n))
            .call()
            .await;
        assert_eq!(
            onchain.unwrap().trialDays,
            want,
            "createPlanWithTrial on chain"
        );
    }
    let r = app
        .post("/api/v1/plans", &key, &plan_body("No trial"), None)
        .await;
    assert_eq!(r.body["trialDays"], 0);
}

#[tokio::test]
async fn failed_provisioning_is_visible_and_retry_never_makes_a_second_onchain_plan() {
    let (app, key, proxy) = proxied_chain_app().await;

    // The chain is unreachable: the plan exists, visibly failed, and cannot be sold.
    proxy.disable();
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Basic"), None)
        .await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["status"], "failed");
    assert!(r.body["provisioning"]["error"].is_string());
    assert!(r.body["chain"].is_null());
    let id = r.body["id"].as_str().unwrap().to_string();
    let co = app
        .post("/api/v1/checkouts", &key, &json!({ "planId": id }), None)
        .await;
    assert_eq!(co.status, 409);
    assert_eq!(co.error_code(), Some("plan_not_active"));
    assert_eq!(co.error_param(), Some("planId"));

    // Back online: the retry provisions it.
    proxy.enable();
    let r = app.provision(&id, &key).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["status"], "active");
    assert_eq!(plan_count(&app).await, U256::from(1));

    // Retrying an active plan, even concurrently, changes nothing on chain.
    let (a, b) = tokio::join!(app.provision(&id, &key), app.provision(&id, &key));
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(plan_count(&app).await, U256::from(1));
}

#[tokio::test]
async fn retry_after_an_unrecorded_landing_adopts_the_existing_onchain_plan() {
    let (app, key, proxy) = proxied_chain_app().await;
    proxy.disable();
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Basic"), None)
        .await;
    assert_eq!(r.body["status"], "failed");
    let id = r.body["id"].as_str().unwrap().to_string();
    let plan_ref: B256 = r.body["provisioning"]["planRef"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // The plan lands on chain without the API recording it (e.g. the API crashed after
    // sending): here the merchant itself calls createPlan with the same planRef.
    let dev = app.chain.as_ref().unwrap();
    dev.manager()
        .createPlan(
            DevChain::address(MERCHANT),
            U256::from(9_990_000u64),
            plan_ref,
        )
        .from(DevChain::address(MERCHANT))
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    proxy.enable();
    let r = app.provision(&id, &key).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["status"], "active");
    assert_eq!(
        plan_count(&app).await,
        U256::from(1),
        "no second on-chain plan"
    );
}

/// A failed plan's reference is public (the merchant's API shows it; a pending transaction
/// shows it to everyone). v1 kept one global namespace, so an outsider who registered it
/// for himself made every provisioning of the merchant's plan revert.
async fn failed_plan(app: &App, key: &str) -> (String, B256) {
    let r = app
        .post("/api/v1/plans", key, &plan_body("Basic"), None)
        .await;
    assert_eq!(r.body["status"], "failed", "{:?}", r.body);
    let plan_ref: B256 = r.body["provisioning"]["planRef"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (r.body["id"].as_str().unwrap().to_string(), plan_ref)
}

/// `who` registers a 1-unit plan of its own under `plan_ref`.
async fn take_ref(dev: &DevChain, who: alloy::primitives::Address, plan_ref: B256) {
    chainsub_tests::send_as!(
        who,
        dev.manager().createPlan(who, U256::from(1u64), plan_ref)
    );
}

async fn proxied_chain_app() -> (App, String, Proxy) {
    let db = TestDb::create().await;
    let chain = DevChain::start().await;
    let proxy = Proxy::start(target_of(&chain.anvil.url)).await;
    let rpc = via(&chain.anvil.url, proxy.addr);
    let app = spawn_with(
        db,
        Some(chain),
        Opts {
            rpc_url: Some(rpc),
            provision_timeout_ms: 5_000,
            ..Opts::default()
        },
    )
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    (app, key, proxy)
}

#[tokio::test]
async fn an_outsider_who_copies_a_plan_ref_neither_blocks_provisioning_nor_becomes_the_plan() {
    let (app, key, proxy) = proxied_chain_app().await;
    proxy.disable();
    let (id, plan_ref) = failed_plan(&app, &key).await;

    // The outsider registers the same reference, for himself, first.
    let outsider = DevChain::address(STRANGER);
    let dev = app.chain.as_ref().unwrap();
    take_ref(dev, outsider, plan_ref).await;
    proxy.enable();
    let r = app.provision(&id, &key).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["status"], "active");
    assert_eq!(r.body["chain"]["onchainPlanId"], 2, "{:?}", r.body);

    // Once both plans are indexed, the API still names the merchant's (the reference is
    // joined with the merchant's wallet), and so does the subscriptions' plan filter.
    let c = app.db().await;
    seed_cursor(&c, 200).await;
    seed_chain_plan(&c, outsider, 1, plan_ref.as_slice(), 10).await;
    seed_chain_plan(&c, DevChain::address(MERCHANT), 2, plan_ref.as_slice(), 11).await;
    let (sub, _) = seed_subscription(&c, DevChain::address(MERCHANT), 1, 2, None).await;
    let got = app.get(&format!("/api/v1/plans/{id}"), &key).await;
    assert_eq!(got.body["chain"]["onchainPlanId"], 2, "{:?}", got.body);
    let subs = app
        .get(&format!("/api/v1/subscriptions?planId={id}"), &key)
        .await;
    assert_eq!(subs.status, 200, "{:?}", subs.body);
    assert_eq!(subs.body["data"][0]["id"], sub.as_str(), "{:?}", subs.body);
}

#[tokio::test]
async fn a_reference_the_merchant_took_for_another_plan_is_replaced_and_provisioning_goes_on() {
    let (app, key, proxy) = proxied_chain_app().await;
    proxy.disable();
    let (id, plan_ref) = failed_plan(&app, &key).await;

    // The merchant's own namespace now holds a different plan (another amount) under the
    // reference: createPlan can never succeed with it again.
    let merchant = DevChain::address(MERCHANT);
    let dev = app.chain.as_ref().unwrap();
    take_ref(dev, merchant, plan_ref).await;
    proxy.enable();
    let r = app.provision(&id, &key).await;

    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["status"], "active", "{:?}", r.body);
    let new_ref: B256 = r.body["provisioning"]["planRef"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(new_ref, plan_ref);
    let onchain = dev.manager().getPlan(U256::from(2)).call().await.unwrap();
    assert_eq!(
        (onchain.merchant, onchain.amount, onchain.planRef),
        (merchant, U256::from(9_990_000u64), new_ref)
    );
    // One on-chain plan of ours, whatever the retries.
    let again = app.provision(&id, &key).await;
    assert_eq!(again.body["status"], "active");
    assert_eq!(plan_count(&app).await, U256::from(2));
}

#[tokio::test]
async fn plan_validation_errors_name_the_field() {
    let app = spawn(Opts::default()).await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    let base = plan_body("Pro");
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    let cases: Vec<(Value, &str)> = vec![
        (without("name"), "name"),
        (with("name", json!("")), "name"),
        (with("name", json!("   ")), "name"),
        (with("name", json!(42)), "name"),
        (with("name", json!("x".repeat(101))), "name"),
        (with("name", json!("bad\u{0007}name")), "name"),
        (without("amount"), "amount"),
        (with("amount", json!(9.99)), "amount"),
        (with("amount", json!("0")), "amount"),
        (with("amount", json!("0.00")), "amount"),
        (with("amount", json!("-1.00")), "amount"),
        (with("amount", json!("+1.00")), "amount"),
        (with("amount", json!("1e3")), "amount"),
        (with("amount", json!(" 1.00")), "amount"),
        (with("amount", json!("1.0000001")), "amount"),
        (with("amount", json!("1.")), "amount"),
        (with("trialDays", json!(91)), "trialDays"),
        (with("trialDays", json!(-1)), "trialDays"),
        (with("trialDays", json!(1.5)), "trialDays"),
        (with("trialDays", json!("14")), "trialDays"),
        (with("amount", json!(".5")), "amount"),
        (with("amount", json!("01.00")), "amount"),
        (with("amount", json!("1,00")), "amount"),
        (with("amount", json!("99999999999999")), "amount"),
        (without("currency"), "currency"),
        (with("currency", json!("usdc")), "currency"),
        (with("currency", json!("ETH")), "currency"),
        (without("interval"), "interval"),
        (with("interval", json!("year")), "interval"),
        (with("interval", json!("Month")), "interval"),
        (with("slug", json!("Not A Slug")), "slug"),
        (with("slug", json!("-x")), "slug"),
        (with("slug", json!(5)), "slug"),
        (with("extra", json!(1)), "extra"),
    ];
    for (body, param) in cases {
        let r = app.post("/api/v1/plans", &key, &body, None).await;
        assert_eq!(r.status, 400, "{body} -> {:?}", r.body);
        assert_eq!(r.error_param(), Some(param), "{body} -> {:?}", r.body);
        assert_eq!(r.body["error"]["type"], "invalid_request_error");
    }
    let n: i64 = app
        .db()
        .await
        .query_one("SELECT count(*) FROM plans", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "no invalid plan was stored");
}

#[tokio::test]
async fn slugs_are_unique_per_merchant() {
    let app = spawn(Opts::default()).await;
    let a = app.merchant_key(DevChain::address(MERCHANT)).await;
    let b = app.merchant_key(DevChain::address(MERCHANT_B)).await;
    let mut body = plan_body("Pro");
    body["slug"] = json!("pro");
    assert_eq!(app.post("/api/v1/plans", &a, &body, None).await.status, 201);
    let dup = app.post("/api/v1/plans", &a, &body, None).await;
    assert_eq!(dup.status, 409);
    assert_eq!(dup.error_param(), Some("slug"));
    // Another merchant may use the same slug.
    assert_eq!(app.post("/api/v1/plans", &b, &body, None).await.status, 201);
    // A slug derived from a taken name gets a suffix instead of an error.
    let derived = app.post("/api/v1/plans", &a, &plan_body("Pro"), None).await;
    assert_eq!(derived.status, 201);
    assert!(derived.body["slug"].as_str().unwrap().starts_with("pro-"));
}

#[tokio::test]
async fn checkout_url_is_signed_for_plan_and_customer() {
    let (app, key) = chain_app().await;
    let plan = app
        .post("/api/v1/plans", &key, &plan_body("Pro"), None)
        .await
        .body;
    let plan_id = plan["id"].as_str().unwrap();
    let r = app
        .post(
            "/api/v1/checkouts",
            &key,
            &json!({ "planId": plan_id, "customerExternalId": "user 42&x" }),
            None,
        )
        .await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert!(r.body["id"].as_str().unwrap().starts_with("chk_"));
    assert_eq!(r.body["object"], "checkout");
    assert_eq!(r.body["planId"], plan_id);
    assert_eq!(r.body["customerExternalId"], "user 42&x");
    let url = url::Url::parse(r.body["url"].as_str().unwrap()).unwrap();
    let segs: Vec<&str> = url.path_segments().unwrap().collect();
    assert_eq!(segs[0], "checkout");
    assert_eq!(segs[2], "pro");
    let q: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q["customer"], "user 42&x");
    let terms = |customer| chainsub_api::checkout::LinkTerms {
        customer,
        expires: None,
    };
    assert!(chainsub_api::checkout::verify(
        crate::api_common::SECRET,
        segs[1],
        "pro",
        terms(Some("user 42&x")),
        &q["sig"]
    ));
    assert!(!chainsub_api::checkout::verify(
        crate::api_common::SECRET,
        segs[1],
        "pro",
        terms(Some("user 43")),
        &q["sig"]
    ));

    // customer_ref stored: HMAC-derived, never the raw id.
    let db = app.db().await;
    let row = db
        .query_one(
            "SELECT customer_ref, customer_external_id FROM checkouts",
            &[],
        )
        .await
        .unwrap();
    let cref: Vec<u8> = row.get(0);
    assert_eq!(cref.len(), 32);
    assert_ne!(cref, vec![0u8; 32]);

    // Without a customer: no `customer` parameter, zero customerRef.
    let r = app
        .post(
            "/api/v1/checkouts",
            &key,
            &json!({ "planId": plan_id }),
            None,
        )
        .await;
    assert_eq!(r.status, 201);
    assert!(!r.body["url"].as_str().unwrap().contains("customer="));
    assert_eq!(r.body["customerExternalId"], Value::Null);
    // The on-chain reference depends on the subscribing wallet: the checkout page derives
    // it for the connected wallet, so the checkout object carries none.
    assert!(r.body.get("customerRef").is_none(), "{:?}", r.body);
}

#[tokio::test]
async fn checkout_validation_errors_name_the_field_and_other_merchants_plans_are_404() {
    let (app, key) = chain_app().await;
    let other = app.merchant_key(DevChain::address(MERCHANT_B)).await;
    let plan = app
        .post("/api/v1/plans", &key, &plan_body("Pro"), None)
        .await
        .body;
    let plan_id = plan["id"].as_str().unwrap();
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({}), 400, "planId"),
        (json!({ "planId": null }), 400, "planId"),
        (json!({ "planId": 7 }), 400, "planId"),
        (json!({ "planId": "sub_1" }), 400, "planId"),
        (
            json!({ "planId": plan_id, "customerExternalId": "" }),
            400,
            "customerExternalId",
        ),
        (
            json!({ "planId": plan_id, "customerExternalId": 5 }),
            400,
            "customerExternalId",
        ),
        (
            json!({ "planId": plan_id, "customerExternalId": "x".repeat(129) }),
            400,
            "customerExternalId",
        ),
        (
            json!({ "planId": plan_id, "customerExternalId": "a\nb" }),
            400,
            "customerExternalId",
        ),
        (json!({ "planId": plan_id, "coupon": "x" }), 400, "coupon"),
        (json!({ "planId": "plan_doesnotexist" }), 404, "planId"),
    ];
    for (body, status, param) in cases {
        let r = app.post("/api/v1/checkouts", &key, &body, None).await;
        assert_eq!(r.status, status, "{body} -> {:?}", r.body);
        assert_eq!(r.error_param(), Some(param), "{body} -> {:?}", r.body);
    }
    let r = app
        .post(
            "/api/v1/checkouts",
            &other,
            &json!({ "planId": plan_id }),
            None,
        )
        .await;
    assert_eq!(
        r.status, 404,
        "another merchant's plan is not found: {:?}",
        r.body
    );
}

/// Issue 11, point 8: anyone can sign up and every plan costs the relayer a transaction. A
/// merchant's plan creations per 24 hours are bounded (429 with Retry-After, nothing
/// written, nothing sent); other merchants are not affected.
#[tokio::test]
async fn plan_creations_beyond_the_daily_quota_are_refused_and_change_nothing() {
    let app = spawn(Opts {
        chain: true,
        args: vec!["--plan-creations-per-day".into(), "2".into()],
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    for name in ["One", "Two"] {
        let r = app
            .post("/api/v1/plans", &key, &plan_body(name), None)
            .await;
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Three"), None)
        .await;
    assert_eq!(r.status, 429, "{:?}", r.body);
    assert_eq!(r.error_code(), Some("plan_quota_exceeded"));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry > 0 && retry <= 86_400, "{retry}");
    assert_eq!(plan_count(&app).await, U256::from(2), "nothing sent");
    let list = app.get("/api/v1/plans", &key).await;
    assert_eq!(
        list.body["data"].as_array().unwrap().len(),
        2,
        "nothing written"
    );

    let other = app.merchant_key(DevChain::address(MERCHANT_B)).await;
    let r = app
        .post("/api/v1/plans", &other, &plan_body("Theirs"), None)
        .await;
    assert_eq!(r.status, 201, "another merchant's quota is its own");
}

/// A 429 is an answer to retry, not a result: under an Idempotency-Key it is not stored, so the
/// same request with the same key, once the quota has room again, creates the plan instead of
/// replaying the refusal for a day.
#[tokio::test]
async fn a_quota_refusal_is_not_stored_under_the_idempotency_key() {
    let app = spawn(Opts {
        chain: true,
        args: vec!["--plan-creations-per-day".into(), "1".into()],
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    let r = app
        .post("/api/v1/plans", &key, &plan_body("One"), None)
        .await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let body = plan_body("Two");
    let r = app
        .post("/api/v1/plans", &key, &body, Some("plan-two"))
        .await;
    assert_eq!(r.status, 429, "{:?}", r.body);

    // A day later (the first plan's creation moved back), the quota has room.
    app.db()
        .await
        .execute(
            "UPDATE plans SET created_at = created_at - interval '25 hours'",
            &[],
        )
        .await
        .unwrap();
    let r = app
        .post("/api/v1/plans", &key, &body, Some("plan-two"))
        .await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.header("idempotent-replayed"), None);
    let again = app
        .post("/api/v1/plans", &key, &body, Some("plan-two"))
        .await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(
        again.body["id"], r.body["id"],
        "the success is the stored result"
    );
}

/// A relayer below RELAYER_MIN_BALANCE_WEI sends nothing: a clear 503 to the merchant (no
/// plan row, no transaction), `relayer: low_balance` in /health, and the balance metric.
#[tokio::test]
async fn a_relayer_that_cannot_pay_refuses_provisioning_with_a_clear_503() {
    // The dev relayer holds 10,000 ETH: require more.
    let app = spawn(Opts {
        chain: true,
        metrics: true,
        args: vec![
            "--relayer-min-balance-wei".into(),
            "20000000000000000000000".into(),
        ],
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Pro"), None)
        .await;
    assert_eq!(r.status, 503, "{:?}", r.body);
    assert_eq!(r.error_code(), Some("relayer_underfunded"));
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("relayer")
    );
    assert_eq!(plan_count(&app).await, U256::ZERO);
    let list = app.get("/api/v1/plans", &key).await;
    assert_eq!(list.body["data"], json!([]));

    let health = app.get("/api/v1/health", "").await;
    assert_eq!(health.status, 200, "a warning, not a failed health check");
    assert_eq!(
        health.body.get("relayer"),
        None,
        "the relayer's funds are the operator's"
    );
    let health = app.operator_health().await;
    assert_eq!(health.status, 200, "a warning, not a failed health check");
    assert_eq!(health.body["relayer"], "low_balance");
    let m = app.metrics().await;
    assert!(m.contains("api_relayer_balance_wei"), "{m}");
}

async fn hand_operator(dev: &DevChain, from: usize, to: usize) {
    let (from, to) = (DevChain::address(from), DevChain::address(to));
    chainsub_tests::send_as!(from, dev.manager().transferOperator(to));
    chainsub_tests::send_as!(to, dev.manager().acceptOperator());
}

/// Issue 11, point 7: a createPlan that fails (here: the relayer is not the operator for a
/// while, so the estimate reverts; and the key is used from elsewhere meanwhile) must leave
/// no cached nonce ahead of or behind the chain: every later plan becomes active.
#[tokio::test]
async fn after_a_reverting_create_plan_later_plans_are_all_provisioned() {
    use chainsub_tests::chain::accounts::{KEEPER, OPERATOR};
    let (app, key) = chain_app().await;
    let dev = app.chain.as_ref().unwrap();
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Warm"), None)
        .await;
    assert_eq!(r.body["status"], "active", "{:?}", r.body);

    hand_operator(dev, OPERATOR, KEEPER).await;
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Refused"), None)
        .await;
    assert_eq!(r.body["status"], "failed", "{:?}", r.body);
    hand_operator(dev, KEEPER, OPERATOR).await;

    for name in ["After one", "After two", "After three"] {
        let r = app
            .post("/api/v1/plans", &key, &plan_body(name), None)
            .await;
        assert_eq!(r.status, 201);
        assert_eq!(r.body["status"], "active", "{name}: {:?}", r.body);
    }
    assert_eq!(plan_count(&app).await, U256::from(4));
}

/// Two API processes (replicas) provisioning at once with one relayer key: each used to keep
/// its own nonce, so they signed the same nonces and plans failed or hung. They now take
/// turns under a database lock and read the nonce from the node: every plan is active, each
/// exactly once on chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_api_processes_sharing_one_relayer_key_provision_concurrently() {
    let (app, key) = chain_app().await;
    let (_replica, other) = crate::api_common::spawn_replica(
        &app,
        Opts {
            chain: true,
            ..Opts::default()
        },
    )
    .await;
    let mut calls = Vec::new();
    for i in 0..6 {
        let body = plan_body(&format!("Plan {i}"));
        let key = key.clone();
        let client = if i % 2 == 0 {
            app.api.clone()
        } else {
            other.clone()
        };
        calls.push(async move {
            client
                .post_res("/api/v1/plans", &key, &body, None)
                .await
                .unwrap()
        });
    }
    let results = futures::future::join_all(calls).await;
    for r in &results {
        assert_eq!(r.status, 201, "{:?}", r.body);
        assert_eq!(r.body["status"], "active", "{:?}", r.body);
    }
    assert_eq!(plan_count(&app).await, U256::from(6));
}

/// Issue 11, point 7: a createPlan still unmined (stuck in the pool) used to be followed, on
/// retry, by a second send at the NEXT nonce — queued behind the stuck one and paying twice.
/// The retry now replaces it at its own nonce with higher fees: one transaction of the
/// relayer is mined, the original never is, and the plan becomes active once.
#[tokio::test]
async fn a_create_plan_still_unmined_is_replaced_at_the_same_nonce_on_retry() {
    use alloy::providers::Provider;
    let app = spawn(Opts {
        chain: true,
        provision_timeout_ms: 1_000,
        args: ["--relayer-replace-after-secs", "0"]
            .map(String::from)
            .to_vec(),
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    let dev = app.chain.as_ref().unwrap();
    let relayer = DevChain::address(chainsub_tests::chain::accounts::OPERATOR);
    let automine = |on: bool| async move {
        let _: Value = dev
            .provider
            .raw_request("evm_setAutomine".into(), (on,))
            .await
            .unwrap();
    };
    let nonce_before = dev.provider.get_transaction_count(relayer).await.unwrap();

    // Nothing is mined while the plan is sent: it stays in the pool.
    automine(false).await;
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Stuck"), None)
        .await;
    assert_eq!(
        (&r.body["status"], &r.body["provisioning"]["state"]),
        (&json!("pending"), &json!("submitted")),
        "{:?}",
        r.body
    );
    let id = r.body["id"].as_str().unwrap().to_string();
    let first: B256 = r.body["provisioning"]["transactionHash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // The retry replaces it (still nothing mined).
    let r = app.provision(&id, &key).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["provisioning"]["state"], "submitted", "{:?}", r.body);
    let second = r.body["provisioning"]["transactionHash"].clone();
    assert_ne!(second, json!(first.to_string()));

    automine(true).await;
    let _: Value = dev
        .provider
        .raw_request("evm_mine".into(), ())
        .await
        .unwrap();
    let r = app.provision(&id, &key).await;
    assert_eq!(r.body["status"], "active", "{:?}", r.body);
    assert_eq!(plan_count(&app).await, U256::from(1));
    assert_eq!(
        dev.provider.get_transaction_count(relayer).await.unwrap(),
        nonce_before + 1,
        "one transaction of the relayer was mined, not two"
    );
    assert!(
        dev.provider
            .get_transaction_receipt(first)
            .await
            .unwrap()
            .is_none(),
        "the original was replaced, never mined"
    );
}

/// Issue 11, point 7 (journal): the API dies right after journaling a signed createPlan on
/// the plan row and before broadcasting it. A retry after the restart finds the journaled
/// transaction — no receipt, its nonce unused — and sends it at that same nonce: the plan
/// becomes active with exactly one relayer transaction and one plan on chain.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_that_dies_between_journal_and_broadcast_resumes_the_same_nonce() {
    use alloy::providers::Provider;
    let db = TestDb::create().await;
    let chain = DevChain::start().await;
    let mut client = db.connect().await;
    let (_, key) =
        chainsub_api::auth::api_key::admin_create_key(&mut client, DevChain::address(MERCHANT))
            .await
            .unwrap();
    let key = key.expose().to_string();
    let relayer = DevChain::address(chainsub_tests::chain::accounts::OPERATOR);
    let nonce_before = chain.provider.get_transaction_count(relayer).await.unwrap();

    let socket = chainsub_tests::Reserved::new();
    let base = socket.url();
    let mut dying = api_process(
        &db,
        &chain,
        &socket,
        &[("API_FAIL_POINT", "relayer-after-journal")],
    );
    let api = chainsub_tests::merchant::ApiClient::new(&base);
    chainsub_tests::wait_until("the api to answer", || async { api.healthy().await }).await;
    let died = api
        .post_res("/api/v1/plans", &key, &plan_body("Crash"), None)
        .await;
    assert!(died.is_err(), "the request dies with the process: {died:?}");
    let status = tokio::task::spawn_blocking(move || dying.0.wait().unwrap())
        .await
        .unwrap();
    assert!(!status.success());
    assert_eq!(
        chain.provider.get_transaction_count(relayer).await.unwrap(),
        nonce_before,
        "nothing reached the node"
    );

    let socket = chainsub_tests::Reserved::new();
    let api = chainsub_tests::merchant::ApiClient::new(&socket.url());
    let _restarted = api_process(&db, &chain, &socket, &[]);
    chainsub_tests::wait_until("the restarted api", || async { api.healthy().await }).await;
    let list = api.get_res("/api/v1/plans", &key).await.unwrap();
    let plan = &list.body["data"][0];
    assert_eq!(plan["provisioning"]["state"], "submitted", "{plan}");
    let id = plan["id"].as_str().unwrap();
    let r = api
        .post_res(
            &format!("/api/v1/plans/{id}/provision"),
            &key,
            &json!({}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.body["status"], "active", "{:?}", r.body);
    assert_eq!(
        chain.provider.get_transaction_count(relayer).await.unwrap(),
        nonce_before + 1,
        "one relayer transaction"
    );
    assert_eq!(
        chain.manager().planCount().call().await.unwrap(),
        U256::from(1)
    );
}

/// Issue 46, point 6: relayer sends waiting their turn on the relayer lock used to hold
/// request-pool connections, and the sender holding the lock then asked the pool for
/// another to journal on: with more sends than pool connections, the pool ran dry, the
/// journal waits timed out and unrelated reads got 503. Sends now queue in the process and
/// lock on a connection of their own: every read is answered and every plan provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_relayer_sends_never_run_the_request_pool_dry() {
    let app = spawn(Opts {
        chain: true,
        pool_size: Some(3),
        provision_timeout_ms: 60_000,
        // Each send holds the relayer lock a second after journaling.
        args: vec!["--fail-point".into(), "relayer-pause-after-journal".into()],
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    let reader = app
        .merchant_key(alloy::primitives::Address::repeat_byte(0x52))
        .await;
    let creations = futures::future::join_all((0..6).map(|i| {
        let (client, key) = (app.api.clone(), key.clone());
        async move {
            client
                .post_res(
                    "/api/v1/plans",
                    &key,
                    &plan_body(&format!("Plan {i}")),
                    None,
                )
                .await
                .unwrap()
        }
    }));
    let reads = async {
        let mut statuses = Vec::new();
        for _ in 0..40 {
            statuses.push(app.get("/api/v1/plans", &reader).await.status);
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        statuses
    };
    let (created, statuses) = tokio::join!(creations, reads);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    for r in &created {
        assert_eq!(r.status, 201, "{:?}", r.body);
        assert_eq!(r.body["status"], "active", "{:?}", r.body);
    }
    assert_eq!(plan_count(&app).await, U256::from(6));
}

/// An API with a chain that mines nothing and these flags, and the answer to creating plan
/// `name` there: its createPlan sent, unmined (provisioning waits 1 s for a receipt).
async fn unmined_plan(args: &[&str], name: &str) -> (App, String, crate::api_common::Res) {
    use alloy::providers::Provider;
    let app = spawn(Opts {
        chain: true,
        provision_timeout_ms: 1_000,
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    let dev = app.chain.as_ref().unwrap();
    let _: Value = dev
        .provider
        .raw_request("evm_setAutomine".into(), (false,))
        .await
        .unwrap();
    let r = app
        .post("/api/v1/plans", &key, &plan_body(name), None)
        .await;
    (app, key, r)
}

/// The max fee per gas a transaction was signed with.
async fn max_fee_of(dev: &DevChain, hash: &str) -> u128 {
    use alloy::consensus::Transaction as _;
    use alloy::providers::Provider;
    let tx = dev
        .provider
        .get_transaction_by_hash(hash.parse().unwrap())
        .await
        .unwrap()
        .expect("the node holds the transaction");
    tx.inner.max_fee_per_gas()
}

/// Issue 46, point 5: every retry of a plan whose createPlan is unmined used to replace it
/// at once, 25 % above the last fee, without limit (12 retries: × 14.5). Now a transaction is
/// replaced only once it is RELAYER_REPLACE_AFTER_SECS old, at most RELAYER_MAX_REPLACEMENTS
/// times, 12 % above the last (or the node's suggestion), and never above
/// RELAYER_MAX_FEE_PER_GAS; a retry meanwhile reports the pending transaction.
#[tokio::test]
async fn a_pending_create_plan_is_replaced_only_when_old_enough_a_bounded_number_of_times() {
    use alloy::providers::Provider;
    let (app, key, r) = unmined_plan(
        &[
            "--relayer-replace-after-secs",
            "3",
            "--relayer-max-replacements",
            "2",
        ],
        "Pending",
    )
    .await;
    let dev = app.chain.as_ref().unwrap();
    assert_eq!(r.body["provisioning"]["state"], "submitted", "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    let hash_of = |r: &crate::api_common::Res| {
        r.body["provisioning"]["transactionHash"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut hashes = vec![hash_of(&r)];
    // Read while the node holds it (a replaced transaction leaves its pool).
    let mut fees = vec![max_fee_of(dev, &hashes[0]).await];

    // At once: too soon, the pending transaction stands.
    let r = app.provision(&id, &key).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        hash_of(&r),
        hashes[0],
        "replaced before RELAYER_REPLACE_AFTER_SECS"
    );

    // Once old enough, each retry replaces it — twice, then no more.
    for _ in 0..2 {
        let last = hashes.last().unwrap().clone();
        let next = chainsub_tests::wait_for_some("a replacement once the age has passed", || {
            let (app, key, id, last) = (&app, &key, &id, last.clone());
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                let h = hash_of(&app.provision(id, key).await);
                (h != last).then_some(h)
            }
        })
        .await;
        let (before, after) = (*fees.last().unwrap(), max_fee_of(dev, &next).await);
        fees.push(after);
        assert!(
            after > before && after <= before * 113 / 100 + 1,
            "a replacement pays 12 % more, not 25 %: {before} -> {after}"
        );
        hashes.push(next);
    }
    tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
    let r = app.provision(&id, &key).await;
    assert_eq!(r.body["provisioning"]["state"], "submitted", "{:?}", r.body);
    assert_eq!(&hash_of(&r), hashes.last().unwrap(), "a third replacement");

    let _: Value = dev
        .provider
        .raw_request("evm_setAutomine".into(), (true,))
        .await
        .unwrap();
    let _: Value = dev
        .provider
        .raw_request("evm_mine".into(), ())
        .await
        .unwrap();
    let r = app.provision(&id, &key).await;
    assert_eq!(r.body["status"], "active", "{:?}", r.body);
    assert_eq!(plan_count(&app).await, U256::from(1));
}

/// Issue 46, point 5: the fee cap. A new transaction is signed at most at
/// RELAYER_MAX_FEE_PER_GAS, and a replacement that would need more is not sent.
#[tokio::test]
async fn the_relayer_never_signs_above_its_fee_cap() {
    let (app, key, r) = unmined_plan(
        &[
            "--relayer-replace-after-secs",
            "0",
            "--relayer-max-fee-per-gas",
            "3000000000",
        ],
        "Capped",
    )
    .await;
    let dev = app.chain.as_ref().unwrap();
    let id = r.body["id"].as_str().unwrap().to_string();
    let mut hash = r.body["provisioning"]["transactionHash"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(max_fee_of(dev, &hash).await <= 3_000_000_000);
    // Replacements climb 12 % at a time until the next would pass the cap; then they stop.
    for _ in 0..20 {
        let r = app.provision(&id, &key).await;
        assert_eq!(r.body["provisioning"]["state"], "submitted", "{:?}", r.body);
        let next = r.body["provisioning"]["transactionHash"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            max_fee_of(dev, &next).await <= 3_000_000_000,
            "signed above the cap"
        );
        if next == hash {
            return;
        }
        hash = next;
    }
    panic!("replacements never stopped at the fee cap");
}

/// Issue 46, point 5: the relayer's sends per merchant per day are bounded; past the quota
/// a plan creation is refused with 429 and Retry-After, and nothing is written.
#[tokio::test]
async fn a_merchants_relayer_sends_are_bounded_per_day() {
    let app = spawn(Opts {
        chain: true,
        args: ["--relayer-sends-per-merchant-per-day", "2"]
            .map(String::from)
            .to_vec(),
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    for name in ["One", "Two"] {
        let r = app
            .post("/api/v1/plans", &key, &plan_body(name), None)
            .await;
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    let r = app
        .post("/api/v1/plans", &key, &plan_body("Three"), None)
        .await;
    assert_eq!(r.status, 429, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "relayer_quota_exceeded");
    assert!(
        r.header("retry-after")
            .is_some_and(|s| s.parse::<u64>().unwrap() > 0)
    );
    let plans = app.get("/api/v1/plans", &key).await;
    assert_eq!(plans.body["data"].as_array().unwrap().len(), 2);
    assert_eq!(plan_count(&app).await, U256::from(2));
}

/// Issue 46, point 17: a checkout link's signature covers every parameter. An anonymous
/// link with `customer=` added used to verify and bind the customer `''`; a link may now
/// carry an expiry, which can be neither changed nor dropped, and past which it no longer
/// opens; a parameter the signature does not cover is refused.
#[tokio::test]
async fn checkout_links_sign_every_parameter_and_may_expire() {
    let (app, key) = chain_app().await;
    let created = app
        .post("/api/v1/plans", &key, &plan_body("Pro"), None)
        .await;
    let plan = created.body["id"].as_str().unwrap().to_string();
    let open = |url: String| {
        let http = app.http.clone();
        async move { crate::api_common::read(http.get(url).send().await.unwrap()).await }
    };
    let create = |body: Value| {
        let (app, key) = (&app, &key);
        async move { app.post("/api/v1/checkouts", key, &body, None).await }
    };

    let anonymous = create(json!({ "planId": plan })).await;
    assert_eq!(anonymous.status, 201, "{:?}", anonymous.body);
    assert_eq!(anonymous.body["expiresAt"], Value::Null);
    let url = anonymous.body["url"].as_str().unwrap().to_string();
    assert_eq!(open(url.clone()).await.status, 200);
    let with_param = |name: &str, value: &str| {
        let mut u = url::Url::parse(&url).unwrap();
        let pairs: Vec<(String, String)> = u.query_pairs().into_owned().collect();
        u.query_pairs_mut().clear();
        for (k, v) in pairs {
            u.query_pairs_mut().append_pair(&k, &v);
        }
        u.query_pairs_mut().append_pair(name, value);
        u.to_string()
    };
    let r = open(with_param("customer", "")).await;
    assert_eq!(r.status, 400, "an empty customer is never bound");
    assert_eq!(open(with_param("customer", "victim")).await.status, 403);
    assert_eq!(open(with_param("expires", "4102444800")).await.status, 403);
    assert_eq!(open(with_param("utm_source", "x")).await.status, 400);

    // An expiry: in the URL, signed, and enforced.
    let expiring = create(json!({
        "planId": plan,
        "customerExternalId": "u1",
        "expiresIn": 3600,
    }))
    .await;
    assert_eq!(expiring.status, 201, "{:?}", expiring.body);
    let until =
        chrono::DateTime::parse_from_rfc3339(expiring.body["expiresAt"].as_str().unwrap()).unwrap();
    let ahead = until.timestamp() - chrono::Utc::now().timestamp();
    assert!((3590..=3600).contains(&ahead), "{ahead}");
    let url = expiring.body["url"].as_str().unwrap().to_string();
    assert!(
        url.contains(&format!("expires={}", until.timestamp())),
        "{url}"
    );
    assert_eq!(open(url.clone()).await.status, 200);
    assert_eq!(open(url.replace("expires=", "expires=9")).await.status, 403);
    let dropped = url.replace(&format!("expires={}&", until.timestamp()), "");
    assert_eq!(open(dropped).await.status, 403);
    // A validly signed link whose time has passed.
    let code = url::Url::parse(&url)
        .unwrap()
        .path_segments()
        .unwrap()
        .nth(1)
        .unwrap()
        .to_string();
    let past = chainsub_api::checkout::url(
        &app.base,
        crate::api_common::SECRET,
        &code,
        "pro",
        chainsub_api::checkout::LinkTerms {
            customer: Some("u1"),
            expires: Some(chrono::Utc::now().timestamp() - 1),
        },
    );
    let r = open(past).await;
    assert_eq!(r.status, 403);
    let r = create(json!({ "planId": plan, "expiresIn": 694.0 })).await;
    assert_eq!(
        r.status, 201,
        "a whole number written as a float: {:?}",
        r.body
    );
    for bad in [
        json!(59),
        json!(-1),
        json!("3600"),
        json!(31_622_401),
        json!(1.5),
    ] {
        let r = create(json!({ "planId": plan, "expiresIn": bad })).await;
        assert_eq!(r.status, 400, "{bad}: {:?}", r.body);
        assert_eq!(r.error_param(), Some("expiresIn"));
    }
}

/// Issue 46, point 11: a plan answered `201` while its provisioning was still pending was
/// replayed as "pending" under its `Idempotency-Key` for a day, whatever became of it. A
/// replay of a pending answer now runs the request again and reports where the plan stands.
#[tokio::test]
async fn a_replayed_pending_plan_reports_where_its_provisioning_stands() {
    let (app, key, _) = unmined_plan(&[], "Warm-up").await;
    let body = plan_body("Keyed");
    let first = app.post("/api/v1/plans", &key, &body, Some("plan-k")).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    assert_eq!(first.body["status"], "pending", "unmined yet");
    use alloy::providers::Provider;
    let dev = app.chain.as_ref().unwrap();
    let _: Value = dev
        .provider
        .raw_request("evm_mine".into(), ())
        .await
        .unwrap();

    let again = app.post("/api/v1/plans", &key, &body, Some("plan-k")).await;
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_eq!(again.header("idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(again.body["id"], first.body["id"], "the same plan");
    assert_eq!(again.body["status"], "active", "{:?}", again.body);
    assert_eq!(
        plan_count(&app).await,
        U256::from(2),
        "no second on-chain plan"
    );
    // Once final, the answer is stored and replayed as it is.
    let third = app.post("/api/v1/plans", &key, &body, Some("plan-k")).await;
    assert_eq!(third.body, again.body);
}
