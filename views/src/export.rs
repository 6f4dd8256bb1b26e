//! The reconciliation export (`GET /api/v1/ledger`): one record per ledger entry, then one
//! `total` record per kind, as NDJSON lines or CSV rows with the same field names in the same
//! order ([`EXPORT_COLUMNS`]). Amounts are base units with their `decimals`; every entry
//! carries what finds its log again on chain (chain id, contract, block number and hash,
//! transaction hash, log index). `indexer verify-export` reads either format back.

use alloy::primitives::{Address, B256};
use chainsub_core::{CURRENCY, LedgerKind, USDC_DECIMALS, checksum, hex0x};
use chainsub_store::export::{ExportRow, Range};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::rfc3339;

/// Every field of an export record, in order: the CSV header, and the NDJSON keys (an entry
/// line omits the last three, which only a `total` record has).
pub const EXPORT_COLUMNS: &[&str] = &[
    "record",
    "eventId",
    "kind",
    "chainId",
    "contract",
    "blockNumber",
    "blockHash",
    "blockTime",
    "transactionHash",
    "logIndex",
    "merchant",
    "subscriber",
    "subscriptionId",
    "onchainSubscriptionId",
    "planId",
    "onchainPlanId",
    "customerExternalId",
    "period",
    "attempt",
    "failureReason",
    "currency",
    "decimals",
    "amount",
    "fromBlock",
    "toBlock",
    "fromTime",
    "toTime",
    "entries",
];

/// An entry record.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportEntryView<'a> {
    pub record: &'static str,
    pub event_id: &'a str,
    pub kind: &'static str,
    pub chain_id: chainsub_core::ChainId,
    #[serde(serialize_with = "super::checksummed")]
    pub contract: Address,
    pub block_number: i64,
    pub block_hash: B256,
    #[serde(serialize_with = "super::time")]
    pub block_time: DateTime<Utc>,
    pub transaction_hash: B256,
    pub log_index: i64,
    #[serde(serialize_with = "super::checksummed")]
    pub merchant: Address,
    #[serde(serialize_with = "super::checksummed")]
    pub subscriber: Address,
    pub subscription_id: Option<&'a str>,
    pub onchain_subscription_id: i64,
    pub plan_id: Option<&'a str>,
    pub onchain_plan_id: Option<i64>,
    pub customer_external_id: Option<&'a str>,
    pub period: i32,
    pub attempt: i32,
    pub failure_reason: Option<&'a str>,
    pub currency: &'static str,
    pub decimals: u8,
    /// Base units, as decimal text.
    pub amount: String,
}

impl<'a> ExportEntryView<'a> {
    pub fn new(r: &'a ExportRow, merchant: Address) -> Self {
        ExportEntryView {
            record: "entry",
            event_id: r.event_id.as_str(),
            kind: r.kind.as_str(),
            chain_id: r.chain.chain_id,
            contract: r.chain.contract,
            block_number: r.chain.block_number,
            block_hash: r.chain.block_hash,
            block_time: r.block_time,
            transaction_hash: r.chain.transaction_hash,
            log_index: r.chain.log_index,
            merchant,
            subscriber: r.subscriber,
            subscription_id: r.subscription_id.as_deref(),
            onchain_subscription_id: r.onchain_subscription_id,
            plan_id: r.plan_id.as_deref(),
            onchain_plan_id: r.onchain_plan_id,
            customer_external_id: r.customer_external_id.as_deref(),
            period: r.period,
            attempt: r.attempt,
            failure_reason: r.failure_reason.as_deref(),
            currency: CURRENCY,
            decimals: USDC_DECIMALS,
            amount: signed(r.kind, r.amount),
        }
    }

    /// This entry as a CSV row (with its line end).
    pub fn csv(&self, out: &mut String) {
        let fields: [Option<String>; 28] = [
            Some(self.record.into()),
            Some(self.event_id.into()),
            Some(self.kind.into()),
            Some(self.chain_id.to_string()),
            Some(checksum(self.contract.as_slice())),
            Some(self.block_number.to_string()),
            Some(hex0x(self.block_hash.as_slice())),
            Some(rfc3339(&self.block_time)),
            Some(hex0x(self.transaction_hash.as_slice())),
            Some(self.log_index.to_string()),
            Some(checksum(self.merchant.as_slice())),
            Some(checksum(self.subscriber.as_slice())),
            self.subscription_id.map(Into::into),
            Some(self.onchain_subscription_id.to_string()),
            self.plan_id.map(Into::into),
            self.onchain_plan_id.map(|p| p.to_string()),
            self.customer_external_id.map(Into::into),
            Some(self.period.to_string()),
            Some(self.attempt.to_string()),
            self.failure_reason.map(Into::into),
            Some(self.currency.into()),
            Some(self.decimals.to_string()),
            Some(self.amount.clone()),
            None,
            None,
            None,
            None,
            None,
        ];
        csv_row(out, &fields);
    }
}

/// An amount of `kind` as the export writes it: base units, negative for a refund (money
/// back to the subscriber).
pub fn signed(kind: LedgerKind, amount: u128) -> String {
    match kind {
        LedgerKind::Refund if amount != 0 => format!("-{amount}"),
        _ => amount.to_string(),
    }
}

/// Running totals of an export, per kind: (entries, sum of their amounts' magnitudes), in
/// [`LedgerKind::ALL`] order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportTotals([(u64, u128); LedgerKind::ALL.len()]);

impl ExportTotals {
    fn slot(kind: LedgerKind) -> usize {
        LedgerKind::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is in ALL")
    }

    pub fn add(&mut self, r: &ExportRow) {
        let (entries, amount) = &mut self.0[Self::slot(r.kind)];
        *entries += 1;
        *amount += r.amount;
    }

    /// Entries and the sum of their amounts (magnitudes) of one kind.
    pub fn of(&self, kind: LedgerKind) -> (u64, u128) {
        self.0[Self::slot(kind)]
    }

    /// The `total` records: one per kind, in [`LedgerKind::ALL`] order.
    pub fn views(
        &self,
        chain_id: chainsub_core::ChainId,
        contract: Address,
        merchant: Address,
        range: &Range,
    ) -> Vec<ExportTotalView> {
        LedgerKind::ALL
            .iter()
            .map(|kind| {
                let (entries, amount) = self.of(*kind);
                ExportTotalView {
                    record: "total",
                    kind: kind.as_str(),
                    chain_id,
                    contract,
                    merchant,
                    currency: CURRENCY,
                    decimals: USDC_DECIMALS,
                    amount: signed(*kind, amount),
                    from_block: range.from_block,
                    to_block: range.to_block,
                    from_time: range.from_time,
                    to_time: range.to_time,
                    entries,
                }
            })
            .collect()
    }
}

/// A `total` record: the sum and count of one kind over the whole export, and the range it
/// covers (a file without its `total` records was cut short).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportTotalView {
    pub record: &'static str,
    pub kind: &'static str,
    pub chain_id: chainsub_core::ChainId,
    #[serde(serialize_with = "super::checksummed")]
    pub contract: Address,
    #[serde(serialize_with = "super::checksummed")]
    pub merchant: Address,
    pub currency: &'static str,
    pub decimals: u8,
    pub amount: String,
    pub from_block: i64,
    pub to_block: i64,
    #[serde(serialize_with = "super::opt_time")]
    pub from_time: Option<DateTime<Utc>>,
    #[serde(serialize_with = "super::opt_time")]
    pub to_time: Option<DateTime<Utc>>,
    pub entries: u64,
}

impl ExportTotalView {
    /// This total as a CSV row (with its line end).
    pub fn csv(&self, out: &mut String) {
        let mut fields: [Option<String>; 28] = Default::default();
        fields[0] = Some(self.record.into());
        fields[2] = Some(self.kind.into());
        fields[3] = Some(self.chain_id.to_string());
        fields[4] = Some(checksum(self.contract.as_slice()));
        fields[10] = Some(checksum(self.merchant.as_slice()));
        fields[20] = Some(self.currency.into());
        fields[21] = Some(self.decimals.to_string());
        fields[22] = Some(self.amount.clone());
        fields[23] = Some(self.from_block.to_string());
        fields[24] = Some(self.to_block.to_string());
        fields[25] = self.from_time.as_ref().map(rfc3339);
        fields[26] = self.to_time.as_ref().map(rfc3339);
        fields[27] = Some(self.entries.to_string());
        csv_row(out, &fields);
    }
}

/// The CSV header line.
pub fn csv_header(out: &mut String) {
    out.push_str(&EXPORT_COLUMNS.join(","));
    out.push_str("\r\n");
}

/// RFC 4180: a field with a comma, quote or line break is quoted, quotes doubled. A text a
/// merchant chose (`customerExternalId`) that starts like a spreadsheet formula gets a
/// leading `'` so that opening the file cannot run it (OWASP's CSV-injection advice); no
/// field the chain or we produce ever starts that way.
fn csv_row(out: &mut String, fields: &[Option<String>]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let Some(f) = f else { continue };
        let guarded = matches!(f.chars().next(), Some('=' | '+' | '-' | '@' | '\t' | '\r'));
        let quote = guarded || f.contains([',', '"', '\n', '\r']);
        if quote {
            out.push('"');
        }
        if guarded {
            out.push('\'');
        }
        for c in f.chars() {
            if c == '"' {
                out.push('"');
            }
            out.push(c);
        }
        if quote {
            out.push('"');
        }
    }
    out.push_str("\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsub_core::EventId;
    use chainsub_store::ChainRow;

    fn row(kind: LedgerKind, amount: u128, customer: Option<&str>) -> ExportRow {
        ExportRow {
            event_id: EventId::parse("evt_0123456789abcdef0123456789abcdef").unwrap(),
            kind,
            amount,
            period: 2,
            attempt: 1,
            failure_reason: None,
            block_time: DateTime::from_timestamp(1_767_225_600, 0).unwrap(),
            chain: ChainRow {
                chain_id: chainsub_core::ChainId::new(31337).unwrap(),
                contract: Address::repeat_byte(0xcc),
                block_number: 7,
                block_hash: B256::repeat_byte(1),
                transaction_hash: B256::repeat_byte(2),
                log_index: 3,
                indexed_block: None,
            },
            subscriber: Address::repeat_byte(0xbb),
            onchain_subscription_id: 5,
            subscription_id: Some("sub_x".into()),
            onchain_plan_id: Some(1),
            plan_id: None,
            customer_external_id: customer.map(Into::into),
        }
    }

    #[test]
    fn csv_rows_have_every_column_in_header_order_and_json_uses_the_same_names() {
        let r = row(LedgerKind::Charge, 9_990_000, Some("cus,\"1\""));
        let v = ExportEntryView::new(&r, Address::repeat_byte(0xaa));
        let mut out = String::new();
        csv_header(&mut out);
        v.csv(&mut out);
        let lines: Vec<&str> = out.split("\r\n").collect();
        assert_eq!(lines[0].split(',').count(), EXPORT_COLUMNS.len());
        assert!(lines[1].contains(",\"cus,\"\"1\"\"\","), "{}", lines[1]);
        assert!(lines[1].ends_with(",USDC,6,9990000,,,,,"), "{}", lines[1]);
        let json = serde_json::to_value(&v).unwrap();
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        for k in &keys {
            assert!(EXPORT_COLUMNS.contains(&k.as_str()), "{k}");
        }
        assert_eq!(keys.len(), EXPORT_COLUMNS.len() - 5);
        let mut totals = ExportTotals::default();
        totals.add(&r);
        totals.add(&row(LedgerKind::FailedCharge, 5, None));
        let range = Range {
            from_block: 0,
            to_block: 9,
            from_time: None,
            to_time: None,
        };
        let t = totals.views(
            chainsub_core::ChainId::new(31337).unwrap(),
            Address::ZERO,
            Address::ZERO,
            &range,
        );
        let json = serde_json::to_value(&t[0]).unwrap();
        for k in json.as_object().unwrap().keys() {
            assert!(EXPORT_COLUMNS.contains(&k.as_str()), "{k}");
        }
        assert_eq!((t[0].entries, t[0].amount.as_str()), (1, "9990000"));
        assert_eq!((t[1].entries, t[1].amount.as_str()), (1, "5"));
        let mut out = String::new();
        t[1].csv(&mut out);
        assert_eq!(out.split(',').count(), EXPORT_COLUMNS.len());
    }

    #[test]
    fn a_formula_in_a_merchant_text_is_defused_in_csv() {
        let r = row(LedgerKind::Charge, 1, Some("=HYPERLINK(\"x\")"));
        let mut out = String::new();
        ExportEntryView::new(&r, Address::ZERO).csv(&mut out);
        assert!(out.contains(",\"'=HYPERLINK(\"\"x\"\")\","), "{out}");
    }
}
