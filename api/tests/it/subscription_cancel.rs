//! A merchant cancels through the API (issue 14, point 2): `POST
//! /api/v1/subscriptions/{id}/cancel` sends the transaction with the relayer (the operator,
//! which the contract lets act on plans it created), answers 202 with the pending state, and
//! the lifecycle events arrive through `/events` and signed webhooks from the chain. Real
//! anvil, the real `indexer` binary, the API and a dispatcher in process, a verifying
//! receiver.

use crate::api_common::{App, Opts, api_process, spawn, spawn_indexer, spawn_indexer_on};
use crate::webhooks_common::{WebhookReceiver, fast_config, set_url, spawn_dispatcher};
use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use chainsub_core::CancelAt;
use chainsub_tests::DevChain;
use chainsub_tests::TestDb;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT, MERCHANT_B, OPERATOR};
use chainsub_tests::merchant::ApiClient;
use chainsub_tests::send_as;
use serde_json::{Value, json};

/// The dev chain's id (anvil's default).
const DEV_CHAIN: chainsub_core::ChainId = chainsub_core::ChainId::new(31337).expect("a chain id");

const CONFIRMATIONS: u64 = 2;
const PRICE: u64 = 9_990_000;

async fn subscribe(app: &App, customer: Address, plan: U256) {
    subscribe_on(app.chain.as_ref().unwrap(), customer, plan).await;
}

async fn subscribe_on(chain: &DevChain, customer: Address, plan: U256) {
    chain.mint(customer, 10 * PRICE).await;
    send_as!(customer, chain.usdc().approve(chain.manager, U256::MAX));
    send_as!(
        customer,
        chain.manager().subscribe(
            plan,
            DevChain::address(MERCHANT),
            U256::from(PRICE),
            B256::repeat_byte(0xcc)
        )
    );
    chain.mine(CONFIRMATIONS).await;
}

/// The merchant's subscriptions as listed, once the index has `n` of them.
async fn listed(app: &App, key: &str, n: usize) -> Vec<Value> {
    chainsub_tests::wait_for_some("the subscriptions indexed", || async {
        let r = app.get("/api/v1/subscriptions", key).await;
        let out = r.body["data"].as_array().cloned().unwrap_or_default();
        (out.len() >= n).then_some(out)
    })
    .await
}

/// Waits until the subscription `id` satisfies `ok`; returns it.
async fn wait_for(app: &App, key: &str, id: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let chain = app.chain.as_ref().unwrap();
    chainsub_tests::wait_for_some("the subscription's new state indexed", || async {
        chain.mine(1).await;
        let now = app
            .get(&format!("/api/v1/subscriptions/{id}"), key)
            .await
            .body;
        ok(&now).then_some(now)
    })
    .await
}

/// Waits until subscription 1 is cancelled on chain (status 3, `Cancelled`).
async fn wait_cancelled_on_chain(chain: &DevChain, what: &str) {
    chainsub_tests::wait_until(what, || async {
        let s = chain
            .manager()
            .getSubscription(U256::from(1))
            .call()
            .await
            .unwrap();
        s.status == 3
    })
    .await;
}

/// The merchant's event of `kind` for `id` in `/events`, once listed.
async fn event(app: &App, key: &str, id: &str, kind: &str) -> Value {
    chainsub_tests::wait_for_some("the lifecycle event listed", || async {
        let r = app.get("/api/v1/events?limit=100", key).await;
        r.body["data"].as_array().and_then(|d| {
            d.iter()
                .find(|e| e["type"] == kind && e["data"]["subscriptionId"] == id)
                .cloned()
        })
    })
    .await
}

/// The API (with chain and relayer) and the merchant's key.
async fn app_and_key() -> (App, String) {
    app_and_key_with(Vec::new()).await
}

/// [`app_and_key`] with extra server flags.
async fn app_and_key_with(args: Vec<String>) -> (App, String) {
    let app = spawn(Opts {
        chain: true,
        confirmations: Some(CONFIRMATIONS),
        args,
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    (app, key)
}

/// An API (with chain, relayer and indexer; extra server flags `args`), the merchant's key,
/// CUSTOMER's indexed subscription to a plan created through the API, its cancel path, and
/// the relayer's nonce before any cancellation.
struct Cancelling {
    app: App,
    key: String,
    path: String,
    before: u64,
    _indexer: chainsub_tests::ChildGuard,
}

impl Cancelling {
    async fn new(args: Vec<String>) -> Self {
        let (app, key) = app_and_key_with(args).await;
        let _indexer = spawn_indexer(&app, CONFIRMATIONS);
        let id = api_plan_and_subscription(&app, &key).await;
        let before = relayer_nonce(app.chain.as_ref().unwrap()).await;
        Self {
            path: format!("/api/v1/subscriptions/{id}/cancel"),
            app,
            key,
            before,
            _indexer,
        }
    }

    fn chain(&self) -> &DevChain {
        self.app.chain.as_ref().unwrap()
    }
}

/// A plan created through the API (so by the operator), CUSTOMER subscribed on chain, and the
/// subscription's id once indexed.
async fn api_plan_and_subscription(app: &App, key: &str) -> String {
    let plan = app.monthly_plan(key, "Pro").await;
    assert_eq!(plan.body["status"], "active", "{:?}", plan.body);
    subscribe(app, DevChain::address(CUSTOMER), U256::from(1)).await;
    listed(app, key, 1).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn code(r: &chainsub_tests::merchant::Res) -> (u16, Option<&str>) {
    (r.status, r.body["error"]["code"].as_str())
}

/// The relayer's next nonce counting the node's pool: how many transactions it has sent.
async fn relayer_nonce(chain: &DevChain) -> u64 {
    chain
        .provider
        .get_transaction_count(DevChain::address(OPERATOR))
        .pending()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merchant_cancels_at_period_end_then_at_once_and_the_events_come_from_the_chain() {
    let (app, key) = app_and_key().await;
    let other = app.merchant_key(DevChain::address(MERCHANT_B)).await;
    let rx = WebhookReceiver::ok().await;
    let mut pg = app.db().await;
    let scope = chainsub_api::merchants::find_or_create(&pg, DevChain::address(MERCHANT))
        .await
        .unwrap();
    set_url(&mut pg, &scope, &rx.url()).await;
    let secret = chainsub_api::webhook_settings::reveal_secrets(
        &mut pg,
        &chainsub_tests::test_sealing_keys(),
        &scope,
    )
    .await
    .unwrap()[0]
        .secret
        .expose()
        .to_string();
    let _dispatcher = spawn_dispatcher(&app.db.url, fast_config("0s,10ms"));
    let _indexer = spawn_indexer(&app, CONFIRMATIONS);
    let id = api_plan_and_subscription(&app, &key).await;
    let path = format!("/api/v1/subscriptions/{id}/cancel");

    // Bad bodies change nothing.
    for bad in [
        json!({}),
        json!({"atPeriodEnd": "yes"}),
        json!({"atPeriodEnd": true, "x": 1}),
    ] {
        let r = app.post(&path, &key, &bad, None).await;
        assert_eq!(r.status, 400, "{bad}: {:?}", r.body);
    }
    // Another merchant's key, or an unknown id: 404, nothing sent.
    let r = app
        .post(&path, &other, &json!({"atPeriodEnd": true}), None)
        .await;
    assert_eq!(code(&r), (404, Some("resource_missing")), "{:?}", r.body);
    let unknown = "/api/v1/subscriptions/sub_00000000000000000000000000000000/cancel";
    let r = app
        .post(unknown, &key, &json!({"atPeriodEnd": true}), None)
        .await;
    assert_eq!(r.status, 404, "{:?}", r.body);

    // At period end: 202 with the pending state.
    let chain = app.chain.as_ref().unwrap();
    let nonce_before = relayer_nonce(chain).await;
    let first = app
        .post(&path, &key, &json!({"atPeriodEnd": true}), Some("cancel-1"))
        .await;
    assert_eq!(first.status, 202, "{:?}", first.body);
    assert_eq!(first.body["object"], "subscription_cancellation");
    assert_eq!(first.body["status"], "pending");
    assert_eq!(first.body["atPeriodEnd"], true);
    assert_eq!(first.body["subscriptionId"], id.as_str());
    assert_eq!(first.body["subscription"]["id"], id.as_str());
    let tx = first.body["transactionHash"].as_str().unwrap().to_string();
    // The same key replays the same answer; the same key for another request is refused.
    let replay = app
        .post(&path, &key, &json!({"atPeriodEnd": true}), Some("cancel-1"))
        .await;
    // The same key replays the answer: the same pending state, or — when the index has seen
    // the cancellation in between — its completion, naming the same transaction.
    // A pending answer is asked again, not copied: the subscription in it is as it now is
    // (its confirmations grow with every block); the cancellation is the same.
    if replay.status == 202 {
        for field in [
            "status",
            "transactionHash",
            "requestedAt",
            "atPeriodEnd",
            "subscriptionId",
        ] {
            assert_eq!(replay.body[field], first.body[field], "{field}");
        }
        assert_eq!(replay.body["subscription"]["id"], id.as_str());
    } else {
        assert_eq!(replay.status, 200, "{:?}", replay.body);
        assert_eq!(replay.body["status"], "completed");
        assert_eq!(replay.body["transactionHash"], tx.as_str());
    }
    let reused = app
        .post(
            &path,
            &key,
            &json!({"atPeriodEnd": false}),
            Some("cancel-1"),
        )
        .await;
    assert_eq!(code(&reused), (409, Some("idempotency_key_reused")));
    // Asked again without a key: the same transaction (202) or, once the index saw it, 409 —
    // never a second transaction.
    let again = app
        .post(&path, &key, &json!({"atPeriodEnd": true}), None)
        .await;
    if again.status == 202 {
        assert_eq!(again.body["transactionHash"], tx.as_str());
    } else {
        assert_eq!(code(&again), (409, Some("subscription_already_cancelling")));
    }
    assert_eq!(
        relayer_nonce(chain).await,
        nonce_before + 1,
        "one transaction"
    );

    // The chain's event, through the index: the subscription, and /events naming the tx.
    let now = wait_for(&app, &key, &id, |s| s["cancelAtPeriodEnd"] == true).await;
    assert_eq!(now["status"], "active");
    let e = event(&app, &key, &id, "subscription.cancel_at_period_end_set").await;
    assert_eq!(e["chain"]["transactionHash"], tx.as_str(), "{e}");
    let r = app
        .post(&path, &key, &json!({"atPeriodEnd": true}), None)
        .await;
    assert_eq!(code(&r), (409, Some("subscription_already_cancelling")));

    // At once, after asking for period end: allowed, then terminal.
    let now_req = app
        .post(&path, &key, &json!({"atPeriodEnd": false}), None)
        .await;
    assert_eq!(now_req.status, 202, "{:?}", now_req.body);
    let tx2 = now_req.body["transactionHash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(tx2, tx);
    assert_eq!(relayer_nonce(chain).await, nonce_before + 2);
    let now = wait_for(&app, &key, &id, |s| s["status"] == "cancelled").await;
    assert_eq!(now["status"], "cancelled");
    let e = event(&app, &key, &id, "subscription.cancelled").await;
    assert_eq!(e["chain"]["transactionHash"], tx2.as_str(), "{e}");
    for at_period_end in [true, false] {
        let r = app
            .post(&path, &key, &json!({"atPeriodEnd": at_period_end}), None)
            .await;
        assert_eq!(
            code(&r),
            (409, Some("subscription_terminal")),
            "{:?}",
            r.body
        );
    }
    assert_eq!(
        relayer_nonce(chain).await,
        nonce_before + 2,
        "refusals send nothing"
    );
    // The same two events reached the merchant's endpoint, signed, naming the transactions.
    let wh = standardwebhooks::Webhook::new(&secret).unwrap();
    rx.wait_until("both cancellation webhooks", |got| {
        [
            "subscription.cancel_at_period_end_set",
            "subscription.cancelled",
        ]
        .iter()
        .all(|k| got.iter().any(|d| d.kind == *k))
    })
    .await;
    for (kind, hash) in [
        ("subscription.cancel_at_period_end_set", &tx),
        ("subscription.cancelled", &tx2),
    ] {
        let got = rx.received();
        let d = got.iter().find(|d| d.kind == kind).unwrap();
        wh.verify(&d.body, &d.headers).expect("signature verifies");
        assert_eq!(d.json["chain"]["transactionHash"], hash.as_str());
        assert_eq!(d.json["data"]["subscriptionId"], id.as_str());
    }

    // One transaction per request, journaled.
    let rows: Vec<(bool, String, Vec<u8>)> = app
        .db()
        .await
        .query(
            "SELECT at_period_end, status, tx_hash FROM subscription_cancellations ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let hex = |b: &Vec<u8>| format!("0x{}", alloy::hex::encode(b));
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        (rows[0].0, rows[0].1.as_str(), hex(&rows[0].2)),
        (true, "submitted", tx.clone())
    );
    assert_eq!(
        (rows[1].0, rows[1].1.as_str(), hex(&rows[1].2)),
        (false, "submitted", tx2)
    );
}

/// A plan the merchant created from its own wallet is out of the operator's reach: 409, and
/// the request is closed so nothing stays pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_to_a_plan_the_merchant_created_itself_is_not_cancellable_by_the_service() {
    let (app, key) = app_and_key().await;
    let _indexer = spawn_indexer(&app, CONFIRMATIONS);
    let chain = app.chain.as_ref().unwrap();
    let merchant = DevChain::address(MERCHANT);
    send_as!(
        merchant,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(0x42))
    );
    subscribe(&app, DevChain::address(CUSTOMER_B), U256::from(1)).await;
    let sub = listed(&app, &key, 1).await.remove(0);
    let id = sub["id"].as_str().unwrap();

    let r = app
        .post(
            &format!("/api/v1/subscriptions/{id}/cancel"),
            &key,
            &json!({"atPeriodEnd": false}),
            None,
        )
        .await;
    assert_eq!(
        code(&r),
        (409, Some("subscription_not_cancellable")),
        "{:?}",
        r.body
    );
    let statuses: Vec<String> = app
        .db()
        .await
        .query("SELECT status FROM subscription_cancellations", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(statuses, ["failed"]);
    let rec = chain
        .manager()
        .getSubscription(U256::from(1))
        .call()
        .await
        .unwrap();
    assert!(!rec.cancelAtPeriodEnd);
    assert_eq!(rec.status, 1, "still active");
}

/// Concurrent requests for the same cancellation send one transaction: every answer is that
/// transaction's 202 or a "retry shortly" 409, and the relayer's nonce moves by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_send_one_transaction() {
    let c = Cancelling::new(Vec::new()).await;
    let (app, key, path, chain) = (&c.app, &c.key, &c.path, c.chain());
    let body = json!({"atPeriodEnd": false});
    let answers = futures::future::join_all((0..6).map(|_| app.post(path, key, &body, None))).await;
    let mut hashes = std::collections::BTreeSet::new();
    for r in &answers {
        match r.status {
            202 => {
                hashes.insert(r.body["transactionHash"].as_str().unwrap().to_string());
            }
            _ => assert!(
                matches!(
                    code(r),
                    (
                        409,
                        Some("cancellation_in_progress" | "subscription_terminal")
                    )
                ),
                "{:?}",
                r.body
            ),
        }
    }
    assert_eq!(hashes.len(), 1, "one transaction answered: {answers:?}");
    assert_eq!(
        relayer_nonce(chain).await,
        c.before + 1,
        "one transaction sent"
    );
}

/// Two requests for one cancellation, the first paused between journaling its transaction and
/// broadcasting it (test fail points): the second finds the journaled transaction unmined and
/// sends its bytes again. Both answer that one transaction, and the relayer's nonce moves by one.
async fn two_requests_across_a_paused_broadcast(fail_points: &str) {
    let c = Cancelling::new(vec!["--fail-point".into(), fail_points.into()]).await;
    let (app, key, path, chain) = (&c.app, &c.key, &c.path, c.chain());
    let body = json!({"atPeriodEnd": false});
    let db = app.db().await;
    let second = async {
        chainsub_tests::wait_until("the first request to journal its transaction", || async {
            db.query_one(
                "SELECT count(*) FROM subscription_cancellations WHERE tx_hash IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
                == 1
        })
        .await;
        app.post(path, key, &body, None).await
    };
    let (first, second) = tokio::join!(app.post(path, key, &body, None), second);
    for r in [&first, &second] {
        assert_eq!(r.status, 202, "{:?}", r.body);
    }
    assert_eq!(
        first.body["transactionHash"], second.body["transactionHash"],
        "one transaction answered"
    );
    assert_eq!(
        relayer_nonce(chain).await,
        c.before + 1,
        "one transaction sent"
    );
    wait_cancelled_on_chain(chain, "the cancellation").await;
}

/// The second request's re-broadcast is mined before the first request broadcasts: the first
/// meets a used nonce, and the transaction using it is its own — it must not sign another.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_whose_journaled_transaction_another_sent_does_not_send_a_second() {
    two_requests_across_a_paused_broadcast("relayer-pause-after-journal").await;
}

/// The first request's broadcast is mined while the second is about to send the same bytes
/// again: the second meets a used nonce — its transaction was mined, not a chain outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebroadcast_that_finds_its_transaction_mined_answers_it() {
    two_requests_across_a_paused_broadcast(
        "relayer-pause-after-journal,relayer-pause-before-rebroadcast",
    )
    .await;
}

/// A subscription to a plan the operator created, indexed, whose cancellation an API
/// process journaled and then died before broadcasting (fail point `relayer-after-journal`).
struct Crashed {
    db: TestDb,
    chain: DevChain,
    client: tokio_postgres::Client,
    key: String,
    /// `/api/v1/subscriptions/{id}/cancel`.
    path: String,
    /// The relayer's nonce before anything was sent.
    before: u64,
    /// The journaled transaction's hash.
    journaled: String,
    _indexer: chainsub_tests::ChildGuard,
}

impl Crashed {
    async fn new(at_period_end: bool) -> Self {
        let db = TestDb::create().await;
        let chain = DevChain::start().await;
        let merchant = DevChain::address(MERCHANT);
        send_as!(
            DevChain::address(OPERATOR),
            chain
                .manager()
                .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(0x33))
        );
        subscribe_on(&chain, DevChain::address(CUSTOMER), U256::from(1)).await;
        let mut client = db.connect().await;
        let (_, key) = chainsub_api::auth::api_key::admin_create_key(&mut client, merchant)
            .await
            .unwrap();
        let key = key.expose().to_string();
        let indexer = spawn_indexer_on(&chain, &db, CONFIRMATIONS);
        let before = relayer_nonce(&chain).await;

        let socket = chainsub_tests::Reserved::new();
        let mut dying = api_process(
            &db,
            &chain,
            &socket,
            &[("API_FAIL_POINT", "relayer-after-journal")],
        );
        let api = ApiClient::new(&socket.url());
        chainsub_tests::wait_until("the api to answer", || async { api.healthy().await }).await;
        let id = chainsub_tests::wait_for_some("the subscription indexed", || async {
            let r = api.get_res("/api/v1/subscriptions", &key).await.ok()?;
            r.body["data"][0]["id"].as_str().map(str::to_string)
        })
        .await;
        let path = format!("/api/v1/subscriptions/{id}/cancel");
        let died = api
            .post_res(&path, &key, &json!({"atPeriodEnd": at_period_end}), None)
            .await;
        assert!(died.is_err(), "the request dies with the process: {died:?}");
        let status = tokio::task::spawn_blocking(move || dying.0.wait().unwrap())
            .await
            .unwrap();
        assert!(!status.success());
        assert_eq!(
            relayer_nonce(&chain).await,
            before,
            "nothing reached the node"
        );
        let journaled: Vec<u8> = client
            .query_one(
                "SELECT tx_hash FROM subscription_cancellations WHERE status = 'submitted'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        Self {
            db,
            chain,
            client,
            key,
            path,
            before,
            journaled: format!("0x{}", alloy::hex::encode(journaled)),
            _indexer: indexer,
        }
    }

    /// A fresh API process over the same database and chain, once it answers.
    async fn restart(&self) -> (ApiClient, chainsub_tests::ChildGuard) {
        let socket = chainsub_tests::Reserved::new();
        let api = ApiClient::new(&socket.url());
        let process = api_process(&self.db, &self.chain, &socket, &[]);
        chainsub_tests::wait_until("the restarted api", || async { api.healthy().await }).await;
        (api, process)
    }
}

/// The API dies right after journaling the signed cancellation and before broadcasting it.
/// After the restart, asking again sends the journaled bytes — the same transaction, same
/// nonce — and the subscription is cancelled on chain: nothing lost, nothing doubled.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_that_dies_between_journal_and_broadcast_sends_the_same_cancellation_again() {
    let fx = Crashed::new(false).await;
    let (api, _restarted) = fx.restart().await;
    let r = api
        .post_res(&fx.path, &fx.key, &json!({"atPeriodEnd": false}), None)
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{:?}", r.body);
    assert_eq!(r.body["transactionHash"], fx.journaled.as_str());
    assert_eq!(
        relayer_nonce(&fx.chain).await,
        fx.before + 1,
        "one transaction"
    );
    wait_cancelled_on_chain(&fx.chain, "the cancellation mined").await;
}

/// A request whose row another request took over (it was `sending` past the abandonment
/// time) can no longer journal — so it never broadcasts — and a replacement journals only
/// over the transaction it replaces; a refused replacement puts the earlier one back; a row
/// is closed only while it still names what its closer judged.
#[tokio::test]
async fn a_taken_over_request_cannot_journal_and_a_refused_replacement_is_undone() {
    use chainsub_store::cancellations::{self as store, JournaledTx};
    let db = TestDb::create().await;
    let pool = db.pool();
    let client = pool.get().await.unwrap();
    let scope = chainsub_api::merchants::find_or_create(&**client, DevChain::address(MERCHANT))
        .await
        .unwrap();
    let tx = |b: u8, nonce: u64| JournaledTx {
        hash: B256::repeat_byte(b),
        nonce,
        max_fee_per_gas: 10,
        priority_fee_per_gas: 1,
        raw: vec![b; 3],
    };
    let slow = store::insert(&client, &scope, DEV_CHAIN, 7, "sub_x", CancelAt::Now)
        .await
        .unwrap()
        .unwrap();
    // A concurrent request for the same cancellation gets nothing to send.
    assert!(
        store::insert(&client, &scope, DEV_CHAIN, 7, "sub_x", CancelAt::Now)
            .await
            .unwrap()
            .is_none()
    );
    // The next request closes the abandoned row and starts its own.
    store::fail(&client, &scope, slow.row_id, "abandoned before signing")
        .await
        .unwrap();
    let next = store::insert(&client, &scope, DEV_CHAIN, 7, "sub_x", CancelAt::Now)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store::journal_send(&client, &scope, next.row_id, &tx(1, 5), None)
            .await
            .unwrap()
    );
    // The slow request wakes up: it may not journal (so it never broadcasts).
    assert!(
        !store::journal_send(&client, &scope, slow.row_id, &tx(2, 6), None)
            .await
            .unwrap()
    );
    // Nor may anyone journal over a transaction it does not replace.
    assert!(
        !store::journal_send(
            &client,
            &scope,
            next.row_id,
            &tx(3, 5),
            Some(B256::repeat_byte(9))
        )
        .await
        .unwrap()
    );
    // A replacement journals over the one it replaces; refused by the node, it is undone.
    assert!(
        store::journal_send(
            &client,
            &scope,
            next.row_id,
            &tx(4, 5),
            Some(B256::repeat_byte(1))
        )
        .await
        .unwrap()
    );
    store::restore(
        &client,
        &scope,
        next.row_id,
        B256::repeat_byte(4),
        &tx(1, 5),
    )
    .await
    .unwrap();
    let live = store::live(&client, &scope, DEV_CHAIN, 7, CancelAt::Now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(live.row_id, next.row_id);
    assert_eq!(live.tx, Some(tx(1, 5)));
    assert_eq!(live.sends, 2);
    // Another request judged an older transaction dead, or the row abandoned while `sending`:
    // the row has moved on, so it is not closed (no second request beside a live one).
    for dead in [Some(B256::repeat_byte(4)), None] {
        assert!(
            !store::fail_if(&client, &scope, next.row_id, dead, "never mined")
                .await
                .unwrap()
        );
    }
    assert!(
        store::fail_if(
            &client,
            &scope,
            next.row_id,
            Some(B256::repeat_byte(1)),
            "never mined"
        )
        .await
        .unwrap()
    );
    assert!(
        store::live(&client, &scope, DEV_CHAIN, 7, CancelAt::Now)
            .await
            .unwrap()
            .is_none()
    );
}

/// The API dies between journal and broadcast, and the merchant never asks again: the
/// restarted API's re-driver sends the journaled bytes on its own, the subscription is
/// cancelled on chain with that one transaction, and the row is settled as mined.
#[tokio::test(flavor = "multi_thread")]
async fn a_journaled_cancellation_nobody_asks_for_again_is_sent_by_the_redriver() {
    let fx = Crashed::new(true).await;
    let _restarted = fx.restart().await;
    chainsub_tests::wait_until("the re-driver sends the journaled cancellation", || async {
        let manager = fx.chain.manager();
        let sub = manager.getSubscription(U256::from(1)).call().await.unwrap();
        sub.cancelAtPeriodEnd
    })
    .await;
    assert_eq!(
        relayer_nonce(&fx.chain).await,
        fx.before + 1,
        "one transaction"
    );
    chainsub_tests::wait_until("the row settled as mined", || async {
        let rows = fx
            .client
            .query(
                "SELECT status, tx_hash FROM subscription_cancellations",
                &[],
            )
            .await
            .unwrap();
        let got: Vec<(String, String)> = rows
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    format!("0x{}", alloy::hex::encode(r.get::<_, Vec<u8>>(1))),
                )
            })
            .collect();
        got == [("mined".to_string(), fx.journaled.clone())]
    })
    .await;
}

/// The API dies between journal and broadcast, and before anything re-sends the journaled
/// bytes, another relayer transaction takes their nonce: the cancellation can never be mined.
/// The re-driver says so (the row `failed` with the reason, `api_cancellations_dead_total`,
/// an error log), and the merchant's next request sends a new transaction that cancels.
#[tokio::test(flavor = "multi_thread")]
async fn a_journaled_cancellation_whose_nonce_was_taken_is_reported_and_asked_again() {
    let fx = Crashed::new(false).await;
    // The relayer's key sends something else at that nonce.
    send_as!(
        DevChain::address(OPERATOR),
        fx.chain.manager().createPlan(
            DevChain::address(MERCHANT),
            U256::from(PRICE),
            B256::repeat_byte(0x77)
        )
    );
    assert_eq!(relayer_nonce(&fx.chain).await, fx.before + 1);
    let (api, _restarted) = fx.restart().await;
    chainsub_tests::wait_until("the re-driver reports the dead cancellation", || async {
        let row = fx
            .client
            .query_one("SELECT status, error FROM subscription_cancellations", &[])
            .await
            .unwrap();
        row.get::<_, String>(0) == "failed"
            && row.get::<_, Option<String>>(1).as_deref()
                == Some(chainsub_api::relayer::redrive::DEAD)
    })
    .await;
    let manager = fx.chain.manager();
    assert_eq!(
        manager
            .getSubscription(U256::from(1))
            .call()
            .await
            .unwrap()
            .status,
        1,
        "still active"
    );
    let r = api
        .post_res(&fx.path, &fx.key, &json!({"atPeriodEnd": false}), None)
        .await
        .unwrap();
    assert_eq!(r.status, 202, "{:?}", r.body);
    assert_ne!(r.body["transactionHash"], fx.journaled.as_str());
    wait_cancelled_on_chain(&fx.chain, "the new cancellation mined").await;
}

/// Issue 46, point 11: a `202` stored under an `Idempotency-Key` was replayed for a day even
/// after its transaction died (its nonce taken by another), so a merchant retrying with the
/// key was told "pending" about a cancellation that could never happen. A replay of a
/// pending cancellation now runs the request again: it reports the live transaction, or
/// sends a new one when the first is dead; once the cancellation is on chain and indexed, a
/// replay answers 200 `completed` with the subscription as it now is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_pending_cancellation_reports_where_it_stands() {
    let fx = Cancelling::new(Vec::new()).await;
    let chain = fx.chain();
    let body = json!({"atPeriodEnd": false});
    let _: Value = chain
        .provider
        .raw_request("evm_setAutomine".into(), (false,))
        .await
        .unwrap();
    let first = fx
        .app
        .post(&fx.path, &fx.key, &body, Some("cancel-1"))
        .await;
    assert_eq!(first.status, 202, "{:?}", first.body);
    let dead = first.body["transactionHash"].as_str().unwrap().to_string();
    // The transaction leaves the pool and another relayer transaction takes its nonce.
    let _: Value = chain
        .provider
        .raw_request("anvil_dropTransaction".into(), (dead.clone(),))
        .await
        .unwrap();
    let _: Value = chain
        .provider
        .raw_request("evm_setAutomine".into(), (true,))
        .await
        .unwrap();
    send_as!(
        DevChain::address(OPERATOR),
        chain.manager().createPlan(
            DevChain::address(MERCHANT),
            U256::from(PRICE),
            B256::repeat_byte(0x78)
        )
    );

    // The same request with the same key: not the stored "pending" of a dead transaction.
    let again = fx
        .app
        .post(&fx.path, &fx.key, &body, Some("cancel-1"))
        .await;
    assert_eq!(again.status, 202, "{:?}", again.body);
    assert_eq!(again.body["status"], "pending");
    assert_ne!(
        again.body["transactionHash"],
        dead.as_str(),
        "a new transaction"
    );
    wait_cancelled_on_chain(chain, "the new cancellation mined").await;
    let id = again.body["subscriptionId"].as_str().unwrap().to_string();
    wait_for(&fx.app, &fx.key, &id, |s| s["status"] == "cancelled").await;

    // Once indexed, the replay says it is done.
    let done = fx
        .app
        .post(&fx.path, &fx.key, &body, Some("cancel-1"))
        .await;
    assert_eq!(done.status, 200, "{:?}", done.body);
    assert_eq!(done.body["status"], "completed");
    assert_eq!(done.body["transactionHash"], again.body["transactionHash"]);
    assert_eq!(done.body["subscription"]["status"], "cancelled");
    // Another request for it (no key) is still refused as terminal.
    let other = fx.app.post(&fx.path, &fx.key, &body, None).await;
    assert_eq!(code(&other), (409, Some("subscription_terminal")));
}
