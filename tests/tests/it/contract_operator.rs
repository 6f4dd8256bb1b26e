//! The operator (the API's relayer) on a real anvil: set at deployment, handed over in two
//! steps (the current operator names the next, who accepts; never the zero address), and
//! only the current one acts for merchants.

use crate::contract_support::{PRICE, manager_events};
use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::rpc::types::Filter;
use chainsub_abi::ContractEvent;
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerErrors as E};
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts;

#[tokio::test]
async fn deployment_emits_operator_changed_from_zero() {
    let chain = DevChain::start().await;
    let filter = Filter::new()
        .address(chain.manager)
        .from_block(0)
        .to_block(chain.deploy_block);

    let logs = chain.provider.get_logs(&filter).await.unwrap();

    let decoded: Vec<_> = logs
        .iter()
        .map(|l| ContractEvent::decode(&l.inner).unwrap())
        .collect();
    assert_eq!(
        decoded,
        vec![ContractEvent::OperatorChanged(SM::OperatorChanged {
            previousOperator: Address::ZERO,
            newOperator: DevChain::address(accounts::OPERATOR),
        })]
    );
}

#[tokio::test]
async fn operator_hands_over_in_two_steps_and_only_the_new_one_creates_plans_for_merchants() {
    let chain = DevChain::start().await;
    let old = DevChain::address(accounts::OPERATOR);
    let new = DevChain::address(accounts::KEEPER);
    let merchant = DevChain::address(accounts::MERCHANT);
    let stranger = DevChain::address(accounts::STRANGER);

    let refused = revert_as!(stranger, chain.manager().transferOperator(stranger));
    let started = send_as!(old, chain.manager().transferOperator(new));

    assert_eq!(refused, E::NotAuthorized(SM::NotAuthorized {}));
    assert_eq!(
        manager_events(&chain, &started),
        vec![ContractEvent::OperatorTransferStarted(
            SM::OperatorTransferStarted {
                currentOperator: old,
                pendingOperator: new,
            }
        )]
    );
    // Step one hands nothing over: the old operator still acts, the pending one does not.
    assert_eq!(chain.manager().operator().call().await.unwrap(), old);
    assert_eq!(chain.manager().pendingOperator().call().await.unwrap(), new);
    let early = revert_as!(
        new,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(2))
    );
    assert_eq!(early, E::NotAuthorized(SM::NotAuthorized {}));
    // Only the pending operator accepts.
    let hijack = revert_as!(stranger, chain.manager().acceptOperator());
    assert_eq!(hijack, E::NotAuthorized(SM::NotAuthorized {}));

    let receipt = send_as!(new, chain.manager().acceptOperator());
    assert_eq!(
        manager_events(&chain, &receipt),
        vec![ContractEvent::OperatorChanged(SM::OperatorChanged {
            previousOperator: old,
            newOperator: new,
        })]
    );
    assert_eq!(chain.manager().operator().call().await.unwrap(), new);
    assert_eq!(
        chain.manager().pendingOperator().call().await.unwrap(),
        Address::ZERO
    );
    let by_old = revert_as!(
        old,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(1))
    );
    assert_eq!(by_old, E::NotAuthorized(SM::NotAuthorized {}));
    send_as!(
        new,
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(1))
    );
}

/// v1's one-step `setOperator(0)` (a typo, a bad script) lost the relayer role for good.
#[tokio::test]
async fn handing_over_to_the_zero_address_is_refused() {
    let chain = DevChain::start().await;
    let old = DevChain::address(accounts::OPERATOR);

    let err = revert_as!(old, chain.manager().transferOperator(Address::ZERO));

    assert_eq!(err, E::InvalidOperator(SM::InvalidOperator {}));
    assert_eq!(chain.manager().operator().call().await.unwrap(), old);
    // Nobody can accept a hand-over that was never started (the zero pending operator).
    let none = revert_as!(
        DevChain::address(accounts::STRANGER),
        chain.manager().acceptOperator()
    );
    assert_eq!(none, E::NotAuthorized(SM::NotAuthorized {}));
}
