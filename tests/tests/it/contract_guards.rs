//! SubscriptionManager's guards against a token that misbehaves (contracts/HostileToken.sol,
//! test only): a transferFrom that returns false or a malformed answer is a recorded
//! TransferFailed, not a revert (of the call or of a whole `chargeMany`), and never counts
//! toward the subscriber's grace attempts; a subscription whose pulls keep failing on the
//! token's side ends when the period it owes is over; a token that re-enters `charge`,
//! `cancel` or `cancelAtPeriodEnd` during the pull is refused by the reentrancy guard, so one
//! period is still charged exactly once and nothing is cancelled or resurrected under it.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::DynProvider;
use alloy::rpc::types::TransactionReceipt;
use alloy::sol_types::{SolCall, SolError};
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerInstance};
use chainsub_abi::{ContractEvent, FailureReason};
use chainsub_tests::DevChain;
use chainsub_tests::chain::HostileToken;
use chainsub_tests::chain::accounts::{CUSTOMER, MERCHANT, OPERATOR};

const PRICE: u64 = 5_000_000;

struct Setup {
    /// Keeps anvil alive for the test.
    chain: DevChain,
    token: HostileToken::HostileTokenInstance<DynProvider>,
    manager: SubscriptionManagerInstance<DynProvider>,
    customer: Address,
}

async fn mined(call: impl IntoFuture<Output = TransactionReceipt>) -> TransactionReceipt {
    let receipt = call.await;
    assert!(receipt.status(), "transaction reverted: {receipt:?}");
    receipt
}

/// A manager over a HostileToken with subscription 1 active and its second period due.
async fn setup() -> Setup {
    setup_paying(false).await
}

/// [`setup`], the plan paying the token itself when `token_is_merchant` (MERCHANT otherwise).
async fn setup_paying(token_is_merchant: bool) -> Setup {
    let chain = DevChain::start().await;
    let p = chain.provider.clone();
    let token = HostileToken::deploy(p.clone()).await.unwrap();
    let operator = DevChain::address(OPERATOR);
    let manager = SM::deploy(p.clone(), *token.address(), operator)
        .await
        .unwrap();
    let merchant = if token_is_merchant {
        *token.address()
    } else {
        DevChain::address(MERCHANT)
    };
    let customer = DevChain::address(CUSTOMER);

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
            .subscribe(U256::from(1), merchant, U256::from(PRICE), B256::ZERO)
            .from(customer)
            .clear_decoder(),
    ))
    .await;
    chain.increase_time(32 * 86_400).await;
    Setup {
        chain,
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

/// Subscription 1 as the contract has it.
async fn record(s: &Setup) -> SM::Subscription {
    s.manager
        .getSubscription(U256::from(1))
        .call()
        .await
        .unwrap()
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
    // Allowance and balance sufficed: not the subscriber's fault, so it does not count.
    assert_eq!((e.period, e.attempt), (2, 0));
    let sub = record(&s).await;
    assert_eq!(sub.status, 2, "past_due");
    assert_eq!(sub.failedAttempts, 0);
}

/// The plan's live subscription of the customer, as the contract's index has it.
async fn live_entry(s: &Setup) -> U256 {
    s.manager
        .liveSubscriptionOf(U256::from(1), s.customer)
        .call()
        .await
        .unwrap()
}

async fn set_mode(s: &Setup, mode: u8) {
    let tx = s.token.setMode(mode, Address::ZERO, Default::default());
    mined(async { tx.send().await.unwrap().get_receipt().await.unwrap() }).await;
}

/// v1 ended every due subscription after three failed pulls whoever was at fault, so a
/// token pause (or a token returning false) let anyone end them all in about two days.
#[tokio::test]
async fn failures_that_are_not_the_subscribers_fault_never_end_the_subscription() {
    let s = setup().await;
    set_mode(&s, 1).await; // ReturnFalse: allowance and balance suffice, the token says no.

    for round in 0..5u64 {
        let receipt = charge(&s).await;
        assert!(
            receipt.status(),
            "round {round}: a failed pull must not revert"
        );
        let evs = events(&receipt, *s.manager.address());
        assert!(
            matches!(evs.as_slice(), [ContractEvent::PaymentFailed(e)]
                if e.attempt == 0 && e.nextRetryAt > 0),
            "round {round}: {evs:?}"
        );
        // The retry waits RETRY_INTERVAL like any failure.
        s.chain.increase_time(86_400 + 1).await;
    }
    let sub = record(&s).await;
    assert_eq!(
        (sub.status, sub.failedAttempts),
        (2, 0),
        "still past_due, nothing counted"
    );

    // The token works again: the same period is charged and the subscription is active.
    set_mode(&s, 0).await;
    let receipt = charge(&s).await;
    let evs = events(&receipt, *s.manager.address());
    assert!(
        matches!(evs.as_slice(), [ContractEvent::SubscriptionCharged(e)] if e.period == 2 && e.attempt == 1),
        "{evs:?}"
    );
}

/// The subscriber's own shortfall still counts: three failures for want of allowance end it,
/// even when transfer failures came in between.
#[tokio::test]
async fn the_subscribers_own_shortfalls_still_end_the_subscription_after_three() {
    let s = setup().await;
    set_mode(&s, 1).await;
    charge(&s).await; // not counted
    s.chain.increase_time(86_400 + 1).await;
    set_mode(&s, 0).await;
    let tx = s
        .token
        .approve(*s.manager.address(), U256::ZERO)
        .from(s.customer);
    mined(async { tx.send().await.unwrap().get_receipt().await.unwrap() }).await;
    let mut last = Vec::new();
    for _ in 0..3 {
        last = events(&charge(&s).await, *s.manager.address());
        s.chain.increase_time(86_400 + 1).await;
    }
    assert!(
        matches!(last.as_slice(), [ContractEvent::PaymentFailed(f), ContractEvent::SubscriptionEnded(_)]
            if f.attempt == 3 && FailureReason::from_u8(f.reason) == Some(FailureReason::InsufficientAllowance)),
        "{last:?}"
    );
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

/// The plan pays the token itself, so the token's nested call is the merchant's: before v2.1
/// `cancel` had no guard and `charge` wrote its state after the pull, so a cancel made during
/// the pull was overwritten — an Active subscription with no live entry (resurrected).
#[tokio::test]
async fn a_token_reentering_cancel_during_the_pull_is_refused_and_nothing_is_resurrected() {
    for call in [
        SM::cancelCall {
            subscriptionId: U256::from(1),
        }
        .abi_encode(),
        SM::cancelAtPeriodEndCall {
            subscriptionId: U256::from(1),
        }
        .abi_encode(),
    ] {
        let s = setup_paying(true).await;
        let mode = 2u8; // HostileToken.Mode.Reenter
        let tx = s
            .token
            .setMode(mode, *s.manager.address(), call.clone().into());
        mined(async { tx.send().await.unwrap().get_receipt().await.unwrap() }).await;

        let receipt = charge(&s).await;
        assert!(s.token.reentered().call().await.unwrap());
        assert!(
            !s.token.lastReentryOk().call().await.unwrap(),
            "the nested cancel must fail"
        );
        assert_eq!(
            s.token.lastReentryReturn().call().await.unwrap().as_ref(),
            SM::Reentrancy::SELECTOR.as_slice(),
            "refused by the guard"
        );
        let evs = events(&receipt, *s.manager.address());
        assert!(
            matches!(evs.as_slice(), [ContractEvent::SubscriptionCharged(e)] if e.period == 2),
            "{evs:?}"
        );
        let sub = record(&s).await;
        assert_eq!(
            (sub.status, sub.cancelAtPeriodEnd, sub.period),
            (1, false, 2)
        );
        let live = live_entry(&s).await;
        assert_eq!(live, U256::from(1), "the live entry agrees with the status");
    }
}

/// A `transferFrom` answering one byte made `abi.decode` revert, and with it every renewal of
/// the `chargeMany` that carried the id.
#[tokio::test]
async fn a_malformed_transfer_answer_is_a_failed_pull_not_a_reverted_batch() {
    let s = setup().await;
    set_mode(&s, 3).await; // ShortReturn
    let receipt = s
        .manager
        .chargeMany(vec![U256::from(1)])
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status(), "the batch must not revert");
    let evs = events(&receipt, *s.manager.address());
    assert!(
        matches!(evs.as_slice(), [ContractEvent::PaymentFailed(e)]
            if FailureReason::from_u8(e.reason) == Some(FailureReason::TransferFailed) && e.attempt == 0),
        "{evs:?}"
    );
    let sub = record(&s).await;
    assert_eq!((sub.status, sub.failedAttempts, sub.period), (2, 0, 1));
}

/// Token-side failures never count, so before v2.1 such a subscription stayed past due for
/// ever. Now the first `charge` after the owed period is over ends it, without a pull.
#[tokio::test]
async fn a_subscription_past_due_on_the_tokens_side_ends_when_the_owed_period_is_over() {
    let s = setup().await;
    set_mode(&s, 1).await; // ReturnFalse
    let anchor = record(&s).await.anchor;
    charge(&s).await;
    // A retry just before the owed period (period 2) ends is still a retry.
    let owed_end = chainsub_abi::add_months(anchor, 2).unwrap();
    let now = s.chain.now().await;
    s.chain.increase_time(owed_end - now - 10).await;
    let evs = events(&charge(&s).await, *s.manager.address());
    assert!(
        matches!(evs.as_slice(), [ContractEvent::PaymentFailed(e)] if e.period == 2),
        "{evs:?}"
    );
    // The token works again, but the period it owed is over: ended, nothing pulled.
    set_mode(&s, 0).await;
    s.chain.increase_time(DAY_SECS + 1).await;
    let before = s.token.balanceOf(s.customer).call().await.unwrap();
    let evs = events(&charge(&s).await, *s.manager.address());
    assert!(
        matches!(evs.as_slice(), [ContractEvent::SubscriptionEnded(e)] if e.reason == 1),
        "ended for want of payment: {evs:?}"
    );
    assert_eq!(s.token.balanceOf(s.customer).call().await.unwrap(), before);
    assert_eq!(record(&s).await.status, 4, "ended");
    let live = live_entry(&s).await;
    assert_eq!(live, U256::ZERO);
}

const DAY_SECS: u64 = 86_400;
