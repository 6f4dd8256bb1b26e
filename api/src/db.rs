//! The Postgres pool every handler (and the webhook dispatcher) uses.

use std::time::Duration;

use deadpool_postgres::{ManagerConfig, RecyclingMethod, Runtime, Timeouts};

use crate::http::error::{ApiError, Result};

/// The pool type shared across the crate.
pub type Pool = deadpool_postgres::Pool;
/// A pooled connection.
pub type Conn = deadpool_postgres::Object;

/// The session settings of every pooled connection: generic plans, and no parallel query.
/// A page reads at most ~100 rows, and starting a parallel worker costs milliseconds: the
/// subscriptions list without its optional filters, planned generically on the API bench's
/// data, becomes a Gather Merge over a parallel index scan and runs ~10x slower (5,000
/// executions: 37.7–41.1 s against 3.5–3.7 s serial) — today's statements plan serially,
/// this keeps any of them from ever doing otherwise.
///
/// And no JIT: a generic plan does not know a page's `LIMIT $n`, so at a million
/// subscriptions its cost estimate for the subscriptions list (182,160) passes
/// `jit_above_cost` (100,000), and every execution compiled 53 functions — 20 ms for a query
/// that runs in 0.4 ms (auto_explain on `bench/large-tables.sh`'s data). No statement the API
/// sends runs long enough for JIT to pay.
pub const GENERIC_PLANS: &str =
    "-c plan_cache_mode=force_generic_plan -c max_parallel_workers_per_gather=0 -c jit=off";
/// The session settings of the dispatcher's connections: custom plans for its cached
/// statements, no JIT (its statements are short, as the API's), and bookkeeping (claims, attempt records) that commits without waiting for the
/// WAL flush.
pub const DISPATCHER_SESSION: &str =
    "-c plan_cache_mode=force_custom_plan -c synchronous_commit=off -c jit=off";

/// The API's pool: its connections use generic plans ([`GENERIC_PLANS`]). Connections are
/// made lazily, so this succeeds while the database is down; waits are bounded so an outage
/// turns into prompt 503s instead of hung requests.
pub fn pool(database_url: &str, size: usize) -> Result<Pool> {
    // The API runs only the store's fixed statements, each checked to use its index under a
    // generic plan (store/tests/it). Left to itself, Postgres re-plans a statement with
    // optional filters on every execution (its generic-plan estimate loses to the custom
    // one): ~1 ms of planning for 0.2 ms of execution on a subscriptions page, most of the
    // database's work per request. Generic plans are made once per connection.
    build(database_url, size, GENERIC_PLANS)
}

/// A pool for the webhook dispatcher ([`DISPATCHER_SESSION`]). Its statements are prepared
/// once per connection but planned for each execution's values (`force_custom_plan`): the
/// outbox claims and the due-merchant skip scan were never checked under generic plans, and a
/// backlog skewed toward one merchant is where a generic plan would go wrong. Commits are
/// asynchronous: a dispatcher's writes are leases and attempt records, and if Postgres
/// itself crashes, its last ~0.6 s of them (three `wal_writer_delay`s) can be lost; the rows
/// they concerned are then delivered again with the same `webhook-id` — possibly several
/// events of one subscription again, in order, after the receiver had them (a dispatcher
/// crash repeats at most the rows in flight). Receivers de-duplicate by `webhook-id`, as
/// Standard Webhooks asks. Nothing is lost, and nothing else in Postgres is affected (the
/// settings are per connection). A synchronous commit is a WAL flush per batch: 1.4 ms each,
/// most of the dispatcher's database time in `bench/webhooks.sh`.
pub fn dispatcher_pool(database_url: &str, size: usize) -> Result<Pool> {
    build(database_url, size, DISPATCHER_SESSION)
}

fn build(database_url: &str, size: usize, session: &str) -> Result<Pool> {
    let mut db = database(database_url)?;
    let config = db.config_mut();
    config.connect_timeout(Duration::from_secs(3));
    let options = match config.get_options() {
        Some(o) if !o.is_empty() => format!("{o} {session}"),
        _ => session.to_string(),
    };
    config.options(&options);
    let mgr = db.manager(ManagerConfig {
        // Verify a connection before reuse so a restarted database heals the pool.
        recycling_method: RecyclingMethod::Fast,
    });
    Pool::builder(mgr)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .timeouts(Timeouts {
            wait: Some(Duration::from_secs(5)),
            create: Some(Duration::from_secs(3)),
            recycle: Some(Duration::from_secs(3)),
        })
        .build()
        .map_err(|e| ApiError::Internal(format!("pool: {e}")))
}

/// `DATABASE_URL` with its TLS (`sslmode`: disable, prefer, require, verify-full).
pub fn database(database_url: &str) -> Result<chainsub_store::pg::Database> {
    chainsub_store::pg::Database::from_url(database_url)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// One direct connection (for `migrate`), driven on a background task.
pub async fn connect(database_url: &str) -> Result<tokio_postgres::Client> {
    Ok(database(database_url)?.connect().await?)
}

/// Applies pending migrations (serialized across processes by the migrations crate),
/// retrying a database that does not answer yet for up to `deadline`.
pub async fn migrate(database_url: &str, deadline: Duration) -> Result<Vec<i32>> {
    chainsub_store::startup::migrate(&database(database_url)?, deadline)
        .await
        .map_err(|e| ApiError::Internal(format!("migrate: {e}")))
}
