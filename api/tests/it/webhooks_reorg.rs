// End to end on a real anvil: the `indexer` binary (CONFIRMATIONS=3) follows the chain, a
// dispatcher runs throughout, and a reorg removes an unconfirmed subscription. The removed
// events never reach the receiver; the surviving ones do, once confirmed. Build the indexer
// first: `cargo build -p chainsub-indexer --bins`.

use std::time::Duration;

use crate::api_common::spawn_indexer_on;
use crate::webhooks_common::*;
use alloy::primitives::{Address, B256, U256};
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT, OPERATOR};
use chainsub_tests::{DevChain, TestDb};
use tokio_postgres::Client;

const USDC: u64 = 1_000_000;

async fn head(chain: &DevChain) -> u64 {
    use alloy::providers::Provider;
    chain.provider.get_block_number().await.unwrap()
}

async fn wait_indexed(client: &Client, chain: &DevChain) {
    let target = head(chain).await as i64;
    let what = format!("the indexer at head {target}");
    chainsub_tests::wait_until(&what, || async {
        let at: Option<i64> = client
            .query_opt("SELECT block_number FROM indexer_cursor", &[])
            .await
            .unwrap()
            .map(|r| r.get(0));
        at.is_some_and(|b| b >= target)
    })
    .await;
}

async fn event_ids(client: &Client, sub: u64) -> Vec<String> {
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

/// The merchant's webhook pointed at a receiver, a dispatcher, the `indexer` binary with
/// `CONFIRMATIONS`, and one plan of the merchant on chain.
struct Scene {
    chain: DevChain,
    db: TestDb,
    client: Client,
    rx: WebhookReceiver,
    merchant: chainsub_api::merchants::Merchant,
    plan: U256,
    /// The plan's (merchant, amount), as `subscribe` takes them.
    terms: (Address, U256),
    _dispatcher: (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ),
    _indexer: chainsub_tests::ChildGuard,
}

impl Scene {
    async fn start(confirmations: u64) -> Self {
        let chain = DevChain::start().await;
        let db = TestDb::create().await;
        let mut client = db.connect().await;
        let rx = WebhookReceiver::ok().await;
        let merchant =
            chainsub_api::merchants::find_or_create(&client, DevChain::address(MERCHANT))
                .await
                .unwrap();
        set_url(&mut client, &merchant, &rx.url()).await;
        let dispatcher = spawn_dispatcher(&db.url, fast_config("0s,10ms"));
        let indexer = spawn_indexer_on(&chain, &db, confirmations);
        chainsub_tests::send_as!(
            DevChain::address(OPERATOR),
            chain.manager().createPlan(
                DevChain::address(MERCHANT),
                U256::from(5 * USDC),
                B256::repeat_byte(7)
            )
        );
        let plan = U256::from(1u64);
        let terms = chain.plan_terms(plan).await;
        Self {
            chain,
            db,
            client,
            rx,
            merchant,
            plan,
            terms,
            _dispatcher: dispatcher,
            _indexer: indexer,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reorg_that_removes_an_unconfirmed_event_never_produces_a_webhook() {
    let Scene {
        chain,
        db: _db,
        client,
        rx,
        plan,
        terms: (merchant, amount),
        // Bound, so they live to the end of the test.
        _dispatcher: _keep_dispatcher,
        _indexer: _keep_indexer,
        ..
    } = Scene::start(3).await;
    for who in [CUSTOMER, CUSTOMER_B] {
        let who: Address = DevChain::address(who);
        chain.mint(who, 100 * USDC).await;
        chainsub_tests::send_as!(who, chain.usdc().approve(chain.manager, U256::MAX));
    }
    chainsub_tests::send_as!(
        DevChain::address(CUSTOMER),
        chain
            .manager()
            .subscribe(plan, merchant, amount, B256::ZERO)
    );
    chain.mine(3).await;
    // The doomed subscription, alone in the newest block.
    chainsub_tests::send_as!(
        DevChain::address(CUSTOMER_B),
        chain
            .manager()
            .subscribe(plan, merchant, amount, B256::ZERO)
    );
    wait_indexed(&client, &chain).await;
    let kept = event_ids(&client, 1).await;
    let removed = event_ids(&client, 2).await;
    assert_eq!(
        (kept.len(), removed.len()),
        (2, 2),
        "created + charged each, indexed"
    );

    // The kept subscription is confirmed and delivered while the doomed one waits.
    for id in &kept {
        wait_status(&client, id, "delivered").await;
    }
    let _: serde_json::Value = {
        use alloy::providers::Provider;
        chain
            .provider
            .raw_request(
                "anvil_reorg".into(),
                (1u64, Vec::<serde_json::Value>::new()),
            )
            .await
            .expect("anvil_reorg")
    };
    chain.mine(5).await;
    wait_indexed(&client, &chain).await;
    assert!(
        event_ids(&client, 2).await.is_empty(),
        "the reorg removed the doomed events"
    );

    // Everything the outbox holds was delivered; give stragglers a chance, then compare.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let open: i64 = client
            .query_one(
                "SELECT count(*) FROM webhook_outbox WHERE status <> 'delivered'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut got: Vec<String> = rx.received().iter().map(|r| r.webhook_id()).collect();
    got.sort();
    assert_eq!(got, kept, "exactly the surviving events, once each");
    assert!(removed.iter().all(|id| !got.contains(id)));
}

/// Issue 12, point 6: a reorg deeper than CONFIRMATIONS removes a subscription whose events
/// were already delivered. The merchant receives an `event.retracted` webhook for each,
/// naming the removed event and its blocks, and the events list shows them; when the same
/// transaction is mined again on the new branch, its events (same ids) are delivered again
/// instead of being swallowed as duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deep_reorg_retracts_delivered_events_and_redelivers_them_when_they_come_back() {
    use alloy::providers::Provider;
    let Scene {
        chain,
        db,
        client,
        rx,
        merchant,
        plan,
        terms: (merchant_wallet, amount),
        // Bound, so they live to the end of the test.
        _dispatcher: _keep_dispatcher,
        _indexer: _keep_indexer,
        ..
    } = Scene::start(1).await;
    let who: Address = DevChain::address(CUSTOMER);
    chain.mint(who, 100 * USDC).await;
    chainsub_tests::send_as!(who, chain.usdc().approve(chain.manager, U256::MAX));
    chain.mine(2).await;
    let receipt = chainsub_tests::send_as!(
        who,
        chain
            .manager()
            .subscribe(plan, merchant_wallet, amount, B256::ZERO)
    );
    let raw: alloy::primitives::Bytes = chain
        .provider
        .raw_request(
            "eth_getRawTransactionByHash".into(),
            (receipt.transaction_hash,),
        )
        .await
        .expect("the raw subscribe transaction");
    chain.mine(2).await;
    wait_indexed(&client, &chain).await;
    let first = event_ids(&client, 1).await;
    assert_eq!(first.len(), 2, "created + charged");
    for id in &first {
        wait_status(&client, id, "delivered").await;
    }

    // A reorg three blocks deep (CONFIRMATIONS is 1) drops the subscribe transaction.
    let depth = head(&chain).await - receipt.block_number.unwrap() + 1;
    let _: serde_json::Value = chain
        .provider
        .raw_request(
            "anvil_reorg".into(),
            (depth, Vec::<serde_json::Value>::new()),
        )
        .await
        .expect("anvil_reorg");
    assert!(
        chain
            .provider
            .get_transaction_receipt(receipt.transaction_hash)
            .await
            .unwrap()
            .is_none(),
        "the reorg dropped the transaction"
    );
    chain.mine(1).await;
    wait_indexed(&client, &chain).await;
    assert!(
        event_ids(&client, 1).await.is_empty(),
        "the index dropped its events"
    );
    // Each delivered event gets its retraction, delivered like any event.
    let retractions = |rx: &WebhookReceiver| -> Vec<serde_json::Value> {
        rx.received()
            .iter()
            .filter(|d| d.kind == "event.retracted")
            .map(|d| d.json.clone())
            .collect()
    };
    chainsub_tests::wait_until("two retractions delivered", || async {
        retractions(&rx).len() == 2
    })
    .await;
    let got = retractions(&rx);
    let mut named: Vec<String> = got
        .iter()
        .map(|r| {
            r["data"]["retracted"]["eventId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    named.sort();
    assert_eq!(named, first, "each removed event is named: {got:?}");
    for r in &got {
        let x = &r["data"]["retracted"];
        assert_eq!(
            x["blockNumber"],
            receipt.block_number.unwrap() as i64,
            "{r}"
        );
        assert_eq!(
            x["transactionHash"],
            receipt.transaction_hash.to_string(),
            "{r}"
        );
        assert!(
            x["commonAncestor"]["blockNumber"].as_i64().unwrap()
                < x["blockNumber"].as_i64().unwrap()
        );
        assert_ne!(r["id"], x["eventId"], "a retraction has its own id");
        assert!(
            r["data"]["subscriptionId"]
                .as_str()
                .is_some_and(|s| s.starts_with("sub_")),
            "{r}"
        );
    }

    // A subscription's retractions are found by its id even though the reorg had removed
    // the subscription itself (its creation was among the removed events).
    let pool = chainsub_api::db::pool(&db.url, 1).unwrap();
    let conn = pool.get().await.unwrap();
    let sub_id = got[0]["data"]["subscriptionId"]
        .as_str()
        .unwrap()
        .to_string();
    let sub_id = chainsub_core::SubscriptionId::parse(&sub_id).unwrap();
    let of_sub = chainsub_store::events::list(
        &conn,
        &merchant,
        chainsub_core::ChainId::from_db(chain.anvil.chain_id as i64).unwrap(),
        &chainsub_store::events::Filter {
            subscription: Some(&sub_id),
            ..Default::default()
        },
        chainsub_store::Page {
            limit: 100,
            key: None,
            direction: chainsub_store::Direction::Older,
        },
    )
    .await
    .unwrap()
    .0;
    assert_eq!(of_sub.len(), 2, "the two retractions of {sub_id}");
    // The same signed transaction is mined again on the new branch: its events come back
    // with the same ids and are delivered a second time.
    let _: B256 = chain
        .provider
        .raw_request("eth_sendRawTransaction".into(), (raw,))
        .await
        .expect("re-send the subscribe transaction");
    chain.mine(2).await;
    wait_indexed(&client, &chain).await;
    assert_eq!(
        event_ids(&client, 1).await,
        first,
        "the same events are back"
    );
    for id in &first {
        wait_status(&client, id, "delivered").await;
    }
    let delivered = |id: &String| rx.received().iter().filter(|d| &d.id == id).count();
    for id in &first {
        assert_eq!(
            delivered(id),
            2,
            "{id}: before the reorg and after it came back"
        );
    }

    // The events list shows the retractions beside the events (type filter included), and
    // the old rows stay as history, marked retracted.
    let all = chainsub_store::events::list(
        &conn,
        &merchant,
        chainsub_core::ChainId::from_db(chain.anvil.chain_id as i64).unwrap(),
        &chainsub_store::events::Filter::default(),
        chainsub_store::Page {
            limit: 100,
            key: None,
            direction: chainsub_store::Direction::Older,
        },
    )
    .await
    .unwrap()
    .0;
    let kinds: Vec<&str> = all.iter().map(|e| e.kind.as_deref().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "subscription.charged",
            "subscription.created",
            "event.retracted",
            "event.retracted"
        ],
        "newest first"
    );
    let only = chainsub_store::events::list(
        &conn,
        &merchant,
        chainsub_core::ChainId::from_db(chain.anvil.chain_id as i64).unwrap(),
        &chainsub_store::events::Filter {
            kind: Some("event.retracted"),
            ..Default::default()
        },
        chainsub_store::Page {
            limit: 1,
            key: None,
            direction: chainsub_store::Direction::Older,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        (only.0.len(), only.1),
        (1, true),
        "one page of one, more behind"
    );
    let history: i64 = client
        .query_one(
            "SELECT count(*) FROM webhook_outbox WHERE retracted_at IS NOT NULL AND status = 'delivered'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(history, 2);
}

async fn ledger_kinds(client: &Client) -> Vec<String> {
    client
        .query("SELECT kind FROM ledger_entries ORDER BY event_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Issue 40, point 9: a reorg deeper than CONFIRMATIONS that removes a delivered refund and a
/// delivered plan change retracts both like any event, and the index is as if they never
/// happened: the subscription back on its plan and amount, no refund or proration entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deep_reorg_retracts_a_delivered_refund_and_plan_change_and_undoes_them() {
    use alloy::providers::Provider;
    let Scene {
        chain,
        db: _keep_db,
        client,
        rx,
        plan,
        terms: (merchant_wallet, amount),
        _dispatcher: _keep_dispatcher,
        _indexer: _keep_indexer,
        ..
    } = Scene::start(1).await;
    chainsub_tests::send_as!(
        DevChain::address(OPERATOR),
        chain
            .manager()
            .createPlan(merchant_wallet, U256::from(10 * USDC), B256::repeat_byte(8))
    );
    let who: Address = DevChain::address(CUSTOMER);
    chain.mint(who, 100 * USDC).await;
    chain.mint(merchant_wallet, 100 * USDC).await;
    chainsub_tests::send_as!(who, chain.usdc().approve(chain.manager, U256::MAX));
    chainsub_tests::send_as!(
        merchant_wallet,
        chain.usdc().approve(chain.manager, U256::MAX)
    );
    chainsub_tests::send_as!(
        who,
        chain
            .manager()
            .subscribe(plan, merchant_wallet, amount, B256::ZERO)
    );
    chain.mine(2).await;
    wait_indexed(&client, &chain).await;
    let kept = event_ids(&client, 1).await;
    let refund = chainsub_tests::send_as!(
        merchant_wallet,
        chain
            .manager()
            .refund(U256::from(1), 1, U256::from(USDC), false)
    );
    chainsub_tests::send_as!(
        who,
        chain.manager().changePlan(
            U256::from(1),
            U256::from(2),
            merchant_wallet,
            U256::from(10 * USDC)
        )
    );
    chain.mine(2).await;
    wait_indexed(&client, &chain).await;
    let all = event_ids(&client, 1).await;
    assert_eq!(all.len(), 4, "created, charged, refunded, plan changed");
    for id in &all {
        wait_status(&client, id, "delivered").await;
    }
    let removed: Vec<String> = all
        .iter()
        .filter(|id| !kept.contains(id))
        .cloned()
        .collect();
    assert_eq!(
        ledger_kinds(&client).await,
        ["charge", "refund", "proration"]
    );

    // The reorg drops the refund and the plan change (the subscription stays).
    let depth = head(&chain).await - refund.block_number.unwrap() + 1;
    let _: serde_json::Value = chain
        .provider
        .raw_request(
            "anvil_reorg".into(),
            (depth, Vec::<serde_json::Value>::new()),
        )
        .await
        .expect("anvil_reorg");
    chain.mine(1).await;
    wait_indexed(&client, &chain).await;
    assert_eq!(event_ids(&client, 1).await, kept, "the index dropped both");
    assert_eq!(
        ledger_kinds(&client).await,
        ["charge"],
        "no refund, no proration"
    );
    let row = client
        .query_one(
            "SELECT plan_onchain_id, amount::text FROM subscriptions WHERE onchain_id = 1",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, String>(1)),
        (1, (5 * USDC).to_string()),
        "back on its plan and amount"
    );
    chainsub_tests::wait_until("two retractions delivered", || async {
        rx.received()
            .iter()
            .filter(|d| d.kind == "event.retracted")
            .count()
            == 2
    })
    .await;
    let mut named: Vec<(String, String)> = rx
        .received()
        .iter()
        .filter(|d| d.kind == "event.retracted")
        .map(|d| {
            let x = &d.json["data"]["retracted"];
            (
                x["eventId"].as_str().unwrap().to_string(),
                x["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    named.sort();
    let mut want: Vec<(String, String)> = removed
        .iter()
        .map(|id| {
            let kind = rx
                .received()
                .iter()
                .find(|d| &d.id == id)
                .map(|d| d.kind.clone())
                .unwrap();
            (id.clone(), kind)
        })
        .collect();
    want.sort();
    assert_eq!(named, want);
    let kinds: Vec<&str> = want.iter().map(|(_, k)| k.as_str()).collect();
    assert!(
        kinds.contains(&"subscription.refunded") && kinds.contains(&"subscription.plan_changed"),
        "{kinds:?}"
    );
}
