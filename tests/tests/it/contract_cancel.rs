//! Cancelling on a real anvil: at period end (ended by the keeper's charge), at once by the
//! subscriber or the merchant, by the operator for the merchant on a plan the operator created
//! (never on one the merchant created itself), never by a stranger, and nothing acts on a
//! terminal one.

use crate::contract_support::{Fixture, PRICE, Sub, manager_events, months_after, status};
use alloy::primitives::{Address, B256, U256};
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerErrors as E};
use chainsub_abi::{ContractEvent, EndReason};
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts;

fn cancelled(fx: &Fixture, sub: &Sub, by: Address) -> ContractEvent {
    ContractEvent::SubscriptionCancelled(SM::SubscriptionCancelled {
        subscriptionId: sub.id,
        merchant: fx.merchant,
        subscriber: fx.customer,
        planId: fx.plan_id,
        by,
    })
}

#[tokio::test]
async fn cancel_at_period_end_then_charge_at_period_end_ends_without_charging() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    let end1 = months_after(sub.anchor, 1);

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
    let rec = fx.record(sub.id).await;
    assert_eq!((rec.status, rec.cancelAtPeriodEnd), (status::ACTIVE, true));
    // The customer keeps the period they paid for: nothing ends it early.
    assert_eq!(
        fx.charge_reverts(sub.id).await,
        E::NotDue(SM::NotDue { dueAt: end1 })
    );

    fx.advance_to(end1).await;
    let customer_before = fx.balance(fx.customer).await;
    let receipt = fx.charge(sub.id).await;

    let events = manager_events(&fx.chain, &receipt);
    assert_eq!(
        events,
        vec![ContractEvent::SubscriptionEnded(SM::SubscriptionEnded {
            subscriptionId: sub.id,
            merchant: fx.merchant,
            subscriber: fx.customer,
            planId: fx.plan_id,
            reason: 2,
        })]
    );
    let ContractEvent::SubscriptionEnded(e) = &events[0] else {
        unreachable!()
    };
    assert_eq!(
        EndReason::from_u8(e.reason),
        Some(EndReason::CancelAtPeriodEnd)
    );
    assert_eq!(fx.record(sub.id).await.status, status::ENDED);
    assert_eq!(fx.balance(fx.customer).await, customer_before);
    assert_eq!(fx.balance(fx.merchant).await, U256::from(PRICE));
}

#[tokio::test]
async fn merchant_may_set_cancel_at_period_end_but_only_once() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;

    let receipt = send_as!(fx.merchant, fx.chain.manager().cancelAtPeriodEnd(sub.id));
    let again = revert_as!(fx.customer, fx.chain.manager().cancelAtPeriodEnd(sub.id));

    match manager_events(&fx.chain, &receipt).as_slice() {
        [ContractEvent::CancelAtPeriodEndSet(e)] => assert_eq!(e.by, fx.merchant),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        again,
        E::AlreadyCancelling(SM::AlreadyCancelling {
            subscriptionId: sub.id
        })
    );
}

#[tokio::test]
async fn subscriber_cancels_immediately() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;

    let receipt = send_as!(fx.customer, fx.chain.manager().cancel(sub.id));

    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![cancelled(&fx, &sub, fx.customer)]
    );
    assert_eq!(fx.record(sub.id).await.status, status::CANCELLED);
}

#[tokio::test]
async fn merchant_cancels_immediately() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;

    let receipt = send_as!(fx.merchant, fx.chain.manager().cancel(sub.id));

    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![cancelled(&fx, &sub, fx.merchant)]
    );
    assert_eq!(fx.record(sub.id).await.status, status::CANCELLED);
}

#[tokio::test]
async fn stranger_cannot_cancel_or_schedule_cancel() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;

    let cancel = revert_as!(fx.stranger, fx.chain.manager().cancel(sub.id));
    let at_end = revert_as!(fx.stranger, fx.chain.manager().cancelAtPeriodEnd(sub.id));
    // The keeper may charge, but it is a stranger for cancelling.
    let keeper = revert_as!(fx.keeper, fx.chain.manager().cancel(sub.id));

    let refused = E::NotAuthorized(SM::NotAuthorized {});
    assert_eq!(
        (cancel, at_end, keeper),
        (refused.clone(), refused.clone(), refused)
    );
    let rec = fx.record(sub.id).await;
    assert_eq!((rec.status, rec.cancelAtPeriodEnd), (status::ACTIVE, false));
}

#[tokio::test]
async fn nothing_acts_on_a_cancelled_subscription() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    send_as!(fx.customer, fx.chain.manager().cancel(sub.id));
    fx.advance_to(months_after(sub.anchor, 1)).await;

    let not_live = E::NotLive(SM::NotLive {
        subscriptionId: sub.id,
    });
    assert_eq!(fx.charge_reverts(sub.id).await, not_live);
    assert_eq!(
        revert_as!(fx.customer, fx.chain.manager().cancel(sub.id)),
        not_live
    );
    assert_eq!(
        revert_as!(fx.merchant, fx.chain.manager().cancelAtPeriodEnd(sub.id)),
        not_live
    );
    assert_eq!(fx.record(sub.id).await.status, status::CANCELLED);
    assert_eq!(fx.balance(fx.merchant).await, U256::from(PRICE));

    // The plan slot is free again: the customer may start a new subscription.
    let again = send_as!(
        fx.customer,
        fx.chain
            .manager()
            .subscribe(fx.plan_id, fx.merchant, fx.amount, B256::ZERO)
    );
    match manager_events(&fx.chain, &again).first() {
        Some(ContractEvent::SubscriptionCreated(e)) => {
            assert_eq!(e.subscriptionId, sub.id + U256::from(1))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn nothing_acts_on_an_ended_subscription() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    send_as!(fx.customer, fx.chain.manager().cancelAtPeriodEnd(sub.id));
    fx.advance_to(months_after(sub.anchor, 1)).await;
    fx.charge(sub.id).await;

    let not_live = E::NotLive(SM::NotLive {
        subscriptionId: sub.id,
    });
    assert_eq!(fx.charge_reverts(sub.id).await, not_live);
    assert_eq!(
        revert_as!(fx.merchant, fx.chain.manager().cancel(sub.id)),
        not_live
    );
    assert_eq!(fx.record(sub.id).await.status, status::ENDED);
}

#[tokio::test]
async fn unknown_subscription_is_reported_as_unknown() {
    let fx = Fixture::new().await;
    let missing = U256::from(99);

    assert_eq!(
        fx.charge_reverts(missing).await,
        E::UnknownSubscription(SM::UnknownSubscription {
            subscriptionId: missing
        })
    );
}

#[tokio::test]
async fn the_operator_cancels_for_the_merchant_on_a_plan_it_created() {
    let fx = Fixture::new().await;
    let operator = DevChain::address(accounts::OPERATOR);
    assert!(
        fx.chain
            .manager()
            .createdByOperator(fx.plan_id)
            .call()
            .await
            .unwrap()
    );
    let first = fx.subscribe().await;

    let receipt = send_as!(operator, fx.chain.manager().cancelAtPeriodEnd(first.id));
    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![ContractEvent::CancelAtPeriodEndSet(
            SM::CancelAtPeriodEndSet {
                subscriptionId: first.id,
                merchant: fx.merchant,
                subscriber: fx.customer,
                planId: fx.plan_id,
                by: operator,
                periodEnd: months_after(first.anchor, 1),
            }
        )]
    );
    // Cancelling at once after asking for period end is still allowed.
    let receipt = send_as!(operator, fx.chain.manager().cancel(first.id));
    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![cancelled(&fx, &first, operator)]
    );
    assert_eq!(fx.record(first.id).await.status, status::CANCELLED);
    let again = revert_as!(operator, fx.chain.manager().cancel(first.id));
    assert_eq!(
        again,
        E::NotLive(SM::NotLive {
            subscriptionId: first.id
        })
    );
}

#[tokio::test]
async fn the_operator_cannot_cancel_on_a_plan_the_merchant_created_itself() {
    let fx = Fixture::new().await;
    let operator = DevChain::address(accounts::OPERATOR);
    send_as!(
        fx.merchant,
        fx.chain
            .manager()
            .createPlan(fx.merchant, U256::from(PRICE), B256::repeat_byte(0x22))
    );
    let own_plan = U256::from(2);
    assert!(
        !fx.chain
            .manager()
            .createdByOperator(own_plan)
            .call()
            .await
            .unwrap()
    );
    let receipt = send_as!(
        fx.customer,
        fx.chain
            .manager()
            .subscribe(own_plan, fx.merchant, fx.amount, B256::repeat_byte(0xdd))
    );
    let id = match manager_events(&fx.chain, &receipt).first() {
        Some(ContractEvent::SubscriptionCreated(e)) => e.subscriptionId,
        other => panic!("subscribe emitted {other:?} first"),
    };

    let cancel = revert_as!(operator, fx.chain.manager().cancel(id));
    let at_end = revert_as!(operator, fx.chain.manager().cancelAtPeriodEnd(id));
    let refused = E::NotAuthorized(SM::NotAuthorized {});
    assert_eq!((cancel, at_end), (refused.clone(), refused));
    let rec = fx.record(id).await;
    assert_eq!((rec.status, rec.cancelAtPeriodEnd), (status::ACTIVE, false));
    // The merchant still can.
    send_as!(fx.merchant, fx.chain.manager().cancel(id));
    assert_eq!(fx.record(id).await.status, status::CANCELLED);
}

#[tokio::test]
async fn after_a_hand_over_only_the_new_operator_cancels_for_merchants() {
    let fx = Fixture::new().await;
    let old = DevChain::address(accounts::OPERATOR);
    let new = fx.stranger;
    let sub = fx.subscribe().await;
    send_as!(old, fx.chain.manager().transferOperator(new));
    send_as!(new, fx.chain.manager().acceptOperator());

    let refused = revert_as!(old, fx.chain.manager().cancel(sub.id));
    assert_eq!(refused, E::NotAuthorized(SM::NotAuthorized {}));
    let receipt = send_as!(new, fx.chain.manager().cancel(sub.id));
    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![cancelled(&fx, &sub, new)]
    );
}
