//! Shared helpers of the indexer's integration tests: run an indexer in-process or as a
//! process, drive the contract, wait for the index, and dump every chain table for
//! row-by-row comparison.

pub(crate) mod fake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use chainsub_indexer::config::IndexerConfig;
use chainsub_indexer::ops::Status;
use chainsub_indexer::source::{BlockSource, FetchConfig, RpcSource};
use chainsub_indexer::stream::ReorgPolicy;
use chainsub_tests::{DevChain, TestDb};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

/// Fast settings for tests: millisecond polls and backoffs, outbox at once.
pub(crate) fn test_config(chain_id: u64, contract: Address, start_block: u64) -> IndexerConfig {
    let mut cfg = IndexerConfig::new(
        chainsub_core::ChainId::new(chain_id).unwrap(),
        contract,
        start_block,
    );
    cfg.confirmations = 0;
    cfg.poll_interval = Duration::from_millis(20);
    cfg.fetch = FetchConfig {
        initial_range: 50,
        max_range: 500,
        min_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(100),
        rpc_timeout: Duration::from_secs(10),
        ..FetchConfig::default()
    };
    cfg.finality_depth = 64;
    cfg.use_finalized_tag = false;
    cfg.reorg_policy = ReorgPolicy::Halt;
    cfg
}

/// The test config for a dev chain.
pub(crate) fn chain_config(chain: &DevChain) -> IndexerConfig {
    test_config(chain.anvil.chain_id, chain.manager, chain.deploy_block)
}

/// An indexer running in this process.
pub(crate) struct Running {
    stop: watch::Sender<bool>,
    handle: JoinHandle<chainsub_indexer::Result<()>>,
    pub status: Arc<Status>,
}

impl Running {
    /// Signals shutdown and waits for the loop to end.
    pub(crate) async fn stop(self) -> chainsub_indexer::Result<()> {
        let _ = self.stop.send(true);
        self.handle.await.expect("indexer task")
    }

    /// Whether the loop ended (it only does on a fatal error or shutdown).
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits for the loop to end by itself (a fatal error).
    pub(crate) async fn join(self) -> chainsub_indexer::Result<()> {
        self.handle.await.expect("indexer task")
    }
}

/// Starts `run::run` on `source` in a task.
pub(crate) fn start_with<S: BlockSource>(
    cfg: IndexerConfig,
    db_url: &str,
    source: Arc<S>,
) -> Running {
    let (tx, rx) = watch::channel(false);
    let status = Status::new(cfg.chain_id.get());
    let st = status.clone();
    let url = db_url.to_string();
    let handle =
        tokio::spawn(async move { chainsub_indexer::run::run(&cfg, &url, source, st, rx).await });
    Running {
        stop: tx,
        handle,
        status,
    }
}

/// Starts an in-process indexer against the dev chain's RPC.
pub(crate) fn start(cfg: IndexerConfig, db: &TestDb, chain: &DevChain) -> Running {
    let source =
        Arc::new(RpcSource::new(&chain.anvil.rpc_url(), cfg.contract).expect("rpc source"));
    start_with(cfg, &db.url, source)
}

/// The cursor row: (block number, block hash).
pub(crate) async fn cursor(client: &Client) -> Option<(i64, B256)> {
    client
        .query_opt("SELECT block_number, block_hash FROM indexer_cursor", &[])
        .await
        .expect("cursor")
        .map(|r| (r.get(0), B256::from_slice(r.get::<_, &[u8]>(1))))
}

/// The chain's latest block (number, hash).
pub(crate) async fn chain_head(chain: &DevChain) -> (u64, B256) {
    let b = chain
        .provider
        .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
        .await
        .expect("latest")
        .expect("a block");
    (b.header.number, b.header.hash)
}

/// Waits until the index's cursor is the chain's current head block (panics after a minute,
/// which only ever means the indexer is stuck).
pub(crate) async fn wait_for_head(client: &Client, chain: &DevChain) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (n, h) = chain_head(chain).await;
        if cursor(client).await == Some((n as i64, h)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "indexer did not reach head {n} {h}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) use chainsub_tests::wait_until;

/// Every chain-owned table as sorted text rows, with surrogate ids replaced by public ids,
/// so two databases that indexed the same chain compare equal row by row. A row naming an
/// event that is not stored (no foreign key keeps these links) shows with a null id, so it
/// differs from a fresh index instead of vanishing from the dump.
pub(crate) async fn dump(client: &Client) -> Vec<String> {
    let queries = [
        "SELECT 'cursor ' || block_number || ' ' || encode(block_hash, 'hex') FROM indexer_cursor",
        "SELECT 'checkpoint ' || block_number || ' ' || encode(block_hash, 'hex') || ' ' ||
             encode(parent_hash, 'hex') || ' ' || block_time FROM block_checkpoints",
        "SELECT 'event ' || (to_jsonb(e) - 'id')::text FROM chain_events e",
        "SELECT 'plan ' || (to_jsonb(p) - 'event_id' - 'deactivated_event_id'
             || jsonb_build_object('event', e.public_id, 'deactivated', d.public_id))::text
         FROM chain_plans p LEFT JOIN chain_events e ON e.id = p.event_id
             LEFT JOIN chain_events d ON d.id = p.deactivated_event_id",
        "SELECT 'sub ' || (to_jsonb(s) - 'created_event_id' - 'last_event_id'
             || jsonb_build_object('created', c.public_id, 'last', l.public_id))::text
         FROM subscriptions s LEFT JOIN chain_events c ON c.id = s.created_event_id
             LEFT JOIN chain_events l ON l.id = s.last_event_id",
        "SELECT 'ledger ' || (to_jsonb(x) - 'event_id' || jsonb_build_object('event', e.public_id))::text
         FROM ledger_entries x LEFT JOIN chain_events e ON e.id = x.event_id",
        "SELECT 'outbox ' || event_public_id || ' ' || encode(merchant_wallet, 'hex') || ' ' || status
         FROM webhook_outbox",
        // The aggregates triggers keep with the rows above (migrations 0031, 0032, 0034).
        "SELECT 'revenue ' || to_jsonb(r)::text FROM revenue_months r",
        "SELECT 'tally ' || to_jsonb(t)::text FROM subscription_tallies t",
        "SELECT 'starts ' || to_jsonb(t)::text FROM subscription_starts t",
        "SELECT 'moves ' || to_jsonb(t)::text FROM subscription_state_moves t",
    ];
    let mut out = Vec::new();
    for q in queries {
        for r in client.query(q, &[]).await.expect(q) {
            out.push(r.get::<_, String>(0));
        }
    }
    out.sort();
    out
}

fn short(s: &str) -> &str {
    &s[..s.len().min(600)]
}

/// Asserts two dumps are equal, showing the first differing rows.
pub(crate) fn assert_same_index(a: &[String], b: &[String]) {
    if a == b {
        return;
    }
    let only_a: Vec<_> = a.iter().filter(|r| !b.contains(r)).take(5).collect();
    let only_b: Vec<_> = b.iter().filter(|r| !a.contains(r)).take(5).collect();
    panic!(
        "indexes differ ({} vs {} rows)\nonly in the first:\n{}\nonly in the second:\n{}",
        a.len(),
        b.len(),
        only_a
            .iter()
            .map(|s| short(s))
            .collect::<Vec<_>>()
            .join("\n"),
        only_b
            .iter()
            .map(|s| short(s))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

/// Indexes the chain as it is now into a fresh database and returns its dump: the ground
/// truth for "equals a fresh index of the canonical chain".
/// `seed_sql` recreates the API rows (merchants, checkouts) the index resolves against.
pub(crate) async fn fresh_index_dump(
    chain: &DevChain,
    cfg: IndexerConfig,
    seed_sql: &str,
) -> Vec<String> {
    let db = TestDb::create().await;
    let client = db.connect().await;
    client.batch_execute(seed_sql).await.expect("seed");
    let ix = start(cfg, &db, chain);
    wait_for_head(&client, chain).await;
    ix.stop().await.expect("fresh indexer");
    dump(&client).await
}

// ------------------------------------------------------------------ driving the contract

/// 1 USDC in base units.
pub(crate) const USDC: u64 = 1_000_000;

/// Creates a plan for `merchant` (sent by the operator) and returns its on-chain id.
pub(crate) async fn create_plan(
    chain: &DevChain,
    merchant: Address,
    amount: u64,
    plan_ref: B256,
) -> u64 {
    let op = DevChain::address(chainsub_tests::chain::accounts::OPERATOR);
    chainsub_tests::send_as!(
        op,
        chain
            .manager()
            .createPlan(merchant, U256::from(amount), plan_ref)
    );
    chain
        .manager()
        .planCount()
        .call()
        .await
        .expect("planCount")
        .to()
}

/// Mints `amount` to `who` and approves the manager for everything.
pub(crate) async fn fund(chain: &DevChain, who: Address, amount: u64) {
    chain.mint(who, amount).await;
    chainsub_tests::send_as!(who, chain.usdc().approve(chain.manager, U256::MAX));
}

/// Subscribes `who` to `plan` and returns the subscription id.
pub(crate) async fn subscribe(
    chain: &DevChain,
    who: Address,
    plan: u64,
    customer_ref: B256,
) -> u64 {
    let (merchant, amount) = chain.plan_terms(U256::from(plan)).await;
    chainsub_tests::send_as!(
        who,
        chain
            .manager()
            .subscribe(U256::from(plan), merchant, amount, customer_ref)
    );
    chain
        .manager()
        .subscriptionCount()
        .call()
        .await
        .expect("subscriptionCount")
        .to()
}

/// Charges a subscription (as the keeper).
pub(crate) async fn charge(chain: &DevChain, sub: u64) {
    let keeper = DevChain::address(chainsub_tests::chain::accounts::KEEPER);
    chainsub_tests::send_as!(keeper, chain.manager().charge(U256::from(sub)));
}

// ------------------------------------------------------------------ the indexer as a process

/// Spawns the `indexer` binary for `chain` into `db`, serving health on `metrics_port`.
pub(crate) fn spawn_indexer(
    chain: &DevChain,
    db: &TestDb,
    metrics: &chainsub_tests::Reserved,
    extra_env: &[(&str, &str)],
) -> chainsub_tests::ChildGuard {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_indexer"));
    cmd.env("DATABASE_URL", &db.url)
        .env("RPC_URL", &chain.anvil.url)
        .env("CHAIN_ID", chain.anvil.chain_id.to_string())
        .env("CONTRACT_ADDRESS", chain.manager.to_string())
        .env("START_BLOCK", chain.deploy_block.to_string())
        .env("CONFIRMATIONS", "0")
        .env("INDEXER_METRICS_LISTEN", "stdin")
        .stdin(metrics.stdin())
        .env("INDEXER_POLL_INTERVAL_MS", "20")
        .env("INDEXER_MIN_BACKOFF_MS", "5")
        .env("INDEXER_MAX_BACKOFF_MS", "100")
        .env("INDEXER_NO_FINALIZED_TAG", "true")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    chainsub_tests::ChildGuard(cmd.spawn().expect("spawn indexer"))
}

/// GET `path` on 127.0.0.1:`port`; the body, or `None` when nothing answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<String> {
    chainsub_tests::http_get(port, path).map(|(_, body)| body)
}

/// The `/health` JSON of an indexer process, once it answers.
pub(crate) async fn health(port: u16) -> serde_json::Value {
    let mut body = None;
    wait_until("health endpoint", || {
        body = http_get(port, "/health");
        let ready = body.is_some();
        async move { ready }
    })
    .await;
    serde_json::from_str(body.as_deref().unwrap_or("{}")).expect("health json")
}

/// The usual start of an indexer test: a fresh chain and database, one 1-USDC plan of the
/// MERCHANT account, and the CUSTOMER account funded with 10 USDC.
pub(crate) struct Scene {
    pub chain: DevChain,
    pub db: TestDb,
    pub client: Client,
    pub plan: u64,
}

impl Scene {
    pub(crate) async fn start() -> Self {
        let chain = DevChain::start().await;
        let db = TestDb::create().await;
        let client = db.connect().await;
        let merchant = DevChain::address(chainsub_tests::chain::accounts::MERCHANT);
        let plan = create_plan(&chain, merchant, USDC, B256::repeat_byte(1)).await;
        let customer = DevChain::address(chainsub_tests::chain::accounts::CUSTOMER);
        fund(&chain, customer, 10 * USDC).await;
        Self {
            chain,
            db,
            client,
            plan,
        }
    }
}
