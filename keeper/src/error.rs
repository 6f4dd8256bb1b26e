//! The keeper's error type.

/// Everything that can stop a keeper pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error: {}", chainsub_migrations::describe(.0))]
    Db(#[from] tokio_postgres::Error),
    #[error("store: {0}")]
    Store(#[from] chainsub_store::Error),
    #[error("database pool error: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database pool setup: {0}")]
    PoolBuild(#[from] deadpool_postgres::BuildError),
    #[error("migration error: {0}")]
    Migrate(#[from] chainsub_migrations::Error),
    #[error("rpc error: {0}")]
    Rpc(#[from] alloy::transports::TransportError),
    #[error("could not sign a transaction: {0}")]
    Sign(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("the keeper lock connection was lost; stopping so that a standby can take over")]
    LockLost,
    #[error("io error: {0}")]
    Io(#[from] std::io::Error),
}

impl From<chainsub_sender::Error> for Error {
    fn from(e: chainsub_sender::Error) -> Self {
        match e {
            chainsub_sender::Error::Rpc(e) => Self::Rpc(e),
            chainsub_sender::Error::Config(m) => Self::Config(m),
            chainsub_sender::Error::Sign(m) => Self::Sign(m),
        }
    }
}

/// tokio-postgres displays server errors as just "db error"; show the code and message.
/// Result alias for the keeper.
pub type Result<T, E = Error> = std::result::Result<T, E>;
