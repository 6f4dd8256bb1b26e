//! The reconciliation round trip (issue 12, point 8): a merchant's charges and failed charges
//! happen on anvil through the real stack (checkout, keeper), the merchant exports its ledger
//! from `GET /api/v1/ledger` as NDJSON and CSV, and `indexer verify-export` — given nothing
//! but the RPC URL, as an auditor would run it — finds both files clean, and finds each kind
//! of tampering: a changed amount, a changed block hash, a dropped entry, a missing total,
//! and an entry the chain itself took back in a reorg.

use alloy::primitives::U256;
use chainsub_tests::chain::accounts::{CUSTOMER, CUSTOMER_B, MERCHANT};
use chainsub_tests::chain::dev_key;
use chainsub_tests::merchant::{ApiClient, wait_for};
use chainsub_tests::services::{Services, test_env};
use chainsub_tests::{DevChain, TestDb, scratch_dir};
use serde_json::Value;

const USDC: u64 = 1_000_000;

async fn export(api: &ApiClient, key: &str, query: &str) -> String {
    let r = reqwest::Client::new()
        .get(api.url(&format!("/api/v1/ledger{query}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

/// Runs verify-export on `text`; returns (exit code, output).
fn check(services: &Services, dir: &std::path::Path, name: &str, text: &str) -> (i32, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    services.verify_export(&path)
}

fn ndjson(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn to_ndjson(records: &[Value]) -> String {
    records.iter().map(|r| format!("{r}\n")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_exported_ledger_verifies_against_the_chain_and_every_tampering_is_found() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let (a_wallet, b_wallet) = (DevChain::address(CUSTOMER), DevChain::address(CUSTOMER_B));
    for w in [a_wallet, b_wallet] {
        chain.mint(w, 1_000 * USDC).await;
    }
    let mut services = Services::start(test_env(&chain, &db, 1));
    let api = services.api_client().await;
    let session = api.sign_in(&dev_key(MERCHANT)).await.unwrap();
    let key = api.create_key(&session).await.unwrap();
    let plan = api.create_plan(&key, "Audit", "4.50").await.unwrap();
    let plan_id = plan["id"].as_str().unwrap();
    chain.mine(1).await;
    for (customer, wallet) in [("user-a", a_wallet), ("user-b", b_wallet)] {
        let checkout = api.create_checkout(&key, plan_id, customer).await.unwrap();
        api.subscribe_via_checkout(checkout["url"].as_str().unwrap(), &chain.provider, wallet)
            .await
            .unwrap();
    }
    // B withdraws its allowance: at the renewal the keeper charges A and B's pull fails.
    chainsub_tests::send_as!(b_wallet, chain.usdc().approve(chain.manager, U256::ZERO));
    chain.increase_time(32 * 86_400).await;
    wait_for("a renewal charge and a failed charge", 90, || async {
        let text = export(&api, &key, "?toBlock=100000").await;
        let recs = ndjson(&text);
        let kinds: Vec<&str> = recs
            .iter()
            .filter(|r| r["record"] == "entry")
            .map(|r| r["kind"].as_str().unwrap())
            .collect();
        let done = kinds.iter().filter(|k| **k == "charge").count() == 3
            && kinds.contains(&"failed_charge");
        Ok(done.then_some(()))
    })
    .await
    .unwrap();
    services.assert_alive();
    chain.mine(2).await;
    wait_for("the index to reach the head", 60, || async {
        let (_, h) = api.health().await?;
        let head = alloy::providers::Provider::get_block_number(&chain.provider).await?;
        Ok((h["chain"]["indexedBlock"].as_u64() >= Some(head)).then_some(()))
    })
    .await
    .unwrap();

    // The default export (confirmed blocks) and its CSV twin are clean.
    let dir = scratch_dir("export");
    let text = export(&api, &key, "").await;
    let recs = ndjson(&text);
    let entries: Vec<&Value> = recs.iter().filter(|r| r["record"] == "entry").collect();
    assert_eq!(
        entries.len(),
        4,
        "two first charges, a renewal, a failure: {text}"
    );
    assert_eq!(entries[0]["planId"], plan_id);
    assert_eq!(entries[0]["customerExternalId"], "user-a");
    let (code, out) = check(&services, &dir, "ledger.ndjson", &text);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("4 entries: clean"), "{out}");
    let csv = export(&api, &key, "?format=csv").await;
    let (code, out) = check(&services, &dir, "ledger.csv", &csv);
    assert_eq!(code, 0, "{out}");

    // A changed amount, with the total changed to match: the log says otherwise.
    let mut forged = recs.clone();
    let i = forged.iter().position(|r| r["kind"] == "charge").unwrap();
    forged[i]["amount"] = "4500".into();
    let t = forged
        .iter()
        .position(|r| r["record"] == "total" && r["kind"] == "charge")
        .unwrap();
    forged[t]["amount"] = (4_500_000u64 * 2 + 4500).to_string().into();
    let (code, out) = check(&services, &dir, "amount.ndjson", &to_ndjson(&forged));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "line {}: amount \"4500\" but the chain says \"4500000\"",
            i + 1
        )),
        "{out}"
    );

    // A changed block hash.
    let mut forged = recs.clone();
    forged[0]["blockHash"] = format!("0x{}", "ab".repeat(32)).into();
    let (code, out) = check(&services, &dir, "hash.ndjson", &to_ndjson(&forged));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 1: blockHash 0xabab"), "{out}");

    // A dropped entry: the totals no longer add up, and the chain has a charge the file lacks.
    let mut forged = recs.clone();
    let dropped = forged.remove(i);
    let (code, out) = check(&services, &dir, "dropped.ndjson", &to_ndjson(&forged));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("total charge: 3 entries in the total, 2 in the file"),
        "{out}"
    );
    let tx = dropped["transactionHash"].as_str().unwrap();
    assert!(
        out.contains(&format!(
            "missing from the file: charge at block {} tx {tx}",
            dropped["blockNumber"]
        )),
        "{out}"
    );

    // The totals cut off (a broken download).
    let cut: Vec<Value> = recs
        .iter()
        .filter(|r| r["record"] == "entry")
        .cloned()
        .collect();
    let (code, out) = check(&services, &dir, "cut.ndjson", &to_ndjson(&cut));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("no total records: the export was cut short"),
        "{out}"
    );

    // The chain takes the newest entry back: the old file no longer verifies.
    let newest = entries.last().unwrap();
    let head = alloy::providers::Provider::get_block_number(&chain.provider)
        .await
        .unwrap();
    let depth = head - newest["blockNumber"].as_u64().unwrap() + 1;
    chain.reorg(depth, &[]).await;
    let (code, out) = check(&services, &dir, "reorged.ndjson", &text);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("line {}:", entries.len())), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
