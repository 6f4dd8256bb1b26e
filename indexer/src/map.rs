//! Pure mapping from a block's logs to domain events: decode through `chainsub_abi`, give each
//! log its stable public id and its `decoded` JSON. No I/O here.

use alloy::primitives::{Address, B256, Bytes, Log, LogData, U256};
use chainsub_abi::{ContractEvent, EndReason, EventKind, FailureReason, ids};
use serde_json::{Value, json};

use crate::block::Block;
use crate::{Error, Result};

/// One contract log, decoded and placed.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedEvent {
    pub public_id: String,
    pub block_number: u64,
    pub block_hash: B256,
    pub block_time: u64,
    pub tx_hash: B256,
    pub tx_index: u64,
    pub log_index: u64,
    /// Solidity event name (`Unknown` when the log does not decode).
    pub name: &'static str,
    pub kind: Option<EventKind>,
    pub merchant: Option<Address>,
    pub subscription_id: Option<i64>,
    pub plan_id: Option<i64>,
    pub topics: Vec<B256>,
    pub data: Bytes,
    pub decoded: Value,
    /// `None` when the log does not decode (kept as a row all the same: the row is the fact).
    pub event: Option<ContractEvent>,
}

/// A `uint256` on-chain id as BIGINT, refusing (not truncating) larger ones.
pub fn id_to_i64(v: U256) -> Result<i64> {
    u64::try_from(v)
        .ok()
        .and_then(|v| i64::try_from(v).ok())
        .ok_or_else(|| Error::IdOverflow(v.to_string()))
}

/// Decodes raw topics and data.
pub fn decode(topics: &[B256], data: &Bytes) -> Result<ContractEvent, chainsub_abi::DecodeError> {
    let log = Log {
        address: Address::ZERO,
        data: LogData::new_unchecked(topics.to_vec(), data.clone()),
    };
    ContractEvent::decode(&log)
}

/// Maps every log of `block` (in log-index order).
pub fn map_block(chain_id: u64, block: &Block) -> Result<Vec<MappedEvent>> {
    block
        .logs
        .iter()
        .map(|log| {
            let decoded = decode(&log.topics, &log.data);
            let (name, json, event) = match decoded {
                Ok(ev) => (ev.name(), decoded_json(&ev), Some(ev)),
                Err(e) => {
                    tracing::warn!(block = block.number, log_index = log.log_index, error = %e,
                        "log of the contract does not decode; stored undecoded");
                    ("Unknown", json!({ "error": e.to_string() }), None)
                }
            };
            let subscription_id = event
                .as_ref()
                .and_then(ContractEvent::subscription_id)
                .map(id_to_i64)
                .transpose()?;
            let plan_id = event
                .as_ref()
                .and_then(plan_id)
                .map(id_to_i64)
                .transpose()?;
            Ok(MappedEvent {
                public_id: ids::event_id(chain_id, log.tx_hash, log.log_index),
                block_number: block.number,
                block_hash: block.hash,
                block_time: block.timestamp,
                tx_hash: log.tx_hash,
                tx_index: log.tx_index,
                log_index: log.log_index,
                name,
                kind: event.as_ref().and_then(ContractEvent::kind),
                merchant: event.as_ref().and_then(ContractEvent::merchant),
                subscription_id,
                plan_id,
                topics: log.topics.clone(),
                data: log.data.clone(),
                decoded: json,
                event,
            })
        })
        .collect()
}

/// The on-chain plan id an event refers to.
pub fn plan_id(ev: &ContractEvent) -> Option<U256> {
    Some(match ev {
        ContractEvent::OperatorChanged(_) | ContractEvent::OperatorTransferStarted(_) => {
            return None;
        }
        ContractEvent::PlanCreated(e) => e.planId,
        ContractEvent::PlanDeactivated(e) => e.planId,
        ContractEvent::SubscriptionCreated(e) => e.planId,
        ContractEvent::SubscriptionCharged(e) => e.planId,
        ContractEvent::PaymentFailed(e) => e.planId,
        ContractEvent::CancelAtPeriodEndSet(e) => e.planId,
        ContractEvent::SubscriptionCancelled(e) => e.planId,
        ContractEvent::SubscriptionEnded(e) => e.planId,
    })
}

fn addr(a: Address) -> Value {
    Value::String(alloy::hex::encode_prefixed(a))
}

fn uint(v: impl ToString) -> Value {
    Value::String(v.to_string())
}

/// The log's fields by their Solidity names: uints as decimal strings, addresses and bytes32
/// as 0x hex. Enums (uint8 on the wire) are uints too; their names live in the projections.
pub fn decoded_json(ev: &ContractEvent) -> Value {
    match ev {
        ContractEvent::OperatorChanged(e) => json!({
            "previousOperator": addr(e.previousOperator), "newOperator": addr(e.newOperator),
        }),
        ContractEvent::OperatorTransferStarted(e) => json!({
            "currentOperator": addr(e.currentOperator), "pendingOperator": addr(e.pendingOperator),
        }),
        ContractEvent::PlanDeactivated(e) => json!({
            "planId": uint(e.planId), "merchant": addr(e.merchant), "by": addr(e.by),
        }),
        ContractEvent::PlanCreated(e) => json!({
            "planId": uint(e.planId), "merchant": addr(e.merchant),
            "planRef": e.planRef.to_string(), "amount": uint(e.amount),
            "createdBy": addr(e.createdBy),
        }),
        ContractEvent::SubscriptionCreated(e) => json!({
            "subscriptionId": uint(e.subscriptionId), "merchant": addr(e.merchant),
            "subscriber": addr(e.subscriber), "planId": uint(e.planId),
            "customerRef": e.customerRef.to_string(), "amount": uint(e.amount),
            "periodStart": uint(e.periodStart), "periodEnd": uint(e.periodEnd),
        }),
        ContractEvent::SubscriptionCharged(e) => json!({
            "subscriptionId": uint(e.subscriptionId), "merchant": addr(e.merchant),
            "subscriber": addr(e.subscriber), "planId": uint(e.planId), "amount": uint(e.amount),
            "period": uint(e.period), "periodStart": uint(e.periodStart),
            "periodEnd": uint(e.periodEnd), "attempt": uint(e.attempt),
        }),
        ContractEvent::PaymentFailed(e) => json!({
            "subscriptionId": uint(e.subscriptionId), "merchant": addr(e.merchant),
            "subscriber": addr(e.subscriber), "planId": uint(e.planId), "amount": uint(e.amount),
            "period": uint(e.period), "attempt": uint(e.attempt), "reason": uint(e.reason),
            "nextRetryAt": uint(e.nextRetryAt),
        }),
        ContractEvent::CancelAtPeriodEndSet(e) => json!({
            "subscriptionId": uint(e.subscriptionId), "merchant": addr(e.merchant),
            "subscriber": addr(e.subscriber), "planId": uint(e.planId), "by": addr(e.by),
            "periodEnd": uint(e.periodEnd),
        }),
        ContractEvent::SubscriptionCancelled(e) => json!({
            "subscriptionId": uint(e.subscriptionId), "merchant": addr(e.merchant),
            "subscriber": addr(e.subscriber), "planId": uint(e.planId), "by": addr(e.by),
        }),
        ContractEvent::SubscriptionEnded(e) => json!({
            "subscriptionId": uint(e.subscriptionId), "merchant": addr(e.merchant),
            "subscriber": addr(e.subscriber), "planId": uint(e.planId),
            "reason": uint(e.reason),
        }),
    }
}

/// The failure reason's stable name (`unknown_<n>` for a value this build does not know).
pub fn failure_reason_name(v: u8) -> String {
    FailureReason::from_u8(v)
        .map(|r| r.as_str().to_string())
        .unwrap_or_else(|| format!("unknown_{v}"))
}

/// The end reason's stable name (`unknown_<n>` for a value this build does not know).
pub fn end_reason_name(v: u8) -> String {
    EndReason::from_u8(v)
        .map(|r| r.as_str().to_string())
        .unwrap_or_else(|| format!("unknown_{v}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::RawLog;
    use alloy::sol_types::SolEvent;
    use chainsub_abi::SubscriptionManager as SM;

    fn block_with(logs: Vec<(Vec<B256>, Bytes)>) -> Block {
        Block {
            number: 42,
            hash: B256::repeat_byte(0x42),
            parent_hash: B256::repeat_byte(0x41),
            timestamp: 1_767_225_600,
            logs: logs
                .into_iter()
                .enumerate()
                .map(|(i, (topics, data))| RawLog {
                    address: Address::repeat_byte(0xcc),
                    block_number: 42,
                    block_hash: B256::repeat_byte(0x42),
                    tx_hash: B256::repeat_byte(0x70 + i as u8),
                    tx_index: i as u64,
                    log_index: 3 + i as u64,
                    topics,
                    data,
                })
                .collect(),
        }
    }

    fn fixture<E: SolEvent>(e: &E) -> (Vec<B256>, Bytes) {
        let d = e.encode_log_data();
        (d.topics().to_vec(), d.data.clone())
    }

    #[test]
    fn plan_created_maps_to_a_plan_event_without_kind() {
        let ev = SM::PlanCreated {
            planId: U256::from(9),
            merchant: Address::repeat_byte(0xaa),
            planRef: B256::repeat_byte(0x01),
            amount: U256::from(9_990_000u64),
            createdBy: Address::repeat_byte(0xbb),
        };
        let mapped = map_block(31337, &block_with(vec![fixture(&ev)])).unwrap();
        assert_eq!(mapped.len(), 1);
        let m = &mapped[0];
        assert_eq!(m.name, "PlanCreated");
        assert_eq!(m.kind, None);
        assert_eq!(m.plan_id, Some(9));
        assert_eq!(m.subscription_id, None);
        assert_eq!(m.merchant, Some(Address::repeat_byte(0xaa)));
        assert_eq!(
            m.public_id,
            ids::event_id(31337, B256::repeat_byte(0x70), 3)
        );
        assert_eq!(
            m.decoded,
            json!({
                "planId": "9",
                "merchant": format!("0x{}", "aa".repeat(20)),
                "planRef": format!("0x{}", "01".repeat(32)),
                "amount": "9990000",
                "createdBy": format!("0x{}", "bb".repeat(20)),
            })
        );
    }

    #[test]
    fn payment_failed_maps_uints_as_decimal_strings() {
        let ev = SM::PaymentFailed {
            subscriptionId: U256::from(5),
            merchant: Address::repeat_byte(0xaa),
            subscriber: Address::repeat_byte(0xbb),
            planId: U256::from(2),
            amount: U256::from(1u64),
            period: 3,
            attempt: 2,
            reason: 2,
            nextRetryAt: 1_767_312_000,
        };
        let m = &map_block(1, &block_with(vec![fixture(&ev)])).unwrap()[0];
        assert_eq!(m.kind, Some(EventKind::PaymentFailed));
        assert_eq!(m.subscription_id, Some(5));
        assert_eq!(m.decoded["period"], "3");
        assert_eq!(m.decoded["reason"], "2");
        assert_eq!(m.decoded["nextRetryAt"], "1767312000");
        assert_eq!(failure_reason_name(2), "insufficient_balance");
        assert_eq!(failure_reason_name(9), "unknown_9");
    }

    #[test]
    fn undecodable_log_is_kept_as_unknown() {
        let junk = (vec![B256::repeat_byte(0xee)], Bytes::new());
        let m = &map_block(1, &block_with(vec![junk])).unwrap()[0];
        assert_eq!(m.name, "Unknown");
        assert!(m.event.is_none() && m.kind.is_none());
        assert!(m.decoded["error"].is_string());
    }

    #[test]
    fn ids_beyond_bigint_are_refused_not_truncated() {
        let ev = SM::SubscriptionCancelled {
            subscriptionId: U256::from(u64::MAX),
            merchant: Address::ZERO,
            subscriber: Address::ZERO,
            planId: U256::from(1),
            by: Address::ZERO,
        };
        assert!(matches!(
            map_block(1, &block_with(vec![fixture(&ev)])),
            Err(Error::IdOverflow(_))
        ));
    }
}
