//! The API relayer's send log (migration 0029): one row per transaction it signs for a
//! merchant. It bounds the relayer's spend per merchant and per transaction; ages come from
//! the database's clock.

use deadpool_postgres::GenericClient;

use crate::{MerchantScope, Result};

/// What a relayer transaction does, and so which table its `row_id` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendKind {
    /// `createPlan` for `plans.id`.
    CreatePlan,
    /// `cancel` / `cancelAtPeriodEnd` for `subscription_cancellations.id`.
    Cancel,
}

impl SendKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::CreatePlan => "create_plan",
            Self::Cancel => "cancel",
        }
    }
}

/// One signed transaction, as logged.
#[derive(Debug, Clone, Copy)]
pub struct SignedSend<'a> {
    pub kind: SendKind,
    pub row_id: i64,
    pub nonce: u64,
    pub tx_hash: &'a [u8],
    pub max_fee_per_gas: u128,
}

/// Logs a transaction the relayer signed for `scope` (before it is broadcast).
pub async fn record(
    client: &impl GenericClient,
    scope: &MerchantScope,
    send: SignedSend<'_>,
) -> Result<()> {
    client
        .execute(
            "INSERT INTO relayer_sends (merchant_id, kind, row_id, nonce, tx_hash, max_fee_per_gas) \
             VALUES ($1, $2, $3, $4, $5, $6::TEXT::NUMERIC)",
            &[
                &scope.id(),
                &send.kind.as_str(),
                &send.row_id,
                &(send.nonce as i64),
                &send.tx_hash,
                &send.max_fee_per_gas.to_string(),
            ],
        )
        .await?;
    Ok(())
}

/// `scope`'s sends in the last `window_secs`, and the seconds until the oldest of them
/// leaves the window (0 when there are none).
pub async fn sends_in_window(
    client: &impl GenericClient,
    scope: &MerchantScope,
    window_secs: i64,
) -> Result<(i64, f64)> {
    let row = client
        .query_one(
            "SELECT count(*), \
                    COALESCE(EXTRACT(EPOCH FROM min(sent_at) + make_interval(secs => $2) - now()), 0)::FLOAT8 \
             FROM relayer_sends \
             WHERE merchant_id = $1 AND sent_at > now() - make_interval(secs => $2)",
            &[&scope.id(), &(window_secs as f64)],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// The transactions signed for one row at one nonce so far, and the seconds since the last
/// of them (`None` when there is none: a journal written before the log existed).
pub async fn sends_at_nonce(
    client: &impl GenericClient,
    kind: SendKind,
    row_id: i64,
    nonce: u64,
) -> Result<(i64, Option<f64>)> {
    let row = client
        .query_one(
            "SELECT count(*), EXTRACT(EPOCH FROM now() - max(sent_at))::FLOAT8 \
             FROM relayer_sends WHERE kind = $1 AND row_id = $2 AND nonce = $3",
            &[&kind.as_str(), &row_id, &(nonce as i64)],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}
