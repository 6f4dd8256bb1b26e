//! SubscriptionManager's guards against a token that misbehaves (contracts/HostileToken.sol,
//! test only): a transferFrom that returns false is a recorded TransferFailed, not a revert,
//! and a token that re-enters `charge` during the pull is refused by the reentrancy guard, so
//! one period is still charged exactly once.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::DynProvider;
use alloy::rpc::types::TransactionReceipt;
use alloy::sol;
use alloy::sol_types::{SolCall, SolError};
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerInstance};
use chainsub_abi::{ContractEvent, FailureReason};
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts::{CUSTOMER, MERCHANT, OPERATOR};

sol!(
    #[sol(rpc)]
    HostileToken,
    "../abi/artifacts/HostileToken.json"
);

const PRICE: u64 = 5_000_000;

struct Setup {
    /// Keeps anvil alive for the test.
    _chain: DevChain,
    token: HostileToken::HostileTokenInstance<DynProvider>,
    manager: SubscriptionManagerInstance<DynProvider>,
    customer: Address,
}

async fn mined(
    call: impl std::future::IntoFuture<Output = TransactionReceipt>,
) -> TransactionReceipt {
    let receipt = call.await;
    assert!(receipt.status(), "transaction reverted: {receipt:?}");
    receipt
}

/// A manager over a HostileToken with subscription 1 active and its second period due.
async fn setup() -> Setup {
    let chain = DevChain::start().await;
    let p = chain.provider.clone();
    let token = HostileToken::deploy(p.clone()).await.unwrap();
    let operator = DevChain::address(OPERATOR);
    let manager = SM::deploy(p.clone(), *token.address(), operator)
        .await
        .unwrap();
    let (merchant, customer) = (DevChain::address(MERCHANT), DevChain::address(CUSTOMER));

    let send = |tx: alloy::contract::CallBuilder<_, _>| async move {
        tx.send().await.unwrap().get_receipt().await.unwrap()
    };
    mined(send(
        manager
            .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(1))
            .from(operator)
            .clear_decoder(),
    ))
    .await;
    mined(send(
        token
            .mint(customer, U256::from(100 * PRICE))
            .clear_decoder(),
    ))
    .await;
    mined(send(
        token
            .approve(*manager.address(), U256::MAX)
            .from(customer)
            .clear_decoder(),
    ))
    .await;
    mined(send(
        manager
            .subscribe(U256::from(1), B256::ZERO)
            .from(customer)
            .clear_decoder(),
    ))
    .await;
    chain.increase_time(32 * 86_400).await;
    Setup {
        _chain: chain,
        token,
        manager,
        customer,
    }
}

fn events(receipt: &TransactionReceipt, manager: Address) -> Vec<ContractEvent> {
    receipt
        .inner
        .logs()
        .iter()
        .filter(|l| l.address() == manager)
        .map(|l| ContractEvent::decode(&l.inner).unwrap())
        .collect()
}

async fn charge(s: &Setup) -> TransactionReceipt {
    s.manager
        .charge(U256::from(1))
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap()
}

#[tokio::test]
async fn transfer_returning_false_is_a_recorded_transfer_failed_not_a_revert() {
    let s = setup().await;
    let mode = 1u8; // HostileToken.Mode.ReturnFalse
    s.token
        .setMode(mode, Address::ZERO, Default::default())
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();

    let receipt = charge(&s).await;
    assert!(receipt.status(), "a failed pull must not revert");
    let evs = events(&receipt, *s.manager.address());
    assert_eq!(evs.len(), 1, "{evs:?}");
    let ContractEvent::PaymentFailed(e) = &evs[0] else {
        panic!("expected PaymentFailed, got {evs:?}")
    };
    assert_eq!(
        FailureReason::from_u8(e.reason),
        Some(FailureReason::TransferFailed)
    );
    assert_eq!((e.period, e.attempt), (2, 1));
    let sub = s
        .manager
        .getSubscription(U256::from(1))
        .call()
        .await
        .unwrap();
    assert_eq!(sub.status, 2, "past_due");
}

#[tokio::test]
async fn token_reentering_charge_is_refused_and_the_period_is_charged_once() {
    let s = setup().await;
    let reentry = SM::chargeCall {
        subscriptionId: U256::from(1),
    }
    .abi_encode();
    let mode = 2u8; // HostileToken.Mode.Reenter
    s.token
        .setMode(mode, *s.manager.address(), reentry.into())
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    let before = s.token.balanceOf(s.customer).call().await.unwrap();

    let receipt = charge(&s).await;
    assert!(receipt.status());
    assert!(
        s.token.reentered().call().await.unwrap(),
        "the token did re-enter"
    );
    assert!(
        !s.token.lastReentryOk().call().await.unwrap(),
        "the nested charge must fail"
    );
    let ret = s.token.lastReentryReturn().call().await.unwrap();
    assert_eq!(
        ret.as_ref(),
        SM::Reentrancy::SELECTOR.as_slice(),
        "refused by the guard"
    );

    let evs = events(&receipt, *s.manager.address());
    assert_eq!(evs.len(), 1, "one event for one charge: {evs:?}");
    let ContractEvent::SubscriptionCharged(e) = &evs[0] else {
        panic!("expected SubscriptionCharged, got {evs:?}")
    };
    assert_eq!(e.period, 2);
    let after = s.token.balanceOf(s.customer).call().await.unwrap();
    assert_eq!(
        before - after,
        U256::from(PRICE),
        "exactly one period pulled"
    );
}
