//! Contract v3 on a real anvil: free trials, plan changes with proration, refunds paid by the
//! merchant (the rules in `contracts/SubscriptionManager.sol` and docs/contract.md), and the
//! gas of each new call.

use crate::contract_support::{
    DAY, Fixture, PRICE, block_time, manager_events, months_after, status,
};
use alloy::primitives::{Address, B256, U256};
use chainsub_abi::ContractEvent;
use chainsub_abi::SubscriptionManager::SubscriptionManagerErrors as E;
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts::{MERCHANT_B, OPERATOR};

const TRIALING: u8 = 5;
const TRIAL_DAYS: u16 = 14;
const PRO: u64 = 19_990_000;
const LITE: u64 = 4_990_000;

/// The fixture's plan 1 (`PRICE`) plus, for the same merchant: plan 2 with a 14-day trial at
/// `PRICE`, plan 3 `PRO`, plan 4 `LITE`; plan 5 of another merchant at `PRO`.
struct Billing {
    fx: Fixture,
}

impl Billing {
    async fn new() -> Self {
        Self::with_funds(10 * PRICE).await
    }

    async fn with_funds(funds: u64) -> Self {
        let fx = Fixture::with_funds(funds).await;
        let m = fx.chain.manager();
        let operator = DevChain::address(OPERATOR);
        send_as!(
            operator,
            m.createPlanWithTrial(
                fx.merchant,
                U256::from(PRICE),
                B256::repeat_byte(0x22),
                TRIAL_DAYS
            )
        );
        send_as!(
            operator,
            m.createPlan(fx.merchant, U256::from(PRO), B256::repeat_byte(0x33))
        );
        send_as!(
            operator,
            m.createPlan(fx.merchant, U256::from(LITE), B256::repeat_byte(0x44))
        );
        let other = DevChain::address(MERCHANT_B);
        send_as!(
            operator,
            m.createPlan(other, U256::from(PRO), B256::repeat_byte(0x55))
        );
        Self { fx }
    }

    /// CUSTOMER subscribes to `plan` at its terms; the receipt.
    async fn subscribe(&self, plan: u64) -> alloy::rpc::types::TransactionReceipt {
        let (merchant, amount) = self.fx.chain.plan_terms(U256::from(plan)).await;
        send_as!(
            self.fx.customer,
            self.fx.chain.manager().subscribe(
                U256::from(plan),
                merchant,
                amount,
                B256::repeat_byte(0xcc)
            )
        )
    }

    /// CUSTOMER moves `sub` to `plan` at its terms; the receipt.
    async fn change(&self, sub: U256, plan: u64) -> alloy::rpc::types::TransactionReceipt {
        let (merchant, amount) = self.fx.chain.plan_terms(U256::from(plan)).await;
        send_as!(
            self.fx.customer,
            self.fx
                .chain
                .manager()
                .changePlan(sub, U256::from(plan), merchant, amount)
        )
    }

    async fn change_reverts(&self, sub: U256, plan: u64, merchant: Address, amount: u64) -> E {
        revert_as!(
            self.fx.customer,
            self.fx
                .chain
                .manager()
                .changePlan(sub, U256::from(plan), merchant, U256::from(amount))
        )
    }

    /// MERCHANT approves the manager without limit and holds `funds`.
    async fn merchant_can_refund(&self, funds: u64) {
        self.fx.chain.mint(self.fx.merchant, funds).await;
        send_as!(
            self.fx.merchant,
            self.fx
                .chain
                .usdc()
                .approve(self.fx.chain.manager, U256::MAX)
        );
    }
}

fn id_of(events: &[ContractEvent]) -> U256 {
    match events.first() {
        Some(ContractEvent::SubscriptionCreated(e)) => e.subscriptionId,
        other => panic!("expected SubscriptionCreated first, got {other:?}"),
    }
}

// ------------------------------------------------------------------ trials

#[tokio::test]
async fn a_trial_takes_no_money_and_the_first_charge_falls_due_when_it_ends() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let before = fx.balance(fx.customer).await;
    let receipt = b.subscribe(2).await;
    let start = block_time(&fx.chain, &receipt).await;
    let trial_end = start + u64::from(TRIAL_DAYS) * DAY;
    let events = manager_events(&fx.chain, &receipt);
    let id = id_of(&events);
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionCreated(c)]
            if c.periodStart == start && c.periodEnd == trial_end && c.trialEnd == trial_end
            && c.amount == U256::from(PRICE)),
        "{events:?}"
    );
    assert_eq!(fx.balance(fx.customer).await, before, "no money moves");
    let rec = fx.record(id).await;
    assert_eq!(rec.status, TRIALING);
    assert_eq!(rec.period, 0);
    assert_eq!(
        rec.anchor, trial_end,
        "monthly periods are anchored on the trial's end"
    );
    assert!(
        fx.chain
            .manager()
            .trialUsed(U256::from(2), fx.customer)
            .call()
            .await
            .unwrap()
    );

    assert!(matches!(fx.charge_reverts(id).await, E::NotDue(e) if e.dueAt == trial_end));
    fx.advance_to(trial_end).await;
    let receipt = fx.charge(id).await;
    let events = manager_events(&fx.chain, &receipt);
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionCharged(c)]
            if c.period == 1 && c.periodStart == trial_end
                && c.periodEnd == months_after(trial_end, 1) && c.amount == U256::from(PRICE)),
        "{events:?}"
    );
    assert_eq!(fx.balance(fx.customer).await, before - U256::from(PRICE));
    let rec = fx.record(id).await;
    assert_eq!(rec.status, status::ACTIVE);
    assert_eq!(U256::from(rec.paid), U256::from(PRICE));
}

#[tokio::test]
async fn a_trial_cancelled_at_once_or_at_its_end_never_charges() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let before = fx.balance(fx.customer).await;
    let id = id_of(&manager_events(&fx.chain, &b.subscribe(2).await));
    send_as!(fx.customer, fx.chain.manager().cancelAtPeriodEnd(id));
    let trial_end = fx.record(id).await.periodEnd;
    fx.advance_to(trial_end + DAY).await;
    let events = manager_events(&fx.chain, &fx.charge(id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionEnded(e)] if e.reason == 2),
        "{events:?}"
    );
    assert_eq!(fx.balance(fx.customer).await, before);
    assert_eq!(fx.record(id).await.status, status::ENDED);
}

#[tokio::test]
async fn one_trial_per_wallet_per_plan_a_second_subscription_pays_at_once() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let first = id_of(&manager_events(&fx.chain, &b.subscribe(2).await));
    send_as!(fx.customer, fx.chain.manager().cancel(first));
    let before = fx.balance(fx.customer).await;
    let events = manager_events(&fx.chain, &b.subscribe(2).await);
    assert!(
        matches!(events.as_slice(), [
            ContractEvent::SubscriptionCreated(_),
            ContractEvent::SubscriptionCharged(c),
        ] if c.period == 1),
        "no second trial: {events:?}"
    );
    assert_eq!(fx.balance(fx.customer).await, before - U256::from(PRICE));
}

#[tokio::test]
async fn a_trial_needs_the_allowance_of_the_first_charge_and_its_length_is_bounded() {
    let b = Billing::new().await;
    let fx = &b.fx;
    send_as!(
        fx.customer,
        fx.chain.usdc().approve(fx.chain.manager, U256::ZERO)
    );
    let err = revert_as!(
        fx.customer,
        fx.chain
            .manager()
            .subscribe(U256::from(2), fx.merchant, U256::from(PRICE), B256::ZERO)
    );
    assert!(
        matches!(&err, E::FirstPaymentFailed(e) if e.reason == 1),
        "{err:?}"
    );
    assert!(
        !fx.chain
            .manager()
            .trialUsed(U256::from(2), fx.customer)
            .call()
            .await
            .unwrap(),
        "a refused trial is not used up"
    );
    let m = fx.chain.manager();
    let operator = DevChain::address(OPERATOR);
    for days in [0u16, 91] {
        let err = revert_as!(
            operator,
            m.createPlanWithTrial(
                fx.merchant,
                U256::from(PRICE),
                B256::repeat_byte(0x66),
                days
            )
        );
        assert!(
            matches!(&err, E::InvalidTrial(e) if e.maxTrialDays == 90),
            "{days}: {err:?}"
        );
    }
    let err = revert_as!(
        operator,
        m.createPlan(
            fx.merchant,
            U256::from(1u128 << 96),
            B256::repeat_byte(0x66)
        )
    );
    assert!(matches!(err, E::InvalidAmount(_)), "{err:?}");
}

#[tokio::test]
async fn a_failed_first_charge_after_the_trial_is_past_due_on_period_one() {
    let b = Billing::with_funds(0).await;
    let fx = &b.fx;
    let id = id_of(&manager_events(&fx.chain, &b.subscribe(2).await));
    fx.advance_to(fx.record(id).await.periodEnd).await;
    let events = manager_events(&fx.chain, &fx.charge(id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::PaymentFailed(f)]
            if f.period == 1 && f.attempt == 1 && f.reason == 2),
        "{events:?}"
    );
    assert_eq!(fx.record(id).await.status, status::PAST_DUE);
}

// ------------------------------------------------------------ plan changes

#[tokio::test]
async fn an_upgrade_charges_the_prorated_difference_rounded_down_and_renews_at_the_new_amount() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let sub = fx.subscribe().await;
    fx.advance_to(sub.anchor + 10 * DAY).await;
    let before = fx.balance(fx.customer).await;
    let receipt = b.change(sub.id, 3).await;
    let now = block_time(&fx.chain, &receipt).await;
    let end = months_after(sub.anchor, 1);
    let expected = U256::from(PRO - PRICE) * U256::from(end - now) / U256::from(end - sub.anchor);
    let events = manager_events(&fx.chain, &receipt);
    assert!(
        matches!(events.as_slice(), [ContractEvent::PlanChanged(c)]
            if c.planId == U256::from(3) && c.previousPlanId == U256::from(1)
                && c.amount == U256::from(PRO) && c.proration == expected && c.period == 1),
        "{events:?}"
    );
    assert!(expected > U256::ZERO && expected < U256::from(PRO - PRICE));
    assert_eq!(fx.balance(fx.customer).await, before - expected);
    let rec = fx.record(sub.id).await;
    assert_eq!(rec.planId, U256::from(3));
    assert_eq!(rec.amount, U256::from(PRO));
    assert_eq!(U256::from(rec.paid), U256::from(PRICE) + expected);
    let m = fx.chain.manager();
    assert_eq!(
        m.liveSubscriptionOf(U256::from(1), fx.customer)
            .call()
            .await
            .unwrap(),
        U256::ZERO
    );
    assert_eq!(
        m.liveSubscriptionOf(U256::from(3), fx.customer)
            .call()
            .await
            .unwrap(),
        sub.id
    );

    fx.advance_to(end).await;
    let events = manager_events(&fx.chain, &fx.charge(sub.id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionCharged(c)]
            if c.amount == U256::from(PRO) && c.planId == U256::from(3) && c.period == 2),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_downgrade_waits_for_the_renewal_can_be_undone_and_then_applies_at_the_new_amount() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let sub = fx.subscribe().await;
    let end = months_after(sub.anchor, 1);
    let before = fx.balance(fx.customer).await;
    let events = manager_events(&fx.chain, &b.change(sub.id, 4).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::PlanChangeScheduled(c)]
            if c.planId == U256::from(1) && c.newPlanId == U256::from(4)
                && c.newAmount == U256::from(LITE) && c.effectiveAt == end),
        "{events:?}"
    );
    assert_eq!(fx.balance(fx.customer).await, before, "no money moves now");
    assert_eq!(fx.record(sub.id).await.pendingPlanId, 4);

    let events = manager_events(
        &fx.chain,
        &send_as!(fx.customer, fx.chain.manager().cancelPlanChange(sub.id)),
    );
    assert!(
        matches!(events.as_slice(), [ContractEvent::PlanChangeCancelled(c)] if c.newPlanId == U256::from(4)),
        "{events:?}"
    );
    let err = revert_as!(fx.customer, fx.chain.manager().cancelPlanChange(sub.id));
    assert!(matches!(err, E::NoPlanChange(_)), "{err:?}");

    b.change(sub.id, 4).await;
    fx.advance_to(end).await;
    let events = manager_events(&fx.chain, &fx.charge(sub.id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::PlanChanged(c), ContractEvent::SubscriptionCharged(ch)]
            if c.planId == U256::from(4) && c.previousPlanId == U256::from(1) && c.proration == U256::ZERO
                && c.period == 2 && ch.amount == U256::from(LITE) && ch.planId == U256::from(4)),
        "{events:?}"
    );
    assert_eq!(fx.balance(fx.customer).await, before - U256::from(LITE));
    assert_eq!(fx.record(sub.id).await.pendingPlanId, 0);
}

#[tokio::test]
async fn a_scheduled_downgrade_applies_at_a_failed_renewal_and_its_retries_charge_the_new_amount() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let sub = fx.subscribe().await;
    b.change(sub.id, 4).await;
    // The subscriber's wallet is empty at the renewal.
    let all = fx.balance(fx.customer).await;
    send_as!(fx.customer, fx.chain.usdc().transfer(fx.stranger, all));
    fx.advance_to(months_after(sub.anchor, 1)).await;
    let events = manager_events(&fx.chain, &fx.charge(sub.id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::PlanChanged(c), ContractEvent::PaymentFailed(f)]
            if c.planId == U256::from(4) && c.period == 2
                && f.amount == U256::from(LITE) && f.planId == U256::from(4) && f.reason == 2),
        "{events:?}"
    );
    let rec = fx.record(sub.id).await;
    assert_eq!(
        (rec.status, rec.planId, rec.pendingPlanId),
        (status::PAST_DUE, U256::from(4), 0)
    );
    // The retry, once funded, charges the new amount.
    fx.chain.mint(fx.customer, LITE).await;
    fx.advance_to(months_after(sub.anchor, 1) + DAY + 1).await;
    let events = manager_events(&fx.chain, &fx.charge(sub.id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionCharged(c)]
            if c.amount == U256::from(LITE) && c.period == 2 && c.attempt == 2),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_cancellation_drops_a_scheduled_downgrade() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let sub = fx.subscribe().await;
    b.change(sub.id, 4).await;
    send_as!(fx.customer, fx.chain.manager().cancelAtPeriodEnd(sub.id));
    assert_eq!(fx.record(sub.id).await.pendingPlanId, 0);
    fx.advance_to(months_after(sub.anchor, 1)).await;
    let events = manager_events(&fx.chain, &fx.charge(sub.id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionEnded(_)]),
        "{events:?}"
    );
}

#[tokio::test]
async fn plan_changes_that_break_a_rule_are_refused() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let sub = fx.subscribe().await;
    let other = DevChain::address(MERCHANT_B);
    let err = b.change_reverts(sub.id, 3, fx.merchant, PRICE).await;
    assert!(
        matches!(err, E::TermsMismatch(_)),
        "terms not shown: {err:?}"
    );
    let err = b.change_reverts(sub.id, 5, other, PRO).await;
    assert!(
        matches!(err, E::TermsMismatch(_)),
        "another merchant's plan: {err:?}"
    );
    let err = b.change_reverts(sub.id, 1, fx.merchant, PRICE).await;
    assert!(matches!(err, E::SamePlan(_)), "{err:?}");
    let err = b.change_reverts(sub.id, 9, fx.merchant, PRO).await;
    assert!(matches!(err, E::UnknownPlan(_)), "{err:?}");
    let err = revert_as!(
        fx.stranger,
        fx.chain
            .manager()
            .changePlan(sub.id, U256::from(3), fx.merchant, U256::from(PRO))
    );
    assert!(
        matches!(err, E::NotAuthorized(_)),
        "only the subscriber: {err:?}"
    );
    let err = revert_as!(
        fx.merchant,
        fx.chain
            .manager()
            .changePlan(sub.id, U256::from(3), fx.merchant, U256::from(PRO))
    );
    assert!(
        matches!(err, E::NotAuthorized(_)),
        "not even the merchant: {err:?}"
    );
    send_as!(
        fx.merchant,
        fx.chain.manager().deactivatePlan(U256::from(4))
    );
    let err = b.change_reverts(sub.id, 4, fx.merchant, LITE).await;
    assert!(matches!(err, E::PlanInactive(_)), "{err:?}");

    // An upgrade whose proration cannot be pulled reverts as a whole.
    send_as!(
        fx.customer,
        fx.chain.usdc().approve(fx.chain.manager, U256::from(1))
    );
    let err = b.change_reverts(sub.id, 3, fx.merchant, PRO).await;
    assert!(
        matches!(&err, E::ProrationFailed(e) if e.reason == 1),
        "{err:?}"
    );
    assert_eq!(fx.record(sub.id).await.planId, U256::from(1));

    send_as!(fx.customer, fx.chain.manager().cancelAtPeriodEnd(sub.id));
    let err = b.change_reverts(sub.id, 3, fx.merchant, PRO).await;
    assert!(matches!(err, E::AlreadyCancelling(_)), "{err:?}");

    // A trialing subscription has nothing to prorate against: it changes plan after the trial.
    send_as!(
        fx.customer,
        fx.chain.usdc().approve(fx.chain.manager, U256::MAX)
    );
    let trial = id_of(&manager_events(&fx.chain, &b.subscribe(2).await));
    let err = b.change_reverts(trial, 3, fx.merchant, PRO).await;
    assert!(matches!(err, E::NotActive(_)), "{err:?}");
}

#[tokio::test]
async fn a_scheduled_change_is_dropped_when_the_wallet_already_holds_the_target_plan() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let sub = fx.subscribe().await;
    b.change(sub.id, 4).await;
    let direct = id_of(&manager_events(&fx.chain, &b.subscribe(4).await));
    fx.advance_to(months_after(sub.anchor, 1)).await;
    let events = manager_events(&fx.chain, &fx.charge(sub.id).await);
    assert!(
        matches!(events.as_slice(), [ContractEvent::PlanChangeCancelled(c), ContractEvent::SubscriptionCharged(ch)]
            if c.newPlanId == U256::from(4) && ch.planId == U256::from(1) && ch.amount == U256::from(PRICE)),
        "{events:?}"
    );
    assert_eq!(
        fx.chain
            .manager()
            .liveSubscriptionOf(U256::from(4), fx.customer)
            .call()
            .await
            .unwrap(),
        direct
    );
}

// ----------------------------------------------------------------- refunds

#[tokio::test]
async fn the_merchant_refunds_part_of_the_latest_period_never_more_than_was_paid() {
    let b = Billing::new().await;
    let fx = &b.fx;
    b.merchant_can_refund(0).await;
    let sub = fx.subscribe().await;
    let m = fx.chain.manager();
    let customer_before = fx.balance(fx.customer).await;
    let receipt = send_as!(
        fx.merchant,
        m.refund(sub.id, 1, U256::from(4_000_000u64), false)
    );
    let events = manager_events(&fx.chain, &receipt);
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionRefunded(r)]
            if r.period == 1 && r.amount == U256::from(4_000_000u64) && r.totalRefunded == U256::from(4_000_000u64)),
        "{events:?}"
    );
    assert_eq!(
        fx.balance(fx.customer).await,
        customer_before + U256::from(4_000_000u64)
    );
    let err = revert_as!(fx.merchant, m.refund(sub.id, 1, U256::from(PRICE), false));
    assert!(
        matches!(&err, E::RefundTooLarge(e) if e.refundable == U256::from(PRICE - 4_000_000)),
        "{err:?}"
    );
    let err = revert_as!(fx.stranger, m.refund(sub.id, 1, U256::from(1), false));
    assert!(matches!(err, E::NotAuthorized(_)), "{err:?}");
    let err = revert_as!(
        DevChain::address(OPERATOR),
        m.refund(sub.id, 1, U256::from(1), false)
    );
    assert!(
        matches!(err, E::NotAuthorized(_)),
        "only the payee refunds: {err:?}"
    );
    let err = revert_as!(fx.merchant, m.refund(sub.id, 1, U256::ZERO, false));
    assert!(matches!(err, E::InvalidAmount(_)), "{err:?}");

    // After the renewal, period 1 is no longer refundable here; period 2 is, in full.
    fx.advance_to(months_after(sub.anchor, 1)).await;
    fx.charge(sub.id).await;
    let err = revert_as!(fx.merchant, m.refund(sub.id, 1, U256::from(1), false));
    assert!(
        matches!(&err, E::NotRefundable(e) if e.latestPeriod == 2),
        "{err:?}"
    );
    let events = manager_events(
        &fx.chain,
        &send_as!(fx.merchant, m.refund(sub.id, 2, U256::from(PRICE), true)),
    );
    assert!(
        matches!(events.as_slice(), [ContractEvent::SubscriptionRefunded(r), ContractEvent::SubscriptionCancelled(c)]
            if r.totalRefunded == U256::from(PRICE) && c.by == fx.merchant),
        "refund and cancel in one call: {events:?}"
    );
    assert_eq!(fx.record(sub.id).await.status, status::CANCELLED);
    let err = revert_as!(fx.merchant, m.refund(sub.id, 2, U256::from(1), false));
    assert!(
        matches!(&err, E::RefundTooLarge(e) if e.refundable == U256::ZERO),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_proration_is_refundable_with_its_period_and_a_merchant_without_funds_refunds_nothing() {
    let b = Billing::new().await;
    let fx = &b.fx;
    let sub = fx.subscribe().await;
    fx.advance_to(sub.anchor + 3 * DAY).await;
    let events = manager_events(&fx.chain, &b.change(sub.id, 3).await);
    let ContractEvent::PlanChanged(c) = &events[0] else {
        panic!("{events:?}")
    };
    let paid = U256::from(PRICE) + c.proration;
    let m = fx.chain.manager();
    let err = revert_as!(fx.merchant, m.refund(sub.id, 1, paid, false));
    assert!(
        matches!(&err, E::RefundFailed(e) if e.reason == 1),
        "no allowance: {err:?}"
    );
    b.merchant_can_refund(0).await;
    let err = revert_as!(
        fx.merchant,
        m.refund(sub.id, 1, paid + U256::from(1), false)
    );
    assert!(
        matches!(&err, E::RefundTooLarge(e) if e.refundable == paid),
        "{err:?}"
    );
    send_as!(fx.merchant, m.refund(sub.id, 1, paid, false));
    assert_eq!(
        fx.record(sub.id).await.status,
        status::ACTIVE,
        "no cancel flag: still live"
    );
}

// --------------------------------------------------------------------- gas

#[tokio::test]
async fn gas_of_subscribe_with_trial_change_plan_and_refund() {
    let b = Billing::new().await;
    let fx = &b.fx;
    b.merchant_can_refund(0).await;
    let trial = b.subscribe(2).await.gas_used;
    let sub = fx.subscribe().await;
    fx.advance_to(sub.anchor + 10 * DAY).await;
    let upgrade = b.change(sub.id, 3).await.gas_used;
    let downgrade = b.change(sub.id, 4).await.gas_used;
    let refund = send_as!(
        fx.merchant,
        fx.chain
            .manager()
            .refund(sub.id, 1, U256::from(1_000_000u64), false)
    )
    .gas_used;
    fx.advance_to(months_after(sub.anchor, 1)).await;
    let renewal_with_change = fx.charge(sub.id).await.gas_used;
    println!(
        "gas: subscribe with trial {trial}, changePlan upgrade {upgrade}, changePlan downgrade \
         {downgrade}, refund {refund}, renewal applying a downgrade {renewal_with_change}"
    );
    for (what, gas) in [
        ("trial", trial),
        ("upgrade", upgrade),
        ("downgrade", downgrade),
        ("refund", refund),
        ("renewal", renewal_with_change),
    ] {
        assert!(gas < 300_000, "{what} used {gas} gas");
    }
}
