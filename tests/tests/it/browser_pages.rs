//! The checkout and dashboard pages over plain HTTP against the real `api` binary (no
//! browser): link verification and error pages, the transaction endpoint's calldata (sent
//! on anvil exactly as a wallet would), security headers and assets.

use crate::browser_support::{plan_and_checkout, poll, start, subscribe_through_checkout};
use alloy::primitives::{B256, U256};
use alloy::providers::Provider;
use alloy::sol_types::SolCall;
use chainsub_abi::{MockUSDC, SubscriptionManager};
use chainsub_tests::chain::accounts;
use chainsub_tests::merchant::send_tx_request;
use chainsub_tests::{DevChain, dev_key};
use serde_json::Value;

fn calldata(step: &Value) -> Vec<u8> {
    let hex = step["tx"]["data"].as_str().expect("data");
    alloy::primitives::hex::decode(hex).expect("hex calldata")
}

#[tokio::test(flavor = "multi_thread")]
async fn checkout_link_errors_are_html_pages_with_honest_status() {
    let s = start("pages-errors", false).await;
    let (_, _, checkout) = plan_and_checkout(&s, "cust_7").await;
    let url = checkout["url"].as_str().unwrap().to_string();

    let ok = s.http.get(&url).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let csp = ok.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(ok.headers()["x-frame-options"], "DENY");
    assert_eq!(ok.headers()["referrer-policy"], "no-referrer");
    assert!(
        ok.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );

    let cases = [
        (
            url.split("&sig=").next().unwrap().to_string(),
            400,
            "incomplete",
        ),
        (url.replace("cust_7", "cust_8"), 403, "not valid"),
        (url.replace("customer=cust_7&", ""), 403, "not valid"),
        (format!("{url}0"), 403, "not valid"),
    ];
    for (bad, status, words) in cases {
        let res = s.http.get(&bad).send().await.unwrap();
        assert_eq!(res.status(), status, "{bad}");
        assert!(
            res.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let body = res.text().await.unwrap();
        assert!(
            body.contains(words) && body.contains("role=\"alert\""),
            "{bad}: {body}"
        );
        assert!(
            !body.contains("Pro Monthly"),
            "an invalid link shows no plan"
        );
    }

    // A correctly signed link to a merchant code that no longer exists: 404.
    let conn = s.db.connect().await;
    conn.execute("UPDATE merchants SET code = 'renamed1'", &[])
        .await
        .unwrap();
    let res = s.http.get(&url).send().await.unwrap();
    assert_eq!(res.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn tx_endpoint_encodes_approve_and_subscribe_with_the_wallets_recorded_customer_ref() {
    let s = start("pages-tx", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let (_, plan, checkout) = plan_and_checkout(&s, "cust_tx").await;
    let url = checkout["url"].as_str().unwrap().to_string();
    // The two-transaction way (`permit=off`); the permit way is checked at the end.
    let permit_way = url.replacen('?', "/tx?", 1);
    let path_and_query = format!("{permit_way}&permit=off");
    let get = |from: Option<String>| {
        let u = match from {
            Some(f) => format!("{path_and_query}&from={f}"),
            None => path_and_query.clone(),
        };
        let http = s.http.clone();
        async move {
            let res = http.get(u).send().await.unwrap();
            (res.status().as_u16(), res.json::<Value>().await.unwrap())
        }
    };

    let (status, body) = get(None).await;
    assert_eq!(
        (status, body["error"]["param"].as_str()),
        (400, Some("from"))
    );
    let (status, _) = get(Some("0x1234".into())).await;
    assert_eq!(status, 400);
    let forged = format!(
        "{}&from={customer}",
        path_and_query.replace("cust_tx", "cust_ty")
    );
    let res = s.http.get(forged).send().await.unwrap();
    assert_eq!(res.status(), 403);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "checkout_signature_invalid");

    // A wallet with no USDC and no allowance: approve (12 periods) then subscribe — once the
    // indexer has the plan (before that: 409 plan_not_active, never the receipt's id).
    let (status, v) = poll("the plan indexed for the checkout", || {
        let get = &get;
        let customer = customer.to_string();
        async move {
            let (status, v) = get(Some(customer)).await;
            (status != 409).then_some((status, v))
        }
    })
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["insufficientBalance"], true);
    assert_eq!(v["alreadySubscribed"], Value::Null);
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{v}");
    let approve = MockUSDC::approveCall::abi_decode(&calldata(&steps[0])).unwrap();
    assert_eq!(approve.spender, s.chain.manager);
    assert_eq!(approve.amount, U256::from(9_990_000u64 * 12));
    let sub = SubscriptionManager::subscribeCall::abi_decode(&calldata(&steps[1])).unwrap();
    let row =
        s.db.connect()
            .await
            .query_one(
                "SELECT r.customer_ref, r.wallet, p.onchain_plan_id FROM checkout_wallet_refs r \
             JOIN plans p ON p.merchant_id = r.merchant_id \
             WHERE r.customer_external_id = 'cust_tx' AND p.public_id = $1",
                &[&plan["id"].as_str().unwrap()],
            )
            .await
            .unwrap();
    let stored: Vec<u8> = row.get(0);
    let wallet: Vec<u8> = row.get(1);
    let plan_onchain_id: i64 = row.get(2);
    assert_eq!(
        sub.customerRef,
        B256::from_slice(&stored),
        "customerRef is the one recorded for this wallet"
    );
    assert_eq!(wallet, customer.as_slice());
    assert_eq!(sub.planId, U256::from(plan_onchain_id as u64));

    // Send both exactly as handed out (what the wallet does), after funding the customer.
    s.chain.mint(customer, 50_000_000).await;
    for step in steps {
        send_tx_request(&s.chain.provider, &step["tx"])
            .await
            .unwrap_or_else(|e| panic!("{}: {e:#}", step["step"]));
    }

    // A wallet with no allowance, by default: a permit to sign (the token has EIP-2612), then
    // the subscription, whose transaction comes only with a signature that checks out.
    let other = DevChain::address(accounts::CUSTOMER_B);
    let ask = |extra: String| {
        let http = s.http.clone();
        let u = format!("{permit_way}&from={other}{extra}");
        async move {
            let res = http.get(u).send().await.unwrap();
            (res.status().as_u16(), res.json::<Value>().await.unwrap())
        }
    };
    let (status, v) = ask(String::new()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["steps"][0]["step"], "permit", "{v}");
    assert_eq!(
        v["steps"][0]["typedData"]["domain"]["name"],
        "Mock USD Coin"
    );
    assert_eq!(v["steps"][1]["tx"], Value::Null, "{v}");
    let (value, deadline) = (
        v["steps"][0]["permit"]["value"]
            .as_str()
            .unwrap()
            .to_string(),
        v["steps"][0]["permit"]["deadline"]
            .as_str()
            .unwrap()
            .to_string(),
    );
    // Signed by another wallet (the customer's, for the same message): refused.
    let signature: String = s
        .chain
        .provider
        .raw_request(
            "eth_signTypedData_v4".into(),
            (customer, v["steps"][0]["typedData"].clone()),
        )
        .await
        .unwrap();
    let signed =
        |sig: &str| format!("&permitValue={value}&permitDeadline={deadline}&permitSignature={sig}");
    let (status, v) = ask(signed(&signature)).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("permit_signature_invalid")),
        "{v}"
    );
    for bad in [
        "&permit=on".to_string(),
        format!("&permitValue={value}&permitSignature={signature}"),
        signed("0x1234"),
    ] {
        let (status, v) = ask(bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {v}");
    }

    // Now the wallet is subscribed; a top-up approve would add to what is left, never replace it.
    let (_, v) = get(Some(customer.to_string())).await;
    assert_eq!(v["alreadySubscribed"], "1", "{v}");
    assert_eq!(v["allowance"], "109.89");
    let top_up = MockUSDC::approveCall::abi_decode(&calldata(&v["steps"][0])).unwrap();
    assert_eq!(top_up.amount, U256::from(109_890_000u64 + 119_880_000));
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_not_on_chain_is_shown_unavailable_and_tx_endpoint_answers_409() {
    let s = start("pages-unprovisioned", false).await;
    let (_, _, checkout) = plan_and_checkout(&s, "cust_x").await;
    // Without the provisioning receipt and with no indexer, nothing says the plan is on chain.
    s.db.connect()
        .await
        .execute("UPDATE plans SET onchain_plan_id = NULL", &[])
        .await
        .unwrap();
    let url = checkout["url"].as_str().unwrap().to_string();
    let page = s.http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("not available on chain yet")
    );
    let tx = format!(
        "{}&from={}",
        url.replacen('?', "/tx?", 1),
        DevChain::address(accounts::CUSTOMER)
    );
    let res = s.http.get(tx).send().await.unwrap();
    assert_eq!(res.status(), 409);
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["error"]["code"], "plan_not_active");
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboard_without_session_offers_sign_in_and_assets_are_served_locally() {
    let s = start("pages-dashboard", false).await;
    let res = s
        .http
        .get(format!("{}/dashboard/developers", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body = res.text().await.unwrap();
    assert!(body.contains("id=\"signin\"") && body.contains("Sign in with Ethereum"));
    assert!(!body.contains("csrfToken"), "no session, no CSRF token");
    assert!(
        !body.contains("http://") && !body.contains("https://"),
        "no CDN or other origin"
    );

    for (name, ct) in [
        ("checkout.js", "text/javascript"),
        ("wallet.js", "text/javascript"),
        ("account.js", "text/javascript"),
        ("dashboard.js", "text/javascript"),
        ("style.css", "text/css"),
    ] {
        let res = s
            .http
            .get(format!("{}/assets/{name}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{name}");
        assert!(
            res.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(ct)
        );
    }
    let missing = s
        .http
        .get(format!("{}/assets/nope.js", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let post = s
        .http
        .post(format!("{}/dashboard/developers", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
}

/// Issue 14, point 1, over plain HTTP: the self-service page's list holds only chain facts
/// and names (never the merchant's customer id), and its cancel endpoint hands out only calls
/// the chain would accept from that wallet.
#[tokio::test(flavor = "multi_thread")]
async fn account_endpoints_list_a_wallets_subscriptions_and_encode_only_cancels_it_may_send() {
    let s = start("pages-account", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let stranger = DevChain::address(accounts::CUSTOMER_B);
    let (key, plan, checkout) = plan_and_checkout(&s, "cust_secret_ref").await;
    let team = crate::browser_support::post(
        &s,
        &key,
        "/api/v1/plans",
        serde_json::json!({"name": "Team", "amount": "19.99", "currency": "USDC", "interval": "month"}),
    )
    .await;
    let onchain_plan = |p: &Value| p["chain"]["onchainPlanId"].as_u64().expect("on chain");
    let (pro, team) = (onchain_plan(&plan), onchain_plan(&team));
    let url = checkout["url"].as_str().unwrap().to_string();
    let code = url
        .split("/checkout/")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap()
        .to_string();
    let id = subscribe_through_checkout(&s, &url, customer).await;
    let get = |path: String| {
        let http = s.http.clone();
        let base = s.base.clone();
        async move {
            let res = http.get(format!("{base}{path}")).send().await.unwrap();
            let status = res.status().as_u16();
            let text = res.text().await.unwrap();
            (status, text)
        }
    };
    // The list needs the wallet's signature of the server's challenge.
    let kit = chainsub_tests::merchant::ApiClient::new(&s.base);
    let customer_proof = kit
        .account_proof(&dev_key(accounts::CUSTOMER))
        .await
        .unwrap();
    let stranger_proof = kit
        .account_proof(&dev_key(accounts::CUSTOMER_B))
        .await
        .unwrap();
    let list_with = |wallet: String, merchant: Option<String>, proof: Option<(String, String)>| {
        let http = s.http.clone();
        let base = s.base.clone();
        async move {
            let q = merchant
                .map(|m| format!("&merchant={m}"))
                .unwrap_or_default();
            let mut req = http.get(format!("{base}/account/subscriptions?wallet={wallet}{q}"));
            if let Some((issued_at, signature)) = proof {
                req = req
                    .header("x-wallet-proof-issued-at", issued_at)
                    .header("x-wallet-proof-signature", signature);
            }
            let res = req.send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    };
    let list = |wallet: String, merchant: Option<String>| {
        let (list_with, proof) = (&list_with, &customer_proof);
        async move {
            let (status, text) = list_with(wallet, merchant, Some(proof.clone())).await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            (v, text)
        }
    };
    let (v, text) = poll("the subscription indexed", || async {
        let (v, text) = list(customer.to_string(), Some(code.clone())).await;
        (!v["data"].as_array()?.is_empty()).then_some((v, text))
    })
    .await;
    let sub = &v["data"][0];
    assert_eq!(sub["onchainId"], id, "{v}");
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["planName"], "Pro Monthly");
    assert_eq!(sub["amount"], "9.99");
    assert_eq!(sub["merchant"]["code"], code.as_str());
    assert_eq!(sub["merchant"]["name"], Value::Null, "no name set: {sub}");
    assert_eq!(
        sub["merchant"]["wallet"],
        DevChain::address(accounts::MERCHANT).to_checksum(None)
    );
    // The name the merchant sets (the dashboard's form, tested in the browser) is listed.
    s.db.connect()
        .await
        .execute("UPDATE merchants SET display_name = 'Acme Cloud'", &[])
        .await
        .unwrap();
    let (named, _) = list(customer.to_string(), Some(code.clone())).await;
    assert_eq!(
        named["data"][0]["merchant"]["name"], "Acme Cloud",
        "{named}"
    );
    assert_eq!(sub["ledger"].as_array().unwrap().len(), 1);
    // CONFIRMATIONS is 0 in this stack: the first charge is confirmed, with its count.
    assert_eq!(sub["ledger"][0]["confirmed"], true, "{sub}");
    assert!(
        sub["ledger"][0]["confirmations"].as_i64().unwrap() >= 1,
        "{sub}"
    );
    assert!(sub["nextChargeAt"].is_string());
    assert!(
        !text.contains("cust_secret_ref"),
        "the merchant's customer id is never on the page: {text}"
    );
    // Lowercase input, same wallet; another merchant's code or another wallet: nothing.
    let (v, _) = list(customer.to_string().to_lowercase(), None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    let (v, _) = list(customer.to_string(), Some("nosuchcode".into())).await;
    assert!(v["data"].as_array().unwrap().is_empty());
    let (status, text) = list_with(stranger.to_string(), None, Some(stranger_proof.clone())).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"data\":[]"), "{text}");
    // Without the wallet's own fresh signature, nothing is listed: no proof, another wallet's
    // proof, a proof for another time.
    for (proof, code) in [
        (None, "wallet_proof_required"),
        (Some(stranger_proof.clone()), "wallet_proof_invalid"),
        (
            Some(("2020-01-01T00:00:00Z".to_string(), customer_proof.1.clone())),
            "wallet_proof_expired",
        ),
    ] {
        let (status, text) = list_with(customer.to_string(), None, proof).await;
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (401, Some(code)),
            "{text}"
        );
        assert!(!text.contains("Pro Monthly"), "{text}");
    }
    for (path, param) in [
        ("/account/subscriptions".to_string(), "wallet"),
        ("/account/subscriptions?wallet=0x12".to_string(), "wallet"),
        (
            format!("/account/subscriptions?wallet={customer}&merchant=a%3Cb"),
            "merchant",
        ),
        (
            format!("/account/cancel-tx?subscription={id}&atPeriodEnd=true"),
            "from",
        ),
        (
            format!("/account/cancel-tx?from={customer}&subscription=x&atPeriodEnd=true"),
            "subscription",
        ),
        // Beyond what the index could hold: refused, not sent to the node.
        (
            format!(
                "/account/cancel-tx?from={customer}&subscription=9223372036854775808&atPeriodEnd=true"
            ),
            "subscription",
        ),
        (
            format!("/account/cancel-tx?from={customer}&subscription={id}&atPeriodEnd=yes"),
            "atPeriodEnd",
        ),
        (
            format!("/account/plan-change-tx?from={customer}&subscription={id}"),
            "plan",
        ),
        (
            format!("/account/plan-change-tx?from={customer}&subscription={id}&plan=0"),
            "plan",
        ),
        (
            format!(
                "/account/plan-change-tx?from={customer}&subscription={id}&plan=9223372036854775808"
            ),
            "plan",
        ),
        // Its own plan with no change scheduled: nothing to do.
        (
            format!("/account/plan-change-tx?from={customer}&subscription={id}&plan={pro}"),
            "plan",
        ),
    ] {
        let (status, text) = get(path.clone()).await;
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (status, v["error"]["param"].as_str()),
            (400, Some(param)),
            "{path}: {text}"
        );
    }

    let cancel = |from: alloy::primitives::Address, sub: u64, at_end: bool| {
        let get = &get;
        async move {
            let (status, text) = get(format!(
                "/account/cancel-tx?from={from}&subscription={sub}&atPeriodEnd={at_end}"
            ))
            .await;
            (status, serde_json::from_str::<Value>(&text).unwrap())
        }
    };
    let send = |v: Value| {
        let s = &s;
        async move {
            send_tx_request(&s.chain.provider, &v["tx"])
                .await
                .unwrap_or_else(|e| panic!("the handed-out cancel: {e:#}: {v}"));
        }
    };
    // A plan change: only the subscriber's wallet gets one, to a plan that exists; the call
    // carries the plan's terms.
    let change = |from: alloy::primitives::Address, plan: u64| {
        let get = &get;
        async move {
            let (status, text) = get(format!(
                "/account/plan-change-tx?from={from}&subscription={id}&plan={plan}"
            ))
            .await;
            (status, serde_json::from_str::<Value>(&text).unwrap())
        }
    };
    let (status, v) = change(stranger, team).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("not_subscriber")),
        "{v}"
    );
    let (status, v) = change(customer, 999).await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (404, Some("plan")),
        "{v}"
    );
    let (status, v) = change(customer, team).await;
    assert_eq!(
        (status, v["change"].as_str()),
        (200, Some("upgrade")),
        "{v}"
    );
    let call = SubscriptionManager::changePlanCall::abi_decode(&calldata(&v)).expect("calldata");
    assert_eq!(
        (
            call.subscriptionId,
            call.newPlanId,
            call.merchant,
            call.amount
        ),
        (
            U256::from(id),
            U256::from(team),
            DevChain::address(accounts::MERCHANT),
            U256::from(19_990_000u64)
        )
    );

    let (status, v) = cancel(stranger, id, true).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (403, Some("not_subscriber")),
        "{v}"
    );
    let (status, _) = cancel(customer, 999, true).await;
    assert_eq!(status, 404);

    let (status, v) = cancel(customer, id, true).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["tx"]["to"], s.chain.manager.to_checksum(None));
    assert_eq!(v["tx"]["from"], customer.to_checksum(None));
    let call =
        SubscriptionManager::cancelAtPeriodEndCall::abi_decode(&calldata(&v)).expect("calldata");
    assert_eq!(call.subscriptionId, U256::from(id));
    send(v).await;
    let (status, v) = cancel(customer, id, true).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("subscription_already_cancelling")),
        "{v}"
    );
    // An ending subscription changes plan no more.
    let (status, v) = change(customer, team).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("subscription_not_active")),
        "{v}"
    );
    let (status, v) = cancel(customer, id, false).await;
    assert_eq!(status, 200, "{v}");
    let call = SubscriptionManager::cancelCall::abi_decode(&calldata(&v)).expect("calldata");
    assert_eq!(call.subscriptionId, U256::from(id));
    send(v).await;
    let (status, v) = cancel(customer, id, false).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("subscription_terminal")),
        "{v}"
    );

    // The page itself: the pages' headers; a merchant code that cannot be one is a 404 page.
    let res = s
        .http
        .get(format!("{}/account?merchant={code}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-frame-options"], "DENY");
    let body = res.text().await.unwrap();
    assert!(
        body.contains("/assets/account.js") && body.contains(&code),
        "{body}"
    );
    let res = s
        .http
        .get(format!("{}/account?merchant=nosuchcode", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404, "a merchant code that is no merchant's");
    let res = s
        .http
        .get(format!("{}/account?merchant=%3Cscript%3E", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert!(!res.text().await.unwrap().contains("<script>"));
}
