//! One billing story through the real processes (`indexer`, `api` with its dispatcher,
//! `keeper`) on one anvil: a customer starts a free trial from a checkout, the keeper converts
//! it at the trial's end (after announcing it with `subscription.trial_will_end`), the customer upgrades mid-period (prorated charge), schedules a
//! downgrade that the keeper applies at the renewal, the merchant refunds part of a charge
//! from its own wallet, and the customer cancels. Every event the API lists arrives as a
//! signed webhook, every ledger entry is the node's receipt, the export is clean under
//! `indexer verify-export`, and `indexer verify` finds no difference.

use std::collections::BTreeSet;

use alloy::primitives::U256;
use alloy::providers::Provider;
use chainsub_abi::ContractEvent;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT};
use chainsub_tests::chain::dev_key;
use chainsub_tests::merchant::{ApiClient, wait_for};
use chainsub_tests::receiver::WebhookReceiver;
use chainsub_tests::services::{Services, test_env};
use chainsub_tests::{DevChain, TestDb, scratch_dir, send_as};
use serde_json::{Value, json};

const CONFIRMATIONS: u64 = 2;
const USDC: u64 = 1_000_000;
const DAY: u64 = 86_400;

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
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, 90, || async {
        let s = subscription(api, key, id).await;
        Ok(pred(&s).then_some(s))
    })
    .await
    .unwrap()
}

fn ledger_of(s: &Value) -> Vec<(String, String)> {
    s["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["amount"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn at(rfc3339: &Value) -> u64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .timestamp() as u64
}

async fn advance_to(chain: &DevChain, ts: u64) {
    let now = chain.now().await;
    chain.increase_time(ts.saturating_sub(now) + 1).await;
}

async fn all_events(api: &ApiClient, key: &str) -> Vec<Value> {
    let page = api.get_ok("/api/v1/events?limit=100", key).await.unwrap();
    assert_eq!(page["hasMore"], false);
    let mut events = page["data"].as_array().unwrap().clone();
    events.reverse(); // newest first on the wire; chain order here
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trial_conversion_upgrade_scheduled_downgrade_refund_and_cancel_end_to_end() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let customer = DevChain::address(CUSTOMER);
    let short = DevChain::address(CUSTOMER_B);
    let merchant = DevChain::address(MERCHANT);
    chain.mint(customer, 1_000 * USDC).await;
    chain.mint(short, 1_000 * USDC).await;
    chain.mint(merchant, 100 * USDC).await;
    let receiver = WebhookReceiver::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut services = Services::start(test_env(&chain, &db, CONFIRMATIONS));
    let api = services.api_client().await;
    let session = api.sign_in(&dev_key(MERCHANT)).await.unwrap();
    let key = api.create_key(&session).await.unwrap();
    let secret = api.set_webhook(&session, &receiver.url()).await.unwrap();
    receiver.set_secret(&secret);

    let plan = |name: &str, amount: &str, trial: u16| {
        json!({"name": name, "amount": amount, "currency": "USDC", "interval": "month",
               "trialDays": trial})
    };
    let basic = api
        .create_plan_with(&key, &plan("Basic", "9.99", 14))
        .await
        .unwrap();
    assert_eq!(basic["trialDays"], 14, "{basic}");
    let pro = api
        .create_plan_with(&key, &plan("Pro", "19.99", 0))
        .await
        .unwrap();
    let lite = api
        .create_plan_with(&key, &plan("Lite", "4.99", 0))
        .await
        .unwrap();
    let onchain = |p: &Value| U256::from(p["chain"]["onchainPlanId"].as_u64().unwrap());
    let id_of = |p: &Value| p["id"].as_str().unwrap().to_string();
    chain.mine(CONFIRMATIONS).await;

    // The trial: a checkout, one permit signature, one transaction; nothing charged.
    let checkout = api
        .create_checkout(&key, &id_of(&basic), "user-trial")
        .await
        .unwrap();
    api.subscribe_via_checkout(checkout["url"].as_str().unwrap(), &chain.provider, customer)
        .await
        .unwrap();
    let list = wait_for("the trial indexed", 60, || async {
        let l = api
            .get_ok("/api/v1/subscriptions?customerExternalId=user-trial", &key)
            .await?;
        Ok((l["data"].as_array().unwrap().len() == 1).then_some(l))
    })
    .await
    .unwrap();
    let sub_id = list["data"][0]["id"].as_str().unwrap().to_string();
    let s = subscription(&api, &key, &sub_id).await;
    assert_eq!(s["status"], "trialing", "{s}");
    assert_eq!(s["period"], 0);
    assert_eq!(s["trialEnd"], s["currentPeriodEnd"]);
    assert_eq!(s["nextPaymentAt"], s["trialEnd"]);
    assert!(ledger_of(&s).is_empty(), "nothing charged in a trial: {s}");
    let trial_end = at(&s["trialEnd"]);
    let onchain_sub = U256::from(s["chain"]["onchainSubscriptionId"].as_u64().unwrap());

    // A second customer starts the same trial, then takes its allowance back: the first
    // charge after the trial is at risk, and fails.
    let checkout_b = api
        .create_checkout(&key, &id_of(&basic), "user-short")
        .await
        .unwrap();
    api.subscribe_via_checkout(checkout_b["url"].as_str().unwrap(), &chain.provider, short)
        .await
        .unwrap();
    send_as!(short, chain.usdc().approve(chain.manager, U256::ZERO));
    let short_id = wait_for("the second trial indexed", 60, || async {
        let l = api
            .get_ok("/api/v1/subscriptions?customerExternalId=user-short", &key)
            .await?;
        Ok(l["data"][0]["id"].as_str().map(str::to_string))
    })
    .await
    .unwrap();

    // Three days before the trial ends the keeper announces it (once).
    advance_to(&chain, trial_end - 2 * DAY).await;
    let notice = wait_for("the trial's notice", 60, || async {
        let l = api
            .get_ok("/api/v1/events?type=subscription.trial_will_end", &key)
            .await?;
        let notices = l["data"].as_array().unwrap();
        assert!(notices.len() <= 2, "one notice per trial: {l}");
        Ok(notices
            .iter()
            .find(|n| n["data"]["subscriptionId"] == sub_id.as_str())
            .cloned())
    })
    .await
    .unwrap();
    assert_eq!(
        notice["data"]["subscriptionId"],
        sub_id.as_str(),
        "{notice}"
    );
    assert_eq!(notice["data"]["amount"], "9.99");
    assert_eq!(notice["data"]["period"], 1);
    assert_eq!(notice["data"]["subscription"]["trialEnd"], s["trialEnd"]);
    assert!(notice["chain"].is_null() && !notice["observation"].is_null());
    let risk = wait_for("the trial's first charge at risk", 60, || async {
        let l = api
            .get_ok("/api/v1/events?type=subscription.renewal_at_risk", &key)
            .await?;
        Ok(l["data"].as_array().unwrap().first().cloned())
    })
    .await
    .unwrap();
    assert_eq!(risk["data"]["subscriptionId"], short_id.as_str(), "{risk}");
    assert_eq!(risk["data"]["renewalAtRisk"]["reason"], "allowance");
    assert_eq!(risk["data"]["renewalAtRisk"]["period"], 1);
    // The reports: two trials (apart from the MRR), one of them at risk.
    let summary = crate::reports_check::assert_reports_agree(&api, &key).await;
    assert_eq!(summary["subscriptions"]["trialing"], 2, "{summary}");
    assert_eq!(summary["trialMrr"]["amount"], "19.98", "{summary}");
    assert_eq!(summary["mrr"]["amount"], "0.00", "{summary}");
    assert_eq!(summary["atRisk"]["count"], 1, "{summary}");

    // The keeper converts it at the trial's end.
    advance_to(&chain, trial_end).await;
    let s = wait_sub(
        &api,
        &key,
        &sub_id,
        "the first charge after the trial",
        |s| s["status"] == "active" && s["period"] == 1,
    )
    .await;
    assert_eq!(ledger_of(&s), [("charge".into(), "9.99".into())]);
    assert_eq!(at(&s["currentPeriodStart"]), trial_end);
    let b = wait_sub(&api, &key, &short_id, "the failed first charge", |s| {
        s["status"] == "past_due"
    })
    .await;
    assert_eq!(ledger_of(&b), [("failed_charge".into(), "9.99".into())]);

    // An upgrade mid-period: the proration is the contract's, to the base unit.
    advance_to(&chain, trial_end + 10 * DAY).await;
    let (m, amount) = chain.plan_terms(onchain(&pro)).await;
    let receipt = send_as!(
        customer,
        chain
            .manager()
            .changePlan(onchain_sub, onchain(&pro), m, amount)
    );
    let proration = receipt
        .inner
        .logs()
        .iter()
        .find_map(|l| match ContractEvent::decode(&l.inner) {
            Ok(ContractEvent::PlanChanged(c)) => Some(c.proration),
            _ => None,
        })
        .expect("PlanChanged");
    let proration_usdc = chainsub_core::format_units(proration.to::<u128>());
    let s = wait_sub(&api, &key, &sub_id, "the upgrade", |s| {
        s["planId"] == pro["id"]
    })
    .await;
    assert_eq!(s["amount"], "19.99");
    assert_eq!(
        ledger_of(&s),
        [
            ("charge".into(), "9.99".into()),
            ("proration".into(), proration_usdc.clone())
        ]
    );

    // A downgrade waits for the renewal. The merchant cannot move the customer itself: it
    // makes a plan-change link, the customer opens it and its own wallet sends the change.
    let links = format!("/api/v1/subscriptions/{sub_id}/plan-change-links");
    let (status, err) = api
        .post(&links, &key, &json!({"planId": id_of(&pro)}))
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["param"]),
        (400, &json!("planId")),
        "on it already: {err}"
    );
    let (status, link) = api
        .post(&links, &key, &json!({"planId": id_of(&lite)}))
        .await
        .unwrap();
    assert_eq!(status, 201, "{link}");
    assert_eq!(link["kind"], "downgrade");
    let url = link["url"].as_str().unwrap();
    let page = api.http().get(url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("From 19.99 to 4.99 USDC a month, from your next renewal"),
        "{html}"
    );
    let tx_url = |from: &str| {
        let (base, query) = url.split_once('?').unwrap();
        format!("{base}/tx?{query}&from={from}")
    };
    let r = api
        .http()
        .get(tx_url(&short.to_checksum(None)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        403,
        "only the subscriber's wallet gets the call"
    );
    let r = api
        .http()
        .get(tx_url(&customer.to_checksum(None)).replace("sig=", "sig=00"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a changed link is refused");
    let tx: Value = api
        .http()
        .get(tx_url(&customer.to_checksum(None)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    chainsub_tests::merchant::send_tx_request(&chain.provider, &tx["tx"])
        .await
        .unwrap();
    let s = wait_sub(&api, &key, &sub_id, "the scheduled downgrade", |s| {
        !s["pendingPlanChange"].is_null()
    })
    .await;
    assert_eq!(s["pendingPlanChange"]["planId"], lite["id"], "{s}");
    assert_eq!(s["pendingPlanChange"]["amount"], "4.99");
    assert_eq!(s["pendingPlanChange"]["effectiveAt"], s["currentPeriodEnd"]);
    assert_eq!(s["planId"], pro["id"], "still Pro until the renewal");
    // The reports now: one active subscription (Pro, renewing at Lite's amount), one past
    // due after its failed first charge (at risk before it), as the rows sum up.
    let summary = crate::reports_check::assert_reports_agree(&api, &key).await;
    assert_eq!(summary["subscriptions"]["active"], 1, "{summary}");
    assert_eq!(summary["subscriptions"]["pastDue"], 1, "{summary}");
    assert_eq!(summary["mrr"]["amount"], "29.98", "{summary}");

    advance_to(&chain, at(&s["currentPeriodEnd"])).await;
    let s = wait_sub(&api, &key, &sub_id, "the renewal on the new plan", |s| {
        s["period"] == 2
    })
    .await;
    assert_eq!(s["planId"], lite["id"]);
    assert!(s["pendingPlanChange"].is_null());
    assert_eq!(
        ledger_of(&s).last().unwrap(),
        &("charge".into(), "4.99".into())
    );

    // The merchant refunds 1.50 of that charge from its own wallet: the API hands back the
    // transactions (an approval first, then the refund), the merchant's wallet sends them.
    let refunds = format!("/api/v1/subscriptions/{sub_id}/refunds");
    let (status, err) = api
        .post(&refunds, &key, &json!({"amount": "5.00"}))
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["param"]),
        (400, &json!("amount")),
        "{err}"
    );
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 4.99 USDC of period 2"),
        "{err}"
    );
    let (status, err) = api
        .post(
            &format!("/api/v1/subscriptions/{short_id}/refunds"),
            &key,
            &json!({"amount": "1.00"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (409, &json!("nothing_to_refund")),
        "{err}"
    );
    let (status, request) = api
        .post(&refunds, &key, &json!({"amount": "1.50"}))
        .await
        .unwrap();
    assert_eq!(status, 200, "{request}");
    assert_eq!(
        (&request["period"], &request["paid"], &request["refunded"]),
        (&json!(2), &json!("4.99"), &json!("0.00"))
    );
    let steps: Vec<&str> = request["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["approve", "refund"]);
    let before = chain.usdc().balanceOf(customer).call().await.unwrap();
    for step in request["steps"].as_array().unwrap() {
        assert_eq!(step["tx"]["from"], merchant.to_checksum(None));
        chainsub_tests::merchant::send_tx_request(&chain.provider, &step["tx"])
            .await
            .unwrap();
    }
    assert_eq!(
        chain.usdc().balanceOf(customer).call().await.unwrap(),
        before + U256::from(1_500_000u64)
    );
    wait_sub(&api, &key, &sub_id, "the refund", |s| {
        ledger_of(s).last().is_some_and(|(k, _)| k == "refund")
    })
    .await;

    // The customer cancels; everything confirmed.
    send_as!(customer, chain.manager().cancel(onchain_sub));
    let s = wait_sub(&api, &key, &sub_id, "the cancellation", |s| {
        s["status"] == "cancelled"
    })
    .await;
    assert_eq!(
        ledger_of(&s),
        [
            ("charge".into(), "9.99".into()),
            ("proration".into(), proration_usdc),
            ("charge".into(), "4.99".into()),
            ("refund".into(), "-1.50".into()),
        ]
    );
    // Each charge says how much of its period was refunded; the other entries do not.
    let refunded: Vec<&Value> = s["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["refunded"])
        .collect();
    assert_eq!(
        refunded,
        [&json!("0.00"), &Value::Null, &json!("1.50"), &Value::Null],
        "{s}"
    );
    chain.mine(CONFIRMATIONS).await;
    services.wait_indexed(&api, &chain).await;
    // Revenue per month: the two charges, the proration and the refund, as the ledger sums.
    let summary = crate::reports_check::assert_reports_agree(&api, &key).await;
    assert_eq!(summary["subscriptions"]["cancelled"], 1, "{summary}");

    // The events, in chain order, each a signed webhook with the same id.
    let all = all_events(&api, &key).await;
    let events: Vec<&Value> = all
        .iter()
        .filter(|e| e["data"]["subscriptionId"] == sub_id.as_str())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "subscription.created",
            "subscription.trial_will_end",
            "subscription.charged",
            "subscription.plan_changed",
            "subscription.plan_change_scheduled",
            "subscription.plan_changed",
            "subscription.charged",
            "subscription.refunded",
            "subscription.cancelled",
        ]
    );
    assert_eq!(events[0]["data"]["subscription"]["status"], "trialing");
    assert_eq!(events[0]["data"]["subscription"]["trialEnd"], s["trialEnd"]);
    assert_eq!(events[3]["data"]["amount"], ledger_of(&s)[1].1.as_str());
    assert_eq!(
        events[4]["data"]["subscription"]["pendingPlanChange"]["planId"],
        lite["id"]
    );
    assert_eq!(
        events[5]["data"]["amount"], "0.00",
        "applied at renewal: no proration"
    );
    assert_eq!(events[7]["data"]["amount"], "1.50");
    assert_eq!(events[7]["data"]["period"], 2);
    let listed: BTreeSet<String> = all
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    wait_for("a webhook for every event", 60, || async {
        let got: BTreeSet<String> = receiver
            .received()
            .iter()
            .filter(|d| d.verified)
            .map(|d| d.id.clone())
            .collect();
        Ok((got == listed).then_some(()))
    })
    .await
    .unwrap();
    for d in receiver.received() {
        assert!(d.verified, "signature of {} rejected: {:?}", d.id, d.error);
    }
    // docs/integration.md's snippets verify every one of them, and docs/event-examples.md
    // shows each type's fields.
    crate::guide_snippets::assert_snippets_verify(&receiver.received(), &secret);
    crate::guide_snippets::assert_examples_hold(&receiver.received());

    // Every ledger entry is the node's receipt: its transaction has the contract's log there.
    for entry in s["ledger"].as_array().unwrap() {
        let c = &entry["chain"];
        let tx = c["transactionHash"].as_str().unwrap().parse().unwrap();
        let receipt = chain
            .provider
            .get_transaction_receipt(tx)
            .await
            .unwrap()
            .expect("receipt");
        assert_eq!(receipt.block_number, c["blockNumber"].as_u64(), "{entry}");
        let log = receipt
            .inner
            .logs()
            .iter()
            .find(|l| l.log_index == c["logIndex"].as_u64())
            .expect("the log");
        assert_eq!(log.address(), chain.manager);
    }

    // The export carries prorations and refunds with their totals, and verifies.
    let export = api
        .http()
        .get(api.url("/api/v1/ledger?toBlock=1000000"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let records: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let total = |kind: &str| {
        records
            .iter()
            .find(|r| r["record"] == "total" && r["kind"] == kind)
            .map(|r| {
                (
                    r["amount"].as_str().unwrap().to_string(),
                    r["entries"].as_u64().unwrap(),
                )
            })
            .unwrap()
    };
    assert_eq!(total("charge"), ("14980000".into(), 2));
    assert_eq!(total("proration"), (proration.to_string(), 1));
    assert_eq!(total("refund"), ("-1500000".into(), 1));
    let dir = scratch_dir("billing-export");
    let path = dir.join("ledger.ndjson");
    std::fs::write(&path, &export).unwrap();
    let (code, out) = services.verify_export(&path);
    assert_eq!(code, 0, "verify-export: {out}");
    let tampered = export.replace("\"-1500000\"", "\"-1400000\"");
    assert_ne!(tampered, export);
    std::fs::write(&path, &tampered).unwrap();
    let (code, out) = services.verify_export(&path);
    assert_ne!(code, 0, "a changed refund is found: {out}");

    let head = chain.provider.get_block_number().await.unwrap();
    let (clean, report) = services.verify(head);
    assert!(clean, "indexer verify found differences:\n{report}");
    services.assert_alive();
}
