//! Indexer benchmark: builds a chain of >= 100k contract events on anvil (spread: ~10 events
//! per block; dense: thousands per block), then measures end-to-end backfill, the source
//! alone, the sink alone (decode + write from recorded logs), live latency (block available
//! at the RPC -> committed) and recovery from a depth-10 reorg. Prints a table.
//!
//! `bench/indexer.sh` runs it. Knobs: BENCH_ACCOUNTS (default 200), BENCH_PLANS (170),
//! BENCH_SHAPES (`spread,dense`), BENCH_LIVE_SAMPLES (200). Not a test: no timing is asserted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::rpc::client::BatchRequest;
use alloy::sol_types::SolCall;
use chainsub_abi::{MockUSDC, SubscriptionManager as SM};
use chainsub_indexer::block::{Block, Cursor};
use chainsub_indexer::config::IndexerConfig;
use chainsub_indexer::ops::Status;
use chainsub_indexer::sink::Sink;
use chainsub_indexer::source::{BlockSource, FetchConfig, Fetcher, RpcSource};
use chainsub_indexer::{run, writer};
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

struct Rpc<'a> {
    chain: &'a DevChain,
}

impl Rpc<'_> {
    async fn raw(&self, method: &'static str, params: serde_json::Value) -> serde_json::Value {
        self.chain
            .provider
            .raw_request(method.into(), params)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Sends `txs` (from, to, calldata, nonce) to the pool with `eth_sendTransaction`
    /// (anvil signs for its unlocked accounts), in JSON-RPC batches.
    async fn send_all(&self, txs: &[(Address, Address, Vec<u8>, u64)], gas: u64) {
        for chunk in txs.chunks(500) {
            let client = self.chain.provider.client();
            let mut batch = BatchRequest::new(client);
            let mut waiters = Vec::new();
            for (from, to, data, nonce) in chunk {
                let tx = json!({
                    "from": from, "to": to, "input": alloy::hex::encode_prefixed(data),
                    "gas": format!("{gas:#x}"), "gasPrice": "0x3b9aca00", "nonce": format!("{nonce:#x}"),
                });
                waiters.push(
                    batch
                        .add_call::<_, B256>("eth_sendTransaction", &(tx,))
                        .unwrap(),
                );
            }
            batch.send().await.unwrap();
            for w in waiters {
                w.await.expect("eth_sendTransaction");
            }
        }
    }

    /// Sends `txs` a chunk at a time and mines each chunk out before the next (anvil's pool
    /// slows down badly when it holds tens of thousands of transactions).
    async fn send_and_mine(
        &self,
        txs: &[(Address, Address, Vec<u8>, u64)],
        gas: u64,
        per_block: Option<u64>,
    ) {
        let chunk = per_block.map_or(5_000, |k| k as usize * 100);
        for part in txs.chunks(chunk) {
            self.send_all(part, gas).await;
            self.mine_out(per_block).await;
        }
    }

    /// Mines until the pool is empty: `per_block` transactions fit a block (by the block gas
    /// limit), so that many blocks are mined per call; `None`: one block per call.
    async fn mine_out(&self, per_block: Option<u64>) {
        loop {
            let status = self.raw("txpool_status", json!([])).await;
            let pending = u64::from_str_radix(
                status["pending"]
                    .as_str()
                    .unwrap_or("0x0")
                    .trim_start_matches("0x"),
                16,
            )
            .unwrap_or(0);
            if pending == 0 {
                return;
            }
            let n = per_block.map_or(1, |k| pending.div_ceil(k));
            self.raw("anvil_mine", json!([format!("{n:#x}")])).await;
        }
    }
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
    let rpc = Rpc { chain: &chain };
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
    rpc.raw(
        "evm_setBlockGasLimit",
        json!([format!("{:#x}", 30_000_000u64)]),
    )
    .await;
    rpc.raw("evm_setAutomine", json!([true])).await;
    let head = chain.provider.get_block_number().await.unwrap();
    let logs = RpcSource::new(&chain.anvil.url, chain.manager).unwrap();
    let events = count_logs(&logs, chain.deploy_block, head).await;
    Built {
        blocks: head - chain.deploy_block,
        events,
        chain,
        build_secs: t.elapsed().as_secs_f64(),
    }
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
    let mut cfg = IndexerConfig::new(chain.anvil.chain_id, chain.manager, chain.deploy_block);
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
    live_p50_ms: f64,
    live_p99_ms: f64,
    reorg_ms: f64,
}

async fn bench_shape(shape: &str, accounts: u64, plans: u64, samples: usize) -> Row {
    eprintln!("[{shape}] building chain ...");
    let built = build_chain(shape, accounts, plans).await;
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
    let source = Arc::new(RpcSource::new(&chain.anvil.url, chain.manager).unwrap());
    let status = Status::new(cfg.chain_id);
    let (c2, u2, s2, st2) = (cfg.clone(), db.url.clone(), source.clone(), status.clone());
    let t = Instant::now();
    let task = tokio::spawn(async move { run::run(&c2, &u2, s2, st2, rx).await });
    let tip = head(chain).await;
    wait_cursor(&client, tip).await;
    let e2e_secs = t.elapsed().as_secs_f64();
    eprintln!("[{shape}] end to end {e2e_secs:.2}s");

    // Live latency: one block with a transaction at a time, from `evm_mine` returning (the
    // block is available at the RPC) to the cursor naming it.
    let rpc = Rpc { chain };
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
        mapped += chainsub_indexer::map::map_block(cfg.chain_id, b)
            .unwrap()
            .len();
    }
    let decode_secs = t.elapsed().as_secs_f64();
    assert_eq!(mapped as u64, built.events);

    // Sink alone: decode + write the recorded blocks into a fresh database, in batches of up
    // to 2000 blocks / 20000 events (what backfill batches hold).
    let sink_db = TestDb::create().await;
    let sink_client = writer::connect(&sink_db.url).await.unwrap();
    let before = source.headers(from - 1, from - 1).await.unwrap().remove(0);
    let genesis = Cursor {
        number: before.number,
        hash: before.hash,
    };
    let epoch = writer::claim_cursor(&sink_client, cfg.chain_id, cfg.contract, genesis)
        .await
        .unwrap();
    let mut sink = Sink::new(sink_client, cfg.chain_id, cfg.contract, epoch, 0);
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
    let t = Instant::now();
    for batch in &batches {
        sink.apply(batch, to, to.saturating_sub(64)).await.unwrap();
    }
    let sink_secs = t.elapsed().as_secs_f64();

    Row {
        shape: shape.to_string(),
        events: built.events,
        blocks: built.blocks,
        build_secs: built.build_secs,
        e2e_secs,
        source_secs,
        decode_secs,
        sink_secs,
        sink_batches: batches.len(),
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
    let mut rows = Vec::new();
    for shape in shapes.split(',') {
        rows.push(bench_shape(shape.trim(), accounts, plans, samples).await);
    }
    println!();
    println!(
        "| shape | events | blocks | ev/block | e2e backfill | e2e ev/s | e2e blocks/s | source alone ev/s | decode alone ev/s | sink alone ev/s (batches) | live p50 | live p99 | depth-10 reorg | chain build |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let ev = r.events as f64;
        println!(
            "| {} | {} | {} | {:.1} | {:.2} s | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} ({}) | {:.1} ms | {:.1} ms | {:.0} ms | {:.0} s |",
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
        );
    }
    println!(
        "\nlive latency: poll interval 10 ms, {samples} samples; e2e and sink: CONFIRMATIONS=0, fresh database each."
    );
}
