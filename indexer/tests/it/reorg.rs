//! Reorgs on a real anvil (`anvil_reorg`): afterwards every chain table equals a fresh index
//! of the canonical chain, row by row.

use crate::common::*;
use alloy::primitives::{Address, B256, U256};
use alloy::sol_types::SolCall;
use chainsub_abi::SubscriptionManager;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT};
use chainsub_tests::{DevChain, TestDb};

const CUSTOMERS: [usize; 5] = [CUSTOMER, CUSTOMER_B, 6, 7, 8];

/// A plan and five funded customers; returns the plan id.
async fn setup(chain: &DevChain) -> u64 {
    let plan = create_plan(
        chain,
        DevChain::address(MERCHANT),
        3 * USDC,
        B256::repeat_byte(1),
    )
    .await;
    for c in CUSTOMERS {
        fund(chain, DevChain::address(c), 100 * USDC).await;
    }
    plan
}

/// Subscribes every customer to `plan` (one block each), each with its own reference.
async fn subscribe_all(chain: &DevChain, plan: u64) {
    for (i, c) in CUSTOMERS.iter().enumerate() {
        subscribe(
            chain,
            DevChain::address(*c),
            plan,
            B256::repeat_byte(i as u8 + 1),
        )
        .await;
    }
}

/// Calldata of a merchant creating its own plan: a transaction to re-include in a new branch.
fn create_plan_tx(ref_byte: u8) -> (Address, Address, Vec<u8>) {
    let merchant = DevChain::address(MERCHANT);
    let call = SubscriptionManager::createPlanCall {
        merchant,
        amount: U256::from(7 * USDC),
        planRef: B256::repeat_byte(ref_byte),
    };
    (merchant, Address::ZERO, call.abi_encode())
}

async fn events(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM chain_events", &[])
        .await
        .unwrap()
        .get(0)
}

/// Subscribes every customer (one block each) with the indexer following, reorgs `depth`
/// blocks with a plan creation in the new branch, and compares with a fresh index.
async fn reorg_replays_new_branch(depth: u64) {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let plan = setup(&chain).await;
    let ix = start(chain_config(&chain), &db, &chain);
    subscribe_all(&chain, plan).await;
    chain.mine(3).await;
    wait_for_head(&client, &chain).await;
    let before = events(&client).await;
    let (from, _, data) = create_plan_tx(0x77);
    chain.reorg(depth, &[(from, chain.manager, data, 0)]).await;
    wait_for_head(&client, &chain).await;
    let plans: i64 = client
        .query_one(
            "SELECT count(*) FROM chain_plans WHERE plan_ref = $1",
            &[&B256::repeat_byte(0x77).as_slice()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(plans, 1, "the new branch's plan is indexed");
    assert_ne!(before, events(&client).await, "the reorg changed the index");
    ix.stop().await.unwrap();
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

#[tokio::test]
async fn reorg_of_depth_1_replays_new_branch() {
    reorg_replays_new_branch(1).await;
}

#[tokio::test]
async fn reorg_of_depth_3_replays_new_branch() {
    reorg_replays_new_branch(3).await;
}

#[tokio::test]
async fn reorg_of_depth_10_replays_new_branch() {
    reorg_replays_new_branch(10).await;
}

#[tokio::test]
async fn two_consecutive_reorgs_leave_a_fresh_index() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let plan = setup(&chain).await;
    let ix = start(chain_config(&chain), &db, &chain);
    subscribe_all(&chain, plan).await;
    wait_for_head(&client, &chain).await;
    let (from, _, data) = create_plan_tx(0x81);
    chain.reorg(4, &[(from, chain.manager, data, 1)]).await;
    wait_for_head(&client, &chain).await;
    let (from, _, data) = create_plan_tx(0x82);
    chain.reorg(2, &[(from, chain.manager, data, 0)]).await;
    wait_for_head(&client, &chain).await;
    ix.stop().await.unwrap();
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

#[tokio::test]
async fn reorg_removing_a_subscription_creation_removes_the_subscription() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let plan = setup(&chain).await;
    let ix = start(chain_config(&chain), &db, &chain);
    let first = subscribe(
        &chain,
        DevChain::address(CUSTOMER),
        plan,
        B256::repeat_byte(1),
    )
    .await;
    // The doomed subscription: created in the last block, with a renewal of the first in
    // the same block range.
    let doomed = subscribe(
        &chain,
        DevChain::address(CUSTOMER_B),
        plan,
        B256::repeat_byte(2),
    )
    .await;
    wait_for_head(&client, &chain).await;
    let subs = |id: u64| {
        let client = &client;
        async move {
            client
                .query_opt(
                    "SELECT status FROM subscriptions WHERE onchain_id = $1",
                    &[&(id as i64)],
                )
                .await
                .unwrap()
                .map(|r| r.get::<_, String>(0))
        }
    };
    assert_eq!(subs(doomed).await.as_deref(), Some("active"));
    let outbox_before: i64 = client
        .query_one("SELECT count(*) FROM webhook_outbox", &[])
        .await
        .unwrap()
        .get(0);
    chain.reorg(1, &[]).await;
    wait_for_head(&client, &chain).await;
    assert_eq!(
        subs(doomed).await,
        None,
        "the reorged-out subscription is gone"
    );
    assert_eq!(subs(first).await.as_deref(), Some("active"));
    let (events_of_doomed, outbox_after): (i64, i64) = {
        let r = client
            .query_one(
                "SELECT (SELECT count(*) FROM chain_events WHERE subscription_id = $1),
                        (SELECT count(*) FROM webhook_outbox)",
                &[&(doomed as i64)],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(events_of_doomed, 0);
    assert_eq!(
        outbox_after,
        outbox_before - 2,
        "its pending webhooks are withdrawn"
    );
    ix.stop().await.unwrap();
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

/// Issue 12, point 1: `anvil_rollback` with no new blocks leaves the node's head below the
/// cursor, on the same chain up to that head. Once the chain has stayed shorter than the
/// index for the grace, the index undoes the blocks that no longer exist (it served their
/// subscriptions and events before) and equals a fresh index of the chain.
#[tokio::test]
async fn rollback_without_new_blocks_undoes_the_blocks_that_are_gone() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let plan = setup(&chain).await;
    let mut cfg = chain_config(&chain);
    cfg.shorter_chain_grace = std::time::Duration::from_millis(300);
    let ix = start(cfg, &db, &chain);
    subscribe_all(&chain, plan).await;
    wait_for_head(&client, &chain).await;
    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    let subs_before = count("SELECT count(*) FROM subscriptions").await;
    assert_eq!(subs_before, CUSTOMERS.len() as i64);
    {
        use alloy::providers::Provider;
        let _: serde_json::Value = chain
            .provider
            .raw_request("anvil_rollback".into(), (3u64,))
            .await
            .expect("anvil_rollback");
    }
    // Waits until the cursor is the (lower) head block again: without the undo it stays on
    // the dead tip.
    wait_for_head(&client, &chain).await;
    assert!(
        count("SELECT count(*) FROM subscriptions").await < subs_before,
        "the subscriptions of the blocks that are gone are gone"
    );
    ix.stop().await.unwrap();
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

/// `PlanDeactivated` marks the indexed plan (the checkout refuses it); a reorg that takes
/// the deactivation back makes the plan active again, exactly as a fresh index has it.
#[tokio::test]
async fn a_plan_deactivation_is_indexed_and_a_reorg_that_removes_it_reactivates_the_plan() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let plan = setup(&chain).await;
    let ix = start(chain_config(&chain), &db, &chain);
    chainsub_tests::send_as!(
        DevChain::address(MERCHANT),
        chain.manager().deactivatePlan(U256::from(plan))
    );
    wait_for_head(&client, &chain).await;
    assert!(
        deactivated(&client, plan).await,
        "the deactivation is indexed"
    );

    chain.reorg(1, &[]).await;
    chain.mine(1).await;
    wait_for_head(&client, &chain).await;
    assert!(!deactivated(&client, plan).await, "the reorg took it back");
    ix.stop().await.unwrap();
    let fresh = fresh_index_dump(&chain, chain_config(&chain), "").await;
    assert_same_index(&dump(&client).await, &fresh);
}

async fn deactivated(client: &tokio_postgres::Client, plan: u64) -> bool {
    client
        .query_one(
            "SELECT deactivated_event_id IS NOT NULL FROM chain_plans WHERE onchain_id = $1",
            &[&(plan as i64)],
        )
        .await
        .unwrap()
        .get(0)
}
