//! The store's statements against a real, migrated Postgres database.

use chainsub_store::{events, plans, subscriptions};
use chainsub_tests::TestDb;

/// The chain these tests write rows of.
const CHAIN: chainsub_core::ChainId = chainsub_core::ChainId::new(1).expect("a chain id");

/// Every list statement pages by an index condition on its key even under a generic plan
/// (Postgres switches a prepared statement to one after five executions): otherwise each
/// `startingAfter` page reads every newer row of the merchant, and walking a list is
/// quadratic. `($n IS NULL OR key < $n)` fails this; `key < COALESCE($n, max)` passes.
#[tokio::test]
async fn every_list_statement_pages_by_an_index_condition_under_a_generic_plan() {
    let db = TestDb::create().await;
    let c = db.connect().await;
    // Plan shapes, not costs: on empty tables the planner would scan sequentially anyway.
    c.batch_execute("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off")
        .await
        .unwrap();
    let all = [
        ("subscriptions", subscriptions::list_statements()),
        ("events", events::list_statements()),
        ("plans", plans::list_statements()),
    ];
    let mut checked = 0;
    for (name, texts) in all {
        for (i, text) in texts.into_iter().enumerate() {
            let params = (1..=20)
                .take_while(|n| text.contains(&format!("${n}")))
                .count();
            c.batch_execute(&format!("DEALLOCATE ALL; PREPARE q AS {text}"))
                .await
                .unwrap_or_else(|e| panic!("{name}[{i}]: {e}\n{text}"));
            let nulls = vec!["NULL"; params].join(", ");
            let plan: Vec<String> = c
                .query(&format!("EXPLAIN EXECUTE q({nulls})"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            // The cursor comparison of this statement, as the plan prints it.
            let cursor = if let Some(at) = text.find("COALESCE($") {
                let n: String = text[at + 10..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                format!("COALESCE(${n}")
            } else {
                let at = text.find(" > $").expect("a keyset comparison");
                let n: String = text[at + 4..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                format!("> ${n}")
            };
            // Every table the statement bounds by the cursor (the events statements bound
            // three) must find it by index.
            let bounded = text.matches(&cursor).count();
            let served = plan
                .iter()
                .filter(|l| l.contains("Index Cond") && l.contains(&cursor))
                .count();
            assert!(
                served >= bounded,
                "{name}[{i}]: the cursor `{cursor}` bounds {bounded} scans but is an index \
                 condition of {served}:\n{}",
                plan.join("\n")
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 8 + 12 + 2);
    // A fixed set: distinct texts, each scoped, with its page size as a parameter.
    let texts: Vec<&str> = [
        subscriptions::list_statements(),
        events::list_statements(),
        plans::list_statements(),
    ]
    .concat();
    let distinct: std::collections::HashSet<_> = texts.iter().collect();
    assert_eq!(distinct.len(), texts.len());
    for t in texts {
        assert!(
            t.contains("merchant_wallet = $") || t.contains("merchant_id = $1"),
            "{t}"
        );
        assert!(
            t.contains(" DESC LIMIT $") || t.contains(" ASC LIMIT $"),
            "{t}"
        );
    }
}

/// Issue 10, point 7: every binary connects through `store::pg`, which honours libpq's
/// `sslmode` with rustls. Against the local cluster (Debian turns TLS on with a self-signed
/// certificate for `localhost`, `/etc/ssl/certs/ssl-cert-snakeoil.pem`).
#[tokio::test]
async fn database_urls_connect_with_the_tls_their_sslmode_asks_for() {
    use chainsub_store::pg::{Database, TlsMode};

    let admin = chainsub_tests::db::admin_url();
    let plain = chainsub_tests::db::connect(&admin).await;
    let ssl_on: String = plain.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    assert_eq!(ssl_on, "on", "this test needs the cluster's TLS (ssl = on)");
    let ca = "/etc/ssl/certs/ssl-cert-snakeoil.pem";

    let with = |host: &str, query: &str| {
        let mut u = url::Url::parse(&admin).unwrap();
        u.set_host(Some(host)).unwrap();
        u.set_query(if query.is_empty() { None } else { Some(query) });
        u.to_string()
    };
    let encrypted = |db: Database| async move {
        let c = db.connect().await?;
        let row = c
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await?;
        Ok::<bool, tokio_postgres::Error>(row.get(0))
    };

    let cases = [
        (
            with("127.0.0.1", "sslmode=disable"),
            TlsMode::Disable,
            false,
        ),
        (with("127.0.0.1", ""), TlsMode::Prefer, true),
        (with("127.0.0.1", "sslmode=prefer"), TlsMode::Prefer, true),
        (with("127.0.0.1", "sslmode=require"), TlsMode::Require, true),
        (
            with(
                "localhost",
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            TlsMode::VerifyFull,
            true,
        ),
    ];
    for (url, mode, tls) in cases {
        let db = Database::from_url(&url).unwrap();
        assert_eq!(db.mode(), mode, "{url}");
        assert_eq!(encrypted(db).await.unwrap(), tls, "{url}");
    }

    // verify-full refuses a certificate for another name, and one from another CA.
    let wrong_name = with(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let e = encrypted(Database::from_url(&wrong_name).unwrap())
        .await
        .expect_err("127.0.0.1 is not the certificate's name");
    assert!(format!("{e:?}").contains("NotValidForName"), "{e:?}");
    let other_ca = "/etc/ssl/certs/ca-certificates.crt";
    if std::path::Path::new(other_ca).exists() {
        let wrong_ca = with(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={other_ca}"),
        );
        let e = encrypted(Database::from_url(&wrong_ca).unwrap())
            .await
            .expect_err("the public CAs did not sign the cluster's certificate");
        assert!(format!("{e:?}").contains("UnknownIssuer"), "{e:?}");
    }

    // And a pool made from it (what the API and keeper use) is encrypted too.
    let db = Database::from_url(&with(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .unwrap();
    let pool = deadpool_postgres::Pool::builder(db.manager(Default::default()))
        .max_size(1)
        .build()
        .unwrap();
    let c = pool.get().await.unwrap();
    let ssl: bool = c
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl);
}

/// Issue 12, point 7: one subscription's webhooks go out in chain order. Of two events of
/// subscription 7 and one of subscription 8, a claim takes the first of 7 and the one of 8,
/// not the second of 7; while the first is pending again (a failed attempt waiting for its
/// retry) the second still waits; once the first is delivered, the second is claimed.
/// Before, all three were claimed at once and a receiver could get `charged` before
/// `created`.
#[tokio::test]
async fn a_subscriptions_webhooks_are_claimed_in_chain_order() {
    use chainsub_store::outbox;
    use std::time::Duration;
    let db = TestDb::create().await;
    let pool = db.pool();
    let c = pool.get().await.unwrap();
    let wallet = vec![0x11u8; 20];
    for (i, sub) in [(1i32, 7i64), (2, 7), (3, 8)] {
        charge_event(&c, i, &wallet, sub).await;
    }
    let events: Vec<(String, Vec<u8>)> = (1..=3)
        .map(|i| (format!("evt_{i}"), wallet.clone()))
        .collect();
    let refs: Vec<outbox::NewDelivery<'_>> = events
        .iter()
        .zip([7, 7, 8])
        .zip(1..)
        .map(|(((id, w), sub), event_id)| outbox::NewDelivery {
            event_id,
            event_public_id: id,
            merchant_wallet: w,
            subscription_id: Some(sub),
        })
        .collect();
    assert_eq!(outbox::enqueue(&**c, CHAIN, &refs).await.unwrap(), 3);

    let lease = Duration::from_secs(30);
    let claimed = |rows: Vec<(Vec<u8>, outbox::Claimed)>| {
        let mut ids: Vec<String> = rows.into_iter().map(|(_, r)| r.event_public_id).collect();
        ids.sort();
        ids
    };
    let first = outbox::claim(&c, std::slice::from_ref(&wallet), 10, lease)
        .await
        .unwrap();
    assert_eq!(claimed(first), ["evt_1", "evt_3"], "evt_2 waits for evt_1");

    // evt_1 failed and waits for its retry (pending, due later): evt_2 still waits.
    c.execute(
        "UPDATE webhook_outbox SET status = 'pending', locked_until = NULL, \
         next_attempt_at = now() + interval '1 hour' WHERE event_public_id = 'evt_1'",
        &[],
    )
    .await
    .unwrap();
    let second = outbox::claim(&c, std::slice::from_ref(&wallet), 10, lease)
        .await
        .unwrap();
    assert!(claimed(second).is_empty(), "nothing else is due");
    // The dashboard's list says why evt_2 waits.
    let scope =
        chainsub_store::merchants::sign_in(&**c, alloy::primitives::Address::from_slice(&wallet))
            .await
            .unwrap();
    let held = || async {
        let (rows, _, _) = chainsub_store::webhooks::deliveries(&**c, &scope, 10, None)
            .await
            .unwrap();
        rows.into_iter()
            .map(|r| (r.event_id, r.held_by))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        held().await,
        [
            ("evt_3".to_string(), None),
            ("evt_2".to_string(), Some("evt_1".to_string())),
            ("evt_1".to_string(), None)
        ]
    );

    c.execute(
        "UPDATE webhook_outbox SET status = 'delivered', delivered_at = now() \
         WHERE event_public_id = 'evt_1'",
        &[],
    )
    .await
    .unwrap();
    let third = outbox::claim(&c, std::slice::from_ref(&wallet), 10, lease)
        .await
        .unwrap();
    assert_eq!(claimed(third), ["evt_2"]);
    assert_eq!(
        held().await[1],
        ("evt_2".to_string(), None),
        "no longer held"
    );
}

/// Migration 0026: a claim leases a row without changing its stored status, so Postgres
/// updates it in place (HOT: no new entry in any of the outbox's indexes, which every claim
/// wrote before); readers still call a leased row `delivering`, the dashboard's retry still
/// leaves it alone until the lease runs out, and an outcome from a lease that ran out (the row
/// queued again meanwhile) is still not applied.
#[tokio::test]
async fn a_claim_leases_rows_in_place_and_readers_still_call_them_delivering() {
    use chainsub_store::outbox;
    use std::time::Duration;
    let db = TestDb::create().await;
    let pool = db.pool();
    let mut c = pool.get().await.unwrap();
    let wallet = vec![0x33u8; 20];
    let scope =
        chainsub_store::merchants::sign_in(&**c, alloy::primitives::Address::from_slice(&wallet))
            .await
            .unwrap();
    let a = charge_event(&c, 1, &wallet, 7).await;
    let b = charge_event(&c, 2, &wallet, 8).await;
    let refs = [(a, "evt_1", 7), (b, "evt_2", 8)].map(|(event_id, id, sub)| outbox::NewDelivery {
        event_id,
        event_public_id: id,
        merchant_wallet: &wallet,
        subscription_id: Some(sub),
    });
    assert_eq!(outbox::enqueue(&**c, CHAIN, &refs).await.unwrap(), 2);
    let tx = c.transaction().await.unwrap();
    let claimed = outbox::claim(
        &tx,
        std::slice::from_ref(&wallet),
        10,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 2);
    let (updated, hot): (i64, i64) = {
        let r = tx
            .query_one(
                "SELECT pg_stat_get_xact_tuples_updated('webhook_outbox'::regclass), \
                        pg_stat_get_xact_tuples_hot_updated('webhook_outbox'::regclass)",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((updated, hot), (2, 2), "both claims are HOT updates");
    tx.commit().await.unwrap();
    let (stored, live, attempts, row_a) = outbox_row(&c, "evt_1").await;
    assert_eq!(
        (stored.as_str(), live.as_str(), attempts),
        ("pending", "delivering", 1)
    );

    // The dashboard's retry waits for the lease...
    let retry = outbox::retry(&**c, &scope, row_a).await.unwrap();
    assert_eq!(retry, outbox::Retry::InFlight);
    // ...and once it ran out, queues the row again: the late failure of that attempt is then
    // not applied (the row is no longer ours), while the other row's success is.
    c.execute(
        "UPDATE webhook_outbox SET locked_until = now() - interval '1 second' WHERE id = $1",
        &[&row_a],
    )
    .await
    .unwrap();
    assert_eq!(
        outbox::retry(&**c, &scope, row_a).await.unwrap(),
        outbox::Retry::Queued
    );
    let row_b = outbox_row(&c, "evt_2").await.3;
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    outbox::record(
        &c,
        &[
            attempt_one(row_a, outbox::NextState::Retry(later)),
            attempt_one(row_b, outbox::NextState::Delivered),
        ],
    )
    .await
    .unwrap();
    let due_now: bool = c
        .query_one(
            "SELECT next_attempt_at <= now() FROM webhook_outbox WHERE id = $1",
            &[&row_a],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        due_now,
        "the stale outcome did not push the queued row back"
    );
    assert_eq!(outbox_row(&c, "evt_1").await.1, "pending");
    assert_eq!(outbox_row(&c, "evt_2").await.1, "delivered");
}

/// The outcome of a first attempt at outbox row `outbox_id` that got HTTP 500, moving the
/// row to `next`.
fn attempt_one(
    outbox_id: i64,
    next: chainsub_store::outbox::NextState,
) -> chainsub_store::outbox::Outcome {
    chainsub_store::outbox::Outcome {
        outbox_id,
        attempt: 1,
        attempted_at: chrono::Utc::now(),
        url: "https://example.com/hook".into(),
        status_code: Some(500),
        latency_ms: 3,
        error: Some("HTTP 500".into()),
        response_excerpt: None,
        next,
        disable_wallet: None,
    }
}

/// An outbox row's stored status, its state as readers show it, its attempts and its id.
async fn outbox_row(c: &tokio_postgres::Client, event_id: &str) -> (String, String, i32, i64) {
    let r = c
        .query_one(
            &format!(
                "SELECT o.status, {}, o.attempts, o.id FROM webhook_outbox o \
                 WHERE o.event_public_id = $1",
                chainsub_store::outbox::LIVE_STATUS
            ),
            &[&event_id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

/// `copy::Numeric` writes a `uint256` in NUMERIC's binary form (base-10000 digits, trailing
/// zero digits implied by the weight): Postgres reads back the same decimal, for zero, digit
/// group edges, powers of ten and the largest `uint256`.
#[tokio::test]
async fn a_uint256_is_written_as_the_numeric_postgres_reads() {
    use alloy::primitives::U256;
    use chainsub_store::copy::Numeric;
    let db = TestDb::create().await;
    let c = db.connect().await;
    let mut values: Vec<U256> = [0u64, 1, 9, 9_999, 10_000, 10_001, 99_990_000, 100_000_000]
        .into_iter()
        .map(U256::from)
        .collect();
    values.extend((0..78).map(|k| U256::from(10u64).pow(U256::from(k))));
    values.extend([
        U256::MAX,
        U256::MAX - U256::from(1u64),
        U256::from(u64::MAX),
    ]);
    for v in values {
        let row = c
            .query_one("SELECT $1::numeric::text", &[&Numeric(v)])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), v.to_string());
    }
}

/// Attempts have no foreign key to their outbox row since migration 0024 (its check locked
/// the row in every `record`): `record` writes no attempt for a row that does not exist, and
/// a reorg's undo that deletes an outbox row deletes its attempts, as the cascade did.
#[tokio::test]
async fn attempts_only_ever_name_outbox_rows_that_exist() {
    use chainsub_store::outbox;
    let db = TestDb::create().await;
    let pool = db.pool();
    let c = pool.get().await.unwrap();
    let wallet = vec![0x22u8; 20];
    let event = charge_event(&c, 10, &wallet, 7).await;
    let delivery = outbox::NewDelivery {
        event_id: event,
        event_public_id: "evt_10",
        merchant_wallet: &wallet,
        subscription_id: Some(7),
    };
    assert_eq!(outbox::enqueue(&**c, CHAIN, &[delivery]).await.unwrap(), 1);
    let row: i64 = c
        .query_one("SELECT id FROM webhook_outbox", &[])
        .await
        .unwrap()
        .get(0);
    let outcome = |outbox_id| attempt_one(outbox_id, outbox::NextState::Retry(chrono::Utc::now()));
    outbox::record(&c, &[outcome(row), outcome(row + 1_000)])
        .await
        .unwrap();
    assert_eq!(
        attempt_rows(&c).await,
        vec![row],
        "no attempt for a row that does not exist"
    );

    // A row that was never attempted, with an attempt left in the table (as a cascade would
    // have found it): the undo of a reorg above block 5 deletes both.
    c.batch_execute(&format!(
        "UPDATE webhook_outbox SET attempts = 0, status = 'pending' WHERE id = {row}"
    ))
    .await
    .unwrap();
    let (dropped, retracted) = outbox::retract_above(&**c, CHAIN, 5, &[0u8; 32])
        .await
        .unwrap();
    assert_eq!((dropped, retracted), (1, 0));
    assert_eq!(attempt_rows(&c).await, Vec::<i64>::new());
}

/// The outbox row each webhook attempt names, in order.
async fn attempt_rows(c: &tokio_postgres::Client) -> Vec<i64> {
    first_column(c, "SELECT outbox_id FROM webhook_attempts ORDER BY id").await
}

/// The first column of every row of `sql`.
async fn first_column<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    c: &tokio_postgres::Client,
    sql: &str,
) -> Vec<T> {
    c.query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A `subscription.charged` event of `wallet`'s subscription `sub` at `block` (also its log
/// index), public id `evt_<block>`: its row id.
async fn charge_event(c: &tokio_postgres::Client, block: i32, wallet: &[u8], sub: i64) -> i64 {
    insert_charge(c, &format!("evt_{block}"), block, wallet, sub).await
}

/// A `subscription.charged` event with public id `public` on chain 1 (contract `0xcc…`).
async fn insert_charge(
    c: &tokio_postgres::Client,
    public: &str,
    block: i32,
    wallet: &[u8],
    sub: i64,
) -> i64 {
    c.query_one(
        "INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash, \
         block_time, transaction_hash, transaction_index, log_index, name, kind, \
         merchant_wallet, subscription_id, topics, data) \
         VALUES ($1, 1, decode(repeat('cc', 20), 'hex'), $2::int, \
                 decode(repeat('01', 32), 'hex'), now(), decode(repeat('02', 32), 'hex'), 0, \
                 $2::int, 'Charged', 'subscription.charged', $3, $4, '{}', '\\x') RETURNING id",
        &[&public, &block, &wallet, &sub],
    )
    .await
    .unwrap()
    .get(0)
}

/// Migration 0025: an event's snapshot is written as typed columns from the fold's state and
/// read back — by the events page's and webhooks' reader and by `indexer verify`'s — as
/// exactly the snapshot that state gives: a customer reference that needs escapes, an empty
/// one and none, the largest amount, with and without a next payment.
#[tokio::test]
async fn a_snapshot_is_read_back_as_the_state_it_was_written_from() {
    use alloy::primitives::{Address, B256, U256};
    use chainsub_core::{SubscriptionId, SubscriptionState, SubscriptionStatus};
    use chainsub_store::index::{self, LogFields, NewEvent};
    let db = TestDb::create().await;
    let mut c = db.connect().await;
    let state = |n: u8, status, customer: Option<&str>| SubscriptionState {
        onchain_id: n.into(),
        public_id: SubscriptionId::of_creation(1, B256::repeat_byte(n), n.into()),
        merchant: Address::repeat_byte(0x22),
        subscriber: Address::repeat_byte(0xab),
        plan_onchain_id: 3,
        amount: U256::from(u128::MAX),
        customer_ref: B256::ZERO,
        customer_external_id: customer.map(Into::into),
        status,
        cancel_at_period_end: n == 2,
        period: 7 + u32::from(n),
        current_period_start: 1_767_225_600,
        current_period_end: 1_769_904_000 + u64::from(n),
        failed_attempts: n,
        next_retry_at: Some(1_770_000_000),
        ended_reason: None,
        trial_end: (n == 3).then_some(1_767_225_600),
        pending_plan_change: (n == 1).then_some(chainsub_core::PendingPlanChange {
            plan_onchain_id: 9,
            amount: U256::from(u128::MAX),
        }),
        created_event: 0,
        last_event: 0,
        created_at: 0,
        updated_at: 0,
        events: 1,
    };
    let states = [
        state(1, SubscriptionStatus::PastDue, Some("cus \"7\" é\\\n")),
        state(2, SubscriptionStatus::Cancelled, None),
        state(3, SubscriptionStatus::Trialing, Some("")),
    ];
    let hash = B256::repeat_byte(9);
    let fields = LogFields::default();
    let public_ids: Vec<String> = (0..3).map(|i| format!("evt_{i:032x}")).collect();
    let events: Vec<NewEvent<'_>> = states
        .iter()
        .zip(&public_ids)
        .enumerate()
        .map(|(i, (s, id))| NewEvent {
            public_id: id,
            block_number: 5,
            block_hash: &hash,
            block_time: 1_767_225_600,
            tx_hash: &hash,
            tx_index: 0,
            log_index: i as u64,
            name: "PaymentFailed",
            kind: Some("subscription.payment_failed"),
            merchant: Some(&s.merchant),
            subscription_id: Some(s.onchain_id),
            plan_id: Some(3),
            topics: &[],
            data: &[],
            fields: &fields,
            snapshot: Some(s),
            enqueued: false,
            sequence: Some(1),
        })
        .collect();
    let tx = c.transaction().await.unwrap();
    index::insert_events(&tx, CHAIN, &Address::ZERO, &events)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let want: Vec<_> = states.iter().map(|s| Some(s.snapshot())).collect();
    assert_eq!(want[1].as_ref().unwrap().next_payment_at, None);

    let mut stored = index::events_in_range(&c, CHAIN, 5, 5).await.unwrap();
    stored.sort_by_key(|e| e.log_index);
    let read: Vec<_> = stored.into_iter().map(|e| e.snapshot.unwrap()).collect();
    assert_eq!(read, want, "verify's reader");

    let pool = db.pool();
    let p = pool.get().await.unwrap();
    let ids: Vec<&str> = public_ids.iter().map(String::as_str).collect();
    let mut rows = events::by_ids(&p, &ids).await.unwrap();
    rows.sort_by_key(|e| e.chain.log_index);
    let read: Vec<_> = rows.into_iter().map(|e| e.snapshot).collect();
    assert_eq!(read, want, "the events reader");
}

/// The sink's outbox rows for a batch's new events (`outbox::enqueue_new`, one binary COPY)
/// are the rows `outbox::enqueue` writes — in the order given, pending, no attempts — and
/// their insert runs the trigger that wakes dispatchers at commit; a row for an event that
/// already has a live one fails (and with it the sink's batch) instead of being skipped.
#[tokio::test]
async fn a_batchs_outbox_rows_are_copied_as_enqueue_writes_them() {
    use chainsub_store::outbox::{self, NewDelivery};
    let db = TestDb::create().await;
    let mut c = db.connect().await;
    let wallet = vec![0x22u8; 20];
    let mut events = Vec::new();
    for block in 1..=6 {
        events.push(charge_event(&c, block, &wallet, 7 + i64::from(block % 2)).await);
    }
    let public: Vec<String> = (1..=6).map(|b| format!("evt_{b}")).collect();
    let delivery = |i: usize| NewDelivery {
        event_id: events[i],
        event_public_id: &public[i],
        merchant_wallet: &wallet,
        subscription_id: Some(7 + (i as i64 + 1) % 2),
    };
    // Three rows the sink's way, in reverse chain order on purpose, then three the other way.
    let copied: Vec<NewDelivery<'_>> = [2, 1, 0].map(delivery).to_vec();
    let tx = c.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL track_functions = 'pl'")
        .await
        .unwrap();
    assert_eq!(outbox::enqueue_new(&tx, CHAIN, &copied).await.unwrap(), 3);
    let notified: i64 = tx
        .query_one(
            "SELECT calls FROM pg_stat_xact_user_functions
             WHERE funcname = 'chainsub_webhook_outbox_notify'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(notified, 1, "one wake-up per statement");
    tx.commit().await.unwrap();
    let inserted: Vec<NewDelivery<'_>> = [3, 4, 5].map(delivery).to_vec();
    assert_eq!(outbox::enqueue(&c, CHAIN, &inserted).await.unwrap(), 3);

    let rows: Vec<String> = first_column(
        &c,
        "SELECT format('%s %s %s %s %s %s %s %s %s', event_id, event_public_id,
             encode(merchant_wallet, 'hex'), chain_id, subscription_id, status, attempts,
             next_attempt_at <= now() AND created_at <= clock_timestamp(),
             num_nulls(test_payload, locked_until, last_error, delivered_at, retracted_at))
         FROM webhook_outbox ORDER BY id",
    )
    .await;
    let want: Vec<String> = [2, 1, 0, 3, 4, 5]
        .iter()
        .map(|&i| {
            let d = delivery(i);
            format!(
                "{} {} {} 1 {} pending 0 t 5",
                d.event_id,
                d.event_public_id,
                "22".repeat(20),
                d.subscription_id.unwrap()
            )
        })
        .collect();
    assert_eq!(rows, want);

    // An event that has its row already: the COPY fails rather than skip it.
    let tx = c.transaction().await.unwrap();
    let again = outbox::enqueue_new(&tx, CHAIN, &[delivery(0)])
        .await
        .unwrap_err();
    let chainsub_store::Error::Db(db) = &again else {
        panic!("{again:?}");
    };
    assert_eq!(
        db.as_db_error().and_then(|e| e.constraint()),
        Some("webhook_outbox_event"),
        "{again:?}"
    );
}

/// A LISTEN session whose connection goes silent without closing (a firewall forgetting it,
/// a failover without a reset) is noticed by its probe and replaced: without the probe the
/// listener would wait forever, hearing nothing. Notifications reach the new session, and
/// the probes themselves are never handed on.
#[tokio::test]
async fn a_listener_whose_connection_goes_silent_is_lost_and_listens_again() {
    use chainsub_store::listen::{Heard, Timing, listen_forever};
    use chainsub_tests::proxy::{Proxy, target_of, via};
    use std::time::Duration;

    let db = TestDb::create().await;
    let proxy = Proxy::start(target_of(&db.url)).await;
    let url = via(&db.url, proxy.addr);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let timing = Timing {
        retry: Duration::from_millis(50),
        probe: Duration::from_secs(1),
    };
    let listener = tokio::spawn(async move {
        listen_forever(
            &url,
            "chainsub_test_channel",
            timing,
            |heard| {
                let _ = tx.send(match heard {
                    Heard::Listening => "listening".to_string(),
                    Heard::Lost => "lost".to_string(),
                    Heard::Notified(p) => format!("notified {p}"),
                });
            },
            || false,
        )
        .await
    });
    let next = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the listener said nothing for 30 s")
            .unwrap()
    };
    assert_eq!(next(&mut rx).await, "listening");
    // Probes answered: nothing is said.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(rx.try_recv().is_err(), "probes are not handed on");
    proxy.freeze();
    assert_eq!(next(&mut rx).await, "lost", "the silent session is noticed");
    assert_eq!(next(&mut rx).await, "listening", "and replaced");
    db.connect()
        .await
        .batch_execute("NOTIFY chainsub_test_channel, 'after'")
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, "notified after");
    listener.abort();
}

/// An API process caches key lookups only when the database signals key changes: true once
/// migrated, false when a trigger is missing or disabled.
#[tokio::test]
async fn key_changes_are_signalled_only_with_both_triggers_enabled() {
    use chainsub_store::merchants::key_changes_signalled;
    let db = TestDb::create().await;
    let c = db.connect().await;
    assert!(key_changes_signalled(&c).await.unwrap());
    c.batch_execute("ALTER TABLE api_keys DISABLE TRIGGER api_key_truncate_notify")
        .await
        .unwrap();
    assert!(!key_changes_signalled(&c).await.unwrap());
    c.batch_execute("ALTER TABLE api_keys ENABLE REPLICA TRIGGER api_key_truncate_notify")
        .await
        .unwrap();
    assert!(
        !key_changes_signalled(&c).await.unwrap(),
        "a replica-only trigger does not fire in ordinary sessions"
    );
    c.batch_execute(
        "ALTER TABLE api_keys ENABLE TRIGGER api_key_truncate_notify; \
         DROP TRIGGER api_key_notify ON api_keys",
    )
    .await
    .unwrap();
    assert!(!key_changes_signalled(&c).await.unwrap());
}

/// A lifecycle event of `wallet`'s subscription 7 at `block`, with a public id the API's
/// reader accepts (`evt_` and 32 hex digits): its row id.
async fn listed_event(c: &tokio_postgres::Client, block: i32, wallet: &[u8]) -> i64 {
    insert_charge(c, &format!("evt_{block:032x}"), block, wallet, 7).await
}

/// How many times this connection executed the events list statements: `(merged, chain-only)`
/// (`pg_prepared_statements` counts a plan per execution).
async fn events_list_runs(c: &tokio_postgres::Client) -> (i64, i64) {
    let statements = events::list_statements();
    let (merged, chain_only) = statements.split_at(statements.len() / 2);
    let rows = c
        .query(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements",
            &[],
        )
        .await
        .unwrap();
    let count = |set: &[&str]| -> i64 {
        rows.iter()
            .filter(|r| set.contains(&r.get::<_, String>(0).as_str()))
            .map(|r| r.get::<_, i64>(1))
            .sum()
    };
    (count(merged), count(chain_only))
}

/// An events page is read by the chain-events-only statement whenever no retraction or
/// renewal-at-risk observation of the merchant can be on it (none beyond the cursor, or the
/// nearest past the page's far edge), and by the merged statement (all three tables)
/// otherwise: same answers, and the cheaper statement for the common case. Counted by the
/// executions `pg_prepared_statements` records on the one connection.
#[tokio::test]
async fn an_events_page_merges_other_tables_only_when_they_could_be_on_it() {
    use chainsub_store::events::{self, Filter};
    use chainsub_store::{Direction, Page};
    let db = TestDb::create().await;
    let pool = db.pool();
    let c = pool.get().await.unwrap();
    let wallet = vec![0x44u8; 20];
    let scope =
        chainsub_store::merchants::sign_in(&**c, alloy::primitives::Address::from_slice(&wallet))
            .await
            .unwrap();
    let ids: Vec<i64> = {
        let mut v = Vec::new();
        for b in 1..=3 {
            v.push(listed_event(&c, b, &wallet).await);
        }
        v
    };
    let runs = || events_list_runs(&c);
    let page = |key: Option<i64>, direction| Page {
        limit: 2,
        key,
        direction,
    };
    let list = |filter: Filter<'static>, p: Page| {
        let (c, scope) = (&c, &scope);
        async move {
            let (rows, more) = events::list(c, scope, CHAIN, &filter, p).await.unwrap();
            let blocks: Vec<i64> = rows.iter().map(|e| e.chain.block_number).collect();
            (blocks, more)
        }
    };
    let older = Direction::Older;

    // No other rows: one statement per page.
    assert_eq!(
        list(Filter::default(), page(None, older)).await,
        (vec![3, 2], true)
    );
    assert_eq!(runs().await, (0, 1));

    // An observation newer than every event (ids come from one sequence) is on the first page.
    c.execute(
        "INSERT INTO renewal_risks (public_id, chain_id, contract, merchant_wallet, \
             subscription_id, plan_id, period, reason, amount, required, available, due_at, \
             block_number, block_hash, block_time) \
         VALUES ('evt_' || md5('k'), 1, decode(repeat('cc', 20), 'hex'), $1, 7, 1, 2, \
                 'allowance', 1, 1, 0, now(), 9, decode(repeat('09', 32), 'hex'), now())",
        &[&wallet],
    )
    .await
    .unwrap();
    assert_eq!(
        list(Filter::default(), page(None, older)).await,
        (vec![9, 3], true)
    );
    assert_eq!(runs().await, (1, 2));
    // Older than event 3: the observation cannot be on the page.
    assert_eq!(
        list(Filter::default(), page(Some(ids[2]), older)).await,
        (vec![2, 1], false)
    );
    assert_eq!(runs().await, (1, 3));
    // Newer than event 2: it can.
    assert_eq!(
        list(Filter::default(), page(Some(ids[1]), Direction::Newer)).await,
        (vec![9, 3], false)
    );
    assert_eq!(runs().await, (2, 4));
    // Filtered to charges, it cannot.
    let charges = Filter {
        kind: Some("subscription.charged"),
        ..Filter::default()
    };
    assert_eq!(list(charges, page(None, older)).await, (vec![3, 2], true));
    assert_eq!(runs().await, (2, 5));
    // Newer than event 1, one row: the page (events 2 and 3, with the row that tells whether
    // there is more) is full, and the observation lies past it.
    let one_newer = Page {
        limit: 1,
        key: Some(ids[0]),
        direction: Direction::Newer,
    };
    assert_eq!(list(Filter::default(), one_newer).await, (vec![2], true));
    assert_eq!(runs().await, (2, 6));
    // Filtered to observations, the chain-events statement has nothing to give: merged only.
    let risks = Filter {
        kind: Some("subscription.renewal_at_risk"),
        ..Filter::default()
    };
    assert_eq!(list(risks, page(None, older)).await, (vec![9], false));
    assert_eq!(runs().await, (3, 6));

    // A queued event: the page shows its delivery; its webhook body's reader (all merchants)
    // does not read it (a body has no delivery).
    let id: String = c
        .query_one(
            "SELECT public_id FROM chain_events WHERE id = $1",
            &[&ids[2]],
        )
        .await
        .unwrap()
        .get(0);
    let queued = chainsub_store::outbox::NewDelivery {
        event_id: ids[2],
        event_public_id: &id,
        merchant_wallet: &wallet,
        subscription_id: Some(7),
    };
    chainsub_store::outbox::enqueue(&**c, CHAIN, &[queued])
        .await
        .unwrap();
    let (rows, _) = events::list(&c, &scope, CHAIN, &Filter::default(), page(None, older))
        .await
        .unwrap();
    let on_page = rows.iter().find(|e| e.id.as_str() == id).unwrap();
    assert!(on_page.delivery.is_some(), "{on_page:?}");
    let bodies = events::by_ids(&c, &[id.as_str()]).await.unwrap();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0].delivery, None);
    assert_eq!(bodies[0].chain, on_page.chain);
}

/// Every events page `list` answers is the page of the merged statement — for each filter,
/// both directions, every cursor (chain events, retractions and observations alike) and
/// page sizes 1–4 — over interleaved rows of all three tables; and the chain-events
/// statement alone answered some of them.
#[tokio::test]
async fn an_events_page_is_the_merged_page_for_every_filter_direction_and_cursor() {
    use chainsub_core::SubscriptionId;
    use chainsub_store::events::{self, Filter};
    use chainsub_store::{Direction, Page};
    let db = TestDb::create().await;
    let pool = db.pool();
    let c = pool.get().await.unwrap();
    let wallet = vec![0x55u8; 20];
    let scope =
        chainsub_store::merchants::sign_in(&**c, alloy::primitives::Address::from_slice(&wallet))
            .await
            .unwrap();
    let sub_id = |n: i64| SubscriptionId::parse(&format!("sub_{n:032x}")).unwrap();
    for n in [7i64, 8] {
        c.execute(
            "INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet, \
                 subscriber, plan_onchain_id, amount, customer_ref, status, period, \
                 current_period_start, current_period_end, created_event_id, last_event_id, \
                 created_at, updated_at, event_count) \
             VALUES (1, $1, $2, $3, $3, 1, 1, '\\x00', 'active', 1, now(), now(), 0, 0, \
                     now(), now(), 1)",
            &[&n, &sub_id(n).as_str(), &wallet],
        )
        .await
        .unwrap();
    }
    // Rows in id order (one sequence): (table, block, subscription).
    let layout: [(char, i64, i64); 13] = [
        ('e', 1, 7),
        ('e', 2, 8),
        ('r', 1, 7),
        ('e', 3, 7),
        ('k', 4, 7),
        ('e', 5, 8),
        ('e', 6, 7),
        ('r', 6, 8),
        ('e', 7, 7),
        ('e', 8, 8),
        ('k', 9, 8),
        ('e', 9, 7),
        ('e', 10, 8),
    ];
    let mut ids = Vec::new();
    for (n, (table, block, sub)) in layout.into_iter().enumerate() {
        let public = format!("evt_{n:032x}");
        let id: i64 = match table {
            'e' => insert_charge(&c, &public, block as i32, &wallet, sub).await,
            'r' => c
                .query_one(
                    "INSERT INTO event_retractions (public_id, chain_id, contract, \
                         merchant_wallet, retracted_event_id, retracted_kind, block_number, \
                         block_hash, block_time, transaction_hash, log_index, subscription_id, \
                         ancestor_block, ancestor_hash, snap_id, snap_status, \
                         snap_cancel_at_period_end, snap_period, snap_period_start, \
                         snap_period_end, snap_failed_attempts, snap_subscriber, snap_amount, \
                         snap_plan_onchain_id) \
                     VALUES ($1, 1, decode(repeat('cc', 20), 'hex'), $3, $1, \
                         'subscription.charged', $2::bigint, decode(repeat('01', 32), 'hex'), now(), \
                         decode(repeat('02', 32), 'hex'), 0, $4, $2 - 1, \
                         decode(repeat('03', 32), 'hex'), $5, 'active', false, 1, now(), now(), \
                         0, $3, 1, 1) \
                     RETURNING id",
                    &[&public, &block, &wallet, &sub, &sub_id(sub).as_str()],
                )
                .await
                .unwrap()
                .get(0),
            _ => c
                .query_one(
                    "INSERT INTO renewal_risks (public_id, chain_id, contract, merchant_wallet, \
                         subscription_id, plan_id, period, reason, amount, required, available, \
                         due_at, block_number, block_hash, block_time) \
                     VALUES ($1, 1, decode(repeat('cc', 20), 'hex'), $3, $4, 1, $2::bigint::int, \
                         'allowance', 1, 1, 0, now(), $2::bigint, decode(repeat('09', 32), 'hex'), now()) \
                     RETURNING id",
                    &[&public, &block, &wallet, &sub],
                )
                .await
                .unwrap()
                .get(0),
        };
        ids.push(id);
    }
    let (s7, s8) = (sub_id(7), sub_id(8));
    let filters = [
        Filter::default(),
        Filter {
            kind: Some("subscription.charged"),
            ..Filter::default()
        },
        Filter {
            kind: Some(events::RETRACTED),
            ..Filter::default()
        },
        Filter {
            kind: Some(events::RENEWAL_AT_RISK),
            ..Filter::default()
        },
        Filter {
            subscription: Some(&s7),
            ..Filter::default()
        },
        Filter {
            subscription: Some(&s8),
            kind: Some("subscription.charged"),
            ..Filter::default()
        },
        Filter {
            from_block: Some(3),
            to_block: Some(8),
            ..Filter::default()
        },
        Filter {
            subscription: Some(&s8),
            from_block: Some(6),
            ..Filter::default()
        },
        Filter {
            created_lt: Some(chrono::Utc::now() - chrono::Duration::days(1)),
            ..Filter::default()
        },
    ];
    let listed = |rows: Vec<events::EventRow>, more: bool| {
        (
            rows.into_iter()
                .map(|e| e.id.as_str().to_string())
                .collect::<Vec<_>>(),
            more,
        )
    };
    let mut compared = 0i64;
    for filter in &filters {
        for limit in 1..=4 {
            let mut pages = vec![Page {
                limit,
                key: None,
                direction: Direction::Older,
            }];
            for &key in &ids {
                for direction in [Direction::Older, Direction::Newer] {
                    pages.push(Page {
                        limit,
                        key: Some(key),
                        direction,
                    });
                }
            }
            for page in pages {
                let (rows, more) = events::list(&c, &scope, CHAIN, filter, page).await.unwrap();
                let (want, want_more) = events::list_merged(&c, &scope, CHAIN, filter, page)
                    .await
                    .unwrap();
                assert_eq!(
                    listed(rows, more),
                    listed(want, want_more),
                    "{filter:?} {page:?}"
                );
                compared += 1;
            }
        }
    }
    let (merged_runs, chain_only_runs) = events_list_runs(&c).await;
    // `list_merged` ran the merged statement once per comparison; `list` the rest. Rows of
    // the other tables sit between every few chain events here, and three of the filters
    // (retractions only, observations only, nothing in range) always need the merged statement:
    // 286 of the 972 pages need no more than the chain events' statement.
    let answered_alone = compared - (merged_runs - compared);
    assert!(chain_only_runs > 0);
    assert!(
        answered_alone > compared / 4,
        "the chain-events statement alone answered only {answered_alone} of {compared} pages"
    );
}

#[tokio::test]
async fn a_key_budget_grants_its_burst_then_one_token_per_interval_to_all_takers() {
    use chainsub_store::key_budgets::take;
    use std::time::Duration;
    let db = TestDb::create().await;
    let pool = db.pool();
    let (a, b) = (pool.get().await.unwrap(), pool.get().await.unwrap());
    // One token per 10 s, five at once: the clock cannot refill it during the test.
    let interval = Duration::from_secs(10);
    let first = take(&a, "mer_1", 3, interval, 5).await.unwrap();
    assert_eq!((first.granted, first.remaining), (3, 2));
    // Another process, the same key: what is left of the burst, not a burst of its own.
    let second = take(&b, "mer_1", 3, interval, 5).await.unwrap();
    assert_eq!((second.granted, second.remaining), (2, 0));
    let refused = take(&a, "mer_1", 1, interval, 5).await.unwrap();
    assert_eq!((refused.granted, refused.remaining), (0, 0));
    assert!(
        refused.wait > Duration::from_secs(9) && refused.wait <= interval,
        "the next token is one interval away: {:?}",
        refused.wait
    );
    // Keys are independent.
    assert_eq!(take(&b, "mer_2", 9, interval, 5).await.unwrap().granted, 5);
    // Concurrent takers of one key never get more than the burst between them.
    let interval = Duration::from_secs(3600);
    drop((a, b));
    let takers = (0..8).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let c = pool.get().await.unwrap();
            let mut got = 0;
            for _ in 0..10 {
                got += take(&c, "mer_3", 2, interval, 25).await.unwrap().granted;
            }
            got
        })
    });
    let mut total = 0;
    for t in takers {
        total += t.await.unwrap();
    }
    assert_eq!(total, 25);
}
