//! Subscriptions and events read from index rows shaped like the indexer's: merchant
//! isolation, the ledger and `chain` blocks, filters, and cursor pagination.

use std::collections::HashSet;

use crate::api_common::{
    App, Opts, SNAP_COLUMNS, seed_chain_plan, seed_cursor, seed_subscription, spawn, sub_id,
};
use alloy::primitives::Address;
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts::{MERCHANT, MERCHANT_B};
use serde_json::json;

async fn app_with_two_merchants() -> (App, String, String) {
    let app = spawn(Opts::default()).await;
    let a = app.merchant_key(DevChain::address(MERCHANT)).await;
    let b = app.merchant_key(DevChain::address(MERCHANT_B)).await;
    (app, a, b)
}

fn wallet(i: usize) -> Address {
    DevChain::address(i)
}

/// A plan created through the API by the merchant with `key`, and its planRef.
async fn plan_with_ref(
    app: &App,
    key: &str,
    db: &tokio_postgres::Client,
) -> (serde_json::Value, Vec<u8>) {
    let plan = app.monthly_plan(key, "A").await.body;
    let plan_ref = db
        .query_one(
            "SELECT plan_ref FROM plans WHERE public_id = $1",
            &[&plan["id"].as_str().unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    (plan, plan_ref)
}

#[tokio::test]
async fn merchant_b_gets_404_for_merchant_a_objects_and_never_sees_them_in_lists() {
    let (app, a, b) = app_with_two_merchants().await;
    let db = app.db().await;
    seed_cursor(&db, 1000).await;
    let (sub_a, evt_a) = seed_subscription(&db, wallet(MERCHANT), 1, 1, Some("cust-a")).await;
    let (sub_b, _) = seed_subscription(&db, wallet(MERCHANT_B), 2, 2, Some("cust-b")).await;
    let plan_a = app
        .post(
            "/api/v1/plans",
            &a,
            &json!({"name":"A","amount":"1.00","currency":"USDC","interval":"month"}),
            None,
        )
        .await
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();

    // A sees its own objects.
    assert_eq!(
        app.get(&format!("/api/v1/subscriptions/{sub_a}"), &a)
            .await
            .status,
        200
    );
    assert_eq!(
        app.get(&format!("/api/v1/events/{evt_a}"), &a).await.status,
        200
    );
    assert_eq!(
        app.get(&format!("/api/v1/plans/{plan_a}"), &a).await.status,
        200
    );

    // B gets 404 for every one of them, exactly like for ids that do not exist.
    for path in [
        format!("/api/v1/subscriptions/{sub_a}"),
        format!("/api/v1/events/{evt_a}"),
        format!("/api/v1/plans/{plan_a}"),
    ] {
        let r = app.get(&path, &b).await;
        assert_eq!(r.status, 404, "{path}: {:?}", r.body);
        assert_eq!(r.error_code(), Some("resource_missing"));
    }
    assert_eq!(
        app.get("/api/v1/subscriptions/sub_999", &b).await.status,
        404
    );

    // B's lists contain only B's rows, whatever the filters.
    for path in [
        "/api/v1/subscriptions".to_string(),
        "/api/v1/subscriptions?customerExternalId=cust-a".to_string(),
        format!("/api/v1/subscriptions?planId={plan_a}"),
        "/api/v1/events".to_string(),
        format!("/api/v1/events?subscriptionId={sub_a}"),
        "/api/v1/plans".to_string(),
    ] {
        let r = app.get(&path, &b).await;
        assert_eq!(r.status, 200, "{path}");
        for item in r.body["data"].as_array().unwrap() {
            let s = item.to_string();
            assert!(
                !s.contains(&sub_a) && !s.contains(&plan_a) && !s.contains("cust-a"),
                "{path} leaked {s}"
            );
        }
    }
    let own = app.get("/api/v1/subscriptions", &b).await;
    assert_eq!(own.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(own.body["data"][0]["id"], sub_b);
    // A cursor naming A's event is not a way in either.
    let r = app
        .get(&format!("/api/v1/events?startingAfter={evt_a}"), &b)
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.error_param(), Some("startingAfter"));
}

#[tokio::test]
async fn subscription_carries_plan_ledger_and_chain_blocks() {
    let (app, a, _) = app_with_two_merchants().await;
    let db = app.db().await;
    seed_cursor(&db, 205).await;
    // An API plan whose planRef the index knows as on-chain plan 7.
    let (plan, plan_ref) = plan_with_ref(&app, &a, &db).await;
    seed_chain_plan(&db, wallet(MERCHANT), 7, &plan_ref, 50).await;
    let (sub, _) = seed_subscription(&db, wallet(MERCHANT), 5, 7, Some("cust-1")).await;

    // The index wins over the provisioning row: the plan is active with its chain block.
    let p = app
        .get(
            &format!("/api/v1/plans/{}", plan["id"].as_str().unwrap()),
            &a,
        )
        .await;
    assert_eq!(p.body["status"], "active");
    assert_eq!(p.body["chain"]["onchainPlanId"], 7);
    assert_eq!(p.body["chain"]["blockNumber"], 50);

    let r = app.get(&format!("/api/v1/subscriptions/{sub}"), &a).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let s = &r.body;
    assert_eq!(s["object"], "subscription");
    assert_eq!(s["status"], "active");
    assert_eq!(s["planId"], plan["id"]);
    assert_eq!(s["customerExternalId"], "cust-1");
    assert_eq!(s["amount"], "9.99");
    assert_eq!(s["cancelAtPeriodEnd"], false);
    assert_eq!(s["chain"]["blockNumber"], 105);
    assert_eq!(s["chain"]["confirmations"], 101);
    assert_eq!(s["chain"]["logIndex"], 0);
    let ledger = s["ledger"].as_array().unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["type"], "charge");
    assert_eq!(ledger[0]["period"], 1);
    assert_eq!(ledger[0]["amount"], "9.99");
    assert_eq!(ledger[0]["chain"]["logIndex"], 1);

    let ev = app
        .get(&format!("/api/v1/events?subscriptionId={sub}"), &a)
        .await;
    let data = ev.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    // Newest first: the charge (log 1) before the creation (log 0).
    assert_eq!(data[0]["type"], "subscription.charged");
    assert_eq!(data[1]["type"], "subscription.created");
    let e = &data[0];
    assert_eq!(e["object"], "event");
    assert_eq!(e["data"]["subscriptionId"], sub);
    assert_eq!(e["data"]["planId"], plan["id"]);
    assert_eq!(e["data"]["customerExternalId"], "cust-1");
    assert_eq!(e["data"]["amount"], "9.99");
    assert_eq!(e["data"]["currency"], "USDC");
    assert_eq!(e["data"]["status"], "active");
    assert_eq!(e["data"]["period"], 1);
    assert_eq!(e["data"]["txHash"], e["chain"]["transactionHash"]);
    assert_eq!(e["data"]["subscription"]["id"], sub);
    assert_eq!(e["chain"]["confirmations"], 101);
    // The contract's number, for reconciliation (the id is opaque).
    assert_eq!(
        e["chain"]["onchainSubscriptionId"],
        s["chain"]["onchainSubscriptionId"]
    );

    let typed = app
        .get("/api/v1/events?type=subscription.created", &a)
        .await;
    assert!(
        typed.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["type"] == "subscription.created")
    );
    let none = app.get("/api/v1/events?fromBlock=106", &a).await;
    assert_eq!(none.body["data"].as_array().unwrap().len(), 0);
    let some = app
        .get("/api/v1/events?fromBlock=105&toBlock=105", &a)
        .await;
    assert_eq!(some.body["data"].as_array().unwrap().len(), 2);
    let bad = app.get("/api/v1/events?type=charge", &a).await;
    assert_eq!((bad.status, bad.error_param()), (400, Some("type")));
    let bad = app.get("/api/v1/subscriptions?status=paused", &a).await;
    assert_eq!((bad.status, bad.error_param()), (400, Some("status")));
    let bad = app.get("/api/v1/subscriptions?limit=101", &a).await;
    assert_eq!((bad.status, bad.error_param()), (400, Some("limit")));
    let bad = app.get("/api/v1/subscriptions?colour=red", &a).await;
    assert_eq!((bad.status, bad.error_param()), (400, Some("colour")));
}

/// Anyone may create an on-chain plan with any reference: merchant A's plan carrying the
/// reference of merchant B's API plan must not name B's plan anywhere A reads it.
#[tokio::test]
async fn a_plan_reference_of_another_merchant_never_names_that_merchants_plan() {
    let (app, a, b) = app_with_two_merchants().await;
    let db = app.db().await;
    seed_cursor(&db, 1000).await;
    let (_, plan_ref) = plan_with_ref(&app, &b, &db).await;
    // Merchant A's on-chain plan 7 with B's reference, and a subscription to it.
    seed_chain_plan(&db, wallet(MERCHANT), 7, &plan_ref, 50).await;
    let (sub, created) = seed_subscription(&db, wallet(MERCHANT), 5, 7, None).await;
    // A retraction of its creation (as a deep reorg writes it) and a renewal-at-risk
    // observation (as the keeper writes it): both carry the on-chain plan too.
    let copy = |table: &str, cols: &str, vals: &str| {
        format!(
            "INSERT INTO {table} (public_id, chain_id, contract, merchant_wallet, {cols}, \
                 block_number, block_hash, block_time, subscription_id, plan_id, {SNAP_COLUMNS}) \
             SELECT 'evt_' || md5('{table}'), chain_id, contract, merchant_wallet, {vals}, \
                 block_number, block_hash, block_time, subscription_id, plan_id, {SNAP_COLUMNS} \
             FROM chain_events WHERE public_id = $1"
        )
    };
    for insert in [
        copy(
            "event_retractions",
            "retracted_event_id, retracted_kind, transaction_hash, log_index, ancestor_block, \
             ancestor_hash",
            "public_id, kind, transaction_hash, log_index, block_number - 1, block_hash",
        ),
        copy(
            "renewal_risks",
            "period, reason, amount, required, available, due_at",
            "2, 'allowance', 9990000, 9990000, 0, block_time + interval '1 month'",
        ),
    ] {
        db.execute(&insert, &[&created]).await.unwrap();
    }

    let one = app.get(&format!("/api/v1/subscriptions/{sub}"), &a).await;
    assert_eq!(one.status, 200, "{:?}", one.body);
    assert_eq!(one.body["planId"], serde_json::Value::Null);
    let list = app.get("/api/v1/subscriptions", &a).await;
    assert_eq!(
        list.body["data"].as_array().unwrap().len(),
        1,
        "{:?}",
        list.body
    );
    assert_eq!(list.body["data"][0]["planId"], serde_json::Value::Null);
    let mut types = HashSet::new();
    for path in [
        "/api/v1/events",
        &format!("/api/v1/events?subscriptionId={sub}"),
    ] {
        let events = app.get(path, &a).await;
        let data = events.body["data"].as_array().unwrap();
        assert_eq!(data.len(), 4, "{path}: {:?}", events.body);
        for e in data {
            assert!(e["data"].get("planId").is_some(), "{path}: {e}");
            assert_eq!(e["data"]["planId"], serde_json::Value::Null, "{path}: {e}");
            types.insert(e["type"].as_str().unwrap().to_string());
            let id = e["id"].as_str().unwrap();
            let one = app.get(&format!("/api/v1/events/{id}"), &a).await;
            assert_eq!(one.status, 200, "{:?}", one.body);
            assert_eq!(one.body["data"]["planId"], serde_json::Value::Null);
        }
    }
    assert_eq!(
        types,
        [
            "subscription.created",
            "subscription.charged",
            "event.retracted",
            "subscription.renewal_at_risk"
        ]
        .map(String::from)
        .into(),
    );
}

#[tokio::test]
async fn pagination_walks_250_subscriptions_forwards_and_backwards_without_gap_or_repeat() {
    let (app, a, _) = app_with_two_merchants().await;
    let db = app.db().await;
    seed_cursor(&db, 1000).await;
    for id in 1..=250 {
        seed_subscription(&db, wallet(MERCHANT), id, 1, None).await;
    }
    // Interleave another merchant's rows: they must never show up or shift pages.
    for id in 251..=260 {
        seed_subscription(&db, wallet(MERCHANT_B), id, 2, None).await;
    }
    let expected: Vec<String> = (1..=250).rev().map(sub_id).collect();

    // Forwards (newest first) with startingAfter.
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut path = "/api/v1/subscriptions?limit=37".to_string();
    loop {
        let r = app.get(&path, &a).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        pages += 1;
        let data = r.body["data"].as_array().unwrap();
        seen.extend(data.iter().map(|s| s["id"].as_str().unwrap().to_string()));
        if r.body["hasMore"] == false {
            break;
        }
        path = format!(
            "/api/v1/subscriptions?limit=37&startingAfter={}",
            seen.last().unwrap()
        );
    }
    assert_eq!(pages, 7);
    assert_eq!(seen, expected, "forward walk");

    // Backwards from the end with endingBefore.
    let mut back: Vec<String> = Vec::new();
    let last = app
        .get(
            &format!("/api/v1/subscriptions?limit=1&startingAfter={}", sub_id(2)),
            &a,
        )
        .await;
    assert_eq!(last.body["data"][0]["id"], sub_id(1));
    assert_eq!(last.body["hasMore"], false);
    back.push(sub_id(1));
    loop {
        let r = app
            .get(
                &format!("/api/v1/subscriptions?limit=40&endingBefore={}", back[0]),
                &a,
            )
            .await;
        let data: Vec<String> = r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        // Pages come in list order (newest first) even when walking backwards.
        let mut page = data.clone();
        page.extend(back);
        back = page;
        if r.body["hasMore"] == false {
            break;
        }
    }
    assert_eq!(back, expected, "backward walk");
    let unique: HashSet<&String> = back.iter().collect();
    assert_eq!(unique.len(), 250);

    // Default and maximum page sizes.
    let r = app.get("/api/v1/subscriptions", &a).await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 20);
    let r = app.get("/api/v1/subscriptions?limit=100", &a).await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 100);
    assert_eq!(r.body["hasMore"], true);

    // Events paginate the same way (500 of A's: 2 per subscription).
    let mut ids = HashSet::new();
    let mut path = "/api/v1/events?limit=100".to_string();
    loop {
        let r = app.get(&path, &a).await;
        let data = r.body["data"].as_array().unwrap();
        for e in data {
            assert!(
                ids.insert(e["id"].as_str().unwrap().to_string()),
                "repeat {}",
                e["id"]
            );
        }
        if r.body["hasMore"] == false {
            break;
        }
        path = format!(
            "/api/v1/events?limit=100&startingAfter={}",
            data.last().unwrap()["id"].as_str().unwrap()
        );
    }
    assert_eq!(ids.len(), 500);
}

/// Issue 10, point 3: no SQL text is built from request values, so however many distinct
/// filter / limit / cursor combinations merchants send, one pooled connection prepares a
/// small, constant number of statements. Before, every combination was a new cached
/// statement (`LIMIT 37` and `LIMIT 38` were two), without bound: ~100 KB of Postgres
/// backend memory each.
#[tokio::test]
async fn list_routes_prepare_a_constant_number_of_statements() {
    let app = spawn(Opts {
        pool_size: Some(1),
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(wallet(MERCHANT)).await;
    let db = app.db().await;
    seed_cursor(&db, 1000).await;
    let mut events = Vec::new();
    for i in 1..=5 {
        let (_, evt) = seed_subscription(&db, wallet(MERCHANT), i, 1, Some("cust")).await;
        events.push(evt);
    }
    let plan = app
        .post(
            "/api/v1/plans",
            &key,
            &json!({"name": "Pro", "amount": "5.00", "currency": "USDC", "interval": "month"}),
            None,
        )
        .await;
    let plan_id = plan.body["id"].as_str().unwrap().to_string();

    let statuses = ["", "active", "past_due", "cancelled", "ended"];
    let types = [
        "",
        "subscription.created",
        "subscription.charged",
        "subscription.ended",
    ];
    // Requests differ in limit, filters and cursor; all but the plan pages are unique.
    let url = |i: usize| -> String {
        let limit = 1 + i % 100;
        let mut q = format!("limit={limit}");
        let mut add = |k: &str, v: String| {
            if !v.is_empty() {
                q.push_str(&format!("&{k}={v}"));
            }
        };
        match i % 5 {
            0 | 1 => {
                add("status", statuses[(i / 5) % 5].into());
                if i.is_multiple_of(7) {
                    add("planId", plan_id.clone());
                }
                // A cursor (one of the five subscriptions) or none, and a customer unique to
                // this request but for some (with no status or plan either, those take the
                // unfiltered statements).
                match (i / 5) % 3 {
                    0 => add("startingAfter", sub_id(1 + (i % 5) as i64)),
                    1 => add("endingBefore", sub_id(1 + (i % 5) as i64)),
                    _ => {}
                }
                if !i.is_multiple_of(11) {
                    add("customerExternalId", format!("cust-{i}"));
                }
                format!("/api/v1/subscriptions?{q}")
            }
            2 | 3 => {
                add("type", types[(i / 5) % 4].into());
                if i.is_multiple_of(3) {
                    add("subscriptionId", sub_id(1 + (i % 5) as i64));
                }
                if i.is_multiple_of(2) {
                    add("fromBlock", (i % 50).to_string());
                }
                add("toBlock", (100_000 + i).to_string());
                if i.is_multiple_of(17) {
                    add("createdGte", "2023-01-01T00:00:00Z".into());
                }
                match i % 4 {
                    0 => add("startingAfter", events[i % events.len()].clone()),
                    1 => add("endingBefore", events[i % events.len()].clone()),
                    _ => {}
                }
                format!("/api/v1/events?{q}")
            }
            _ => {
                if i.is_multiple_of(2) {
                    add("startingAfter", plan_id.clone());
                }
                format!("/api/v1/plans?{q}")
            }
        }
    };

    let prepared = || async {
        let conn = app.running.ctx.pool.get().await.unwrap();
        let rows = conn
            .query("SELECT statement FROM pg_prepared_statements", &[])
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    let mut distinct = HashSet::new();
    let mut after_first_sweep = 0;
    for i in 0..4000 {
        let u = url(i);
        distinct.insert(u.clone());
        let r = app.get(&u, &key).await;
        assert_eq!(r.status, 200, "{u}: {:?}", r.body);
        if i == 999 {
            after_first_sweep = prepared().await.len();
        }
    }
    assert!(
        distinct.len() >= 3000,
        "{} distinct requests",
        distinct.len()
    );
    let statements = prepared().await;
    assert!(
        statements.len() <= chainsub_store::STATEMENT_BUDGET,
        "{} statements prepared on one connection (budget {}):\n{}",
        statements.len(),
        chainsub_store::STATEMENT_BUDGET,
        statements.join("\n")
    );
    assert_eq!(
        statements.len(),
        after_first_sweep,
        "3,000 more distinct requests prepared more statements"
    );
    // Each statement is planned once per connection (a generic plan), never per execution:
    // re-planning cost ~5x the execution of a subscriptions page.
    let conn = app.running.ctx.pool.get().await.unwrap();
    let (custom, generic): (i64, i64) = conn
        .query_one(
            "SELECT coalesce(sum(custom_plans), 0)::bigint, coalesce(sum(generic_plans), 0)::bigint \
             FROM pg_prepared_statements",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(
        custom, 0,
        "{generic} generic plans, but {custom} custom (per-execution) plans"
    );
    assert!(generic >= 4000, "{generic} generic plans");
    // No page size in any text: every LIMIT is a parameter (or the plan filter's `LIMIT 1`).
    for s in &statements {
        for (at, _) in s.match_indices("LIMIT ") {
            let rest = &s[at + 6..];
            assert!(
                rest.starts_with('$') || rest.starts_with("1)"),
                "a literal LIMIT: {s}"
            );
        }
    }
}

/// Every string in `v` that is an address is in its EIP-55 form.
fn assert_checksummed(v: &serde_json::Value, where_: &str) -> usize {
    match v {
        serde_json::Value::String(s)
            if s.len() == 42
                && s.starts_with("0x")
                && s[2..].bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            let a: Address = s.parse().unwrap();
            assert_eq!(
                s,
                &a.to_checksum(None),
                "{where_}: an address not in EIP-55 form"
            );
            1
        }
        serde_json::Value::Array(a) => a.iter().map(|x| assert_checksummed(x, where_)).sum(),
        serde_json::Value::Object(o) => o
            .iter()
            .map(|(k, x)| assert_checksummed(x, &format!("{where_}.{k}")))
            .sum(),
        _ => 0,
    }
}

/// Issue 10, point 4: the index stores addresses as bytes (event snapshots did as lowercase
/// hex before migration 0025); the API serves every address (subscriber, subscriberAddress, merchant, contract) in
/// EIP-55 form, on subscriptions, their ledger and events alike.
#[tokio::test]
async fn every_address_the_api_serves_is_eip55_checksummed() {
    let (app, a, _) = app_with_two_merchants().await;
    let db = app.db().await;
    seed_cursor(&db, 1000).await;
    let (sub, _) = seed_subscription(&db, wallet(MERCHANT), 1, 1, Some("cust")).await;
    // An address with letters in it, whose EIP-55 form differs from its lowercase hex.
    let subscriber = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
    db.execute(
        "UPDATE chain_events SET \
         snap_subscriber = decode(substr($1::text, 3), 'hex'), \
         log_subscriber = decode(substr($1::text, 3), 'hex') WHERE log_subscriber IS NOT NULL",
        &[&subscriber],
    )
    .await
    .unwrap();
    let mut seen = 0;
    for path in [
        "/api/v1/events".to_string(),
        "/api/v1/subscriptions".to_string(),
        format!("/api/v1/subscriptions/{sub}"),
    ] {
        let r = app.get(&path, &a).await;
        assert_eq!(r.status, 200, "{path}");
        seen += assert_checksummed(&r.body, &path);
    }
    let events = app.get("/api/v1/events", &a).await;
    let data = &events.body["data"][0]["data"];
    assert_eq!(
        data["subscriberAddress"],
        "0x5FbDB2315678afecb367f032d93F642f64180aa3"
    );
    assert_eq!(
        data["subscription"]["subscriber"],
        data["subscriberAddress"]
    );
    assert!(seen >= 6, "addresses were checked ({seen})");
}

/// Issue 12, point 7: every event carries `sequence`, its 1-based position among its
/// subscription's events in chain order (each seeded subscription has `created` then
/// `charged`), so a receiver sees a gap or a repeat at once; the webhook body is the same
/// object.
#[tokio::test]
async fn events_carry_their_position_in_their_subscriptions_sequence() {
    let (app, a, _) = app_with_two_merchants().await;
    let db = app.db().await;
    seed_cursor(&db, 300).await;
    for id in [5, 6] {
        seed_subscription(&db, wallet(MERCHANT), id, 7, None).await;
    }
    let list = app.get("/api/v1/events?limit=100", &a).await;
    assert_eq!(list.status, 200, "{:?}", list.body);
    let events = list.body["data"].as_array().unwrap();
    assert_eq!(events.len(), 4, "{:?}", list.body);
    for sub in [sub_id(5), sub_id(6)] {
        let mut mine: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["data"]["subscriptionId"] == sub.as_str())
            .collect();
        mine.sort_by_key(|e| {
            (
                e["chain"]["blockNumber"].as_i64(),
                e["chain"]["logIndex"].as_i64(),
            )
        });
        let seq: Vec<_> = mine.iter().map(|e| e["sequence"].as_i64()).collect();
        assert_eq!(seq, [Some(1), Some(2)], "{sub}: {mine:?}");
        assert_eq!(mine[0]["type"], "subscription.created");
    }
}
