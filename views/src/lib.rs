//! Views: the response objects of the REST API and the bodies of webhooks, as `Serialize`
//! structs built from the store's typed rows and written straight into the response (no
//! intermediate JSON tree). A webhook body and `GET /api/v1/events` share [`EventView`], so
//! they agree byte for byte.

mod account;
mod chain;
mod event;
mod export;
mod json;
mod plan;
mod subscription;
mod webhook;

pub use account::{
    CheckoutView, DeletedView, HealthChainView, HealthView, IssuedKeyView, KeyStatusView, KeyView,
    MerchantView, NonceView, SessionView,
};
pub use chain::ChainView;
pub use event::{DeliveryView, EventView};
pub use export::{EXPORT_COLUMNS, ExportEntryView, ExportTotalView, ExportTotals, csv_header};
pub use json::WriteJson;
pub use plan::{PlanView, ProvisioningView};
pub use subscription::{
    CancellationView, LedgerEntryView, SubscriptionView, SubscriptionWithLedger,
};
pub use webhook::{
    AttemptView, PreviousSecretView, QueuedDeliveryView, RotatedSecretView, WebhookDeliveryView,
    WebhookEndpointView, WebhookSecretsView,
};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

/// `{object: "list", data, hasMore}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListView<T> {
    pub object: &'static str,
    pub data: Vec<T>,
    pub has_more: bool,
}

impl<T> ListView<T> {
    pub fn new(data: Vec<T>, has_more: bool) -> ListView<T> {
        ListView {
            object: "list",
            data,
            has_more,
        }
    }
}

impl<T: WriteJson> WriteJson for ListView<T> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"object\":");
        json::plain(out, self.object);
        json::raw(out, ",\"data\":[");
        for (i, item) in self.data.iter().enumerate() {
            if i > 0 {
                json::raw(out, ",");
            }
            item.write_json(out);
        }
        json::raw(out, "],\"hasMore\":");
        json::boolean(out, self.has_more);
        json::raw(out, "}");
    }
}

/// RFC 3339 UTC with second precision and `Z` (every time the API serves).
pub fn rfc3339(t: &DateTime<Utc>) -> String {
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
fn rfc3339_into<'b>(t: &DateTime<Utc>, buf: &'b mut [u8; 24], millis: bool) -> Option<&'b str> {
    use chrono::{Datelike, Timelike};
    // The naive UTC value once: each accessor of a `DateTime` converts to local time
    // (adding the zero offset) again, which cost more than the formatting (callgrind).
    let t = t.naive_utc();
    let (date, time) = (t.date(), t.time());
    let year = u32::try_from(date.year()).ok().filter(|y| *y <= 9999)?;
    let two = |buf: &mut [u8; 24], at: usize, v: u32| {
        buf[at] = b'0' + (v / 10) as u8;
        buf[at + 1] = b'0' + (v % 10) as u8;
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
    std::str::from_utf8(&buf[..=end]).ok()
}

/// RFC 3339 UTC with milliseconds: webhook delivery times (attempts are seconds apart at
/// first), in the events list and the dashboard alike.
pub fn rfc3339_millis(t: &DateTime<Utc>) -> String {
    rfc3339_string(t, true)
}

/// Amount in base units -> `"9.99"`.
fn usdc(units: Option<u128>) -> Option<String> {
    units.map(chainsub_core::format_units)
}

/// `serialize_with` for times.
fn time<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = [0u8; 24];
    match rfc3339_into(t, &mut buf, false) {
        Some(text) => s.serialize_str(text),
        None => s.serialize_str(&rfc3339(t)),
    }
}

/// `serialize_with` for optional times.
fn opt_time<S: serde::Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => time(t, s),
        None => s.serialize_none(),
    }
}

/// `serialize_with` for addresses: EIP-55 in every field (also the pages' JSON).
pub fn checksummed<S: serde::Serializer>(
    a: &alloy::primitives::Address,
    s: S,
) -> Result<S::Ok, S::Error> {
    with_checksum(a, |text| s.serialize_str(text))
}

/// Calls `f` with the EIP-55 text of `a`. A page repeats the same few addresses (the contract
/// on every row, an event's subscriber twice), and each checksum is a keccak hash, so the last
/// few are remembered per thread.
fn with_checksum<R>(a: &alloy::primitives::Address, f: impl FnOnce(&str) -> R) -> R {
    use std::cell::RefCell;
    const KEEP: usize = 4;
    thread_local! {
        static RECENT: RefCell<Vec<(alloy::primitives::Address, String)>> =
            const { RefCell::new(Vec::new()) };
    }
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        if let Some(i) = recent.iter().position(|(x, _)| x == a) {
            return f(&recent[i].1);
        }
        let text = a.to_checksum(None);
        let out = f(&text);
        if recent.len() == KEEP {
            recent.remove(0);
        }
        recent.push((*a, text));
        out
    })
}

/// `serialize_with` for optional addresses.
fn opt_checksummed<S: serde::Serializer>(
    a: &Option<alloy::primitives::Address>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match a {
        Some(a) => with_checksum(a, |text| s.serialize_str(text)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::Address;

    #[test]
    fn remembered_checksums_are_the_checksums() {
        let addrs: Vec<Address> = (1..=9u8).map(Address::repeat_byte).collect();
        // Twice round, more addresses than are remembered: every answer is still right.
        for a in addrs.iter().chain(addrs.iter()).chain(addrs.iter().rev()) {
            with_checksum(a, |text| assert_eq!(text, a.to_checksum(None)));
        }
    }

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
            assert_eq!(rfc3339(&t), chrono(&t), "{s}");
        }
        let millis = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        for (i, s) in secs.iter().enumerate() {
            // Sub-second parts from 0 to 999,999,999 ns, exact milliseconds among them.
            let nanos = (i as u32).wrapping_mul(2_654_435_761) % 1_000_000_000;
            for n in [nanos, nanos / 1_000_000 * 1_000_000, 0, 999_999_999] {
                let t = DateTime::from_timestamp(*s, n).unwrap();
                assert_eq!(rfc3339(&t), chrono(&t), "{s} {n}");
                assert_eq!(rfc3339_millis(&t), millis(&t), "{s} {n}");
            }
        }
        for leap in [1_500_000_000, 1_000_000_000, 1_999_999_999] {
            let leap = DateTime::from_timestamp(1_483_228_799, leap).unwrap();
            assert_eq!(rfc3339(&leap), chrono(&leap));
            assert_eq!(rfc3339_millis(&leap), millis(&leap));
        }
        for t in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC] {
            assert_eq!(rfc3339(&t), chrono(&t));
            assert_eq!(rfc3339_millis(&t), millis(&t));
        }
    }
}
