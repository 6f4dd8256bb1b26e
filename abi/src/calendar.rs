//! Calendar-month arithmetic, the Rust twin of `SubscriptionManager.addMonths`.

use chrono::{DateTime, Months, Utc};

/// `anchor` (unix seconds) moved forward by `months` calendar months, keeping the time of day
/// and clamping the anchor's day of month to the target month's length (Jan 31 -> Feb 28/29
/// -> Mar 31). Returns `None` outside chrono's range.
pub fn add_months(anchor: u64, months: u32) -> Option<u64> {
    let start = DateTime::<Utc>::from_timestamp(i64::try_from(anchor).ok()?, 0)?;
    // chrono clamps to the month end, anchored on the original day: what Stripe does.
    let end = start.checked_add_months(Months::new(months))?;
    u64::try_from(end.timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn ts(y: i32, m: u32, d: u32) -> u64 {
        NaiveDate::from_ymd_opt(y, m, d)
            .unwrap()
            .and_hms_opt(12, 30, 0)
            .unwrap()
            .and_utc()
            .timestamp() as u64
    }

    #[test]
    fn jan_31_clamps_to_february_then_returns_to_31() {
        let jan31 = ts(2025, 1, 31);
        assert_eq!(add_months(jan31, 1), Some(ts(2025, 2, 28)));
        assert_eq!(add_months(jan31, 2), Some(ts(2025, 3, 31)));
        assert_eq!(add_months(ts(2024, 1, 31), 1), Some(ts(2024, 2, 29)));
    }

    #[test]
    fn december_rolls_into_next_year() {
        assert_eq!(add_months(ts(2025, 12, 15), 1), Some(ts(2026, 1, 15)));
        assert_eq!(add_months(ts(2025, 12, 31), 2), Some(ts(2026, 2, 28)));
    }
}
