//! The keeper against a real anvil, a real database and the real indexer: due subscriptions
//! are charged exactly once, failed charges follow the grace rules, and cancel-at-period-end
//! subscriptions end at period end.

use crate::support::{DAY, Stack, Step, due_subscription};
use chainsub_abi::EndReason;
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts;

#[tokio::test(flavor = "multi_thread")]
async fn after_time_travel_each_due_subscription_is_charged_exactly_once() {
    let stack = Stack::start().await;
    let plan_a = stack.create_plan().await;
    let plan_b = stack.create_plan().await;
    let subs = [
        stack.subscribe(accounts::CUSTOMER, plan_a, 3).await,
        stack.subscribe(accounts::CUSTOMER_B, plan_a, 3).await,
        stack.subscribe(accounts::CUSTOMER, plan_b, 3).await,
    ];
    stack.sync_index().await;

    // Nothing is due yet: the keeper sends nothing.
    stack.keeper_pass();
    assert_eq!(stack.keeper_tx_count().await, 0);

    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;
    stack.keeper_pass();
    // Again before the index has caught up with the charges: the journal prevents a resend.
    stack.keeper_pass();
    stack.sync_index().await;
    // And after: period 3 is a month away.
    stack.keeper_pass();

    for sub in subs {
        assert_eq!(
            stack.steps(sub).await,
            vec![Step::Charged {
                period: 2,
                attempt: 1
            }],
            "sub {sub}"
        );
        assert_eq!(stack.journal(sub).await, vec![(2, 1, "mined".to_string())]);
        assert_eq!(stack.indexed_status(sub).await, "active");
    }
    // All three in one `chargeMany` (KEEPER_CHARGES_PER_TX defaults to 25).
    assert_eq!(stack.keeper_tx_count().await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_charges_are_retried_a_day_apart_and_the_third_failure_ends_the_subscription() {
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    // Allowance for the first period only: every renewal attempt fails.
    let sub = stack.subscribe(accounts::CUSTOMER, plan, 1).await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;

    stack.keeper_pass();
    stack.sync_index().await;
    assert_eq!(stack.indexed_status(sub).await, "past_due");
    // The retry is not due until RETRY_INTERVAL after the failure.
    stack.chain.increase_time(DAY / 2).await;
    stack.sync_index().await;
    stack.keeper_pass();
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Failed {
            period: 2,
            attempt: 1
        }]
    );

    stack.chain.increase_time(DAY / 2 + 60).await;
    stack.sync_index().await;
    stack.keeper_pass();
    stack.sync_index().await;
    stack.chain.increase_time(DAY + 60).await;
    stack.sync_index().await;
    stack.keeper_pass();
    stack.sync_index().await;
    // Ended: nothing left to do, however long we wait.
    stack.chain.increase_time(40 * DAY).await;
    stack.sync_index().await;
    stack.keeper_pass();

    assert_eq!(
        stack.steps(sub).await,
        vec![
            Step::Failed {
                period: 2,
                attempt: 1
            },
            Step::Failed {
                period: 2,
                attempt: 2
            },
            Step::Failed {
                period: 2,
                attempt: 3
            },
            Step::Ended(EndReason::PaymentFailed),
        ]
    );
    assert_eq!(stack.indexed_status(sub).await, "ended");
    assert_eq!(stack.keeper_tx_count().await, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successful_retry_returns_a_past_due_subscription_to_active() {
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let sub = stack.subscribe(accounts::CUSTOMER, plan, 1).await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;
    stack.keeper_pass();
    stack.sync_index().await;
    assert_eq!(stack.indexed_status(sub).await, "past_due");

    // The customer tops up; the retry a day later succeeds for the same period.
    let customer = DevChain::address(accounts::CUSTOMER);
    stack.chain.mint(customer, crate::support::PRICE).await;
    send_as!(
        customer,
        stack.chain.usdc().approve(
            stack.chain.manager,
            alloy::primitives::U256::from(crate::support::PRICE)
        )
    );
    stack.chain.increase_time(DAY + 60).await;
    stack.sync_index().await;
    stack.keeper_pass();
    stack.sync_index().await;

    assert_eq!(
        stack.steps(sub).await,
        vec![
            Step::Failed {
                period: 2,
                attempt: 1
            },
            Step::Charged {
                period: 2,
                attempt: 2
            },
        ]
    );
    assert_eq!(stack.indexed_status(sub).await, "active");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_at_period_end_subscription_is_ended_at_period_end_without_a_charge() {
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let sub = stack.subscribe(accounts::CUSTOMER, plan, 3).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    send_as!(
        customer,
        stack
            .chain
            .manager()
            .cancelAtPeriodEnd(alloy::primitives::U256::from(sub))
    );
    stack.chain.increase_time(29 * DAY).await;
    stack.sync_index().await;
    // Not yet at period end: nothing happens.
    stack.keeper_pass();
    assert_eq!(stack.steps(sub).await, vec![]);

    stack.chain.increase_time(3 * DAY).await;
    stack.sync_index().await;
    stack.keeper_pass();
    stack.sync_index().await;
    stack.keeper_pass();

    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Ended(EndReason::CancelAtPeriodEnd)]
    );
    assert_eq!(stack.journal(sub).await, vec![(2, 0, "mined".to_string())]);
    assert_eq!(stack.indexed_status(sub).await, "ended");
    assert_eq!(stack.keeper_tx_count().await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn past_due_subscription_set_to_cancel_at_period_end_is_ended_without_waiting_for_a_retry() {
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let sub = stack.subscribe(accounts::CUSTOMER, plan, 1).await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;
    stack.keeper_pass();
    let customer = DevChain::address(accounts::CUSTOMER);
    send_as!(
        customer,
        stack
            .chain
            .manager()
            .cancelAtPeriodEnd(alloy::primitives::U256::from(sub))
    );
    stack.sync_index().await;
    // The period is already over: the end is due now, not a retry interval later.
    stack.keeper_pass();
    stack.sync_index().await;

    assert_eq!(
        stack.steps(sub).await,
        vec![
            Step::Failed {
                period: 2,
                attempt: 1
            },
            Step::Ended(EndReason::CancelAtPeriodEnd),
        ]
    );
    assert_eq!(
        stack.journal(sub).await,
        vec![(2, 1, "mined".to_string()), (2, 0, "mined".to_string())]
    );
    assert_eq!(stack.indexed_status(sub).await, "ended");
}

/// Transaction statuses of `sub`'s steps, oldest first.
async fn tx_statuses(stack: &Stack, sub: u64) -> Vec<String> {
    stack
        .pg
        .query(
            "SELECT t.status FROM keeper_txs t JOIN keeper_steps s ON s.id = t.step_id
             WHERE s.subscription_id = $1 ORDER BY t.id",
            &[&(sub as i64)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Issue 11, point 10: a charge that passed its preflight and still reverted on chain (here:
/// too little gas, 60% of the estimate) used to close its step for good — that subscription
/// was never renewed again. It is now sent again after a backoff with 50% more gas each time
/// (60% → 90% → 135%), and the period is charged exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_charge_that_reverted_on_chain_is_retried_with_more_gas_and_lands_once() {
    let (stack, sub) = due_subscription(3).await;

    let mut cmd = stack.keeper();
    cmd.env("KEEPER_GAS_HEADROOM_PERCENT", "60")
        .env("KEEPER_REVERT_BACKOFF_MS", "100");
    let _keeper = crate::support::spawn(cmd, &[]);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            1,
        )
        .await;

    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(
        tx_statuses(&stack, sub).await,
        ["failed", "failed", "mined"]
    );
    let reverts: i32 = stack
        .pg
        .query_one(
            "SELECT reverts FROM keeper_steps WHERE subscription_id = $1",
            &[&(sub as i64)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reverts, 2);
}

/// The retries are bounded: a step that keeps reverting is abandoned and reported (metric,
/// /health), not retried forever and not dropped silently.
#[tokio::test(flavor = "multi_thread")]
async fn a_charge_that_keeps_reverting_is_abandoned_and_reported() {
    let (stack, sub) = due_subscription(3).await;

    let socket = chainsub_tests::Reserved::new();
    let port = socket.port;
    let mut cmd = stack.keeper_on(&socket);
    cmd.env("KEEPER_GAS_HEADROOM_PERCENT", "45")
        .env("KEEPER_MAX_REVERT_RETRIES", "1")
        .env("KEEPER_REVERT_BACKOFF_MS", "100");
    let _keeper = crate::support::spawn(cmd, &[]);
    let health = tokio::task::spawn_blocking(move || {
        crate::support::wait_health(port, |h| h["abandoned"] == 1)
    })
    .await
    .unwrap();
    assert_eq!(health["abandoned"], 1);
    let (_, metrics) = crate::support::http_get(port, "/metrics");
    assert!(
        metrics.contains("keeper_steps_abandoned_total 1"),
        "{metrics}"
    );
    // Two sends (the first and one retry), both reverted; nothing more.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(tx_statuses(&stack, sub).await, ["failed", "failed"]);
    assert_eq!(stack.steps(sub).await, vec![]);
}

/// Issue 11, point 9: anyone can create plans on the contract, and the keeper's gas is the
/// service's money. It used to charge every due subscription on the contract; now only those
/// of plans the API provisioned — or of merchants an operator allowed.
#[tokio::test(flavor = "multi_thread")]
async fn only_subscriptions_of_plans_the_service_provisioned_are_charged() {
    let stack = Stack::start().await;
    let ours = stack.create_plan().await;
    let (outsiders, _) = stack.create_plan_on_chain(accounts::MERCHANT_B).await;
    let sub_ours = stack.subscribe(accounts::CUSTOMER, ours, 3).await;
    let sub_theirs = stack.subscribe(accounts::CUSTOMER_B, outsiders, 3).await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;

    stack.keeper_pass();
    assert_eq!(
        stack.steps(sub_ours).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(stack.steps(sub_theirs).await, vec![], "not ours to charge");
    assert_eq!(stack.keeper_tx_count().await, 1);

    // An operator may allow a merchant's plans explicitly.
    let outsider = DevChain::address(accounts::MERCHANT_B).to_string();
    assert!(
        stack
            .keeper_once(&["--allow-merchants", &outsider])
            .success()
    );
    assert_eq!(
        stack.steps(sub_theirs).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
}

/// Three renewals of one merchant ("busy") due first, then one of another merchant's: (the
/// busy merchant's subscriptions, the other's), indexed and due.
async fn busy_merchant_then_another(stack: &Stack) -> (Vec<u64>, u64) {
    let busy = stack.create_plan().await;
    let (other, other_ref) = stack.create_plan_on_chain(accounts::MERCHANT_B).await;
    stack
        .register_plan(DevChain::address(accounts::MERCHANT_B), other_ref)
        .await;
    let mut busy_subs = Vec::new();
    for c in [accounts::CUSTOMER, accounts::CUSTOMER_B, 6] {
        busy_subs.push(stack.subscribe(c, busy, 3).await);
    }
    stack.chain.increase_time(60).await;
    let other_sub = stack.subscribe(7, other, 3).await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;
    (busy_subs, other_sub)
}

/// One of the busy merchant's renewals fit its gas budget, and the other merchant's renewal
/// was charged.
async fn assert_one_busy_renewal_and_the_other_charged(
    stack: &Stack,
    busy_subs: &[u64],
    other_sub: u64,
) {
    let mut charged = 0;
    for sub in busy_subs {
        charged += stack.steps(*sub).await.len();
    }
    assert_eq!(
        charged, 1,
        "one of the busy merchant's three renewals fits its budget"
    );
    assert_eq!(
        stack.steps(other_sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }],
        "the other merchant's renewal is charged"
    );
}

/// One merchant's subscriptions may use at most KEEPER_MERCHANT_GAS_BUDGET gas per window, so
/// a merchant with many tiny subscriptions cannot spend the global budget before another
/// merchant's renewals. (Gas units: the bound does not depend on the price of gas.)
#[tokio::test(flavor = "multi_thread")]
async fn a_merchants_gas_budget_bounds_its_charges_and_leaves_the_others_alone() {
    let stack = Stack::start().await;
    let (busy_subs, other_sub) = busy_merchant_then_another(&stack).await;
    // A charge needs ~90k gas with headroom: 150k fits one per merchant, not two.
    assert!(
        stack
            .keeper_once(&["--merchant-gas-budget", "150000"])
            .success()
    );
    assert_one_busy_renewal_and_the_other_charged(&stack, &busy_subs, other_sub).await;
}

/// A merchant over its budget does not hold up the queue: its renewals that do not fit stay
/// due (earliest first), and the keeper reads past them to the other merchants' in the same
/// pass, even reading one due subscription at a time.
#[tokio::test(flavor = "multi_thread")]
async fn renewals_skipped_for_one_merchants_budget_do_not_starve_another_merchants() {
    let stack = Stack::start().await;
    let (busy_subs, other_sub) = busy_merchant_then_another(&stack).await;
    let one_at_a_time = ["--merchant-gas-budget", "150000", "--batch-size", "1"];
    for _ in 0..3 {
        assert!(stack.keeper_once(&one_at_a_time).success());
        stack.sync_index().await;
    }
    assert_one_busy_renewal_and_the_other_charged(&stack, &busy_subs, other_sub).await;
}

/// Issue 13, point 7: due renewals go out as one `chargeMany`; a subscriber who cannot pay is
/// recorded exactly as a single `charge` would record it (PaymentFailed, attempt 1) and the
/// others are renewed in the same transaction.
#[tokio::test(flavor = "multi_thread")]
async fn one_transaction_renews_many_and_records_the_one_that_cannot_pay() {
    let stack = Stack::start().await;
    let plan_a = stack.create_plan().await;
    let plan_b = stack.create_plan().await;
    let paying = [
        stack.subscribe(accounts::CUSTOMER, plan_a, 3).await,
        stack.subscribe(accounts::CUSTOMER, plan_b, 3).await,
        stack.subscribe(6, plan_a, 3).await,
    ];
    // Allowance for the first period only: its renewal fails.
    let broke = stack.subscribe(accounts::CUSTOMER_B, plan_a, 1).await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;

    stack.keeper_pass();
    assert_eq!(stack.keeper_tx_count().await, 1, "one transaction");
    stack.assert_each_charged_once(&paying).await;
    assert_eq!(
        stack.steps(broke).await,
        vec![Step::Failed {
            period: 2,
            attempt: 1
        }]
    );
    // Every step was decided by that one transaction's receipt.
    let hashes = stack
        .pg
        .query_one(
            "SELECT count(DISTINCT tx_hash), count(*) FILTER (WHERE status = 'mined')
             FROM keeper_steps",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((hashes.get::<_, i64>(0), hashes.get::<_, i64>(1)), (1, 4));
    let carried: Vec<i64> = stack
        .pg
        .query_one("SELECT step_ids FROM keeper_txs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(carried.len(), 4);

    // The index catches up; nothing is due until the failed one's retry a day later, which
    // is recorded as attempt 2.
    stack.sync_index().await;
    stack.keeper_pass();
    assert_eq!(stack.keeper_tx_count().await, 1);
    stack.chain.increase_time(DAY + 60).await;
    stack.sync_index().await;
    stack.keeper_pass();
    assert_eq!(
        stack.steps(broke).await,
        vec![
            Step::Failed {
                period: 2,
                attempt: 1
            },
            Step::Failed {
                period: 2,
                attempt: 2
            }
        ]
    );
    stack.assert_each_charged_once(&paying).await;
}

/// A batch in the pool when someone else charges one of its subscriptions first: the contract
/// skips that id (no double charge, the others still renew) and the keeper closes its step as
/// skipped — without a transaction, so it would be taken up again were it still due.
#[tokio::test(flavor = "multi_thread")]
async fn an_id_charged_by_someone_else_first_is_skipped_in_the_batch_and_journaled_so() {
    use alloy::network::TransactionBuilder;
    use alloy::primitives::U256;
    use alloy::providers::Provider;
    use alloy::sol_types::SolCall;
    let stack = Stack::start().await;
    let subs = stack
        .due_renewals(&[accounts::CUSTOMER, accounts::CUSTOMER_B, 6])
        .await;
    stack.automine(false).await;

    stack.keeper_pass();
    // The keeper's batch waits in the pool; a stranger's `charge` of the second subscription
    // pays a far higher tip, so the block runs it first.
    let call = chainsub_abi::SubscriptionManager::chargeCall {
        subscriptionId: U256::from(subs[1]),
    };
    let tx = alloy::rpc::types::TransactionRequest::default()
        .with_from(DevChain::address(accounts::STRANGER))
        .with_to(stack.chain.manager)
        .with_input(call.abi_encode())
        .with_gas_limit(300_000)
        .with_max_fee_per_gas(1_000_000_000_000)
        .with_max_priority_fee_per_gas(500_000_000_000);
    let pending = stack.chain.provider.send_transaction(tx).await.unwrap();
    stack.chain.mine(1).await;
    assert!(pending.get_receipt().await.unwrap().status());
    stack.automine(true).await;

    stack.keeper_pass();
    stack.assert_each_charged_once(&subs).await;
    let journal: Vec<(i64, String, bool, Option<String>)> = stack
        .pg
        .query(
            "SELECT subscription_id, status, tx_hash IS NOT NULL, error FROM keeper_steps
             ORDER BY subscription_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(journal.len(), 3);
    assert_eq!(
        (journal[0].1.as_str(), journal[0].2),
        ("mined", true),
        "{journal:?}"
    );
    assert_eq!(
        (journal[1].1.as_str(), journal[1].2),
        ("failed", false),
        "{journal:?}"
    );
    assert!(journal[1].3.as_deref().unwrap().contains("skipped"));
    assert_eq!(
        (journal[2].1.as_str(), journal[2].2),
        ("mined", true),
        "{journal:?}"
    );
    // Once the index has the stranger's charge, nothing of period 2 is due any more.
    stack.sync_index().await;
    stack.keeper_pass();
    assert_eq!(stack.keeper_tx_count().await, 1);
    stack.assert_each_charged_once(&subs).await;
}

/// A `chargeMany` that reverts on chain (here: too little gas, 60% of the estimate) takes none
/// of its renewals down for good: each step counts the revert and is retried ALONE with more
/// gas (60% → 90% → 135% of its own estimate), so one cause of reverts cannot keep failing a
/// whole batch, and every subscription is charged exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_that_reverted_on_chain_is_retried_one_renewal_at_a_time() {
    let stack = Stack::start().await;
    let subs = stack
        .due_renewals(&[accounts::CUSTOMER, accounts::CUSTOMER_B, 6])
        .await;

    let mut cmd = stack.keeper();
    cmd.env("KEEPER_GAS_HEADROOM_PERCENT", "60")
        .env("KEEPER_REVERT_BACKOFF_MS", "100");
    let _keeper = crate::support::spawn(cmd, &[]);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            3,
        )
        .await;

    stack.assert_each_charged_once(&subs).await;
    let txs: Vec<(i32, String)> = stack
        .pg
        .query(
            "SELECT cardinality(step_ids), status FROM keeper_txs ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(txs[0], (3, "failed".to_string()), "{txs:?}");
    assert!(txs[1..].iter().all(|(n, _)| *n == 1), "{txs:?}");
    assert_eq!(
        txs.iter().filter(|(_, s)| s == "mined").count(),
        3,
        "{txs:?}"
    );
}

/// A pull that fails for a token-side reason (paused token, blocked recipient, `false`
/// returned) is not the subscriber's fault: the contract records it without counting an
/// attempt, so the subscription's period and failed attempts stay as they were. The keeper's
/// next attempt, a day later once the token works again, is a new step all the same: the
/// subscription is charged, not stranded `past_due` behind the closed step.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_side_failure_is_retried_a_day_later_and_charged_once_the_token_works() {
    let (stack, sub) = due_subscription(3).await;

    stack.chain.token_transfers_fail(true).await;
    stack.keeper_pass();
    stack.chain.token_transfers_fail(false).await;
    stack.sync_index().await;
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Failed {
            period: 2,
            attempt: 0
        }],
        "recorded, not counted"
    );
    assert_eq!(stack.indexed_status(sub).await, "past_due");

    // Not before the retry time.
    stack.keeper_pass();
    assert_eq!(stack.steps(sub).await.len(), 1);

    stack.chain.increase_time(DAY + 60).await;
    stack.sync_index().await;
    stack.keeper_pass();
    stack.sync_index().await;
    stack.keeper_pass();

    assert_eq!(
        stack.steps(sub).await,
        vec![
            Step::Failed {
                period: 2,
                attempt: 0
            },
            Step::Charged {
                period: 2,
                attempt: 1
            }
        ]
    );
    assert_eq!(stack.indexed_status(sub).await, "active");
    assert_eq!(
        stack.journal(sub).await,
        vec![(2, 1, "mined".to_string()), (2, 1, "mined".to_string())],
        "each attempt is its own step"
    );
}
