//! Browser tests: the real `api` and `indexer` binaries on a fresh anvil and database, driven
//! by headless Chromium (`node tests/browser/<scenario>.mjs`, playwright-core) with a test
//! wallet that forwards to anvil. Needs: `cargo build -p chainsub-api -p chainsub-indexer
//! --bins`, Debian `chromium` at /usr/bin/chromium (or CHROMIUM=path), and `npm ci`.
//! Screenshots go to target/browser-screenshots/.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use chainsub_tests::chain::{DEV_KEYS, accounts};
use chainsub_tests::{ChildGuard, DevChain, TestDb, bin_path, free_port, workspace_root};
use serde_json::{Value, json};

const SECRET: &str = "browser-test-checkout-secret";
const EXPLORER: &str = "https://explorer.example/tx/";

/// The running stack of one test.
struct Stack {
    chain: DevChain,
    db: TestDb,
    base: String,
    http: reqwest::Client,
    _api: ChildGuard,
    _indexer: Option<ChildGuard>,
}

fn log_file(name: &str) -> Stdio {
    let dir = workspace_root().join("target/browser-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    Stdio::from(std::fs::File::create(dir.join(name)).expect("log file"))
}

async fn start(test: &str, with_indexer: bool) -> Stack {
    let chain = DevChain::start().await;
    let db = TestDb::create().await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let api = Command::new(bin_path("api"))
        .env("DATABASE_URL", &db.url)
        .env("RPC_URL", &chain.anvil.url)
        .env("CHAIN_ID", chain.anvil.chain_id.to_string())
        .env("CONTRACT_ADDRESS", chain.manager.to_string())
        .env("USDC_ADDRESS", chain.usdc.to_string())
        .env("API_LISTEN", format!("127.0.0.1:{port}"))
        .env("BASE_URL", &base)
        .env("RELAYER_PRIVATE_KEY", DEV_KEYS[accounts::OPERATOR])
        .env("CHECKOUT_SIGNING_SECRET", SECRET)
        .env("EXPLORER_TX_URL", format!("{EXPLORER}{{hash}}"))
        .env("RATE_LIMIT_IP_PER_SEC", "1000")
        .env("RATE_LIMIT_IP_BURST", "1000")
        .env("RUST_LOG", "info")
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
            .env(
                "INDEXER_METRICS_LISTEN",
                format!("127.0.0.1:{}", free_port()),
            )
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
    let health = format!("{base}/api/v1/health");
    poll("the api to answer", || async {
        http.get(&health).send().await.ok().map(|_| ())
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

/// Polls `f` every 200 ms until it yields, for at most 90 s (a bound against hangs, not a
/// timing assertion).
async fn poll<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..450 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("gave up waiting for {what}");
}

fn screenshot_dir() -> PathBuf {
    workspace_root().join("target/browser-screenshots")
}

/// Runs a scenario script with `env`; fails the test (with its output) on a non-zero exit.
fn node(script: &str, env: &[(&str, String)]) {
    let mut cmd = Command::new("node");
    cmd.current_dir(workspace_root())
        .arg(format!("tests/browser/{script}"))
        .env("SCREENSHOT_DIR", screenshot_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
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

fn admin_create_key(db: &TestDb, wallet: alloy::primitives::Address) -> String {
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

async fn post(s: &Stack, key: &str, path: &str, body: Value) -> Value {
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

#[tokio::test(flavor = "multi_thread")]
async fn customer_subscribes_from_checkout_link_and_api_shows_external_id() {
    let s = start("checkout", true).await;
    let customer = DevChain::address(accounts::CUSTOMER);
    let poor = DevChain::address(accounts::CUSTOMER_B);
    let key = admin_create_key(&s.db, DevChain::address(accounts::MERCHANT));
    let plan = post(
        &s,
        &key,
        "/api/v1/plans",
        json!({"name": "Pro Monthly", "amount": "9.99", "currency": "USDC", "interval": "month"}),
    )
    .await;
    assert_eq!(
        plan["status"], "active",
        "plan provisioned on chain: {plan}"
    );
    let checkout = post(
        &s,
        &key,
        "/api/v1/checkouts",
        json!({"planId": plan["id"], "customerExternalId": "cust_browser_42"}),
    )
    .await;
    let url = checkout["url"].as_str().expect("checkout url").to_string();
    s.chain.mint(customer, 100_000_000).await;

    // Edited or unsigned links get a clear error page, not the checkout.
    let tampered = url.replace("cust_browser_42", "cust_browser_43");
    let res = s.http.get(&tampered).send().await.expect("GET");
    assert_eq!(res.status(), 403);
    assert!(
        res.text()
            .await
            .unwrap()
            .contains("This checkout link is not valid")
    );
    let unsigned = url.split("&sig=").next().unwrap().to_string();
    let res = s.http.get(&unsigned).send().await.expect("GET");
    assert_eq!(res.status(), 400);

    node(
        "checkout.mjs",
        &[
            ("CHECKOUT_URL", url),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            ("CUSTOMER", customer.to_string()),
            ("POOR_CUSTOMER", poor.to_string()),
            ("PLAN_NAME", "Pro Monthly".into()),
            ("EXPLORER_PREFIX", EXPLORER.into()),
        ],
    );

    // The indexer picks the subscription up; the API ties it to the link's customer.
    let list_url = format!(
        "{}/api/v1/subscriptions?customerExternalId=cust_browser_42",
        s.base
    );
    let sub = poll("the subscription in GET /api/v1/subscriptions", || async {
        let v: Value = s
            .http
            .get(&list_url)
            .bearer_auth(&key)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["data"].as_array()?.first().cloned()
    })
    .await;
    assert_eq!(sub["customerExternalId"], "cust_browser_42", "{sub}");
    assert_eq!(sub["status"], "active", "{sub}");
    assert_eq!(sub["planId"], plan["id"], "{sub}");
    assert_eq!(
        sub["subscriber"].as_str().map(str::to_lowercase),
        Some(customer.to_string().to_lowercase()),
        "{sub}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn merchant_signs_in_sees_key_once_and_rotation_kills_old_key() {
    let s = start("dashboard", false).await;
    node(
        "dashboard.mjs",
        &[
            ("BASE_URL", s.base.clone()),
            ("RPC_URL", s.chain.anvil.url.clone()),
            ("CHAIN_ID", s.chain.anvil.chain_id.to_string()),
            (
                "MERCHANT",
                DevChain::address(accounts::MERCHANT_B).to_string(),
            ),
        ],
    );
    // The key the UI left live is the only one, and it is the merchant's.
    let conn = s.db.connect().await;
    let live: i64 = conn
        .query_one(
            "SELECT count(*) FROM api_keys k JOIN merchants m ON m.id = k.merchant_id \
             WHERE k.revoked_at IS NULL AND m.wallet = $1",
            &[&DevChain::address(accounts::MERCHANT_B).as_slice().to_vec()],
        )
        .await
        .expect("count keys")
        .get(0);
    assert_eq!(live, 1);
}
