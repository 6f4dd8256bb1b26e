//! A process started with a setting the operator got wrong says what is wrong in words an
//! operator can act on, and exits: here a `DATABASE_URL` naming a database that does not
//! exist, with `RUST_BACKTRACE=1` set (no backtrace, the server's message).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chainsub_tests::{ChildGuard, TestDb, bin_path};

/// Every setting each binary needs, valid but for the database's name.
fn command(binary: &str, args: &[&str], database_url: &str) -> Command {
    let mut cmd = Command::new(bin_path(binary));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_BACKTRACE", "1")
        .env("STARTUP_DEADLINE_SECS", "5")
        .env("DATABASE_URL", database_url)
        .env("RPC_URL", "http://127.0.0.1:9")
        .env("CHAIN_ID", "31337")
        .env(
            "CONTRACT_ADDRESS",
            "0x0000000000000000000000000000000000000001",
        )
        .env("USDC_ADDRESS", "0x0000000000000000000000000000000000000002")
        .env(
            "CHECKOUT_SIGNING_SECRET",
            "0123456789abcdef0123456789abcdef",
        )
        .env(
            "WEBHOOK_SECRETS_KEYS",
            chainsub_tests::TEST_WEBHOOK_SECRETS_KEYS,
        )
        .env(
            "KEEPER_PRIVATE_KEY",
            "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
        )
        // Listeners on port 0: nothing else on the machine is disturbed.
        .env("API_LISTEN", "127.0.0.1:0")
        .env("API_METRICS_LISTEN", "127.0.0.1:0")
        .env("DISPATCH_METRICS_LISTEN", "127.0.0.1:0")
        .env("INDEXER_METRICS_LISTEN", "127.0.0.1:0")
        .env("KEEPER_METRICS_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[tokio::test]
async fn a_database_that_does_not_exist_is_named_in_one_line_without_a_backtrace() {
    // A server that answers, and a database name it does not have.
    let db = TestDb::create_empty().await;
    let missing = "chainsub_no_such_database";
    let url = db.url.replace(&db.name, missing);
    assert_ne!(url, db.url);
    for (binary, args) in [
        ("indexer", &[][..]),
        ("keeper", &[][..]),
        ("api", &["serve"][..]),
        ("api", &["dispatch"][..]),
    ] {
        let mut child = ChildGuard(command(binary, args, &url).spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "{binary} {args:?} still running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(!status.success(), "{binary} {args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("database \"{missing}\" does not exist")),
            "{binary} {args:?} does not name the problem:\n{stderr}"
        );
        assert!(
            !stderr.to_lowercase().contains("backtrace"),
            "{binary} {args:?} prints a backtrace:\n{stderr}"
        );
    }
}
