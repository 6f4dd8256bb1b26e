//! A measurement, not a gate (run with `--ignored --nocapture`): how long the keeper takes
//! to charge many due subscriptions, for a few concurrency settings. It still asserts that
//! every subscription was charged exactly once.

use std::time::Instant;

use crate::support::{DAY, Stack, Step, spawn};

async fn charge_all(subs_per_customer: usize, concurrency: &str) {
    let stack = Stack::start().await;
    let customers = [4usize, 5, 6, 7, 8];
    let mut subs = Vec::new();
    for _ in 0..subs_per_customer {
        let plan = stack.create_plan().await;
        for c in customers {
            subs.push(stack.subscribe(c, plan, 3).await);
        }
    }
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;

    let started = Instant::now();
    let _keeper = spawn(stack.keeper(), &["--concurrency", concurrency]);
    stack
        .wait_count(
            "SELECT count(*) FROM keeper_steps WHERE status = 'mined'",
            subs.len() as i64,
        )
        .await;
    let took = started.elapsed();
    println!(
        "keeper charged {} subscriptions with concurrency {concurrency} (poll 100 ms) in {:.2?}",
        subs.len(),
        took
    );
    for sub in subs {
        assert_eq!(
            stack.steps(sub).await,
            vec![Step::Charged {
                period: 2,
                attempt: 1
            }]
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "measurement; run with --ignored --nocapture"]
async fn throughput_of_charging_50_due_subscriptions() {
    for concurrency in ["1", "8", "50"] {
        charge_all(10, concurrency).await;
    }
}
