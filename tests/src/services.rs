//! The three services as separate processes: `indexer`, `api` (serving, with its webhook
//! dispatcher) and `keeper`, each started from its binary with only the environment given
//! (a sourced `.dev/stack.env` in the parent shell must not leak in).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::chain::accounts::{KEEPER, OPERATOR};
use crate::chain::{DEV_KEYS, DevChain};
use crate::{ChildGuard, Reserved, TestDb, bin_path, scratch_dir};

/// `bin args…` with a clean environment plus `env` (PATH and HOME are kept so the process
/// can find its tools; RUST_LOG defaults to `info`).
pub fn service_command(bin: &Path, args: &[&str], env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args).env_clear();
    for keep in ["PATH", "HOME"] {
        if let Ok(v) = std::env::var(keep) {
            cmd.env(keep, v);
        }
    }
    cmd.env(
        "RUST_LOG",
        std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
    );
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The settings a test stack runs with: the docs/design.md §9 names for `chain` and `db`, and
/// millisecond polling and retries so a whole lifecycle takes seconds; webhooks may go to
/// local `http://` receivers. [`Services::start`] adds where each service listens.
pub fn test_env(chain: &DevChain, db: &TestDb, confirmations: u64) -> Vec<(String, String)> {
    [
        ("DATABASE_URL", db.url.clone()),
        ("RPC_URL", chain.anvil.url.clone()),
        ("CHAIN_ID", chain.anvil.chain_id.to_string()),
        ("CONTRACT_ADDRESS", chain.manager.to_string()),
        ("USDC_ADDRESS", chain.usdc.to_string()),
        ("START_BLOCK", chain.deploy_block.to_string()),
        ("CONFIRMATIONS", confirmations.to_string()),
        ("RELAYER_PRIVATE_KEY", format!("0x{}", DEV_KEYS[OPERATOR])),
        ("KEEPER_PRIVATE_KEY", format!("0x{}", DEV_KEYS[KEEPER])),
        ("CHECKOUT_SIGNING_SECRET", "test-checkout-secret".into()),
        (
            "WEBHOOK_SECRETS_KEYS",
            crate::TEST_WEBHOOK_SECRETS_KEYS.into(),
        ),
        ("INDEXER_POLL_INTERVAL_MS", "50".into()),
        ("INDEXER_NO_FINALIZED_TAG", "true".into()),
        ("KEEPER_POLL_INTERVAL_MS", "200".into()),
        ("WEBHOOK_ALLOW_LOOPBACK", "true".into()),
        ("WEBHOOK_ALLOW_HTTP", "true".into()),
        ("WEBHOOK_POLL_INTERVAL", "50ms".into()),
        ("WEBHOOK_RETRY_SCHEDULE", "0s,200ms,500ms,1s".into()),
        ("RATE_LIMIT_IP_PER_SEC", "1000".into()),
        ("RATE_LIMIT_IP_BURST", "1000".into()),
        // The kit polls health while it waits for the index.
        ("RATE_LIMIT_HEALTH_PER_SEC", "1000".into()),
        ("RATE_LIMIT_HEALTH_BURST", "1000".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// `indexer`, `api` and `keeper` started from the workspace binaries (see [`bin_path`]),
/// each serving on a socket bound here first ([`Reserved`]: the API's port and base URL are
/// known before it starts, with no race for the port) and logging to
/// `<logs>/<name>.log`; killed on drop.
pub struct Services {
    pub env: Vec<(String, String)>,
    pub logs: PathBuf,
    pub children: Vec<(&'static str, ChildGuard)>,
    /// The API's listening socket (`API_LISTEN=stdin`), then the indexer's and the keeper's
    /// health and metrics sockets.
    pub api: Reserved,
    pub indexer: Reserved,
    pub keeper: Reserved,
}

impl Services {
    /// Starts the three with `env` plus where each listens; logs go to a fresh temporary
    /// directory.
    pub fn start(mut env: Vec<(String, String)>) -> Self {
        let (api, indexer, keeper) = (Reserved::new(), Reserved::new(), Reserved::new());
        for (k, v) in [
            ("API_LISTEN", "stdin".to_string()),
            ("BASE_URL", api.url()),
            ("INDEXER_METRICS_LISTEN", "stdin".into()),
            ("KEEPER_METRICS_LISTEN", "stdin".into()),
            // A port of its own (printed as "metrics on …"): stdin is the API's socket.
            ("API_METRICS_LISTEN", "127.0.0.1:0".into()),
        ] {
            env.retain(|(key, _)| key != k);
            env.push((k.into(), v));
        }
        let mut s = Self {
            env,
            logs: scratch_dir("chainsub-services"),
            children: Vec::new(),
            api,
            indexer,
            keeper,
        };
        for name in ["indexer", "api", "keeper"] {
            let log = std::fs::File::create(s.logs.join(format!("{name}.log"))).expect("log");
            let socket = match name {
                "indexer" => &s.indexer,
                "api" => &s.api,
                _ => &s.keeper,
            };
            let child = service_command(&bin_path(name), &[], &s.env)
                .stdin(socket.stdin())
                .stdout(Stdio::from(log.try_clone().expect("log")))
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
            s.children.push((name, ChildGuard(child)));
        }
        s
    }

    /// The three processes' `/metrics`, as Prometheus would scrape them, one after the other.
    pub async fn scrape(&self) -> String {
        let log = self.logs.join("api.log");
        let api = crate::merchant::wait_for("the API's metrics address", 60, || async {
            Ok(std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("metrics on ").map(str::to_string)))
        })
        .await
        .expect("the API prints its metrics address");
        let mut out = String::new();
        for base in [
            self.indexer.url(),
            self.keeper.url(),
            format!("http://{api}"),
        ] {
            let text = reqwest::get(format!("{base}/metrics"))
                .await
                .and_then(reqwest::Response::error_for_status)
                .unwrap_or_else(|e| panic!("scrape {base}/metrics: {e}"))
                .text()
                .await
                .expect("a metrics body");
            out.push_str(&text);
            out.push('\n');
        }
        out
    }

    /// Panics with the logs' location if a service died.
    pub fn assert_alive(&mut self) {
        for (name, c) in &mut self.children {
            if let Ok(Some(status)) = c.0.try_wait() {
                panic!("{name} exited ({status}); logs in {}", self.logs.display());
            }
        }
    }

    /// A client of the stack's API, once the API answers its health check.
    pub async fn api_client(&self) -> crate::merchant::ApiClient {
        let api = crate::merchant::ApiClient::new(&self.api.url());
        crate::merchant::wait_for("the API", 60, || async {
            Ok(api.healthy().await.then_some(()))
        })
        .await
        .expect("the API answers");
        api
    }

    /// Waits until the API's health says the index reached `chain`'s current head (the
    /// services still running).
    pub async fn wait_indexed(&mut self, api: &crate::merchant::ApiClient, chain: &DevChain) {
        use alloy::providers::Provider;
        self.assert_alive();
        let target = chain.provider.get_block_number().await.expect("head");
        api.wait_indexed_to(target, 60)
            .await
            .expect("the index reaches the head");
    }

    /// `indexer verify --from START_BLOCK --to <to>` with the same settings: whether it
    /// found no difference, and its output.
    pub fn verify(&self, to: u64) -> (bool, String) {
        let start = self
            .env
            .iter()
            .find(|(k, _)| k == "START_BLOCK")
            .map_or_else(|| "0".to_string(), |(_, v)| v.clone());
        let (code, text) = run_indexer(
            &["verify", "--from", &start, "--to", &to.to_string()],
            &self.env,
        );
        (code == 0, text)
    }

    /// `indexer verify-export FILE` as a merchant's auditor runs it: with nothing but
    /// `RPC_URL` (no database, no contract setting). Returns (exit code, output).
    pub fn verify_export(&self, file: &Path) -> (i32, String) {
        let rpc: Vec<(String, String)> = self
            .env
            .iter()
            .filter(|(k, _)| k == "RPC_URL")
            .cloned()
            .collect();
        run_indexer(&["verify-export", &file.to_string_lossy()], &rpc)
    }
}

/// Runs the `indexer` binary to completion with `args` and `env`: (exit code, stdout then
/// stderr).
pub fn run_indexer(args: &[&str], env: &[(String, String)]) -> (i32, String) {
    let out = service_command(&bin_path("indexer"), args, env)
        .output()
        .unwrap_or_else(|e| panic!("run indexer {args:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}
