//! Backfill then live over a scripted lifecycle on a real anvil and a real Postgres.

use std::collections::HashMap;

use crate::common::*;
use alloy::primitives::{B256, U256};
use alloy::providers::Provider;
use alloy::rpc::types::Filter;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT, MERCHANT_B};
use chainsub_tests::{DevChain, TestDb};

/// A merchant, a plan, and the reference the checkout made for `subscriber`'s wallet, which
/// the subscription will carry.
fn api_rows(wallet: &[u8], customer_ref: B256, subscriber: &[u8]) -> String {
    format!(
            "INSERT INTO merchants (public_id, wallet, code) VALUES ('mer_1', '\\x{}', 'm1');
             INSERT INTO plans (public_id, merchant_id, name, amount, currency, interval, slug, plan_ref)
               VALUES ('plan_1', 1, 'Pro', 9990000, 'USDC', 'month', 'pro', '\\x{}');
             INSERT INTO checkout_wallet_refs (customer_ref, merchant_id, customer_external_id, wallet)
               VALUES ('\\x{}', 1, 'cus_42', '\\x{}');",
            alloy::hex::encode(wallet),
            alloy::hex::encode(B256::repeat_byte(0x11)),
            alloy::hex::encode(customer_ref),
            alloy::hex::encode(subscriber),
    )
}

/// (id, status, cancelAtPeriodEnd, period, customer external id, ended reason)
type SubRow = (i64, String, bool, i32, Option<String>, Option<String>);

#[tokio::test]
async fn backfill_then_live_indexes_every_event_exactly_once() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let merchant = DevChain::address(MERCHANT);
    let (alice, bob) = (DevChain::address(CUSTOMER), DevChain::address(CUSTOMER_B));
    let alice_ref = B256::repeat_byte(0xa1);
    let seed = api_rows(merchant.as_slice(), alice_ref, alice.as_slice());
    client.batch_execute(&seed).await.unwrap();

    // Backfill part: plans and two subscriptions exist before the indexer starts.
    let plan = create_plan(&chain, merchant, 9_990_000, B256::repeat_byte(0x11)).await;
    create_plan(
        &chain,
        DevChain::address(MERCHANT_B),
        5 * USDC,
        B256::repeat_byte(0x22),
    )
    .await;
    fund(&chain, alice, 100 * USDC).await;
    fund(&chain, bob, 10 * USDC).await; // enough for one period only
    let sub_a = subscribe(&chain, alice, plan, alice_ref).await;
    let sub_b = subscribe(&chain, bob, plan, B256::ZERO).await;

    let ix = start(chain_config(&chain), &db, &chain);
    wait_for_head(&client, &chain).await;

    // Live part: renewals, a failed charge, cancellations, an end.
    chain.increase_time(32 * 86_400).await;
    charge(&chain, sub_a).await; // period 2 charged
    charge(&chain, sub_b).await; // fails: balance
    chainsub_tests::send_as!(alice, chain.manager().cancelAtPeriodEnd(U256::from(sub_a)));
    chainsub_tests::send_as!(merchant, chain.manager().cancel(U256::from(sub_b)));
    chain.increase_time(32 * 86_400).await;
    charge(&chain, sub_a).await; // ends (cancel at period end)
    wait_for_head(&client, &chain).await;

    // Ground truth: every log the node has for the contract.
    let logs = chain
        .provider
        .get_logs(&Filter::new().address(chain.manager).from_block(0))
        .await
        .unwrap();
    let rows = client
        .query(
            "SELECT block_number, block_hash, transaction_hash, log_index, public_id FROM chain_events",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), logs.len(), "one row per log");
    let mut by_key: HashMap<(B256, i32), (i64, B256)> = HashMap::new();
    for r in &rows {
        let key = (B256::from_slice(r.get::<_, &[u8]>(2)), r.get::<_, i32>(3));
        let prev = by_key.insert(key, (r.get(0), B256::from_slice(r.get::<_, &[u8]>(1))));
        assert!(prev.is_none(), "duplicate row for {key:?}");
    }
    for l in &logs {
        let key = (l.transaction_hash.unwrap(), l.log_index.unwrap() as i32);
        let (bn, bh) = by_key
            .get(&key)
            .unwrap_or_else(|| panic!("missing {key:?}"));
        assert_eq!(*bn as u64, l.block_number.unwrap());
        assert_eq!(*bh, l.block_hash.unwrap());
    }

    // Projections.
    let subs = client
        .query(
            "SELECT onchain_id, status, cancel_at_period_end, period, customer_external_id, ended_reason
             FROM subscriptions ORDER BY onchain_id",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<SubRow> = subs
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                sub_a as i64,
                "ended".into(),
                true,
                2,
                Some("cus_42".into()),
                Some("cancel_at_period_end".into())
            ),
            (sub_b as i64, "cancelled".into(), false, 1, None, None),
        ]
    );
    let ledger: Vec<(i64, String, i32)> = client
        .query(
            "SELECT subscription_id, kind, period FROM ledger_entries ORDER BY event_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        ledger,
        vec![
            (sub_a as i64, "charge".into(), 1),
            (sub_b as i64, "charge".into(), 1),
            (sub_a as i64, "charge".into(), 2),
            (sub_b as i64, "failed_charge".into(), 2),
        ]
    );
    let plans: i64 = client
        .query_one("SELECT count(*) FROM chain_plans", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(plans, 2);
    // CONFIRMATIONS=0: every lifecycle event is in the outbox, once.
    let (lifecycle, outbox): (i64, i64) = {
        let r = client
            .query_one(
                "SELECT (SELECT count(*) FROM chain_events WHERE kind IS NOT NULL),
                        (SELECT count(*) FROM webhook_outbox)",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(lifecycle, 9);
    assert_eq!(outbox, lifecycle);
    // The last snapshot of sub A says ended with no next payment.
    let snap = client
        .query_one(
            "SELECT snap_status, snap_next_payment_at IS NULL, snap_customer_external_id
             FROM chain_events WHERE subscription_id = $1 ORDER BY id DESC LIMIT 1",
            &[&(sub_a as i64)],
        )
        .await
        .unwrap();
    let (status, no_next, customer): (String, bool, Option<String>) =
        (snap.get(0), snap.get(1), snap.get(2));
    assert_eq!(status, "ended");
    assert!(no_next);
    assert_eq!(customer.as_deref(), Some("cus_42"));

    ix.stop().await.unwrap();
    // And the incremental index equals a fresh one.
    let fresh = fresh_index_dump(&chain, chain_config(&chain), &seed).await;
    assert_same_index(&dump(&client).await, &fresh);
}
