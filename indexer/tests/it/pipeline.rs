//! The pipeline's shape: while backfilling, the next range is fetched from the node while
//! the current one is being written.

use std::sync::Arc;
use std::time::Duration;

use crate::common::fake::{FakeChain, Faults};
use crate::common::*;
use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use chainsub_indexer::block::{Header, RawLog};
use chainsub_indexer::indexer::{Indexer, Progress};
use chainsub_indexer::ops::Status;
use chainsub_indexer::source::{BlockSource, SourceError};
use chainsub_indexer::writer;
use chainsub_tests::TestDb;
use tokio::sync::mpsc;

/// A node that reports every `eth_getLogs` range it is asked for.
struct Recording {
    chain: Arc<FakeChain>,
    ranges: mpsc::UnboundedSender<(u64, u64)>,
}

#[async_trait]
impl BlockSource for Recording {
    async fn head(&self) -> Result<u64, SourceError> {
        self.chain.head().await
    }
    async fn finalized(&self) -> Result<Option<u64>, SourceError> {
        self.chain.finalized().await
    }
    async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError> {
        self.chain.headers(from, to).await
    }
    async fn logs(&self, from: u64, to: u64) -> Result<Vec<RawLog>, SourceError> {
        let _ = self.ranges.send((from, to));
        self.chain.logs(from, to).await
    }
    async fn block_logs(&self, number: u64, hash: B256) -> Result<Vec<RawLog>, SourceError> {
        self.chain.block_logs(number, hash).await
    }
}

#[tokio::test]
async fn backfill_fetches_the_next_range_while_the_current_one_commits() {
    let contract = Address::repeat_byte(0xcc);
    let chain = Arc::new(FakeChain::new(11, contract, 120, Faults::none()));
    let mut cfg = test_config(7777, contract, 1);
    cfg.fetch.initial_range = 20;
    cfg.fetch.max_range = 20;
    let db = TestDb::create().await;
    let (ranges_tx, mut ranges) = mpsc::unbounded_channel();
    let source = Arc::new(Recording {
        chain: chain.clone(),
        ranges: ranges_tx,
    });
    let client = writer::connect(&db.url).await.unwrap();
    writer::acquire(&client, cfg.chain_id).await.unwrap();
    let mut ix = Indexer::open(&cfg, source, client, Status::new(cfg.chain_id.get()))
        .await
        .unwrap();
    while ranges.try_recv().is_ok() {}

    // Another session holds the cursor row: the first batch cannot commit.
    let mut blocker = db.connect().await;
    let hold = blocker.transaction().await.unwrap();
    hold.execute("SELECT 1 FROM indexer_cursor FOR UPDATE", &[])
        .await
        .unwrap();
    let step = tokio::spawn(async move {
        let p = ix.step().await;
        (ix, p)
    });
    let (first_from, first_to) = tokio::time::timeout(Duration::from_secs(30), ranges.recv())
        .await
        .expect("the first range is fetched")
        .unwrap();
    assert_eq!(first_from, 1);
    // The next range is asked for while the first batch still waits for the cursor row.
    let (next_from, _) = tokio::time::timeout(Duration::from_secs(30), ranges.recv())
        .await
        .expect("the next range is fetched before the first batch commits")
        .unwrap();
    assert_eq!(next_from, first_to + 1);
    assert!(
        !step.is_finished(),
        "the first batch committed while blocked"
    );
    let cursor: i64 = hold
        .query_one("SELECT block_number FROM indexer_cursor", &[])
        .await
        .unwrap()
        .get(0);
    assert!(cursor < first_from as i64, "nothing is committed yet");
    hold.rollback().await.unwrap();

    let (mut ix, progress) = step.await.unwrap();
    assert!(matches!(progress.unwrap(), Progress::Applied(a) if a.blocks as u64 == first_to));
    assert_eq!(ix.cursor().number, first_to, "the cursor is the database's");
    for _ in 0..100 {
        if (ix.cursor().number, ix.cursor().hash) == chain.tip() {
            break;
        }
        ix.step().await.unwrap();
    }
    assert_eq!((ix.cursor().number, ix.cursor().hash), chain.tip());
    let stored: i64 = blocker
        .query_one("SELECT count(*) FROM chain_events", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored as usize, chain.canonical_logs().len());
}

/// Issue 13, point 5: a dense chain must never kill the indexer. One block with 50,001 logs
/// (a plan, then 25,000 subscriptions created and charged — some 50 MB of `eth_getLogs`
/// JSON), built on a real anvil by `contracts/LogFlood.sol` installed at the manager's
/// address, is indexed whole: every event, subscription, ledger row and outbox row, in one
/// batch with the cursor.
#[tokio::test(flavor = "multi_thread")]
async fn a_block_with_50_thousand_events_is_indexed_whole() {
    use chainsub_tests::DevChain;
    use chainsub_tests::anvil::Anvil;
    const SUBS: u64 = 25_000;

    let chain = DevChain::with_anvil(Anvil::start_with(&["--disable-block-gas-limit"])).await;
    let flood = chainsub_tests::flood::install(&chain).await;
    let receipt = chainsub_tests::flood::flood_block(&flood, &chain, SUBS, 400_000_000).await;
    let block = receipt.block_number.unwrap();
    assert_eq!(receipt.inner.logs().len() as u64, 2 * SUBS + 1);

    let db = TestDb::create().await;
    let client = db.connect().await;
    let ix = start(chain_config(&chain), &db, &chain);
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    while cursor(&client).await.map(|(n, _)| n) < Some(block as i64) {
        assert!(!ix.is_finished(), "the indexer stopped");
        assert!(
            std::time::Instant::now() < deadline,
            "the indexer never got past the dense block"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counts = client
        .query_one(
            "SELECT (SELECT count(*) FROM chain_events WHERE block_number = $1),
                    (SELECT count(*) FROM subscriptions),
                    (SELECT count(*) FROM ledger_entries),
                    (SELECT count(*) FROM webhook_outbox),
                    (SELECT count(*) FROM chain_plans)",
            &[&(block as i64)],
        )
        .await
        .unwrap();
    let got: Vec<i64> = (0..5).map(|i| counts.get(i)).collect();
    let subs = SUBS as i64;
    assert_eq!(got, vec![2 * subs + 1, subs, subs, 2 * subs, 1]);
    // The block's events are copied in chunks of ~256 KB (~250 here) with ids taken up front
    // from the sequence: row ids follow the log index.
    let in_order: bool = client
        .query_one(
            "SELECT bool_and(ordered) FROM (SELECT log_index > lag(log_index) OVER (ORDER BY id)
             AS ordered FROM chain_events WHERE block_number = $1) o",
            &[&(block as i64)],
        )
        .await
        .unwrap()
        .get(0);
    assert!(in_order, "event ids out of chain order");
    ix.stop().await.unwrap();
}

/// `eth_getLogs` answers for a range of blocks are read with a byte cap: a larger one counts
/// as "range too large" (the fetcher then shrinks the range) instead of being held in memory
/// whole — a dense range on a node without a limit of its own used to arrive as one ~100 MB
/// answer. Under the cap the same call answers every log, and so does a single block over
/// it (receipts, its alternative, would be larger).
#[tokio::test(flavor = "multi_thread")]
async fn an_eth_get_logs_answer_over_the_byte_cap_is_refused_as_too_large() {
    use chainsub_indexer::source::RpcSource;
    use chainsub_tests::DevChain;

    let chain = DevChain::start().await;
    let flood = chainsub_tests::flood::install(&chain).await;
    let receipt = chainsub_tests::flood::flood_block(&flood, &chain, 500, 20_000_000).await;
    let block = receipt.block_number.unwrap();

    let capped = RpcSource::new(&chain.anvil.rpc_url(), chain.manager)
        .unwrap()
        .with_max_logs_response_bytes(100_000);
    assert!(
        matches!(
            capped.logs(block - 1, block).await,
            Err(SourceError::TooLarge { suggested_to: None })
        ),
        "a ~1 MB answer for two blocks over a 100 kB cap"
    );
    let uncapped = RpcSource::new(&chain.anvil.rpc_url(), chain.manager).unwrap();
    let before = uncapped.logs(block - 1, block - 1).await.unwrap().len();
    assert_eq!(
        uncapped.logs(block - 1, block).await.unwrap().len(),
        before + 1_001
    );
    // One block is never capped: the fetcher's only alternative for it, the block's
    // receipts, is a larger answer still.
    assert_eq!(capped.logs(block, block).await.unwrap().len(), 1_001);
}
