//! JSON renderings of chain-derived objects. [`event_object`] is THE event renderer: used by
//! `GET /api/v1/events` and by webhook delivery, so a webhook body and the API agree byte for
//! byte. Rows must come from [`EVENT_SELECT`].

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_postgres::Row;

use crate::domain::format_units;

/// The columns [`event_object`] reads: the store's event `SELECT`.
pub use chainsub_store::events::SELECT as EVENT_SELECT;

pub use chainsub_core::address::{checksum as address, hex0x};

/// RFC 3339 with second precision and `Z`.
pub fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Confirmations of a block given the indexer's tip (0 when unknown).
pub fn confirmations(block_number: i64, indexed_block: Option<i64>) -> i64 {
    indexed_block.map_or(0, |tip| (tip - block_number + 1).max(0))
}

/// The `chain` block of DESIGN §4.
pub struct ChainRef<'a> {
    pub chain_id: i64,
    pub contract: &'a [u8],
    pub block_number: i64,
    pub block_hash: &'a [u8],
    pub transaction_hash: &'a [u8],
    pub log_index: i64,
    pub indexed_block: Option<i64>,
}

impl ChainRef<'_> {
    /// `{chainId, contract, blockNumber, blockHash, transactionHash, logIndex, confirmations}`.
    pub fn to_json(&self) -> Value {
        json!({
            "chainId": self.chain_id,
            "contract": address(self.contract),
            "blockNumber": self.block_number,
            "blockHash": hex0x(self.block_hash),
            "transactionHash": hex0x(self.transaction_hash),
            "logIndex": self.log_index,
            "confirmations": confirmations(self.block_number, self.indexed_block),
        })
    }
}

/// A base-unit amount held as a decimal string (JSON from the indexer) -> "9.99".
pub fn amount_from_str(s: &str) -> Option<String> {
    s.parse::<u128>().ok().map(format_units)
}

fn str_field<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn field(v: &Value, k: &str) -> Value {
    v.get(k).cloned().unwrap_or(Value::Null)
}

/// An address the indexer stored as JSON text (lowercase hex), in EIP-55 form like every
/// other address the API serves; anything unparsable passes through unchanged.
fn address_field(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => s.parse::<alloy::primitives::Address>().map_or_else(
            |_| Value::from(s.as_str()),
            |a| Value::from(a.to_checksum(None)),
        ),
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

/// Builds an object from (key, value) pairs without the serializer round trip of `json!`
/// (this runs for every event of every page and webhook).
fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// The subscription snapshot (as the indexer stores it) in API form.
pub fn snapshot_object(snapshot: &Value, plan_public_id: Option<&str>) -> Value {
    object([
        ("id", field(snapshot, "id")),
        ("object", Value::from("subscription")),
        ("status", field(snapshot, "status")),
        ("cancelAtPeriodEnd", field(snapshot, "cancelAtPeriodEnd")),
        ("planId", plan_public_id.map_or(Value::Null, Value::from)),
        ("customerExternalId", field(snapshot, "customerExternalId")),
        ("subscriber", address_field(snapshot.get("subscriber"))),
        (
            "amount",
            str_field(snapshot, "amount")
                .and_then(amount_from_str)
                .map_or(Value::Null, Value::from),
        ),
        ("currency", Value::from("USDC")),
        ("period", field(snapshot, "period")),
        ("currentPeriodStart", field(snapshot, "currentPeriodStart")),
        ("currentPeriodEnd", field(snapshot, "currentPeriodEnd")),
        ("nextPaymentAt", field(snapshot, "nextPaymentAt")),
        ("failedAttempts", field(snapshot, "failedAttempts")),
    ])
}

/// The event object of DESIGN §4 from an [`EVENT_SELECT`] row.
pub fn event_object(row: &Row) -> Value {
    let decoded: Value = row.get("decoded");
    let snapshot: Option<Value> = row.get("snapshot");
    let snapshot = snapshot.unwrap_or(Value::Null);
    let plan_public_id: Option<String> = row.get("plan_public_id");
    let tx: Vec<u8> = row.get("transaction_hash");
    let onchain_sub: Option<i64> = row.get("subscription_id");
    let block_time: DateTime<Utc> = row.get("block_time");
    let amount = str_field(&decoded, "amount")
        .or_else(|| str_field(&snapshot, "amount"))
        .and_then(amount_from_str);
    let subscription_id = match snapshot.get("id") {
        Some(id) => id.clone(),
        None => onchain_sub.map_or(Value::Null, |id| {
            Value::from(chainsub_abi::ids::subscription_id(id as u64))
        }),
    };
    let subscriber = address_field(
        snapshot
            .get("subscriber")
            .or_else(|| decoded.get("subscriber")),
    );
    let mut data = object([
        ("subscriptionId", subscription_id),
        (
            "planId",
            plan_public_id.as_deref().map_or(Value::Null, Value::from),
        ),
        ("customerExternalId", field(&snapshot, "customerExternalId")),
        ("subscriberAddress", subscriber),
        ("amount", amount.map_or(Value::Null, Value::from)),
        ("currency", Value::from("USDC")),
        ("txHash", Value::from(hex0x(&tx))),
        ("status", field(&snapshot, "status")),
        ("nextPaymentAt", field(&snapshot, "nextPaymentAt")),
        (
            "subscription",
            snapshot_object(&snapshot, plan_public_id.as_deref()),
        ),
    ]);
    let kind: Option<String> = row.get("kind");
    // Kind-specific facts from the log itself.
    if let Some(o) = data.as_object_mut() {
        // uints are decimal strings in `decoded`; these small ones are numbers in the API.
        for k in ["period", "attempt"] {
            if let Some(n) = str_field(&decoded, k).and_then(|v| v.parse::<i64>().ok()) {
                o.insert(k.into(), json!(n));
            }
        }
        let reason = str_field(&decoded, "reason").and_then(|r| r.parse::<u8>().ok());
        match (kind.as_deref(), reason) {
            (Some("subscription.payment_failed"), Some(r)) => {
                o.insert(
                    "failureReason".into(),
                    json!(chainsub_abi::FailureReason::from_u8(r).map(|x| x.as_str())),
                );
                if let Some(t) =
                    str_field(&decoded, "nextRetryAt").and_then(|t| t.parse::<i64>().ok())
                {
                    o.insert(
                        "nextRetryAt".into(),
                        json!(DateTime::from_timestamp(t, 0).map(time)),
                    );
                }
            }
            (Some("subscription.ended"), Some(r)) => {
                o.insert(
                    "endReason".into(),
                    json!(chainsub_abi::EndReason::from_u8(r).map(|x| x.as_str())),
                );
            }
            _ => {}
        }
    }
    let contract: Vec<u8> = row.get("contract");
    let block_hash: Vec<u8> = row.get("block_hash");
    let chain = ChainRef {
        chain_id: row.get("chain_id"),
        contract: &contract,
        block_number: row.get("block_number"),
        block_hash: &block_hash,
        transaction_hash: &tx,
        log_index: i64::from(row.get::<_, i32>("log_index")),
        indexed_block: row.get("indexed_block"),
    };
    object([
        ("id", Value::from(row.get::<_, String>("public_id"))),
        ("object", Value::from("event")),
        ("type", kind.map_or(Value::Null, Value::from)),
        ("createdAt", Value::from(time(block_time))),
        ("data", data),
        ("chain", chain.to_json()),
    ])
}
