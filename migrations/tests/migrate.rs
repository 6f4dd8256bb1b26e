//! The migration runner on a real Postgres: idempotent, safe when several processes start at
//! once, and refusing a migration that changed after it was applied.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chainsub_migrations::{Error, MIGRATIONS, locks, migrate};
use chainsub_tests::TestDb;
use chainsub_tests::db::connect;
use tokio_postgres::error::SqlState;

/// The environment variable that turns [`child_process_migrates`] into a worker.
const CHILD_URL: &str = "CHAINSUB_MIGRATE_CHILD_URL";

fn all_versions() -> Vec<i32> {
    MIGRATIONS.iter().map(|m| m.version).collect()
}

async fn recorded_versions(db: &TestDb) -> Vec<i32> {
    let client = db.connect().await;
    column(
        &client,
        "SELECT version FROM schema_migrations ORDER BY version",
    )
    .await
}

async fn tables(db: &TestDb) -> Vec<String> {
    let client = db.connect().await;
    column(
        &client,
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = 'public' ORDER BY 1",
    )
    .await
}

/// The first column of every row of `sql`.
async fn column<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Vec<T> {
    client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Applies the migrations whose version `which` selects, in order (a test seeds the rows of
/// an older schema between two calls).
async fn apply(client: &tokio_postgres::Client, which: impl Fn(i32) -> bool) {
    for m in MIGRATIONS.iter().filter(|m| which(m.version)) {
        client.batch_execute(m.sql).await.unwrap();
    }
}

/// A new database with the schema just before migration `version`, and a connection to it.
async fn schema_before(version: i32) -> (TestDb, tokio_postgres::Client) {
    let db = TestDb::create_empty().await;
    let client = db.connect().await;
    apply(&client, |v| v < version).await;
    (db, client)
}

/// A whole snapshot as the sink wrote it before migration 0025 (JSON; a customer reference
/// that needs escapes, no next payment).
const SNAPSHOT_0018: &str = r#"{"id": "sub_1", "status": "past_due", "cancelAtPeriodEnd": true, "period": 7, "currentPeriodStart": "2026-01-01T00:00:00Z", "currentPeriodEnd": "2026-02-01T00:00:00Z", "nextPaymentAt": null, "failedAttempts": 2, "subscriber": "0xAbAbabABabAbAbABabababaBABAbabAbABABAbAB", "customerExternalId": "cus \"7\" é", "amount": "340282366920938463463374607431768211455", "planOnchainId": 3}"#;

/// The rows of a two-column query: a text and a nullable bigint.
async fn text_and_number(client: &tokio_postgres::Client, sql: &str) -> Vec<(String, Option<i64>)> {
    client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Runs `sql`, which the schema must refuse with `code`.
async fn assert_refused(client: &tokio_postgres::Client, sql: &str, code: SqlState) {
    let refused = client.execute(sql, &[]).await.unwrap_err();
    assert_eq!(refused.code(), Some(&code), "{sql}: {refused}");
}

#[tokio::test]
async fn applies_to_an_empty_database_then_second_run_applies_nothing() {
    let db = TestDb::create_empty().await;
    let mut client = db.connect().await;

    let first = migrate(&mut client).await.unwrap();
    let schema = tables(&db).await;
    let second = migrate(&mut client).await.unwrap();

    assert_eq!(first, all_versions());
    assert_eq!(second, Vec::<i32>::new());
    assert_eq!(recorded_versions(&db).await, all_versions());
    assert_eq!(tables(&db).await, schema, "second run changed nothing");
    for t in [
        "merchants",
        "chain_events",
        "subscriptions",
        "webhook_outbox",
    ] {
        assert!(schema.iter().any(|s| s == t), "{t} missing from {schema:?}");
    }
}

#[tokio::test]
async fn two_tasks_on_separate_connections_migrate_concurrently() {
    let db = TestDb::create_empty().await;
    let (mut a, mut b) = (db.connect().await, db.connect().await);

    let (ra, rb) = tokio::join!(migrate(&mut a), migrate(&mut b));

    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    // Exactly one of them did the work; the other found nothing left.
    let mut both = [ra.clone(), rb.clone()];
    both.sort();
    assert_eq!(both, [Vec::new(), all_versions()], "{ra:?} / {rb:?}");
    assert_eq!(recorded_versions(&db).await, all_versions());
}

/// Worker half of the multi-process test: run by the test binary itself in a child process
/// (`--ignored --exact`), it migrates the database named in the environment.
#[tokio::test]
#[ignore = "run as a child process by two_processes_migrate_concurrently"]
async fn child_process_migrates() {
    let url = std::env::var(CHILD_URL).expect("only run as a child process");
    let mut client = connect(&url).await;
    let applied = migrate(&mut client).await.expect("child migrate");
    println!("applied={applied:?}");
}

fn spawn_child(url: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_migrates",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_URL, url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child test process")
}

#[tokio::test]
async fn two_processes_migrate_concurrently() {
    let db = TestDb::create_empty().await;
    // Hold the migration lock so both children are started and queued on it before either
    // can run: when it is released they race for real.
    let gate = db.connect().await;
    gate.execute("SELECT pg_advisory_lock($1)", &[&locks::MIGRATIONS])
        .await
        .unwrap();
    let children = [spawn_child(&db.url), spawn_child(&db.url)];

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: i64 = gate
            .query_one(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                 WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = $1",
                &[&db.name],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "children never queued on the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gate.execute("SELECT pg_advisory_unlock($1)", &[&locks::MIGRATIONS])
        .await
        .unwrap();

    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let mut applied = Vec::new();
    for out in &outputs {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("1 passed"), "child ran no test:\n{stdout}");
        let line = stdout
            .lines()
            .find(|l| l.starts_with("applied="))
            .expect("child reports what it applied");
        applied.push(line.to_string());
    }
    applied.sort();
    let mut expected = vec![
        "applied=[]".to_string(),
        format!("applied={:?}", all_versions()),
    ];
    expected.sort();
    assert_eq!(
        applied, expected,
        "one child applied everything, the other nothing"
    );
    assert_eq!(recorded_versions(&db).await, all_versions());
}

#[tokio::test]
async fn changed_checksum_is_refused() {
    let db = TestDb::create().await;
    let first = MIGRATIONS[0];
    db.connect()
        .await
        .execute(
            "UPDATE schema_migrations SET checksum = 'edited' WHERE version = $1",
            &[&first.version],
        )
        .await
        .unwrap();

    let err = migrate(&mut db.connect().await).await.unwrap_err();

    assert!(
        matches!(&err, Error::Changed { version, name } if *version == first.version && name == first.name),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_applied_version_is_refused() {
    let db = TestDb::create().await;
    db.connect()
        .await
        .execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')",
            &[],
        )
        .await
        .unwrap();

    let err = migrate(&mut db.connect().await).await.unwrap_err();

    assert!(matches!(err, Error::Unknown(9999)), "{err}");
}

/// Migration 0007 gives subscriptions indexed under the old `sub_<number>` scheme exactly the
/// opaque id the indexer now derives in Rust, in the row and in every snapshot.
#[tokio::test]
async fn opaque_subscription_ids_are_rewritten_to_the_ids_a_reindex_would_give() {
    use alloy::primitives::B256;
    use chainsub_core::SubscriptionId;

    let (_db, client) = schema_before(7).await;
    let tx = B256::repeat_byte(0x5a);
    client
        .batch_execute(&format!(
            "INSERT INTO chain_events (id, public_id, chain_id, contract, block_number, block_hash,
                 block_time, transaction_hash, transaction_index, log_index, name, kind,
                 merchant_wallet, subscription_id, topics, data, decoded, snapshot)
             VALUES (1, 'evt_a', 31337, '\\x00', 5, '\\x01', now(), '\\x{tx}', 0, 0,
                     'SubscriptionCreated', 'subscription.created', '\\x02', 42, '{{}}', '\\x',
                     '{{}}', '{snapshot}'),
                    (2, 'evt_b', 31337, '\\x00', 6, '\\x03', now(), '\\x04', 0, 0,
                     'SubscriptionCharged', 'subscription.charged', '\\x02', 42, '{{}}', '\\x',
                     '{{\"amount\": \"9990000\", \"period\": \"2\", \"attempt\": \"1\",
                       \"subscriber\": \"0x{subscriber}\", \"reason\": \"2\",
                       \"nextRetryAt\": \"18446744073709551615\"}}',
                     '{snapshot}');
             INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet,
                 subscriber, plan_onchain_id, amount, customer_ref, status, period,
                 current_period_start, current_period_end, created_event_id, last_event_id,
                 created_at, updated_at)
             VALUES (31337, 42, 'sub_42', '\\x02', '\\x03', 1, 1, '\\x04', 'active', 2,
                     now(), now(), 1, 2, now(), now());
             INSERT INTO indexer_cursor (chain_id, contract, block_number, block_hash,
                 writer_epoch)
             VALUES (31337, '\\x00', 6, '\\x03', 5);",
            tx = alloy::hex::encode(tx),
            subscriber = "Ab".repeat(20),
            snapshot = SNAPSHOT_0018.replace("sub_1", "sub_42"),
        ))
        .await
        .unwrap();
    apply(&client, |v| v >= 7).await;

    let want = SubscriptionId::of_creation(31337, tx, 42);
    let row = client
        .query_one("SELECT public_id FROM subscriptions", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), want.as_str());
    // Each event's snapshot names the new id (a column since 0025); migration 0019 gave each
    // its place in its subscription's sequence, from id order.
    let events = text_and_number(
        &client,
        "SELECT snap_id, sequence FROM chain_events ORDER BY id",
    )
    .await;
    let want = want.as_str().to_string();
    assert_eq!(events, [(want.clone(), Some(1)), (want, Some(2))]);
    // Migration 0020: the subscription keeps the count of its events, and the writer epoch
    // moved on (an indexer of the previous release is fenced; 0022, 0023 and 0025 move it on
    // again).
    let row = client
        .query_one(
            "SELECT (SELECT event_count FROM subscriptions), (SELECT writer_epoch FROM indexer_cursor)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (2, 10));
    // A subscription written as the previous release writes it (without the count) fails,
    // new or updated through ON CONFLICT alike.
    assert_refused(
        &client,
        "INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet,
                 subscriber, plan_onchain_id, amount, customer_ref, status, period,
                 current_period_start, current_period_end, created_event_id, last_event_id,
                 created_at, updated_at)
             VALUES (31337, 42, 'sub_x', '\\x02', '\\x03', 1, 1, '\\x04', 'active', 3,
                     now(), now(), 1, 2, now(), now())
             ON CONFLICT (chain_id, onchain_id) DO UPDATE SET period = EXCLUDED.period",
        SqlState::NOT_NULL_VIOLATION,
    )
    .await;
    // Migration 0021: the log's fields as typed columns (NULL where the log has none).
    let fields: Vec<String> = client
        .query(
            "SELECT concat_ws(' ', log_amount, encode(log_subscriber, 'hex'), log_period,
                 log_attempt, log_reason, log_next_retry_at)
             FROM chain_events ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let want = format!("9990000 {} 2 1 2 {}", "ab".repeat(20), u64::MAX);
    assert_eq!(fields, [String::new(), want]);
    // Migration 0022: no foreign key names chain_events any more (the sink's undo deletes
    // derived rows itself): an event whose subscription still names it can be deleted.
    let keys: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_constraint
             WHERE contype = 'f' AND confrelid = 'chain_events'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 0);
    client
        .execute("DELETE FROM chain_events WHERE id = 2", &[])
        .await
        .unwrap();
}

/// A writer's schema check (`check_known`): the schema this binary writes passes; a newer
/// one (a migration this binary does not know) and an older one (migrations not yet run)
/// are refused, each saying what to do.
#[tokio::test]
async fn a_schema_newer_or_older_than_the_binarys_is_refused_by_the_check() {
    let db = TestDb::create().await;
    let client = db.connect().await;
    chainsub_migrations::check_known(&client).await.unwrap();
    let latest = MIGRATIONS.last().unwrap().version;
    client
        .execute(
            "DELETE FROM schema_migrations WHERE version = $1",
            &[&latest],
        )
        .await
        .unwrap();
    let behind = chainsub_migrations::check_known(&client).await.unwrap_err();
    assert!(
        matches!(behind, Error::Behind { have, want } if have == latest - 1 && want == latest),
        "{behind}"
    );
    client
        .execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, 'x', 'x'), (9999, 'future', 'x')",
            &[&latest],
        )
        .await
        .unwrap();
    let ahead = chainsub_migrations::check_known(&client).await.unwrap_err();
    assert!(matches!(ahead, Error::Unknown(9999)), "{ahead}");
}

/// Migration 0023: each outbox row names its event by row id (a chain event, a retraction
/// or a renewal-at-risk observation), backfilled from the public id; the one live row per
/// event is kept by that id; a row written as the previous release writes it (no id) is
/// refused, and the writer epoch moves on.
#[tokio::test]
async fn outbox_rows_name_their_event_by_row_id_from_migration_23() {
    let (_db, client) = schema_before(23).await;
    client
        .batch_execute(
            "INSERT INTO chain_events (id, public_id, chain_id, contract, block_number, block_hash,
                 block_time, transaction_hash, transaction_index, log_index, name, kind,
                 merchant_wallet, topics, data)
             VALUES (10, 'evt_a', 31337, '\\x00', 5, '\\x01', now(), '\\x02', 0, 0,
                     'SubscriptionCharged', 'subscription.charged', '\\x02', '{}', '\\x');
             INSERT INTO event_retractions (id, public_id, chain_id, contract, merchant_wallet,
                 retracted_event_id, retracted_kind, block_number, block_hash, block_time,
                 transaction_hash, log_index, ancestor_block, ancestor_hash)
             VALUES (11, 'evt_r', 31337, '\\x00', '\\x02', 'evt_gone', 'subscription.charged',
                     6, '\\x03', now(), '\\x04', 0, 5, '\\x01');
             INSERT INTO renewal_risks (id, public_id, chain_id, contract, merchant_wallet,
                 subscription_id, plan_id, period, reason, amount, required, available, due_at,
                 block_number, block_hash, block_time)
             VALUES (12, 'evt_k', 31337, '\\x00', '\\x02', 1, 1, 2, 'balance', 5, 5, 1, now(),
                     5, '\\x01', now());
             INSERT INTO indexer_cursor (chain_id, contract, block_number, block_hash,
                 writer_epoch)
             VALUES (31337, '\\x00', 6, '\\x03', 5);
             INSERT INTO webhook_outbox (event_public_id, merchant_wallet, test_payload, retracted_at)
             VALUES ('evt_a', '\\x02', NULL, NULL), ('evt_r', '\\x02', NULL, NULL),
                    ('evt_k', '\\x02', NULL, NULL), ('evt_test', '\\x02', '{}', NULL),
                    ('evt_gone', '\\x02', NULL, now()), ('evt_nobody', '\\x02', NULL, NULL);",
        )
        .await
        .unwrap();
    apply(&client, |v| v >= 23).await;

    let rows = text_and_number(
        &client,
        "SELECT event_public_id, event_id FROM webhook_outbox ORDER BY id",
    )
    .await;
    let want: Vec<(String, Option<i64>)> = [
        ("evt_a", Some(10)),
        ("evt_r", Some(11)),
        ("evt_k", Some(12)),
        ("evt_test", None),
        ("evt_gone", None),
        ("evt_nobody", Some(-6)),
    ]
    .into_iter()
    .map(|(e, id)| (e.to_string(), id))
    .collect();
    assert_eq!(rows, want);
    let epoch: i64 = client
        .query_one("SELECT writer_epoch FROM indexer_cursor", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        epoch, 8,
        "an indexer of the previous release is fenced (and 0025 and 0030 move it on again)"
    );

    // The previous release's insert (no row id, its conflict target the public id) fails.
    for (sql, code) in [
        (
            "INSERT INTO webhook_outbox (event_public_id, merchant_wallet) VALUES ('evt_b', '\\x02')",
            SqlState::CHECK_VIOLATION,
        ),
        (
            "INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet) VALUES (13, 'evt_b', '\\x02')
             ON CONFLICT (event_public_id) WHERE test_payload IS NULL AND retracted_at IS NULL DO NOTHING",
            SqlState::INVALID_COLUMN_REFERENCE,
        ),
    ] {
        assert_refused(&client, sql, code).await;
    }
    // Every existing row passes the CHECK: the row of an event nobody holds can still be
    // claimed (a dispatcher's UPDATE, a lease since migration 0026), the retracted one still
    // updated.
    let updated = client
        .execute(
            "UPDATE webhook_outbox SET attempts = attempts + 1, locked_until = now() + interval '30 seconds'
             WHERE event_public_id IN ('evt_nobody', 'evt_gone')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(updated, 2);
    // One live row per event, by row id: a second row for event 10 is not written.
    let again = client
        .execute(
            "INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet) VALUES (10, 'evt_a', '\\x02')
             ON CONFLICT (event_id) WHERE test_payload IS NULL AND retracted_at IS NULL DO NOTHING",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(again, 0);
}

/// Migration 0024: webhook attempts lose their foreign key to the outbox (the dispatcher and a
/// reorg's undo keep that link; `indexer verify` reports a broken one) and the outbox its
/// redundant due index; nothing else goes.
#[tokio::test]
async fn attempts_lose_their_foreign_key_and_the_outbox_its_due_index_in_migration_24() {
    let (_db, client) = schema_before(24).await;
    let (keys, before) = attempts_keys_and_outbox_indexes(&client).await;
    assert_eq!(keys, 1);
    assert!(
        before.contains(&"webhook_outbox_due".to_string()),
        "{before:?}"
    );
    apply(&client, |v| v == 24).await;
    let (keys, after) = attempts_keys_and_outbox_indexes(&client).await;
    assert_eq!(keys, 0);
    let mut expected = before.clone();
    expected.retain(|i| i != "webhook_outbox_due");
    assert_eq!(after, expected);
}

/// The foreign keys of `webhook_attempts` and the indexes of `webhook_outbox`.
async fn attempts_keys_and_outbox_indexes(client: &tokio_postgres::Client) -> (i64, Vec<String>) {
    let keys: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_constraint
             WHERE conrelid = 'webhook_attempts'::regclass AND contype = 'f'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let indexes = column(
        client,
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'webhook_outbox' ORDER BY 1",
    )
    .await;
    (keys, indexes)
}

/// Migration 0025: each event's snapshot (chain events, retractions, renewal-at-risk
/// observations) moves from JSON into typed columns with the same values; a row without one
/// keeps none; the writer epoch moves on; a partial snapshot is refused.
#[tokio::test]
async fn snapshots_become_typed_columns_with_the_same_values_in_migration_25() {
    let (_db, client) = schema_before(25).await;
    client
        .batch_execute(&format!(
            "INSERT INTO chain_events (id, public_id, chain_id, contract, block_number, block_hash,
                 block_time, transaction_hash, transaction_index, log_index, name, kind,
                 merchant_wallet, subscription_id, topics, data, snapshot)
             VALUES (10, 'evt_a', 31337, '\\x00', 5, '\\x01', now(), '\\x02', 0, 0,
                     'PaymentFailed', 'subscription.payment_failed', '\\x02', 1, '{{}}', '\\x',
                     '{snapshot}'),
                    (11, 'evt_b', 31337, '\\x00', 5, '\\x01', now(), '\\x02', 0, 1,
                     'SubscriptionCharged', 'subscription.charged', '\\x02', 2, '{{}}', '\\x',
                     NULL),
                    (14, 'evt_c', 31337, '\\x00', 5, '\\x01', now(), '\\x02', 0, 2,
                     'SubscriptionCharged', 'subscription.charged', '\\x02', 3, '{{}}', '\\x',
                     '{active}');
             INSERT INTO event_retractions (id, public_id, chain_id, contract, merchant_wallet,
                 retracted_event_id, retracted_kind, block_number, block_hash, block_time,
                 transaction_hash, log_index, ancestor_block, ancestor_hash, snapshot)
             VALUES (12, 'evt_r', 31337, '\\x00', '\\x02', 'evt_gone', 'subscription.charged',
                     6, '\\x03', now(), '\\x04', 0, 5, '\\x01', '{snapshot}');
             INSERT INTO renewal_risks (id, public_id, chain_id, contract, merchant_wallet,
                 subscription_id, plan_id, period, reason, amount, required, available, due_at,
                 block_number, block_hash, block_time, snapshot)
             VALUES (13, 'evt_k', 31337, '\\x00', '\\x02', 1, 1, 2, 'balance', 5, 5, 1, now(),
                     5, '\\x01', now(), '{snapshot}');
             INSERT INTO indexer_cursor (chain_id, contract, block_number, block_hash,
                 writer_epoch)
             VALUES (31337, '\\x00', 6, '\\x03', 5);",
            snapshot = SNAPSHOT_0018.replace('\'', "''"),
            // Active: a next payment, no customer reference, a lowercase subscriber.
            active = SNAPSHOT_0018
                .replace("past_due", "active")
                .replace(
                    r#""nextPaymentAt": null"#,
                    r#""nextPaymentAt": "2026-02-01T00:00:00Z""#
                )
                .replace(r#""cus \"7\" é""#, "null")
                .replace(
                    "0xAbAbabABabAbAbABabababaBABAbabAbABABAbAB",
                    &format!("0x{}", "ab".repeat(20))
                ),
        ))
        .await
        .unwrap();
    apply(&client, |v| v >= 25).await;

    let typed = "SELECT snap_id, snap_status, snap_cancel_at_period_end, snap_period,
             to_char(snap_period_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
             to_char(snap_period_end AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
             snap_next_payment_at IS NULL, snap_failed_attempts, encode(snap_subscriber, 'hex'),
             snap_customer_external_id, snap_amount::text, snap_plan_onchain_id";
    for table in ["chain_events", "event_retractions", "renewal_risks"] {
        let rows = client
            .query(&format!("{typed} FROM {table} ORDER BY id"), &[])
            .await
            .unwrap();
        let first = &rows[0];
        let got: (
            String,
            String,
            bool,
            i32,
            String,
            String,
            bool,
            i16,
            String,
            String,
            String,
            i64,
        ) = (
            first.get(0),
            first.get(1),
            first.get(2),
            first.get(3),
            first.get(4),
            first.get(5),
            first.get(6),
            first.get(7),
            first.get(8),
            first.get(9),
            first.get(10),
            first.get(11),
        );
        assert_eq!(
            got,
            (
                "sub_1".to_string(),
                "past_due".to_string(),
                true,
                7,
                "2026-01-01T00:00:00Z".to_string(),
                "2026-02-01T00:00:00Z".to_string(),
                true,
                2,
                "ab".repeat(20),
                "cus \"7\" é".to_string(),
                u128::MAX.to_string(),
                3
            ),
            "{table}"
        );
        // The JSON column is gone.
        assert_refused(
            &client,
            &format!("SELECT snapshot FROM {table}"),
            SqlState::UNDEFINED_COLUMN,
        )
        .await;
    }
    let active = client
        .query_one(
            &format!(
                "{typed}, to_char(snap_next_payment_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                 FROM chain_events WHERE id = 14"
            ),
            &[],
        )
        .await
        .unwrap();
    let got: (&str, bool, Option<&str>, &str, &str) = (
        active.get(1),
        active.get(6),
        active.get(9),
        active.get(8),
        active.get(12),
    );
    assert_eq!(
        got,
        (
            "active",
            false,
            None,
            "ab".repeat(20).as_str(),
            "2026-02-01 00:00:00"
        )
    );
    // The event without a snapshot has none.
    let none: bool = client
        .query_one(
            "SELECT num_nulls(snap_id, snap_status, snap_amount) = 3 FROM chain_events WHERE id = 11",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(none);
    let epoch: i64 = client
        .query_one("SELECT writer_epoch FROM indexer_cursor", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        epoch, 7,
        "an indexer of the previous release is fenced (and 0030 moves it on again)"
    );
    // Part of a snapshot is not one.
    assert_refused(
        &client,
        "UPDATE chain_events SET snap_subscriber = NULL WHERE id = 10",
        SqlState::CHECK_VIOLATION,
    )
    .await;
}

/// Migration 0026: a row a dispatcher holds (`delivering`) becomes `pending` under the same
/// lease and attempt number (no other dispatcher takes it before the lease runs out),
/// `delivering` can no longer be stored, and the outbox keeps room on each page for in-place
/// (HOT) claims.
#[tokio::test]
async fn leased_rows_stay_pending_from_migration_26() {
    let (_db, client) = schema_before(26).await;
    client
        .batch_execute(
            "INSERT INTO webhook_outbox (event_public_id, merchant_wallet, test_payload, status,
                 attempts, locked_until)
             VALUES ('evt_held', '\\x02', '{}', 'delivering', 2, now() + interval '1 minute'),
                    ('evt_done', '\\x02', '{}', 'delivered', 1, NULL),
                    ('evt_waiting', '\\x02', '{}', 'pending', 0, NULL);",
        )
        .await
        .unwrap();
    apply(&client, |v| v == 26).await;
    let rows: Vec<(String, String, i32, bool)> = client
        .query(
            "SELECT event_public_id, status, attempts, locked_until > now() FROM webhook_outbox
             WHERE locked_until IS NOT NULL OR status <> 'pending' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get::<_, Option<bool>>(3).unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("evt_held".to_string(), "pending".to_string(), 2, true),
            ("evt_done".to_string(), "delivered".to_string(), 1, false),
        ]
    );
    assert_refused(
        &client,
        "UPDATE webhook_outbox SET status = 'delivering' WHERE event_public_id = 'evt_waiting'",
        SqlState::CHECK_VIOLATION,
    )
    .await;
    let options: Vec<String> = column(
        &client,
        "SELECT unnest(reloptions) FROM pg_class WHERE relname = 'webhook_outbox'",
    )
    .await;
    assert_eq!(options, ["fillfactor=70"]);
}
