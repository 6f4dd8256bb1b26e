//! When to try a delivery again. The schedule lists the delay before each attempt (the first
//! is normally 0: deliver at once); after the last one fails the delivery is `failed`.
//! Delays are jittered so that many deliveries failing together (an endpoint outage) do not
//! all come back in the same instant.

use std::str::FromStr;
use std::time::Duration;

use rand::Rng;

/// Default: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (about 27.5 h in all, as
/// Standard Webhooks / Svix do).
pub const DEFAULT_SCHEDULE: &str = "0s,5s,5m,30m,2h,5h,10h,10h";

/// The delay before each attempt, parsed from e.g. `0s,5s,5m,30m,2h` (units `ms`, `s`, `m`, `h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule(Vec<Duration>);

/// A schedule string that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid retry schedule {0:?}: expected comma-separated durations like 0s,5s,5m,2h")]
pub struct InvalidSchedule(String);

impl FromStr for RetrySchedule {
    type Err = InvalidSchedule;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let delays = s
            .split(',')
            .map(|d| parse_duration(d.trim()))
            .collect::<Option<Vec<_>>>()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| InvalidSchedule(s.to_string()))?;
        Ok(Self(delays))
    }
}

/// Parses `250ms`, `5s`, `5m`, `2h`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "ms" => n,
        "s" => n.checked_mul(1_000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

impl Default for RetrySchedule {
    fn default() -> Self {
        DEFAULT_SCHEDULE.parse().expect("default schedule parses")
    }
}

impl RetrySchedule {
    /// How many attempts a delivery gets before it is `failed`.
    pub fn max_attempts(&self) -> i32 {
        self.0.len() as i32
    }

    /// The delay before attempt `attempt + 1` after attempt `attempt` (1-based) failed, with
    /// ±20 % jitter; `None` when the schedule is exhausted.
    pub fn next_delay(&self, attempt: i32) -> Option<Duration> {
        let base = *self.0.get(usize::try_from(attempt).ok()?)?;
        Some(jitter(base))
    }
}

fn jitter(base: Duration) -> Duration {
    if base.is_zero() {
        return base;
    }
    base.mul_f64(rand::rng().random_range(0.8..=1.2))
}

/// Reads `Retry-After` (delta-seconds or an HTTP date) into a delay.
pub fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - now).to_std().ok()
}

/// Honours a receiver's `Retry-After` within bounds: never sooner than our own schedule
/// (a receiver cannot make us hammer it) and never later than `cap` (a receiver cannot park
/// its events for days).
pub fn apply_retry_after(
    scheduled: Duration,
    retry_after: Option<Duration>,
    cap: Duration,
) -> Duration {
    match retry_after {
        Some(ra) => scheduled.max(ra.min(cap)),
        None => scheduled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schedule_has_eight_attempts_over_about_a_day() {
        let s = RetrySchedule::default();
        assert_eq!(s.max_attempts(), 8);
        let total: Duration = s.0.iter().sum();
        assert_eq!(
            total,
            Duration::from_secs(5 + 300 + 1800 + 7200 + 18000 + 72000)
        );
    }

    #[test]
    fn next_delay_is_jittered_within_twenty_percent_and_ends() {
        let s: RetrySchedule = "0s,10s,100ms".parse().unwrap();
        for _ in 0..100 {
            let d = s.next_delay(1).unwrap();
            assert!(
                d >= Duration::from_secs(8) && d <= Duration::from_secs(12),
                "{d:?}"
            );
        }
        assert!(s.next_delay(2).unwrap() <= Duration::from_millis(120));
        assert_eq!(s.next_delay(3), None);
    }

    #[test]
    fn schedule_rejects_garbage() {
        for bad in ["", "5", "5x", "s", "1s,,2s", "-1s"] {
            assert!(bad.parse::<RetrySchedule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 2026 00:01:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(parse_retry_after("soon", now), None);
        let cap = Duration::from_secs(3600);
        let s = Duration::from_secs(5);
        assert_eq!(
            apply_retry_after(s, Some(Duration::from_secs(60)), cap),
            Duration::from_secs(60)
        );
        assert_eq!(apply_retry_after(s, Some(Duration::from_secs(1)), cap), s);
        assert_eq!(
            apply_retry_after(s, Some(Duration::from_secs(99_999)), cap),
            cap
        );
    }
}
