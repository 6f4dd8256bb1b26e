//! The running stack the page tests share: a fresh anvil and database, the real `api` binary
//! (and optionally the `indexer`) as processes, and small HTTP helpers.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use alloy::primitives::Address;
use chainsub_tests::chain::{DEV_KEYS, accounts};
use chainsub_tests::{ChildGuard, DevChain, Reserved, TestDb, bin_path, workspace_root};
use serde_json::Value;

pub(crate) const SECRET: &str = "browser-test-checkout-secret";
pub(crate) const EXPLORER: &str = "https://explorer.example/tx/";

/// The running stack of one test.
pub(crate) struct Stack {
    pub chain: DevChain,
    pub db: TestDb,
    pub base: String,
    pub http: reqwest::Client,
    _api: ChildGuard,
    _indexer: Option<ChildGuard>,
}

fn log_file(name: &str) -> Stdio {
    let dir = workspace_root().join("target/browser-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    Stdio::from(std::fs::File::create(dir.join(name)).expect("log file"))
}

pub(crate) async fn start(test: &str, with_indexer: bool) -> Stack {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let socket = Reserved::new();
    let base = socket.url();
    let api = Command::new(bin_path("api"))
        .env("DATABASE_URL", &db.url)
        .env("RPC_URL", &chain.anvil.url)
        .env("CHAIN_ID", chain.anvil.chain_id.to_string())
        .env("CONTRACT_ADDRESS", chain.manager.to_string())
        .env("USDC_ADDRESS", chain.usdc.to_string())
        .env("API_LISTEN", "stdin")
        .env("BASE_URL", &base)
        .env("RELAYER_PRIVATE_KEY", DEV_KEYS[accounts::OPERATOR])
        // The checkout hands out transactions for indexed plans only (issue 11, point 5).
        .env("CONFIRMATIONS", "0")
        .env("CHECKOUT_SIGNING_SECRET", SECRET)
        .env(
            "WEBHOOK_SECRETS_KEYS",
            chainsub_tests::TEST_WEBHOOK_SECRETS_KEYS,
        )
        .env("EXPLORER_TX_URL", format!("{EXPLORER}{{hash}}"))
        // A plan sent while the chain mines nothing answers `pending` after this long (the
        // plans page then follows it until it is indexed).
        .env("PROVISION_TIMEOUT_MS", "2000")
        .env("RATE_LIMIT_IP_PER_SEC", "1000")
        .env("RATE_LIMIT_IP_BURST", "1000")
        // The dashboard test delivers webhooks to a receiver on 127.0.0.1 over http, and
        // retries only from the dashboard's Retry button (the next automatic try is 1 h away).
        .env("WEBHOOK_ALLOW_HTTP", "true")
        .env("WEBHOOK_ALLOW_LOOPBACK", "true")
        .env("WEBHOOK_RETRY_SCHEDULE", "0s,1h,1h")
        .env("RUST_LOG", "info")
        .stdin(socket.stdin())
        .stdout(Stdio::null())
        .stderr(log_file(&format!("{test}-api.log")))
        .spawn()
        .expect("spawn api");
    let api = ChildGuard(api);
    let indexer = with_indexer.then(|| {
        let child = Command::new(bin_path("indexer"))
            .env("DATABASE_URL", &db.url)
            .env("RPC_URL", &chain.anvil.url)
            .env("CHAIN_ID", chain.anvil.chain_id.to_string())
            .env("CONTRACT_ADDRESS", chain.manager.to_string())
            .env("START_BLOCK", chain.deploy_block.to_string())
            .env("CONFIRMATIONS", "0")
            .env("INDEXER_METRICS_LISTEN", "127.0.0.1:0")
            .env("INDEXER_POLL_INTERVAL_MS", "100")
            .env("INDEXER_NO_FINALIZED_TAG", "true")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file(&format!("{test}-indexer.log")))
            .spawn()
            .expect("spawn indexer");
        ChildGuard(child)
    });
    let http = reqwest::Client::new();
    let client = chainsub_tests::merchant::ApiClient::new(&base);
    poll("the api to start", || async {
        client.started().await.then_some(())
    })
    .await;
    Stack {
        chain,
        db,
        base,
        http,
        _api: api,
        _indexer: indexer,
    }
}

pub(crate) use chainsub_tests::wait_for_some as poll;

pub(crate) fn screenshot_dir() -> PathBuf {
    workspace_root().join("target/browser-screenshots")
}

/// Runs a scenario script with `env`; fails the test (with its output) on a non-zero exit.
pub(crate) fn node(script: &str, env: &[(&str, String)]) {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).exists(),
        "{chromium} is missing: install Debian's `chromium` (apt-get install chromium) or set CHROMIUM"
    );
    let mut cmd = Command::new("node");
    cmd.current_dir(workspace_root())
        .arg(format!("tests/browser/{script}"))
        .env("SCREENSHOT_DIR", screenshot_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env("CHROMIUM", &chromium);
    let out = cmd.output().expect("run node (is Node.js installed?)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "browser scenario {script} failed ({}); see the output above and target/browser-logs/",
        out.status
    );
}

pub(crate) fn admin_create_key(db: &TestDb, wallet: Address) -> String {
    let out = Command::new(bin_path("api"))
        .args(["admin", "create-key", "--wallet", &wallet.to_string()])
        .env("DATABASE_URL", &db.url)
        .output()
        .expect("api admin create-key");
    assert!(
        out.status.success(),
        "create-key: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

pub(crate) async fn post(s: &Stack, key: &str, path: &str, body: Value) -> Value {
    let res = s
        .http
        .post(format!("{}{path}", s.base))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("POST");
    let status = res.status();
    let v: Value = res.json().await.expect("json");
    assert!(status.is_success(), "POST {path}: {status} {v}");
    v
}

/// A merchant key, an active plan "Pro Monthly" at 9.99 USDC, and a checkout link for
/// `customer`: (key, plan, checkout).
pub(crate) async fn plan_and_checkout(s: &Stack, customer: &str) -> (String, Value, Value) {
    let key = admin_create_key(&s.db, DevChain::address(accounts::MERCHANT));
    let plan = post(
        s,
        &key,
        "/api/v1/plans",
        serde_json::json!({"name": "Pro Monthly", "amount": "9.99", "currency": "USDC", "interval": "month"}),
    )
    .await;
    assert_eq!(
        plan["status"], "active",
        "plan provisioned on chain: {plan}"
    );
    let checkout = post(
        s,
        &key,
        "/api/v1/checkouts",
        serde_json::json!({"planId": plan["id"], "customerExternalId": customer}),
    )
    .await;
    (key, plan, checkout)
}

/// Subscribes `customer` through a checkout link as the page would: funds the wallet, asks
/// the link's transaction endpoint (once the indexer has the plan) and sends what it hands
/// out. Returns the on-chain subscription id.
pub(crate) async fn subscribe_through_checkout(
    s: &Stack,
    checkout_url: &str,
    customer: Address,
) -> u64 {
    s.chain.mint(customer, 100_000_000).await;
    let tx_url = format!(
        "{}&permit=off&from={customer}",
        checkout_url.replacen('?', "/tx?", 1)
    );
    let v = poll("the checkout's transactions", || async {
        let res = s.http.get(&tx_url).send().await.ok()?;
        (res.status() == 200).then_some(())?;
        res.json::<Value>().await.ok()
    })
    .await;
    for step in v["steps"].as_array().expect("steps") {
        chainsub_tests::merchant::send_tx_request(&s.chain.provider, &step["tx"])
            .await
            .unwrap_or_else(|e| panic!("{}: {e:#}", step["step"]));
    }
    let live = s
        .chain
        .manager()
        .liveSubscriptionOf(
            alloy::primitives::U256::from(v["planOnchainId"].as_u64().unwrap()),
            customer,
        )
        .call()
        .await
        .expect("liveSubscriptionOf");
    live.to::<u64>()
}
