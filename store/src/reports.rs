//! A merchant's business in figures — what `GET /api/v1/reports/*` and the dashboard's
//! overview show: the subscriptions by state with the monthly recurring revenue, what falls
//! due soon, what is at risk or failing, and the revenue per month. Every figure is a sum of
//! rows the list endpoints serve; the revenue reads `revenue_months`, which the ledger's
//! triggers keep (migration 0031), so a year of months is twelve rows at any ledger size.

use chainsub_core::ChainId;
use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::GenericClient;

use crate::chain::units;
use crate::{Error, MerchantScope, Result};

/// Subscriptions by state; the buckets are disjoint and cover every subscription.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    /// Trialing, not ending at the trial's end.
    pub trialing: i64,
    /// Active, not ending at the period end.
    pub active: i64,
    /// Past due, not ending at the period end.
    pub past_due: i64,
    /// Live (trialing, active or past due) and ending at the period end.
    pub cancelling: i64,
    pub cancelled: i64,
    pub ended: i64,
}

/// A count and the base units it sums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub count: i64,
    pub amount: u128,
}

/// The state of a merchant's subscriptions now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub counts: StatusCounts,
    /// Monthly recurring revenue: the amounts of the active and past-due subscriptions that
    /// renew (not ending at the period end). Every plan bills monthly.
    pub mrr: u128,
    /// What the trials that convert would add to it (their amounts).
    pub trial_mrr: u128,
    /// Renewals due (the next charge of a live subscription that renews, at the amount it
    /// will charge — a scheduled downgrade's) by `now + 7 days` and by `now + 30 days`; a
    /// past-due subscription's next charge is its next retry.
    pub due_7_days: Tally,
    pub due_30_days: Tally,
    /// Live subscriptions that renew whose next charge the keeper found the wallet's balance
    /// or allowance unable to cover (`subscription.renewal_at_risk`).
    pub at_risk: Tally,
    /// Past-due subscriptions with a retry to come.
    pub failed_awaiting_retry: Tally,
    /// Subscriptions started, and cancelled or ended, in the last 30 days.
    pub started_30_days: i64,
    pub stopped_30_days: i64,
    /// The last block the index holds: the figures are the index's at that height.
    pub indexed_block: Option<i64>,
}

/// The summary of `scope`'s subscriptions on `chain_id` at `now`.
pub async fn summary(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    now: DateTime<Utc>,
) -> Result<Summary> {
    let stmt = client
        .prepare_cached(
            "WITH s AS (
                 SELECT s.status, s.cancel_at_period_end, s.amount, s.created_at, s.updated_at,
                        s.status IN ('trialing', 'active', 'past_due')
                            AND NOT s.cancel_at_period_end AS renews,
                        CASE WHEN s.status = 'past_due' THEN s.next_retry_at
                             ELSE s.current_period_end END AS due_at,
                        coalesce(s.pending_amount, s.amount) AS due_amount,
                        EXISTS (SELECT 1 FROM renewal_risks r
                                 WHERE r.chain_id = s.chain_id AND r.subscription_id = s.onchain_id
                                   AND r.period = s.period + 1
                                   AND r.reason IN ('allowance', 'balance')) AS at_risk
                   FROM subscriptions s
                  WHERE s.merchant_wallet = $1 AND s.chain_id = $2)
             SELECT
                 count(*) FILTER (WHERE status = 'trialing' AND renews) AS trialing,
                 count(*) FILTER (WHERE status = 'active' AND renews) AS active,
                 count(*) FILTER (WHERE status = 'past_due' AND renews) AS past_due,
                 count(*) FILTER (WHERE status IN ('trialing', 'active', 'past_due')
                                    AND cancel_at_period_end) AS cancelling,
                 count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
                 count(*) FILTER (WHERE status = 'ended') AS ended,
                 coalesce(sum(amount) FILTER (WHERE status IN ('active', 'past_due') AND renews), 0)::TEXT AS mrr,
                 coalesce(sum(amount) FILTER (WHERE status = 'trialing' AND renews), 0)::TEXT AS trial_mrr,
                 count(*) FILTER (WHERE renews AND due_at < $3::timestamptz + interval '7 days') AS due_7,
                 coalesce(sum(due_amount) FILTER (WHERE renews AND due_at < $3::timestamptz + interval '7 days'), 0)::TEXT AS due_7_amount,
                 count(*) FILTER (WHERE renews AND due_at < $3::timestamptz + interval '30 days') AS due_30,
                 coalesce(sum(due_amount) FILTER (WHERE renews AND due_at < $3::timestamptz + interval '30 days'), 0)::TEXT AS due_30_amount,
                 count(*) FILTER (WHERE renews AND at_risk AND status <> 'past_due') AS at_risk,
                 coalesce(sum(due_amount) FILTER (WHERE renews AND at_risk AND status <> 'past_due'), 0)::TEXT AS at_risk_amount,
                 count(*) FILTER (WHERE status = 'past_due' AND due_at IS NOT NULL) AS failing,
                 coalesce(sum(due_amount) FILTER (WHERE status = 'past_due' AND due_at IS NOT NULL), 0)::TEXT AS failing_amount,
                 count(*) FILTER (WHERE created_at >= $3::timestamptz - interval '30 days') AS started_30,
                 count(*) FILTER (WHERE status IN ('cancelled', 'ended')
                                    AND updated_at >= $3::timestamptz - interval '30 days') AS stopped_30,
                 (SELECT block_number FROM indexer_cursor WHERE chain_id = $2) AS indexed_block
             FROM s",
        )
        .await?;
    let r = client
        .query_one(&stmt, &[&scope.wallet_bytes(), &chain_id, &now])
        .await?;
    let amount = |col: &str| -> Result<u128> {
        let text: &str = r.try_get(col)?;
        units(text).ok_or_else(|| Error::Inconsistent(format!("{col} {text:?}")))
    };
    let tally = |count: &str, sum: &str| -> Result<Tally> {
        Ok(Tally {
            count: r.try_get(count)?,
            amount: amount(sum)?,
        })
    };
    Ok(Summary {
        counts: StatusCounts {
            trialing: r.try_get("trialing")?,
            active: r.try_get("active")?,
            past_due: r.try_get("past_due")?,
            cancelling: r.try_get("cancelling")?,
            cancelled: r.try_get("cancelled")?,
            ended: r.try_get("ended")?,
        },
        mrr: amount("mrr")?,
        trial_mrr: amount("trial_mrr")?,
        due_7_days: tally("due_7", "due_7_amount")?,
        due_30_days: tally("due_30", "due_30_amount")?,
        at_risk: tally("at_risk", "at_risk_amount")?,
        failed_awaiting_retry: tally("failing", "failing_amount")?,
        started_30_days: r.try_get("started_30")?,
        stopped_30_days: r.try_get("stopped_30")?,
        indexed_block: r.try_get("indexed_block")?,
    })
}

/// One month's revenue in base units: charges and upgrade prorations collected, refunds paid
/// back (positive); net = charges + prorations − refunds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevenueMonth {
    /// The month's first day (UTC).
    pub month: NaiveDate,
    pub charges: u128,
    pub prorations: u128,
    pub refunds: u128,
    /// Ledger entries summed.
    pub entries: i64,
}

/// `scope`'s revenue per month for the months `from ..= to` (first days), oldest first;
/// months without an entry are absent.
pub async fn revenue_months(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<Vec<RevenueMonth>> {
    let stmt = client
        .prepare_cached(
            "SELECT month, charges::TEXT, prorations::TEXT, refunds::TEXT, entries
               FROM revenue_months
              WHERE chain_id = $2 AND merchant_wallet = $1 AND month BETWEEN $3 AND $4
              ORDER BY month",
        )
        .await?;
    let rows = client
        .query(&stmt, &[&scope.wallet_bytes(), &chain_id, &from, &to])
        .await?;
    rows.iter()
        .map(|r| {
            let amount = |i: usize| -> Result<u128> {
                let text: &str = r.try_get(i)?;
                units(text).ok_or_else(|| Error::Inconsistent(format!("revenue {text:?}")))
            };
            Ok(RevenueMonth {
                month: r.try_get(0)?,
                charges: amount(1)?,
                prorations: amount(2)?,
                refunds: amount(3)?,
                entries: r.try_get(4)?,
            })
        })
        .collect()
}
