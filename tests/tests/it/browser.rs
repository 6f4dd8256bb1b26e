//! Browser tests: the real `api` and `indexer` binaries on a fresh anvil and database, driven
//! by headless Chromium (`node tests/browser/<scenario>.mjs`, playwright-core) with a test
//! wallet that forwards to anvil. Needs: `cargo build -p chainsub-api -p chainsub-indexer
//! -p chainsub-keeper --bins`, Debian `chromium` at /usr/bin/chromium (or CHROMIUM=path), and `npm ci`.
//! Screenshots go to target/browser-screenshots/.

use crate::browser_support::{
    EXPLORER, node, plan_and_checkout, poll, post, start, subscribe_through_checkout,
};
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn customer_subscribes_from_checkout_link_and_api_shows_external_id() {
    let s = start("checkout", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let poor = DevChain::address(accounts::CUSTOMER_B);
    let (key, plan, checkout) = plan_and_checkout(&s, "cust_browser_42").await;
    let url = checkout["url"].as_str().expect("checkout url").to_string();
    s.chain.mint(customer, 100_000_000).await;
    let permit_customer = DevChain::address(accounts::STRANGER);
    s.chain.mint(permit_customer, 100_000_000).await;
    let permit_checkout = post(
        &s,
        &key,
        "/api/v1/checkouts",
        serde_json::json!({"planId": plan["id"], "customerExternalId": "cust_permit"}),
    )
    .await;

    // Edited or unsigned links get a clear error page, not the checkout.
    let tampered = url.replace("cust_browser_42", "cust_browser_43");
    let res = s.http.get(&tampered).send().await.expect("GET");
    assert_eq!(res.status(), 403);
    assert!(
        res.text()
            .await
            .unwrap()
            .contains("This checkout link is not valid")
    );
    let unsigned = url.split("&sig=").next().unwrap().to_string();
    let res = s.http.get(&unsigned).send().await.expect("GET");
    assert_eq!(res.status(), 400);

    node(
        "checkout.mjs",
        &[
            ("CHECKOUT_URL", url),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            ("MANAGER", s.chain.manager.to_string()),
            ("CUSTOMER", customer.to_string()),
            ("POOR_CUSTOMER", poor.to_string()),
            ("PLAN_NAME", "Pro Monthly".into()),
            ("EXPLORER_PREFIX", EXPLORER.into()),
            ("PERMIT_CUSTOMER", permit_customer.to_string()),
            (
                "PERMIT_CHECKOUT_URL",
                permit_checkout["url"].as_str().unwrap().to_string(),
            ),
        ],
    );

    // The permit way: subscribed with one transaction (the wallet's nonce moved once), and
    // the permit left the rest of the 12 payments as allowance.
    use alloy::providers::Provider;
    assert_eq!(
        s.chain
            .provider
            .get_transaction_count(permit_customer)
            .await
            .unwrap(),
        1
    );
    let allowance = s
        .chain
        .usdc()
        .allowance(permit_customer, s.chain.manager)
        .call()
        .await
        .unwrap();
    assert_eq!(allowance, alloy::primitives::U256::from(9_990_000u64 * 11));

    // The indexer picks the subscription up; the API ties it to the link's customer.
    let list_url = format!(
        "{}/api/v1/subscriptions?customerExternalId=cust_browser_42",
        s.base
    );
    let sub = poll("the subscription in GET /api/v1/subscriptions", || async {
        let v: Value = s
            .http
            .get(&list_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["data"].as_array()?.first().cloned()
    })
    .await;
    assert_eq!(sub["customerExternalId"], "cust_browser_42", "{sub}");
    assert_eq!(sub["status"], "active", "{sub}");
    assert_eq!(sub["planId"], plan["id"], "{sub}");
    assert_eq!(
        sub["subscriber"].as_str().map(str::to_lowercase),
        Some(customer.to_string().to_lowercase()),
        "{sub}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn merchant_signs_in_sees_key_once_rotation_kills_old_key_and_webhook_retry_delivers() {
    let s = start("dashboard", false).await;
    node(
        "dashboard.mjs",
        &[
            ("BASE_URL", s.base.clone()),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            (
                "MERCHANT",
                DevChain::address(accounts::MERCHANT_B).to_string(),
            ),
        ],
    );
    // The UI generated, rotated and revoked: two keys were issued and none is live.
    let conn = s.db.connect().await;
    let row = conn
        .query_one(
            "SELECT count(*) FILTER (WHERE k.revoked_at IS NULL), count(*) \
             FROM api_keys k JOIN merchants m ON m.id = k.merchant_id WHERE m.wallet = $1",
            &[&DevChain::address(accounts::MERCHANT_B).as_slice().to_vec()],
        )
        .await
        .expect("count keys");
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (0, 2));
}

/// Issue 11, point 5, in the browser: when the plan on chain differs from the link (here the
/// API's amount is edited by hand, as a wrong index would), the page shows a `refused` state
/// and never asks the wallet to send; once the plan is deactivated on chain, `inactive`.
#[tokio::test(flavor = "multi_thread")]
async fn checkout_page_refuses_a_mismatched_or_deactivated_plan_without_asking_the_wallet() {
    use alloy::primitives::U256;
    let s = start("checkout-refused", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let (_, _, checkout) = plan_and_checkout(&s, "cust_refused").await;
    let url = checkout["url"].as_str().expect("checkout url").to_string();
    // The indexer has the plan (the page offers it) before the hand edit.
    poll("the plan indexed", || async {
        let c = s.db.connect().await;
        let n: i64 = c
            .query_one("SELECT count(*) FROM chain_plans", &[])
            .await
            .unwrap()
            .get(0);
        (n > 0).then_some(())
    })
    .await;
    let env = |expect: &str| {
        vec![
            ("CHECKOUT_URL", url.clone()),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            ("CUSTOMER", customer.to_string()),
            ("EXPECT", expect.to_string()),
        ]
    };
    s.db.connect()
        .await
        .execute("UPDATE plans SET amount = 1000000", &[])
        .await
        .unwrap();
    node("checkout_refused.mjs", &env("refused"));

    s.db.connect()
        .await
        .execute("UPDATE plans SET amount = 9990000", &[])
        .await
        .unwrap();
    chainsub_tests::send_as!(
        DevChain::address(accounts::MERCHANT),
        s.chain.manager().deactivatePlan(U256::from(1))
    );
    poll("the deactivation indexed", || async {
        let c = s.db.connect().await;
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM chain_plans WHERE deactivated_event_id IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (n > 0).then_some(())
    })
    .await;
    node("checkout_refused.mjs", &env("inactive"));
}

/// Issue 14, point 1 and issue 40, point 7: the customer lists subscriptions on `/account`
/// with a browser wallet, upgrades to another of the merchant's plans (prorated at once),
/// schedules a downgrade, undoes it and schedules it again, then cancels — at period end, then at once — and the chain and the
/// API agree after.
#[tokio::test(flavor = "multi_thread")]
async fn customer_cancels_from_the_account_page_at_period_end_then_now() {
    use alloy::primitives::U256;
    let s = start("account", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let (key, _, checkout) = plan_and_checkout(&s, "cust_account").await;
    // The merchant's other plans: the page offers to move to either.
    let mut others = Vec::new();
    for (name, amount) in [("Team", "19.99"), ("Basic", "4.99")] {
        let plan = post(
            &s,
            &key,
            "/api/v1/plans",
            serde_json::json!({"name": name, "amount": amount, "currency": "USDC", "interval": "month"}),
        )
        .await;
        assert_eq!(plan["status"], "active", "{plan}");
        others.push(plan);
    }
    let url = checkout["url"].as_str().expect("checkout url").to_string();
    let id = subscribe_through_checkout(&s, &url, customer).await;
    // The page lists from the index: wait for the subscription there first.
    let list_url = format!("{}/api/v1/subscriptions", s.base);
    let api_sub = || async {
        let v: Value = s
            .http
            .get(&list_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["data"].as_array()?.first().cloned()
    };
    poll("the subscription indexed", api_sub).await;
    let code = checkout["url"]
        .as_str()
        .unwrap()
        .split("/checkout/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_string();

    node(
        "account.mjs",
        &[
            ("ACCOUNT_URL", format!("{}/account?merchant={code}", s.base)),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            ("CUSTOMER", customer.to_string()),
            (
                "STRANGER",
                DevChain::address(accounts::CUSTOMER_B).to_string(),
            ),
            ("PLAN_NAME", "Pro Monthly".into()),
            ("EXPLORER_PREFIX", EXPLORER.into()),
        ],
    );

    // The chain: cancelled by the customer's own wallet.
    let on_chain = s
        .chain
        .manager()
        .getSubscription(U256::from(id))
        .call()
        .await
        .unwrap();
    assert_eq!(on_chain.status, 3, "cancelled on chain");
    assert!(
        on_chain.cancelAtPeriodEnd,
        "cancel at period end came first"
    );
    // The merchant's API shows it, with both lifecycle events from the customer.
    let sub = poll("the cancellation in the API", || async {
        let sub = api_sub().await?;
        (sub["status"] == "cancelled").then_some(sub)
    })
    .await;
    let events: Value = s
        .http
        .get(format!(
            "{}/api/v1/events?subscriptionId={}",
            s.base,
            sub["id"].as_str().unwrap()
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let types: Vec<&str> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert!(
        types.contains(&"subscription.cancel_at_period_end_set")
            && types.contains(&"subscription.cancelled"),
        "{types:?}"
    );
    // The upgrade from the page: on Team, with its prorated charge in the ledger; the
    // downgrade to Basic was scheduled from the page too.
    assert!(
        types.contains(&"subscription.plan_changed")
            && types.contains(&"subscription.plan_change_scheduled")
            && types.contains(&"subscription.plan_change_cancelled"),
        "{types:?}"
    );
    assert_eq!(sub["planId"], others[0]["id"], "{sub}");
    let detail: Value = s
        .http
        .get(format!(
            "{}/api/v1/subscriptions/{}",
            s.base,
            sub["id"].as_str().unwrap()
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&str> = detail["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds, ["charge", "proration"], "{detail}");
    assert_eq!(
        on_chain.amount,
        U256::from(19_990_000u64),
        "on Team on chain: {on_chain:?}"
    );
}

/// Issue 40, point 6: a merchant's plan-change link, opened in a browser with a wallet: a
/// stranger's wallet gets nothing to send; the subscriber confirms, its wallet sends
/// `changePlan`, and the API shows the upgrade with its proration.
#[tokio::test(flavor = "multi_thread")]
async fn customer_confirms_a_merchants_plan_change_link_from_the_browser() {
    let s = start("plan_change", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let (key, _, checkout) = plan_and_checkout(&s, "cust_change").await;
    let team = post(
        &s,
        &key,
        "/api/v1/plans",
        serde_json::json!({"name": "Team", "amount": "19.99", "currency": "USDC", "interval": "month"}),
    )
    .await;
    let url = checkout["url"].as_str().expect("checkout url").to_string();
    subscribe_through_checkout(&s, &url, customer).await;
    let list_url = format!("{}/api/v1/subscriptions", s.base);
    let api_sub = || async {
        let v: Value = s
            .http
            .get(&list_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["data"].as_array()?.first().cloned()
    };
    let sub = poll("the subscription indexed", api_sub).await;
    let link = post(
        &s,
        &key,
        &format!(
            "/api/v1/subscriptions/{}/plan-change-links",
            sub["id"].as_str().unwrap()
        ),
        serde_json::json!({"planId": team["id"]}),
    )
    .await;
    assert_eq!(link["kind"], "upgrade", "{link}");
    node(
        "plan_change.mjs",
        &[
            ("LINK_URL", link["url"].as_str().unwrap().to_string()),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            ("CUSTOMER", customer.to_string()),
            (
                "STRANGER",
                DevChain::address(accounts::CUSTOMER_B).to_string(),
            ),
        ],
    );
    let detail_url = format!(
        "{}/api/v1/subscriptions/{}",
        s.base,
        sub["id"].as_str().unwrap()
    );
    let upgraded = poll("the upgrade in the API", || async {
        let v: Value = s
            .http
            .get(&detail_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (v["planId"] == team["id"]).then_some(v)
    })
    .await;
    assert_eq!(upgraded["amount"], "19.99");
    let kinds: Vec<&str> = upgraded["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds, ["charge", "proration"], "{upgraded}");
}

/// Issue 40, point 7: a plan with a 14-day trial in the browser: the checkout states it
/// ("Free for 14 days … then 9.99 USDC every calendar month") and starts it with one
/// signature and one transaction; the API shows the subscription trialing with nothing
/// charged; `/account` lists it as a free trial with its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_trial_is_stated_on_the_checkout_started_from_it_and_shown_on_the_account_page() {
    let s = start("trial", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let key =
        crate::browser_support::admin_create_key(&s.db, DevChain::address(accounts::MERCHANT));
    let plan = post(
        &s,
        &key,
        "/api/v1/plans",
        serde_json::json!({"name": "Trial Pro", "amount": "9.99", "currency": "USDC",
                           "interval": "month", "trialDays": 14}),
    )
    .await;
    let checkout = post(
        &s,
        &key,
        "/api/v1/checkouts",
        serde_json::json!({"planId": plan["id"], "customerExternalId": "cust_trial"}),
    )
    .await;
    let url = checkout["url"].as_str().unwrap().to_string();
    s.chain.mint(customer, 100_000_000).await;
    // The page sells once the indexer has the plan.
    let tx_probe = format!("{}&from={customer}", url.replacen('?', "/tx?", 1));
    poll("the plan indexed", || async {
        let r = s.http.get(&tx_probe).send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    let env = |mode: &str, url: String| {
        vec![
            ("MODE", mode.to_string()),
            ("URL", url),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            ("CUSTOMER", customer.to_string()),
        ]
    };
    node("trial.mjs", &env("checkout", url.clone()));
    let list_url = format!("{}/api/v1/subscriptions", s.base);
    let sub = poll("the trial in the API", || async {
        let v: Value = s
            .http
            .get(&list_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["data"].as_array()?.first().cloned()
    })
    .await;
    assert_eq!(sub["status"], "trialing", "{sub}");
    assert_eq!(sub["period"], 0);
    assert!(!sub["trialEnd"].is_null());
    let code = url
        .split("/checkout/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_string();
    node(
        "trial.mjs",
        &env("account", format!("{}/account?merchant={code}", s.base)),
    );
}

/// Issue 41, points 1, 2 and 8, and issue 40, point 6: a merchant with a paying subscriber
/// signs in on `/dashboard` and reads the overview at 1280 px and 390 px (the figures equal
/// the reporting API's), finds the subscription by customer id, opens it, refunds 1.50
/// USDC with its own wallet, makes a plan-change link and cancels at period end; every page fits, logs no console error and has no serious
/// accessibility violation (axe-core). The API then shows the refund.
#[tokio::test(flavor = "multi_thread")]
async fn a_merchant_reads_the_overview_finds_the_subscription_and_refunds_it_from_the_browser() {
    let s = start("overview", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let (key, _, checkout) = plan_and_checkout(&s, "cust_overview").await;
    let team = post(
        &s,
        &key,
        "/api/v1/plans",
        serde_json::json!({"name": "Team", "amount": "19.99", "currency": "USDC", "interval": "month"}),
    )
    .await;
    assert_eq!(team["status"], "active", "{team}");
    let url = checkout["url"].as_str().expect("checkout url").to_string();
    subscribe_through_checkout(&s, &url, customer).await;
    let list_url = format!("{}/api/v1/subscriptions", s.base);
    poll("the subscription indexed", || async {
        let v: Value = s
            .http
            .get(&list_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["data"].as_array()?.first().cloned()
    })
    .await;
    node(
        "console.mjs",
        &[
            ("BASE_URL", s.base.clone()),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            (
                "MERCHANT",
                DevChain::address(accounts::MERCHANT).to_string(),
            ),
            ("API_KEY", key.clone()),
            ("CUSTOMER_ID", "cust_overview".into()),
            ("EXPLORER_PREFIX", EXPLORER.into()),
        ],
    );
    // The refund the merchant's wallet sent is the API's too.
    let refunded = poll("the refund in the API", || async {
        let list: Value = s
            .http
            .get(&list_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let id = list["data"][0]["id"].as_str()?.to_string();
        let v: Value = s
            .http
            .get(format!("{}/api/v1/subscriptions/{id}", s.base))
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["ledger"]
            .as_array()?
            .iter()
            .find(|e| e["type"] == "refund")
            .cloned()
    })
    .await;
    assert_eq!(refunded["amount"], "-1.50", "{refunded}");
}

/// A merchant creates a plan on `/dashboard/plans` while the chain mines nothing and watches
/// it go from provisioning to active when a block comes, makes and copies a checkout link,
/// and deactivates the plan with its own wallet (headless Chromium, 1280 and 390 px, axe).
/// The API then refuses a checkout link for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_merchant_creates_a_plan_watches_it_provisioned_links_it_and_deactivates_it() {
    let s = start("plans", true).await;
    let (key, _, _) = plan_and_checkout(&s, "cust_plans").await;
    node(
        "plans.mjs",
        &[
            ("BASE_URL", s.base.clone()),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            (
                "MERCHANT",
                DevChain::address(accounts::MERCHANT).to_string(),
            ),
            ("API_KEY", key.clone()),
        ],
    );
    let api = chainsub_tests::merchant::ApiClient::new(&s.base);
    let plans = api.get_ok("/api/v1/plans", &key).await.unwrap();
    let starter = plans["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Starter")
        .expect("the plan made on the page")
        .clone();
    assert_eq!(starter["status"], "deactivated", "{starter}");
    let (status, body) = api
        .post(
            "/api/v1/checkouts",
            &key,
            &serde_json::json!({"planId": starter["id"]}),
        )
        .await
        .unwrap();
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "plan_inactive", "{body}");
}
