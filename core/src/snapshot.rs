//! A subscription as of one of its events: the `snap_*` columns of `chain_events` (migration
//! 0025; JSON before). The indexer writes it (one per subscription event, in the same
//! transaction as the event), the API's event view and every webhook body read it. One type
//! on both sides, so what is stored is what is served.

use alloy::primitives::Address;
use serde::{Deserialize, Serialize};

use crate::{SubscriptionId, SubscriptionStatus};

/// The subscription right after an event. Times are RFC 3339 UTC with seconds (as served);
/// `amount` is in base units (decimal text, as the contract emits it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionSnapshot {
    /// The opaque public id ([`SubscriptionId::of_creation`]).
    pub id: SubscriptionId,
    /// The status after the event.
    pub status: SubscriptionStatus,
    /// Whether the subscription ends when the current period is over.
    pub cancel_at_period_end: bool,
    /// The number of the current billing period (1 for the first).
    pub period: u32,
    /// When the current period started.
    pub current_period_start: String,
    /// When the current period ends.
    pub current_period_end: String,
    /// When the keeper will next try to charge; `None` once terminal.
    pub next_payment_at: Option<String>,
    /// Counted failed payments of the period due (0 after a successful charge).
    pub failed_attempts: u8,
    /// The subscriber's wallet (the payer).
    pub subscriber: Address,
    /// The merchant's customer id from the checkout that produced it, if resolved.
    pub customer_external_id: Option<String>,
    /// The amount charged per period, in base units.
    pub amount: String,
    /// The plan's on-chain id.
    pub plan_onchain_id: i64,
    /// When the free trial ends (or ended); `None` without a trial.
    pub trial_end: Option<String>,
    /// The on-chain plan of a change scheduled for the next renewal, if any.
    pub pending_plan_onchain_id: Option<i64>,
    /// That plan's amount per period, in base units.
    pub pending_amount: Option<String>,
}

impl SubscriptionSnapshot {
    /// A past-due snapshot for tests (one shape for every crate's tests), with the given
    /// customer reference and next payment time.
    #[doc(hidden)]
    pub fn example(external: Option<&str>, next: Option<&str>) -> Self {
        Self {
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
            trial_end: None,
            pending_plan_onchain_id: None,
            pending_amount: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::B256;

    #[test]
    fn a_snapshot_round_trips_through_json() {
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
            trial_end: Some("2026-01-15T00:00:00Z".into()),
            pending_plan_onchain_id: Some(4),
            pending_amount: Some("4990000".into()),
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
}
