//! Plans on a real anvil: who may create them, and that a planRef is used once.

use crate::contract_support::{PRICE, manager_events};
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
    let by_ref = chain.manager().planIdByRef(plan_ref).call().await.unwrap();
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
async fn duplicate_plan_ref_reverts_even_for_another_merchant() {
    let chain = DevChain::start().await;
    let operator = DevChain::address(accounts::OPERATOR);
    let plan_ref = B256::repeat_byte(0x77);
    send_as!(
        operator,
        chain.manager().createPlan(
            DevChain::address(accounts::MERCHANT),
            U256::from(PRICE),
            plan_ref
        )
    );

    // A retried provisioning (same ref) must not create a second plan, whoever sends it.
    let again = revert_as!(
        operator,
        chain.manager().createPlan(
            DevChain::address(accounts::MERCHANT),
            U256::from(PRICE),
            plan_ref
        )
    );
    let other = revert_as!(
        DevChain::address(accounts::MERCHANT_B),
        chain.manager().createPlan(
            DevChain::address(accounts::MERCHANT_B),
            U256::from(PRICE),
            plan_ref
        )
    );

    let dup = E::DuplicatePlanRef(SM::DuplicatePlanRef {
        existingPlanId: U256::from(1),
    });
    assert_eq!(again, dup);
    assert_eq!(other, dup);
    assert_eq!(
        chain.manager().planCount().call().await.unwrap(),
        U256::from(1)
    );
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
