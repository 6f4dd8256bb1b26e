//! Indexer benchmark: builds a chain of >= 100k contract events on anvil (spread: ~10 events
//! per block; dense: thousands per block), then measures end-to-end backfill, the source
//! alone, the sink alone (decode + write from recorded logs), live latency (block available
//! at the RPC -> committed) and recovery from a depth-10 reorg. Prints a table.
//!
//! `bench/indexer.sh` runs it. Knobs: BENCH_ACCOUNTS (default 200), BENCH_PLANS (170),
//! BENCH_SHAPES (`spread,dense`), BENCH_LIVE_SAMPLES (200), BENCH_CHAIN (`generated`: the
//! events emitted directly by `contracts/LogFlood.sol`, seconds to build; `contract`: real
//! `subscribe`/`charge` transactions, ~40 minutes for 100k events on 2 cores),
//! BENCH_BINARY_ONLY=1 (only the release `indexer` binary's backfill and its own peak RSS),
//! BENCH_INDEXER_WRAPPER (a profiler command to run that binary under), BENCH_SINK_PREFILL
//! (subscription counts, ten events each, e.g. `100000,1000000`: the sink alone again onto
//! an index already holding that many rows, with its `\copy` limit there). Not a test: no
//! timing is asserted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::sol_types::SolCall;
use chainsub_abi::{MockUSDC, SubscriptionManager as SM};
use chainsub_indexer::block::{Block, Cursor};
use chainsub_indexer::config::IndexerConfig;
use chainsub_indexer::ops::Status;
use chainsub_indexer::sink::Sink;
use chainsub_indexer::source::{BlockSource, FetchConfig, Fetcher, RpcSource};
use chainsub_indexer::{run, writer};
use chainsub_tests::bulk::Bulk;
use chainsub_tests::{Anvil, DevChain, TestDb};
use serde_json::json;
use tokio::sync::watch;

const GAS: u64 = 300_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Built {
    chain: DevChain,
    events: u64,
    blocks: u64,
    build_secs: f64,
}

/// Builds a chain: `plans` plans, every account subscribed to every plan, then a month later
/// every subscription charged (a quarter of the accounts run out of funds: failed charges).
async fn build_chain(shape: &str, accounts: u64, plans: u64) -> Built {
    let t = Instant::now();
    let anvil = Anvil::start_with(&[
        "--accounts",
        &(accounts + 2).to_string(),
        "--gas-limit",
        "4000000000",
        "--block-base-fee-per-gas",
        "0",
    ]);
    let chain = DevChain::with_anvil(anvil).await;
    let rpc = Bulk::new(&chain);
    let addrs: Vec<Address> =
        serde_json::from_value(rpc.raw("eth_accounts", json!([])).await).unwrap();
    let operator = addrs[0];
    let keeper = addrs[1];
    let subscribers = &addrs[2..];
    rpc.raw("evm_setAutomine", json!([false])).await;
    let mut nonce_op: u64 = serde_json::from_value::<U256>(
        rpc.raw("eth_getTransactionCount", json!([operator, "latest"]))
            .await,
    )
    .unwrap()
    .to();
    // Setup: plans, funds, approvals (in big blocks whatever the shape).
    let mut txs = Vec::new();
    for p in 0..plans {
        let call = SM::createPlanCall {
            merchant: addrs[(p % 2) as usize + 2],
            amount: U256::from(1_000_000u64),
            planRef: B256::from(U256::from(p + 1)),
        };
        txs.push((operator, chain.manager, call.abi_encode(), nonce_op));
        nonce_op += 1;
    }
    for (i, a) in subscribers.iter().enumerate() {
        // Every fourth account can pay the first periods but not all the renewals.
        let funds = if i % 4 == 0 {
            plans + plans / 2
        } else {
            3 * plans
        };
        let mint = MockUSDC::mintCall {
            to: *a,
            amount: U256::from(funds * 1_000_000),
        };
        txs.push((operator, chain.usdc, mint.abi_encode(), nonce_op));
        nonce_op += 1;
        let approve = MockUSDC::approveCall {
            spender: chain.manager,
            amount: U256::MAX,
        };
        txs.push((*a, chain.usdc, approve.abi_encode(), 0));
    }
    rpc.send_and_mine(&txs, GAS, None).await;
    // Subscriptions, then renewals, shaped by the block gas limit.
    // Spread: 5 subscribes (10 events) or 10 charges (10 events) per block.
    let spread = shape == "spread";
    let block_gas = if spread { 5 * GAS } else { 4_000_000_000 };
    rpc.raw("evm_setBlockGasLimit", json!([format!("{block_gas:#x}")]))
        .await;
    let mut subs = Vec::new();
    for p in 0..plans {
        for a in subscribers {
            let call = SM::subscribeCall {
                planId: U256::from(p + 1),
                merchant: addrs[(p % 2) as usize + 2],
                amount: U256::from(1_000_000u64),
                customerRef: B256::ZERO,
            };
            subs.push((*a, chain.manager, call.abi_encode(), 1 + p));
        }
    }
    rpc.send_and_mine(&subs, GAS, spread.then_some(5)).await;
    rpc.raw("evm_increaseTime", json!([32 * 86_400])).await;
    let total_subs = plans * subscribers.len() as u64;
    let charges: Vec<_> = (0..total_subs)
        .map(|s| {
            let call = SM::chargeCall {
                subscriptionId: U256::from(s + 1),
            };
            (keeper, chain.manager, call.abi_encode(), s)
        })
        .collect();
    rpc.send_and_mine(&charges, GAS / 2, spread.then_some(10))
        .await;
    finish(chain, t).await
}

/// Back to a normal block gas limit and automine, then the chain's events counted.
async fn finish(chain: DevChain, started: Instant) -> Built {
    let rpc = Bulk::new(&chain);
    rpc.raw(
        "evm_setBlockGasLimit",
        json!([format!("{:#x}", 30_000_000u64)]),
    )
    .await;
    rpc.raw("evm_setAutomine", json!([true])).await;
    let head = chain.provider.get_block_number().await.unwrap();
    // Counting only: no cap on the answer.
    let logs = RpcSource::new(&chain.anvil.rpc_url(), chain.manager)
        .unwrap()
        .with_max_logs_response_bytes(usize::MAX);
    let events = count_logs(&logs, chain.deploy_block, head).await;
    Built {
        blocks: head - chain.deploy_block,
        events,
        chain,
        build_secs: started.elapsed().as_secs_f64(),
    }
}

/// The same shapes generated directly (issue 13, point 4): `contracts/LogFlood.sol` at the
/// manager's address emits the manager's own events — every plan, every subscription created
/// and charged (period 1), and a month later every renewal charged or, for every fourth,
/// failed — in one transaction per block (spread: 5 subscriptions or 10 renewals, ~10
/// events) or 25 per block (dense: a plan's subscriptions per transaction, ~10,000 events per
/// block). The logs are what a real chain of that shape holds; building them takes seconds
/// instead of the ~40 minutes of real `subscribe`/`charge` transactions for 100k events here.
async fn build_generated(shape: &str, accounts: u64, plans: u64) -> Built {
    use chainsub_tests::flood::LogFlood;
    let t = Instant::now();
    let anvil = Anvil::start_with(&["--gas-limit", "4000000000", "--block-base-fee-per-gas", "0"]);
    let chain = DevChain::with_anvil(anvil).await;
    chainsub_tests::flood::install(&chain).await;
    let rpc = Bulk::new(&chain);
    let op = DevChain::address(0);
    let merchants = [DevChain::address(2), DevChain::address(3)];
    let mut nonce: u64 = serde_json::from_value::<U256>(
        rpc.raw("eth_getTransactionCount", json!([op, "latest"]))
            .await,
    )
    .unwrap()
    .to();
    let spread = shape == "spread";
    // (subscriptions per tx, renewals per tx, gas per tx, txs per block)
    let (subs_per_tx, renewals_per_tx, tx_gas, per_block) = if spread {
        (5, 10, 300_000u64, 1u64)
    } else {
        (accounts, accounts, 4_000_000, 25)
    };
    let start = chain.now().await;
    let amount = U256::from(1_000_000u64);
    let (mut created, mut renewals) = (Vec::new(), Vec::new());
    let mut next_id = 1u64;
    for p in 0..plans {
        let merchant = merchants[(p % 2) as usize];
        let first = next_id;
        next_id += accounts;
        for (id, count) in chunks(first, accounts, subs_per_tx) {
            let call = LogFlood::floodCall {
                planId: U256::from(p + 1),
                merchant,
                amount,
                firstId: U256::from(id),
                count: U256::from(count),
                start,
                withPlan: id == first,
            };
            created.push((op, chain.manager, call.abi_encode(), 0));
        }
        for (id, count) in chunks(first, accounts, renewals_per_tx) {
            let call = LogFlood::renewCall {
                planId: U256::from(p + 1),
                merchant,
                amount,
                firstId: U256::from(id),
                count: U256::from(count),
                failEvery: U256::from(4),
                start: start + 30 * 86_400,
            };
            renewals.push((op, chain.manager, call.abi_encode(), 0));
        }
    }
    for tx in created.iter_mut().chain(renewals.iter_mut()) {
        tx.3 = nonce;
        nonce += 1;
    }
    rpc.raw("evm_setAutomine", json!([false])).await;
    rpc.raw(
        "evm_setBlockGasLimit",
        json!([format!("{:#x}", tx_gas * per_block)]),
    )
    .await;
    rpc.send_and_mine(&created, tx_gas, Some(per_block)).await;
    rpc.raw("evm_increaseTime", json!([32 * 86_400])).await;
    rpc.send_and_mine(&renewals, tx_gas, Some(per_block)).await;
    let built = finish(chain, t).await;
    // + the real manager's OperatorChanged, emitted when it was deployed.
    assert_eq!(
        built.events,
        plans + 3 * plans * accounts + 1,
        "every generated event is on the chain (a transaction ran out of gas?)"
    );
    built
}

/// `first..first + total` in runs of at most `per`: (first id, count) of each.
fn chunks(first: u64, total: u64, per: u64) -> impl Iterator<Item = (u64, u64)> {
    (first..first + total)
        .step_by(per as usize)
        .map(move |id| (id, per.min(first + total - id)))
}

async fn count_logs(src: &RpcSource, from: u64, to: u64) -> u64 {
    let mut n = 0;
    let mut start = from;
    while start <= to {
        let end = to.min(start + 999);
        n += src.logs(start, end).await.unwrap().len() as u64;
        start = end + 1;
    }
    n
}

fn config(chain: &DevChain) -> IndexerConfig {
    let mut cfg = IndexerConfig::new(
        chainsub_core::ChainId::new(chain.anvil.chain_id).unwrap(),
        chain.manager,
        chain.deploy_block,
    );
    cfg.confirmations = 0;
    cfg.poll_interval = Duration::from_millis(10);
    cfg.use_finalized_tag = false;
    cfg.fetch = FetchConfig {
        min_backoff: Duration::from_millis(5),
        ..FetchConfig::default()
    };
    cfg
}

async fn cursor(client: &tokio_postgres::Client) -> Option<(u64, B256)> {
    client
        .query_opt("SELECT block_number, block_hash FROM indexer_cursor", &[])
        .await
        .unwrap()
        .map(|r| {
            (
                r.get::<_, i64>(0) as u64,
                B256::from_slice(r.get::<_, &[u8]>(1)),
            )
        })
}

async fn wait_cursor(client: &tokio_postgres::Client, want: (u64, B256)) {
    while cursor(client).await != Some(want) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn head(chain: &DevChain) -> (u64, B256) {
    let b = chain
        .provider
        .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
        .await
        .unwrap()
        .unwrap();
    (b.header.number, b.header.hash)
}

/// This process's peak resident set (VmHWM), in MB.
fn peak_rss_mb() -> f64 {
    peak_rss_mb_of("self")
}

/// A process's peak resident set (VmHWM), in MB (`pid`: a number or `self`).
fn peak_rss_mb_of(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Starts a new peak-RSS window (`VmHWM`): writing 5 to `/proc/self/clear_refs` resets it.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The `indexer` binary (release, as an operator runs it) backfilling the chain into a fresh
/// database, alone in its process: seconds until its cursor reaches the tip, and its peak RSS
/// (VmHWM) in MB. The in-process figures share the bench's heap; this one is the indexer's.
async fn binary_backfill(chain: &DevChain) -> (f64, f64) {
    use std::process::{Command, Stdio};
    let db = TestDb::create().await;
    let client = db.connect().await;
    let tip = head(chain).await;
    let t = Instant::now();
    // BENCH_INDEXER_WRAPPER runs it under a profiler, e.g. `heaptrack -o /tmp/indexer` (the
    // guard then kills the wrapper, and the VmHWM read is the wrapper's: stop the indexer with
    // SIGTERM to have the profile written; the profiler reports its peak).
    let wrapper = std::env::var("BENCH_INDEXER_WRAPPER").unwrap_or_default();
    let mut argv: Vec<std::ffi::OsString> = wrapper.split_whitespace().map(Into::into).collect();
    argv.push(chainsub_tests::bin_path("indexer").into());
    let child = chainsub_tests::ChildGuard(
        Command::new(&argv[0])
            .args(&argv[1..])
            .envs(chainsub_tests::services::test_env(chain, &db, 0))
            .env("INDEXER_POLL_INTERVAL_MS", "10")
            .env("INDEXER_METRICS_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the indexer binary (bench/indexer.sh builds it)"),
    );
    wait_cursor(&client, tip).await;
    let secs = t.elapsed().as_secs_f64();
    let peak = peak_rss_mb_of(&child.id().to_string());
    drop(child);
    (secs, peak)
}

/// Prints the `indexer binary backfill:` line `scripts/bench` reads.
fn print_binary(shape: &str, events: u64, blocks: u64, (secs, peak): (f64, f64)) {
    println!(
        "indexer binary backfill: {shape} | {events} events in {blocks} blocks | {:.0} ev/s ({secs:.2} s) | peak RSS {peak:.0} MB",
        events as f64 / secs
    );
}

/// The tables the sink writes.
const SINK_TABLES: [&str; 6] = [
    "chain_events",
    "chain_plans",
    "subscriptions",
    "ledger_entries",
    "webhook_outbox",
    "block_checkpoints",
];

/// The physical limit of the sink, measured on the rows it wrote: each table's rows read out
/// with a binary COPY, then a timed binary COPY of all of them into empty copies of the tables
/// (`LIKE ... INCLUDING ALL`: the same columns, defaults, constraints and indexes) in one
/// transaction. Returns (seconds, of which the events table, table + index bytes the sink's
/// tables hold).
async fn copy_limit(url: &str) -> (f64, f64, i64) {
    use futures::{SinkExt, TryStreamExt};
    let mut client = chainsub_tests::db::connect(url).await;
    let mut data = Vec::new();
    for t in SINK_TABLES {
        client
            .batch_execute(&format!("CREATE TABLE copy_{t} (LIKE {t} INCLUDING ALL)"))
            .await
            .unwrap();
        let out = client
            .copy_out(&format!("COPY {t} TO STDOUT (FORMAT binary)"))
            .await
            .unwrap();
        let chunks: Vec<bytes::Bytes> = out.try_collect().await.unwrap();
        data.push((t, chunks));
    }
    let bytes: i64 = client
        .query_one(
            "SELECT sum(pg_total_relation_size(t::regclass))::BIGINT FROM unnest($1::TEXT[]) t",
            &[&SINK_TABLES.to_vec()],
        )
        .await
        .unwrap()
        .get(0);
    let t0 = Instant::now();
    let tx = client.transaction().await.unwrap();
    let mut events_secs = 0.0;
    for (t, chunks) in &data {
        let t1 = Instant::now();
        let sink = tx
            .copy_in(&format!("COPY copy_{t} FROM STDIN (FORMAT binary)"))
            .await
            .unwrap();
        futures::pin_mut!(sink);
        for c in chunks {
            sink.send(c.clone()).await.unwrap();
        }
        sink.close().await.unwrap();
        if *t == "chain_events" {
            events_secs = t1.elapsed().as_secs_f64();
        }
    }
    tx.commit().await.unwrap();
    (t0.elapsed().as_secs_f64(), events_secs, bytes)
}

/// Runs `script` with `psql -f` against `url`; stops the bench on any error.
fn psql(url: &str, script: &str) {
    let file = std::env::temp_dir().join(format!("chainsub-bench-{}.sql", std::process::id()));
    std::fs::write(&file, script).unwrap();
    let out = std::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f"])
        .arg(&file)
        .output()
        .expect("psql (Debian's postgresql-client)");
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every row the sink wrote, written to files in `format` (`binary` or `text`) with `psql
/// \copy ... TO`: one file per table of [`SINK_TABLES`] in the returned directory.
fn dump_sink_rows(url: &str, format: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("chainsub-copy-{}-{format}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut dump = String::new();
    for t in SINK_TABLES {
        dump.push_str(&format!(
            "\\copy {t} TO '{}' (FORMAT {format})\n",
            dir.join(t).display()
        ));
    }
    psql(url, &dump);
    dir
}

/// The limit a user would measure: the files of [`dump_sink_rows`] loaded with `psql \copy
/// ... FROM` into empty tables of the same definitions (`LIKE ... INCLUDING ALL`: columns,
/// defaults, constraints, indexes) in one transaction, timed around the `psql` process.
/// Seconds.
fn psql_copy_limit(url: &str, dir: &std::path::Path, format: &str) -> f64 {
    let mut create = String::new();
    let mut load = String::from("BEGIN;\n");
    for t in SINK_TABLES {
        create.push_str(&format!(
            "CREATE TABLE psql_{format}_{t} (LIKE {t} INCLUDING ALL);\n"
        ));
        load.push_str(&format!(
            "\\copy psql_{format}_{t} FROM '{}' (FORMAT {format})\n",
            dir.join(t).display()
        ));
    }
    load.push_str("COMMIT;\n");
    psql(url, &create);
    let t0 = Instant::now();
    psql(url, &load);
    t0.elapsed().as_secs_f64()
}

/// The same limit on a loaded index: the files of [`dump_sink_rows`] loaded with `psql
/// \copy ... FROM` into the database's own tables, which already hold the rows of another
/// chain, with triggers and foreign keys off (`session_replication_role = replica`, as in
/// the empty tables of [`psql_copy_limit`]), in one transaction that is rolled back; timed
/// around the `psql` process. The dead rows are vacuumed away after. Seconds.
fn psql_copy_into_loaded(url: &str, dir: &std::path::Path, format: &str) -> f64 {
    let mut load = String::from("BEGIN;\nSET LOCAL session_replication_role = replica;\n");
    for t in SINK_TABLES {
        load.push_str(&format!(
            "\\copy {t} FROM '{}' (FORMAT {format})\n",
            dir.join(t).display()
        ));
    }
    load.push_str("ROLLBACK;\n");
    let t0 = Instant::now();
    psql(url, &load);
    let secs = t0.elapsed().as_secs_f64();
    psql(url, &format!("VACUUM {};", SINK_TABLES.join(", ")));
    secs
}

/// What each index of the sink's tables costs: the table's rows COPY'd into a copy without
/// indexes, then every index of the original built on it one at a time (a bulk build, so a
/// lower bound of what maintaining it row by row costs the sink, but comparable between
/// indexes). Returns "table.index seconds" entries, most expensive first.
async fn index_costs(url: &str) -> Vec<(String, f64)> {
    let client = chainsub_tests::db::connect(url).await;
    let mut out = Vec::new();
    for t in SINK_TABLES {
        client
            .batch_execute(&format!(
                "CREATE TABLE bare_{t} (LIKE {t} INCLUDING DEFAULTS);
                 INSERT INTO bare_{t} SELECT * FROM {t};"
            ))
            .await
            .unwrap();
        let defs = client
            .query(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1",
                &[&t],
            )
            .await
            .unwrap();
        for d in defs {
            let (name, def): (String, String) = (d.get(0), d.get(1));
            let on = format!(" ON public.{t} ");
            let def = def
                .replacen(&format!("INDEX {name} "), &format!("INDEX bare_{name} "), 1)
                .replacen(&on, &format!(" ON public.bare_{t} "), 1);
            let t0 = Instant::now();
            client.batch_execute(&def).await.unwrap();
            out.push((format!("{t}.{name}"), t0.elapsed().as_secs_f64()));
        }
    }
    out.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    out
}

/// What a lean event row would cost (issue 13, point 1, not built): the same events as typed
/// columns only — no snapshot columns, no text ids, no log fields — with just the primary
/// key and the idempotency key (chain, block hash, log index), copied the same way. Seconds.
async fn copy_lean(url: &str) -> f64 {
    use futures::{SinkExt, TryStreamExt};
    let client = chainsub_tests::db::connect(url).await;
    client
        .batch_execute(
            "CREATE TABLE lean_events (
                 id BIGINT PRIMARY KEY, chain_id BIGINT NOT NULL, block_number BIGINT NOT NULL,
                 block_hash BYTEA NOT NULL, block_time TIMESTAMPTZ NOT NULL,
                 transaction_hash BYTEA NOT NULL, transaction_index INTEGER NOT NULL,
                 log_index INTEGER NOT NULL, kind SMALLINT, merchant_wallet BYTEA,
                 subscription_id BIGINT, plan_id BIGINT, topics BYTEA[] NOT NULL, data BYTEA NOT NULL,
                 UNIQUE (chain_id, block_hash, log_index))",
        )
        .await
        .unwrap();
    let out = client
        .copy_out(
            "COPY (SELECT id, chain_id, block_number, block_hash, block_time, transaction_hash,
                          transaction_index, log_index, NULLIF(length(kind), 0)::SMALLINT,
                          merchant_wallet, subscription_id, plan_id, topics, data
                   FROM chain_events) TO STDOUT (FORMAT binary)",
        )
        .await
        .unwrap();
    let chunks: Vec<bytes::Bytes> = out.try_collect().await.unwrap();
    let t0 = Instant::now();
    let sink = client
        .copy_in("COPY lean_events FROM STDIN (FORMAT binary)")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    for c in chunks {
        sink.send(c).await.unwrap();
    }
    sink.close().await.unwrap();
    t0.elapsed().as_secs_f64()
}

/// First ids of every sequence in a bench database. The sink's rows get ids above what
/// [`prefill`] loads, as new rows do in a live index, and the same ids in every database, so
/// the files of [`dump_sink_rows`] load into a prefilled one without clashing.
const SINK_FIRST_ID: i64 = 1_000_000_000;

/// Decodes and writes `recorded` (the blocks after `genesis`, up to `to`) into the database at
/// `url`, in batches of up to 2000 blocks / 20000 events (what backfill batches hold).
/// Returns the seconds, the number of batches, where the time went by step and the WAL bytes
/// the server wrote meanwhile.
async fn sink_alone(
    url: &str,
    cfg: &IndexerConfig,
    genesis: Cursor,
    recorded: &[Block],
    to: u64,
) -> (f64, usize, String, i64) {
    let client = writer::connect(url).await.unwrap();
    client
        .batch_execute(&format!(
            "SELECT setval(c.oid::regclass, {SINK_FIRST_ID}, false) FROM pg_class c WHERE c.relkind = 'S'"
        ))
        .await
        .unwrap();
    let epoch = writer::claim_cursor(&client, cfg.chain_id, cfg.contract, genesis)
        .await
        .unwrap();
    let mut sink = Sink::new(client, cfg.chain_id, cfg.contract, epoch, 0);
    let mut batches: Vec<&[Block]> = Vec::new();
    let mut start = 0;
    let mut events = 0;
    for (i, b) in recorded.iter().enumerate() {
        events += b.logs.len();
        if events >= 20_000 || i + 1 - start >= 2000 || i + 1 == recorded.len() {
            batches.push(&recorded[start..=i]);
            start = i + 1;
            events = 0;
        }
    }
    // The server's WAL position before and after, on a connection of its own.
    let probe = chainsub_tests::db::connect(url).await;
    let wal_before: String = probe
        .query_one("SELECT pg_current_wal_lsn()::TEXT", &[])
        .await
        .unwrap()
        .get(0);
    let t = Instant::now();
    for batch in &batches {
        sink.apply(batch, to, to.saturating_sub(64)).await.unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    let wal: i64 = probe
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::TEXT::pg_lsn)::BIGINT",
            &[&wal_before],
        )
        .await
        .unwrap()
        .get(0);
    let stages = sink
        .stage_times()
        .0
        .iter()
        .map(|(s, d)| format!("{s} {:.0} %", 100.0 * d.as_secs_f64() / secs))
        .collect::<Vec<_>>()
        .join(", ");
    (secs, batches.len(), stages, wal)
}

/// BENCH_SINK_PREFILL: subscription counts (ten events each) to load before a second and
/// further sink runs, e.g. `100000,1000000` for 1M and 10M events. None by default.
fn prefill_sizes() -> Vec<u64> {
    std::env::var("BENCH_SINK_PREFILL")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .expect("BENCH_SINK_PREFILL: subscription counts")
        })
        .collect()
}

/// The chain the prefilled rows are on: beside the sink's (31337), as a second chain of the
/// same index would be; the sink's tables are keyed by chain, so its rows never meet them.
const PREFILL_CHAIN: u64 = 31338;

/// Loads `subs` subscriptions with ten chain events each, their ledger and delivered outbox
/// rows (`bench/api/load.sql`, the API benchmark's data set) on [`PREFILL_CHAIN`], then
/// vacuums and analyzes. Returns the events now in the database and the seconds it took.
fn prefill(url: &str, subs: u64) -> (i64, f64) {
    let wallet = "'\\xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'::bytea";
    let t = Instant::now();
    psql(
        url,
        &format!(
            "INSERT INTO merchants (public_id, wallet, code) VALUES ('mer_prefill', {wallet}, 'prefill');"
        ),
    );
    let out = std::process::Command::new("psql")
        .args(["-X", "-q", "-d", url, "-v"])
        .arg(format!("chain={PREFILL_CHAIN}"))
        .arg("-v")
        .arg(format!("subs={subs}"))
        .arg("-v")
        .arg(format!("wallet={wallet}"))
        .arg("-f")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../bench/api/load.sql"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "load.sql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    psql(url, "VACUUM ANALYZE;");
    let secs = t.elapsed().as_secs_f64();
    let out = std::process::Command::new("psql")
        .args([
            "-X",
            "-tA",
            "-d",
            url,
            "-c",
            "SELECT count(*) FROM chain_events",
        ])
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    (events, secs)
}

/// The sink on a database already holding `events` rows of another chain.
struct Loaded {
    events: i64,
    load_secs: f64,
    /// [`psql_copy_into_loaded`]: the sink's rows through `psql \copy` into those tables.
    limit_secs: f64,
    sink_secs: f64,
    batches: usize,
    stages: String,
    /// WAL bytes written during the sink run.
    wal: i64,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Row {
    shape: String,
    events: u64,
    blocks: u64,
    build_secs: f64,
    e2e_secs: f64,
    source_secs: f64,
    decode_secs: f64,
    sink_secs: f64,
    sink_batches: usize,
    /// Where the sink's time went, by step (share of `sink_secs`).
    stages: String,
    /// WAL bytes written during the sink run.
    sink_wal: i64,
    /// The sink again, into databases already holding other rows (BENCH_SINK_PREFILL).
    loaded: Vec<Loaded>,
    /// A plain binary COPY of every row the sink wrote into empty tables of the same
    /// definitions (indexes included), in one transaction: the physical limit of the sink.
    copy_secs: f64,
    /// Of which the events table.
    copy_events_secs: f64,
    /// The same rows through `psql \copy` from files, binary and text ([`psql_copy_limit`]):
    /// the limit the table states.
    psql_binary_secs: f64,
    psql_text_secs: f64,
    /// The events alone as lean typed rows, COPY'd ([`copy_lean`]).
    lean_secs: f64,
    /// Each index's bulk build time on the sink's rows ([`index_costs`]).
    indexes: String,
    /// Table + index bytes of everything the sink wrote, per event.
    bytes_per_event: f64,
    /// The bench process's peak RSS after the end-to-end backfill (the indexer runs in it).
    e2e_peak_rss_mb: f64,
    /// The indexer binary's own backfill: seconds, peak RSS in MB ([`binary_backfill`]).
    binary: (f64, f64),
    live_p50_ms: f64,
    live_p99_ms: f64,
    reorg_ms: f64,
}

async fn bench_shape(shape: &str, accounts: u64, plans: u64, samples: usize) -> Row {
    let generated = std::env::var("BENCH_CHAIN").as_deref() != Ok("contract");
    eprintln!(
        "[{shape}] building chain ({}) ...",
        if generated { "generated" } else { "contract" }
    );
    let built = if generated {
        build_generated(shape, accounts, plans).await
    } else {
        build_chain(shape, accounts, plans).await
    };
    let chain = &built.chain;
    eprintln!(
        "[{shape}] {} events in {} blocks, built in {:.1}s",
        built.events, built.blocks, built.build_secs
    );
    let cfg = config(chain);

    // End to end: a fresh database, the real runner, RPC source.
    let db = TestDb::create().await;
    let client = db.connect().await;
    let (stop, rx) = watch::channel(false);
    let source = Arc::new(RpcSource::new(&chain.anvil.rpc_url(), chain.manager).unwrap());
    let status = Status::new(cfg.chain_id.get());
    let (c2, u2, s2, st2) = (cfg.clone(), db.url.clone(), source.clone(), status.clone());
    reset_peak_rss();
    let t = Instant::now();
    let task = tokio::spawn(async move { run::run(&c2, &u2, s2, st2, rx).await });
    let tip = head(chain).await;
    wait_cursor(&client, tip).await;
    let e2e_secs = t.elapsed().as_secs_f64();
    let e2e_peak_rss_mb = peak_rss_mb();
    eprintln!("[{shape}] end to end {e2e_secs:.2}s, peak RSS {e2e_peak_rss_mb:.0} MB");
    let binary = binary_backfill(chain).await;
    eprintln!(
        "[{shape}] the indexer binary: {:.2}s, peak RSS {:.0} MB",
        binary.0, binary.1
    );

    // Live latency: one block with a transaction at a time, from `evm_mine` returning (the
    // block is available at the RPC) to the cursor naming it.
    let rpc = Bulk::new(chain);
    let mut lat = Vec::with_capacity(samples);
    let op = DevChain::address(0);
    for i in 0..samples {
        rpc.raw("evm_setAutomine", json!([false])).await;
        let call = SM::createPlanCall {
            merchant: op,
            amount: U256::from(1u64),
            planRef: B256::from(U256::from(1_000_000 + i as u64)),
        };
        let nonce: U256 = serde_json::from_value(
            rpc.raw("eth_getTransactionCount", json!([op, "pending"]))
                .await,
        )
        .unwrap();
        rpc.send_all(&[(op, chain.manager, call.abi_encode(), nonce.to())], GAS)
            .await;
        rpc.raw("evm_mine", json!([])).await;
        let t = Instant::now();
        let tip = head(chain).await;
        wait_cursor(&client, tip).await;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    rpc.raw("evm_setAutomine", json!([true])).await;
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());

    // Depth-10 reorg: from the new branch being served to the cursor on its head.
    chain.mine(12).await;
    wait_cursor(&client, head(chain).await).await;
    let call = SM::createPlanCall {
        merchant: op,
        amount: U256::from(1u64),
        planRef: B256::repeat_byte(0xee),
    };
    rpc.raw(
        "anvil_reorg",
        json!([10, [[{"from": op, "to": chain.manager, "input": alloy::hex::encode_prefixed(call.abi_encode()), "gas": "0x100000"}, 0]]]),
    )
    .await;
    // The new branch is available at the RPC once anvil_reorg returns.
    let t = Instant::now();
    let tip = head(chain).await;
    wait_cursor(&client, tip).await;
    let reorg_ms = t.elapsed().as_secs_f64() * 1000.0;
    let _ = stop.send(true);
    task.await.unwrap().unwrap();

    // Source alone: read and verify every block of the range into memory.
    let (from, to) = (chain.deploy_block, chain.deploy_block + built.blocks);
    let mut fetcher = Fetcher::new(source.clone(), cfg.contract, cfg.fetch.clone());
    let t = Instant::now();
    let mut recorded: Vec<Block> = Vec::new();
    let mut next = from;
    while next <= to {
        let blocks = fetcher.fetch(next, to).await;
        next = blocks.last().unwrap().number + 1;
        recorded.extend(blocks);
    }
    let source_secs = t.elapsed().as_secs_f64();

    // Decode alone (the pure part of the sink): map every recorded log.
    let t = Instant::now();
    let mut mapped = 0;
    for b in &recorded {
        mapped += chainsub_indexer::map::map_block(cfg.chain_id.get(), b)
            .unwrap()
            .len();
    }
    let decode_secs = t.elapsed().as_secs_f64();
    assert_eq!(mapped as u64, built.events);

    // Sink alone: decode + write the recorded blocks into a fresh database.
    let before = source.headers(from - 1, from - 1).await.unwrap().remove(0);
    let genesis = Cursor {
        number: before.number,
        hash: before.hash,
    };
    let sink_db = TestDb::create().await;
    let (sink_secs, sink_batches, stages, sink_wal) =
        sink_alone(&sink_db.url, &cfg, genesis, &recorded, to).await;
    eprintln!("[{shape}] sink alone {sink_secs:.2}s: {stages}");
    let (copy_secs, copy_events_secs, bytes) = copy_limit(&sink_db.url).await;
    let binary_rows = dump_sink_rows(&sink_db.url, "binary");
    let text_rows = dump_sink_rows(&sink_db.url, "text");
    let psql_binary_secs = psql_copy_limit(&sink_db.url, &binary_rows, "binary");
    let psql_text_secs = psql_copy_limit(&sink_db.url, &text_rows, "text");
    let _ = std::fs::remove_dir_all(&text_rows);
    let lean_secs = copy_lean(&sink_db.url).await;

    // The same sink into indexes that already hold BENCH_SINK_PREFILL subscriptions' rows.
    let mut loaded = Vec::new();
    for subs in prefill_sizes() {
        let db = TestDb::create().await;
        let (events, load_secs) = prefill(&db.url, subs);
        eprintln!("[{shape}] loaded {events} events of another chain in {load_secs:.0}s");
        let limit_secs = psql_copy_into_loaded(&db.url, &binary_rows, "binary");
        let (sink_secs, batches, stages, wal) =
            sink_alone(&db.url, &cfg, genesis, &recorded, to).await;
        eprintln!("[{shape}] sink alone onto {events} events {sink_secs:.2}s: {stages}");
        loaded.push(Loaded {
            events,
            load_secs,
            limit_secs,
            sink_secs,
            batches,
            stages,
            wal,
        });
    }
    let _ = std::fs::remove_dir_all(&binary_rows);
    let indexes = index_costs(&sink_db.url)
        .await
        .iter()
        .map(|(i, secs)| format!("{i} {:.0} ms", secs * 1e3))
        .collect::<Vec<_>>()
        .join(", ");

    Row {
        shape: shape.to_string(),
        events: built.events,
        blocks: built.blocks,
        build_secs: built.build_secs,
        e2e_secs,
        source_secs,
        decode_secs,
        sink_secs,
        sink_batches,
        stages,
        sink_wal,
        loaded,
        copy_secs,
        copy_events_secs,
        psql_binary_secs,
        psql_text_secs,
        lean_secs,
        indexes,
        bytes_per_event: bytes as f64 / built.events as f64,
        e2e_peak_rss_mb,
        binary,
        live_p50_ms: pct(&lat, 0.5),
        live_p99_ms: pct(&lat, 0.99),
        reorg_ms,
    }
}

#[tokio::main]
async fn main() {
    let accounts = env_u64("BENCH_ACCOUNTS", 200);
    let plans = env_u64("BENCH_PLANS", 170);
    let samples = env_u64("BENCH_LIVE_SAMPLES", 200) as usize;
    let shapes = std::env::var("BENCH_SHAPES").unwrap_or_else(|_| "spread,dense".into());
    let load_before = chainsub_tests::load_average();
    eprintln!("load average before: {load_before}");
    if std::env::var("BENCH_BINARY_ONLY").is_ok_and(|v| v == "1") {
        // Only the indexer binary's backfill (e.g. 1M dense events: BENCH_PLANS=1700).
        for shape in shapes.split(',') {
            let built = build_generated(shape.trim(), accounts, plans).await;
            eprintln!(
                "[{shape}] {} events in {} blocks, built in {:.1}s",
                built.events, built.blocks, built.build_secs
            );
            let measured = binary_backfill(&built.chain).await;
            print_binary(shape.trim(), built.events, built.blocks, measured);
        }
        println!(
            "Load average before: {load_before}; after: {}.",
            chainsub_tests::load_average()
        );
        return;
    }
    let mut rows = Vec::new();
    for shape in shapes.split(',') {
        rows.push(bench_shape(shape.trim(), accounts, plans, samples).await);
    }
    println!();
    println!(
        "| shape | events | blocks | ev/block | e2e backfill | e2e ev/s | e2e blocks/s | source alone ev/s | decode alone ev/s | sink alone ev/s (batches) | live p50 | live p99 | depth-10 reorg | chain build | psql \\copy binary ev/s | sink / binary | psql \\copy text ev/s | sink / text | in-process COPY ev/s | bytes/event | e2e peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let ev = r.events as f64;
        println!(
            "| {} | {} | {} | {:.1} | {:.2} s | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} ({}) | {:.1} ms | {:.1} ms | {:.0} ms | {:.0} s | {:.0} | {:.0} % | {:.0} | {:.0} % | {:.0} | {:.0} | {:.0} MB |",
            r.shape,
            r.events,
            r.blocks,
            ev / r.blocks as f64,
            r.e2e_secs,
            ev / r.e2e_secs,
            r.blocks as f64 / r.e2e_secs,
            ev / r.source_secs,
            ev / r.decode_secs,
            ev / r.sink_secs,
            r.sink_batches,
            r.live_p50_ms,
            r.live_p99_ms,
            r.reorg_ms,
            r.build_secs,
            ev / r.psql_binary_secs,
            100.0 * r.psql_binary_secs / r.sink_secs,
            ev / r.psql_text_secs,
            100.0 * r.psql_text_secs / r.sink_secs,
            ev / r.copy_secs,
            r.bytes_per_event,
            r.e2e_peak_rss_mb,
        );
    }
    if rows.iter().any(|r| !r.loaded.is_empty()) {
        println!();
        println!(
            "| shape | events already in the index | sink alone ev/s (batches) | psql \\copy binary ev/s | sink / binary | sink's WAL bytes/event |"
        );
        println!("|---|---|---|---|---|---|");
        for r in &rows {
            let ev = r.events as f64;
            let fresh = (
                0,
                r.sink_secs,
                r.sink_batches,
                r.psql_binary_secs,
                r.sink_wal,
            );
            let loaded = r
                .loaded
                .iter()
                .map(|l| (l.events, l.sink_secs, l.batches, l.limit_secs, l.wal));
            for (events, sink_secs, batches, limit_secs, wal) in
                std::iter::once(fresh).chain(loaded)
            {
                println!(
                    "| {} | {events} | {:.0} ({batches}) | {:.0} | {:.0} % | {:.0} |",
                    r.shape,
                    ev / sink_secs,
                    ev / limit_secs,
                    100.0 * limit_secs / sink_secs,
                    wal as f64 / ev
                );
            }
        }
        for r in &rows {
            for l in &r.loaded {
                println!(
                    "sink alone onto {} events, {} (loaded in {:.0} s): {}",
                    l.events, r.shape, l.load_secs, l.stages
                );
            }
        }
        let setting = |name: &str| {
            let out = std::process::Command::new("psql")
                .args(["-X", "-tA", "-d", &chainsub_tests::db::admin_url(), "-c"])
                .arg(format!("SHOW {name}"))
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        println!(
            "Already in the index: bench/api/load.sql's rows on another chain of the same tables; their \\copy limit: the sink's \
             rows loaded into those tables with triggers and foreign keys off, rolled back (before the sink, in the same database). \
             WAL: the server's, all databases. Postgres: shared_buffers {}, max_wal_size {}, checkpoint_timeout {}, full_page_writes {}.",
            setting("shared_buffers"),
            setting("max_wal_size"),
            setting("checkpoint_timeout"),
            setting("full_page_writes")
        );
    }
    println!();
    for r in &rows {
        print_binary(&r.shape, r.events, r.blocks, r.binary);
    }
    println!(
        "\nlive latency: poll interval 10 ms, {samples} samples; e2e and sink: CONFIRMATIONS=0, fresh database each."
    );
    for r in &rows {
        println!("sink alone, {}: {}", r.shape, r.stages);
        println!(
            "events table alone, {}: COPY {:.0} ev/s as it is (8 indexes); {:.0} ev/s as lean typed rows (no snapshot, text ids or log fields; 2 indexes; not built)",
            r.shape,
            r.events as f64 / r.copy_events_secs,
            r.events as f64 / r.lean_secs
        );
        println!("index build cost, {}: {}", r.shape, r.indexes);
    }
    println!(
        "psql \\copy limit: the rows the sink wrote (events, plans, subscriptions, ledger, outbox, checkpoints; final state, each once) \
         written to files and loaded with psql's \\copy (binary, then text) into empty tables of the same definitions and indexes \
         (no triggers), one transaction, timed around psql; in-process COPY: the same rows sent by this bench over one connection. \
         bytes/event: table + index size of those tables / events. Chain: {}. Load average before: {load_before}; after: {}.",
        std::env::var("BENCH_CHAIN").unwrap_or_else(|_| "generated".into()),
        chainsub_tests::load_average()
    );
}
