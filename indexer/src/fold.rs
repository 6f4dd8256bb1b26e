//! Subscription state as a pure fold over its events. The sink uses it to apply new blocks
//! and, after a reorg, to rebuild a subscription from the events that remain: one function,
//! so "apply" and "undo then replay" cannot disagree.

use alloy::primitives::B256;
use chainsub_abi::ContractEvent;
use chainsub_core::SubscriptionId;
use chainsub_core::{PendingPlanChange, SubscriptionState};

use crate::map::{end_reason_name, onchain_plan, onchain_subscription};
use crate::{Error, Result};

/// Subscription status, as stored and served (the one enum in `chainsub-core`).
pub use chainsub_core::SubscriptionStatus as Status;

/// What the fold needs to know about an event besides the log itself.
#[derive(Debug, Clone)]
pub struct EventCtx {
    pub chain_id: u64,
    pub tx_hash: B256,
    /// The event's `chain_events.id` (or placeholder, see [`SubscriptionState::created_event`]).
    pub event_ref: i64,
    pub block_time: u64,
    /// For `SubscriptionCreated`: the checkout's customer external id, resolved by the sink.
    pub customer_external_id: Option<String>,
}

/// Applies one event. `Ok(None)` with no prior state means the event is not a subscription
/// event, or belongs to a subscription created before START_BLOCK (nothing to project).
pub fn apply(
    state: Option<SubscriptionState>,
    ev: &ContractEvent,
    ctx: &EventCtx,
) -> Result<Option<SubscriptionState>> {
    if let ContractEvent::SubscriptionCreated(e) = ev {
        if state.is_some() {
            return Err(Error::Inconsistent(format!(
                "subscription {} created twice",
                e.subscriptionId
            )));
        }
        let onchain_id = onchain_subscription(e.subscriptionId)?;
        // A trial is the subscription's period 0, with nothing paid (contract v3).
        let trial = e.trialEnd != 0;
        return Ok(Some(SubscriptionState {
            onchain_id: onchain_id.db(),
            public_id: SubscriptionId::of_creation(ctx.chain_id, ctx.tx_hash, onchain_id.get()),
            merchant: e.merchant,
            subscriber: e.subscriber,
            plan_onchain_id: onchain_plan(e.planId)?.db(),
            amount: e.amount,
            customer_ref: e.customerRef,
            customer_external_id: ctx.customer_external_id.clone(),
            status: if trial {
                Status::Trialing
            } else {
                Status::Active
            },
            cancel_at_period_end: false,
            period: if trial { 0 } else { 1 },
            current_period_start: e.periodStart,
            current_period_end: e.periodEnd,
            failed_attempts: 0,
            next_retry_at: None,
            ended_reason: None,
            trial_end: trial.then_some(e.trialEnd),
            pending_plan_change: None,
            created_event: ctx.event_ref,
            last_event: ctx.event_ref,
            created_at: ctx.block_time,
            updated_at: ctx.block_time,
            events: 1,
        }));
    }
    let Some(mut s) = state else {
        return Ok(None);
    };
    match ev {
        ContractEvent::SubscriptionCharged(e) => {
            s.status = Status::Active;
            s.period = e.period;
            s.current_period_start = e.periodStart;
            s.current_period_end = e.periodEnd;
            s.failed_attempts = 0;
            s.next_retry_at = None;
        }
        ContractEvent::PaymentFailed(e) => {
            s.status = Status::PastDue;
            s.failed_attempts = e.attempt;
            s.next_retry_at = (e.nextRetryAt != 0).then_some(e.nextRetryAt);
        }
        // A cancellation, at once or at period end, drops a scheduled plan change.
        ContractEvent::CancelAtPeriodEndSet(_) => {
            s.cancel_at_period_end = true;
            s.pending_plan_change = None;
        }
        ContractEvent::SubscriptionCancelled(_) => {
            s.status = Status::Cancelled;
            s.pending_plan_change = None;
        }
        ContractEvent::SubscriptionEnded(e) => {
            s.status = Status::Ended;
            s.ended_reason = Some(end_reason_name(e.reason));
            s.pending_plan_change = None;
        }
        ContractEvent::PlanChanged(e) => {
            s.plan_onchain_id = onchain_plan(e.planId)?.db();
            s.amount = e.amount;
            s.pending_plan_change = None;
        }
        ContractEvent::PlanChangeScheduled(e) => {
            s.pending_plan_change = Some(PendingPlanChange {
                plan_onchain_id: onchain_plan(e.newPlanId)?.db(),
                amount: e.newAmount,
            });
        }
        ContractEvent::PlanChangeCancelled(_) => s.pending_plan_change = None,
        // Money back moves no state of the subscription (its ledger has the entry).
        ContractEvent::SubscriptionRefunded(_) => {}
        ContractEvent::SubscriptionCreated(_)
        | ContractEvent::PlanCreated(_)
        | ContractEvent::PlanDeactivated(_)
        | ContractEvent::OperatorChanged(_)
        | ContractEvent::OperatorTransferStarted(_)
        | ContractEvent::PlanTrial(_) => return Ok(Some(s)),
    }
    s.last_event = ctx.event_ref;
    s.updated_at = ctx.block_time;
    s.events += 1;
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{Address, U256};
    use chainsub_abi::SubscriptionManager as SM;

    const T0: u64 = 1_767_225_600; // 2026-01-01T00:00:00Z
    const MONTH: u64 = 31 * 86_400;

    fn ctx(r: i64, t: u64) -> EventCtx {
        EventCtx {
            chain_id: 31337,
            tx_hash: B256::repeat_byte(9),
            event_ref: r,
            block_time: t,
            customer_external_id: Some("cus_1".into()),
        }
    }

    fn created() -> ContractEvent {
        ContractEvent::SubscriptionCreated(SM::SubscriptionCreated {
            subscriptionId: U256::from(5),
            merchant: Address::repeat_byte(0xaa),
            subscriber: Address::repeat_byte(0xbb),
            planId: U256::from(2),
            customerRef: B256::repeat_byte(1),
            amount: U256::from(9_990_000u64),
            periodStart: T0,
            periodEnd: T0 + MONTH,
            trialEnd: 0,
        })
    }

    fn failed(attempt: u8, next: u64) -> ContractEvent {
        ContractEvent::PaymentFailed(SM::PaymentFailed {
            subscriptionId: U256::from(5),
            merchant: Address::repeat_byte(0xaa),
            subscriber: Address::repeat_byte(0xbb),
            planId: U256::from(2),
            amount: U256::from(9_990_000u64),
            period: 2,
            attempt,
            reason: 2,
            nextRetryAt: next,
        })
    }

    fn fold(events: &[ContractEvent]) -> SubscriptionState {
        let mut s = None;
        for (i, e) in events.iter().enumerate() {
            s = apply(s, e, &ctx(i as i64 + 1, T0 + i as u64)).unwrap();
        }
        s.unwrap()
    }

    #[test]
    fn created_subscription_is_active_with_the_first_period() {
        let s = fold(&[created()]);
        assert_eq!(s.status, Status::Active);
        assert_eq!(s.period, 1);
        assert_eq!(s.next_payment_at(), Some(T0 + MONTH));
        let snap = s.snapshot();
        assert_eq!(
            snap.id,
            SubscriptionId::of_creation(31337, B256::repeat_byte(9), 5)
        );
        assert_eq!(snap.current_period_start, "2026-01-01T00:00:00Z");
        assert_eq!(snap.amount, "9990000");
        assert_eq!(snap.customer_external_id.as_deref(), Some("cus_1"));
        assert_eq!(snap.subscriber, Address::repeat_byte(0xbb));
    }

    #[test]
    fn failed_payment_makes_past_due_with_retry_time_then_exhaustion_ends() {
        let retry = T0 + MONTH + 86_400;
        let s = fold(&[created(), failed(1, retry)]);
        assert_eq!(s.status, Status::PastDue);
        assert_eq!(s.failed_attempts, 1);
        assert_eq!(s.next_payment_at(), Some(retry));
        assert_eq!(s.last_event, 2);
        assert_eq!(s.events, 2, "each folded event is counted");
        let ended = ContractEvent::SubscriptionEnded(SM::SubscriptionEnded {
            subscriptionId: U256::from(5),
            merchant: Address::repeat_byte(0xaa),
            subscriber: Address::repeat_byte(0xbb),
            planId: U256::from(2),
            reason: 1,
        });
        let s = fold(&[created(), failed(1, retry), failed(3, 0), ended]);
        assert_eq!(s.status, Status::Ended);
        assert_eq!(s.ended_reason.as_deref(), Some("payment_failed"));
        assert_eq!(s.snapshot().next_payment_at, None);
    }

    #[test]
    fn a_trial_is_period_zero_until_the_first_charge_and_plan_changes_fold_in_order() {
        let trial_end = T0 + 14 * 86_400;
        let ContractEvent::SubscriptionCreated(mut c) = created() else {
            unreachable!()
        };
        c.periodEnd = trial_end;
        c.trialEnd = trial_end;
        let s = fold(&[ContractEvent::SubscriptionCreated(c.clone())]);
        assert_eq!((s.status, s.period), (Status::Trialing, 0));
        assert_eq!(s.trial_end, Some(trial_end));
        assert_eq!(s.next_payment_at(), Some(trial_end));
        let snap = s.snapshot();
        assert_eq!(snap.trial_end.as_deref(), Some("2026-01-15T00:00:00Z"));

        let who = (c.merchant, c.subscriber);
        let charged = ContractEvent::SubscriptionCharged(SM::SubscriptionCharged {
            subscriptionId: U256::from(5),
            merchant: who.0,
            subscriber: who.1,
            planId: U256::from(2),
            amount: U256::from(9_990_000u64),
            period: 1,
            periodStart: trial_end,
            periodEnd: trial_end + MONTH,
            attempt: 1,
        });
        let scheduled = ContractEvent::PlanChangeScheduled(SM::PlanChangeScheduled {
            subscriptionId: U256::from(5),
            merchant: who.0,
            subscriber: who.1,
            planId: U256::from(2),
            newPlanId: U256::from(4),
            newAmount: U256::from(4_990_000u64),
            effectiveAt: trial_end + MONTH,
        });
        let created = ContractEvent::SubscriptionCreated(c);
        let s = fold(&[created.clone(), charged.clone(), scheduled.clone()]);
        assert_eq!(
            (s.status, s.period, s.trial_end),
            (Status::Active, 1, Some(trial_end))
        );
        let pending = s.pending_plan_change.expect("scheduled");
        assert_eq!(
            (pending.plan_onchain_id, pending.amount),
            (4, U256::from(4_990_000u64))
        );
        assert_eq!(s.snapshot().pending_amount.as_deref(), Some("4990000"));

        let applied = ContractEvent::PlanChanged(SM::PlanChanged {
            subscriptionId: U256::from(5),
            merchant: who.0,
            subscriber: who.1,
            planId: U256::from(4),
            previousPlanId: U256::from(2),
            amount: U256::from(4_990_000u64),
            proration: U256::ZERO,
            period: 2,
        });
        let s = fold(&[created.clone(), charged.clone(), scheduled.clone(), applied]);
        assert_eq!((s.plan_onchain_id, s.amount), (4, U256::from(4_990_000u64)));
        assert_eq!(s.pending_plan_change, None, "applied");

        // A cancellation drops a scheduled change; a refund moves no state but is counted.
        let refunded = ContractEvent::SubscriptionRefunded(SM::SubscriptionRefunded {
            subscriptionId: U256::from(5),
            merchant: who.0,
            subscriber: who.1,
            planId: U256::from(2),
            period: 1,
            amount: U256::from(1_000_000u64),
            totalRefunded: U256::from(1_000_000u64),
        });
        let cancelled = ContractEvent::SubscriptionCancelled(SM::SubscriptionCancelled {
            subscriptionId: U256::from(5),
            merchant: who.0,
            subscriber: who.1,
            planId: U256::from(2),
            by: who.0,
        });
        let s = fold(&[created, charged, scheduled, refunded, cancelled]);
        assert_eq!(
            (s.status, s.pending_plan_change, s.events),
            (Status::Cancelled, None, 5)
        );
    }

    #[test]
    fn event_of_unknown_subscription_projects_nothing() {
        assert_eq!(apply(None, &failed(1, 0), &ctx(1, T0)).unwrap(), None);
    }

    #[test]
    fn second_creation_is_an_inconsistency() {
        let s = fold(&[created()]);
        assert!(apply(Some(s), &created(), &ctx(9, T0)).is_err());
    }
}
