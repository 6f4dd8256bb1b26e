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

/// Declares a struct of column positions, found by name once per result set and then read
/// by index: `Row::get` by name scans the statement's column list on every call (~4 % of the
/// API's CPU for a list page).
macro_rules! columns {
    ($(#[$m:meta])* $name:ident { $($col:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $name {
            $(pub(crate) $col: usize,)*
        }

        impl crate::chain::Columns for $name {
            fn of(columns: &[tokio_postgres::Column]) -> crate::Result<$name> {
                let find = |name: &str| {
                    columns
                        .iter()
                        .position(|c| c.name() == name)
                        .ok_or_else(|| crate::Error::Inconsistent(format!("no column {name}")))
                };
                Ok($name {
                    $($col: find(stringify!($col))?,)*
                })
            }
        }
    };
}

pub mod cancellations;
pub mod chain;
pub mod checkouts;
pub mod copy;
pub mod customers;
pub mod events;
pub mod export;
pub mod idempotency;
pub mod index;
pub mod keeper;
pub mod key_budgets;
pub mod listen;
pub mod merchants;
pub mod outbox;
pub mod page;
pub mod pg;
pub mod plans;
pub mod relayer;
pub mod reports;
pub mod siwe;
mod snapshot;
pub mod startup;
pub mod subscriptions;
pub mod webhooks;

pub use chain::ChainRow;
pub use merchants::MerchantScope;
pub use page::{Direction, Page};

/// An upper bound on the distinct statements one connection can prepare through the store's
/// cached reads (lists, gets, cursors, authentication), whatever requests arrive. The test
/// `list_routes_prepare_a_constant_number_of_statements` holds the API to it. 37 today: events
/// 14 (12 list statements, its cursor, one event), subscriptions 11 (6 filtered lists, 2
/// unfiltered, cursor, one, ledger), plans 5 (2 list, cursor, one by public id, one by row id), customers 3, and one
/// each for the API-key lookup, the chain cursor, the checkout's wallet reference and the
/// ledger export. The dispatcher's statements run on a pool of their own.
pub const STATEMENT_BUDGET: usize = 40;

/// A store error: Postgres, or a row that breaks an invariant of the schema.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Postgres' own message and SQLSTATE where the server answered (tokio-postgres' text
    /// is only "db error" for every server error).
    #[error("{}", describe(.0))]
    Db(#[from] tokio_postgres::Error),
    /// No connection from a pool the store holds (the keeper's journal).
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("inconsistent row: {0}")]
    Inconsistent(String),
}

/// A Postgres error as an operator reads it: the server's message, detail and SQLSTATE,
/// else the client's error with its cause.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail}) ({})", db.message(), db.code().code()),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// The store's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod layout {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The store holds every SQL text of the services: no other crate's code prepares or
    /// sends a statement of its own (tests and migrations aside).
    #[test]
    fn no_crate_above_the_store_sends_sql_of_its_own() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let needles = [
            "\"SELECT ",
            "\"INSERT INTO",
            "\"DELETE FROM",
            "\"WITH ",
            ".query(",
            ".query_one(",
            ".query_opt(",
            ".query_raw(",
            ".execute(",
            ".batch_execute(",
            ".simple_query(",
            ".copy_in(",
            ".prepare(",
            ".prepare_cached(",
        ];
        let mut files = Vec::new();
        for krate in [
            "api", "indexer", "keeper", "webhooks", "sender", "views", "core", "serve",
        ] {
            sources(&root.join(krate).join("src"), &mut files);
        }
        assert!(files.len() > 50, "found only {} source files", files.len());
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if let Some(needle) = needles.iter().find(|s| line.contains(*s)) {
                    found.push(format!("{}:{}: {needle}", file.display(), n + 1));
                }
            }
        }
        assert!(
            found.is_empty(),
            "SQL outside the store:\n{}",
            found.join("\n")
        );
    }
}
