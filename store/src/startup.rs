//! Start-up that survives a transient fault. Every binary checks its database (connect,
//! migrate) and its node before it serves; an RPC down for a few seconds or a connection
//! dropped during migrations used to end the process with exit 1. Each such step is now
//! retried with backoff until a deadline (`STARTUP_DEADLINE_SECS`, default 60), and only
//! faults that can pass are retried: a wrong setting, a changed migration or a server-side
//! SQL error fails at once.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::pg::Database;

/// The default start-up deadline.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

const FIRST_DELAY: Duration = Duration::from_millis(250);
const MAX_DELAY: Duration = Duration::from_secs(5);

/// Runs `attempt` until it succeeds, fails with an error `transient` rejects, or
/// `deadline` has passed since the first try (then the last error is returned). Waits
/// 250 ms, doubling to 5 s, between tries, and logs each retry with `what`.
pub async fn retry<T, E, F, Fut>(
    what: &str,
    deadline: Duration,
    transient: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, E>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let mut delay = FIRST_DELAY;
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if transient(&e) && started.elapsed() + delay <= deadline => {
                tracing::warn!(
                    step = what,
                    error = %e,
                    retry_in = ?delay,
                    "start-up step failed; retrying"
                );
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_DELAY);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether a Postgres error can pass: the connection failed or was lost, or the server is
/// starting, shutting down or refusing connections for now (SQLSTATE classes 08 and 57P).
/// A server-side error about the statement itself cannot.
pub fn pg_transient(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        None => true,
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || code.starts_with("57P")
        }
    }
}

/// Whether a migration error can pass (a database fault, not a changed or unknown
/// migration).
pub fn migration_transient(e: &chainsub_migrations::Error) -> bool {
    matches!(e, chainsub_migrations::Error::Db(db) if pg_transient(db))
}

/// Connects to `db`, retrying transient faults until `deadline`.
pub async fn connect(
    db: &Database,
    deadline: Duration,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    retry("connect to the database", deadline, pg_transient, || {
        db.connect()
    })
    .await
}

/// Connects and applies pending migrations, retrying transient faults (including a
/// connection dropped half-way: each migration is its own transaction, so a retry resumes
/// after the last one applied) until `deadline`. Returns the versions applied.
pub async fn migrate(
    db: &Database,
    deadline: Duration,
) -> Result<Vec<i32>, chainsub_migrations::Error> {
    retry(
        "migrate the database",
        deadline,
        migration_transient,
        || async {
            let mut client = db.connect().await?;
            chainsub_migrations::migrate(&mut client).await
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn transient_errors_are_retried_until_success() {
        let mut tries = 0;
        let got = retry(
            "test",
            Duration::from_secs(10),
            |_: &String| true,
            || {
                tries += 1;
                let n = tries;
                async move {
                    if n < 3 {
                        Err(format!("down {n}"))
                    } else {
                        Ok(n)
                    }
                }
            },
        )
        .await;
        assert_eq!(got, Ok(3));
    }

    #[tokio::test]
    async fn a_permanent_error_fails_at_once() {
        let mut tries = 0;
        let got: Result<(), String> = retry(
            "test",
            Duration::from_secs(10),
            |e: &String| e != "bad",
            || {
                tries += 1;
                async { Err("bad".to_string()) }
            },
        )
        .await;
        assert_eq!(got, Err("bad".into()));
        assert_eq!(tries, 1);
    }

    #[tokio::test]
    async fn the_deadline_ends_the_retries_with_the_last_error() {
        let got: Result<(), String> = retry(
            "test",
            Duration::from_millis(300),
            |_| true,
            || async { Err("still down".to_string()) },
        )
        .await;
        assert_eq!(got, Err("still down".into()));
    }
}
