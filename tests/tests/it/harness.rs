//! The harness itself: anvil's dev accounts are the keys we think they are, and contracts
//! deploy from the committed bytecode.

use alloy::providers::Provider;
use chainsub_tests::{DevChain, TestDb, chain::DEV_KEYS};

#[tokio::test]
async fn dev_keys_match_anvil_accounts_and_contracts_deploy() {
    let chain = DevChain::start().await;
    let accounts = chain.provider.get_accounts().await.unwrap();
    for (i, acct) in accounts.iter().take(DEV_KEYS.len()).enumerate() {
        assert_eq!(*acct, DevChain::address(i), "dev key {i}");
    }
    let code = chain.provider.get_code_at(chain.manager).await.unwrap();
    assert!(!code.is_empty());
    assert_eq!(chain.manager().token().call().await.unwrap(), chain.usdc);
}

#[tokio::test]
async fn test_database_is_migrated_and_dropped() {
    let db = TestDb::create().await;
    let name = db.name.clone();
    let client = db.connect().await;
    let n: i64 = client
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert!(n >= 1);
    drop(client);
    drop(db);
    let admin = chainsub_tests::db::connect(&chainsub_tests::db::admin_url()).await;
    let left: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
