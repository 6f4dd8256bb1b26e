//! Issue 46, point 7: a provider's RPC URL carries its API key in the path or the query.
//! With such a URL — and the node unreachable, so every error path runs — no response of the
//! API and no log line of the indexer, the API or the keeper contains the key; the merchant
//! is told what kind of failure stopped provisioning.

use chainsub_tests::chain::accounts::MERCHANT;
use chainsub_tests::chain::dev_key;
use chainsub_tests::merchant::{ApiClient, wait_for};
use chainsub_tests::services::{Services, test_env};
use chainsub_tests::{DevChain, TestDb};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rpc_url_with_a_key_in_it_reaches_no_response_and_no_log() {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut env = test_env(&chain, &db, 1);
    for (k, v) in [
        (
            "RPC_URL",
            format!("http://ops:PASSWORDX@127.0.0.1:{dead}/v3/KEYSECRET0123?apikey=QUERYSECRET"),
        ),
        // Start-up gives up on the node quickly (the indexer and keeper exit, logging why).
        ("STARTUP_DEADLINE_SECS", "2".into()),
        ("RUST_LOG", "info".into()),
    ] {
        env.retain(|(key, _)| key != k);
        env.push((k.into(), v));
    }
    let mut services = Services::start(env);
    let api = ApiClient::new(&services.api.url());
    wait_for("the API to start", 60, || async {
        Ok(api.started().await.then_some(()))
    })
    .await
    .unwrap();
    let session = api.sign_in(&dev_key(MERCHANT)).await.unwrap();
    let key = api.create_key(&session).await.unwrap();
    let (status, plan) = api
        .post(
            "/api/v1/plans",
            &key,
            &json!({"name": "Secret", "amount": "5", "currency": "USDC", "interval": "month"}),
        )
        .await
        .unwrap();
    let mut bodies = vec![plan.to_string()];
    assert_eq!(status, 201, "{plan}");
    assert_eq!(plan["provisioning"]["state"], "failed", "{plan}");
    assert_eq!(
        plan["provisioning"]["error"], "the chain RPC could not be reached",
        "{plan}"
    );
    let id = plan["id"].as_str().unwrap();
    let (_, retried) = api
        .post(&format!("/api/v1/plans/{id}/provision"), &key, &json!({}))
        .await
        .unwrap();
    bodies.push(retried.to_string());
    bodies.push(api.health().await.unwrap().1.to_string());
    bodies.push(api.get_ok("/api/v1/plans", &key).await.unwrap().to_string());

    // The indexer and the keeper give up on the node after the start-up deadline and exit,
    // logging why.
    for (name, child) in &mut services.children {
        if *name == "api" {
            continue;
        }
        let status = tokio::time::timeout(std::time::Duration::from_secs(90), async {
            loop {
                if let Some(status) = child.0.try_wait().unwrap() {
                    return status;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{name} still running"));
        assert!(!status.success(), "{name} exited {status}");
    }
    let logs = services.logs.clone();
    for name in ["indexer", "api", "keeper"] {
        bodies.push(std::fs::read_to_string(logs.join(format!("{name}.log"))).unwrap());
    }
    for text in &bodies {
        for secret in ["KEYSECRET", "QUERYSECRET", "PASSWORDX"] {
            assert!(!text.contains(secret), "{secret} leaked in: {text}");
        }
    }
}
