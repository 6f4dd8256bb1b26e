//! `indexer verify` reports rows deleted or altered by hand, and is clean otherwise.

use std::process::Command;

use crate::common::*;
use alloy::primitives::B256;
use chainsub_tests::chain::accounts::{CUSTOMER, MERCHANT};
use chainsub_tests::{DevChain, TestDb};

fn verify(chain: &DevChain, db: &TestDb, to: u64) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_indexer"))
        .args([
            "verify",
            "--from",
            &chain.deploy_block.to_string(),
            "--to",
            &to.to_string(),
        ])
        .env("DATABASE_URL", &db.url)
        .env("RPC_URL", &chain.anvil.url)
        .env("CHAIN_ID", chain.anvil.chain_id.to_string())
        .env("CONTRACT_ADDRESS", chain.manager.to_string())
        .env("RUST_LOG", "warn")
        .output()
        .expect("run indexer verify");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn verify_finds_deleted_and_altered_rows_and_is_clean_otherwise() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let client = db.connect().await;
    let plan = create_plan(
        &chain,
        DevChain::address(MERCHANT),
        USDC,
        B256::repeat_byte(1),
    )
    .await;
    create_plan(
        &chain,
        DevChain::address(MERCHANT),
        2 * USDC,
        B256::repeat_byte(2),
    )
    .await;
    fund(&chain, DevChain::address(CUSTOMER), 10 * USDC).await;
    subscribe(&chain, DevChain::address(CUSTOMER), plan, B256::ZERO).await;
    let ix = start(chain_config(&chain), &db, &chain);
    wait_for_head(&client, &chain).await;
    ix.stop().await.unwrap();
    let head = chain_head(&chain).await.0;

    let (ok, out) = verify(&chain, &db, head);
    assert!(ok, "clean index: {out}");
    assert!(out.contains("clean"), "{out}");

    let deleted: (i64, i32) = {
        let r = client
            .query_one(
                "DELETE FROM chain_events WHERE name = 'PlanCreated' AND plan_id = 2
                 RETURNING block_number, log_index",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    let altered: i64 = client
        .query_one(
            "UPDATE chain_events SET decoded = jsonb_set(decoded, '{amount}', '\"1\"')
             WHERE name = 'SubscriptionCharged' RETURNING block_number",
            &[],
        )
        .await
        .unwrap()
        .get(0);

    let (ok, out) = verify(&chain, &db, head);
    assert!(!ok, "differences must fail the command: {out}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("verify:")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        out.contains(&format!("missing: block {} ", deleted.0))
            && out.contains(&format!("log {}", deleted.1)),
        "{out}"
    );
    assert!(
        out.contains(&format!("differs: block {altered} ")) && out.contains("(decoded)"),
        "{out}"
    );
}
