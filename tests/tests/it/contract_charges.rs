//! Subscribing and renewing on a real anvil: USDC moves customer -> merchant, periods follow
//! the calendar, and a period is never charged early or twice.

use crate::contract_support::{
    DAY, Fixture, PRICE, block_time, manager_events, months_after, status,
};
use alloy::primitives::{B256, U256};
use alloy::providers::Provider;
use chainsub_abi::ContractEvent;
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerErrors as E};

#[tokio::test]
async fn subscribe_moves_usdc_to_merchant_and_emits_created_then_charged_period_1() {
    let fx = Fixture::new().await;
    let customer_before = fx.balance(fx.customer).await;
    let customer_ref = B256::repeat_byte(0xab);

    let receipt = send_as!(
        fx.customer,
        fx.chain
            .manager()
            .subscribe(fx.plan_id, fx.merchant, fx.amount, customer_ref)
    );

    let start = block_time(&fx.chain, &receipt).await;
    let end = months_after(start, 1);
    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![
            ContractEvent::SubscriptionCreated(SM::SubscriptionCreated {
                subscriptionId: U256::from(1),
                merchant: fx.merchant,
                subscriber: fx.customer,
                planId: fx.plan_id,
                customerRef: customer_ref,
                amount: fx.amount,
                periodStart: start,
                periodEnd: end,
                trialEnd: 0,
            }),
            ContractEvent::SubscriptionCharged(SM::SubscriptionCharged {
                subscriptionId: U256::from(1),
                merchant: fx.merchant,
                subscriber: fx.customer,
                planId: fx.plan_id,
                amount: fx.amount,
                period: 1,
                periodStart: start,
                periodEnd: end,
                attempt: 1,
            }),
        ]
    );
    assert_eq!(fx.balance(fx.customer).await, customer_before - fx.amount);
    assert_eq!(fx.balance(fx.merchant).await, fx.amount);
    let rec = fx.record(U256::from(1)).await;
    assert_eq!(
        (rec.status, rec.period, rec.anchor, rec.periodEnd),
        (status::ACTIVE, 1, start, end)
    );
}

#[tokio::test]
async fn subscribe_without_allowance_reverts_and_creates_nothing() {
    let fx = Fixture::new().await;
    send_as!(
        fx.customer,
        fx.chain.usdc().approve(fx.chain.manager, U256::ZERO)
    );

    let err = revert_as!(
        fx.customer,
        fx.chain
            .manager()
            .subscribe(fx.plan_id, fx.merchant, fx.amount, B256::ZERO)
    );

    // FailureReason.InsufficientAllowance = 1
    assert_eq!(
        err,
        E::FirstPaymentFailed(SM::FirstPaymentFailed { reason: 1 })
    );
    assert_eq!(
        fx.chain.manager().subscriptionCount().call().await.unwrap(),
        U256::ZERO
    );
}

#[tokio::test]
async fn second_live_subscription_to_the_same_plan_is_refused() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;

    let err = revert_as!(
        fx.customer,
        fx.chain
            .manager()
            .subscribe(fx.plan_id, fx.merchant, fx.amount, B256::ZERO)
    );

    assert_eq!(
        err,
        E::AlreadySubscribed(SM::AlreadySubscribed {
            subscriptionId: sub.id
        })
    );
}

#[tokio::test]
async fn renewal_after_increase_time_charges_period_2_anchored_on_start() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    let end1 = months_after(sub.anchor, 1);
    fx.advance_to(end1).await;

    let receipt = fx.charge(sub.id).await;

    let end2 = months_after(sub.anchor, 2);
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
                periodEnd: end2,
                attempt: 1,
            }
        )]
    );
    assert_eq!(fx.balance(fx.merchant).await, U256::from(2 * PRICE));
    let rec = fx.record(sub.id).await;
    assert_eq!(
        (rec.status, rec.period, rec.periodStart, rec.periodEnd),
        (status::ACTIVE, 2, end1, end2)
    );
}

#[tokio::test]
async fn renewal_before_due_is_refused_with_not_due() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    let end1 = months_after(sub.anchor, 1);
    // An hour short of the period end: far more than this test can take to send.
    fx.advance_to(end1 - 3_600).await;

    let err = fx.charge_reverts(sub.id).await;

    assert_eq!(err, E::NotDue(SM::NotDue { dueAt: end1 }));
    assert_eq!(fx.balance(fx.merchant).await, U256::from(PRICE));
}

#[tokio::test]
async fn a_period_is_not_charged_again_after_renewal() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    fx.advance_to(months_after(sub.anchor, 1)).await;
    fx.charge(sub.id).await;

    let err = fx.charge_reverts(sub.id).await;

    assert_eq!(
        err,
        E::NotDue(SM::NotDue {
            dueAt: months_after(sub.anchor, 2)
        })
    );
    assert_eq!(fx.balance(fx.merchant).await, U256::from(2 * PRICE));
}

#[tokio::test]
async fn two_keepers_charging_in_the_same_block_charge_the_period_once() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    fx.advance_to(months_after(sub.anchor, 1)).await;
    let customer_before = fx.balance(fx.customer).await;

    // Both transactions land in one block, so neither sees the other in gas estimation:
    // only the contract's own guard can stop the second.
    let _: serde_json::Value = fx
        .chain
        .provider
        .raw_request("evm_setAutomine".into(), (false,))
        .await
        .unwrap();
    let manager = fx.chain.manager();
    let a = manager
        .charge(sub.id)
        .from(fx.keeper)
        .gas(300_000)
        .send()
        .await
        .unwrap();
    let b = manager
        .charge(sub.id)
        .from(fx.stranger)
        .gas(300_000)
        .send()
        .await
        .unwrap();
    fx.chain.mine(1).await;
    let ra = a.get_receipt().await.unwrap();
    let rb = b.get_receipt().await.unwrap();

    assert_eq!(ra.block_number, rb.block_number, "one block");
    assert!(ra.status(), "first charge succeeds");
    assert!(!rb.status(), "second charge of the same period reverts");
    assert!(manager_events(&fx.chain, &rb).is_empty());
    assert_eq!(
        fx.balance(fx.customer).await,
        customer_before - U256::from(PRICE)
    );
    assert_eq!(fx.record(sub.id).await.period, 2);
}

/// Catch-up rule: nobody charged for three months (a keeper outage). Before v2.1 anyone could
/// pull the three missed periods back to back — here in one `chargeMany` naming the id three
/// times. Now one charge collects one period, the one that contains now; the periods that
/// ended unbilled are skipped, and the anchor still holds.
#[tokio::test]
async fn missed_periods_are_skipped_and_a_charge_collects_one_period() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    fx.advance_to(months_after(sub.anchor, 3) + DAY).await;
    let customer_before = fx.balance(fx.customer).await;

    let receipt = send_as!(
        fx.keeper,
        fx.chain.manager().chargeMany(vec![sub.id, sub.id, sub.id])
    );

    match manager_events(&fx.chain, &receipt).as_slice() {
        [ContractEvent::SubscriptionCharged(e)] => {
            assert_eq!(e.period, 4, "periods 2 and 3 are skipped");
            assert_eq!(e.periodStart, months_after(sub.anchor, 3));
            assert_eq!(e.periodEnd, months_after(sub.anchor, 4));
            assert_eq!(e.attempt, 1);
        }
        other => panic!("one charge expected: {other:?}"),
    }
    assert_eq!(
        fx.balance(fx.customer).await,
        customer_before - U256::from(PRICE),
        "one period pulled"
    );
    let err = fx.charge_reverts(sub.id).await;
    assert_eq!(
        err,
        E::NotDue(SM::NotDue {
            dueAt: months_after(sub.anchor, 4)
        })
    );
    let rec = fx.record(sub.id).await;
    assert_eq!((rec.status, rec.period), (status::ACTIVE, 4));
}

#[tokio::test]
async fn periods_follow_the_calendar_over_a_year_of_renewals() {
    let fx = Fixture::with_funds(13 * PRICE).await;
    let sub = fx.subscribe().await;

    for period in 2..=13u32 {
        fx.advance_to(months_after(sub.anchor, period - 1)).await;
        let receipt = fx.charge(sub.id).await;
        match manager_events(&fx.chain, &receipt).as_slice() {
            [ContractEvent::SubscriptionCharged(e)] => {
                assert_eq!(e.period, period);
                assert_eq!(e.periodStart, months_after(sub.anchor, period - 1));
                assert_eq!(e.periodEnd, months_after(sub.anchor, period));
            }
            other => panic!("period {period}: {other:?}"),
        }
    }
    assert_eq!(fx.balance(fx.customer).await, U256::ZERO);
    assert_eq!(fx.balance(fx.merchant).await, U256::from(13 * PRICE));
}

/// v1's `subscribe(planId, ref)` carried nothing the wallet could show or the contract could
/// check: a wrong plan id (a stale page, a swapped link, a reorg) paid whoever owned it. v2
/// carries the terms the customer saw and reverts when the plan differs; nothing moves.
#[tokio::test]
async fn subscribe_reverts_when_the_plan_differs_from_the_terms_the_customer_saw() {
    let fx = Fixture::new().await;
    let other_merchant =
        chainsub_tests::DevChain::address(chainsub_tests::chain::accounts::MERCHANT_B);
    let before = fx.balance(fx.customer).await;

    let wrong_merchant = revert_as!(
        fx.customer,
        fx.chain
            .manager()
            .subscribe(fx.plan_id, other_merchant, fx.amount, B256::ZERO)
    );
    let wrong_amount = revert_as!(
        fx.customer,
        fx.chain.manager().subscribe(
            fx.plan_id,
            fx.merchant,
            fx.amount - U256::from(1),
            B256::ZERO
        )
    );

    assert_eq!(
        wrong_merchant,
        E::TermsMismatch(SM::TermsMismatch {
            planId: fx.plan_id,
            merchant: other_merchant,
            amount: fx.amount,
        })
    );
    assert!(matches!(wrong_amount, E::TermsMismatch(_)));
    assert_eq!(fx.balance(fx.customer).await, before, "nothing moved");
    assert_eq!(
        fx.chain.manager().subscriptionCount().call().await.unwrap(),
        U256::ZERO
    );
}
