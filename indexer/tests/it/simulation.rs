//! Seeded simulation: an in-process fake chain that reorgs, and a fake node that errors,
//! truncates, answers empty, serves stale hashes and lags; the indexer is also "crashed"
//! (its step dropped mid-transaction, its connection closed) at random. After every seed the
//! index must equal the ground truth: the canonical chain's logs, and a fresh index built
//! from a perfect node. `INDEXER_SIM_SEED=<n>` runs one seed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::common::fake::{FakeChain, Faults};
use crate::common::*;
use alloy::primitives::{Address, B256};
use chainsub_indexer::config::IndexerConfig;
use chainsub_indexer::indexer::Indexer;
use chainsub_indexer::ops::Status;
use chainsub_indexer::writer;
use chainsub_tests::TestDb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CHAIN_ID: u64 = 7777;

/// Resolves to `None` after `polls` polls of an unfinished future: the "crash" point.
struct CrashAfter<F> {
    fut: Pin<Box<F>>,
    polls: u32,
}

impl<F: Future> Future for CrashAfter<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            return Poll::Ready(None);
        }
        self.polls -= 1;
        self.fut.as_mut().poll(cx).map(Some)
    }
}

async fn open(cfg: &IndexerConfig, db: &TestDb, chain: &Arc<FakeChain>) -> Indexer<FakeChain> {
    let client = writer::connect(&db.url).await.unwrap();
    writer::acquire(&client, cfg.chain_id).await.unwrap();
    Indexer::open(cfg, chain.clone(), client, Status::new(cfg.chain_id.get()))
        .await
        .unwrap()
}

async fn run_to_tip(ix: &mut Indexer<FakeChain>, chain: &FakeChain) {
    for _ in 0..5_000 {
        if (ix.cursor().number, ix.cursor().hash) == chain.tip() {
            return;
        }
        ix.step().await.expect("step");
    }
    panic!("did not reach the tip");
}

fn sim_config(contract: Address) -> IndexerConfig {
    let mut cfg = test_config(CHAIN_ID, contract, 1);
    cfg.confirmations = 3;
    cfg.finality_depth = 40;
    cfg.fetch.initial_range = 8;
    cfg.fetch.max_range = 120;
    cfg.fetch.min_backoff = Duration::ZERO;
    cfg.fetch.max_backoff = Duration::ZERO;
    cfg
}

async fn simulate(seed: u64) {
    let contract = Address::repeat_byte(0xcc);
    let chain = Arc::new(FakeChain::new(seed, contract, 150, Faults::hostile()));
    let cfg = sim_config(contract);
    let db = TestDb::create().await;
    let client = db.connect().await;
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut reorgs, mut crashes) = (0, 0);
    let mut ix = open(&cfg, &db, &chain).await;
    for _ in 0..300 {
        match rng.random_range(0..100) {
            0..6 => {
                chain.reorg(rng.random_range(1..=12), rng.random_range(0..3));
                reorgs += 1;
            }
            6..50 => chain.grow(rng.random_range(1..=4)),
            _ => {}
        }
        if rng.random_bool(0.08) {
            let polls = rng.random_range(1..40);
            let _ = CrashAfter {
                fut: Box::pin(ix.step()),
                polls,
            }
            .await;
            drop(ix);
            crashes += 1;
            ix = open(&cfg, &db, &chain).await;
        } else {
            ix.step().await.expect("step");
        }
    }
    run_to_tip(&mut ix, &chain).await;
    drop(ix);
    let (tip, _) = chain.tip();
    eprintln!("seed {seed}: {tip} blocks, {reorgs} reorgs, {crashes} crashes");

    // Ground truth 1: exactly the canonical logs, each once.
    let mut want = chain.canonical_logs();
    want.sort();
    let mut have: Vec<(u64, B256, B256, u64)> = client
        .query(
            "SELECT block_number, block_hash, transaction_hash, log_index FROM chain_events",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get::<_, i64>(0) as u64,
                B256::from_slice(r.get::<_, &[u8]>(1)),
                B256::from_slice(r.get::<_, &[u8]>(2)),
                r.get::<_, i32>(3) as u64,
            )
        })
        .collect();
    have.sort();
    assert_eq!(have.len(), want.len(), "seed {seed}: event count");
    assert!(
        have == want,
        "seed {seed}: events differ from the canonical chain"
    );

    // Ground truth 2: a fresh index of the same chain from a perfect node.
    chain.set_faulty(false);
    let fresh_db = TestDb::create().await;
    let mut fresh = open(&cfg, &fresh_db, &chain).await;
    run_to_tip(&mut fresh, &chain).await;
    drop(fresh);
    let fresh_client = fresh_db.connect().await;
    let (a, b) = (dump(&client).await, dump(&fresh_client).await);
    assert_same_index(&a, &b);
    chain.set_faulty(true);
}

fn seeds() -> Vec<u64> {
    match std::env::var("INDEXER_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("INDEXER_SIM_SEED is a number")],
        Err(_) => vec![1, 2, 3, 4, 5],
    }
}

#[tokio::test]
async fn seeded_simulation_with_reorgs_faults_and_crashes_equals_ground_truth() {
    for seed in seeds() {
        simulate(seed).await;
    }
}
