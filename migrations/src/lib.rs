//! Chainsub's SQL schema and its runner. Both binaries call [`migrate`] at start; it is
//! safe when several processes start at once (they serialize on an advisory lock, and the
//! ones that come second find nothing left to do).

#![warn(missing_docs)]

pub mod locks;

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

/// One migration: a version, a name and its SQL, embedded at compile time.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The version number (its file's numeric prefix), as recorded in `schema_migrations`.
    pub version: i32,
    /// A short name (the file name without its number).
    pub name: &'static str,
    /// The SQL to run, checksummed once applied.
    pub sql: &'static str,
}

/// Every migration, in order. Add new files here; never edit an applied one (the runner
/// refuses a changed checksum).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../sql/0001_init.sql"),
    },
    Migration {
        version: 4,
        name: "webhooks",
        sql: include_str!("../sql/0004_webhooks.sql"),
    },
    Migration {
        version: 5,
        name: "keeper",
        sql: include_str!("../sql/0005_keeper.sql"),
    },
    Migration {
        version: 6,
        name: "plan_idempotency",
        sql: include_str!("../sql/0006_plan_idempotency.sql"),
    },
    Migration {
        version: 7,
        name: "opaque_subscription_ids",
        sql: include_str!("../sql/0007_opaque_subscription_ids.sql"),
    },
    Migration {
        version: 8,
        name: "outbox_subscription_order",
        sql: include_str!("../sql/0008_outbox_subscription_order.sql"),
    },
    Migration {
        version: 9,
        name: "contract_v2",
        sql: include_str!("../sql/0009_contract_v2.sql"),
    },
    Migration {
        version: 10,
        name: "wallet_bound_customer_refs",
        sql: include_str!("../sql/0010_wallet_bound_customer_refs.sql"),
    },
    Migration {
        version: 11,
        name: "keeper_revert_retries",
        sql: include_str!("../sql/0011_keeper_revert_retries.sql"),
    },
    Migration {
        version: 12,
        name: "relayer_sent_tx",
        sql: include_str!("../sql/0012_relayer_sent_tx.sql"),
    },
    Migration {
        version: 13,
        name: "retractions",
        sql: include_str!("../sql/0013_retractions.sql"),
    },
    Migration {
        version: 14,
        name: "keeper_batches",
        sql: include_str!("../sql/0014_keeper_batches.sql"),
    },
    Migration {
        version: 15,
        name: "subscription_cancellations",
        sql: include_str!("../sql/0015_subscription_cancellations.sql"),
    },
    Migration {
        version: 16,
        name: "subscriber_lookup",
        sql: include_str!("../sql/0016_subscriber_lookup.sql"),
    },
    Migration {
        version: 17,
        name: "renewal_risks",
        sql: include_str!("../sql/0017_renewal_risks.sql"),
    },
    Migration {
        version: 18,
        name: "snapshot_json",
        sql: include_str!("../sql/0018_snapshot_json.sql"),
    },
    Migration {
        version: 19,
        name: "event_sequence",
        sql: include_str!("../sql/0019_event_sequence.sql"),
    },
    Migration {
        version: 20,
        name: "subscription_event_count",
        sql: include_str!("../sql/0020_subscription_event_count.sql"),
    },
    Migration {
        version: 21,
        name: "typed_log_fields",
        sql: include_str!("../sql/0021_typed_log_fields.sql"),
    },
    Migration {
        version: 22,
        name: "event_links_without_foreign_keys",
        sql: include_str!("../sql/0022_event_links_without_foreign_keys.sql"),
    },
    Migration {
        version: 23,
        name: "outbox_event_id",
        sql: include_str!("../sql/0023_outbox_event_id.sql"),
    },
    Migration {
        version: 24,
        name: "webhook_attempts_without_foreign_key",
        sql: include_str!("../sql/0024_webhook_attempts_without_foreign_key.sql"),
    },
    Migration {
        version: 25,
        name: "typed_snapshots",
        sql: include_str!("../sql/0025_typed_snapshots.sql"),
    },
    Migration {
        version: 26,
        name: "outbox_lease_without_status",
        sql: include_str!("../sql/0026_outbox_lease_without_status.sql"),
    },
    Migration {
        version: 27,
        name: "api_key_change_notify",
        sql: include_str!("../sql/0027_api_key_change_notify.sql"),
    },
    Migration {
        version: 28,
        name: "keeper_step_due_at",
        sql: include_str!("../sql/0028_keeper_step_due_at.sql"),
    },
    Migration {
        version: 29,
        name: "relayer_sends",
        sql: include_str!("../sql/0029_relayer_sends.sql"),
    },
    Migration {
        version: 30,
        name: "billing_v3",
        sql: include_str!("../sql/0030_billing_v3.sql"),
    },
    Migration {
        version: 31,
        name: "revenue_months",
        sql: include_str!("../sql/0031_revenue_months.sql"),
    },
    Migration {
        version: 32,
        name: "subscription_tallies",
        sql: include_str!("../sql/0032_subscription_tallies.sql"),
    },
    Migration {
        version: 33,
        name: "merchant_display_name",
        sql: include_str!("../sql/0033_merchant_display_name.sql"),
    },
    Migration {
        version: 34,
        name: "subscription_state_moves",
        sql: include_str!("../sql/0034_subscription_state_moves.sql"),
    },
    Migration {
        version: 35,
        name: "shared_key_budgets",
        sql: include_str!("../sql/0035_shared_key_budgets.sql"),
    },
    Migration {
        version: 36,
        name: "key_budget_left",
        sql: include_str!("../sql/0036_key_budget_left.sql"),
    },
];

/// A Postgres error as an operator reads it: the server's message and SQLSTATE
/// (`database "x" does not exist (3D000)`), else the client's error with its cause
/// (`tokio_postgres::Error`'s own text is only "db error" for every server error).
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// Migration failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A database query failed.
    #[error("database error: {}", describe(.0))]
    Db(#[from] tokio_postgres::Error),
    /// An applied migration's SQL no longer matches its stored checksum.
    #[error("migration {version} ({name}) was changed after it was applied (checksum mismatch)")]
    Changed {
        /// The changed migration's version.
        version: i32,
        /// The changed migration's name.
        name: String,
    },
    /// The database has a migration (this version) that this binary does not know.
    #[error("database has migration {0}, which this binary does not know: deploy the newer binary")]
    Unknown(i32),
    /// The database lacks migrations this binary needs.
    #[error("database is at migration {have}; this binary needs {want}: run `migrate` first")]
    Behind {
        /// The database's newest applied version (0 when none).
        have: i32,
        /// The newest version this binary knows.
        want: i32,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn checksum(sql: &str) -> String {
    hex::encode(Sha256::digest(sql.as_bytes()))
}

/// Applies every pending migration, each in its own transaction, while holding
/// [`locks::MIGRATIONS`]. Returns the versions it applied.
pub async fn migrate(client: &mut Client) -> Result<Vec<i32>> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&locks::MIGRATIONS])
        .await?;
    let result = apply_pending(client).await;
    // Unlock even when applying failed; a dropped connection releases it anyway.
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&locks::MIGRATIONS])
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_pending(client: &mut Client) -> Result<Vec<i32>> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version    INTEGER PRIMARY KEY,
                name       TEXT NOT NULL,
                checksum   TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .await?;
    let rows = client
        .query(
            "SELECT version, name, checksum FROM schema_migrations ORDER BY version",
            &[],
        )
        .await?;
    let mut applied_versions = Vec::new();
    for row in &rows {
        let version: i32 = row.get(0);
        let name: String = row.get(1);
        let sum: String = row.get(2);
        match MIGRATIONS.iter().find(|m| m.version == version) {
            None => return Err(Error::Unknown(version)),
            Some(m) if checksum(m.sql) != sum => return Err(Error::Changed { version, name }),
            Some(_) => applied_versions.push(version),
        }
    }

    let mut newly = Vec::new();
    for m in MIGRATIONS
        .iter()
        .filter(|m| !applied_versions.contains(&m.version))
    {
        let tx = client.transaction().await?;
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &checksum(m.sql)],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version = m.version, name = m.name, "applied migration");
        newly.push(m.version);
    }
    Ok(newly)
}

/// Refuses a database whose schema is not the one this binary writes: one with a migration
/// this binary does not know (a newer release migrated it; `Error::Unknown`), or one that
/// lacks some of this binary's (started with migrations off before `migrate` ran;
/// `Error::Behind`). A writer checks this each time it takes the writer lock, so a process of
/// an older release still running after an upgrade stops instead of writing rows the newer
/// schema keeps differently (migration 0020 also fences it).
pub async fn check_known(client: &Client) -> Result<()> {
    let newest: Option<i32> = client
        .query_one("SELECT max(version) FROM schema_migrations", &[])
        .await?
        .get(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    match newest {
        Some(v) if v > known => Err(Error::Unknown(v)),
        Some(v) if v == known => Ok(()),
        v => Err(Error::Behind {
            have: v.unwrap_or(0),
            want: known,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_strictly_increasing() {
        for pair in MIGRATIONS.windows(2) {
            assert!(pair[0].version < pair[1].version);
        }
    }
}
