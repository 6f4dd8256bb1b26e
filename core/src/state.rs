//! One subscription's state after some prefix of its events: what the indexer's fold
//! computes, the `subscriptions` row the store writes and reads back, and the source of each
//! event's [`SubscriptionSnapshot`].

use alloy::primitives::{Address, B256, U256};

use crate::time::rfc3339;
use crate::{SubscriptionId, SubscriptionSnapshot, SubscriptionStatus};

/// One subscription after some prefix of its events (a `subscriptions` row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionState {
    /// The subscription's on-chain id.
    pub onchain_id: i64,
    /// The opaque public id ([`SubscriptionId::of_creation`]), fixed at creation.
    pub public_id: SubscriptionId,
    /// The merchant's wallet (the payee).
    pub merchant: Address,
    /// The subscriber's wallet (the payer).
    pub subscriber: Address,
    /// The plan's on-chain id.
    pub plan_onchain_id: i64,
    /// The amount charged per period, in USDC base units (6 decimals).
    pub amount: U256,
    /// The on-chain customer reference, tying the subscription to its checkout.
    pub customer_ref: B256,
    /// The merchant's customer id, resolved from `customer_ref` at creation (`None` if unresolved).
    pub customer_external_id: Option<String>,
    /// The current status.
    pub status: SubscriptionStatus,
    /// Whether the subscription ends when the current period is over.
    pub cancel_at_period_end: bool,
    /// The number of the current billing period (1 for the first paid one; 0 in a trial).
    pub period: u32,
    /// When the current period started, in Unix seconds.
    pub current_period_start: u64,
    /// When the current period ends, in Unix seconds.
    pub current_period_end: u64,
    /// Counted failed payments of the period due (0 after a successful charge).
    pub failed_attempts: u8,
    /// When a past-due payment may be retried, in Unix seconds (`None` when none is scheduled).
    pub next_retry_at: Option<u64>,
    /// Why the subscription ended (e.g. `payment_failed`), once ended.
    pub ended_reason: Option<String>,
    /// When its free trial ends (or ended), in Unix seconds; `None` without a trial.
    pub trial_end: Option<u64>,
    /// A downgrade scheduled for the next renewal, if any.
    pub pending_plan_change: Option<PendingPlanChange>,
    /// `chain_events.id` of the creating and of the latest event. While a batch is being
    /// applied, events not yet inserted are referred to by a negative placeholder
    /// (`-(index in batch) - 1`) that the sink swaps for the real id after the insert.
    pub created_event: i64,
    /// `chain_events.id` (or placeholder) of the latest event folded.
    pub last_event: i64,
    /// Block time of the creating event, in Unix seconds.
    pub created_at: u64,
    /// Block time of the latest event folded, in Unix seconds.
    pub updated_at: u64,
    /// How many of its events have been folded: its latest event's `sequence` (1-based place
    /// among the subscription's events in chain order). Stored with the subscription so the
    /// sink numbers a batch's events without reading any earlier event.
    pub events: u64,
}

impl SubscriptionState {
    /// When the keeper will next try to charge: the period end, the retry time while past
    /// due, nothing once terminal.
    pub fn next_payment_at(&self) -> Option<u64> {
        match self.status {
            SubscriptionStatus::Cancelled | SubscriptionStatus::Ended => None,
            SubscriptionStatus::PastDue => self.next_retry_at,
            SubscriptionStatus::Active | SubscriptionStatus::Trialing => {
                Some(self.current_period_end)
            }
        }
    }

    /// The event snapshot: `chain_events.snap_*` (the contract with the API and webhooks).
    pub fn snapshot(&self) -> SubscriptionSnapshot {
        SubscriptionSnapshot {
            id: self.public_id.clone(),
            status: self.status,
            cancel_at_period_end: self.cancel_at_period_end,
            period: self.period,
            current_period_start: rfc3339(self.current_period_start),
            current_period_end: rfc3339(self.current_period_end),
            next_payment_at: self.next_payment_at().map(rfc3339),
            failed_attempts: self.failed_attempts,
            subscriber: self.subscriber,
            customer_external_id: self.customer_external_id.clone(),
            amount: self.amount.to_string(),
            plan_onchain_id: self.plan_onchain_id,
            trial_end: self.trial_end.map(rfc3339),
            pending_plan_onchain_id: self.pending_plan_change.map(|p| p.plan_onchain_id),
            pending_amount: self.pending_plan_change.map(|p| p.amount.to_string()),
        }
    }
}

/// A plan change scheduled for the next renewal (`PlanChangeScheduled`): it takes effect at
/// the current period's end, at the target plan's amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingPlanChange {
    /// The target plan's on-chain id.
    pub plan_onchain_id: i64,
    /// The target plan's amount per period, in base units.
    pub amount: U256,
}
