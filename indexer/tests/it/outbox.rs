//! The webhook outbox only receives events whose block has CONFIRMATIONS confirmations, so a
//! reorg inside that window never produces a webhook.

use crate::common::*;
use alloy::primitives::B256;
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B};
use tokio_postgres::Client;

async fn outbox(client: &Client) -> Vec<String> {
    client
        .query(
            "SELECT event_public_id FROM webhook_outbox ORDER BY event_public_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn event_ids_of(client: &Client, sub: u64) -> Vec<String> {
    client
        .query(
            "SELECT public_id FROM chain_events WHERE subscription_id = $1 ORDER BY public_id",
            &[&(sub as i64)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn no_outbox_row_before_the_confirmations() {
    let Scene {
        chain,
        db,
        client,
        plan,
    } = Scene::start().await;
    let mut cfg = chain_config(&chain);
    cfg.confirmations = 3;
    let ix = start(cfg, &db, &chain);
    let sub = subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    wait_for_head(&client, &chain).await; // 1 confirmation
    assert!(outbox(&client).await.is_empty());
    chain.mine(1).await;
    wait_for_head(&client, &chain).await; // 2 confirmations
    assert!(outbox(&client).await.is_empty());
    let pending: i64 = client
        .query_one("SELECT count(*) FROM chain_events WHERE enqueued", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, 0);
    chain.mine(1).await;
    wait_for_head(&client, &chain).await; // 3 confirmations
    assert_eq!(outbox(&client).await, event_ids_of(&client, sub).await);
    assert_eq!(outbox(&client).await.len(), 2, "created + charged");
    ix.stop().await.unwrap();
}

#[tokio::test]
async fn reorg_inside_the_window_never_enqueues_the_removed_event() {
    let Scene {
        chain,
        db,
        client,
        plan,
    } = Scene::start().await;
    fund(&chain, DevChain::address(CUSTOMER_B), 10 * USDC).await;
    let mut cfg = chain_config(&chain);
    cfg.confirmations = 3;
    let ix = start(cfg, &db, &chain);
    let kept = subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    let removed = subscribe(&chain, DevChain::address(CUSTOMER_B), plan, B256::ZERO).await;
    wait_for_head(&client, &chain).await;
    let removed_ids = event_ids_of(&client, removed).await;
    assert_eq!(
        removed_ids.len(),
        2,
        "the doomed events were indexed, unconfirmed"
    );
    chain.reorg(1, &[]).await;
    wait_for_head(&client, &chain).await;
    chain.mine(5).await;
    wait_for_head(&client, &chain).await;
    let sent = outbox(&client).await;
    assert_eq!(
        sent,
        event_ids_of(&client, kept).await,
        "only the surviving events"
    );
    assert!(removed_ids.iter().all(|id| !sent.contains(id)));
    assert!(event_ids_of(&client, removed).await.is_empty());
    ix.stop().await.unwrap();
}
