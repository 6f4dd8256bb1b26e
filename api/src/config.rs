//! Configuration from flags and the environment (every knob is in docs/operations.md).

use chainsub_core::Listen;
use std::time::Duration;

use alloy::primitives::Address;

/// Everything `api serve` needs. Defaults suit a local dev chain; production values are explicit.
#[derive(Clone, clap::Args)]
pub struct Config {
    /// Postgres connection string.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// A hot-standby streaming replica of `DATABASE_URL`: the lists and gets of subscriptions
    /// and events, the reports and the ledger export read there while its replayed index is
    /// within `READ_MAX_LAG_BLOCKS` of the primary's (everything else, and every read when it
    /// is behind or down, uses the primary). Unset: every read uses the primary.
    #[arg(long, env = "READ_DATABASE_URL")]
    pub read_database_url: Option<String>,
    /// How many blocks the replica's index may be behind the primary's for reads to use it.
    #[arg(long, env = "READ_MAX_LAG_BLOCKS", default_value_t = 2)]
    pub read_max_lag_blocks: u64,
    /// Maximum Postgres connections in the pool.
    #[arg(long, env = "DATABASE_POOL_SIZE", default_value_t = 16)]
    pub database_pool_size: usize,
    /// JSON-RPC endpoint of the chain (used to provision plans and to read the head).
    #[arg(long, env = "RPC_URL", default_value = "http://127.0.0.1:8545")]
    pub rpc_url: chainsub_core::RpcUrl,
    /// The one chain this deployment serves.
    #[arg(long, env = "CHAIN_ID", default_value = "31337")]
    pub chain_id: chainsub_core::ChainId,
    /// Plans one merchant may create per 24 hours (each costs the relayer a transaction);
    /// beyond it POST /plans answers 429 `plan_quota_exceeded` with Retry-After. Anyone can
    /// sign up as a merchant: this bounds what one can spend of the relayer's funds.
    #[arg(long, env = "PLAN_CREATIONS_PER_DAY", default_value_t = 100)]
    pub plan_creations_per_day: i64,
    /// Below this balance (wei) the relayer sends nothing: plan creation and provisioning
    /// answer 503 `relayer_underfunded`, `/api/v1/health` says `relayer: low_balance`, and
    /// `api_relayer_balance_wei` shows the balance. Default 0.05 ETH.
    #[arg(
        long,
        env = "RELAYER_MIN_BALANCE_WEI",
        default_value_t = 50_000_000_000_000_000
    )]
    pub relayer_min_balance_wei: u128,
    /// Transactions the relayer signs for one merchant in 24 hours at most — plan
    /// creations, cancellations and every replacement; past it 429 `relayer_quota_exceeded`.
    #[arg(
        long,
        env = "RELAYER_SENDS_PER_MERCHANT_PER_DAY",
        default_value_t = 200
    )]
    pub relayer_sends_per_merchant_per_day: i64,
    /// How often one unmined relayer transaction is replaced at its nonce, at most.
    #[arg(long, env = "RELAYER_MAX_REPLACEMENTS", default_value_t = 5)]
    pub relayer_max_replacements: i64,
    /// A relayer transaction younger than this is never replaced (a retry reports it
    /// pending instead).
    #[arg(long, env = "RELAYER_REPLACE_AFTER_SECS", default_value_t = 30)]
    pub relayer_replace_after_secs: u64,
    /// The highest max fee per gas the relayer signs, in wei (default 500 gwei): a new
    /// transaction is capped at it, and a replacement that would need more is not sent.
    #[arg(
        long,
        env = "RELAYER_MAX_FEE_PER_GAS",
        default_value_t = 500_000_000_000
    )]
    pub relayer_max_fee_per_gas: u128,
    /// Test-only, comma-separated: abort the process at a named point
    /// (`relayer-after-journal`: a transaction was journaled on its row, not broadcast yet),
    /// as a crash would, or pause there (`relayer-pause-after-journal` 1 s,
    /// `relayer-pause-before-rebroadcast` 2 s), as a slow process would.
    #[arg(long, env = "API_FAIL_POINT", hide = true)]
    pub fail_point: Option<String>,
    /// Confirmations an indexed plan needs before the checkout hands out a transaction to
    /// subscribe to it (the indexer's setting of the same name; 0 or 1: once indexed).
    #[arg(long, env = "CONFIRMATIONS", default_value_t = 12)]
    pub confirmations: u64,
    /// Seconds an API key's lookup is cached in this process at most (0: every request reads
    /// the key from the database). A revocation takes effect when the process hears it
    /// (LISTEN): the cache is used only while it can, see `auth::key_cache`.
    #[arg(long, env = "API_KEY_CACHE_SECS", default_value_t = 30)]
    pub api_key_cache_secs: u64,
    /// Ledger exports (`GET /api/v1/ledger`) one API process streams at once (a merchant runs
    /// one at a time). More are refused with 429 `exports_busy`.
    #[arg(long, env = "LEDGER_EXPORTS_MAX", default_value_t = 2)]
    pub ledger_exports_max: usize,
    /// An export whose client takes no data for this long is abandoned (its slot is free
    /// again).
    #[arg(long, env = "LEDGER_EXPORT_STALL_SECS", default_value_t = 60)]
    pub ledger_export_stall_secs: u64,
    /// An export still running after this long is ended, however steadily its client reads:
    /// the body then lacks its `total` records (cut short; resume from its last block).
    #[arg(long, env = "LEDGER_EXPORT_MAX_SECS", default_value_t = 3_600)]
    pub ledger_export_max_secs: u64,
    /// Ledger entries an export reads per statement: each page is its own short statement on
    /// a pooled connection given back before the page is sent, so a slow reader holds no
    /// snapshot (vacuum is never held back by an export) and no connection.
    #[arg(long, env = "LEDGER_EXPORT_PAGE_ROWS", default_value_t = 1_000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub ledger_export_page_rows: i64,
    /// SubscriptionManager address.
    #[arg(long, env = "CONTRACT_ADDRESS")]
    pub contract_address: Address,
    /// USDC (MockUSDC on a dev chain) address.
    #[arg(long, env = "USDC_ADDRESS")]
    pub usdc_address: Address,
    /// Listen address; port 0 picks a free port (the bound address is logged), and `stdin`
    /// serves a listening socket handed over as standard input (see `chainsub_core::listen`).
    #[arg(long, env = "API_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: Listen,
    /// Public base URL: SIWE domain/URI, checkout URLs, cookie security (https => __Host-/Secure).
    #[arg(long, env = "BASE_URL", default_value = "http://127.0.0.1:8080")]
    pub base_url: url::Url,
    /// Key of the relayer (the contract's operator) that sends createPlan. Without it plans
    /// stay `pending` with a visible error.
    #[arg(long, env = "RELAYER_PRIVATE_KEY", hide_env_values = true)]
    pub relayer_private_key: Option<Secret>,
    /// HMAC secret that signs checkout URLs and derives on-chain customer references.
    #[arg(long, env = "CHECKOUT_SIGNING_SECRET", hide_env_values = true)]
    pub checkout_signing_secret: Secret,
    /// Upper bound on waiting for a createPlan receipt inside POST /plans, in milliseconds.
    #[arg(long, env = "PROVISION_TIMEOUT_MS", default_value_t = 15_000)]
    pub provision_timeout_ms: u64,
    /// Requests per second allowed per API key (sustained).
    #[arg(long, env = "RATE_LIMIT_KEY_PER_SEC", default_value_t = 100)]
    pub rate_limit_key_per_sec: u32,
    /// Burst allowed per API key.
    #[arg(long, env = "RATE_LIMIT_KEY_BURST", default_value_t = 200)]
    pub rate_limit_key_burst: u32,
    /// Requests per second allowed per client IP on unauthenticated and dashboard routes.
    #[arg(long, env = "RATE_LIMIT_IP_PER_SEC", default_value_t = 20)]
    pub rate_limit_ip_per_sec: u32,
    /// Burst allowed per client IP.
    #[arg(long, env = "RATE_LIMIT_IP_BURST", default_value_t = 60)]
    pub rate_limit_ip_burst: u32,
    /// `GET /api/v1/health` per client, its own bucket (monitors never spend a client's
    /// API budget, and a flood of health checks stays off the database).
    #[arg(long, env = "RATE_LIMIT_HEALTH_PER_SEC", default_value_t = 10)]
    pub rate_limit_health_per_sec: u32,
    #[arg(long, env = "RATE_LIMIT_HEALTH_BURST", default_value_t = 30)]
    pub rate_limit_health_burst: u32,
    /// Reverse proxies whose `Forwarded` / `X-Forwarded-For` headers name the client for
    /// per-IP limits (comma-separated CIDRs, e.g. `10.0.0.0/8,fd00::/8`). Empty: the TCP
    /// peer is the client and those headers are ignored.
    #[arg(long, env = "TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<crate::http::client_ip::Cidr>,
    /// The one header your proxies write the client's address in: `x-forwarded-for`
    /// (nginx, HAProxy, AWS ALB; the default) or `forwarded` (RFC 7239). The other is never
    /// read. Every line of it counts, walked from the right past the trusted hops.
    #[arg(long, env = "FORWARDED_HEADER", value_enum, default_value_t)]
    pub forwarded_header: crate::http::client_ip::ForwardedHeader,
    /// Lifetime of a dashboard session, in seconds.
    #[arg(long, env = "SESSION_TTL_SECS", default_value_t = 12 * 3600)]
    pub session_ttl_secs: u64,
    /// Lifetime of a SIWE nonce, in seconds (also the oldest accepted `Issued At`).
    #[arg(long, env = "SIWE_NONCE_TTL_SECS", default_value_t = 600)]
    pub siwe_nonce_ttl_secs: u64,
    /// How long start-up keeps retrying a database or node that does not answer yet
    /// (connect, migrations, the node's chain id), with backoff; a wrong setting fails at
    /// once.
    #[arg(long, env = "STARTUP_DEADLINE_SECS", default_value_t = 60)]
    pub startup_deadline_secs: u64,
    /// Do not apply pending migrations at start.
    #[arg(long, env = "NO_MIGRATE")]
    pub no_migrate: bool,
    /// Threads of the multi-threaded runtime: it runs the dispatcher inside `serve`,
    /// `/metrics` and, with `API_SHARDS=0` (and in-process test servers), the requests too.
    /// Unset: one per core.
    #[arg(long, env = "API_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// Request loops of `api serve`, each a single-threaded runtime with its own share of
    /// the pool, all accepting on the one listening socket; a connection stays on the loop
    /// that accepted it, so no wake-up crosses threads (`API_SHARDS` in docs/operations.md).
    /// Unset: one per core, but no more than leaves each loop 4 of `DATABASE_POOL_SIZE`'s
    /// connections. `0`: one multi-threaded runtime of `API_WORKER_THREADS` threads instead.
    #[arg(long, env = "API_SHARDS")]
    pub shards: Option<usize>,
    /// Do not run the webhook dispatcher inside `serve` (run `api dispatch` apart instead).
    #[arg(long, env = "NO_DISPATCHER")]
    pub no_dispatcher: bool,
    /// Listen address for Prometheus `/metrics` (keep it private: it is never served on the
    /// public API port). Unset: no metrics endpoint.
    #[arg(long, env = "API_METRICS_LISTEN")]
    pub metrics_listen: Option<Listen>,
    /// Webhook dispatcher and endpoint settings (WEBHOOK_*).
    #[command(flatten)]
    pub webhooks: chainsub_webhooks::WebhookConfig,
    /// Connection caps and timeouts of the API's listeners.
    #[command(flatten)]
    pub http: chainsub_serve::HttpLimits,
    /// Checkout and dashboard page settings (EXPLORER_TX_URL, CHECKOUT_ALLOWANCE_PERIODS).
    #[command(flatten)]
    pub pages: crate::pages::PagesConfig,
}

impl Config {
    /// The bounded wait for a provisioning receipt.
    pub fn provision_timeout(&self) -> Duration {
        Duration::from_millis(self.provision_timeout_ms)
    }

    /// True when served over TLS (cookies get `Secure` and the `__Host-` prefix).
    pub fn is_https(&self) -> bool {
        self.base_url.scheme() == "https"
    }

    /// `host[:port]` of BASE_URL: the SIWE domain.
    pub fn siwe_domain(&self) -> String {
        siwe_domain(&self.base_url)
    }

    /// BASE_URL without a trailing slash.
    pub fn base(&self) -> String {
        self.base_url.as_str().trim_end_matches('/').to_string()
    }
}

/// A secret string whose `Debug`/`Display` never show it.
#[derive(Clone)]
pub struct Secret(String);

/// The EIP-4361 `domain` of a base URL: its host, with the port when one is given.
pub fn siwe_domain(base_url: &url::Url) -> String {
    let host = base_url.host_str().unwrap_or_default();
    match base_url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The secret itself; call sites are the only places it is used.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Secret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err("empty secret".into());
        }
        Ok(Self(s.to_string()))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Hand-written so that secrets and the database password never reach a log line.
        f.debug_struct("Config")
            .field("chain_id", &self.chain_id)
            .field("contract_address", &self.contract_address)
            .field("listen", &self.listen)
            .field("read_replica", &self.read_database_url.is_some())
            .field("base_url", &self.base_url.as_str())
            .field("relayer", &self.relayer_private_key.is_some())
            .finish_non_exhaustive()
    }
}
