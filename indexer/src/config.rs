//! Settings, from flags and the environment (every one is in the README's table).

use chainsub_core::Listen;
use std::time::Duration;

use alloy::primitives::Address;
use clap::{Args, Parser, Subcommand};

use crate::source::FetchConfig;
use crate::stream::ReorgPolicy;

/// `indexer`: follows the SubscriptionManager contract into Postgres.
#[derive(Debug, Parser)]
#[command(name = "indexer", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
}

/// Subcommands; `run` is the default.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Index the chain (default).
    Run,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Recompute from the chain every row the API serves for a block range (events,
    /// snapshots, ledger, plans, subscriptions, outbox; the contract's state at --to) and
    /// report every difference with the database; exits non-zero on any.
    Verify {
        #[arg(long)]
        from: u64,
        #[arg(long)]
        to: u64,
        /// Print the findings as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Re-check a ledger export (`GET /api/v1/ledger`, NDJSON or CSV; `-` for standard input)
    /// against the chain at RPC_URL; needs nothing else. Exits 1 on any difference.
    VerifyExport {
        file: std::path::PathBuf,
        /// Print the findings as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Every knob of the indexer.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Postgres connection string.
    #[arg(long, env = "DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// JSON-RPC endpoint of the chain (HTTP).
    #[arg(long, env = "RPC_URL", global = true)]
    pub rpc_url: Option<chainsub_core::RpcUrl>,
    /// Chain id; the node must report the same.
    #[arg(long, env = "CHAIN_ID", global = true)]
    pub chain_id: Option<chainsub_core::ChainId>,
    /// SubscriptionManager address.
    #[arg(long, env = "CONTRACT_ADDRESS", global = true)]
    pub contract_address: Option<Address>,
    /// The contract's deployment block; indexing starts here.
    #[arg(long, env = "START_BLOCK", default_value_t = 0, global = true)]
    pub start_block: u64,
    /// Confirmations before an event goes to the webhook outbox (0 or 1: at once).
    #[arg(long, env = "CONFIRMATIONS", default_value_t = 12, global = true)]
    pub confirmations: u64,
    /// Health and Prometheus metrics listen address.
    #[arg(
        long,
        env = "INDEXER_METRICS_LISTEN",
        default_value = "127.0.0.1:9101",
        global = true
    )]
    pub metrics_listen: Listen,
    /// Connection caps and timeouts of that listener (`HTTP_*`).
    #[command(flatten)]
    pub http: chainsub_serve::HttpLimits,
    /// How often to poll for new blocks at the head, in milliseconds.
    #[arg(
        long,
        env = "INDEXER_POLL_INTERVAL_MS",
        default_value_t = 1000,
        global = true
    )]
    pub poll_interval_ms: u64,
    /// First eth_getLogs range, in blocks.
    #[arg(
        long,
        env = "INDEXER_INITIAL_RANGE",
        default_value_t = 100,
        global = true
    )]
    pub initial_range: u64,
    /// Largest eth_getLogs range (and batch) in blocks.
    #[arg(long, env = "INDEXER_MAX_RANGE", default_value_t = 2000, global = true)]
    pub max_range: u64,
    /// A getLogs answer with this many logs is treated as truncated (provider cap).
    #[arg(
        long,
        env = "INDEXER_MAX_LOGS_PER_RESPONSE",
        default_value_t = 10_000,
        global = true
    )]
    pub max_logs_per_response: usize,
    /// First retry backoff, in milliseconds (doubles up to the max).
    #[arg(
        long,
        env = "INDEXER_MIN_BACKOFF_MS",
        default_value_t = 100,
        global = true
    )]
    pub min_backoff_ms: u64,
    /// Largest retry backoff, in milliseconds.
    #[arg(
        long,
        env = "INDEXER_MAX_BACKOFF_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub max_backoff_ms: u64,
    /// Timeout of one RPC call, in milliseconds.
    #[arg(
        long,
        env = "INDEXER_RPC_TIMEOUT_MS",
        default_value_t = 30_000,
        global = true
    )]
    pub rpc_timeout_ms: u64,
    /// Retries of an empty answer for a block whose logsBloom names the contract.
    #[arg(
        long,
        env = "INDEXER_BLOOM_RETRIES",
        default_value_t = 3,
        global = true
    )]
    pub bloom_retries: u32,
    /// Finality depth used when the node has no `finalized` tag (or it is disabled).
    #[arg(
        long,
        env = "INDEXER_FINALITY_DEPTH",
        default_value_t = 64,
        global = true
    )]
    pub finality_depth: u64,
    /// Ignore the node's `finalized` tag and use the depth only.
    #[arg(long, env = "INDEXER_NO_FINALIZED_TAG", global = true)]
    pub no_finalized_tag: bool,
    /// What to do on a reorg deeper than the finality window.
    #[arg(
        long,
        env = "INDEXER_REORG_POLICY",
        value_enum,
        default_value = "halt",
        global = true
    )]
    pub reorg_policy: ReorgPolicy,
    /// How long the node's head may stay below the index's cursor, on the same chain, before
    /// the blocks above it are undone (a lagging replica catches up within it; a chain that
    /// lost its tip does not). A head on another branch is undone at once.
    #[arg(
        long,
        env = "INDEXER_SHORTER_CHAIN_GRACE_MS",
        default_value_t = 30_000,
        global = true
    )]
    pub shorter_chain_grace_ms: u64,
    /// The writer's database session ends after this long without a statement (or inside
    /// an idle transaction), so a frozen or partitioned writer loses the lock and a standby
    /// takes over within about this bound.
    #[arg(
        long,
        env = "INDEXER_WRITER_IDLE_TIMEOUT_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub writer_idle_timeout_ms: u64,
    /// Readiness (`/health`) fails while the writer lags the head by more than this many
    /// blocks (0: never).
    #[arg(
        long,
        env = "INDEXER_MAX_LAG_BLOCKS",
        default_value_t = 64,
        global = true
    )]
    pub max_lag_blocks: u64,
    /// How long start-up keeps retrying a database or node that does not answer yet
    /// (connect, migrations, the node's chain id), with backoff; a wrong setting fails at
    /// once.
    #[arg(
        long,
        env = "STARTUP_DEADLINE_SECS",
        default_value_t = 60,
        global = true
    )]
    pub startup_deadline_secs: u64,
    /// Do not apply migrations at start.
    #[arg(long, env = "INDEXER_NO_MIGRATE", global = true)]
    pub no_migrate: bool,
}

/// The resolved configuration the library runs with.
#[derive(Debug, Clone)]
pub struct IndexerConfig {
    pub chain_id: chainsub_core::ChainId,
    pub contract: Address,
    pub start_block: u64,
    pub confirmations: u64,
    pub poll_interval: Duration,
    pub fetch: FetchConfig,
    pub finality_depth: u64,
    pub use_finalized_tag: bool,
    pub reorg_policy: ReorgPolicy,
    pub shorter_chain_grace: Duration,
    pub writer_idle_timeout: Duration,
}

impl IndexerConfig {
    /// Defaults for `chain_id` and `contract` (tests and benches adjust the rest).
    pub fn new(chain_id: chainsub_core::ChainId, contract: Address, start_block: u64) -> Self {
        Self {
            chain_id,
            contract,
            start_block,
            confirmations: 12,
            poll_interval: Duration::from_secs(1),
            fetch: FetchConfig::default(),
            finality_depth: 64,
            use_finalized_tag: true,
            reorg_policy: ReorgPolicy::Halt,
            shorter_chain_grace: Duration::from_secs(30),
            writer_idle_timeout: Duration::from_secs(10),
        }
    }
}

fn required<T: Clone>(v: &Option<T>, name: &str) -> crate::Result<T> {
    v.clone()
        .ok_or_else(|| crate::Error::Config(format!("{name} is required")))
}

impl Settings {
    /// DATABASE_URL.
    pub fn database_url(&self) -> crate::Result<String> {
        required(&self.database_url, "DATABASE_URL")
    }

    /// RPC_URL.
    pub fn rpc_url(&self) -> crate::Result<chainsub_core::RpcUrl> {
        required(&self.rpc_url, "RPC_URL")
    }

    /// The library configuration.
    pub fn indexer_config(&self) -> crate::Result<IndexerConfig> {
        if self.writer_idle_timeout_ms < 2_000 {
            return Err(crate::Error::Config(
                "INDEXER_WRITER_IDLE_TIMEOUT_MS must be at least 2000 (the writer pings its \
                 database every second)"
                    .into(),
            ));
        }
        Ok(IndexerConfig {
            chain_id: required(&self.chain_id, "CHAIN_ID")?,
            contract: required(&self.contract_address, "CONTRACT_ADDRESS")?,
            start_block: self.start_block,
            confirmations: self.confirmations,
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            fetch: FetchConfig {
                initial_range: self.initial_range,
                max_range: self.max_range,
                max_logs_per_response: self.max_logs_per_response,
                min_backoff: Duration::from_millis(self.min_backoff_ms),
                max_backoff: Duration::from_millis(self.max_backoff_ms),
                rpc_timeout: Duration::from_millis(self.rpc_timeout_ms),
                bloom_retries: self.bloom_retries,
            },
            finality_depth: self.finality_depth,
            use_finalized_tag: !self.no_finalized_tag,
            reorg_policy: self.reorg_policy,
            shorter_chain_grace: Duration::from_millis(self.shorter_chain_grace_ms),
            writer_idle_timeout: Duration::from_millis(self.writer_idle_timeout_ms),
        })
    }
}
