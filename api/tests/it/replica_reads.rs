//! Reads of the chain index from a hot-standby streaming replica (`READ_DATABASE_URL`) while
//! its index is within `READ_MAX_LAG_BLOCKS` of the primary's, else from the primary: a real
//! primary and a real standby made with `pg_basebackup` (`chainsub_tests::pg_cluster`).

use std::time::Duration;

use crate::api_common::{App, Opts, seed_cursor, seed_subscription, spawn_with};
use chainsub_tests::chain::accounts::MERCHANT;
use chainsub_tests::pg_cluster::ReplicatedPg;
use chainsub_tests::{DevChain, TestDb};

/// Reads served so far from `source` (`api_index_reads_total`).
async fn reads_from(app: &App, source: &str) -> u64 {
    let metrics = app.metrics().await;
    let series = format!("api_index_reads_total{{source=\"{source}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The height a response reports (`Chainsub-Indexed-Block`).
fn indexed_block(r: &crate::api_common::Res) -> i64 {
    r.header("chainsub-indexed-block")
        .expect("the height it read")
        .parse()
        .unwrap()
}

/// The requests of the test, with every height a response reported, in order.
struct Reader<'a> {
    app: &'a App,
    key: String,
    heights: Vec<i64>,
}

impl Reader<'_> {
    /// Lists the subscriptions: the height reported and the ids listed.
    async fn list(&mut self) -> (i64, Vec<String>) {
        let r = self.app.get("/api/v1/subscriptions", &self.key).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let height = indexed_block(&r);
        if let Some(last) = self.heights.last() {
            assert!(
                height >= *last,
                "a response reported height {height} after one reported {last}"
            );
        }
        self.heights.push(height);
        let ids = r.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        (height, ids)
    }

    /// Lists until `done` holds for what a list answered (and the source's count), bounded.
    async fn until(&mut self, what: &str, source: &str, done: impl Fn(i64, &[String]) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let before = reads_from(self.app, source).await;
            let (height, ids) = self.list().await;
            if done(height, &ids) && reads_from(self.app, source).await > before {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: last list at {height} with {ids:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn reads_leave_a_replica_past_the_lag_bound_or_down_and_come_back_to_it() {
    let pg = ReplicatedPg::start();
    let db = TestDb::create_on(&pg.primary.url("postgres")).await;
    let replica_url = pg.standby.url(&db.name);
    let app = spawn_with(
        db,
        None,
        Opts {
            metrics: true,
            args: vec![
                "--read-database-url".into(),
                replica_url.clone(),
                "--read-max-lag-blocks".into(),
                "2".into(),
            ],
            ..Opts::default()
        },
    )
    .await;
    let primary = app.db().await;
    let merchant = DevChain::address(MERCHANT);
    let key = app.merchant_key(merchant).await;
    let (first, _) = seed_subscription(&primary, merchant, 1, 1, None).await;
    seed_cursor(&primary, 110).await;
    let mut reader = Reader {
        app: &app,
        key,
        heights: Vec::new(),
    };
    // The replica has replayed it: reads go there.
    reader
        .until("reads on the caught-up replica", "replica", |h, ids| {
            h == 110 && ids.len() == 1
        })
        .await;

    // Replay paused: a primary one block ahead is within the bound, the replica still serves.
    let standby = chainsub_tests::db::connect(&pg.standby.url("postgres")).await;
    standby
        .batch_execute("SELECT pg_wal_replay_pause()")
        .await
        .unwrap();
    seed_cursor(&primary, 111).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    reader
        .until("a replica within the bound", "replica", |h, _| h == 110)
        .await;

    // A subscription the paused replica has not replayed: its GET is answered by the primary
    // (the replica's "not found" is not an answer), and the list follows from there.
    let (third, _) = seed_subscription(&primary, merchant, 3, 1, None).await;
    let got = app
        .get(&format!("/api/v1/subscriptions/{third}"), &reader.key)
        .await;
    assert_eq!(got.status, 200, "{:?}", got.body);
    reader.heights.push(indexed_block(&got));

    // An export to a block only the primary has reported from there: later reads must not
    // report less, though the paused replica is still within the bound.
    seed_cursor(&primary, 112).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let export = app.get("/api/v1/ledger?toBlock=112", &reader.key).await;
    assert_eq!(export.status, 200, "{:?}", export.body);
    let h = indexed_block(&export);
    assert_eq!(
        h, 112,
        "the replica has not got block 112: the primary answered"
    );
    reader.heights.push(h);
    let (h, _) = reader.list().await;
    assert_eq!(h, 112, "a replica behind a reported height is passed over");

    // Past the bound: the primary serves, with what only it has.
    let (second, _) = seed_subscription(&primary, merchant, 2, 1, None).await;
    seed_cursor(&primary, 120).await;
    reader
        .until("the primary past the bound", "primary", |h, ids| {
            h == 120 && ids.len() == 3
        })
        .await;
    let replica_reads = reads_from(&app, "replica").await;
    for _ in 0..20 {
        let (h, ids) = reader.list().await;
        assert_eq!(
            (h, ids.len()),
            (120, 3),
            "never the paused replica's older index"
        );
    }
    assert_eq!(
        reads_from(&app, "replica").await,
        replica_reads,
        "no read went to the replica while it was past the bound"
    );

    // Replay resumed: back to the replica, which now has both.
    standby
        .batch_execute("SELECT pg_wal_replay_resume()")
        .await
        .unwrap();
    reader
        .until("back on the replica", "replica", |h, ids| {
            h == 120 && ids.contains(&first) && ids.contains(&second)
        })
        .await;

    // The replica down: every read answered from the primary; back when it is up again.
    pg.standby.kill();
    let failed_before = reads_from(&app, "primary").await;
    for _ in 0..20 {
        let (h, ids) = reader.list().await;
        assert_eq!((h, ids.len()), (120, 3));
    }
    assert!(reads_from(&app, "primary").await >= failed_before + 20);
    pg.standby.restart();
    reader
        .until("back on the restarted replica", "replica", |h, _| h == 120)
        .await;
}
