//! `GET /api/v1/ledger`: the reconciliation export, from index rows shaped like the
//! indexer's (the round trip against a real chain is `tests/it/e2e_export.rs`).

use crate::api_common::{App, Opts, seed_cursor, seed_subscription, spawn};
use alloy::primitives::Address;
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts::{MERCHANT, MERCHANT_B};
use serde_json::Value;

fn wallet(i: usize) -> Address {
    DevChain::address(i)
}

/// An API with one confirmation and the export flags `flags` (`--name`, value), serving
/// `/metrics` when `metrics`.
async fn export_app(flags: &[(&str, &str)], metrics: bool) -> App {
    spawn(Opts {
        confirmations: Some(1),
        args: flags
            .iter()
            .flat_map(|(k, v)| [k.to_string(), v.to_string()])
            .collect(),
        metrics,
        ..Opts::default()
    })
    .await
}

/// (status, content type, body) of an export request.
async fn export(app: &App, key: &str, query: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut req = reqwest::Client::new()
        .get(app.url(&format!("/api/v1/ledger{query}")))
        .bearer_auth(key);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ct, r.text().await.unwrap())
}

fn lines(body: &str) -> Vec<Value> {
    body.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn the_export_streams_one_merchants_entries_with_totals_as_ndjson_or_csv() {
    let app = spawn(Opts {
        confirmations: Some(1),
        ..Opts::default()
    })
    .await;
    let a = app.merchant_key(wallet(MERCHANT)).await;
    let b = app.merchant_key(wallet(MERCHANT_B)).await;
    let db = app.db().await;
    seed_cursor(&db, 1000).await;
    let mut subs = Vec::new();
    for id in 1..=3 {
        subs.push(
            seed_subscription(&db, wallet(MERCHANT), id, 1, Some("cus,\"7\""))
                .await
                .0,
        );
    }
    seed_subscription(&db, wallet(MERCHANT_B), 4, 2, None).await;

    // NDJSON by default: A's three charges in chain order, then one total per kind.
    let (status, ct, body) = export(&app, &a, "", None).await;
    assert_eq!(
        (status, ct.as_str()),
        (200, "application/x-ndjson"),
        "{body}"
    );
    let recs = lines(&body);
    assert_eq!(recs.len(), 7, "{body}");
    for (i, r) in recs[..3].iter().enumerate() {
        assert_eq!(r["record"], "entry");
        assert_eq!(r["kind"], "charge");
        assert_eq!(r["subscriptionId"], subs[i].as_str());
        assert_eq!(r["onchainSubscriptionId"], i as i64 + 1);
        assert_eq!(r["blockNumber"], 101 + i as i64);
        assert_eq!(r["logIndex"], 1);
        assert_eq!(r["amount"], "9990000");
        assert_eq!(
            (r["currency"].as_str(), r["decimals"].as_i64()),
            (Some("USDC"), Some(6))
        );
        assert_eq!(r["merchant"], wallet(MERCHANT).to_checksum(None));
        assert_eq!(r["customerExternalId"], "cus,\"7\"");
        assert_eq!(r["transactionHash"].as_str().unwrap().len(), 66);
    }
    assert_eq!(recs[3]["record"], "total");
    assert_eq!(
        (&recs[3]["kind"], &recs[3]["amount"], &recs[3]["entries"]),
        (&"charge".into(), &"29970000".into(), &3.into())
    );
    assert_eq!(
        (&recs[4]["kind"], &recs[4]["amount"], &recs[4]["entries"]),
        (&"failed_charge".into(), &"0".into(), &0.into())
    );
    assert_eq!(
        (recs[4]["fromBlock"].as_i64(), recs[4]["toBlock"].as_i64()),
        (Some(0), Some(1000))
    );
    for (i, kind) in [(5, "proration"), (6, "refund")] {
        assert_eq!(
            (&recs[i]["kind"], &recs[i]["amount"], &recs[i]["entries"]),
            (&kind.into(), &"0".into(), &0.into())
        );
    }

    // The other merchant sees only its own.
    let (_, _, body) = export(&app, &b, "", None).await;
    let recs = lines(&body);
    assert_eq!(recs.len(), 5, "{body}");
    assert_eq!(recs[0]["onchainSubscriptionId"], 4);

    // CSV by parameter or by Accept: a header, the same records, quoted where needed.
    for (query, accept) in [("?format=csv", None), ("", Some("text/csv"))] {
        let (status, ct, body) = export(&app, &a, query, accept).await;
        assert_eq!((status, ct.as_str()), (200, "text/csv; charset=utf-8"));
        let rows: Vec<&str> = body.split_terminator("\r\n").collect();
        assert_eq!(rows.len(), 8, "{body}");
        assert!(rows[0].starts_with("record,eventId,kind,chainId,contract,blockNumber"));
        assert!(rows[1].starts_with("entry,evt_"), "{}", rows[1]);
        assert!(rows[1].contains(",\"cus,\"\"7\"\"\","), "{}", rows[1]);
        assert!(rows[4].starts_with("total,,charge,"), "{}", rows[4]);
        assert!(
            rows[4].ends_with(",USDC,6,29970000,0,1000,,,3"),
            "{}",
            rows[4]
        );
    }

    // Ranges: by block (inclusive) and by block time ([from, to)).
    let (_, _, body) = export(&app, &a, "?fromBlock=102&toBlock=102", None).await;
    let recs = lines(&body);
    assert_eq!(recs.len(), 5, "{body}");
    assert_eq!(recs[0]["blockNumber"], 102);
    assert_eq!(recs[1]["fromBlock"], 102);
    let t2 = recs[0]["blockTime"].as_str().unwrap().to_string();
    let (_, _, body) = export(&app, &a, &format!("?from={t2}"), None).await;
    let recs = lines(&body);
    assert_eq!(recs.len(), 6, "{body}");
    assert_eq!(recs[0]["blockNumber"], 102);
    assert_eq!(recs[2]["fromTime"], t2.as_str());
    let (_, _, body) = export(&app, &a, &format!("?to={t2}"), None).await;
    assert_eq!(lines(&body).len(), 5, "{body}");

    // Bad input is a clear 400; no key is a 401.
    for (query, param) in [
        ("?format=xml", "format"),
        ("?fromBlock=-1", "fromBlock"),
        ("?from=yesterday", "from"),
        ("?limit=5", "limit"),
    ] {
        let (status, ct, body) = export(&app, &a, query, None).await;
        assert_eq!(
            (status, ct.as_str()),
            (400, "application/json"),
            "{query}: {body}"
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["param"], param, "{query}: {body}");
    }
    // An empty range is no error: nothing but the totals.
    for query in [
        "?fromBlock=5&toBlock=4".to_string(),
        format!("?from={t2}&to={t2}"),
    ] {
        let (status, _, body) = export(&app, &a, &query, None).await;
        let recs = lines(&body);
        assert_eq!((status, recs.len()), (200, 4), "{query}: {body}");
        assert_eq!(recs[0]["entries"], 0);
    }
    let (status, _, _) = export(&app, "sk_live_nope", "", None).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn by_default_the_export_stops_at_the_confirmed_height() {
    let app = spawn(Opts {
        confirmations: Some(3),
        ..Opts::default()
    })
    .await;
    let a = app.merchant_key(wallet(MERCHANT)).await;
    let db = app.db().await;
    for id in 1..=3 {
        seed_subscription(&db, wallet(MERCHANT), id, 1, None).await;
    }
    // Blocks 101..=103 hold the charges; indexed through 104, 3 confirmations: 102 is the
    // highest block nothing can reorganize away.
    seed_cursor(&db, 104).await;
    let (_, _, body) = export(&app, &a, "", None).await;
    let recs = lines(&body);
    assert_eq!(recs.len(), 6, "{body}");
    assert_eq!(recs[3]["toBlock"], 102);
    // Asked for explicitly, the unconfirmed block is served too.
    let (_, _, body) = export(&app, &a, "?toBlock=103", None).await;
    assert_eq!(lines(&body).len(), 7, "{body}");
}

/// `n` charges of `wallet` in blocks 1..=n, as bulk rows shaped like the indexer's.
async fn seed_charges(db: &tokio_postgres::Client, wallet: Address, n: i64) {
    seed_charges_from(db, wallet, 1, n).await
}

/// `n` charges of `wallet` in blocks `first..first + n`.
async fn seed_charges_from(db: &tokio_postgres::Client, wallet: Address, first: i64, n: i64) {
    db.execute(
        "WITH e AS (
             INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash,
                 block_time, transaction_hash, transaction_index, log_index, name, kind,
                 merchant_wallet, subscription_id, plan_id, topics, data)
             SELECT 'evt_' || md5('bulk' || g), 31337, '\\xcccccccccccccccccccccccccccccccccccccccc'::bytea,
                 g, decode(md5('b' || g) || md5('B' || g), 'hex'), now(),
                 decode(md5('t' || g) || md5('T' || g), 'hex'), 0, 0, 'SubscriptionCharged',
                 'subscription.charged', $1, 1000 + g, 1,
                 ARRAY['\\x00'::bytea, '\\x00'::bytea, '\\x00'::bytea,
                       ('\\x' || repeat('00', 12) || '4444444444444444444444444444444444444444')::bytea],
                 '\\x'::bytea
             FROM generate_series($3::int8, $3::int8 + $2::int8 - 1) g
             RETURNING id, subscription_id, block_time)
         INSERT INTO ledger_entries (event_id, chain_id, subscription_id, kind, amount, period,
             attempt, block_time)
         SELECT id, 31337, subscription_id, 'charge', 1000000, 1, 1, block_time FROM e",
        &[&wallet.as_slice(), &n, &first],
    )
    .await
    .unwrap();
}

/// A raw connection that asks for `key`'s export, reads the status line (200) and then
/// nothing more: the export stalls once the buffers are full.
async fn stalled_export(app: &App, key: &str) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base.trim_start_matches("http://").to_string();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    conn.write_all(
        format!(
            "GET /api/v1/ledger HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    conn
}

#[tokio::test]
async fn exports_run_a_few_at_a_time_and_a_reader_that_stops_reading_is_let_go() {
    let app = export_app(
        &[
            ("--ledger-exports-max", "1"),
            ("--ledger-export-stall-secs", "1"),
        ],
        false,
    )
    .await;
    let a = app.merchant_key(wallet(MERCHANT)).await;
    let b = app.merchant_key(wallet(MERCHANT_B)).await;
    let db = app.db().await;
    seed_cursor(&db, 100_000).await;
    // ~25 MB of NDJSON: more than the channel and both sockets' buffers hold.
    seed_charges(&db, wallet(MERCHANT), 30_000).await;

    // A client asks for the export and then reads nothing.
    let stuck = stalled_export(&app, &a).await;

    // While it holds the only export slot, another merchant's export is refused, clearly.
    let (status, _, body) = export(&app, &b, "?toBlock=10", None).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("exports_busy"), "{body}");

    // The stalled export is abandoned after LEDGER_EXPORT_STALL_SECS, and its slot (and
    // database connection) serve the next export in full.
    let body = chainsub_tests::wait_for_some("the export slot to be free", || async {
        let (status, _, body) = export(&app, &b, "?toBlock=10", None).await;
        (status == 200).then_some(body)
    })
    .await;
    let recs = lines(&body);
    assert_eq!(recs.len(), 4, "B has no entries: its four totals only");
    drop(stuck);
}

/// Issue 46, point 10: one merchant's slow reader used to be able to take every export slot
/// (two `--limit-rate` exports: everyone else 429 `exports_busy`). A merchant now runs one
/// export at a time; its second is refused, and another merchant's export runs meanwhile.
#[tokio::test]
async fn a_merchant_runs_one_export_at_a_time_and_others_are_not_held_up() {
    let app = export_app(
        &[
            ("--ledger-exports-max", "2"),
            ("--ledger-export-stall-secs", "60"),
        ],
        false,
    )
    .await;
    let a = app.merchant_key(wallet(MERCHANT)).await;
    let b = app.merchant_key(wallet(MERCHANT_B)).await;
    let db = app.db().await;
    seed_cursor(&db, 100_000).await;
    seed_charges(&db, wallet(MERCHANT), 30_000).await;

    // A's client asks for its export and reads almost nothing.
    let slow = stalled_export(&app, &a).await;

    let (status, _, body) = export(&app, &a, "?toBlock=10", None).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("export_in_progress"), "{body}");
    let (status, _, body) = export(&app, &b, "", None).await;
    assert_eq!(status, 200, "another merchant's export runs: {body}");
    drop(slow);
}

/// Backends of the test database, other than this one, that hold a snapshot (a
/// `backend_xmin`: vacuum cannot remove anything newer, anywhere in the database).
async fn snapshots_held(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND backend_xmin IS NOT NULL
            AND pid <> pg_backend_pid()",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Issue 46, point 10: an export used to be one statement streamed to the client, so a
/// slow reader kept a backend `active` with an old `backend_xmin` for as long as it read
/// (vacuum blocked everywhere). It now reads short keyset pages, each its own statement,
/// and waits for the client holding no snapshot and no connection; pages join up exactly.
#[tokio::test]
async fn a_slow_reader_holds_no_snapshot_and_pages_join_up_exactly() {
    let app = export_app(
        &[
            ("--ledger-exports-max", "2"),
            ("--ledger-export-stall-secs", "600"),
            ("--ledger-export-page-rows", "700"),
        ],
        false,
    )
    .await;
    let a = app.merchant_key(wallet(MERCHANT)).await;
    let b = app.merchant_key(wallet(MERCHANT_B)).await;
    let db = app.db().await;
    seed_cursor(&db, 100_000).await;
    seed_charges(&db, wallet(MERCHANT), 30_000).await;
    seed_charges_from(&db, wallet(MERCHANT_B), 50_001, 3_000).await;

    let slow = stalled_export(&app, &a).await;
    // Once its buffers are full the export waits for the client, with no snapshot held: no
    // backend holds one in ten looks in a row (a page's statement holds one while it runs).
    chainsub_tests::wait_until("no snapshot held while the slow reader waits", || async {
        for _ in 0..10 {
            if snapshots_held(&db).await != 0 {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
        true
    })
    .await;

    // Meanwhile another merchant's export runs, in pages of 700 that join up exactly.
    let (status, _, body) = export(&app, &b, "", None).await;
    assert_eq!(status, 200, "{body}");
    let recs = lines(&body);
    let entries: Vec<&Value> = recs.iter().filter(|r| r["record"] == "entry").collect();
    assert_eq!(entries.len(), 3_000, "every entry once");
    let blocks: Vec<i64> = entries
        .iter()
        .map(|r| r["blockNumber"].as_i64().unwrap())
        .collect();
    assert!(
        blocks.windows(2).all(|w| w[0] < w[1]),
        "chain order, no repeats"
    );
    assert_eq!(
        recs.iter()
            .find(|r| r["record"] == "total" && r["kind"] == "charge")
            .map(|t| t["entries"].clone()),
        Some(3_000.into())
    );
    drop(slow);
}

/// A reader that keeps taking a trickle never stalls, so the stall bound alone let it hold
/// its slot for hours: `LEDGER_EXPORT_MAX_SECS` ends any export after that long (the body
/// then has no totals: cut short, to be resumed from its last block).
#[tokio::test]
async fn an_export_ends_after_its_maximum_duration() {
    let app = export_app(
        &[
            ("--ledger-export-stall-secs", "600"),
            ("--ledger-export-max-secs", "1"),
        ],
        true,
    )
    .await;
    let a = app.merchant_key(wallet(MERCHANT)).await;
    let db = app.db().await;
    seed_cursor(&db, 100_000).await;
    // ~57 MB: more than a reading client's socket buffers grow to here (32 MiB + 4 MiB).
    seed_charges(&db, wallet(MERCHANT), 80_000).await;

    // A client that reads a trickle (1 KiB every 50 ms): never stalled, ~20 KiB/s.
    let mut conn = stalled_export(&app, &a).await;
    let trickle = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1024];
        let mut total = 0usize;
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    // It is cut once the maximum duration is up (the 57 MB body would take the trickle most
    // of an hour), and the merchant's slot is free again.
    chainsub_tests::wait_until("the export cut for its maximum duration", || async {
        app.metrics()
            .await
            .contains(r#"api_ledger_exports_cut_total{reason="max_duration"} 1"#)
    })
    .await;
    chainsub_tests::wait_until("the merchant's export slot to be free", || async {
        export(&app, &a, "?toBlock=10", None).await.0 == 200
    })
    .await;
    trickle.abort();
}

/// The default export ends at the confirmed height the index has when it is asked, not at the
/// API's last periodic reading of it: an export right after `/health` showed a block covers
/// that block's confirmed entries.
#[tokio::test]
async fn the_default_export_ends_at_the_height_the_index_has_now() {
    let app = export_app(&[], false).await;
    let key = app.merchant_key(wallet(MERCHANT)).await;
    let db = app.db().await;
    seed_cursor(&db, 10).await;
    // Past the API's periodic reading of the primary's height (every 200 ms).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for block in 11..16 {
        seed_cursor(&db, block).await;
        let r = reqwest::Client::new()
            .get(app.url("/api/v1/ledger"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let height = r.headers()["chainsub-indexed-block"]
            .to_str()
            .unwrap()
            .to_string();
        let body = r.text().await.unwrap();
        assert_eq!(
            height,
            block.to_string(),
            "the export read the index at {block}"
        );
        let totals = lines(&body);
        assert!(
            totals.iter().all(|t| t["toBlock"] == block),
            "with one confirmation the range ends at {block}: {body}"
        );
    }
}
