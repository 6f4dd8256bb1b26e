//! Failed renewals on a real anvil: a failed pull is recorded without reverting, retries wait
//! RETRY_INTERVAL, a successful retry returns to active, and the third failure ends it.

use crate::contract_support::{
    DAY, Fixture, PRICE, Sub, block_time, manager_events, months_after, status,
};
use alloy::primitives::U256;
use alloy::rpc::types::TransactionReceipt;
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerErrors as E};
use chainsub_abi::{ContractEvent, EndReason, FailureReason};

/// The PaymentFailed the contract must emit for `sub`'s period 2.
fn failed(fx: &Fixture, sub: &Sub, attempt: u8, reason: FailureReason, next: u64) -> ContractEvent {
    ContractEvent::PaymentFailed(SM::PaymentFailed {
        subscriptionId: sub.id,
        merchant: fx.merchant,
        subscriber: fx.customer,
        planId: fx.plan_id,
        amount: fx.amount,
        period: 2,
        attempt,
        reason: reason_code(reason),
        nextRetryAt: next,
    })
}

/// The Solidity enum's value (0 is `None`).
fn reason_code(reason: FailureReason) -> u8 {
    match reason {
        FailureReason::InsufficientAllowance => 1,
        FailureReason::InsufficientBalance => 2,
        FailureReason::TransferFailed => 3,
    }
}

async fn revoke_allowance(fx: &Fixture) {
    send_as!(
        fx.customer,
        fx.chain.usdc().approve(fx.chain.manager, U256::ZERO)
    );
}

/// Charges and returns (receipt, its block time).
async fn charge_at(fx: &Fixture, sub: &Sub) -> (TransactionReceipt, u64) {
    let receipt = fx.charge(sub.id).await;
    let t = block_time(&fx.chain, &receipt).await;
    (receipt, t)
}

#[tokio::test]
async fn revoked_allowance_emits_payment_failed_sets_past_due_and_does_not_revert() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    revoke_allowance(&fx).await;
    fx.advance_to(months_after(sub.anchor, 1)).await;

    let (receipt, t) = charge_at(&fx, &sub).await;

    let events = manager_events(&fx.chain, &receipt);
    assert_eq!(
        events,
        vec![failed(
            &fx,
            &sub,
            1,
            FailureReason::InsufficientAllowance,
            t + DAY
        )]
    );
    let ContractEvent::PaymentFailed(e) = &events[0] else {
        unreachable!()
    };
    assert_eq!(
        FailureReason::from_u8(e.reason),
        Some(FailureReason::InsufficientAllowance)
    );
    let rec = fx.record(sub.id).await;
    assert_eq!(
        (
            rec.status,
            rec.period,
            rec.failedAttempts,
            rec.lastFailureAt
        ),
        (status::PAST_DUE, 1, 1, t)
    );
    assert_eq!(fx.balance(fx.merchant).await, U256::from(PRICE));
}

#[tokio::test]
async fn balance_too_low_emits_payment_failed_with_insufficient_balance() {
    // Exactly one period's worth: the first charge empties the wallet.
    let fx = Fixture::with_funds(PRICE).await;
    let sub = fx.subscribe().await;
    fx.advance_to(months_after(sub.anchor, 1)).await;

    let (receipt, t) = charge_at(&fx, &sub).await;

    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![failed(
            &fx,
            &sub,
            1,
            FailureReason::InsufficientBalance,
            t + DAY
        )]
    );
    assert_eq!(fx.record(sub.id).await.status, status::PAST_DUE);
}

#[tokio::test]
async fn retry_waits_retry_interval_then_success_returns_to_active() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    revoke_allowance(&fx).await;
    let end1 = months_after(sub.anchor, 1);
    fx.advance_to(end1).await;
    let (_, t1) = charge_at(&fx, &sub).await;
    send_as!(
        fx.customer,
        fx.chain.usdc().approve(fx.chain.manager, U256::MAX)
    );

    let too_soon = fx.charge_reverts(sub.id).await;
    assert_eq!(too_soon, E::NotDue(SM::NotDue { dueAt: t1 + DAY }));
    assert_eq!(
        fx.chain
            .manager()
            .nextAttemptAt(sub.id)
            .call()
            .await
            .unwrap(),
        t1 + DAY
    );

    fx.advance_to(t1 + DAY).await;
    let (receipt, _) = charge_at(&fx, &sub).await;

    // The retry charges the same period, still anchored on the start day.
    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![ContractEvent::SubscriptionCharged(
            SM::SubscriptionCharged {
                subscriptionId: sub.id,
                merchant: fx.merchant,
                subscriber: fx.customer,
                planId: fx.plan_id,
                amount: fx.amount,
                period: 2,
                periodStart: end1,
                periodEnd: months_after(sub.anchor, 2),
                attempt: 2,
            }
        )]
    );
    let rec = fx.record(sub.id).await;
    assert_eq!(
        (
            rec.status,
            rec.period,
            rec.failedAttempts,
            rec.lastFailureAt
        ),
        (status::ACTIVE, 2, 0, 0)
    );
    assert_eq!(fx.balance(fx.merchant).await, U256::from(2 * PRICE));
}

#[tokio::test]
async fn third_failed_attempt_ends_subscription_with_reason_payment_failed() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    revoke_allowance(&fx).await;
    fx.advance_to(months_after(sub.anchor, 1)).await;

    let (r1, t1) = charge_at(&fx, &sub).await;
    fx.advance_to(t1 + DAY).await;
    let (r2, t2) = charge_at(&fx, &sub).await;
    fx.advance_to(t2 + DAY).await;
    let (r3, _) = charge_at(&fx, &sub).await;

    let reason = FailureReason::InsufficientAllowance;
    assert_eq!(
        manager_events(&fx.chain, &r1),
        vec![failed(&fx, &sub, 1, reason, t1 + DAY)]
    );
    assert_eq!(
        manager_events(&fx.chain, &r2),
        vec![failed(&fx, &sub, 2, reason, t2 + DAY)]
    );
    let last = manager_events(&fx.chain, &r3);
    assert_eq!(
        last,
        vec![
            failed(&fx, &sub, 3, reason, 0),
            ContractEvent::SubscriptionEnded(SM::SubscriptionEnded {
                subscriptionId: sub.id,
                merchant: fx.merchant,
                subscriber: fx.customer,
                planId: fx.plan_id,
                reason: 1,
            }),
        ]
    );
    let ContractEvent::SubscriptionEnded(e) = &last[1] else {
        unreachable!()
    };
    assert_eq!(EndReason::from_u8(e.reason), Some(EndReason::PaymentFailed));
    assert_eq!(fx.record(sub.id).await.status, status::ENDED);
    let live = fx
        .chain
        .manager()
        .liveSubscriptionOf(fx.plan_id, fx.customer)
        .call()
        .await
        .unwrap();
    assert_eq!(
        live,
        U256::ZERO,
        "an ended subscription frees the plan slot"
    );

    // Terminal: a later charge is refused, even with the allowance restored.
    send_as!(
        fx.customer,
        fx.chain.usdc().approve(fx.chain.manager, U256::MAX)
    );
    fx.advance_to(t2 + 3 * DAY).await;
    assert_eq!(
        fx.charge_reverts(sub.id).await,
        E::NotLive(SM::NotLive {
            subscriptionId: sub.id
        })
    );
    assert_eq!(fx.balance(fx.merchant).await, U256::from(PRICE));
}

#[tokio::test]
async fn past_due_subscription_set_to_cancel_at_period_end_ends_at_the_next_charge() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    revoke_allowance(&fx).await;
    let end1 = months_after(sub.anchor, 1);
    fx.advance_to(end1).await;
    charge_at(&fx, &sub).await;

    // The customer gives up on the unpaid period: no retry is waited for or attempted.
    let receipt = send_as!(fx.customer, fx.chain.manager().cancelAtPeriodEnd(sub.id));
    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![ContractEvent::CancelAtPeriodEndSet(
            SM::CancelAtPeriodEndSet {
                subscriptionId: sub.id,
                merchant: fx.merchant,
                subscriber: fx.customer,
                planId: fx.plan_id,
                by: fx.customer,
                periodEnd: end1,
            }
        )]
    );
    assert_eq!(
        fx.chain
            .manager()
            .nextAttemptAt(sub.id)
            .call()
            .await
            .unwrap(),
        end1
    );
    let (receipt, _) = charge_at(&fx, &sub).await;

    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![ContractEvent::SubscriptionEnded(SM::SubscriptionEnded {
            subscriptionId: sub.id,
            merchant: fx.merchant,
            subscriber: fx.customer,
            planId: fx.plan_id,
            reason: 2,
        })]
    );
    assert_eq!(fx.record(sub.id).await.status, status::ENDED);
    assert_eq!(fx.balance(fx.merchant).await, U256::from(PRICE));
}
