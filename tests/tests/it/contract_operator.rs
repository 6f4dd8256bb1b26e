//! The operator (the API's relayer) on a real anvil: set at deployment, handed over only by
//! the current operator, and only the current one acts for merchants.

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
async fn operator_hands_over_and_only_the_new_one_creates_plans_for_merchants() {
    let chain = DevChain::start().await;
    let old = DevChain::address(accounts::OPERATOR);
    let new = DevChain::address(accounts::KEEPER);
    let merchant = DevChain::address(accounts::MERCHANT);
    let stranger = DevChain::address(accounts::STRANGER);

    let refused = revert_as!(stranger, chain.manager().setOperator(stranger));
    let receipt = send_as!(old, chain.manager().setOperator(new));

    assert_eq!(refused, E::NotAuthorized(SM::NotAuthorized {}));
    assert_eq!(
        manager_events(&chain, &receipt),
        vec![ContractEvent::OperatorChanged(SM::OperatorChanged {
            previousOperator: old,
            newOperator: new,
        })]
    );
    assert_eq!(chain.manager().operator().call().await.unwrap(), new);
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
