//! Renewal-wave benchmark: N subscriptions across M merchants fall due in the same second; how
//! long the `keeper` binary (release build, default settings) takes until the last is charged,
//! next to the node's own limit measured in the same run on the same chain state: the very
//! `chargeMany` batches the keeper sent, sent again directly from one key (anvil snapshot
//! before the keeper starts, reverted after), with no reads, no journal and no checks.
//!
//! `bench/keeper.sh` runs it. Knobs: BENCH_WAVE_SUBS (10,000), BENCH_WAVE_MERCHANTS (50).
//! Setup: M plans created by the operator for M merchants (with the API's plan rows, so the
//! keeper counts them as the service's own), ceil(N / M) customers each subscribed to every
//! plan, the chain clock moved a month on, the real indexer following it into a fresh
//! database. The keeper's total gas budget is raised out of the way (its per-merchant budget
//! stays the default). Not a test: no timing is asserted; it does check that every
//! subscription was charged exactly once on both paths.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloy::consensus::Transaction as _;
use alloy::primitives::{Address, B256, U256, keccak256};
use alloy::providers::Provider;
use alloy::rpc::types::Filter;
use alloy::sol_types::{SolCall, SolEvent};
use chainsub_abi::{MockUSDC, SubscriptionManager as SM};
use chainsub_tests::bulk::Bulk;
use chainsub_tests::chain::{DEV_KEYS, accounts};
use chainsub_tests::{Anvil, ChildGuard, DevChain, TestDb, bin_path};
use serde_json::json;

/// 9.99 USDC in base units.
const PRICE: u64 = 9_990_000;
const SUBSCRIBE_GAS: u64 = 400_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// One transaction of a path: the ids it names and the gas it used.
struct Sent {
    ids: Vec<U256>,
    gas_used: u64,
    gas_limit: u64,
    calldata: Vec<u8>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let subs = env_u64("BENCH_WAVE_SUBS", 10_000);
    let merchants = env_u64("BENCH_WAVE_MERCHANTS", 50).max(1);
    let customers = subs.div_ceil(merchants);
    let total = customers * merchants;
    let load_before = load_average();
    println!(
        "renewal wave: {total} subscriptions ({customers} customers x {merchants} merchants' plans), all due at once"
    );

    // ---------------------------------------------------------------- the chain
    let t = Instant::now();
    let anvil = Anvil::start_with(&[
        "--accounts",
        &(customers + 10).to_string(),
        "--gas-limit",
        "4000000000",
    ]);
    let chain = DevChain::with_anvil(anvil).await;
    let bulk = Bulk::new(&chain);
    let all: Vec<Address> =
        serde_json::from_value(bulk.raw("eth_accounts", json!([])).await).unwrap();
    let payers = &all[10..10 + customers as usize];
    let operator = DevChain::address(accounts::OPERATOR);
    let keeper = DevChain::address(accounts::KEEPER);
    let shops: Vec<Address> = (0..merchants)
        .map(|i| Address::from_word(keccak256(format!("wave merchant {i}"))))
        .collect();
    let refs: Vec<B256> = (0..merchants)
        .map(|i| keccak256(format!("wave plan {i}")))
        .collect();
    bulk.raw("evm_setAutomine", json!([false])).await;
    let mut nonce: u64 = chain
        .provider
        .get_transaction_count(operator)
        .await
        .unwrap();
    let first_plan = chain
        .manager()
        .planCount()
        .call()
        .await
        .unwrap()
        .to::<u64>()
        + 1;
    let mut setup = Vec::new();
    for (shop, plan_ref) in shops.iter().zip(&refs) {
        let call = SM::createPlanCall {
            merchant: *shop,
            amount: U256::from(PRICE),
            planRef: *plan_ref,
        };
        setup.push((operator, chain.manager, call.abi_encode(), nonce));
        nonce += 1;
    }
    for payer in payers {
        let mint = MockUSDC::mintCall {
            to: *payer,
            amount: U256::from(3 * merchants * PRICE),
        };
        setup.push((operator, chain.usdc, mint.abi_encode(), nonce));
        nonce += 1;
        let approve = MockUSDC::approveCall {
            spender: chain.manager,
            amount: U256::MAX,
        };
        setup.push((*payer, chain.usdc, approve.abi_encode(), 0));
    }
    bulk.send_and_mine(&setup, 300_000, None).await;
    let mut subscribes = Vec::new();
    for payer in payers {
        for (p, shop) in shops.iter().enumerate() {
            let call = SM::subscribeCall {
                planId: U256::from(first_plan + p as u64),
                merchant: *shop,
                amount: U256::from(PRICE),
                customerRef: B256::ZERO,
            };
            subscribes.push((*payer, chain.manager, call.abi_encode(), 1 + p as u64));
        }
    }
    bulk.send_and_mine(&subscribes, SUBSCRIBE_GAS, Some(5_000))
        .await;
    let created = chain.manager().subscriptionCount().call().await.unwrap();
    assert_eq!(created, U256::from(total), "every subscription created");
    // A normal chain from here on: 30M gas blocks, each transaction mined as it arrives.
    bulk.raw(
        "evm_setBlockGasLimit",
        json!([format!("{:#x}", 30_000_000u64)]),
    )
    .await;
    bulk.raw("evm_setAutomine", json!([true])).await;
    chain.increase_time(32 * 86_400).await;
    println!("setup: chain built in {:.1} s", t.elapsed().as_secs_f64());

    // ------------------------------------------------------- index and plan rows
    let db = TestDb::create().await;
    let pg = db.connect().await;
    for (shop, plan_ref) in shops.iter().zip(&refs) {
        chainsub_tests::db::register_plan(&pg, *shop, *plan_ref, PRICE).await;
    }
    let common = [
        ("DATABASE_URL", db.url.clone()),
        ("RPC_URL", chain.anvil.url.clone()),
        ("CHAIN_ID", chain.anvil.chain_id.to_string()),
        ("CONTRACT_ADDRESS", chain.manager.to_string()),
        ("RUST_LOG", "warn".to_string()),
    ];
    let indexer = ChildGuard(
        Command::new(bin_path("indexer"))
            .envs(common.clone())
            .env("START_BLOCK", chain.deploy_block.to_string())
            .env("CONFIRMATIONS", "0")
            .env("INDEXER_METRICS_LISTEN", "127.0.0.1:0")
            .env("INDEXER_POLL_INTERVAL_MS", "50")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn indexer"),
    );
    let head = chain.provider.get_block_number().await.unwrap() as i64;
    chainsub_tests::wait_until("the indexer at the head", || async {
        pg.query_opt("SELECT block_number FROM indexer_cursor", &[])
            .await
            .unwrap()
            .is_some_and(|r| r.get::<_, i64>(0) >= head)
    })
    .await;
    println!("setup: indexed by {:.1} s", t.elapsed().as_secs_f64());

    // ------------------------------------------------------------- the keeper
    let snapshot: String =
        serde_json::from_value(bulk.raw("evm_snapshot", json!([])).await).unwrap();
    let first_block = chain.provider.get_block_number().await.unwrap() + 1;
    let started = Instant::now();
    let mut keeper_proc = ChildGuard(
        Command::new(bin_path("keeper"))
            .env_clear()
            .envs(common.clone())
            .env("KEEPER_PRIVATE_KEY", DEV_KEYS[accounts::KEEPER])
            .env("KEEPER_METRICS_LISTEN", "127.0.0.1:0")
            .env("KEEPER_GAS_BUDGET_WEI", "1000000000000000000000")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn keeper"),
    );
    // Charged means mined on chain: the chain's logs are read as they come (not the keeper's
    // journal, which records receipts on its next pass).
    let mut watch = Charges::new(first_block, merchants, customers);
    while watch.total < total {
        watch.read(&chain, started).await;
        if let Some(status) = keeper_proc.0.try_wait().unwrap() {
            panic!(
                "the keeper exited ({status}) with {} of {total} charged",
                watch.total
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(3_600),
            "{} of {total} charged after an hour",
            watch.total
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let keeper_secs = started.elapsed().as_secs_f64();
    let (first_merchant, last_merchant) = watch.merchants_done();
    drop(keeper_proc);
    drop(indexer);
    let last_block = chain.provider.get_block_number().await.unwrap();
    let keeper_txs = sent_by(&chain, keeper, first_block, last_block).await;
    let keeper_charged = charged(&chain, first_block, last_block).await;
    assert_eq!(keeper_charged, total, "the keeper charged each once");

    // ------------------------------------------- the node's limit, same batches
    let reverted: bool =
        serde_json::from_value(bulk.raw("evm_revert", json!([snapshot])).await).unwrap();
    assert!(reverted, "evm_revert");
    let from_block = chain.provider.get_block_number().await.unwrap() + 1;
    let nonce0 = chain.provider.get_transaction_count(keeper).await.unwrap();
    let direct_started = Instant::now();
    let mut last_hash = B256::ZERO;
    for (i, tx) in keeper_txs.iter().enumerate() {
        let sent = json!({
            "from": keeper, "to": chain.manager,
            "input": alloy::hex::encode_prefixed(&tx.calldata),
            "gas": format!("{:#x}", tx.gas_limit), "nonce": format!("{:#x}", nonce0 + i as u64),
        });
        last_hash =
            serde_json::from_value(bulk.raw("eth_sendTransaction", json!([sent])).await).unwrap();
    }
    while chain
        .provider
        .get_transaction_receipt(last_hash)
        .await
        .unwrap()
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let direct_secs = direct_started.elapsed().as_secs_f64();
    let to_block = chain.provider.get_block_number().await.unwrap();
    let direct_txs = sent_by(&chain, keeper, from_block, to_block).await;
    assert_eq!(
        charged(&chain, from_block, to_block).await,
        total,
        "the direct batches charged each once"
    );

    // ----------------------------------------------------------------- report
    let gas = |txs: &[Sent]| txs.iter().map(|t| t.gas_used).sum::<u64>() as f64 / total as f64;
    let named: usize = keeper_txs.iter().map(|t| t.ids.len()).sum();
    println!();
    println!(
        "| path | renewals | transactions | ids named | time | renewals/s | gas per renewal | first merchant done | last merchant done |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| keeper (release, defaults) | {total} | {} | {named} | {keeper_secs:.2} s | {:.0} | {:.0} | {first_merchant:.2} s | {last_merchant:.2} s |",
        keeper_txs.len(),
        total as f64 / keeper_secs,
        gas(&keeper_txs),
    );
    println!(
        "| direct: the same batches, one key, no checks | {total} | {} | {named} | {direct_secs:.2} s | {:.0} | {:.0} | - | - |",
        direct_txs.len(),
        total as f64 / direct_secs,
        gas(&direct_txs),
    );
    let load_after = load_average();
    println!();
    println!(
        "wave: keeper {total} renewals of {merchants} merchants in {keeper_secs:.2} s ({:.0}/s, gas {:.0} per renewal, merchants done {first_merchant:.2}..{last_merchant:.2} s); direct chargeMany {direct_secs:.2} s ({:.0}/s); keeper / direct {:.2}x",
        total as f64 / keeper_secs,
        gas(&keeper_txs),
        total as f64 / direct_secs,
        keeper_secs / direct_secs,
    );
    println!("load average before: {load_before}; after: {load_after}");
}

/// Every transaction `from` sent to the manager in blocks `from_block..=to_block`, in order,
/// with the ids its call names.
async fn sent_by(chain: &DevChain, from: Address, from_block: u64, to_block: u64) -> Vec<Sent> {
    let mut out = Vec::new();
    for n in from_block..=to_block {
        let block = chain
            .provider
            .get_block_by_number(n.into())
            .full()
            .await
            .unwrap()
            .expect("block");
        for tx in block.transactions.into_transactions() {
            if tx.inner.signer() != from || tx.to() != Some(chain.manager) {
                continue;
            }
            let input = tx.input().to_vec();
            let ids = if let Ok(c) = SM::chargeManyCall::abi_decode(&input) {
                c.subscriptionIds
            } else if let Ok(c) = SM::chargeCall::abi_decode(&input) {
                vec![c.subscriptionId]
            } else {
                continue;
            };
            let receipt = chain
                .provider
                .get_transaction_receipt(*tx.inner.tx_hash())
                .await
                .unwrap()
                .expect("receipt");
            out.push(Sent {
                ids,
                gas_used: receipt.gas_used,
                gas_limit: tx.gas_limit(),
                calldata: input,
            });
        }
    }
    out
}

/// Renewals mined since the keeper started, followed on the chain: per merchant, when its
/// last one was seen.
struct Charges {
    next_block: u64,
    per_merchant: HashMap<Address, u64>,
    done_at: HashMap<Address, f64>,
    each: u64,
    total: u64,
}

impl Charges {
    fn new(first_block: u64, merchants: u64, each: u64) -> Self {
        Self {
            next_block: first_block,
            per_merchant: HashMap::with_capacity(merchants as usize),
            done_at: HashMap::new(),
            each,
            total: 0,
        }
    }

    /// Reads the blocks mined since the last call.
    async fn read(&mut self, chain: &DevChain, started: Instant) {
        let head = chain.provider.get_block_number().await.unwrap();
        if head < self.next_block {
            return;
        }
        let charges = charges_in(chain, self.next_block, head).await;
        let now = started.elapsed().as_secs_f64();
        for e in charges {
            let n = self.per_merchant.entry(e.merchant).or_default();
            *n += 1;
            self.total += 1;
            if *n == self.each {
                self.done_at.insert(e.merchant, now);
            }
        }
        self.next_block = head + 1;
    }

    /// Seconds after the start when the first and the last merchant had every renewal.
    fn merchants_done(&self) -> (f64, f64) {
        let times = self.done_at.values();
        let first = times.clone().copied().fold(f64::INFINITY, f64::min);
        let last = times.copied().fold(0.0, f64::max);
        (first, last)
    }
}

/// Renewals charged (period 2 or later) in the block range; panics when one subscription
/// was charged twice.
async fn charged(chain: &DevChain, from_block: u64, to_block: u64) -> u64 {
    let mut seen: HashMap<U256, u32> = HashMap::new();
    for e in charges_in(chain, from_block, to_block).await {
        *seen.entry(e.subscriptionId).or_default() += 1;
    }
    assert!(
        seen.values().all(|&n| n == 1),
        "a subscription was charged twice"
    );
    seen.len() as u64
}

/// The `SubscriptionCharged` logs of blocks `from_block..=to_block`, decoded, in chain order.
async fn charges_in(
    chain: &DevChain,
    from_block: u64,
    to_block: u64,
) -> Vec<SM::SubscriptionCharged> {
    chain
        .provider
        .get_logs(
            &Filter::new()
                .address(chain.manager)
                .event_signature(SM::SubscriptionCharged::SIGNATURE_HASH)
                .from_block(from_block)
                .to_block(to_block),
        )
        .await
        .unwrap()
        .iter()
        .map(|log| {
            SM::SubscriptionCharged::decode_log(&log.inner)
                .unwrap()
                .data
        })
        .collect()
}
