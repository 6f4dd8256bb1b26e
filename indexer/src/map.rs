//! Pure mapping from a block's logs to domain events: decode through `chainsub_abi`, give each
//! log its stable public id and the typed facts events serve ([`LogFields`]). No I/O here.

use alloy::primitives::{Address, B256, Bytes, Log, LogData, U256};
use chainsub_abi::{ContractEvent, EndReason, EventKind, FailureReason, ids};
use chainsub_core::{OnchainPlanId, OnchainSubscriptionId};
use chainsub_store::index::LogFields;

use crate::block::Block;
use crate::{Error, Result};

/// One contract log, decoded and placed.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The log's fields that events serve, typed (all `None` when it does not decode).
    pub fields: LogFields,
    /// `None` when the log does not decode (kept as a row all the same: the row is the fact).
    pub event: Option<ContractEvent>,
}

/// An event's `uint256` subscription id, refusing (not truncating) one the index cannot
/// store.
pub fn onchain_subscription(v: U256) -> Result<OnchainSubscriptionId> {
    OnchainSubscriptionId::try_from(v).map_err(Error::IdOverflow)
}

/// An event's `uint256` plan id, refusing (not truncating) one the index cannot store.
pub fn onchain_plan(v: U256) -> Result<OnchainPlanId> {
    OnchainPlanId::try_from(v).map_err(Error::IdOverflow)
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
            let (name, fields, event) = match decoded {
                Ok(ev) => (ev.name(), log_fields(&ev), Some(ev)),
                Err(e) => {
                    tracing::warn!(block = block.number, log_index = log.log_index, error = %e,
                        "log of the contract does not decode; stored undecoded");
                    ("Unknown", LogFields::default(), None)
                }
            };
            let subscription_id = event
                .as_ref()
                .and_then(ContractEvent::subscription_id)
                .map(|v| onchain_subscription(v).map(OnchainSubscriptionId::db))
                .transpose()?;
            let plan_id = event
                .as_ref()
                .and_then(plan_id)
                .map(|v| onchain_plan(v).map(OnchainPlanId::db))
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
                fields,
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
        ContractEvent::PlanTrial(e) => e.planId,
        ContractEvent::PlanChanged(e) => e.planId,
        ContractEvent::PlanChangeScheduled(e) => e.planId,
        ContractEvent::PlanChangeCancelled(e) => e.planId,
        ContractEvent::SubscriptionRefunded(e) => e.planId,
    })
}

/// The log's fields that events serve (the rest is in its topics and data): the amount of
/// plan and subscription events, the subscriber, and a charge's or failed charge's period,
/// attempt, failure reason and retry time; an ended subscription's reason. Enums (uint8 on
/// the wire) stay numbers; their names live in the projections.
pub fn log_fields(ev: &ContractEvent) -> LogFields {
    let none = LogFields::default();
    match ev {
        ContractEvent::OperatorChanged(_)
        | ContractEvent::OperatorTransferStarted(_)
        | ContractEvent::PlanDeactivated(_) => none,
        ContractEvent::PlanCreated(e) => LogFields {
            amount: Some(e.amount),
            ..none
        },
        ContractEvent::SubscriptionCreated(e) => LogFields {
            amount: Some(e.amount),
            subscriber: Some(e.subscriber),
            ..none
        },
        ContractEvent::SubscriptionCharged(e) => LogFields {
            amount: Some(e.amount),
            subscriber: Some(e.subscriber),
            period: Some(e.period),
            attempt: Some(e.attempt),
            ..none
        },
        ContractEvent::PaymentFailed(e) => LogFields {
            amount: Some(e.amount),
            subscriber: Some(e.subscriber),
            period: Some(e.period),
            attempt: Some(e.attempt),
            reason: Some(e.reason),
            next_retry_at: Some(e.nextRetryAt),
        },
        ContractEvent::CancelAtPeriodEndSet(e) => LogFields {
            subscriber: Some(e.subscriber),
            ..none
        },
        ContractEvent::SubscriptionCancelled(e) => LogFields {
            subscriber: Some(e.subscriber),
            ..none
        },
        ContractEvent::SubscriptionEnded(e) => LogFields {
            subscriber: Some(e.subscriber),
            reason: Some(e.reason),
            ..none
        },
        ContractEvent::PlanTrial(_) => none,
        // The money the event moved: the proration (0 for a change applied at renewal); the
        // new amount per period is in the snapshot.
        ContractEvent::PlanChanged(e) => LogFields {
            amount: Some(e.proration),
            subscriber: Some(e.subscriber),
            period: Some(e.period),
            ..none
        },
        ContractEvent::PlanChangeScheduled(e) => LogFields {
            amount: Some(e.newAmount),
            subscriber: Some(e.subscriber),
            ..none
        },
        ContractEvent::PlanChangeCancelled(e) => LogFields {
            subscriber: Some(e.subscriber),
            ..none
        },
        ContractEvent::SubscriptionRefunded(e) => LogFields {
            amount: Some(e.amount),
            subscriber: Some(e.subscriber),
            period: Some(e.period),
            ..none
        },
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
            m.fields,
            LogFields {
                amount: Some(U256::from(9_990_000u64)),
                ..LogFields::default()
            }
        );
    }

    #[test]
    fn payment_failed_keeps_every_field_events_serve() {
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
        assert_eq!(
            m.fields,
            LogFields {
                amount: Some(U256::from(1u64)),
                subscriber: Some(Address::repeat_byte(0xbb)),
                period: Some(3),
                attempt: Some(2),
                reason: Some(2),
                next_retry_at: Some(1_767_312_000),
            }
        );
        assert_eq!(failure_reason_name(2), "insufficient_balance");
        assert_eq!(failure_reason_name(9), "unknown_9");
    }

    #[test]
    fn undecodable_log_is_kept_as_unknown() {
        let junk = (vec![B256::repeat_byte(0xee)], Bytes::new());
        let m = &map_block(1, &block_with(vec![junk])).unwrap()[0];
        assert_eq!(m.name, "Unknown");
        assert!(m.event.is_none() && m.kind.is_none());
        assert_eq!(m.fields, LogFields::default());
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
