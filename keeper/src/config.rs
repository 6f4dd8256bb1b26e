//! Keeper configuration: flags and environment (clap), parsed into types at the boundary.

use chainsub_core::Listen;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use alloy::primitives::Address;
use alloy::signers::local::PrivateKeySigner;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The keeper's signing key. `Debug` shows the address only, never the key.
#[derive(Clone)]
pub struct KeeperKey(pub PrivateKeySigner);

impl FromStr for KeeperKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<PrivateKeySigner>()
            .map(KeeperKey)
            // The parse error could echo key material; say only what is wrong.
            .map_err(|_| "KEEPER_PRIVATE_KEY is not a 32-byte hex private key".to_string())
    }
}

impl fmt::Debug for KeeperKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeeperKey({} [redacted])", self.0.address())
    }
}

/// `keeper`: sends `charge(subscriptionId)` for every due subscription in the index.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "keeper",
    version,
    about = "Chainsub renewal keeper: sends charge(subscriptionId) for every due subscription in the index"
)]
pub struct Config {
    /// Postgres URL of the index (the indexer's database).
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// JSON-RPC endpoint of the chain.
    #[arg(long, env = "RPC_URL")]
    pub rpc_url: chainsub_core::RpcUrl,
    /// Chain id; checked against the RPC at start.
    #[arg(long, env = "CHAIN_ID")]
    pub chain_id: chainsub_core::ChainId,
    /// SubscriptionManager address.
    #[arg(long, env = "CONTRACT_ADDRESS")]
    pub contract_address: Address,
    /// The keeper's own key (hex). Pays the gas of every charge.
    #[arg(long, env = "KEEPER_PRIVATE_KEY", hide_env_values = true)]
    pub keeper_private_key: KeeperKey,
    /// Health (`/health`) and Prometheus (`/metrics`) listen address.
    #[arg(long, env = "KEEPER_METRICS_LISTEN", default_value = "127.0.0.1:9102")]
    pub metrics_listen: Listen,
    /// Connection caps and timeouts of that listener (`HTTP_*`).
    #[command(flatten)]
    pub http: chainsub_serve::HttpLimits,
    /// The lock session ends on the server after this long without a statement (a
    /// heartbeat keeps a running keeper's busy), so a frozen or partitioned keeper loses the
    /// lock and a standby takes over within about this plus one poll interval.
    #[arg(long, env = "KEEPER_LOCK_IDLE_TIMEOUT_MS", default_value_t = 10_000)]
    pub lock_idle_timeout_ms: u64,
    /// Time between passes, in milliseconds.
    #[arg(long, env = "KEEPER_POLL_INTERVAL_MS", default_value_t = 15_000)]
    pub poll_interval_ms: u64,
    /// Time until the next pass, in milliseconds, when the last one left due renewals unsent
    /// because `--concurrency` transactions were in flight (a renewal wave): receipts free
    /// the bound long before the poll interval is over.
    #[arg(long, env = "KEEPER_BUSY_INTERVAL_MS", default_value_t = 250)]
    pub busy_interval_ms: u64,
    /// Most transactions in flight (sent, not yet mined) at once; also the number of
    /// preflight checks run in parallel.
    #[arg(long, env = "KEEPER_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Gas budget in wei per window: sends stop (and are reported) once the fees paid, plus
    /// the worst-case fees of transactions still in flight, would exceed it.
    #[arg(
        long,
        env = "KEEPER_GAS_BUDGET_WEI",
        default_value_t = 1_000_000_000_000_000_000
    )]
    pub gas_budget_wei: u128,
    /// Gas (units, not wei: fair whatever the price) the charges of ONE merchant's
    /// subscriptions may use per budget window — gas used once mined, the gas limit while in
    /// flight. A merchant (anyone can sign up) with many tiny subscriptions cannot spend the
    /// global budget before other merchants' renewals. 0: no per-merchant bound. The default
    /// is about 560 renewals a day; raise it for large merchants.
    #[arg(long, env = "KEEPER_MERCHANT_GAS_BUDGET", default_value_t = 40_000_000)]
    pub merchant_gas_budget: u64,
    /// Charge subscriptions of every plan on the contract. By default the keeper charges
    /// only plans this service provisioned (a plan row of the API, by reference and the
    /// merchant's wallet) and plans of `--allow-merchants`: anyone can create plans on the
    /// contract, and the keeper's gas is the service's money.
    #[arg(long, env = "KEEPER_CHARGE_ANY_PLAN", default_value_t = false)]
    pub charge_any_plan: bool,
    /// Merchant wallets whose plans are charged even when the API did not provision them
    /// (comma-separated).
    #[arg(long, env = "KEEPER_ALLOW_MERCHANTS", value_delimiter = ',')]
    pub allow_merchants: Vec<Address>,
    /// Length of the gas budget window, in seconds.
    #[arg(long, env = "KEEPER_BUDGET_WINDOW_SECS", default_value_t = 86_400)]
    pub budget_window_secs: u64,
    /// Check the subscriber's USDC balance and allowance before a charge; a charge that
    /// would fail is deferred (see `--futile-defer-secs`).
    #[arg(long, env = "KEEPER_PRECHECK_FUNDS", default_value_t = false)]
    pub precheck_funds: bool,
    /// How long (chain time, seconds) a futile charge attempt is held back after it fell due
    /// before it is sent anyway, so that the failure is recorded and the grace rules move on.
    #[arg(long, env = "KEEPER_FUTILE_DEFER_SECS", default_value_t = 21_600)]
    pub futile_defer_secs: u64,
    /// Renewal-at-risk warnings: this many seconds (chain time) before a renewal falls due,
    /// the keeper reads the subscriber's USDC balance and allowance once, and records a
    /// `subscription.renewal_at_risk` event (listed and sent by webhook) for each that cannot
    /// cover the charge. 0 turns the warnings off.
    #[arg(long, env = "KEEPER_RENEWAL_RISK_LEAD_SECS", default_value_t = 259_200)]
    pub renewal_risk_lead_secs: u64,
    /// Trial notices: this many seconds (chain time) before a free trial ends, the keeper
    /// records a `subscription.trial_will_end` event (listed and sent by webhook), once per
    /// trial. 0 turns the notices off.
    #[arg(
        long,
        env = "KEEPER_TRIAL_WILL_END_LEAD_SECS",
        default_value_t = 259_200
    )]
    pub trial_will_end_lead_secs: u64,
    /// A transaction without a receipt after this many milliseconds is replaced (same nonce,
    /// higher fee).
    #[arg(long, env = "KEEPER_REPLACE_AFTER_MS", default_value_t = 120_000)]
    pub replace_after_ms: u64,
    /// Fee increase of a replacement, in percent (nodes require at least 10).
    #[arg(long, env = "KEEPER_FEE_BUMP_PERCENT", default_value_t = 25)]
    pub fee_bump_percent: u32,
    /// Gas limit of a charge, in percent of the node's estimate (the estimate is against the
    /// latest block; the send lands later).
    #[arg(long, env = "KEEPER_GAS_HEADROOM_PERCENT", default_value_t = 125)]
    pub gas_headroom_percent: u64,
    /// Times a charge that reverted on chain is sent again (each with a new nonce and 50%
    /// more gas than the last), after `--revert-backoff-ms` doubled per earlier revert. A
    /// step that reverts more often is abandoned: `keeper_steps_abandoned_total`, an error
    /// log naming the subscription and period, and `abandoned` in /health. 0: a revert is
    /// final.
    #[arg(long, env = "KEEPER_MAX_REVERT_RETRIES", default_value_t = 3)]
    pub max_revert_retries: u32,
    /// Wait before the first retry of a reverted charge, in milliseconds (wall clock).
    #[arg(long, env = "KEEPER_REVERT_BACKOFF_MS", default_value_t = 60_000)]
    pub revert_backoff_ms: u64,
    /// Most replacements of one transaction.
    #[arg(long, env = "KEEPER_MAX_REPLACEMENTS", default_value_t = 5)]
    pub max_replacements: u32,
    /// Ceiling of max_fee_per_gas, in wei (none when unset).
    #[arg(long, env = "KEEPER_MAX_FEE_PER_GAS_WEI")]
    pub max_fee_per_gas_wei: Option<u128>,
    /// Blocks below the head within which a mined keeper transaction is re-checked (and
    /// re-broadcast if a reorg removed it).
    #[arg(long, env = "KEEPER_REORG_DEPTH", default_value_t = 64)]
    pub reorg_depth: u64,
    /// Renewals per transaction: up to this many due steps go out as one
    /// `chargeMany(ids)` (each id charged exactly as `charge(id)` would; an id the contract
    /// cannot charge any more is skipped, never reverting the others), which costs less gas
    /// per renewal than one `charge` each (docs/contract.md, "Gas"). 1: one `charge(id)` per step. A
    /// step that reverted on chain is always retried alone.
    #[arg(long, env = "KEEPER_CHARGES_PER_TX", default_value_t = 25)]
    pub charges_per_tx: usize,
    /// Due subscriptions read per pass.
    #[arg(long, env = "KEEPER_BATCH_SIZE", default_value_t = 200)]
    pub batch_size: i64,
    /// Run one pass (resume in-flight sends, send what is due, record receipts) and exit.
    /// Exit status 2: the gas budget stopped sends; 3: another keeper holds the lock.
    #[arg(long)]
    pub once: bool,
    /// How long start-up keeps retrying a database or node that does not answer yet
    /// (connect, migrations, the node's chain id), with backoff; a wrong setting fails at
    /// once.
    #[arg(long, env = "STARTUP_DEADLINE_SECS", default_value_t = 60)]
    pub startup_deadline_secs: u64,
    /// Do not apply pending migrations at start.
    #[arg(long, env = "KEEPER_NO_MIGRATE", default_value_t = false)]
    pub no_migrate: bool,
    /// Test-only: abort the process at a named point (`after-persist`: right after a send
    /// was journaled, before it is broadcast), as a crash would.
    #[arg(long, env = "KEEPER_FAIL_POINT", hide = true)]
    pub fail_point: Option<String>,
    /// Log format (the same variable as the indexer's).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

impl Config {
    /// Time between passes.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    /// Time until the next pass while a wave is held back by the in-flight bound.
    pub fn busy_interval(&self) -> Duration {
        Duration::from_millis(self.busy_interval_ms)
    }

    /// [`Config::lock_idle_timeout_ms`] as a duration.
    pub fn lock_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.lock_idle_timeout_ms)
    }

    /// Rejects settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0 {
            return Err("KEEPER_CONCURRENCY must be at least 1".into());
        }
        if self.fee_bump_percent < 10 {
            return Err("KEEPER_FEE_BUMP_PERCENT must be at least 10 (nodes refuse less)".into());
        }
        if self.charges_per_tx == 0 || self.charges_per_tx > 200 {
            return Err("KEEPER_CHARGES_PER_TX must be between 1 and 200".into());
        }
        if self.batch_size < 1 {
            return Err("KEEPER_BATCH_SIZE must be at least 1".into());
        }
        if self.lock_idle_timeout_ms < 2_000 {
            return Err(
                "KEEPER_LOCK_IDLE_TIMEOUT_MS must be at least 2000 (the heartbeat runs every second)"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    const KEY: &str = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

    fn parse(extra: &[&str]) -> Result<Config, clap::Error> {
        let mut args = vec![
            "keeper",
            "--database-url",
            "postgres://x/y",
            "--rpc-url",
            "http://127.0.0.1:8545",
            "--chain-id",
            "31337",
            "--contract-address",
            "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            "--keeper-private-key",
            KEY,
        ];
        args.extend_from_slice(extra);
        Config::try_parse_from(args)
    }

    #[test]
    fn debug_output_never_contains_the_private_key() {
        let cfg = parse(&[]).unwrap();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn defaults_are_sane_and_validate() {
        let cfg = parse(&[]).unwrap();
        assert_eq!(cfg.metrics_listen.to_string(), "127.0.0.1:9102");
        assert!(!cfg.once && !cfg.precheck_funds);
        cfg.validate().unwrap();
    }

    #[test]
    fn a_lock_idle_timeout_the_heartbeat_cannot_keep_is_refused() {
        let cfg = parse(&["--lock-idle-timeout-ms", "1000"]).unwrap();
        assert!(
            cfg.validate()
                .unwrap_err()
                .contains("KEEPER_LOCK_IDLE_TIMEOUT_MS")
        );
        parse(&["--lock-idle-timeout-ms", "2000"])
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn fee_bump_below_ten_percent_is_refused() {
        let cfg = parse(&["--fee-bump-percent", "5"]).unwrap();
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn garbage_key_is_refused_without_echoing_it() {
        let err = "not-a-key-0123".parse::<KeeperKey>().unwrap_err();
        assert!(!err.contains("not-a-key"));
    }
}
