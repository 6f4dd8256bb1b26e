//! Plans on a real anvil: who may create them, that a planRef is used once per merchant and
//! cannot be taken by anybody else, and deactivation.

use crate::contract_support::{Fixture, PRICE, manager_events, months_after};
use alloy::primitives::{B256, U256};
use chainsub_abi::ContractEvent;
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerErrors as E};
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts;

#[tokio::test]
async fn operator_creates_plan_on_behalf_of_merchant() {
    let chain = DevChain::start().await;
    let operator = DevChain::address(accounts::OPERATOR);
    let merchant = DevChain::address(accounts::MERCHANT);
    let plan_ref = B256::repeat_byte(0x42);

    let receipt = send_as!(
        operator,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), plan_ref)
    );

    assert_eq!(
        manager_events(&chain, &receipt),
        vec![ContractEvent::PlanCreated(SM::PlanCreated {
            planId: U256::from(1),
            merchant,
            planRef: plan_ref,
            amount: U256::from(PRICE),
            createdBy: operator,
        })]
    );
    let plan = chain.manager().getPlan(U256::from(1)).call().await.unwrap();
    assert_eq!(
        (plan.merchant, plan.amount, plan.planRef),
        (merchant, U256::from(PRICE), plan_ref)
    );
    assert!(plan.active);
    let by_ref = chain
        .manager()
        .planIdByRef(merchant, plan_ref)
        .call()
        .await
        .unwrap();
    assert_eq!(by_ref, U256::from(1));
}

#[tokio::test]
async fn merchant_creates_its_own_plan() {
    let chain = DevChain::start().await;
    let merchant = DevChain::address(accounts::MERCHANT_B);
    let plan_ref = B256::repeat_byte(0x43);

    let receipt = send_as!(
        merchant,
        chain
            .manager()
            .createPlan(merchant, U256::from(1_000_000u64), plan_ref)
    );

    assert_eq!(
        manager_events(&chain, &receipt),
        vec![ContractEvent::PlanCreated(SM::PlanCreated {
            planId: U256::from(1),
            merchant,
            planRef: plan_ref,
            amount: U256::from(1_000_000u64),
            createdBy: merchant,
        })]
    );
}

#[tokio::test]
async fn stranger_cannot_create_a_plan_for_a_merchant() {
    let chain = DevChain::start().await;
    let merchant = DevChain::address(accounts::MERCHANT);
    let stranger = DevChain::address(accounts::STRANGER);

    let err = revert_as!(
        stranger,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(1))
    );

    assert_eq!(err, E::NotAuthorized(SM::NotAuthorized {}));
    assert_eq!(
        chain.manager().planCount().call().await.unwrap(),
        U256::ZERO
    );
}

#[tokio::test]
async fn duplicate_plan_ref_reverts_for_the_same_merchant() {
    let chain = DevChain::start().await;
    let operator = DevChain::address(accounts::OPERATOR);
    let merchant = DevChain::address(accounts::MERCHANT);
    let plan_ref = B256::repeat_byte(0x77);
    send_as!(
        operator,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), plan_ref)
    );

    // A retried provisioning (same ref) must not create a second plan, whoever sends it.
    let again = revert_as!(
        operator,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), plan_ref)
    );
    let by_merchant = revert_as!(
        merchant,
        chain
            .manager()
            .createPlan(merchant, U256::from(1u64), plan_ref)
    );

    let dup = E::DuplicatePlanRef(SM::DuplicatePlanRef {
        existingPlanId: U256::from(1),
    });
    assert_eq!(again, dup);
    assert_eq!(by_merchant, dup);
    assert_eq!(
        chain.manager().planCount().call().await.unwrap(),
        U256::from(1)
    );
}

/// v1 kept one global namespace: anyone who copied the relayer's pending planRef into a
/// plan for themselves made the relayer's createPlan, and every retry, revert.
#[tokio::test]
async fn another_merchant_cannot_take_a_merchants_plan_ref() {
    let chain = DevChain::start().await;
    let operator = DevChain::address(accounts::OPERATOR);
    let merchant = DevChain::address(accounts::MERCHANT);
    let attacker = DevChain::address(accounts::STRANGER);
    let plan_ref = B256::repeat_byte(0x77);

    // The attacker front-runs with the same reference, for itself.
    send_as!(
        attacker,
        chain
            .manager()
            .createPlan(attacker, U256::from(1u64), plan_ref)
    );
    let receipt = send_as!(
        operator,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), plan_ref)
    );

    let ours = match manager_events(&chain, &receipt).as_slice() {
        [ContractEvent::PlanCreated(p)] => p.planId,
        other => panic!("{other:?}"),
    };
    let m = chain.manager();
    assert_eq!(ours, U256::from(2));
    assert_eq!(
        m.planIdByRef(merchant, plan_ref).call().await.unwrap(),
        ours
    );
    assert_eq!(
        m.planIdByRef(attacker, plan_ref).call().await.unwrap(),
        U256::from(1)
    );
}

#[tokio::test]
async fn a_deactivated_plan_takes_no_new_subscriptions_and_existing_ones_renew() {
    let fx = Fixture::new().await;
    let sub = fx.subscribe().await;
    let stranger = revert_as!(fx.stranger, fx.chain.manager().deactivatePlan(fx.plan_id));
    assert_eq!(stranger, E::NotAuthorized(SM::NotAuthorized {}));

    let receipt = send_as!(fx.merchant, fx.chain.manager().deactivatePlan(fx.plan_id));

    assert_eq!(
        manager_events(&fx.chain, &receipt),
        vec![ContractEvent::PlanDeactivated(SM::PlanDeactivated {
            planId: fx.plan_id,
            merchant: fx.merchant,
            by: fx.merchant,
        })]
    );
    assert!(
        !fx.chain
            .manager()
            .getPlan(fx.plan_id)
            .call()
            .await
            .unwrap()
            .active
    );
    let again = revert_as!(fx.merchant, fx.chain.manager().deactivatePlan(fx.plan_id));
    assert_eq!(
        again,
        E::PlanInactive(SM::PlanInactive { planId: fx.plan_id })
    );
    // A new customer is refused.
    let other = DevChain::address(accounts::CUSTOMER_B);
    fx.chain.mint(other, 10 * PRICE).await;
    send_as!(other, fx.chain.usdc().approve(fx.chain.manager, U256::MAX));
    let refused = revert_as!(
        other,
        fx.chain
            .manager()
            .subscribe(fx.plan_id, fx.merchant, fx.amount, B256::ZERO)
    );
    assert_eq!(
        refused,
        E::PlanInactive(SM::PlanInactive { planId: fx.plan_id })
    );
    // The existing subscription renews.
    fx.advance_to(months_after(sub.anchor, 1)).await;
    let charged = fx.charge(sub.id).await;
    assert!(matches!(
        manager_events(&fx.chain, &charged).as_slice(),
        [ContractEvent::SubscriptionCharged(c)] if c.period == 2
    ));
}

#[tokio::test]
async fn the_operator_can_deactivate_a_plan_it_acts_for() {
    let fx = Fixture::new().await;
    let operator = DevChain::address(accounts::OPERATOR);
    let receipt = send_as!(operator, fx.chain.manager().deactivatePlan(fx.plan_id));
    assert!(matches!(
        manager_events(&fx.chain, &receipt).as_slice(),
        [ContractEvent::PlanDeactivated(d)] if d.by == operator
    ));
}

/// The operator acts for merchants on the plans it created for them; a plan a merchant created
/// itself is out of its reach (before v2.1 the operator could deactivate it).
#[tokio::test]
async fn the_operator_cannot_deactivate_a_plan_the_merchant_created() {
    let fx = Fixture::new().await;
    let operator = DevChain::address(accounts::OPERATOR);
    send_as!(
        fx.merchant,
        fx.chain
            .manager()
            .createPlan(fx.merchant, U256::from(PRICE), B256::repeat_byte(0x22))
    );
    let own = U256::from(2);
    let refused = revert_as!(operator, fx.chain.manager().deactivatePlan(own));
    assert_eq!(refused, E::NotAuthorized(SM::NotAuthorized {}));
    assert!(fx.chain.manager().getPlan(own).call().await.unwrap().active);
    // The merchant still can.
    send_as!(fx.merchant, fx.chain.manager().deactivatePlan(own));
    assert!(!fx.chain.manager().getPlan(own).call().await.unwrap().active);
}

#[tokio::test]
async fn zero_amount_and_empty_plan_ref_are_refused() {
    let chain = DevChain::start().await;
    let merchant = DevChain::address(accounts::MERCHANT);

    let zero = revert_as!(
        merchant,
        chain
            .manager()
            .createPlan(merchant, U256::ZERO, B256::repeat_byte(1))
    );
    let no_ref = revert_as!(
        merchant,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), B256::ZERO)
    );

    assert_eq!(zero, E::InvalidAmount(SM::InvalidAmount {}));
    assert_eq!(no_ref, E::InvalidReference(SM::InvalidReference {}));
}
