//! A keeper that dies mid-send never causes a second send: the journal row (nonce and signed
//! bytes) is committed before the broadcast and resumed on restart; a stuck transaction is
//! replaced with the same nonce, never a new one.

use std::time::{Duration, Instant};

use crate::support::{DAY, Stack, Step, keeper_address, spawn};
use alloy::providers::Provider;
use chainsub_tests::chain::accounts;

/// A stack with one subscription whose second period is due and indexed.
async fn due_subscription() -> (Stack, u64) {
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let sub = stack.subscribe(accounts::CUSTOMER, plan, 3).await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;
    (stack, sub)
}

/// With mining off, a keeper replaces its stuck transaction at least once (same nonce,
/// higher fee) and is killed; then blocks are mined again and keeper passes record the
/// outcome and let the index catch up.
async fn replace_while_stuck_then_mine(stack: &Stack) {
    stack.automine(false).await;
    let keeper = spawn(
        stack.keeper(),
        &["--replace-after-ms", "300", "--max-replacements", "2"],
    );
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_txs WHERE status = 'replaced'",
            1,
        )
        .await;
    keeper.kill();
    stack.automine(true).await;
    stack.chain.mine(1).await;
    stack.keeper_pass();
    stack.sync_index().await;
    stack.keeper_pass();
}

async fn pending_nonce(stack: &Stack) -> u64 {
    stack
        .chain
        .provider
        .get_transaction_count(keeper_address())
        .pending()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn keeper_crashing_between_journal_and_broadcast_resumes_the_same_transaction() {
    let (stack, sub) = due_subscription().await;

    // Abort (as kill -9 would) right after the send was journaled, before the broadcast.
    let status = stack.keeper_once(&["--fail-point", "after-persist"]);
    assert!(
        !status.success(),
        "the fail point should have aborted the keeper"
    );
    assert_eq!(
        stack.journal(sub).await,
        vec![(2, 1, "pending".to_string())]
    );
    assert_eq!(pending_nonce(&stack).await, 0, "nothing reached the node");

    stack.keeper_pass();
    stack.sync_index().await;
    stack.keeper_pass();

    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(stack.journal(sub).await, vec![(2, 1, "mined".to_string())]);
    assert_eq!(stack.keeper_tx_count().await, 1);
    let txs = stack.journaled_tx_count().await;
    assert_eq!(
        txs, 1,
        "the journaled bytes were re-broadcast, not re-signed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn keeper_killed_with_a_send_in_the_pool_does_not_send_again_after_restart() {
    let (stack, sub) = due_subscription().await;
    stack.automine(false).await;

    let first = spawn(stack.keeper(), &[]);
    stack
        .wait_count("SELECT count(*) FROM keeper_steps WHERE status = 'sent'", 1)
        .await;
    // kill -9: no chance to clean up.
    first.kill();
    assert_eq!(pending_nonce(&stack).await, 1);

    // The restarted keeper finds the step in flight and sends nothing new.
    stack.keeper_pass();
    assert_eq!(
        pending_nonce(&stack).await,
        1,
        "no second transaction in the pool"
    );

    stack.automine(true).await;
    stack.chain.mine(1).await;
    stack.keeper_pass();
    stack.sync_index().await;
    stack.keeper_pass();

    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(stack.journal(sub).await, vec![(2, 1, "mined".to_string())]);
    assert_eq!(stack.keeper_tx_count().await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stuck_transaction_is_replaced_with_the_same_nonce_and_a_higher_fee() {
    let (stack, sub) = due_subscription().await;
    replace_while_stuck_then_mine(&stack).await;

    let rows = stack
        .pg
        .query(
            "SELECT nonce, max_fee_per_gas::TEXT, status FROM keeper_txs ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    assert!(rows.len() >= 2, "a replacement was journaled");
    let fees: Vec<u128> = rows
        .iter()
        .map(|r| r.get::<_, String>(1).parse().unwrap())
        .collect();
    assert!(fees.windows(2).all(|w| w[1] > w[0]), "fees rise: {fees:?}");
    assert!(
        rows.iter().all(|r| r.get::<_, i64>(0) == 0),
        "one nonce for every tx"
    );
    let statuses: Vec<String> = rows.iter().map(|r| r.get(2)).collect();
    assert_eq!(
        statuses.iter().filter(|s| *s == "mined").count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(statuses.last().unwrap(), "mined", "{statuses:?}");

    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(stack.keeper_tx_count().await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn many_due_subscriptions_with_bounded_concurrency_are_each_charged_once() {
    let stack = Stack::start().await;
    let plan_a = stack.create_plan().await;
    let plan_b = stack.create_plan().await;
    let customers = [accounts::CUSTOMER, accounts::CUSTOMER_B, 6, 7, 8];
    let mut subs = Vec::new();
    for c in customers {
        subs.push(stack.subscribe(c, plan_a, 3).await);
        subs.push(stack.subscribe(c, plan_b, 3).await);
    }
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;

    // At most 3 in flight, one renewal each: the long-running keeper needs several passes,
    // and is killed and restarted half way.
    let one_each = ["--concurrency", "3", "--charges-per-tx", "1"];
    let keeper = spawn(stack.keeper(), &one_each);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            4,
        )
        .await;
    keeper.kill();
    let _keeper = spawn(stack.keeper(), &one_each);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            10,
        )
        .await;

    let deadline = Instant::now() + Duration::from_secs(30);
    while stack.keeper_tx_count().await < 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stack.assert_each_charged_once(&subs).await;
    assert_eq!(stack.keeper_tx_count().await, 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn nonce_used_outside_the_keeper_is_detected_and_the_counter_resyncs() {
    use alloy::network::TransactionBuilder;
    use alloy::primitives::U256;
    use alloy::rpc::types::TransactionRequest;

    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let first = stack.subscribe(accounts::CUSTOMER, plan, 3).await;
    stack.chain.increase_time(10 * DAY).await;
    let second = stack.subscribe(accounts::CUSTOMER_B, plan, 3).await;
    stack.chain.increase_time(22 * DAY).await;
    stack.sync_index().await;

    let keeper = spawn(stack.keeper(), &[]);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            1,
        )
        .await;
    // Someone else spends the keeper's next nonce; the keeper's counter is now stale.
    let me = keeper_address();
    stack
        .chain
        .provider
        .send_transaction(
            TransactionRequest::default()
                .with_from(me)
                .with_to(me)
                .with_value(U256::ZERO),
        )
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    stack.chain.increase_time(10 * DAY).await;
    stack.sync_index().await;
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            2,
        )
        .await;
    keeper.kill();

    assert_eq!(
        stack.steps(first).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(
        stack.steps(second).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );
    assert_eq!(stack.keeper_tx_count().await, 3);
    let rows = stack
        .pg
        .query(
            "SELECT t.nonce, t.status, COALESCE(t.error, '') FROM keeper_txs t
             JOIN keeper_steps k ON k.id = t.step_id WHERE k.subscription_id = $1 ORDER BY t.id",
            &[&(second as i64)],
        )
        .await
        .unwrap();
    let got: Vec<(i64, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "failed".to_string(), "nonce too low".to_string()),
            (2, "mined".to_string(), String::new()),
        ]
    );
}

/// A stuck `chargeMany` is replaced by the same call — the same steps in the same order,
/// still `chargeMany` — at the same nonce with a higher fee; exactly one of them is mined and
/// renews every subscription of the batch once.
#[tokio::test(flavor = "multi_thread")]
async fn a_stuck_batch_is_replaced_by_the_same_call_at_the_same_nonce() {
    let stack = Stack::start().await;
    let subs = stack
        .due_renewals(&[accounts::CUSTOMER, accounts::CUSTOMER_B])
        .await;
    replace_while_stuck_then_mine(&stack).await;

    stack.assert_each_charged_once(&subs).await;
    let rows = stack
        .pg
        .query(
            "SELECT step_ids, nonce, status FROM keeper_txs ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    assert!(rows.len() >= 2, "a replacement was journaled");
    let first: Vec<i64> = rows[0].get(0);
    assert_eq!(first.len(), 2);
    for r in &rows {
        assert_eq!(r.get::<_, Vec<i64>>(0), first, "the same steps, same order");
        assert_eq!(r.get::<_, i64>(1), 0, "one nonce for every tx");
    }
    let mined = rows
        .iter()
        .filter(|r| r.get::<_, String>(2) == "mined")
        .count();
    assert_eq!(mined, 1);
    assert_eq!(stack.keeper_tx_count().await, 1);
}
