//! A direct JSON writer for the hot pages (`GET /api/v1/subscriptions`, `GET /api/v1/events`)
//! and webhook bodies: the same bytes the views' derived `Serialize` produces (tests below
//! compare them on many random rows of every kind), but with each key and its punctuation
//! written as one constant, hashes as hex straight into the buffer and numbers through
//! `itoa`. Through serde every key is a string the serializer escape-checks and every hash a
//! hex `String` first; that was ~30 % of the API's
//! instructions per page (callgrind), the largest part of the gap to direct SQL (issue 10).
//!
//! The derived `Serialize` stays the definition of the format (single objects and OpenAPI
//! examples use it); a view implements [`WriteJson`] only where a page or a body is hot.

use alloy::primitives::{Address, B256};
use chrono::{DateTime, Utc};

/// Writes `self` as the JSON its `Serialize` implementation produces, byte for byte.
pub trait WriteJson {
    fn write_json(&self, out: &mut Vec<u8>);
}

/// An optional view: `null` when absent, as serde writes `None`.
impl<T: WriteJson> WriteJson for Option<T> {
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Some(v) => v.write_json(out),
            None => raw(out, "null"),
        }
    }
}

/// A constant piece of JSON (keys with their quotes, colons and commas).
#[inline]
pub(crate) fn raw(out: &mut Vec<u8>, piece: &str) {
    out.extend_from_slice(piece.as_bytes());
}

/// A string, escaped as serde_json escapes it.
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    if needs_escape(s.as_bytes()) {
        // Rare (a merchant's free text with quotes or control characters): serde_json's own
        // escaping, so the two writers cannot disagree.
        serde_json::to_writer(&mut *out, s).expect("writing a string into a Vec cannot fail");
    } else {
        plain(out, s);
    }
}

/// Whether any byte of `s` is one JSON escapes (a control byte, `"` or `\\`): eight bytes at
/// a time (a byte-wise check was ~3 % of the API's instructions per events page, on the
/// stored snapshots' strings).
fn needs_escape(s: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const LOWS: u64 = ONES * 0x7f;
    const HIGHS: u64 = ONES * 0x80;
    // Per byte b of w, the high bit of the result is set iff (b & 0x7f) + add stays below
    // 0x80 and b's own high bit is clear, i.e. iff b < 0x80 - add (no carry crosses a byte:
    // 0x7f + add <= 0xfe).
    fn below(w: u64, add: u64) -> u64 {
        !(((w & LOWS) + add) | w) & HIGHS
    }
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("eight bytes"));
        let control = below(w, ONES * 0x60); // b < 0x20
        let quote = below(w ^ (ONES * u64::from(b'"')), LOWS); // b ^ '"' == 0
        let backslash = below(w ^ (ONES * u64::from(b'\\')), LOWS);
        if control | quote | backslash != 0 {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// A string that needs no escaping by construction (ids, status names, hex, times, decimal
/// amounts): checked only in debug builds, so a page does not scan every byte it writes.
#[inline]
pub(crate) fn plain(out: &mut Vec<u8>, s: &str) {
    debug_assert!(
        s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\'),
        "{s:?} needs escaping"
    );
    quoted(out, s.as_bytes());
}

/// `bytes` between quotes, as they are (the caller knows they need no escaping).
fn quoted(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    out.extend_from_slice(bytes);
    out.push(b'"');
}

/// An optional [`plain`] string (`null` when absent).
pub(crate) fn opt_plain(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => plain(out, s),
        None => raw(out, "null"),
    }
}

/// An optional string (`null` when absent).
pub(crate) fn opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => raw(out, "null"),
    }
}

/// An integer.
#[inline]
pub(crate) fn int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// An optional integer (`null` when absent).
pub(crate) fn opt_int(out: &mut Vec<u8>, v: Option<impl itoa::Integer>) {
    match v {
        Some(v) => int(out, v),
        None => raw(out, "null"),
    }
}

/// `true` / `false`.
#[inline]
pub(crate) fn boolean(out: &mut Vec<u8>, v: bool) {
    raw(out, if v { "true" } else { "false" });
}

/// A 32-byte hash as `"0x…"` (lowercase hex, as `B256` serializes).
pub(crate) fn hash(out: &mut Vec<u8>, h: &B256) {
    let mut buf = [0u8; 68];
    buf[0] = b'"';
    buf[1] = b'0';
    buf[2] = b'x';
    alloy::hex::encode_to_slice(h.as_slice(), &mut buf[3..67]).expect("64 hex digits fit 64 bytes");
    buf[67] = b'"';
    out.extend_from_slice(&buf);
}

/// An optional hash (`null` when absent).
pub(crate) fn opt_hash(out: &mut Vec<u8>, h: Option<&B256>) {
    match h {
        Some(h) => hash(out, h),
        None => raw(out, "null"),
    }
}

/// An EIP-55 address (as [`super::checksummed`] writes it).
pub(crate) fn address(out: &mut Vec<u8>, a: &Address) {
    super::with_checksum(a, |text| plain(out, text));
}

/// An optional EIP-55 address (`null` when absent).
pub(crate) fn opt_address(out: &mut Vec<u8>, a: Option<&Address>) {
    match a {
        Some(a) => address(out, a),
        None => raw(out, "null"),
    }
}

/// A time as RFC 3339 with seconds (as [`super::time`] writes it).
pub(crate) fn time(out: &mut Vec<u8>, t: &DateTime<Utc>) {
    let mut buf = [0u8; 24];
    match chainsub_core::time::rfc3339_ascii(t, &mut buf, false) {
        Some(text) => quoted(out, text),
        None => plain(out, &super::rfc3339(t)),
    }
}

/// An optional time (`null` when absent).
pub(crate) fn opt_time(out: &mut Vec<u8>, t: Option<&DateTime<Utc>>) {
    match t {
        Some(t) => time(out, t),
        None => raw(out, "null"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventView, ListView, SubscriptionView};
    use chainsub_core::{
        EventId, OutboxStatus, PlanId, SubscriptionId, SubscriptionSnapshot, SubscriptionStatus,
    };
    use chainsub_store::ChainRow;
    use chainsub_store::events::{DeliveryRow, EventRow, LogFacts, RetractionRow, RiskRow};
    use chainsub_store::subscriptions::{CustomerReference, SubscriptionRow};
    use proptest::prelude::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).expect("in chrono's range")
    }

    /// Where a row is on chain, any values.
    fn chain_rows() -> impl Strategy<Value = ChainRow> {
        (
            (1..i64::MAX, any::<[u8; 20]>(), 0..i64::MAX / 2),
            (
                any::<[u8; 32]>(),
                any::<[u8; 32]>(),
                any::<i64>(),
                proptest::option::of(0..i64::MAX / 2),
            ),
        )
            .prop_map(|(c, h)| ChainRow {
                chain_id: chainsub_core::ChainId::from_db(c.0).unwrap(),
                contract: Address::from(c.1),
                block_number: c.2,
                block_hash: B256::from(h.0),
                transaction_hash: B256::from(h.1),
                log_index: h.2,
                indexed_block: h.3,
            })
    }

    // Times from year 0 to beyond 9999 (chrono formats those itself), amounts up to u128,
    // every status, free text with quotes, backslashes, control and non-ASCII characters.
    fn rows() -> impl Strategy<Value = SubscriptionRow> {
        let time = -62_167_219_200i64..300_000_000_000;
        let text = proptest::option::of(text());
        (
            (
                any::<[u8; 16]>(),
                any::<i64>(),
                prop::sample::select(SubscriptionStatus::ALL.to_vec()),
                any::<bool>(),
                proptest::option::of("[0-9a-z]{1,59}"),
                text.clone(),
                prop::sample::select(vec![
                    CustomerReference::None,
                    CustomerReference::Matched,
                    CustomerReference::Unmatched,
                ]),
                any::<[u8; 20]>(),
            ),
            (
                proptest::option::of(any::<u128>()),
                any::<i32>(),
                (
                    time.clone(),
                    time.clone(),
                    proptest::option::of(time.clone()),
                ),
                any::<i32>(),
                text,
                (time.clone(), time),
                chain_rows(),
            ),
        )
            .prop_map(|(a, b)| {
                let (id, onchain_id, status, cancel, plan, external, reference, subscriber) = a;
                let (amount, period, (start, end, retry), failed, ended, (created, updated), chain) =
                    b;
                SubscriptionRow {
                    id: SubscriptionId::parse(&format!("sub_{}", hex_id(id))).expect("a valid id"),
                    onchain_id,
                    status,
                    cancel_at_period_end: cancel,
                    plan_id: plan.as_ref().and_then(|p| PlanId::parse(&format!("plan_{p}"))),
                    plan_onchain_id: onchain_id / 3,
                    customer_external_id: external,
                    customer_reference: reference,
                    subscriber: Address::from(subscriber),
                    amount,
                    period,
                    current_period_start: at(start),
                    current_period_end: at(end),
                    failed_attempts: failed,
                    next_retry_at: retry.map(at),
                    ended_reason: ended,
                    trial_end: retry.map(|t| at(t / 2)),
                    pending_plan_change: plan.as_ref().map(|p| {
                        chainsub_store::subscriptions::PendingPlanRow {
                            plan_id: PlanId::parse(&format!("plan_{p}x")),
                            plan_onchain_id: onchain_id / 5,
                            amount,
                        }
                    }),
                    created_at: at(created),
                    updated_at: at(updated),
                    chain,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn a_subscriptions_page_is_written_as_serde_writes_it(
            rows in proptest::collection::vec(rows(), 0..5),
            more in any::<bool>(),
        ) {
            let page = ListView::new(rows.iter().map(SubscriptionView::from).collect(), more);
            let mut written = Vec::new();
            page.write_json(&mut written);
            let serde = serde_json::to_vec(&page).expect("serializes");
            prop_assert_eq!(String::from_utf8(written).expect("utf-8"),
                String::from_utf8(serde).expect("utf-8"));
        }
    }

    fn hex_id(bytes: [u8; 16]) -> String {
        alloy::hex::encode(bytes)
    }

    /// Free text: any printable characters (`any::<String>()` has no control characters),
    /// or short runs of control characters, quotes, backslashes and letters.
    fn text() -> impl Strategy<Value = String> + Clone {
        prop_oneof![any::<String>(), "[\\x00-\\x1f\\x7f\"\\\\a-z\u{2028}é]{0,8}"]
    }

    fn snapshots() -> impl Strategy<Value = SubscriptionSnapshot> {
        let text = text();
        (
            (
                any::<[u8; 16]>(),
                prop::sample::select(SubscriptionStatus::ALL.to_vec()),
                any::<bool>(),
                any::<u32>(),
                (
                    text.clone(),
                    text.clone(),
                    proptest::option::of(text.clone()),
                ),
            ),
            (
                any::<u8>(),
                any::<[u8; 20]>(),
                proptest::option::of(text),
                // Stored amounts are decimal; anything else renders as no amount.
                prop_oneof!["[0-9]{1,39}", "[0-9a-z.]{0,8}"],
                any::<i64>(),
            ),
        )
            .prop_map(|(a, b)| {
                let (id, status, cancel, period, (start, end, next)) = a;
                let (failed, subscriber, external, amount, plan) = b;
                SubscriptionSnapshot {
                    id: SubscriptionId::parse(&format!("sub_{}", hex_id(id))).expect("valid"),
                    status,
                    cancel_at_period_end: cancel,
                    period,
                    current_period_start: start,
                    current_period_end: end,
                    next_payment_at: next.clone(),
                    failed_attempts: failed,
                    subscriber: Address::from(subscriber),
                    customer_external_id: external,
                    trial_end: next,
                    pending_plan_onchain_id: (period % 2 == 0).then_some(plan / 2),
                    pending_amount: (period % 2 == 0).then(|| amount.clone()),
                    amount,
                    plan_onchain_id: plan,
                }
            })
    }

    // Every kind of event row: lifecycle logs with and without their typed log fields (some
    // not numbers), retractions, renewal-at-risk observations, with and without a snapshot,
    // a plan and a webhook in every outbox state.
    fn event_rows() -> impl Strategy<Value = EventRow> {
        let time = -62_167_219_200i64..300_000_000_000;
        let number = || proptest::option::of(prop_oneof!["[0-9]{1,20}", "-?[0-9a-z]{0,4}"]);
        let kind = proptest::option::of(prop_oneof![
            Just("subscription.created".to_string()),
            Just("subscription.charged".to_string()),
            Just("subscription.payment_failed".to_string()),
            Just("subscription.ended".to_string()),
            Just("event.retracted".to_string()),
            text(),
        ]);
        let log = (
            (
                proptest::option::of("[0-9]{1,39}"),
                proptest::option::of(any::<[u8; 20]>()),
                number(),
            ),
            (
                number(),
                proptest::option::of(prop_oneof!["[0-9]{1,3}", "[a-z]{1,2}"]),
                proptest::option::of(prop_oneof![
                    (0i64..300_000_000_000).prop_map(|t| t.to_string()),
                    "[0-9]{19,22}",
                ]),
            ),
        )
            .prop_map(
                |((amount, subscriber, period), (attempt, reason, next))| LogFacts {
                    amount,
                    subscriber: subscriber.map(Address::from),
                    period,
                    attempt,
                    reason,
                    next_retry_at: next,
                },
            );
        let delivery = proptest::option::of(
            (
                prop::sample::select(OutboxStatus::ALL.to_vec()),
                any::<i32>(),
                time.clone(),
                proptest::option::of(time.clone()),
                proptest::option::of(text()),
            )
                .prop_map(|(status, attempts, next, delivered, error)| DeliveryRow {
                    status,
                    attempts,
                    next_attempt_at: at(next),
                    delivered_at: delivered.map(at),
                    last_error: error,
                }),
        );
        let retraction = proptest::option::of(
            (
                any::<[u8; 16]>(),
                proptest::option::of(text()),
                any::<i64>(),
                any::<[u8; 32]>(),
            )
                .prop_map(|(id, kind, block, hash)| RetractionRow {
                    event_id: EventId::parse(&format!("evt_{}", hex_id(id))).expect("valid"),
                    kind,
                    ancestor_block: block,
                    ancestor_hash: B256::from(hash),
                }),
        );
        let risk = proptest::option::of(
            (
                text(),
                proptest::option::of(any::<u128>()),
                proptest::option::of(any::<u128>()),
                proptest::option::of(any::<u128>()),
                time.clone(),
                any::<i32>(),
            )
                .prop_map(|(reason, amount, required, available, due, period)| {
                    RiskRow {
                        reason,
                        amount,
                        required,
                        available,
                        due_at: at(due),
                        period,
                    }
                }),
        );
        (
            (
                any::<[u8; 16]>(),
                kind,
                time,
                proptest::option::of(any::<i64>()),
                log,
                proptest::option::of(snapshots()),
                proptest::option::of("[0-9a-z]{1,59}"),
            ),
            (
                chain_rows(),
                delivery,
                proptest::option::of(any::<i64>()),
                retraction,
                risk,
            ),
        )
            .prop_map(|(a, b)| {
                let (id, kind, created, onchain, log, snapshot, plan) = a;
                let (chain, delivery, sequence, retraction, risk) = b;
                EventRow {
                    id: EventId::parse(&format!("evt_{}", hex_id(id))).expect("valid"),
                    kind,
                    created_at: at(created),
                    onchain_subscription_id: onchain,
                    log,
                    snapshot,
                    plan_id: plan
                        .as_ref()
                        .and_then(|p| PlanId::parse(&format!("plan_{p}"))),
                    pending_plan_id: plan.and_then(|p| PlanId::parse(&format!("plan_{p}y"))),
                    chain,
                    delivery,
                    sequence,
                    retraction,
                    risk,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn an_events_page_is_written_as_serde_writes_it(
            rows in proptest::collection::vec(event_rows(), 0..4),
            more in any::<bool>(),
        ) {
            // Listed (with `delivery`) and as webhook bodies (without).
            let page = ListView::new(rows.iter().map(EventView::listed).collect(), more);
            let mut written = Vec::new();
            page.write_json(&mut written);
            let serde = serde_json::to_vec(&page).expect("serializes");
            prop_assert_eq!(String::from_utf8(written).expect("utf-8"),
                String::from_utf8(serde).expect("utf-8"));
            for row in &rows {
                let body = EventView::webhook(row);
                let mut written = Vec::new();
                body.write_json(&mut written);
                prop_assert_eq!(written, serde_json::to_vec(&body).expect("serializes"));
            }
        }
    }

    #[test]
    fn the_escape_check_finds_every_byte_json_escapes_at_every_position() {
        for len in 0..=17 {
            for at in 0..len {
                for b in 0u8..=0xff {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    let expected = b < 0x20 || b == b'"' || b == b'\\';
                    assert_eq!(needs_escape(&s), expected, "byte {b:#x} at {at} of {len}");
                }
            }
        }
        // Multi-byte characters never need escaping, next to any others.
        assert!(!needs_escape("é漢🦀\u{2028}\u{7f}ÿ€".as_bytes()));
        assert!(needs_escape("é漢🦀\u{2028}\"€".as_bytes()));
    }

    #[test]
    fn strings_are_escaped_as_serde_escapes_them() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("é漢🦀\u{2028}\u{7f}");
        for s in [
            all.as_str(),
            "",
            "plain",
            "a\"b",
            "a\\b",
            "\u{1}",
            "tab\there",
        ] {
            let mut out = Vec::new();
            string(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).expect("serializes"), "{s:?}");
        }
    }
}
