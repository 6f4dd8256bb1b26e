//! A reorg that takes a mined charge out of the chain: the keeper re-broadcasts the same
//! signed transaction (same nonce) instead of forgetting the step or signing a second one.

use crate::support::{Stack, Step, due_subscription};
use chainsub_tests::chain::accounts;

#[tokio::test(flavor = "multi_thread")]
async fn charge_reorged_out_is_rebroadcast_with_the_same_bytes_and_lands_once() {
    let (stack, sub) = due_subscription(3).await;

    stack.keeper_pass();
    stack.sync_index().await;
    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }]
    );

    // Replace the charge's block with an empty one.
    stack.chain.reorg(1, &[]).await;
    stack.chain.mine(1).await;
    // The chain may or may not have re-queued the dropped transaction; either way it is gone
    // from the canonical chain until someone re-broadcasts it.
    let on_chain_after_reorg = stack.steps(sub).await;

    stack.keeper_pass();
    stack.chain.mine(1).await;
    stack.sync_index().await;
    stack.keeper_pass();

    assert_eq!(
        stack.steps(sub).await,
        vec![Step::Charged {
            period: 2,
            attempt: 1
        }],
        "after the reorg the chain had {on_chain_after_reorg:?}"
    );
    assert_eq!(stack.journal(sub).await, vec![(2, 1, "mined".to_string())]);
    assert_eq!(stack.keeper_tx_count().await, 1);
    let txs = stack.journaled_tx_count().await;
    assert_eq!(
        txs, 1,
        "the journaled bytes were re-broadcast, not re-signed"
    );
    assert_eq!(stack.indexed_status(sub).await, "active");
}

/// The same for a batch: the reorged-out `chargeMany` goes out again byte for byte, and each
/// of its renewals lands once.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_reorged_out_is_rebroadcast_with_the_same_bytes_and_each_renewal_lands_once() {
    let stack = Stack::start().await;
    let subs = stack
        .due_renewals(&[accounts::CUSTOMER, accounts::CUSTOMER_B])
        .await;
    stack.keeper_pass();
    stack.sync_index().await;
    stack.assert_each_charged_once(&subs).await;

    stack.chain.reorg(1, &[]).await;
    stack.chain.mine(1).await;
    stack.keeper_pass();
    stack.chain.mine(1).await;
    stack.sync_index().await;
    stack.keeper_pass();

    assert_landed_once_from_the_journaled_bytes(&stack, &subs).await;
}

/// A busy node mines the keeper's `chargeMany` only after the pass that sent it has ended, so
/// the journal still says `sent` when a reorg takes the block out. The next pass finds no
/// receipt and a transaction the node no longer holds: it re-broadcasts the journaled bytes
/// at once (waiting for the replacement timeout would leave the renewals uncharged meanwhile).
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_reorged_out_before_its_receipt_was_recorded_is_rebroadcast_on_the_next_pass() {
    let stack = Stack::start().await;
    let subs = stack
        .due_renewals(&[accounts::CUSTOMER, accounts::CUSTOMER_B])
        .await;
    // The pass sends; nothing is mined before it ends.
    stack.automine(false).await;
    stack.keeper_pass();
    for &sub in &subs {
        assert_eq!(stack.journal(sub).await, vec![(2, 1, "sent".to_string())]);
    }
    // Mined after the pass, then reorged out before any keeper saw the receipt.
    stack.chain.mine(1).await;
    stack.assert_each_charged_once(&subs).await;
    stack.chain.reorg(1, &[]).await;
    stack.chain.mine(1).await;
    for &sub in &subs {
        assert_eq!(
            stack.steps(sub).await,
            vec![],
            "the reorg removed the charge"
        );
    }

    stack.keeper_pass();
    stack.chain.mine(1).await;
    stack.automine(true).await;
    stack.sync_index().await;
    stack.keeper_pass();

    assert_landed_once_from_the_journaled_bytes(&stack, &subs).await;
}

/// After a reorg and the keeper's passes: each renewal was charged once, by the one journaled
/// transaction sent again byte for byte (never re-signed).
async fn assert_landed_once_from_the_journaled_bytes(stack: &Stack, subs: &[u64]) {
    stack.assert_each_charged_once(subs).await;
    for &sub in subs {
        assert_eq!(stack.journal(sub).await, vec![(2, 1, "mined".to_string())]);
    }
    assert_eq!(stack.keeper_tx_count().await, 1);
    assert_eq!(
        stack.journaled_tx_count().await,
        1,
        "re-broadcast, not re-signed"
    );
}
