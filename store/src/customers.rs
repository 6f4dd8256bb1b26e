//! What the customer self-service page (`/account`, unauthenticated) may read: one wallet's
//! subscriptions on our contract and their charges. Only what the chain already shows for
//! that address (terms, status, periods, charges and their transactions) plus the names a
//! checkout link shows (the merchant's code, the plan's name); never a merchant's customer
//! references, ids or anything else of a merchant's. Nothing here writes.

use alloy::primitives::{Address, B256};
use chainsub_core::ChainId;
use chainsub_core::LedgerKind;
use chainsub_core::SubscriptionStatus;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use crate::chain::{address, b256, ledger_kind, units};
use crate::{Error, Result};

/// At most this many subscriptions per wallet are listed (newest first).
pub const MAX_SUBSCRIPTIONS: i64 = 50;

/// One of a wallet's subscriptions, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletSubscription {
    /// The contract's subscription id (public on chain; what the cancel call takes).
    pub onchain_id: i64,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    pub merchant_wallet: Address,
    /// `None` when the merchant has no account with this service.
    pub merchant_code: Option<String>,
    /// `None` when the plan was not created through this service.
    pub plan_name: Option<String>,
    pub plan_onchain_id: i64,
    /// Base units per period (`None` beyond u128).
    pub amount: Option<u128>,
    pub period: i32,
    pub current_period_end: DateTime<Utc>,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub ended_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Its charges and failed charges, oldest first.
    pub ledger: Vec<WalletCharge>,
}

/// A charge (or failed charge) of a wallet's subscription, with the transaction to check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletCharge {
    pub kind: LedgerKind,
    pub amount: Option<u128>,
    pub period: i32,
    pub failure_reason: Option<String>,
    pub block_time: DateTime<Utc>,
    pub block_number: i64,
    pub transaction_hash: B256,
    /// Blocks on top of it in the index (itself included; 0 when unknown).
    pub confirmations: i64,
}

/// `wallet`'s subscriptions on `chain_id` — live ones first (so none a customer may cancel
/// falls beyond [`MAX_SUBSCRIPTIONS`]), each group newest first — with their ledgers; only
/// those with the merchant whose code is `merchant_code` when it is given.
pub async fn subscriptions_of(
    client: &impl GenericClient,
    chain_id: ChainId,
    wallet: Address,
    merchant_code: Option<&str>,
) -> Result<Vec<WalletSubscription>> {
    let stmt = client
        .prepare_cached(
            "SELECT s.onchain_id, s.status, s.cancel_at_period_end, s.merchant_wallet, \
             m.code AS merchant_code, p.name AS plan_name, s.plan_onchain_id, \
             s.amount::TEXT AS amount, s.period, s.current_period_end, s.next_retry_at, \
             s.ended_reason, s.created_at \
             FROM subscriptions s \
             LEFT JOIN merchants m ON m.wallet = s.merchant_wallet \
             LEFT JOIN chain_plans cp ON cp.chain_id = s.chain_id \
                  AND cp.onchain_id = s.plan_onchain_id \
             LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = m.id \
             WHERE s.subscriber = $1 AND s.chain_id = $2 \
               AND ($3::text IS NULL OR m.code = $3) \
             ORDER BY s.status IN ('active', 'past_due', 'trialing') DESC, s.onchain_id DESC LIMIT $4",
        )
        .await?;
    let rows = client
        .query(
            &stmt,
            &[
                &wallet.as_slice(),
                &chain_id,
                &merchant_code,
                &MAX_SUBSCRIPTIONS,
            ],
        )
        .await?;
    let mut subs = rows
        .iter()
        .map(|r| {
            Ok(WalletSubscription {
                onchain_id: r.try_get("onchain_id")?,
                status: SubscriptionStatus::parse(r.try_get("status")?)
                    .map_err(|e| Error::Inconsistent(e.to_string()))?,
                cancel_at_period_end: r.try_get("cancel_at_period_end")?,
                merchant_wallet: address(r.try_get("merchant_wallet")?)?,
                merchant_code: r.try_get("merchant_code")?,
                plan_name: r.try_get("plan_name")?,
                plan_onchain_id: r.try_get("plan_onchain_id")?,
                amount: units(r.try_get("amount")?),
                period: r.try_get("period")?,
                current_period_end: r.try_get("current_period_end")?,
                next_retry_at: r.try_get("next_retry_at")?,
                ended_reason: r.try_get("ended_reason")?,
                created_at: r.try_get("created_at")?,
                ledger: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if subs.is_empty() {
        return Ok(subs);
    }
    let ids: Vec<i64> = subs.iter().map(|s| s.onchain_id).collect();
    let stmt = client
        .prepare_cached(
            "SELECT le.subscription_id, le.kind, abs(le.amount)::TEXT AS amount, le.period, \
             le.failure_reason, le.block_time, ce.block_number, ce.transaction_hash, \
             cur.block_number AS indexed_block \
             FROM ledger_entries le JOIN chain_events ce ON ce.id = le.event_id \
             LEFT JOIN indexer_cursor cur ON cur.chain_id = le.chain_id \
             WHERE le.chain_id = $1 AND le.subscription_id = ANY($2) \
             ORDER BY le.subscription_id, le.event_id",
        )
        .await?;
    for r in client.query(&stmt, &[&chain_id, &ids]).await? {
        let id: i64 = r.try_get("subscription_id")?;
        let charge = WalletCharge {
            kind: ledger_kind(r.try_get("kind")?)?,
            amount: units(r.try_get("amount")?),
            period: r.try_get("period")?,
            failure_reason: r.try_get("failure_reason")?,
            block_time: r.try_get("block_time")?,
            block_number: r.try_get("block_number")?,
            transaction_hash: b256(r.try_get("transaction_hash")?)?,
            confirmations: crate::chain::confirmations(
                r.try_get("block_number")?,
                r.try_get("indexed_block")?,
            ),
        };
        if let Some(sub) = subs.iter_mut().find(|s| s.onchain_id == id) {
            sub.ledger.push(charge);
        }
    }
    Ok(subs)
}

/// Whether a merchant has the code `code` (a link to `/account?merchant=` names one).
pub async fn merchant_code_exists(client: &impl GenericClient, code: &str) -> Result<bool> {
    let stmt = client
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM merchants WHERE code = $1)")
        .await?;
    Ok(client.query_one(&stmt, &[&code]).await?.get(0))
}
