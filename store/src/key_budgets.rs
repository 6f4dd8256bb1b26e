//! Per-API-key request budgets shared by every API process (migration 0035).

use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::Result;

/// What a take got from a key's shared budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    /// Tokens granted, `0..=want`.
    pub granted: u32,
    /// When none was granted: how long until one is free.
    pub wait: Duration,
    /// Whole tokens the budget has left now, after this take.
    pub remaining: u32,
}

/// Takes up to `want` tokens from `key`'s budget of one token per `interval`, at most
/// `burst` at once. The budget lives on the primary: every process sees the same one.
pub async fn take(
    client: &impl GenericClient,
    key: &str,
    want: u32,
    interval: Duration,
    burst: u32,
) -> Result<Take> {
    let stmt = client
        .prepare_cached("SELECT granted, wait_us, remaining FROM key_budget_take($1, $2, $3, $4)")
        .await?;
    let interval_us = i64::try_from(interval.as_micros())
        .unwrap_or(i64::MAX)
        .max(1);
    let row = client
        .query_one(
            &stmt,
            &[
                &key,
                &i32::try_from(want).unwrap_or(i32::MAX),
                &interval_us,
                &i32::try_from(burst).unwrap_or(i32::MAX),
            ],
        )
        .await?;
    let granted: i32 = row.get("granted");
    let wait_us: i64 = row.get("wait_us");
    let remaining: i32 = row.get("remaining");
    Ok(Take {
        granted: u32::try_from(granted).unwrap_or(0),
        wait: Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)),
        remaining: u32::try_from(remaining).unwrap_or(0),
    })
}
