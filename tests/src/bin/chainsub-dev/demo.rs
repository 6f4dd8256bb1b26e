//! The demo `scripts/dev up` runs once the stack answers: a merchant signs in with its wallet
//! (SIWE through the API's nonce/session endpoints, signed in-process with the dev merchant
//! key), gets an API key, points its webhook URL at a local receiver that verifies Standard
//! Webhooks signatures, creates a plan with a free trial and a checkout link; a customer
//! starts the trial with the transactions the checkout page's `/tx` endpoint hands out; chain
//! time jumps to the trial's end and the keeper charges the first month; the merchant refunds
//! part of it from its own wallet with the calls the API hands out. Then it prints what the
//! merchant sees.

use alloy::providers::Provider;
use anyhow::{Context, Result, anyhow};
use chainsub_tests::chain::{DevChain, accounts, dev_key, signing_provider};
use chainsub_tests::merchant::{ApiClient, wait_for};
use chainsub_tests::receiver::WebhookReceiver;
use serde_json::Value;

/// What the demo leaves running and worth printing at the end.
pub(crate) struct DemoOutcome {
    pub checkout_url: String,
    pub receiver: WebhookReceiver,
}

/// Writes `text` to `path`, readable by its owner only.
fn write_secret(path: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("write {}", path.display()))?;
    writeln!(f, "{text}")?;
    Ok(())
}

fn short(v: &Value) -> String {
    let s = v.as_str().unwrap_or_default();
    if s.len() > 14 {
        format!("{}…{}", &s[..10], &s[s.len() - 4..])
    } else {
        s.to_string()
    }
}

/// Runs the demo against the API at `api_base` and the chain at `rpc_url`, its webhook
/// receiver listening on `receiver_listen`; the merchant's API key is written whole to
/// `key_file` (owner-only), so it can be used afterwards.
pub(crate) async fn run(
    api_base: &str,
    rpc_url: &str,
    receiver_listen: std::net::SocketAddr,
    key_file: &std::path::Path,
) -> Result<DemoOutcome> {
    let api = ApiClient::new(api_base);
    let wallet = signing_provider(rpc_url);
    let merchant = dev_key(accounts::MERCHANT);
    let customer = DevChain::address(accounts::CUSTOMER);

    println!("\n== demo ==");
    let receiver = WebhookReceiver::start(receiver_listen)
        .await
        .with_context(|| format!("the demo's webhook receiver on {receiver_listen}"))?;
    let session = api.sign_in(&merchant).await.context("SIWE sign-in")?;
    println!(
        "1. merchant {} signed in with SIWE (merchant {})",
        merchant.address(),
        session.body["merchant"]["id"].as_str().unwrap_or("?")
    );
    let key = api.create_key(&session).await?;
    write_secret(key_file, &key)?;
    println!(
        "2. API key issued in the session: {}… (whole in {}; `KEY=$(cat {})`)",
        &key[..12.min(key.len())],
        key_file.display(),
        key_file.display()
    );
    let secret = api.set_webhook(&session, &receiver.url()).await?;
    receiver.set_secret(&secret);
    println!("3. webhook URL set in the dashboard: {}", receiver.url());

    let plan = api
        .create_plan_with(
            &key,
            &serde_json::json!({"name": "Demo Pro", "amount": "9.99", "currency": "USDC",
                                "interval": "month", "trialDays": 14}),
        )
        .await?;
    println!(
        "4. plan {} ({} USDC/month after a {}-day free trial) active on chain, tx {}",
        plan["id"].as_str().unwrap_or("?"),
        plan["amount"].as_str().unwrap_or("?"),
        plan["trialDays"],
        short(&plan["chain"]["transactionHash"])
    );
    let external = format!("demo-customer-{}", chrono::Utc::now().timestamp());
    let checkout = api
        .create_checkout(&key, plan["id"].as_str().unwrap_or_default(), &external)
        .await?;
    let checkout_url = checkout["url"]
        .as_str()
        .ok_or_else(|| anyhow!("checkout without url: {checkout}"))?
        .to_string();
    println!("5. checkout link for {external}: {checkout_url}");

    let receipts = api
        .subscribe_via_checkout(&checkout_url, &wallet, customer)
        .await?;
    for (n, (step, r)) in (6..).zip(&receipts) {
        println!(
            "{n}. customer {customer} sent `{step}` from the checkout page's tx endpoint: {} (block {}){}",
            r.transaction_hash,
            r.block_number.unwrap_or_default(),
            if step == "subscribe" && receipts.len() == 1 {
                " — one transaction: the USDC allowance came with it as a signed EIP-2612 permit"
            } else {
                ""
            }
        );
    }
    let mut next = 6 + receipts.len();
    let query = format!("/api/v1/subscriptions?customerExternalId={external}");
    let sub = wait_for("the subscription in the API", 60, || async {
        let list = api.get_ok(&query, &key).await?;
        Ok(list["data"].as_array().and_then(|d| d.first()).cloned())
    })
    .await?;
    let sub_id = sub["id"].as_str().unwrap_or_default().to_string();
    println!(
        "{next}. indexed: {sub_id} {} until {} (nothing charged yet)",
        sub["status"].as_str().unwrap_or("?"),
        sub["currentPeriodEnd"].as_str().unwrap_or("?")
    );

    // Jump chain time to the trial's end: the keeper sees the first charge due and charges.
    let period_end =
        chrono::DateTime::parse_from_rfc3339(sub["currentPeriodEnd"].as_str().unwrap_or_default())
            .context("currentPeriodEnd")?
            .timestamp() as u64;
    let now = wallet
        .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
        .await?
        .ok_or_else(|| anyhow!("no latest block"))?
        .header
        .timestamp;
    let jump = period_end.saturating_sub(now) + 1;
    let _: Value = wallet
        .raw_request("evm_increaseTime".into(), (jump,))
        .await?;
    let _: Value = wallet.raw_request("evm_mine".into(), ()).await?;
    next += 1;
    println!(
        "{next}. chain time +{} days (evm_increaseTime): the trial is over, the first charge is due",
        jump / 86_400
    );
    let path = format!("/api/v1/subscriptions/{sub_id}");
    wait_for("the keeper's first charge", 120, || async {
        let s = api.get_ok(&path, &key).await?;
        let charges = s["ledger"]
            .as_array()
            .map_or(0, |l| l.iter().filter(|e| e["type"] == "charge").count());
        Ok((charges >= 1).then_some(s))
    })
    .await?;
    next += 1;
    println!("{next}. the trial ended: the keeper charged period 1, the subscription is active");

    // The merchant refunds part of that charge from its own wallet: the API hands out the
    // calls (an approval, then the refund), the merchant's wallet sends them.
    let (status, request) = api
        .post(
            &format!("/api/v1/subscriptions/{sub_id}/refunds"),
            &key,
            &serde_json::json!({"amount": "2.00"}),
        )
        .await?;
    anyhow::ensure!(status == 200, "refund request: {status} {request}");
    for step in request["steps"].as_array().into_iter().flatten() {
        chainsub_tests::merchant::send_tx_request(&wallet, &step["tx"]).await?;
    }
    wait_for("the refund indexed", 120, || async {
        let s = api.get_ok(&path, &key).await?;
        let refunded = s["ledger"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["type"] == "refund"));
        Ok(refunded.then_some(s))
    })
    .await?;
    next += 1;
    println!(
        "{next}. the merchant refunded {} USDC of period {} from its own wallet with the calls \
         POST /api/v1/subscriptions/{sub_id}/refunds handed out ({} transaction(s))",
        request["amount"].as_str().unwrap_or("?"),
        request["period"],
        request["steps"].as_array().map_or(0, Vec::len)
    );

    // The merchant's backend cancels at the end of the paid period through the API; the
    // service sends the transaction, and the event comes back from the chain.
    let (status, cancel) = api
        .post(
            &format!("/api/v1/subscriptions/{sub_id}/cancel"),
            &key,
            &serde_json::json!({"atPeriodEnd": true}),
        )
        .await?;
    anyhow::ensure!(status == 202, "cancel: {status} {cancel}");
    next += 1;
    println!(
        "{next}. the merchant cancelled at period end through the API (POST \
         /api/v1/subscriptions/{sub_id}/cancel): 202 {}, tx {}",
        cancel["status"].as_str().unwrap_or("?"),
        short(&cancel["transactionHash"])
    );
    wait_for("the cancellation indexed", 120, || async {
        let s = api.get_ok(&path, &key).await?;
        Ok((s["cancelAtPeriodEnd"] == true).then_some(s))
    })
    .await?;

    // The customer changes their mind and cancels at once from the self-service page: the
    // page lists the wallet's subscriptions and hands out the `cancel` call, which the
    // customer's own wallet sends.
    let mine = api
        .account_subscriptions(&dev_key(accounts::CUSTOMER))
        .await?;
    let onchain_id = mine["data"][0]["onchainId"]
        .as_u64()
        .ok_or_else(|| anyhow!("the account page lists nothing: {mine}"))?;
    let receipt = api
        .cancel_via_account_page(&wallet, customer, onchain_id, false)
        .await?;
    next += 1;
    println!(
        "{next}. the customer cancelled now from the self-service page ({api_base}/account?merchant={}; \
         it listed {} subscription(s) for the wallet): tx {}",
        mine["data"][0]["merchant"]["code"].as_str().unwrap_or("?"),
        mine["data"].as_array().map_or(0, Vec::len),
        receipt.transaction_hash
    );
    let detail = wait_for("the customer's cancellation indexed", 120, || async {
        let s = api.get_ok(&path, &key).await?;
        Ok((s["status"] == "cancelled").then_some(s))
    })
    .await?;

    // The receiver may answer before the dispatcher records the attempt: wait for both, so
    // what is printed is settled.
    let events_path = format!("/api/v1/events?subscriptionId={sub_id}&limit=100");
    let events = wait_for("the webhooks", 60, || async {
        let events = api.get_ok(&events_path, &key).await?;
        let list = events["data"].as_array().cloned().unwrap_or_default();
        let delivered = list.iter().all(|e| e["delivery"]["status"] == "delivered");
        let verified = receiver.received().iter().filter(|d| d.verified).count();
        Ok((delivered && verified >= list.len()).then_some(events))
    })
    .await?;
    print_merchant_view(&detail, &events, &receiver);
    Ok(DemoOutcome {
        checkout_url,
        receiver,
    })
}

fn print_merchant_view(sub: &Value, events: &Value, receiver: &WebhookReceiver) {
    println!("\n-- what the merchant sees --");
    println!(
        "GET /api/v1/subscriptions/{}: status {}, customer {}, subscriber {}, period {} ends {}",
        sub["id"].as_str().unwrap_or("?"),
        sub["status"].as_str().unwrap_or("?"),
        sub["customerExternalId"].as_str().unwrap_or("-"),
        sub["subscriber"].as_str().unwrap_or("?"),
        sub["period"],
        sub["currentPeriodEnd"].as_str().unwrap_or("?"),
    );
    println!("  ledger:");
    for e in sub["ledger"].as_array().into_iter().flatten() {
        println!(
            "    {:<7} period {} {} USDC  tx {}  block {} ({})  log {}",
            e["type"].as_str().unwrap_or("?"),
            e["period"],
            e["amount"].as_str().unwrap_or("?"),
            e["chain"]["transactionHash"].as_str().unwrap_or("?"),
            e["chain"]["blockNumber"],
            short(&e["chain"]["blockHash"]),
            e["chain"]["logIndex"],
        );
    }
    println!("GET /api/v1/events:");
    for e in events["data"].as_array().into_iter().flatten() {
        println!(
            "    {}  {:<38} block {:<4} tx {}  webhook {}",
            e["id"].as_str().unwrap_or("?"),
            e["type"].as_str().unwrap_or("?"),
            e["chain"]["blockNumber"],
            short(&e["chain"]["transactionHash"]),
            e["delivery"]["status"].as_str().unwrap_or("-"),
        );
    }
    println!("webhooks the demo receiver got (Standard Webhooks signature checked):");
    for d in receiver.received() {
        println!(
            "    {}  {:<38} {}",
            d.id,
            d.kind,
            if d.verified {
                "signature verified".to_string()
            } else {
                format!("REJECTED: {}", d.error.unwrap_or_default())
            }
        );
    }
}
