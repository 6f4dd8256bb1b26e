//! A subscription as of one of its events: the `chain_events.snapshot` column. The indexer
//! writes it (one per subscription event, in the same transaction as the event), the API's
//! event view and every webhook body read it. One type on both sides, so what is stored is
//! what is served.

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};

use crate::{SubscriptionId, SubscriptionStatus};

/// The subscription right after an event. Times are RFC 3339 UTC with seconds (as served);
/// `amount` is in base units (decimal text, as the contract emits it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionSnapshot {
    pub id: SubscriptionId,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    pub period: u32,
    pub current_period_start: String,
    pub current_period_end: String,
    pub next_payment_at: Option<String>,
    pub failed_attempts: u8,
    pub subscriber: Address,
    pub customer_external_id: Option<String>,
    pub amount: String,
    pub plan_onchain_id: i64,
}

impl SubscriptionSnapshot {
    /// A past-due snapshot for tests (one shape for every crate's tests), with the given
    /// customer reference and next payment time.
    #[doc(hidden)]
    pub fn example(external: Option<&str>, next: Option<&str>) -> SubscriptionSnapshot {
        SubscriptionSnapshot {
            id: SubscriptionId::of_creation(1, alloy::primitives::B256::repeat_byte(7), 5),
            status: SubscriptionStatus::PastDue,
            cancel_at_period_end: true,
            period: 7,
            current_period_start: "2026-01-01T00:00:00Z".into(),
            current_period_end: "2026-02-01T00:00:00Z".into(),
            next_payment_at: next.map(Into::into),
            failed_attempts: 2,
            subscriber: Address::repeat_byte(0xbb),
            customer_external_id: external.map(Into::into),
            amount: "9990000".into(),
            plan_onchain_id: 3,
        }
    }

    /// Reads a stored snapshot's JSON text the way its `Deserialize` does, for the text our
    /// writer and Postgres's `jsonb` output produce: one flat object of the twelve fields,
    /// strings without escapes, plain integers. `None` for anything else (an escape, an
    /// unknown or repeated key, a missing field, a value of another shape), which the caller
    /// then hands to a full JSON parser: whenever this returns a snapshot, it is the one the
    /// derived `Deserialize` returns for the same text (see the tests). An events page reads
    /// up to 100 snapshots, and a general parser was ~20 % of the API's instructions for it.
    pub fn read_plain_json(text: &[u8]) -> Option<SubscriptionSnapshot> {
        // Escapes and control characters (raw ones are invalid JSON; whitespace other than
        // spaces is not in the plain form) go to the full parser: past this check a string
        // ends at its next quote.
        if text
            .iter()
            .fold(false, |bad, &b| bad | (b < 0x20) | (b == b'\\'))
        {
            return None;
        }
        let text = std::str::from_utf8(text).ok()?;
        let mut r = Plain { s: text, at: 0 };
        let mut f = Fields::default();
        r.expect(b'{')?;
        loop {
            let key = r.string()?;
            r.expect(b':')?;
            let slot_taken = match key {
                "id" => f.id.replace(SubscriptionId::parse(r.string()?)?).is_some(),
                "status" => f
                    .status
                    .replace(SubscriptionStatus::parse(r.string()?).ok()?)
                    .is_some(),
                "cancelAtPeriodEnd" => f.cancel_at_period_end.replace(r.boolean()?).is_some(),
                "period" => f.period.replace(r.uint()?.try_into().ok()?).is_some(),
                "currentPeriodStart" => f.current_period_start.replace(r.string()?).is_some(),
                "currentPeriodEnd" => f.current_period_end.replace(r.string()?).is_some(),
                "nextPaymentAt" => f.next_payment_at.replace(r.opt_string()?).is_some(),
                "failedAttempts" => f
                    .failed_attempts
                    .replace(r.uint()?.try_into().ok()?)
                    .is_some(),
                "subscriber" => f.subscriber.replace(address(r.string()?)?).is_some(),
                "customerExternalId" => f.customer_external_id.replace(r.opt_string()?).is_some(),
                "amount" => f.amount.replace(r.string()?).is_some(),
                "planOnchainId" => f
                    .plan_onchain_id
                    .replace(r.uint()?.try_into().ok()?)
                    .is_some(),
                _ => return None,
            };
            if slot_taken {
                return None;
            }
            match r.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
        if r.peek().is_some() {
            return None;
        }
        Some(SubscriptionSnapshot {
            id: f.id?,
            status: f.status?,
            cancel_at_period_end: f.cancel_at_period_end?,
            period: f.period?,
            current_period_start: f.current_period_start?.to_owned(),
            current_period_end: f.current_period_end?.to_owned(),
            next_payment_at: f.next_payment_at?.map(str::to_owned),
            failed_attempts: f.failed_attempts?,
            subscriber: f.subscriber?,
            customer_external_id: f.customer_external_id?.map(str::to_owned),
            amount: f.amount?.to_owned(),
            plan_onchain_id: f.plan_onchain_id?,
        })
    }
}

/// The fields [`SubscriptionSnapshot::read_plain_json`] has seen, borrowed from the text.
#[derive(Default)]
struct Fields<'a> {
    id: Option<SubscriptionId>,
    status: Option<SubscriptionStatus>,
    cancel_at_period_end: Option<bool>,
    period: Option<u32>,
    current_period_start: Option<&'a str>,
    current_period_end: Option<&'a str>,
    next_payment_at: Option<Option<&'a str>>,
    failed_attempts: Option<u8>,
    subscriber: Option<Address>,
    customer_external_id: Option<Option<&'a str>>,
    amount: Option<&'a str>,
    plan_onchain_id: Option<i64>,
}

/// `0x` and 40 hex digits (what the writer stores; anything else goes to the full parser).
fn address(s: &str) -> Option<Address> {
    let hex = s.strip_prefix("0x").filter(|h| h.len() == 40)?;
    alloy::hex::decode_to_array::<_, 20>(hex)
        .ok()
        .map(Address::from)
}

/// A cursor over JSON text that knows only the plain forms (see `read_plain_json`).
struct Plain<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Plain<'a> {
    /// The next byte after spaces, not consumed.
    fn peek(&mut self) -> Option<u8> {
        while let Some(&b) = self.s.as_bytes().get(self.at) {
            if b != b' ' {
                return Some(b);
            }
            self.at += 1;
        }
        None
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    /// A string (the text has no escapes: it ends at the next quote).
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        let len = memchr::memchr(b'"', &self.s.as_bytes()[start..])?;
        self.at = start + len + 1;
        // Both ends are ASCII quotes, so these are character boundaries.
        self.s.get(start..start + len)
    }

    fn opt_string(&mut self) -> Option<Option<&'a str>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        self.string().map(Some)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.peek()?;
        let end = self.at + word.len();
        (self.s.as_bytes().get(self.at..end)? == word).then_some(())?;
        self.at = end;
        self.delimited()
    }

    fn boolean(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.literal(b"true").map(|()| true),
            b'f' => self.literal(b"false").map(|()| false),
            _ => None,
        }
    }

    /// What follows a number or a literal must end it (`,`, `}` or whitespace).
    fn delimited(&self) -> Option<()> {
        match self.s.as_bytes().get(self.at) {
            Some(b',' | b'}' | b' ') => Some(()),
            _ => None,
        }
    }

    /// A JSON integer without sign (a sign goes to the full parser), fraction or exponent,
    /// and without a leading zero.
    fn uint(&mut self) -> Option<u64> {
        self.peek()?;
        let rest = &self.s.as_bytes()[self.at..];
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let text = &rest[..digits];
        if digits == 0 || (digits > 1 && text[0] == b'0') {
            return None;
        }
        self.at += digits;
        self.delimited()?;
        text.iter().try_fold(0u64, |n, &d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::B256;

    #[test]
    fn a_snapshot_round_trips_through_its_stored_json() {
        let s = SubscriptionSnapshot {
            id: SubscriptionId::of_creation(1, B256::ZERO, 5),
            status: SubscriptionStatus::PastDue,
            cancel_at_period_end: false,
            period: 2,
            current_period_start: "2026-01-01T00:00:00Z".into(),
            current_period_end: "2026-02-01T00:00:00Z".into(),
            next_payment_at: None,
            failed_attempts: 1,
            subscriber: Address::repeat_byte(0xbb),
            customer_external_id: Some("cus_\"1\"".into()),
            amount: "9990000".into(),
            plan_onchain_id: 2,
        };
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"status\":\"past_due\""), "{text}");
        assert!(text.contains("\"cancelAtPeriodEnd\":false"), "{text}");
        assert_eq!(
            serde_json::from_str::<SubscriptionSnapshot>(&text).unwrap(),
            s
        );
        // An id that is not a subscription id is refused, not carried along.
        let bad = text.replace(s.id.as_str(), "sub_5");
        assert!(serde_json::from_str::<SubscriptionSnapshot>(&bad).is_err());
    }

    /// What the derived `Deserialize` makes of `text` (`None` where it refuses it).
    fn serde(text: &str) -> Option<SubscriptionSnapshot> {
        serde_json::from_str(text).ok()
    }

    #[test]
    fn the_plain_reader_reads_what_the_writer_and_jsonb_write() {
        for s in [
            SubscriptionSnapshot::example(None, None),
            SubscriptionSnapshot::example(Some("cust-1 é ✓"), Some("2026-02-01T00:00:00Z")),
        ] {
            let written = serde_json::to_string(&s).unwrap();
            // jsonb's output: keys by length, ", " and ": " between them.
            let value: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&written).unwrap();
            let mut keys: Vec<_> = value.keys().collect();
            keys.sort_by_key(|k| (k.len(), k.to_string()));
            let jsonb = format!(
                "{{{}}}",
                keys.iter()
                    .map(|k| format!("\"{k}\": {}", value[k.as_str()]))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for text in [&written, &jsonb] {
                assert_eq!(
                    SubscriptionSnapshot::read_plain_json(text.as_bytes()),
                    Some(s.clone()),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn the_plain_reader_returns_what_serde_returns_or_leaves_the_text_to_it() {
        let s = SubscriptionSnapshot::example(Some("cust-1"), None);
        let base = serde_json::to_string(&s).unwrap();
        let id = s.id.as_str().to_owned();
        // Each text is one way a stored snapshot could differ from the plain form.
        let escaped = base.replace("\"cust-1\"", "\"cu\\\"st\"");
        let repeated = base.replace(
            "\"nextPaymentAt\":null",
            "\"nextPaymentAt\":\"x\",\"nextPaymentAt\":null",
        );
        let unknown = base.replace("{", "{\"extra\":[1,{\"a\":2}],");
        let spaced = [
            base.replace("{", " { "),
            base.replace(",", " , "),
            format!("{base} "),
        ];
        let not_utf8 = {
            let mut b = base.clone().into_bytes();
            let at = base.find("cust-1").unwrap();
            b[at] = 0xff;
            b
        };
        // What is replaced in the plain text, and by what.
        let edits: [(&str, &str); 31] = [
            ("\"cust-1\"", "\"cu\\u0041st\""),
            ("\"period\":7", "\"period\":07"),
            ("\"period\":7", "\"period\":7.0"),
            ("\"period\":7", "\"period\":-7"),
            ("\"period\":7", "\"period\":4294967296"),
            ("\"period\":7", "\"period\":\"7\""),
            ("\"period\":7", "\"period\":99999999999999999999999"),
            ("\"failedAttempts\":2", "\"failedAttempts\":256"),
            ("\"failedAttempts\":2", "\"failedAttempts\":02"),
            ("\"planOnchainId\":3", "\"planOnchainId\":-3"),
            ("\"planOnchainId\":3", "\"planOnchainId\":-0"),
            ("\"planOnchainId\":3", "\"planOnchainId\":03"),
            (
                "\"planOnchainId\":3",
                "\"planOnchainId\":-9223372036854775808",
            ),
            (
                "\"planOnchainId\":3",
                "\"planOnchainId\":9223372036854775808",
            ),
            ("\"planOnchainId\":3", "\"planOnchainId\":3e0"),
            ("\"cancelAtPeriodEnd\":true", "\"cancelAtPeriodEnd\":truex"),
            ("\"cancelAtPeriodEnd\":true", "\"cancelAtPeriodEnd\":null"),
            ("\"status\":\"past_due\"", "\"status\":\"PastDue\""),
            ("0xbbbb", "0xBBbb"),
            ("0xbbbb", "bbbbbb"),
            ("0xbbbb", "0xbbb"),
            ("0xbbbb", "0x0xbb"),
            (
                "\"customerExternalId\":\"cust-1\"",
                "\"customerExternalId\":null",
            ),
            ("\"nextPaymentAt\":null", "\"nextPaymentAt\":nul"),
            ("\"amount\":\"9990000\"", "\"amount\":9990000"),
            ("\"amount\":\"9990000\",", ""),
            ("}", ",}"),
            ("cust-1", "cust\u{1}"),
            ("{", "\n{"),
            (",", ",\t"),
            (",", ",\r"),
        ];
        let mut variants: Vec<String> = edits.iter().map(|(a, b)| base.replace(a, b)).collect();
        variants.extend([
            base.replace(&id, "sub_5"),
            format!("{base}x"),
            format!("{base}}}"),
            "{}".into(),
            "[]".into(),
            String::new(),
        ]);
        for text in variants
            .iter()
            .chain(&spaced)
            .chain([&escaped, &repeated, &unknown])
        {
            let plain = SubscriptionSnapshot::read_plain_json(text.as_bytes());
            if plain.is_some() {
                assert_eq!(plain, serde(text), "{text}");
            }
        }
        // The forms the writer never produces go to the full parser (an escape, a repeated
        // or unknown key, a byte that is not UTF-8), and spaced plain ones do not.
        for text in [&escaped, &repeated, &unknown] {
            assert!(
                SubscriptionSnapshot::read_plain_json(text.as_bytes()).is_none(),
                "{text}"
            );
        }
        assert!(SubscriptionSnapshot::read_plain_json(&not_utf8).is_none());
        for text in &spaced {
            assert_eq!(
                SubscriptionSnapshot::read_plain_json(text.as_bytes()),
                Some(s.clone())
            );
        }
    }
}
