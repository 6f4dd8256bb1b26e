//! The webhooks crate's error: what the dispatcher's database work can fail with. Delivery
//! failures are not errors: they are attempts with an outcome (`outbox::Outcome`).

/// A dispatcher error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A database query failed.
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// No database connection could be had from the pool.
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] chainsub_store::Error),
}

/// The webhooks crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
