//! Times as the API serves them: RFC 3339 UTC (`2026-01-31T12:00:00Z`), written directly
//! (a list page writes thousands; chrono's formatter costs ~780 instructions each).

use chrono::{DateTime, SecondsFormat, Utc};

/// Unix seconds as a timestamp (clamped into chrono's range; chain times always fit).
pub fn ts(secs: u64) -> DateTime<Utc> {
    DateTime::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX), 0)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Unix seconds as RFC 3339 UTC with seconds, e.g. `2026-01-31T12:00:00Z`.
pub fn rfc3339(secs: u64) -> String {
    rfc3339_of(&ts(secs))
}

/// RFC 3339 UTC with second precision and `Z` (every time the API serves).
pub fn rfc3339_of(t: &DateTime<Utc>) -> String {
    rfc3339_string(t, false)
}

/// [`rfc3339_into`] as a `String`, or chrono's text where that declines.
fn rfc3339_string(t: &DateTime<Utc>, millis: bool) -> String {
    let mut buf = [0u8; 24];
    match rfc3339_into(t, &mut buf, millis) {
        Some(s) => s.to_owned(),
        None if millis => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        None => t.to_rfc3339_opts(SecondsFormat::Secs, true),
    }
}

/// [`rfc3339`] (or, with `millis`, [`rfc3339_millis`]) written into `buf` without
/// allocating (a list page writes thousands of times); `None` for a year outside 0000–9999,
/// which chrono formats instead.
pub fn rfc3339_into<'b>(t: &DateTime<Utc>, buf: &'b mut [u8; 24], millis: bool) -> Option<&'b str> {
    rfc3339_ascii(t, buf, millis).and_then(|text| std::str::from_utf8(text).ok())
}

/// Two decimal digits of every number below 100, in order.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// [`rfc3339_into`] as ASCII bytes, for a writer of bytes (the JSON views): the `str` check
/// of the finished text was a quarter of the work (callgrind: ~280 instructions per time,
/// four times per listed subscription). Digits come in pairs from a table.
pub fn rfc3339_ascii<'b>(
    t: &DateTime<Utc>,
    buf: &'b mut [u8; 24],
    millis: bool,
) -> Option<&'b [u8]> {
    use chrono::{Datelike, Timelike};
    // The naive UTC value once: each accessor of a `DateTime` converts to local time
    // (adding the zero offset) again, which cost more than the formatting (callgrind).
    let t = t.naive_utc();
    let (date, time) = (t.date(), t.time());
    let year = u32::try_from(date.year()).ok().filter(|y| *y <= 9999)?;
    let two = |buf: &mut [u8; 24], at: usize, v: u32| {
        let i = v as usize * 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[i..i + 2]);
    };
    two(buf, 0, year / 100);
    two(buf, 2, year % 100);
    buf[4] = b'-';
    two(buf, 5, date.month());
    buf[7] = b'-';
    two(buf, 8, date.day());
    buf[10] = b'T';
    two(buf, 11, time.hour());
    buf[13] = b':';
    two(buf, 14, time.minute());
    buf[16] = b':';
    // A leap second (nanosecond >= 1e9) is :60, as chrono writes it.
    two(
        buf,
        17,
        time.second() + u32::from(time.nanosecond() >= 1_000_000_000),
    );
    let end = if millis {
        let ms = time.nanosecond() % 1_000_000_000 / 1_000_000;
        buf[19] = b'.';
        buf[20] = b'0' + (ms / 100) as u8;
        two(buf, 21, ms % 100);
        23
    } else {
        19
    };
    buf[end] = b'Z';
    Some(&buf[..=end])
}

/// RFC 3339 UTC with milliseconds: webhook delivery times (attempts are seconds apart at
/// first), in the events list and the dashboard alike.
pub fn rfc3339_millis_of(t: &DateTime<Utc>) -> String {
    rfc3339_string(t, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_chrono_writes_them() {
        let chrono = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        // Every day of a few centuries at a varying time of day, the edges of the 4-digit
        // years, and chrono's own extremes (which it formats itself).
        let mut secs: Vec<i64> = (0..150_000i64)
            .map(|d| -2_208_988_800 + d * 86_400 + (d * 7_919) % 86_400)
            .collect();
        secs.extend([
            0,
            59,
            86_399,
            253_402_300_799,
            -62_167_219_200,
            1_700_000_000,
        ]);
        for &s in &secs {
            let t = DateTime::from_timestamp(s, 0).unwrap();
            assert_eq!(rfc3339_of(&t), chrono(&t), "{s}");
        }
        let millis = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        for (i, s) in secs.iter().enumerate() {
            // Sub-second parts from 0 to 999,999,999 ns, exact milliseconds among them.
            let nanos = (i as u32).wrapping_mul(2_654_435_761) % 1_000_000_000;
            for n in [nanos, nanos / 1_000_000 * 1_000_000, 0, 999_999_999] {
                let t = DateTime::from_timestamp(*s, n).unwrap();
                assert_eq!(rfc3339_of(&t), chrono(&t), "{s} {n}");
                assert_eq!(rfc3339_millis_of(&t), millis(&t), "{s} {n}");
            }
        }
        for leap in [1_500_000_000, 1_000_000_000, 1_999_999_999] {
            let leap = DateTime::from_timestamp(1_483_228_799, leap).unwrap();
            assert_eq!(rfc3339_of(&leap), chrono(&leap));
            assert_eq!(rfc3339_millis_of(&leap), millis(&leap));
        }
        for t in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC] {
            assert_eq!(rfc3339_of(&t), chrono(&t));
            assert_eq!(rfc3339_millis_of(&t), millis(&t));
        }
    }

    #[test]
    fn unix_seconds_are_written_as_chrono_writes_them() {
        for s in [
            0u64,
            1,
            1_700_000_000,
            253_402_300_799,
            253_402_300_800,
            u64::MAX,
        ] {
            assert_eq!(
                rfc3339(s),
                ts(s).to_rfc3339_opts(SecondsFormat::Secs, true),
                "{s}"
            );
        }
    }
}
