//! Reports (`GET /api/v1/reports/summary`, `GET /api/v1/reports/revenue`): a merchant's
//! figures, every amount both as a decimal string and in base units.

use chainsub_core::format_units;
use chainsub_store::reports::{RevenueMonth, StatusCounts, Summary, Tally};
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde::Serialize;

/// USDC's decimals: `baseUnits` = `amount` × 10^6.
pub const DECIMALS: u8 = 6;

/// An amount: `{"amount": "19.98", "baseUnits": "19980000"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoneyView {
    pub amount: String,
    pub base_units: String,
}

impl MoneyView {
    pub fn of(units: u128) -> Self {
        Self {
            amount: format_units(units),
            base_units: units.to_string(),
        }
    }
}

/// A count with the amount it sums.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TallyView {
    pub count: i64,
    #[serde(flatten)]
    pub total: MoneyView,
}

impl From<Tally> for TallyView {
    fn from(t: Tally) -> Self {
        Self {
            count: t.count,
            total: MoneyView::of(t.amount),
        }
    }
}

/// Subscriptions by state (disjoint buckets).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusCountsView {
    pub trialing: i64,
    pub active: i64,
    pub past_due: i64,
    pub cancelling: i64,
    pub cancelled: i64,
    pub ended: i64,
}

impl From<StatusCounts> for StatusCountsView {
    fn from(c: StatusCounts) -> Self {
        Self {
            trialing: c.trialing,
            active: c.active,
            past_due: c.past_due,
            cancelling: c.cancelling,
            cancelled: c.cancelled,
            ended: c.ended,
        }
    }
}

/// The ReportSummary object.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryView {
    pub object: &'static str,
    pub currency: &'static str,
    pub decimals: u8,
    /// When the figures were computed, and the index's height they were read at.
    #[serde(serialize_with = "super::time")]
    pub as_of: DateTime<Utc>,
    pub indexed_block: Option<i64>,
    pub mrr: MoneyView,
    pub trial_mrr: MoneyView,
    pub subscriptions: StatusCountsView,
    pub started_last_30_days: i64,
    pub stopped_last_30_days: i64,
    /// The change of each count over the last 30 days, where the index can tell it.
    pub change_last_30_days: ChangeView,
    /// The live subscriptions at the end of each of the last 12 weeks, oldest first.
    pub live_by_week: Vec<WeekView>,
    pub renewals_next_7_days: TallyView,
    pub renewals_next_30_days: TallyView,
    pub at_risk: TallyView,
    pub failed_awaiting_retry: TallyView,
}

/// `changeLast30Days`: how each count changed over the last 30 days — subscriptions that
/// entered the state less those that left it, by the block day of the event that moved them —
/// and the live states' (trialing, active, past due, cancelling) together.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeView {
    #[serde(flatten)]
    pub states: StatusCountsView,
    pub live: i64,
}

/// One week of `liveByWeek`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WeekView {
    /// The week's last UTC day, `YYYY-MM-DD`: the count is at its end.
    pub week_ending: String,
    pub live: i64,
    pub started: i64,
    pub stopped: i64,
}

impl SummaryView {
    pub fn new(s: Summary, as_of: DateTime<Utc>) -> Self {
        Self {
            object: "report_summary",
            currency: "USDC",
            decimals: DECIMALS,
            as_of,
            indexed_block: s.indexed_block,
            mrr: MoneyView::of(s.mrr),
            trial_mrr: MoneyView::of(s.trial_mrr),
            subscriptions: s.counts.into(),
            started_last_30_days: s.started_30_days,
            stopped_last_30_days: s.stopped_30_days,
            change_last_30_days: {
                let c = s.changes_30_days;
                ChangeView {
                    states: c.into(),
                    live: c.trialing + c.active + c.past_due + c.cancelling,
                }
            },
            live_by_week: s
                .weeks
                .iter()
                .map(|w| WeekView {
                    week_ending: w.end.format("%Y-%m-%d").to_string(),
                    live: w.live,
                    started: w.started,
                    stopped: w.stopped,
                })
                .collect(),
            renewals_next_7_days: s.due_7_days.into(),
            renewals_next_30_days: s.due_30_days.into(),
            at_risk: s.at_risk.into(),
            failed_awaiting_retry: s.failed_awaiting_retry.into(),
        }
    }
}

/// One interval of the revenue report.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevenueIntervalView {
    /// `YYYY-MM`.
    pub month: String,
    /// The interval's bounds: `[start, end)`, UTC.
    #[serde(serialize_with = "super::time")]
    pub start: DateTime<Utc>,
    #[serde(serialize_with = "super::time")]
    pub end: DateTime<Utc>,
    pub charges: MoneyView,
    pub prorations: MoneyView,
    pub refunds: MoneyView,
    /// charges + prorations − refunds (negative when more was refunded than collected).
    pub net: MoneyView,
    /// The ledger entries summed.
    pub entries: i64,
}

/// The ReportRevenue object.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevenueView {
    pub object: &'static str,
    pub currency: &'static str,
    pub decimals: u8,
    pub interval: &'static str,
    pub indexed_block: Option<i64>,
    pub data: Vec<RevenueIntervalView>,
    pub total: RevenueTotalView,
}

/// The sums over the report's intervals.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevenueTotalView {
    pub charges: MoneyView,
    pub prorations: MoneyView,
    pub refunds: MoneyView,
    pub net: MoneyView,
    pub entries: i64,
}

/// `charges + prorations − refunds` as a signed decimal amount.
fn net(charges: u128, prorations: u128, refunds: u128) -> MoneyView {
    let collected = charges.saturating_add(prorations);
    if collected >= refunds {
        MoneyView::of(collected - refunds)
    } else {
        let m = MoneyView::of(refunds - collected);
        MoneyView {
            amount: format!("-{}", m.amount),
            base_units: format!("-{}", m.base_units),
        }
    }
}

fn first_day(d: NaiveDate) -> NaiveDate {
    d.with_day(1).unwrap_or(d)
}

fn next_month(d: NaiveDate) -> NaiveDate {
    first_day(d)
        .checked_add_months(chrono::Months::new(1))
        .unwrap_or(d)
}

fn midnight(d: NaiveDate) -> DateTime<Utc> {
    d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc()
}

impl RevenueView {
    /// Every month `from ..= to` (first days), with zeros where `months` has none.
    pub fn monthly(
        from: NaiveDate,
        to: NaiveDate,
        months: &[RevenueMonth],
        indexed_block: Option<i64>,
    ) -> Self {
        let mut data = Vec::new();
        let (mut charges, mut prorations, mut refunds, mut entries) = (0u128, 0u128, 0u128, 0i64);
        let mut month = first_day(from);
        while month <= to {
            let found = months.iter().find(|m| m.month == month);
            let (c, p, r, n) = found.map_or((0, 0, 0, 0), |m| {
                (m.charges, m.prorations, m.refunds, m.entries)
            });
            charges += c;
            prorations += p;
            refunds += r;
            entries += n;
            let next = next_month(month);
            data.push(RevenueIntervalView {
                month: month.format("%Y-%m").to_string(),
                start: midnight(month),
                end: midnight(next),
                charges: MoneyView::of(c),
                prorations: MoneyView::of(p),
                refunds: MoneyView::of(r),
                net: net(c, p, r),
                entries: n,
            });
            month = next;
        }
        Self {
            object: "report_revenue",
            currency: "USDC",
            decimals: DECIMALS,
            interval: "month",
            indexed_block,
            data,
            total: RevenueTotalView {
                charges: MoneyView::of(charges),
                prorations: MoneyView::of(prorations),
                refunds: MoneyView::of(refunds),
                net: net(charges, prorations, refunds),
                entries,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_month_of_the_range_is_listed_and_the_net_may_be_negative() {
        let d = |y, m| NaiveDate::from_ymd_opt(y, m, 1).unwrap();
        let months = [
            RevenueMonth {
                month: d(2026, 12),
                charges: 9_990_000,
                prorations: 1,
                refunds: 0,
                entries: 2,
            },
            RevenueMonth {
                month: d(2027, 2),
                charges: 0,
                prorations: 0,
                refunds: 2_000_000,
                entries: 1,
            },
        ];
        let v = serde_json::to_value(RevenueView::monthly(
            d(2026, 11),
            d(2027, 2),
            &months,
            Some(7),
        ))
        .unwrap();
        let listed: Vec<&str> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["month"].as_str().unwrap())
            .collect();
        assert_eq!(listed, ["2026-11", "2026-12", "2027-01", "2027-02"]);
        assert_eq!(v["data"][1]["net"]["amount"], "9.990001");
        assert_eq!(v["data"][1]["end"], "2027-01-01T00:00:00Z");
        assert_eq!(v["data"][3]["net"]["amount"], "-2.00");
        assert_eq!(v["data"][3]["net"]["baseUnits"], "-2000000");
        assert_eq!(v["total"]["net"]["baseUnits"], "7990001");
        assert_eq!(v["total"]["entries"], 3);
    }
}
