//! `chargeMany`: many renewals in one transaction, each id processed exactly as `charge(id)`
//! would process it, an id `charge` would refuse skipped instead of reverting the others —
//! and what it saves: gas per renewal for batches of 1, 10 and 50 next to a single `charge`.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::TransactionReceipt;
use chainsub_abi::ContractEvent;
use chainsub_abi::SubscriptionManager as SM;
use chainsub_tests::anvil::Anvil;
use chainsub_tests::chain::{DevChain, accounts};

use crate::contract_support::{DAY, PRICE, block_time, manager_events, months_after, status};

/// A chain with one plan and `n` customers of their own (anvil's extra dev accounts, which
/// anvil signs for), each funded with ten periods and approved without limit.
struct Crowd {
    chain: DevChain,
    /// Sends as any dev account; anvil signs (`eth_sendTransaction`).
    unsigned: DynProvider,
    merchant: Address,
    customers: Vec<Address>,
}

impl Crowd {
    async fn new(n: usize) -> Self {
        let anvil = Anvil::start_with(&["--accounts", &(10 + n).to_string()]);
        let unsigned = ProviderBuilder::new()
            .connect_http(anvil.url.parse().expect("rpc url"))
            .erased();
        let chain = DevChain::with_anvil(anvil).await;
        let all = unsigned.get_accounts().await.expect("eth_accounts");
        let merchant = DevChain::address(accounts::MERCHANT);
        send_as!(
            DevChain::address(accounts::OPERATOR),
            chain
                .manager()
                .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(0x11))
        );
        let customers = all[10..10 + n].to_vec();
        let crowd = Self {
            chain,
            unsigned,
            merchant,
            customers,
        };
        for &c in &crowd.customers {
            crowd.chain.mint(c, 10 * PRICE).await;
            send_as!(c, crowd.usdc().approve(crowd.chain.manager, U256::MAX));
        }
        crowd
    }

    fn manager(&self) -> SM::SubscriptionManagerInstance<DynProvider> {
        SM::new(self.chain.manager, self.unsigned.clone())
    }

    fn usdc(&self) -> chainsub_abi::MockUSDC::MockUSDCInstance<DynProvider> {
        chainsub_abi::MockUSDC::new(self.chain.usdc, self.unsigned.clone())
    }

    /// Customer `i` subscribes to plan 1; returns the subscription id and its anchor.
    async fn subscribe(&self, i: usize) -> (U256, u64) {
        let receipt = send_as!(
            self.customers[i],
            self.manager().subscribe(
                U256::from(1),
                self.merchant,
                U256::from(PRICE),
                B256::repeat_byte(0xcc)
            )
        );
        let id = match manager_events(&self.chain, &receipt).first() {
            Some(ContractEvent::SubscriptionCreated(e)) => e.subscriptionId,
            other => panic!("subscribe emitted {other:?} first"),
        };
        (id, block_time(&self.chain, &receipt).await)
    }

    async fn charge_many(&self, ids: &[U256]) -> TransactionReceipt {
        send_as!(
            DevChain::address(accounts::KEEPER),
            self.manager().chargeMany(ids.to_vec())
        )
    }

    async fn record(&self, id: U256) -> SM::Subscription {
        self.manager()
            .getSubscription(id)
            .call()
            .await
            .expect("getSubscription")
    }
}

#[tokio::test]
async fn charge_many_processes_each_id_as_charge_would_and_skips_the_ones_charge_refuses() {
    let crowd = Crowd::new(5).await;
    let (paying, anchor) = crowd.subscribe(0).await;
    let (no_allowance, _) = crowd.subscribe(1).await;
    let (cancelling, _) = crowd.subscribe(2).await;
    let (cancelled, _) = crowd.subscribe(3).await;
    send_as!(
        crowd.customers[1],
        crowd.usdc().approve(crowd.chain.manager, U256::ZERO)
    );
    send_as!(
        crowd.customers[2],
        crowd.manager().cancelAtPeriodEnd(cancelling)
    );
    send_as!(crowd.customers[3], crowd.manager().cancel(cancelled));
    crowd.chain.increase_time(32 * DAY).await;
    // Subscribed a month later: its first period is not over.
    let (not_due, _) = crowd.subscribe(4).await;
    let unknown = U256::from(999);
    let merchant_before = crowd.usdc().balanceOf(crowd.merchant).call().await.unwrap();

    let ids = [
        paying,
        no_allowance,
        cancelled,
        not_due,
        unknown,
        cancelling,
        paying, // twice in one list: processed twice, and the second time it is not due
    ];
    let acted = crowd
        .manager()
        .chargeMany(ids.to_vec())
        .from(DevChain::address(accounts::KEEPER))
        .call()
        .await
        .expect("chargeMany as a call");
    assert_eq!(acted, U256::from(3), "paying, no_allowance and cancelling");
    let receipt = crowd.charge_many(&ids).await;
    let now = block_time(&crowd.chain, &receipt).await;

    let (m, c) = (crowd.merchant, &crowd.customers);
    let plan = U256::from(1);
    let amount = U256::from(PRICE);
    assert_eq!(
        manager_events(&crowd.chain, &receipt),
        vec![
            ContractEvent::SubscriptionCharged(SM::SubscriptionCharged {
                subscriptionId: paying,
                merchant: m,
                subscriber: c[0],
                planId: plan,
                amount,
                period: 2,
                periodStart: months_after(anchor, 1),
                periodEnd: months_after(anchor, 2),
                attempt: 1,
            }),
            ContractEvent::PaymentFailed(SM::PaymentFailed {
                subscriptionId: no_allowance,
                merchant: m,
                subscriber: c[1],
                planId: plan,
                amount,
                period: 2,
                attempt: 1,
                reason: 1, // InsufficientAllowance
                nextRetryAt: now + DAY,
            }),
            ContractEvent::SubscriptionEnded(SM::SubscriptionEnded {
                subscriptionId: cancelling,
                merchant: m,
                subscriber: c[2],
                planId: plan,
                reason: 2, // CancelAtPeriodEnd
            }),
        ]
    );
    assert_eq!(
        crowd.usdc().balanceOf(m).call().await.unwrap(),
        merchant_before + amount,
        "exactly one period pulled"
    );
    let states = [
        (paying, status::ACTIVE, 2),
        (no_allowance, status::PAST_DUE, 1),
        (cancelling, status::ENDED, 1),
        (cancelled, status::CANCELLED, 1),
        (not_due, status::ACTIVE, 1),
    ];
    for (id, want_status, want_period) in states {
        let rec = crowd.record(id).await;
        assert_eq!((rec.status, rec.period), (want_status, want_period), "{id}");
    }
    assert_eq!(crowd.record(no_allowance).await.failedAttempts, 1);
}

#[tokio::test]
async fn a_third_failure_in_a_batch_ends_that_subscription_and_only_that_one() {
    let crowd = Crowd::new(2).await;
    let (paying, _) = crowd.subscribe(0).await;
    let (broke, _) = crowd.subscribe(1).await;
    send_as!(
        crowd.customers[1],
        crowd.usdc().approve(crowd.chain.manager, U256::ZERO)
    );
    crowd.chain.increase_time(32 * DAY).await;
    let mut last = Vec::new();
    for _ in 0..3 {
        last = manager_events(&crowd.chain, &crowd.charge_many(&[paying, broke]).await);
        crowd.chain.increase_time(DAY + 1).await;
    }
    // The third batch: `paying` is not due (charged in the first), `broke` fails a third time.
    assert!(
        matches!(
            last.as_slice(),
            [ContractEvent::PaymentFailed(f), ContractEvent::SubscriptionEnded(e)]
                if f.subscriptionId == broke && f.attempt == 3 && f.nextRetryAt == 0
                    && e.subscriptionId == broke && e.reason == 1
        ),
        "{last:?}"
    );
    assert_eq!(crowd.record(broke).await.status, status::ENDED);
    let rec = crowd.record(paying).await;
    assert_eq!((rec.status, rec.period), (status::ACTIVE, 2));
}

/// Gas per renewal by batch size, all on the same chain in the same period (every
/// subscriber's balance and allowance are cold, as in a real renewal wave; the one
/// merchant's balance is warm after the first renewal of a batch). Printed for
/// docs/benchmarks.md; the bounds only catch a regression (gas is deterministic on anvil).
#[tokio::test]
async fn gas_per_renewal_of_charge_many_by_batch_size() {
    let crowd = Crowd::new(62).await;
    let mut ids = Vec::new();
    for i in 0..62 {
        ids.push(crowd.subscribe(i).await.0);
    }
    crowd.chain.increase_time(32 * DAY).await;

    let single = send_as!(
        DevChain::address(accounts::KEEPER),
        crowd.manager().charge(ids[0])
    )
    .gas_used;
    let mut rest = &ids[1..];
    let mut per_renewal = Vec::new();
    for size in [1usize, 10, 50] {
        let (batch, tail) = rest.split_at(size);
        rest = tail;
        let receipt = crowd.charge_many(batch).await;
        let charged = manager_events(&crowd.chain, &receipt)
            .iter()
            .filter(|e| matches!(e, ContractEvent::SubscriptionCharged(_)))
            .count();
        assert_eq!(charged, size, "every id of the batch renewed");
        per_renewal.push((size, receipt.gas_used / size as u64));
    }
    println!(
        "gas per renewal: single charge {single}; chargeMany {}",
        per_renewal
            .iter()
            .map(|(n, g)| format!("x{n} {g}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(single < 150_000, "charge used {single} gas");
    let (_, of_50) = per_renewal[2];
    assert!(
        of_50 < single,
        "a batch of 50 must cost less per renewal than a single charge: {of_50} vs {single}"
    );
}
