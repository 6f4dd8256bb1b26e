//! Webhook knobs (flags and environment; listed in docs/operations.md). Defaults are the
//! production values; tests shrink the schedule, timeout and lease to milliseconds.

use std::time::Duration;

use super::schedule::{RetrySchedule, parse_duration};
use super::ssrf::AddressPolicy;

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).ok_or_else(|| format!("invalid duration {s:?} (use e.g. 250ms, 15s, 5m, 2h)"))
}

/// Dispatcher and endpoint settings, shared by `api serve` (which runs a dispatcher unless
/// told not to) and `api dispatch`.
#[derive(Debug, Clone, clap::Args)]
pub struct WebhookConfig {
    /// Per-attempt HTTP timeout (connect + response headers + excerpt).
    #[arg(long = "webhook-timeout", env = "WEBHOOK_TIMEOUT", value_parser = duration, default_value = "15s")]
    pub timeout: Duration,
    /// Delay before each attempt, comma-separated; after the last attempt fails the
    /// delivery is `failed`.
    #[arg(long = "webhook-retry-schedule", env = "WEBHOOK_RETRY_SCHEDULE", default_value = super::schedule::DEFAULT_SCHEDULE)]
    pub retry_schedule: RetrySchedule,
    /// Upper bound on a receiver's `Retry-After`.
    #[arg(long = "webhook-retry-after-max", env = "WEBHOOK_RETRY_AFTER_MAX", value_parser = duration, default_value = "1h")]
    pub retry_after_max: Duration,
    /// Deliveries in flight per dispatcher process.
    #[arg(
        long = "webhook-concurrency",
        env = "WEBHOOK_CONCURRENCY",
        default_value_t = 64
    )]
    pub concurrency: usize,
    /// Deliveries in flight per merchant endpoint per dispatcher process, so one slow
    /// endpoint cannot take every worker.
    #[arg(
        long = "webhook-per-merchant-concurrency",
        env = "WEBHOOK_PER_MERCHANT_CONCURRENCY",
        default_value_t = 8
    )]
    pub per_merchant_concurrency: usize,
    /// Rows a dispatcher holds claimed beyond its requests in flight, so the next ones are
    /// ready when a slot frees; it claims again once half of them have gone out. Each claim
    /// round costs a few statements whatever it claims, so larger rounds cost Postgres less
    /// per delivery; a claimed row waits for a request slot, and one whose lease could run
    /// out before its request ends is handed back unsent.
    #[arg(
        long = "webhook-claim-ahead",
        env = "WEBHOOK_CLAIM_AHEAD",
        default_value_t = 256
    )]
    pub claim_ahead: usize,
    /// How long a claimed delivery is reserved; a dispatcher that dies mid-delivery loses
    /// its claims when this runs out and another dispatcher redelivers (same webhook-id).
    /// Must exceed twice the timeout: a claimed row waits for a request slot (behind at most
    /// `WEBHOOK_CLAIM_AHEAD` others), and is sent only while at least one timeout of its
    /// lease is left (otherwise handed back unsent, for the next claim).
    #[arg(long = "webhook-lease", env = "WEBHOOK_LEASE", value_parser = duration, default_value = "60s")]
    pub lease: Duration,
    /// Fallback poll interval for due retries (new outbox rows also wake dispatchers
    /// through LISTEN/NOTIFY at once).
    #[arg(long = "webhook-poll-interval", env = "WEBHOOK_POLL_INTERVAL", value_parser = duration, default_value = "500ms")]
    pub poll_interval: Duration,
    /// How long the previous signing secret keeps signing after a rotation.
    #[arg(long = "webhook-secret-overlap", env = "WEBHOOK_SECRET_OVERLAP", value_parser = duration, default_value = "24h")]
    pub secret_overlap: Duration,
    /// Allow delivering to loopback addresses (local development, tests).
    #[arg(long = "webhook-allow-loopback", env = "WEBHOOK_ALLOW_LOOPBACK")]
    pub allow_loopback: bool,
    /// Allow private, CGNAT, unique-local and link-local addresses (a private deployment).
    /// Cloud metadata addresses stay blocked regardless.
    #[arg(long = "webhook-allow-private", env = "WEBHOOK_ALLOW_PRIVATE")]
    pub allow_private: bool,
    /// Accept plain `http://` webhook URLs (local development only; production is https).
    #[arg(long = "webhook-allow-http", env = "WEBHOOK_ALLOW_HTTP")]
    pub allow_http: bool,
    /// Keys that seal webhook signing secrets at rest: `id:base64-32-bytes`, comma-separated,
    /// the first sealing, all opening (see `chainsub_core::sealed`). Required by `api serve`;
    /// a dispatcher without it can use only secrets stored before sealing.
    #[arg(
        long = "webhook-secrets-keys",
        env = "WEBHOOK_SECRETS_KEYS",
        hide_env_values = true
    )]
    pub secrets_keys: Option<chainsub_core::sealed::SealingKeys>,
}

impl WebhookConfig {
    /// The signing secret stored as `stored` for the merchant `wallet`, opened.
    pub fn open_secret(
        &self,
        stored: &str,
        wallet: &[u8],
    ) -> Result<String, chainsub_core::sealed::SealError> {
        match &self.secrets_keys {
            Some(keys) => keys.open(stored, wallet),
            None if stored.starts_with("sealed:") => Err(
                chainsub_core::sealed::SealError::UnknownKey("(WEBHOOK_SECRETS_KEYS unset)".into()),
            ),
            None => Ok(stored.to_string()),
        }
    }

    /// The SSRF policy these flags describe.
    pub fn address_policy(&self) -> AddressPolicy {
        AddressPolicy {
            allow_loopback: self.allow_loopback,
            allow_private: self.allow_private,
        }
    }
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(15),
            retry_schedule: RetrySchedule::default(),
            retry_after_max: Duration::from_secs(3600),
            concurrency: 64,
            per_merchant_concurrency: 8,
            claim_ahead: 256,
            lease: Duration::from_secs(60),
            poll_interval: Duration::from_millis(500),
            secret_overlap: Duration::from_secs(24 * 3600),
            allow_loopback: false,
            allow_private: false,
            allow_http: false,
            secrets_keys: None,
        }
    }
}
