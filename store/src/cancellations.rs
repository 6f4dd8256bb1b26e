//! Cancellations a merchant asks for through the API (migration 0015): one row per request
//! that reached the relayer, journaling its transaction before the broadcast. At most one
//! live (not `failed`) row per subscription and kind, so concurrent requests send one
//! transaction. Every write names the state it expects (`sending`, or the transaction it
//! replaces), so a request whose row was taken over can never journal — nor then broadcast —
//! a transaction of its own.

use alloy::primitives::B256;
use chainsub_core::CancelAt;
use chainsub_core::ChainId;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::{Error, MerchantScope, Result};

/// A cancellation's transaction as journaled: what sending it again or replacing it at its
/// nonce needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournaledTx {
    pub hash: B256,
    pub nonce: u64,
    pub max_fee_per_gas: u128,
    pub priority_fee_per_gas: u128,
    /// The signed transaction.
    pub raw: Vec<u8>,
}

/// A live cancellation request.
#[derive(Debug, Clone)]
pub struct Cancellation {
    pub row_id: i64,
    pub onchain_id: i64,
    pub at_period_end: bool,
    /// `None` while nothing is signed yet (`sending`).
    pub tx: Option<JournaledTx>,
    /// Transactions signed for it so far.
    pub sends: i32,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Seconds since the request was recorded, by the database's clock (every age is: the
    /// API hosts' clocks never decide).
    pub age_secs: f64,
    /// Seconds since the last journal write (the last transaction signed).
    pub since_update_secs: f64,
}

/// The columns [`from_row`] reads, in order (repeated literally in each statement: texts
/// are fixed).
macro_rules! columns_text {
    () => {
        "id, at_period_end, tx_hash, nonce, max_fee_per_gas::TEXT, \
         priority_fee_per_gas::TEXT, created_at, raw_tx, sends, onchain_id, \
         EXTRACT(EPOCH FROM now() - created_at)::FLOAT8, \
         EXTRACT(EPOCH FROM now() - updated_at)::FLOAT8"
    };
}

fn from_row(r: &Row) -> Result<Cancellation> {
    let hash: Option<Vec<u8>> = r.try_get(2)?;
    let nonce: Option<i64> = r.try_get(3)?;
    let raw: Option<Vec<u8>> = r.try_get(7)?;
    let fee = |i: usize| -> Result<u128> {
        let text: Option<String> = r.try_get(i)?;
        text.unwrap_or_default()
            .parse()
            .map_err(|_| Error::Inconsistent(format!("cancellation fee column {i}")))
    };
    let tx = match (hash, nonce, raw) {
        (Some(hash), Some(nonce), Some(raw)) => Some(JournaledTx {
            hash: crate::chain::b256(&hash)?,
            nonce: u64::try_from(nonce)
                .map_err(|_| Error::Inconsistent("negative cancellation nonce".into()))?,
            max_fee_per_gas: fee(4)?,
            priority_fee_per_gas: fee(5)?,
            raw,
        }),
        _ => None,
    };
    Ok(Cancellation {
        row_id: r.try_get(0)?,
        onchain_id: r.try_get(9)?,
        at_period_end: r.try_get(1)?,
        tx,
        sends: r.try_get(8)?,
        created_at: r.try_get(6)?,
        age_secs: r.try_get(10)?,
        since_update_secs: r.try_get(11)?,
    })
}

/// The live request of `scope` for this subscription and kind, if any.
pub async fn live(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    onchain_id: i64,
    when: CancelAt,
) -> Result<Option<Cancellation>> {
    let sql = concat!(
        "SELECT ",
        columns_text!(),
        " FROM subscription_cancellations WHERE merchant_id = $1 AND chain_id = $2 \
         AND onchain_id = $3 AND at_period_end = $4 AND status <> 'failed'"
    );
    client
        .query_opt(sql, &[&scope.id(), &chain_id, &onchain_id, &when])
        .await?
        .as_ref()
        .map(from_row)
        .transpose()
}

/// Records a new request (`sending`). `None` when a live one exists already (a concurrent
/// request): the caller reads that one instead of sending a second transaction.
pub async fn insert(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    onchain_id: i64,
    subscription_public_id: &str,
    when: CancelAt,
) -> Result<Option<Cancellation>> {
    let sql = concat!(
        "INSERT INTO subscription_cancellations (merchant_id, chain_id, onchain_id, \
         subscription_public_id, at_period_end, status) VALUES ($1, $2, $3, $4, $5, 'sending') \
         ON CONFLICT (chain_id, onchain_id, at_period_end) WHERE status <> 'failed' DO NOTHING \
         RETURNING ",
        columns_text!()
    );
    client
        .query_opt(
            sql,
            &[
                &scope.id(),
                &chain_id,
                &onchain_id,
                &subscription_public_id,
                &when,
            ],
        )
        .await?
        .as_ref()
        .map(from_row)
        .transpose()
}

/// Journals the request's transaction as signed, BEFORE it is broadcast (`submitted`), if
/// the row is still as this request left it: `sending` (`replacing` = `None`), or journaling
/// the transaction `replacing`. `false` when it is not (another request took it over): the
/// caller must not broadcast.
pub async fn journal_send(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
    tx: &JournaledTx,
    replacing: Option<B256>,
) -> Result<bool> {
    let replacing = replacing.map(|h| h.to_vec());
    let n = client
        .execute(
            "UPDATE subscription_cancellations SET status = 'submitted', tx_hash = $3, \
             nonce = $4, max_fee_per_gas = $5::TEXT::NUMERIC, \
             priority_fee_per_gas = $6::TEXT::NUMERIC, raw_tx = $7, sends = sends + 1, \
             error = NULL, updated_at = now() \
             WHERE id = $1 AND merchant_id = $2 AND CASE WHEN $8::BYTEA IS NULL \
             THEN status = 'sending' ELSE status = 'submitted' AND tx_hash = $8 END",
            &[
                &row_id,
                &scope.id(),
                &tx.hash.as_slice(),
                &(tx.nonce as i64),
                &tx.max_fee_per_gas.to_string(),
                &tx.priority_fee_per_gas.to_string(),
                &tx.raw,
                &replacing,
            ],
        )
        .await?;
    Ok(n == 1)
}

/// Puts `previous` back where the node refused its replacement `refused` (it never entered
/// the pool): the row names the transaction that may still be mined.
pub async fn restore(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
    refused: B256,
    previous: &JournaledTx,
) -> Result<()> {
    client
        .execute(
            "UPDATE subscription_cancellations SET tx_hash = $4, nonce = $5, \
             max_fee_per_gas = $6::TEXT::NUMERIC, priority_fee_per_gas = $7::TEXT::NUMERIC, \
             raw_tx = $8, updated_at = now() \
             WHERE id = $1 AND merchant_id = $2 AND status = 'submitted' AND tx_hash = $3",
            &[
                &row_id,
                &scope.id(),
                &refused.as_slice(),
                &previous.hash.as_slice(),
                &(previous.nonce as i64),
                &previous.max_fee_per_gas.to_string(),
                &previous.priority_fee_per_gas.to_string(),
                &previous.raw,
            ],
        )
        .await?;
    Ok(())
}

/// A journaled transaction whose outcome is not known yet (the re-driver's work; not
/// merchant data, so not scoped).
#[derive(Debug, Clone)]
pub struct Unsettled {
    pub row_id: i64,
    pub onchain_id: i64,
    pub at_period_end: bool,
    pub tx: JournaledTx,
}

/// Up to `limit` journaled (`submitted`) transactions last signed more than `older_than_secs`
/// ago, oldest first.
pub async fn unsettled(
    client: &impl GenericClient,
    older_than_secs: f64,
    limit: i64,
) -> Result<Vec<Unsettled>> {
    let sql = concat!(
        "SELECT ",
        columns_text!(),
        " FROM subscription_cancellations WHERE status = 'submitted' \
         AND updated_at < now() - make_interval(secs => $1) ORDER BY updated_at LIMIT $2"
    );
    client
        .query(sql, &[&older_than_secs, &limit])
        .await?
        .iter()
        .map(|r| {
            let c = from_row(r)?;
            let tx = c.tx.ok_or_else(|| {
                Error::Inconsistent(format!("submitted cancellation {} without a tx", c.row_id))
            })?;
            Ok(Unsettled {
                row_id: c.row_id,
                onchain_id: c.onchain_id,
                at_period_end: c.at_period_end,
                tx,
            })
        })
        .collect()
}

/// Records the outcome of the journaled transaction `hash` (if the row still names it):
/// `mined` when it succeeded, else `failed` with `error`.
pub async fn settle(
    client: &impl GenericClient,
    row_id: i64,
    hash: B256,
    mined: bool,
    error: Option<&str>,
) -> Result<()> {
    client
        .execute(
            "UPDATE subscription_cancellations SET status = CASE WHEN $3 THEN 'mined' \
             ELSE 'failed' END, error = $4, updated_at = now() \
             WHERE id = $1 AND status = 'submitted' AND tx_hash = $2",
            &[&row_id, &hash.as_slice(), &mined, &error],
        )
        .await?;
    Ok(())
}

/// The transaction of the latest request of `scope` for this subscription and kind that got
/// one out (mined, or journaled and not known dead), with when that request was made.
pub async fn last_sent(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    onchain_id: i64,
    when: CancelAt,
) -> Result<Option<(B256, chrono::DateTime<chrono::Utc>)>> {
    let row = client
        .query_opt(
            "SELECT tx_hash, created_at FROM subscription_cancellations \
             WHERE merchant_id = $1 AND chain_id = $2 AND onchain_id = $3 \
               AND at_period_end = $4 AND status IN ('mined', 'submitted') \
               AND tx_hash IS NOT NULL \
             ORDER BY id DESC LIMIT 1",
            &[&scope.id(), &chain_id, &onchain_id, &when],
        )
        .await?;
    row.map(|r| {
        let hash: Vec<u8> = r.try_get(0)?;
        Ok((crate::chain::b256(&hash)?, r.try_get(1)?))
    })
    .transpose()
}

/// Ends this request's own row after its send failed without reaching the pool: the
/// subscription may be asked again. (A row another request judged must be ended with
/// [`fail_if`].)
pub async fn fail(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
    error: &str,
) -> Result<()> {
    client
        .execute(
            "UPDATE subscription_cancellations SET status = 'failed', error = $3, \
             updated_at = now() WHERE id = $1 AND merchant_id = $2 AND status <> 'mined'",
            &[&row_id, &scope.id(), &error],
        )
        .await?;
    Ok(())
}

/// Ends a row only if it is still as the caller judged it: `sending` (`dead` = `None`: its
/// process died before signing), or naming the transaction `dead`. `false` when it changed
/// meanwhile (its own request journaled or replaced it): the caller must not start another.
pub async fn fail_if(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
    dead: Option<B256>,
    error: &str,
) -> Result<bool> {
    let dead = dead.map(|h| h.to_vec());
    let n = client
        .execute(
            "UPDATE subscription_cancellations SET status = 'failed', error = $4, \
             updated_at = now() WHERE id = $1 AND merchant_id = $2 AND CASE WHEN $3::BYTEA \
             IS NULL THEN status = 'sending' ELSE status = 'submitted' AND tx_hash = $3 END",
            &[&row_id, &scope.id(), &dead, &error],
        )
        .await?;
    Ok(n == 1)
}
