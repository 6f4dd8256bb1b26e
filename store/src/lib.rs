//! The store: SQL texts and the types that make merchant scope a matter of construction.
//!
//! How it stays safe:
//! - **Scope by construction.** Every function that reads or writes a merchant's data takes a
//!   [`MerchantScope`], and only authentication ([`merchants::by_api_key_hash`],
//!   [`merchants::by_session_hash`], and [`merchants::sign_in`] after a SIWE signature) can
//!   build one. The unauthenticated checkout page gets a [`checkouts::Link`], which names a
//!   merchant without being able to act for it.
//! - **Fixed SQL texts.** No statement text depends on a request: `LIMIT`, filters and cursors
//!   are parameters (`($n::T IS NULL OR col = $n)`), and the few statements a route may choose
//!   between are `&'static str`s listed here. A connection therefore prepares a small, constant
//!   number of statements (see [`STATEMENT_BUDGET`]), whatever merchants send. Before this,
//!   each filter/limit combination was a new cached statement: ~19,000 texts on `/events`,
//!   ~100 KB of backend memory each, per connection.
//! - **Index-friendly choices.** A generic plan cannot use an index for `($n IS NULL OR col =
//!   $n)`, so each list has one statement per *leading* filter with a matching index, in which
//!   that filter is a plain equality; the rest stay parameters.

pub mod chain;
pub mod checkouts;
pub mod events;
pub mod idempotency;
pub mod keeper;
pub mod merchants;
pub mod outbox;
pub mod page;
pub mod pg;
pub mod plans;
pub mod siwe;
pub mod startup;
pub mod subscriptions;
pub mod webhooks;

pub use chain::ChainRow;
pub use merchants::MerchantScope;
pub use page::{Direction, Page};

/// An upper bound on the distinct statements one connection can prepare through the store's
/// cached reads (lists, gets, cursors, authentication), whatever requests arrive. The test
/// `list_routes_prepare_a_constant_number_of_statements` holds the API to it.
pub const STATEMENT_BUDGET: usize = 32;

/// A store error: Postgres, or a row that breaks an invariant of the schema.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
    /// No connection from a pool the store holds (the keeper's journal).
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("inconsistent row: {0}")]
    Inconsistent(String),
}

/// The store's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
