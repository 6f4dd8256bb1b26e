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
    /// The merchant's display name, when it set one.
    pub merchant_name: Option<String>,
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
    /// A downgrade the subscriber scheduled for the next renewal.
    pub pending_plan: Option<PendingPlan>,
    /// Its charges and failed charges, oldest first.
    pub ledger: Vec<WalletCharge>,
    /// The merchant's plans the subscriber may move this subscription to now (empty unless
    /// it is active and not ending, with a merchant of this service): its other plans on
    /// chain, not deactivated, that the wallet holds no live subscription to — what the
    /// contract's `changePlan` accepts. Cheapest first.
    pub plan_choices: Vec<PlanChoice>,
}

/// The plan a scheduled downgrade moves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPlan {
    pub plan_onchain_id: i64,
    /// `None` when the plan was not created through this service.
    pub name: Option<String>,
    /// Base units per period (`None` beyond u128).
    pub amount: Option<u128>,
}

/// A plan a subscription can change to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanChoice {
    pub plan_onchain_id: i64,
    pub name: String,
    /// Base units per period (`None` beyond u128).
    pub amount: Option<u128>,
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
             m.code AS merchant_code, m.display_name AS merchant_name, p.name AS plan_name, s.plan_onchain_id, \
             s.amount::TEXT AS amount, s.period, s.current_period_end, s.next_retry_at, \
             s.ended_reason, s.created_at, s.pending_plan_onchain_id, \
             s.pending_amount::TEXT AS pending_amount, \
             (SELECT pp.name FROM chain_plans pcp \
              JOIN plans pp ON pp.plan_ref = pcp.plan_ref AND pp.merchant_id = m.id \
              WHERE pcp.chain_id = s.chain_id AND pcp.onchain_id = s.pending_plan_onchain_id) \
              AS pending_plan_name \
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
                merchant_name: r.try_get("merchant_name")?,
                plan_name: r.try_get("plan_name")?,
                plan_onchain_id: r.try_get("plan_onchain_id")?,
                amount: units(r.try_get("amount")?),
                period: r.try_get("period")?,
                current_period_end: r.try_get("current_period_end")?,
                next_retry_at: r.try_get("next_retry_at")?,
                ended_reason: r.try_get("ended_reason")?,
                created_at: r.try_get("created_at")?,
                pending_plan: match r.try_get::<_, Option<i64>>("pending_plan_onchain_id")? {
                    Some(plan_onchain_id) => Some(PendingPlan {
                        plan_onchain_id,
                        name: r.try_get("pending_plan_name")?,
                        amount: r
                            .try_get::<_, Option<&str>>("pending_amount")?
                            .and_then(units),
                    }),
                    None => None,
                },
                ledger: Vec::new(),
                plan_choices: Vec::new(),
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
    add_plan_choices(client, chain_id, &mut subs).await?;
    Ok(subs)
}

/// Fills [`WalletSubscription::plan_choices`] for the subscriptions that may change plan.
async fn add_plan_choices(
    client: &impl GenericClient,
    chain_id: ChainId,
    subs: &mut [WalletSubscription],
) -> Result<()> {
    let changeable = |s: &WalletSubscription| {
        s.status == SubscriptionStatus::Active
            && !s.cancel_at_period_end
            && s.merchant_code.is_some()
    };
    let mut merchants: Vec<&[u8]> = subs
        .iter()
        .filter(|s| changeable(s))
        .map(|s| s.merchant_wallet.as_slice())
        .collect();
    merchants.sort_unstable();
    merchants.dedup();
    if merchants.is_empty() {
        return Ok(());
    }
    let stmt = client
        .prepare_cached(
            "SELECT cp.merchant_wallet, cp.onchain_id, p.name, cp.amount::TEXT AS amount \
             FROM chain_plans cp \
             JOIN merchants m ON m.wallet = cp.merchant_wallet \
             JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = m.id \
             WHERE cp.chain_id = $1 AND cp.merchant_wallet = ANY($2) \
               AND cp.deactivated_event_id IS NULL \
             ORDER BY cp.amount, cp.onchain_id",
        )
        .await?;
    let rows = client.query(&stmt, &[&chain_id, &merchants]).await?;
    let mut plans = Vec::with_capacity(rows.len());
    for r in &rows {
        let merchant = address(r.try_get("merchant_wallet")?)?;
        let choice = PlanChoice {
            plan_onchain_id: r.try_get("onchain_id")?,
            name: r.try_get("name")?,
            amount: units(r.try_get("amount")?),
        };
        plans.push((merchant, choice));
    }
    // The contract refuses a plan the wallet already holds a live subscription to.
    let held: Vec<i64> = subs
        .iter()
        .filter(|s| !s.status.is_terminal())
        .map(|s| s.plan_onchain_id)
        .collect();
    for s in subs.iter_mut().filter(|s| changeable(s)) {
        s.plan_choices = plans
            .iter()
            .filter(|(m, p)| *m == s.merchant_wallet && !held.contains(&p.plan_onchain_id))
            .map(|(_, p)| p.clone())
            .collect();
    }
    Ok(())
}

/// Whether a merchant has the code `code` (a link to `/account?merchant=` names one).
pub async fn merchant_code_exists(client: &impl GenericClient, code: &str) -> Result<bool> {
    let stmt = client
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM merchants WHERE code = $1)")
        .await?;
    Ok(client.query_one(&stmt, &[&code]).await?.get(0))
}
