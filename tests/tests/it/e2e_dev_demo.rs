//! `scripts/dev up` with its services and demo: indexer, api and keeper start as separate
//! processes, the demo's merchant sees its renewal and every webhook verified, the printed
//! URLs answer, and SIGTERM (what Ctrl-C leads to) stops every process it started. Build the
//! binaries first: `cargo build -p chainsub-indexer -p chainsub-keeper -p chainsub-api --bins` (scripts/test does).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chainsub_tests::merchant::ApiClient;
use chainsub_tests::{ChildGuard, TestDb};

const DEV: &str = env!("CARGO_BIN_EXE_chainsub-dev");

fn scratch_dir() -> PathBuf {
    chainsub_tests::scratch_dir("chainsub-dev-demo")
}

/// Pids of the children `up` reported (`started NAME (pid N)`).
fn started_pids(out: &str) -> Vec<(String, u32)> {
    out.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("started ")?;
            let (name, pid) = rest.split_once(" (pid ")?;
            Some((name.to_string(), pid.trim_end_matches(')').parse().ok()?))
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    // A zombie has been stopped; only a running process counts.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn dev_up_runs_the_demo_through_separate_services_and_ctrl_c_stops_them_all() {
    let db = TestDb::create_empty().await;
    let dir = scratch_dir();
    let out_path = dir.join("up.out");
    let log = std::fs::File::create(&out_path).unwrap();
    let mut cmd = Command::new(DEV);
    for k in [
        "RPC_URL",
        "DATABASE_URL",
        "API_LISTEN",
        "CONFIRMATIONS",
        "ANVIL_PORT",
    ] {
        cmd.env_remove(k);
    }
    let mut up = ChildGuard(
        cmd.arg("--dev-dir")
            .arg(&dir)
            // Every port 0: `up` binds each socket before its service starts and prints
            // the addresses it got.
            .args(["up", "--anvil-port", "0"])
            .args(["--api-listen", "127.0.0.1:0"])
            .args(["--indexer-metrics-listen", "127.0.0.1:0"])
            .args(["--keeper-metrics-listen", "127.0.0.1:0"])
            .args(["--database-url", &db.url])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    );

    let deadline = Instant::now() + Duration::from_secs(240);
    while !read(&out_path).contains("Ctrl-C") {
        if let Ok(Some(status)) = up.0.try_wait() {
            panic!("`up` exited ({status}):\n{}", read(&out_path));
        }
        assert!(
            Instant::now() < deadline,
            "no stack after 240 s:\n{}",
            read(&out_path)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = read(&out_path);

    let pids = started_pids(&out);
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["anvil", "indexer", "api", "keeper"], "{out}");
    assert!(out.contains("signed in with SIWE"), "{out}");
    assert!(
        out.contains("sent `subscribe` from the checkout page's tx endpoint"),
        "{out}"
    );
    assert!(out.contains("after a 14-day free trial"), "{out}");
    assert!(out.contains(" trialing until "), "{out}");
    assert!(
        out.contains("the trial ended: the keeper charged period 1"),
        "{out}"
    );
    assert!(
        out.contains("the merchant refunded 2.00 USDC of period 1"),
        "{out}"
    );
    // Each demo step has its own number (two used to share 6).
    let numbers: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(". ").map(|(n, _)| n))
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        .collect();
    let unique: std::collections::BTreeSet<&&str> = numbers.iter().collect();
    assert_eq!(
        unique.len(),
        numbers.len(),
        "step numbers repeat: {numbers:?}"
    );
    assert!(
        out.contains("the merchant cancelled at period end through the API"),
        "{out}"
    );
    assert!(
        out.contains("the customer cancelled now from the self-service page"),
        "{out}"
    );
    // created (the trial) + charged (period 1) + refunded + cancel_at_period_end_set (the
    // merchant's cancel through the API) + cancelled (the customer's, from the page), each
    // listed and each verified.
    assert_eq!(out.matches("signature verified").count(), 5, "{out}");
    assert!(!out.contains("REJECTED"), "{out}");
    assert_eq!(out.matches("webhook delivered").count(), 5, "{out}");
    assert!(
        out.contains("subscription.cancel_at_period_end_set")
            && out.contains("subscription.cancelled"),
        "{out}"
    );
    assert!(out.contains("subscription.refunded"), "{out}");
    assert!(out.contains("period 1 9.99 USDC  tx 0x"), "{out}");
    assert!(out.contains("period 1 -2.00 USDC  tx 0x"), "{out}");

    // The printed URLs answer.
    let base = out
        .lines()
        .find_map(|l| l.strip_prefix("api answering at "))
        .expect("the API's address printed")
        .to_string();
    let api_addr = base.trim_start_matches("http://").to_string();
    assert!(!api_addr.ends_with(":0"), "{base}");
    assert!(
        out.contains(&format!("{base}/dashboard/developers")),
        "{out}"
    );
    let api = ApiClient::new(&base);
    let (status, health) = api.health().await.unwrap();
    assert_eq!(status, 200, "{health}");
    // `status` reports each service's health from its endpoint.
    let status = Command::new(DEV)
        .arg("--dev-dir")
        .arg(&dir)
        .arg("status")
        .output()
        .unwrap();
    let status_out = String::from_utf8_lossy(&status.stdout);
    for service in ["indexer", "keeper", "api"] {
        assert!(
            status_out.contains(&format!("{service}: healthy")),
            "{status_out}"
        );
    }
    // The demo merchant's key is printed short and written whole, owner-only, and works.
    let key_file = dir.join("api-key");
    assert!(
        out.contains(&format!("whole in {}", key_file.display())),
        "{out}"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let key = read(&key_file).trim().to_string();
    assert!(key.starts_with("sk_live_"), "{key}");
    let subs = api.get_ok("/api/v1/subscriptions", &key).await.unwrap();
    assert_eq!(subs["data"].as_array().unwrap().len(), 1, "{subs}");
    let checkout = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("checkout   "))
        .expect("checkout link printed");
    let page = reqwest::get(checkout).await.unwrap();
    assert_eq!(page.status(), 200);

    // SIGTERM: `up` stops its children and exits cleanly; none is left running.
    let exit = up.terminate(60).expect("`up` exits after SIGTERM");
    assert!(exit.success(), "{exit}\n{}", read(&out_path));
    let out = read(&out_path);
    for (name, pid) in &pids {
        assert!(!alive(*pid), "{name} (pid {pid}) still running");
        assert!(out.contains(&format!("stopped {name}")), "{name}: {out}");
    }
    assert!(std::net::TcpStream::connect(&api_addr).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_demo_receiver_listens_where_the_flag_says() {
    let db = TestDb::create_empty().await;
    let dir = scratch_dir();
    // A port held here: `up` must try that one (and say so), not pick another.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap();
    let out = Command::new(DEV)
        .env_remove("RPC_URL")
        .env_remove("DATABASE_URL")
        .env_remove("API_LISTEN")
        .arg("--dev-dir")
        .arg(&dir)
        .args(["up", "--anvil-port", "0"])
        .args(["--api-listen", "127.0.0.1:0"])
        .args(["--indexer-metrics-listen", "127.0.0.1:0"])
        .args(["--keeper-metrics-listen", "127.0.0.1:0"])
        .args(["--webhook-receiver-listen", &taken.to_string()])
        .args(["--database-url", &db.url])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(&format!("the demo's webhook receiver on {taken}")),
        "{text}"
    );
    // Every process `up` started is gone with it.
    for (name, pid) in started_pids(&text) {
        assert!(!alive(pid), "{name} (pid {pid}) outlived `up`");
    }
    drop(held);
}
