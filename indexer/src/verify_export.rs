//! `indexer verify-export FILE`: re-checks a reconciliation export (`GET /api/v1/ledger`,
//! NDJSON or CSV) against the chain with nothing but an RPC URL — no access to our database,
//! so a merchant's auditor can run it.
//!
//! For every entry: the transaction's receipt holds a log at that log index, emitted by that
//! contract, in that block (number and hash, still canonical, with that time), and the log
//! decodes to that kind with that subscription, merchant, subscriber, amount, period, attempt
//! and failure reason. For the file: one merchant and contract, no entry twice, the `total`
//! records equal the sums and counts of the entries, and every charge or failed charge the
//! contract emitted for that merchant inside the file's range is in it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use alloy::eips::BlockNumberOrTag;
use alloy::primitives::{Address, B256, Log};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, TransactionReceipt};
use alloy::sol_types::SolEvent;
use chainsub_abi::{ContractEvent, SubscriptionManager as SM};
use serde::Serialize;

use crate::map::failure_reason_name;

/// Blocks per `eth_getLogs` call of the completeness check.
const LOG_RANGE: u64 = 2_000;

/// One record of an export file: field name -> text (`""` for null), and its line.
#[derive(Debug, Clone, Default)]
pub struct Record {
    pub line: usize,
    fields: BTreeMap<String, String>,
}

impl Record {
    fn get(&self, name: &str) -> &str {
        self.fields.get(name).map(String::as_str).unwrap_or("")
    }
}

/// One way the file and the chain disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The file's line (1-based; CSV counts its header), or 0 for the file as a whole.
    pub line: usize,
    pub what: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "file: {}", self.what)
        } else {
            write!(f, "line {}: {}", self.line, self.what)
        }
    }
}

/// Reads an export: NDJSON when the first character is `{`, CSV otherwise.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    if text.trim_start().starts_with('{') {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                let v: serde_json::Value = serde_json::from_str(l)
                    .map_err(|e| format!("line {}: not JSON: {e}", i + 1))?;
                let obj = v
                    .as_object()
                    .ok_or_else(|| format!("line {}: not an object", i + 1))?;
                let fields = obj
                    .iter()
                    .map(|(k, v)| {
                        let text = match v {
                            serde_json::Value::Null => String::new(),
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (k.clone(), text)
                    })
                    .collect();
                Ok(Record {
                    line: i + 1,
                    fields,
                })
            })
            .collect()
    } else {
        let rows = csv_rows(text)?;
        let Some((header, rest)) = rows.split_first() else {
            return Ok(Vec::new());
        };
        rest.iter()
            .map(|(line, cells)| {
                if cells.len() != header.1.len() {
                    return Err(format!(
                        "line {line}: {} fields, the header has {}",
                        cells.len(),
                        header.1.len()
                    ));
                }
                Ok(Record {
                    line: *line,
                    fields: header
                        .1
                        .iter()
                        .cloned()
                        .zip(cells.iter().cloned())
                        .collect(),
                })
            })
            .collect()
    }
}

/// RFC 4180 rows with the line each starts on.
fn csv_rows(text: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let mut rows = Vec::new();
    let mut cells = Vec::new();
    let mut cell = String::new();
    let (mut line, mut start) = (1, 1);
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => {
                if c == '\n' {
                    line += 1;
                }
                cell.push(c);
            }
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => cells.push(std::mem::take(&mut cell)),
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, '\n') => {
                cells.push(std::mem::take(&mut cell));
                rows.push((start, std::mem::take(&mut cells)));
                line += 1;
                start = line;
            }
            (false, c) => cell.push(c),
        }
    }
    if quoted {
        return Err(format!("line {start}: unterminated quote"));
    }
    if !cell.is_empty() || !cells.is_empty() {
        cells.push(cell);
        rows.push((start, cells));
    }
    Ok(rows)
}

/// The chain as the checks read it, with answers cached per transaction and block.
struct Chain {
    provider: DynProvider,
    receipts: HashMap<B256, Option<TransactionReceipt>>,
    /// Canonical hash and time of a block number.
    blocks: HashMap<u64, Option<(B256, u64)>>,
}

impl Chain {
    async fn receipt(&mut self, tx: B256) -> anyhow::Result<Option<&TransactionReceipt>> {
        if !self.receipts.contains_key(&tx) {
            let r = self.provider.get_transaction_receipt(tx).await?;
            self.receipts.insert(tx, r);
        }
        Ok(self.receipts[&tx].as_ref())
    }

    async fn block(&mut self, number: u64) -> anyhow::Result<Option<(B256, u64)>> {
        if let Some(b) = self.blocks.get(&number) {
            return Ok(*b);
        }
        let b = self
            .provider
            .get_block_by_number(BlockNumberOrTag::Number(number))
            .await?
            .map(|b| (b.header.hash, b.header.timestamp));
        self.blocks.insert(number, b);
        Ok(b)
    }
}

/// Running sums per kind: (entries, amount).
type Sums = BTreeMap<String, (u64, u128)>;

/// Checks `records` against the chain behind `provider`.
pub async fn verify_export(
    provider: DynProvider,
    records: &[Record],
) -> anyhow::Result<(Vec<Finding>, usize)> {
    let mut chain = Chain {
        provider,
        receipts: HashMap::new(),
        blocks: HashMap::new(),
    };
    let chain_id = chain.provider.get_chain_id().await?;
    let mut out = Vec::new();
    let mut note = |line: usize, what: String| out.push(Finding { line, what });
    let entries: Vec<&Record> = records
        .iter()
        .filter(|r| r.get("record") == "entry")
        .collect();
    let totals: Vec<&Record> = records
        .iter()
        .filter(|r| r.get("record") == "total")
        .collect();
    for r in records {
        if !matches!(r.get("record"), "entry" | "total") {
            note(r.line, format!("unknown record type {:?}", r.get("record")));
        }
    }
    // The file's identity: one chain, one contract, one merchant.
    let first = totals.first().or(entries.first()).copied();
    let (contract, merchant) = match first {
        Some(r) => (
            r.get("contract").parse::<Address>().ok(),
            r.get("merchant").parse::<Address>().ok(),
        ),
        None => (None, None),
    };
    let (Some(contract), Some(merchant)) = (contract, merchant) else {
        note(0, "no record names a contract and a merchant".into());
        return Ok((out, entries.len()));
    };
    let mut seen: HashSet<(B256, u64)> = HashSet::new();
    let mut sums: Sums = Sums::new();
    for r in records {
        if r.get("chainId") != chain_id.to_string() {
            note(
                r.line,
                format!(
                    "chainId {} but the node is chain {chain_id}",
                    r.get("chainId")
                ),
            );
        }
        if r.get("contract").parse::<Address>().ok() != Some(contract) {
            note(
                r.line,
                format!(
                    "contract {} differs from the file's {contract}",
                    r.get("contract")
                ),
            );
        }
        if r.get("merchant").parse::<Address>().ok() != Some(merchant) {
            note(
                r.line,
                format!(
                    "merchant {} differs from the file's {merchant}",
                    r.get("merchant")
                ),
            );
        }
    }
    for r in &entries {
        let s = sums.entry(r.get("kind").to_string()).or_default();
        s.0 += 1;
        match magnitude(r.get("kind"), r.get("amount")) {
            Some(a) => s.1 += a,
            None => note(
                r.line,
                format!("amount {:?} is not base units", r.get("amount")),
            ),
        }
        let (Ok(tx), Ok(log_index)) = (
            r.get("transactionHash").parse::<B256>(),
            r.get("logIndex").parse::<u64>(),
        ) else {
            note(r.line, "transactionHash or logIndex unreadable".into());
            continue;
        };
        if !seen.insert((tx, log_index)) {
            note(r.line, format!("tx {tx} log {log_index} appears twice"));
            continue;
        }
        for w in check_entry(&mut chain, r, tx, log_index, contract).await? {
            note(r.line, w);
        }
    }
    // Totals: one per kind, equal to the entries'.
    if totals.is_empty() {
        note(0, "no total records: the export was cut short".into());
    }
    let mut range: Option<(u64, u64, String, String)> = None;
    for t in &totals {
        let kind = t.get("kind");
        let (n, sum) = sums.remove(kind).unwrap_or_default();
        if t.get("entries") != n.to_string() {
            note(
                t.line,
                format!(
                    "total {kind}: {} entries in the total, {n} in the file",
                    t.get("entries")
                ),
            );
        }
        if t.get("amount") != signed(kind, sum) {
            note(
                t.line,
                format!(
                    "total {kind}: amount {} in the total, {} in the file",
                    t.get("amount"),
                    signed(kind, sum)
                ),
            );
        }
        let r = (
            t.get("fromBlock").parse().unwrap_or(0),
            t.get("toBlock").parse().unwrap_or(0),
            t.get("fromTime").to_string(),
            t.get("toTime").to_string(),
        );
        match &range {
            None => range = Some(r),
            Some(prev) if *prev != r => note(t.line, "the totals disagree on the range".into()),
            Some(_) => {}
        }
    }
    for (kind, (n, _)) in sums {
        if !totals.is_empty() {
            note(0, format!("{n} {kind} entries have no total record"));
        }
    }
    // Completeness: everything the contract emitted for this merchant in the range.
    if let Some((from, to, from_time, to_time)) = range {
        let on_file: HashSet<(B256, u64)> = seen;
        for (block, tx, log_index, kind) in
            merchant_logs(&chain, contract, merchant, from, to).await?
        {
            if on_file.contains(&(tx, log_index)) {
                continue;
            }
            let Some((_, time)) = chain.block(block).await? else {
                continue;
            };
            let t = chainsub_core::rfc3339(time);
            // RFC 3339 UTC with seconds and `Z` orders as text.
            let inside =
                (from_time.is_empty() || t >= from_time) && (to_time.is_empty() || t < to_time);
            if inside {
                note(
                    0,
                    format!(
                        "missing from the file: {kind} at block {block} tx {tx} log {log_index}"
                    ),
                );
            }
        }
    }
    Ok((out, entries.len()))
}

/// The differences between one entry and its log.
async fn check_entry(
    chain: &mut Chain,
    r: &Record,
    tx: B256,
    log_index: u64,
    contract: Address,
) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let Some(receipt) = chain.receipt(tx).await? else {
        return Ok(vec![format!("transaction {tx} is not on the chain")]);
    };
    let (block_hash, block_number) = (receipt.block_hash, receipt.block_number);
    let log: Option<Log> = receipt
        .inner
        .logs()
        .iter()
        .find(|l| l.log_index == Some(log_index))
        .map(|l| l.inner.clone());
    let want_hash = r.get("blockHash").parse::<B256>().ok();
    if block_hash != want_hash {
        out.push(format!(
            "blockHash {} but the transaction is in block {}",
            r.get("blockHash"),
            block_hash.map(|h| h.to_string()).unwrap_or_default()
        ));
    }
    if block_number.map(|n| n.to_string()).as_deref() != Some(r.get("blockNumber")) {
        out.push(format!(
            "blockNumber {} but the transaction is in block {}",
            r.get("blockNumber"),
            block_number.map(|n| n.to_string()).unwrap_or_default()
        ));
    }
    if let Some(n) = block_number {
        match chain.block(n).await? {
            Some((hash, time)) => {
                if Some(hash) != want_hash {
                    out.push(format!(
                        "block {n} on the chain is {hash}, not {}",
                        r.get("blockHash")
                    ));
                }
                let t = chainsub_core::rfc3339(time);
                if r.get("blockTime") != t {
                    out.push(format!(
                        "blockTime {} but the block's time is {t}",
                        r.get("blockTime")
                    ));
                }
            }
            None => out.push(format!("block {n} is not on the chain")),
        }
    }
    let Some(log) = log else {
        out.push(format!(
            "the transaction has no log at logIndex {log_index}"
        ));
        return Ok(out);
    };
    if log.address != contract {
        out.push(format!(
            "the log was emitted by {}, not {contract}",
            log.address
        ));
    }
    let mut expect = |field: &str, chain_value: String| {
        if r.get(field) != chain_value {
            out.push(format!(
                "{field} {:?} but the chain says {chain_value:?}",
                r.get(field)
            ));
        }
    };
    match ContractEvent::decode(&log) {
        Ok(ContractEvent::SubscriptionCharged(c)) => {
            expect("kind", "charge".into());
            expect("onchainSubscriptionId", c.subscriptionId.to_string());
            expect("merchant", c.merchant.to_checksum(None));
            expect("subscriber", c.subscriber.to_checksum(None));
            expect("amount", c.amount.to_string());
            expect("period", c.period.to_string());
            expect("attempt", c.attempt.to_string());
            expect("failureReason", String::new());
        }
        Ok(ContractEvent::PaymentFailed(f)) => {
            expect("kind", "failed_charge".into());
            expect("onchainSubscriptionId", f.subscriptionId.to_string());
            expect("merchant", f.merchant.to_checksum(None));
            expect("subscriber", f.subscriber.to_checksum(None));
            expect("amount", f.amount.to_string());
            expect("period", f.period.to_string());
            expect("attempt", f.attempt.to_string());
            expect("failureReason", failure_reason_name(f.reason));
        }
        Ok(ContractEvent::PlanChanged(c)) if !c.proration.is_zero() => {
            expect("kind", "proration".into());
            expect("onchainSubscriptionId", c.subscriptionId.to_string());
            expect("merchant", c.merchant.to_checksum(None));
            expect("subscriber", c.subscriber.to_checksum(None));
            expect("amount", c.proration.to_string());
            expect("period", c.period.to_string());
            expect("failureReason", String::new());
        }
        Ok(ContractEvent::SubscriptionRefunded(f)) => {
            expect("kind", "refund".into());
            expect("onchainSubscriptionId", f.subscriptionId.to_string());
            expect("merchant", f.merchant.to_checksum(None));
            expect("subscriber", f.subscriber.to_checksum(None));
            expect("amount", format!("-{}", f.amount));
            expect("period", f.period.to_string());
            expect("failureReason", String::new());
        }
        Ok(other) => out.push(format!("the log is {}, not a ledger entry", other.name())),
        Err(e) => out.push(format!("the log does not decode: {e}")),
    }
    Ok(out)
}

/// An entry's amount as a magnitude: base units, written negative for a refund (money back)
/// and only for a refund.
fn magnitude(kind: &str, amount: &str) -> Option<u128> {
    match (kind, amount.strip_prefix('-')) {
        ("refund", Some(units)) => units.parse().ok().filter(|a| *a != 0),
        (_, None) => amount.parse().ok(),
        _ => None,
    }
}

/// A sum of `kind`'s magnitudes as the export writes it (negative for refunds).
fn signed(kind: &str, sum: u128) -> String {
    if kind == "refund" && sum != 0 {
        format!("-{sum}")
    } else {
        sum.to_string()
    }
}

/// Every ledger log `contract` emitted for `merchant` in `from..=to` (capped at the head) —
/// charges, failed charges, upgrades with a proration, refunds: (block, tx, log index, kind).
async fn merchant_logs(
    chain: &Chain,
    contract: Address,
    merchant: Address,
    from: u64,
    to: u64,
) -> anyhow::Result<Vec<(u64, B256, u64, &'static str)>> {
    let head = chain.provider.get_block_number().await?;
    let to = to.min(head);
    let mut out = Vec::new();
    let mut start = from;
    while start <= to {
        let end = (start + LOG_RANGE - 1).min(to);
        let filter = Filter::new()
            .address(contract)
            .event_signature(vec![
                SM::SubscriptionCharged::SIGNATURE_HASH,
                SM::PaymentFailed::SIGNATURE_HASH,
                SM::PlanChanged::SIGNATURE_HASH,
                SM::SubscriptionRefunded::SIGNATURE_HASH,
            ])
            .topic2(merchant.into_word())
            .from_block(start)
            .to_block(end);
        for l in chain.provider.get_logs(&filter).await? {
            let (Some(block), Some(tx), Some(li)) =
                (l.block_number, l.transaction_hash, l.log_index)
            else {
                continue;
            };
            let kind = match ContractEvent::decode(&l.inner) {
                Ok(ContractEvent::SubscriptionCharged(_)) => "charge",
                Ok(ContractEvent::PaymentFailed(_)) => "failed_charge",
                Ok(ContractEvent::PlanChanged(c)) if !c.proration.is_zero() => "proration",
                Ok(ContractEvent::SubscriptionRefunded(_)) => "refund",
                _ => continue,
            };
            out.push((block, tx, li, kind));
        }
        start = end + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_ndjson_read_to_the_same_fields() {
        let csv = "record,kind,customerExternalId,amount\r\nentry,charge,\"cus,\"\"7\"\"\r\nx\",5\r\ntotal,charge,,5\r\n";
        let rows = parse(csv).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get("customerExternalId"), "cus,\"7\"\r\nx");
        assert_eq!((rows[0].line, rows[1].line), (2, 4));
        let ndjson = "{\"record\":\"entry\",\"kind\":\"charge\",\"customerExternalId\":null,\"amount\":\"5\",\"period\":2}\n";
        let rows = parse(ndjson).unwrap();
        assert_eq!(rows[0].get("customerExternalId"), "");
        assert_eq!(rows[0].get("period"), "2");
        assert!(parse("a,b\r\n1\r\n").is_err());
        assert!(parse("a\r\n\"open\r\n").is_err());
    }
}
