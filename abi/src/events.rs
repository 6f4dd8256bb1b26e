//! One typed value for every SubscriptionManager log.

use alloy::primitives::{Address, B256, Log, U256};
use alloy::sol_types::SolEvent;
use serde::Serialize;

use crate::SubscriptionManager as SM;

/// A decoded SubscriptionManager log. Every variant carries what the indexer needs to
/// project plans, subscriptions and the ledger without another RPC call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContractEvent {
    OperatorChanged(SM::OperatorChanged),
    OperatorTransferStarted(SM::OperatorTransferStarted),
    PlanCreated(SM::PlanCreated),
    PlanDeactivated(SM::PlanDeactivated),
    SubscriptionCreated(SM::SubscriptionCreated),
    SubscriptionCharged(SM::SubscriptionCharged),
    PaymentFailed(SM::PaymentFailed),
    CancelAtPeriodEndSet(SM::CancelAtPeriodEndSet),
    SubscriptionCancelled(SM::SubscriptionCancelled),
    SubscriptionEnded(SM::SubscriptionEnded),
    PlanTrial(SM::PlanTrial),
    PlanChanged(SM::PlanChanged),
    PlanChangeScheduled(SM::PlanChangeScheduled),
    PlanChangeCancelled(SM::PlanChangeCancelled),
    SubscriptionRefunded(SM::SubscriptionRefunded),
}

/// Why a log could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("log has no topics")]
    NoTopics,
    #[error("unknown event signature {0}")]
    UnknownSignature(B256),
    #[error("malformed {event} log: {reason}")]
    Malformed { event: &'static str, reason: String },
}

/// The API's lifecycle event kinds (spec §6), one per contract lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum EventKind {
    #[serde(rename = "subscription.created")]
    Created,
    #[serde(rename = "subscription.charged")]
    Charged,
    #[serde(rename = "subscription.payment_failed")]
    PaymentFailed,
    #[serde(rename = "subscription.cancel_at_period_end_set")]
    CancelAtPeriodEndSet,
    #[serde(rename = "subscription.cancelled")]
    Cancelled,
    #[serde(rename = "subscription.ended")]
    Ended,
    #[serde(rename = "subscription.plan_changed")]
    PlanChanged,
    #[serde(rename = "subscription.plan_change_scheduled")]
    PlanChangeScheduled,
    #[serde(rename = "subscription.plan_change_cancelled")]
    PlanChangeCancelled,
    #[serde(rename = "subscription.refunded")]
    Refunded,
}

impl EventKind {
    /// Every kind, in lifecycle order.
    pub const ALL: [Self; 10] = [
        Self::Created,
        Self::Charged,
        Self::PaymentFailed,
        Self::CancelAtPeriodEndSet,
        Self::Cancelled,
        Self::Ended,
        Self::PlanChanged,
        Self::PlanChangeScheduled,
        Self::PlanChangeCancelled,
        Self::Refunded,
    ];

    /// The wire name, e.g. `subscription.charged`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "subscription.created",
            Self::Charged => "subscription.charged",
            Self::PaymentFailed => "subscription.payment_failed",
            Self::CancelAtPeriodEndSet => "subscription.cancel_at_period_end_set",
            Self::Cancelled => "subscription.cancelled",
            Self::Ended => "subscription.ended",
            Self::PlanChanged => "subscription.plan_changed",
            Self::PlanChangeScheduled => "subscription.plan_change_scheduled",
            Self::PlanChangeCancelled => "subscription.plan_change_cancelled",
            Self::Refunded => "subscription.refunded",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// `SubscriptionManager.Status` (`getSubscription(id).status`) as the API names it: `None`
/// for 0, an id the contract never assigned (1 active, 2 past due, 3 cancelled, 4 ended,
/// 5 trialing).
pub fn subscription_status(v: u8) -> Option<chainsub_core::SubscriptionStatus> {
    use chainsub_core::SubscriptionStatus as S;
    match v {
        1 => Some(S::Active),
        2 => Some(S::PastDue),
        3 => Some(S::Cancelled),
        4 => Some(S::Ended),
        5 => Some(S::Trialing),
        _ => None,
    }
}

/// `SubscriptionManager.FailureReason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    InsufficientAllowance,
    InsufficientBalance,
    TransferFailed,
}

impl FailureReason {
    /// From the event's uint8.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::InsufficientAllowance),
            2 => Some(Self::InsufficientBalance),
            3 => Some(Self::TransferFailed),
            _ => None,
        }
    }

    /// Stable snake_case name used in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientAllowance => "insufficient_allowance",
            Self::InsufficientBalance => "insufficient_balance",
            Self::TransferFailed => "transfer_failed",
        }
    }
}

/// `SubscriptionManager.EndReason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    PaymentFailed,
    CancelAtPeriodEnd,
}

impl EndReason {
    /// From the event's uint8.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::PaymentFailed),
            2 => Some(Self::CancelAtPeriodEnd),
            _ => None,
        }
    }

    /// Stable snake_case name used in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PaymentFailed => "payment_failed",
            Self::CancelAtPeriodEnd => "cancel_at_period_end",
        }
    }
}

fn decode<E: SolEvent>(log: &Log) -> Result<E, DecodeError> {
    E::decode_log(log)
        .map(|l| l.data)
        .map_err(|e| DecodeError::Malformed {
            event: E::SIGNATURE,
            reason: e.to_string(),
        })
}

impl ContractEvent {
    /// Decodes one log of the SubscriptionManager contract (the caller filters by address).
    pub fn decode(log: &Log) -> Result<Self, DecodeError> {
        let topic0 = *log.topics().first().ok_or(DecodeError::NoTopics)?;
        Ok(match topic0 {
            SM::OperatorChanged::SIGNATURE_HASH => Self::OperatorChanged(decode(log)?),
            SM::OperatorTransferStarted::SIGNATURE_HASH => {
                Self::OperatorTransferStarted(decode(log)?)
            }
            SM::PlanCreated::SIGNATURE_HASH => Self::PlanCreated(decode(log)?),
            SM::PlanDeactivated::SIGNATURE_HASH => Self::PlanDeactivated(decode(log)?),
            SM::SubscriptionCreated::SIGNATURE_HASH => Self::SubscriptionCreated(decode(log)?),
            SM::SubscriptionCharged::SIGNATURE_HASH => Self::SubscriptionCharged(decode(log)?),
            SM::PaymentFailed::SIGNATURE_HASH => Self::PaymentFailed(decode(log)?),
            SM::CancelAtPeriodEndSet::SIGNATURE_HASH => Self::CancelAtPeriodEndSet(decode(log)?),
            SM::SubscriptionCancelled::SIGNATURE_HASH => Self::SubscriptionCancelled(decode(log)?),
            SM::SubscriptionEnded::SIGNATURE_HASH => Self::SubscriptionEnded(decode(log)?),
            SM::PlanTrial::SIGNATURE_HASH => Self::PlanTrial(decode(log)?),
            SM::PlanChanged::SIGNATURE_HASH => Self::PlanChanged(decode(log)?),
            SM::PlanChangeScheduled::SIGNATURE_HASH => Self::PlanChangeScheduled(decode(log)?),
            SM::PlanChangeCancelled::SIGNATURE_HASH => Self::PlanChangeCancelled(decode(log)?),
            SM::SubscriptionRefunded::SIGNATURE_HASH => Self::SubscriptionRefunded(decode(log)?),
            other => return Err(DecodeError::UnknownSignature(other)),
        })
    }

    /// The API event kind, for the subscription lifecycle events.
    pub fn kind(&self) -> Option<EventKind> {
        match self {
            Self::OperatorChanged(_)
            | Self::OperatorTransferStarted(_)
            | Self::PlanCreated(_)
            | Self::PlanDeactivated(_)
            | Self::PlanTrial(_) => None,
            Self::SubscriptionCreated(_) => Some(EventKind::Created),
            Self::SubscriptionCharged(_) => Some(EventKind::Charged),
            Self::PaymentFailed(_) => Some(EventKind::PaymentFailed),
            Self::CancelAtPeriodEndSet(_) => Some(EventKind::CancelAtPeriodEndSet),
            Self::SubscriptionCancelled(_) => Some(EventKind::Cancelled),
            Self::SubscriptionEnded(_) => Some(EventKind::Ended),
            Self::PlanChanged(_) => Some(EventKind::PlanChanged),
            Self::PlanChangeScheduled(_) => Some(EventKind::PlanChangeScheduled),
            Self::PlanChangeCancelled(_) => Some(EventKind::PlanChangeCancelled),
            Self::SubscriptionRefunded(_) => Some(EventKind::Refunded),
        }
    }

    /// The on-chain subscription id, for subscription events.
    pub fn subscription_id(&self) -> Option<U256> {
        Some(match self {
            Self::OperatorChanged(_)
            | Self::OperatorTransferStarted(_)
            | Self::PlanCreated(_)
            | Self::PlanDeactivated(_)
            | Self::PlanTrial(_) => return None,
            Self::SubscriptionCreated(e) => e.subscriptionId,
            Self::SubscriptionCharged(e) => e.subscriptionId,
            Self::PaymentFailed(e) => e.subscriptionId,
            Self::CancelAtPeriodEndSet(e) => e.subscriptionId,
            Self::SubscriptionCancelled(e) => e.subscriptionId,
            Self::SubscriptionEnded(e) => e.subscriptionId,
            Self::PlanChanged(e) => e.subscriptionId,
            Self::PlanChangeScheduled(e) => e.subscriptionId,
            Self::PlanChangeCancelled(e) => e.subscriptionId,
            Self::SubscriptionRefunded(e) => e.subscriptionId,
        })
    }

    /// The merchant wallet the event belongs to, where there is one.
    pub fn merchant(&self) -> Option<Address> {
        Some(match self {
            Self::OperatorChanged(_) | Self::OperatorTransferStarted(_) => return None,
            Self::PlanCreated(e) => e.merchant,
            Self::PlanDeactivated(e) => e.merchant,
            Self::SubscriptionCreated(e) => e.merchant,
            Self::SubscriptionCharged(e) => e.merchant,
            Self::PaymentFailed(e) => e.merchant,
            Self::CancelAtPeriodEndSet(e) => e.merchant,
            Self::SubscriptionCancelled(e) => e.merchant,
            Self::SubscriptionEnded(e) => e.merchant,
            Self::PlanTrial(e) => e.merchant,
            Self::PlanChanged(e) => e.merchant,
            Self::PlanChangeScheduled(e) => e.merchant,
            Self::PlanChangeCancelled(e) => e.merchant,
            Self::SubscriptionRefunded(e) => e.merchant,
        })
    }

    /// The event's Solidity name, e.g. `SubscriptionCharged`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::OperatorChanged(_) => "OperatorChanged",
            Self::OperatorTransferStarted(_) => "OperatorTransferStarted",
            Self::PlanCreated(_) => "PlanCreated",
            Self::PlanDeactivated(_) => "PlanDeactivated",
            Self::SubscriptionCreated(_) => "SubscriptionCreated",
            Self::SubscriptionCharged(_) => "SubscriptionCharged",
            Self::PaymentFailed(_) => "PaymentFailed",
            Self::CancelAtPeriodEndSet(_) => "CancelAtPeriodEndSet",
            Self::SubscriptionCancelled(_) => "SubscriptionCancelled",
            Self::SubscriptionEnded(_) => "SubscriptionEnded",
            Self::PlanTrial(_) => "PlanTrial",
            Self::PlanChanged(_) => "PlanChanged",
            Self::PlanChangeScheduled(_) => "PlanChangeScheduled",
            Self::PlanChangeCancelled(_) => "PlanChangeCancelled",
            Self::SubscriptionRefunded(_) => "SubscriptionRefunded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{LogData, address, b256};
    use alloy::sol_types::SolEvent;

    fn log_of<E: SolEvent>(e: &E) -> Log {
        Log {
            address: Address::ZERO,
            data: e.encode_log_data(),
        }
    }

    #[test]
    fn charged_log_round_trips_through_decode() {
        let ev = SM::SubscriptionCharged {
            subscriptionId: U256::from(7),
            merchant: address!("00000000000000000000000000000000000000aa"),
            subscriber: address!("00000000000000000000000000000000000000bb"),
            planId: U256::from(3),
            amount: U256::from(9_990_000u64),
            period: 2,
            periodStart: 1_700_000_000,
            periodEnd: 1_702_592_000,
            attempt: 1,
        };
        let decoded = ContractEvent::decode(&log_of(&ev)).unwrap();
        assert_eq!(decoded, ContractEvent::SubscriptionCharged(ev));
        assert_eq!(decoded.kind(), Some(EventKind::Charged));
        assert_eq!(decoded.subscription_id(), Some(U256::from(7)));
    }

    #[test]
    fn unknown_signature_is_an_error_not_a_panic() {
        let topic = b256!("1111111111111111111111111111111111111111111111111111111111111111");
        let log = Log {
            address: Address::ZERO,
            data: LogData::new_unchecked(vec![topic], Default::default()),
        };
        assert_eq!(
            ContractEvent::decode(&log),
            Err(DecodeError::UnknownSignature(topic))
        );
    }

    #[test]
    fn truncated_data_is_malformed() {
        let ev = SM::PlanCreated {
            planId: U256::from(1),
            merchant: Address::ZERO,
            planRef: B256::ZERO,
            amount: U256::from(1),
            createdBy: Address::ZERO,
        };
        let mut log = log_of(&ev);
        log.data = LogData::new_unchecked(log.data.topics().to_vec(), Default::default());
        assert!(matches!(
            ContractEvent::decode(&log),
            Err(DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn event_kinds_round_trip_by_name() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }
}
