//! `scripts/dev up` end to end: anvil started, contracts deployed and funded, database
//! migrated, `stack.env` complete and truthful, and SIGTERM stops everything cleanly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use chainsub_abi::{MockUSDC, SubscriptionManager};
use chainsub_tests::chain::{DEV_KEYS, accounts, signing_provider};
use chainsub_tests::{ChildGuard, DevChain, TestDb};

const DEV: &str = env!("CARGO_BIN_EXE_chainsub-dev");

/// Settings a parent shell might have exported (e.g. from a sourced stack.env); the command
/// under test must only see what the test passes.
const AMBIENT: [&str; 5] = [
    "RPC_URL",
    "DATABASE_URL",
    "ANVIL_PORT",
    "CONFIRMATIONS",
    "API_LISTEN",
];

fn dev(dir: &Path) -> Command {
    let mut cmd = Command::new(DEV);
    cmd.arg("--dev-dir").arg(dir);
    for k in AMBIENT {
        cmd.env_remove(k);
    }
    cmd
}

fn scratch_dir() -> PathBuf {
    chainsub_tests::scratch_dir("chainsub-dev-test")
}

fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once('=').expect("KEY=value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[tokio::test]
async fn dev_up_deploys_funds_migrates_writes_stack_env_and_stops_on_sigterm() {
    let db = TestDb::create_empty().await;
    let dir = scratch_dir();
    let log = std::fs::File::create(dir.join("up.out")).unwrap();
    let mut up = ChildGuard(
        dev(&dir)
            // Chain and database only: the services and demo are covered by e2e_dev_demo.rs.
            // Anvil on port 0: the port it binds is the one stack.env names.
            .args(["up", "--no-services", "--anvil-port", "0"])
            .args(["--database-url", &db.url])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    );

    // The pid file is written last, once everything is in place.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dir.join("stack.pid").exists() {
        let out = || std::fs::read_to_string(dir.join("up.out")).unwrap_or_default();
        if let Ok(Some(status)) = up.0.try_wait() {
            panic!("`up` exited ({status}):\n{}", out());
        }
        assert!(Instant::now() < deadline, "`up` never came up:\n{}", out());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let env = parse_env(&std::fs::read_to_string(dir.join("stack.env")).unwrap());
    let rpc_url = env["RPC_URL"].clone();
    let port: u16 = rpc_url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .filter(|p| *p != 0)
        .unwrap_or_else(|| panic!("RPC_URL names anvil's bound port: {rpc_url}"));
    let expected_fixed = [
        ("DATABASE_URL", db.url.clone()),
        ("RPC_URL", rpc_url.clone()),
        ("CHAIN_ID", "31337".to_string()),
        ("CONFIRMATIONS", "0".to_string()),
        ("API_LISTEN", "127.0.0.1:8080".to_string()),
        ("BASE_URL", "http://127.0.0.1:8080".to_string()),
        (
            "RELAYER_PRIVATE_KEY",
            format!("0x{}", DEV_KEYS[accounts::OPERATOR]),
        ),
        (
            "KEEPER_PRIVATE_KEY",
            format!("0x{}", DEV_KEYS[accounts::KEEPER]),
        ),
    ];
    for (k, v) in &expected_fixed {
        assert_eq!(env.get(*k), Some(v), "{k}");
    }
    for k in [
        "CONTRACT_ADDRESS",
        "USDC_ADDRESS",
        "START_BLOCK",
        "CHECKOUT_SIGNING_SECRET",
        "WEBHOOK_SECRETS_KEYS",
    ] {
        assert!(env.get(k).is_some_and(|v| !v.is_empty()), "{k} missing");
    }

    // The chain holds what stack.env says.
    let provider = signing_provider(&rpc_url);
    let manager_addr: Address = env["CONTRACT_ADDRESS"].parse().unwrap();
    let usdc_addr: Address = env["USDC_ADDRESS"].parse().unwrap();
    let start_block: u64 = env["START_BLOCK"].parse().unwrap();
    let manager = SubscriptionManager::new(manager_addr, provider.clone());
    assert_eq!(manager.token().call().await.unwrap(), usdc_addr);
    assert_eq!(
        manager.operator().call().await.unwrap(),
        DevChain::address(accounts::OPERATOR)
    );
    let code_at = |block: u64| {
        let p = provider.clone();
        async move { p.get_code_at(manager_addr).number(block).await.unwrap() }
    };
    assert!(
        !code_at(start_block).await.is_empty(),
        "deployed by START_BLOCK"
    );
    assert!(
        code_at(start_block - 1).await.is_empty(),
        "not before START_BLOCK"
    );
    let usdc = MockUSDC::new(usdc_addr, provider.clone());
    for i in 2..=9 {
        let balance = usdc.balanceOf(DevChain::address(i)).call().await.unwrap();
        assert_eq!(balance, U256::from(10_000_000_000u64), "dev account {i}");
    }

    // The database is migrated.
    let applied: i64 = db
        .connect()
        .await
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied as usize, chainsub_migrations::MIGRATIONS.len());

    // `status` sees it; a second `up` on the same directory is refused.
    let status = dev(&dir).arg("status").output().unwrap();
    let status_out = String::from_utf8_lossy(&status.stdout);
    assert!(status_out.starts_with("up (pid"), "{status_out}");
    assert!(status_out.contains("chain: answering"), "{status_out}");
    assert!(status_out.contains("database: answering"), "{status_out}");
    let second = dev(&dir)
        .args(["up", "--no-services", "--anvil-port", "0"])
        .args(["--database-url", &db.url])
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("already up"));

    // SIGTERM: a clean exit that takes anvil down with it.
    let exit = up.terminate(30).expect("`up` exits after SIGTERM");
    assert!(exit.success(), "{exit}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "anvil still listening"
    );
    assert!(!dir.join("stack.pid").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
