//! The indexer's one error type.

use alloy::primitives::B256;

/// Everything that can stop an indexer step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] chainsub_migrations::Error),
    #[error("rpc error: {0}")]
    Rpc(String),
    #[error(
        "reorg deeper than the finality window: block {number} ({ours}) is not on the chain any more \
         and no common ancestor was found down to block {lowest}; halting (REORG_POLICY=halt)"
    )]
    DeepReorg {
        number: u64,
        ours: B256,
        lowest: u64,
    },
    #[error("another writer took over (our epoch {ours}, database has {theirs}); stopping writes")]
    Fenced { ours: i64, theirs: i64 },
    #[error(
        "cursor moved under us: database at {db_number} {db_hash}, batch expects parent {parent}"
    )]
    CursorMismatch {
        db_number: i64,
        db_hash: B256,
        parent: B256,
    },
    #[error("on-chain id {0} does not fit in BIGINT")]
    IdOverflow(String),
    #[error("inconsistent index: {0}")]
    Inconsistent(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("interrupted by shutdown")]
    Shutdown,
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<chainsub_store::Error> for Error {
    fn from(e: chainsub_store::Error) -> Self {
        match e {
            chainsub_store::Error::Db(e) => Self::Db(e),
            chainsub_store::Error::Inconsistent(m) => Self::Inconsistent(m),
            e @ chainsub_store::Error::Pool(_) => Self::Inconsistent(e.to_string()),
        }
    }
}
