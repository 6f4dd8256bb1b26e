//! The stack's services: `indexer`, `api` (with its webhook dispatcher) and `keeper`, each a
//! separate process built by `scripts/dev` beside this binary, logging to `.dev/<name>.log`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chainsub_tests::Reserved;
use chainsub_tests::merchant::ApiClient;
use chainsub_tests::services::service_command;

use crate::stack::{Stack, StackEnv};

/// Dev-only settings written to `stack.env` after the shared ones: quick polling so the demo
/// moves in seconds, and webhooks allowed to a local plain-http receiver.
pub(crate) const DEV_EXTRAS: [(&str, &str); 6] = [
    ("INDEXER_POLL_INTERVAL_MS", "250"),
    ("KEEPER_POLL_INTERVAL_MS", "1000"),
    ("WEBHOOK_ALLOW_LOOPBACK", "true"),
    ("WEBHOOK_ALLOW_HTTP", "true"),
    ("WEBHOOK_POLL_INTERVAL", "250ms"),
    // A dev chain has no `finalized` tag worth trusting after evm_increaseTime jumps.
    ("INDEXER_NO_FINALIZED_TAG", "true"),
];

/// Where `scripts/dev` put the workspace binaries: next to this one.
pub(crate) fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .map(|d| d.join(name))
        .unwrap_or_else(|| PathBuf::from(name));
    if !path.exists() {
        bail!(
            "{} is missing: run `scripts/dev up` (it builds the binaries) or \
             `cargo build -p chainsub-indexer -p chainsub-keeper -p chainsub-api --bins`",
            path.display()
        );
    }
    Ok(path)
}

/// The services' listening sockets, bound before they start.
pub(crate) struct Sockets {
    pub api: Reserved,
    pub indexer: Reserved,
    pub keeper: Reserved,
}

/// Starts indexer, api and keeper with `env` (stack.env's settings), each serving on its
/// socket from `sockets` (handed over as stdin), and waits until the API answers.
pub(crate) async fn start(stack: &mut Stack, env: &StackEnv, sockets: &Sockets) -> Result<()> {
    let api_base = sockets.api.url();
    for (name, socket, listen_var) in [
        ("indexer", &sockets.indexer, "INDEXER_METRICS_LISTEN"),
        ("api", &sockets.api, "API_LISTEN"),
        ("keeper", &sockets.keeper, "KEEPER_METRICS_LISTEN"),
    ] {
        let vars: Vec<(String, String)> = env
            .vars()
            .map(|(k, v)| {
                let v = if k == listen_var { "stdin" } else { v };
                (k.to_string(), v.to_string())
            })
            .collect();
        let log = stack.log_file(name)?;
        let mut cmd = service_command(&bin(name)?, &[], &vars);
        cmd.stdin(socket.stdin())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        stack.spawn(name, cmd)?;
    }
    wait_healthy(stack, "api", &api_base).await?;
    println!("api answering at {api_base}");
    Ok(())
}

/// Waits until `GET {base}/api/v1/health` answers 200 (an API, or the balancer in front of
/// some), failing early when a child of the stack died and after 60 s.
pub(crate) async fn wait_healthy(stack: &mut Stack, name: &str, base: &str) -> Result<()> {
    let api = ApiClient::new(base);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !api.healthy().await {
        if let Some(dead) = stack.exited() {
            bail!(
                "{dead} exited during start-up; see {}/{dead}.log",
                stack.dir().display()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{name} at {base} did not answer within 60 s; see {}/{name}.log",
                stack.dir().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
