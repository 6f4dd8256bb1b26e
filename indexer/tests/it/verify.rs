//! `indexer verify` recomputes every row the API serves from the chain: it is clean on an
//! honest index, reports each kind of hand edit by table and key, and reports an index that
//! stands above the chain or on a branch the chain abandoned.

use std::process::Command;

use crate::common::*;
use alloy::primitives::{B256, U256};
use alloy::providers::Provider;
use chainsub_tests::chain::accounts::{CUSTOMER, MERCHANT, MERCHANT_B, OPERATOR};
use chainsub_tests::{DevChain, TestDb};

/// Runs `indexer verify` over the whole chain as the indexer was configured (CONFIRMATIONS
/// 0, as `test_config`). Returns (success, stdout).
fn verify(chain: &DevChain, db: &TestDb, to: u64, json: bool) -> (bool, String) {
    let (from, to) = (chain.deploy_block.to_string(), to.to_string());
    let mut args = vec!["verify", "--from", &from, "--to", &to];
    if json {
        args.push("--json");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_indexer"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RPC_URL", &chain.anvil.url)
        .env("CHAIN_ID", chain.anvil.chain_id.to_string())
        .env("CONTRACT_ADDRESS", chain.manager.to_string())
        .env("CONFIRMATIONS", "0")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run indexer verify");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Two plans (the second deactivated), a subscription to the first with a renewal, indexed.
async fn indexed_scene() -> (DevChain, TestDb, tokio_postgres::Client, u64) {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let merchant = DevChain::address(MERCHANT);
    let plan = create_plan(&chain, merchant, USDC, B256::repeat_byte(1)).await;
    let other = create_plan(&chain, merchant, 2 * USDC, B256::repeat_byte(2)).await;
    chainsub_tests::send_as!(
        DevChain::address(OPERATOR),
        chain.manager().deactivatePlan(U256::from(other))
    );
    fund(&chain, DevChain::address(CUSTOMER), 10 * USDC).await;
    let sub = subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    chain.increase_time(32 * 86_400).await;
    charge(&chain, sub).await;
    let ix = start(chain_config(&chain), &db, &chain);
    wait_for_head(&client, &chain).await;
    ix.stop().await.unwrap();
    let head = chain_head(&chain).await.0;
    (chain, db, client, head)
}

async fn exec(client: &tokio_postgres::Client, sql: &str) {
    let n = client.execute(sql, &[]).await.unwrap();
    assert!(n >= 1, "the edit changed nothing: {sql}");
}

#[tokio::test]
async fn verify_reports_every_kind_of_hand_edit_by_table_and_key_and_is_clean_otherwise() {
    let (chain, db, client, head) = indexed_scene().await;
    let (ok, out) = verify(&chain, &db, head, false);
    assert!(ok, "clean index: {out}");
    assert!(out.contains("clean"), "{out}");

    let other_merchant = format!("'\\x{}'", alloy::hex::encode(DevChain::address(MERCHANT_B)));
    // A subscription's status, period end and count of events.
    exec(
        &client,
        "UPDATE subscriptions SET status = 'cancelled', event_count = event_count + 5,
             current_period_end = current_period_end + interval '1 day'",
    )
    .await;
    // The renewal's amount; the first charge's ledger row deleted.
    exec(
        &client,
        "UPDATE ledger_entries SET amount = 1 WHERE period = 2",
    )
    .await;
    exec(&client, "DELETE FROM ledger_entries WHERE period = 1").await;
    // The creation event's snapshot, and the renewal's amount as its log says.
    exec(
        &client,
        "UPDATE chain_events SET snap_failed_attempts = 3 WHERE name = 'SubscriptionCreated'",
    )
    .await;
    exec(
        &client,
        "UPDATE chain_events SET log_amount = 1
         WHERE name = 'SubscriptionCharged' AND log_period = 2",
    )
    .await;
    // The first charge's snapshot naming no subscription id (out of the reader's range).
    exec(
        &client,
        "UPDATE chain_events SET snap_id = 'sub_5'
         WHERE name = 'SubscriptionCharged' AND log_period = 1",
    )
    .await;
    // The renewal's place in its subscription's sequence (created, charged 1, charged 2:
    // the third; served on every event).
    exec(
        &client,
        "UPDATE chain_events SET sequence = 7
         WHERE name = 'SubscriptionCharged' AND log_period = 2",
    )
    .await;
    // The renewal's webhook filed under no subscription (it would be delivered out of the
    // subscription's order).
    exec(
        &client,
        "UPDATE webhook_outbox SET subscription_id = NULL WHERE event_public_id =
             (SELECT public_id FROM chain_events WHERE name = 'SubscriptionCharged'
              AND log_period = 2)",
    )
    .await;
    // The creation's webhook naming another event row (the events page would show no
    // delivery for it).
    exec(
        &client,
        "UPDATE webhook_outbox SET event_id = -event_id WHERE event_public_id =
             (SELECT public_id FROM chain_events WHERE name = 'SubscriptionCreated')",
    )
    .await;
    // An outbox row for an event nobody indexed; the first plan's merchant.
    exec(
        &client,
        &format!(
            "INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet)
             VALUES (0, 'evt_00000000000000000000000000000000', {other_merchant})"
        ),
    )
    .await;
    exec(
        &client,
        &format!("UPDATE chain_plans SET merchant_wallet = {other_merchant} WHERE onchain_id = 1"),
    )
    .await;
    // The second plan's creation deleted: its chain_plans row stays, naming an event the
    // index does not hold (no foreign key since migration 0022).
    exec(
        &client,
        "DELETE FROM chain_events WHERE name = 'PlanCreated' AND plan_id = 2",
    )
    .await;
    // A ledger row of a charge that was never indexed, and a subscription whose latest event
    // is gone: rows found through their events would never show these.
    exec(
        &client,
        "INSERT INTO ledger_entries (event_id, chain_id, subscription_id, kind, amount, period,
             period_start, period_end, attempt, failure_reason, block_time)
         SELECT 999999, chain_id, subscription_id, kind, amount, 9, period_start, period_end,
             attempt, failure_reason, block_time FROM ledger_entries LIMIT 1",
    )
    .await;
    exec(
        &client,
        "UPDATE subscriptions SET last_event_id = 999998 WHERE onchain_id = 1",
    )
    .await;

    // A month of revenue that no longer sums its ledger.
    exec(&client, "UPDATE revenue_months SET refunds = refunds + 7").await;
    // Counts of subscriptions that no longer count them.
    exec(
        &client,
        "UPDATE subscription_tallies SET amount = amount + 5",
    )
    .await;
    exec(&client, "DELETE FROM subscription_starts").await;
    exec(
        &client,
        "UPDATE subscription_state_moves SET subscriptions = subscriptions + 3 WHERE state = 'active'",
    )
    .await;

    // A webhook attempt of an outbox row that does not exist (no foreign key since 0024).
    exec(
        &client,
        "INSERT INTO webhook_attempts (outbox_id, attempt, url) VALUES (999997, 1, 'https://x')",
    )
    .await;

    let (ok, out) = verify(&chain, &db, head, false);
    assert!(!ok, "differences must fail the command: {out}");
    let has = |table: &str, what: &[&str]| {
        out.lines()
            .any(|l| l.starts_with(&format!("{table} ")) && what.iter().all(|w| l.contains(w)))
    };
    assert!(
        has(
            "subscriptions",
            &[
                "onchain 1: differs:",
                "status (db Cancelled, chain Active)",
                "current_period_end",
                "events (db 8, chain 3)"
            ]
        ),
        "{out}"
    );
    assert!(
        has("ledger_entries", &["differs: amount (db 1, chain 1000000)"]),
        "{out}"
    );
    assert!(has("ledger_entries", &[": missing"]), "{out}");
    assert!(
        has(
            "chain_events",
            &["snapshot differs (failedAttempts: db 3, chain 0)"]
        ),
        "{out}"
    );
    assert!(has("chain_events", &["differs (log_amount)"]), "{out}");
    assert!(
        has(
            "chain_events",
            &["snapshot unreadable (", "snapshot id out of range"]
        ),
        "{out}"
    );
    assert!(
        has(
            "webhook_outbox",
            &[
                "row differs",
                "subscription_id: None",
                "subscription_id: Some(1)"
            ]
        ),
        "{out}"
    );
    assert!(
        has(
            "chain_events",
            &["sequence differs (stored Some(7), expected 3)"]
        ),
        "{out}"
    );
    assert!(
        has("webhook_outbox", &["row differs", "event_id: Some(-"]),
        "{out}"
    );
    assert!(
        has(
            "webhook_outbox",
            &[
                "for event evt_00000000000000000000000000000000 (row id 0), which the index does not hold"
            ]
        ),
        "{out}"
    );
    assert!(
        has(
            "webhook_attempts",
            &["names outbox row 999997, which does not exist"]
        ),
        "{out}"
    );
    assert!(
        has(
            "revenue_months",
            &[
                "charges/prorations/refunds/entries ",
                "/7/",
                "the ledger sums to "
            ]
        ),
        "{out}"
    );
    assert!(
        has(
            "subscription_tallies",
            &[
                "subscriptions/amount/due_amount ",
                "5/",
                "the subscriptions count "
            ]
        ),
        "{out}"
    );
    assert!(
        has(
            "subscription_tallies",
            &[
                "started 20",
                "subscriptions/amount/due_amount none, the subscriptions count 1"
            ]
        ),
        "{out}"
    );
    assert!(
        has(
            "subscription_state_moves",
            &[" active: subscriptions ", ", the events move "]
        ),
        "{out}"
    );
    assert!(
        has("chain_plans", &["plan 1: differs: merchant_wallet"]),
        "{out}"
    );
    assert!(
        has(
            "chain_plans",
            &[
                "plan 1: the contract's state at block",
                "merchant (contract"
            ]
        ),
        "{out}"
    );
    assert!(has("chain_plans", &["plan 2: missing"]), "{out}");
    assert!(
        has(
            "chain_plans",
            &[
                "plan 2: event_id names event",
                "which the index does not hold"
            ]
        ),
        "{out}"
    );
    assert!(
        has(
            "ledger_entries",
            &[
                "subscription 1 period 9 attempt",
                "event_id names event 999999, which the index does not hold"
            ]
        ),
        "{out}"
    );
    assert!(
        has(
            "subscriptions",
            &["onchain 1: last_event_id names event 999998, which the index does not hold"]
        ),
        "{out}"
    );
    assert!(has("chain_events", &[": missing"]), "{out}");

    // --json: the same findings for machines.
    let (ok, out) = verify(&chain, &db, head, true);
    assert!(!ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["clean"], false);
    let tables: std::collections::BTreeSet<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["table"].as_str().unwrap())
        .collect();
    assert_eq!(
        tables,
        [
            "chain_events",
            "chain_plans",
            "ledger_entries",
            "revenue_months",
            "subscription_state_moves",
            "subscription_tallies",
            "subscriptions",
            "webhook_attempts",
            "webhook_outbox"
        ]
        .into()
    );
}

#[tokio::test]
async fn verify_reports_an_index_above_the_chain_head_or_on_an_abandoned_branch() {
    let (chain, db, _client, head) = indexed_scene().await;
    // The node goes back three blocks (the renewal among them) and mines nothing.
    let _: serde_json::Value = chain
        .provider
        .raw_request("anvil_rollback".into(), (3u64,))
        .await
        .expect("anvil_rollback");
    let now = chain.provider.get_block_number().await.unwrap();
    assert_eq!(now, head - 3);
    let (ok, out) = verify(&chain, &db, now, false);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "indexer_cursor chain 31337: at block {head} above the chain head {now}"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("above the chain head {now}"))
            && out.contains("chain_events above block"),
        "{out}"
    );
    // New blocks on the new branch: the cursor's height exists again, with another hash.
    chain.mine(5).await;
    let (ok, out) = verify(&chain, &db, head, false);
    assert!(!ok, "{out}");
    assert!(out.contains("the index is on a dead branch"), "{out}");
    // The renewal the index still holds is not on the chain any more.
    assert!(out.contains("extra: not on the chain"), "{out}");
}

/// An event written without a `sequence` (by an indexer of the release before migration 0019,
/// still running after it) does not restart its subscription's numbering: the next event is
/// numbered from the count of stored events, and verify names the one left empty.
/// The on-chain id of the scene's (first) subscription.
async fn first_subscription(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT onchain_id FROM subscriptions ORDER BY onchain_id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Renews subscription `sub` a month later, indexes it, and returns the `sequence` of each of
/// its events in id order.
async fn renew_index_and_number(
    chain: &DevChain,
    db: &TestDb,
    client: &tokio_postgres::Client,
    sub: i64,
) -> Vec<Option<i64>> {
    chain.increase_time(32 * 86_400).await;
    charge(chain, sub as u64).await;
    let ix = start(chain_config(chain), db, chain);
    wait_for_head(client, chain).await;
    ix.stop().await.unwrap();
    client
        .query(
            "SELECT sequence FROM chain_events WHERE subscription_id = $1 ORDER BY id",
            &[&sub],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn an_event_stored_without_a_sequence_does_not_restart_the_numbering() {
    let (chain, db, client, _) = indexed_scene().await;
    exec(
        &client,
        "UPDATE chain_events SET sequence = NULL
         WHERE id = (SELECT max(id) FROM chain_events WHERE subscription_id IS NOT NULL)",
    )
    .await;
    let sub = first_subscription(&client).await;
    let seq = renew_index_and_number(&chain, &db, &client, sub).await;
    // Created, charged 1, charged 2 (left empty), charged 3.
    assert_eq!(seq, [Some(1), Some(2), None, Some(4)]);
    let head = chain_head(&chain).await.0;
    let (ok, out) = verify(&chain, &db, head, false);
    assert!(!ok, "{out}");
    let sequence_lines: Vec<&str> = out.lines().filter(|l| l.contains("sequence")).collect();
    assert_eq!(sequence_lines.len(), 1, "{out}");
    assert!(
        sequence_lines[0].contains("sequence differs (stored None, expected 3)"),
        "{out}"
    );
}

/// The sink numbers a subscription's new events from the count its row keeps (migration
/// 0020), not by reading its stored events: a hand-edited stored sequence does not carry
/// over to the next event (reading the last stored one, as before 0020, gave 71 here).
#[tokio::test]
async fn new_events_are_numbered_from_the_subscription_count() {
    let (chain, db, client, _) = indexed_scene().await;
    let sub = first_subscription(&client).await;
    exec(
        &client,
        &format!("UPDATE chain_events SET sequence = 70 WHERE subscription_id = {sub}"),
    )
    .await;
    let seq = renew_index_and_number(&chain, &db, &client, sub).await;
    assert_eq!(seq, [Some(70), Some(70), Some(70), Some(4)]);
}

/// A subscription created before the index's start block is not projected (no row, no
/// snapshot), but its events are stored and numbered all the same, from the stored events:
/// two charges in one batch are 1 and 2, a third in a later batch 3.
#[tokio::test]
async fn events_of_a_subscription_created_before_the_start_block_are_numbered_too() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let plan = create_plan(
        &chain,
        DevChain::address(MERCHANT),
        USDC,
        B256::repeat_byte(1),
    )
    .await;
    fund(&chain, DevChain::address(CUSTOMER), 10 * USDC).await;
    let sub = subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    let start_block = chain_head(&chain).await.0 + 1;
    for _ in 0..2 {
        chain.increase_time(32 * 86_400).await;
        charge(&chain, sub).await;
    }
    // Empty blocks after them, so both charges are written in one backfill batch (near the
    // head, blocks are written one by one).
    chain.mine(60).await;
    let mut cfg = chain_config(&chain);
    cfg.start_block = start_block;
    let ix = start(cfg.clone(), &db, &chain);
    wait_for_head(&client, &chain).await;
    ix.stop().await.unwrap();
    chain.increase_time(32 * 86_400).await;
    charge(&chain, sub).await;
    let ix = start(cfg, &db, &chain);
    wait_for_head(&client, &chain).await;
    ix.stop().await.unwrap();
    let rows: Vec<(Option<i64>, bool)> = client
        .query(
            "SELECT sequence, snap_id IS NULL FROM chain_events WHERE subscription_id = $1
             ORDER BY id",
            &[&(sub as i64)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, [(Some(1), true), (Some(2), true), (Some(3), true)]);
    let projected: i64 = client
        .query_one("SELECT count(*) FROM subscriptions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(projected, 0);
}
