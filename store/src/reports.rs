//! A merchant's business in figures — what `GET /api/v1/reports/*` and the dashboard's
//! overview show: the subscriptions by state with the monthly recurring revenue, what falls
//! due soon, what is at risk or failing, and the revenue per month. Every figure is a sum of
//! rows the list endpoints serve, read from tables that triggers keep with those rows: the
//! subscriptions' `subscription_tallies` and `subscription_starts` (migration 0032: a few
//! rows per day of due dates and of stops, at any number of subscriptions) and the ledger's
//! `revenue_months` (migration 0031: a year is twelve rows at any ledger size).

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
    /// will charge — a scheduled downgrade's) on or before the UTC day 7, and 30, days after
    /// today's; a past-due subscription's next charge is its next retry.
    pub due_7_days: Tally,
    pub due_30_days: Tally,
    /// Live subscriptions that renew whose next charge the keeper found the wallet's balance
    /// or allowance unable to cover (`subscription.renewal_at_risk`).
    pub at_risk: Tally,
    /// Past-due subscriptions with a retry to come.
    pub failed_awaiting_retry: Tally,
    /// Subscriptions started, and cancelled or ended (their last event), in the last 30
    /// days: on or after the UTC day 30 days before today's.
    pub started_30_days: i64,
    pub stopped_30_days: i64,
    /// How each count changed over the same days: subscriptions that entered the state less
    /// those that left it, by the block day of the event that moved them
    /// (`subscription_state_moves`, migration 0034).
    pub changes_30_days: StatusCounts,
    /// The live subscriptions (trialing, active, past due, cancelling) at the end of each of
    /// the [`WEEKS`] weeks to today, oldest first.
    pub weeks: Vec<WeekCounts>,
    /// The last block the index holds: the figures are the index's at that height.
    pub indexed_block: Option<i64>,
}

/// The weeks of [`Summary::weeks`].
pub const WEEKS: usize = 12;

/// One week of [`Summary::weeks`]: the seven UTC days ending with `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeekCounts {
    pub end: NaiveDate,
    /// Live at the end of `end`.
    pub live: i64,
    /// Started, and cancelled or ended, in the week.
    pub started: i64,
    pub stopped: i64,
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
            "WITH t AS (
                 SELECT status, cancelling, due_day, stopped_day, subscriptions, amount, due_amount,
                        status IN ('trialing', 'active', 'past_due') AND NOT cancelling AS renews
                   FROM subscription_tallies
                  WHERE merchant_wallet = $1 AND chain_id = $2),
             today AS (SELECT ($3::timestamptz AT TIME ZONE 'UTC')::date AS day),
             -- A notice names the period at risk: the subscription's next one while it still
             -- renews (a past-due one is counted as failing instead).
             risk AS (
                 SELECT count(*) AS n, coalesce(sum(coalesce(s.pending_amount, s.amount)), 0)::TEXT AS amount
                   FROM renewal_risks r
                   JOIN subscriptions s ON s.chain_id = r.chain_id AND s.onchain_id = r.subscription_id
                  WHERE r.merchant_wallet = $1 AND r.chain_id = $2
                    AND r.reason IN ('allowance', 'balance') AND r.period = s.period + 1
                    AND s.status IN ('trialing', 'active') AND NOT s.cancel_at_period_end),
             moves AS (
                 SELECT state, sum(subscriptions)::INT8 AS n FROM subscription_state_moves
                  WHERE merchant_wallet = $1 AND chain_id = $2
                    AND day >= (SELECT day FROM today) - 30
                  GROUP BY state),
             -- Starts and stops per day over the weeks of `Summary::weeks` (12 × 7 days).
             days AS (
                 SELECT st.day, st.subscriptions AS started, 0::INT8 AS stopped
                   FROM subscription_starts st
                  WHERE st.merchant_wallet = $1 AND st.chain_id = $2
                    AND st.day > (SELECT day FROM today) - 84
                 UNION ALL
                 SELECT x.stopped_day, 0, x.subscriptions
                   FROM subscription_tallies x
                  WHERE x.merchant_wallet = $1 AND x.chain_id = $2
                    AND x.stopped_day > (SELECT day FROM today) - 84)
             SELECT
                 coalesce(sum(subscriptions) FILTER (WHERE status = 'trialing' AND renews), 0)::INT8 AS trialing,
                 coalesce(sum(subscriptions) FILTER (WHERE status = 'active' AND renews), 0)::INT8 AS active,
                 coalesce(sum(subscriptions) FILTER (WHERE status = 'past_due' AND renews), 0)::INT8 AS past_due,
                 coalesce(sum(subscriptions) FILTER (WHERE status IN ('trialing', 'active', 'past_due')
                                                       AND cancelling), 0)::INT8 AS cancelling,
                 coalesce(sum(subscriptions) FILTER (WHERE status = 'cancelled'), 0)::INT8 AS cancelled,
                 coalesce(sum(subscriptions) FILTER (WHERE status = 'ended'), 0)::INT8 AS ended,
                 coalesce(sum(amount) FILTER (WHERE status IN ('active', 'past_due') AND renews), 0)::TEXT AS mrr,
                 coalesce(sum(amount) FILTER (WHERE status = 'trialing' AND renews), 0)::TEXT AS trial_mrr,
                 coalesce(sum(subscriptions) FILTER (WHERE renews AND due_day <= day + 7), 0)::INT8 AS due_7,
                 coalesce(sum(due_amount) FILTER (WHERE renews AND due_day <= day + 7), 0)::TEXT AS due_7_amount,
                 coalesce(sum(subscriptions) FILTER (WHERE renews AND due_day <= day + 30), 0)::INT8 AS due_30,
                 coalesce(sum(due_amount) FILTER (WHERE renews AND due_day <= day + 30), 0)::TEXT AS due_30_amount,
                 coalesce(sum(subscriptions) FILTER (WHERE status = 'past_due' AND due_day IS NOT NULL), 0)::INT8 AS failing,
                 coalesce(sum(due_amount) FILTER (WHERE status = 'past_due' AND due_day IS NOT NULL), 0)::TEXT AS failing_amount,
                 coalesce(sum(subscriptions) FILTER (WHERE stopped_day >= day - 30), 0)::INT8 AS stopped_30,
                 ARRAY(SELECT state FROM moves ORDER BY state) AS move_states,
                 ARRAY(SELECT n FROM moves ORDER BY state) AS move_counts,
                 (SELECT coalesce(sum(st.subscriptions), 0)::INT8 FROM subscription_starts st
                   WHERE st.merchant_wallet = $1 AND st.chain_id = $2
                     AND st.day >= (SELECT day FROM today) - 30) AS started_30,
                 (SELECT n FROM risk) AS at_risk,
                 (SELECT amount FROM risk) AS at_risk_amount,
                 (SELECT block_number FROM indexer_cursor WHERE chain_id = $2) AS indexed_block,
                 ARRAY(SELECT day FROM days ORDER BY day, started, stopped) AS day_list,
                 ARRAY(SELECT started FROM days ORDER BY day, started, stopped) AS day_started,
                 ARRAY(SELECT stopped FROM days ORDER BY day, started, stopped) AS day_stopped
             FROM t, today",
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
    let counts = StatusCounts {
        trialing: r.try_get("trialing")?,
        active: r.try_get("active")?,
        past_due: r.try_get("past_due")?,
        cancelling: r.try_get("cancelling")?,
        cancelled: r.try_get("cancelled")?,
        ended: r.try_get("ended")?,
    };
    let day_list: Vec<NaiveDate> = r.try_get("day_list")?;
    let day_started: Vec<i64> = r.try_get("day_started")?;
    let day_stopped: Vec<i64> = r.try_get("day_stopped")?;
    let days: Vec<_> = day_list
        .into_iter()
        .zip(day_started)
        .zip(day_stopped)
        .map(|((d, a), b)| (d, a, b))
        .collect();
    let weeks = weeks(now.date_naive(), counts, &days);
    let move_states: Vec<String> = r.try_get("move_states")?;
    let move_counts: Vec<i64> = r.try_get("move_counts")?;
    let mut changes = StatusCounts::default();
    for (state, n) in move_states.iter().zip(move_counts) {
        let slot = match state.as_str() {
            "trialing" => &mut changes.trialing,
            "active" => &mut changes.active,
            "past_due" => &mut changes.past_due,
            "cancelling" => &mut changes.cancelling,
            "cancelled" => &mut changes.cancelled,
            "ended" => &mut changes.ended,
            other => return Err(Error::Inconsistent(format!("subscription state {other:?}"))),
        };
        *slot = n;
    }
    Ok(Summary {
        counts,
        mrr: amount("mrr")?,
        trial_mrr: amount("trial_mrr")?,
        due_7_days: tally("due_7", "due_7_amount")?,
        due_30_days: tally("due_30", "due_30_amount")?,
        at_risk: tally("at_risk", "at_risk_amount")?,
        failed_awaiting_retry: tally("failing", "failing_amount")?,
        started_30_days: r.try_get("started_30")?,
        stopped_30_days: r.try_get("stopped_30")?,
        changes_30_days: changes,
        weeks,
        indexed_block: r.try_get("indexed_block")?,
    })
}

/// The [`WEEKS`] weeks to `today` from `days` (a day's starts and stops, one or more rows
/// a day, the days after the first week's start): the live count at each week's end is
/// `now`'s less those started since, plus those stopped since (a subscription stops once:
/// cancelled or ended) — "since" up to any day, as block times may run ahead of the clock.
fn weeks(today: NaiveDate, now: StatusCounts, days: &[(NaiveDate, i64, i64)]) -> Vec<WeekCounts> {
    let live_now = now.trialing + now.active + now.past_due + now.cancelling;
    let sum = |from: NaiveDate, to: NaiveDate, pick: fn(&(NaiveDate, i64, i64)) -> i64| {
        days.iter()
            .filter(|d| d.0 > from && d.0 <= to)
            .map(pick)
            .sum::<i64>()
    };
    (0..WEEKS)
        .rev()
        .map(|k| {
            let end = today - chrono::Days::new(7 * k as u64);
            let start = end - chrono::Days::new(7);
            WeekCounts {
                end,
                live: live_now - sum(end, NaiveDate::MAX, |d| d.1)
                    + sum(end, NaiveDate::MAX, |d| d.2),
                started: sum(start, end, |d| d.1),
                stopped: sum(start, end, |d| d.2),
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weeks_live_count_adds_back_what_stopped_since_and_removes_what_started_since() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
        let day = |back: u64| today - chrono::Days::new(back);
        let now = StatusCounts {
            trialing: 1,
            active: 3,
            past_due: 1,
            cancelling: 1,
            cancelled: 2,
            ended: 1,
        };
        // Started today (2) and 10 days ago (1); stopped 3 days ago (1, with a start the same
        // day on another row) and 20 days ago (2).
        let days = [
            (day(20), 0, 2),
            (day(10), 1, 0),
            (day(3), 0, 1),
            (day(3), 1, 0),
            (day(0), 2, 0),
        ];
        let w = weeks(today, now, &days);
        assert_eq!(w.len(), WEEKS);
        assert_eq!(w[11].end, today);
        assert_eq!(w[0].end, day(77));
        // Today: the live ones now.
        assert_eq!((w[11].live, w[11].started, w[11].stopped), (6, 3, 1));
        // A week ago: less today's and the day-3 starts (3), plus the day-3 stop (1).
        assert_eq!((w[10].live, w[10].started, w[10].stopped), (4, 1, 0));
        // Two weeks ago: less the day-10 start too.
        assert_eq!((w[9].live, w[9].started, w[9].stopped), (3, 0, 2));
        // Three weeks ago and before: the day-20 stops were live.
        assert_eq!((w[8].live, w[8].started, w[8].stopped), (5, 0, 0));
        assert_eq!(w[0].live, 5);
        // A stop dated after today (a block time ahead of the clock) was live all along.
        let ahead = weeks(today, now, &[(today + chrono::Days::new(2), 0, 1)]);
        assert_eq!((ahead[11].live, ahead[11].stopped), (7, 0));
        assert_eq!(ahead[0].live, 7);
    }
}
