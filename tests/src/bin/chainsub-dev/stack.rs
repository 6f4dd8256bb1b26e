//! The running stack: its child processes, its `stack.env`, and the pid file `down` and
//! `status` use.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use alloy::providers::Provider;
use anyhow::{Context, Result, bail};
use chainsub_tests::ChildGuard;
use chainsub_tests::chain::{DEV_KEYS, accounts, signing_provider};
use tokio::signal::unix::{SignalKind, signal};

use crate::chain::Deployed;

const PID_FILE: &str = "stack.pid";
const ENV_FILE: &str = "stack.env";
/// A dev-only secret: checkout links signed with it are worthless anywhere else.
const DEV_CHECKOUT_SECRET: &str = "dev-checkout-signing-secret-not-for-production";
/// The dev stack's key sealing webhook signing secrets at rest (32 bytes 101..=132; a
/// production deployment makes its own: `openssl rand -base64 32`).
const DEV_WEBHOOK_SECRETS_KEYS: &str = "dev:ZWZnaGlqa2xtbm9wcXJzdHV2d3h5ent8fX5/gIGCg4Q=";

/// Child processes started by `up`, stopped in reverse order.
pub(crate) struct Stack {
    dir: PathBuf,
    children: Vec<(&'static str, ChildGuard)>,
}

impl Stack {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            children: Vec::new(),
        }
    }

    /// The dev directory (logs, stack.env, pid file).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh `<dir>/<name>.log` for a child's output.
    pub(crate) fn log_file(&self, name: &str) -> Result<File> {
        let path = self.dir.join(format!("{name}.log"));
        File::create(&path).with_context(|| format!("create {}", path.display()))
    }

    /// `<dir>/<name>.log`, appended to (a restarted process's log follows its last run's).
    pub(crate) fn append_log(&self, name: &str) -> Result<File> {
        let path = self.dir.join(format!("{name}.log"));
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))
    }

    /// Starts `cmd` as a child of the stack.
    pub(crate) fn spawn(&mut self, name: &'static str, mut cmd: Command) -> Result<()> {
        // Its own process group: Ctrl-C reaches only this command, which then stops the
        // children in order instead of all of them dying at once.
        cmd.process_group(0);
        let child = cmd.spawn().with_context(|| format!("start {name}"))?;
        println!("started {name} (pid {})", child.id());
        // A restart takes the place of the child that died (and the stopping order with it).
        match self.children.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = ChildGuard(child),
            None => self.children.push((name, ChildGuard(child))),
        }
        Ok(())
    }

    /// The TCP port the child `name` listens on (one started on port 0).
    pub(crate) fn listening_port(&mut self, name: &str) -> Result<u16> {
        let (_, child) = self
            .children
            .iter_mut()
            .find(|(n, _)| *n == name)
            .with_context(|| format!("{name} was not started"))?;
        chainsub_tests::listening_port(&mut child.0, Duration::from_secs(30))
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))
    }

    /// The name of a child that has exited, if any.
    pub(crate) fn exited(&mut self) -> Option<&'static str> {
        self.children
            .iter_mut()
            .find_map(|(name, c)| matches!(c.0.try_wait(), Ok(Some(_))).then_some(*name))
    }

    /// Records this process so `down` and `status` can find it.
    pub(crate) fn write_pid(&self) -> Result<()> {
        std::fs::write(self.dir.join(PID_FILE), std::process::id().to_string())?;
        Ok(())
    }

    /// Waits for Ctrl-C or SIGTERM (Ok) or, with `stop_on_exit`, for a child to die (Err);
    /// without it a child that dies is reported once and the others go on.
    pub(crate) async fn hold(&mut self, stop_on_exit: bool) -> Result<()> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut reported = std::collections::HashSet::new();
        loop {
            tokio::select! {
                _ = int.recv() => { println!("interrupted: stopping"); return Ok(()) }
                _ = term.recv() => { println!("terminated: stopping"); return Ok(()) }
                _ = tick.tick() => {
                    for name in self.all_exited() {
                        if stop_on_exit {
                            bail!("{name} exited unexpectedly; see {}", self.dir.display());
                        }
                        if reported.insert(name) {
                            println!("{name} exited; see {}/{name}.log", self.dir.display());
                        }
                    }
                }
            }
        }
    }

    /// The children that have exited.
    pub(crate) fn all_exited(&mut self) -> Vec<&'static str> {
        self.children
            .iter_mut()
            .filter_map(|(name, c)| matches!(c.0.try_wait(), Ok(Some(_))).then_some(*name))
            .collect()
    }

    /// The pid of the child `name`.
    pub(crate) fn pid(&self, name: &str) -> Option<u32> {
        self.children
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.0.id())
    }

    /// Stops every child (SIGTERM, then SIGKILL after 10 s), newest first.
    pub(crate) fn shutdown(&mut self) {
        while let Some((name, mut child)) = self.children.pop() {
            match child.terminate(10) {
                Some(status) => println!("stopped {name} ({status})"),
                None => println!("killed {name} (no exit 10 s after SIGTERM)"),
            }
        }
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
    }
}

/// The docs/design.md §9 settings of a running stack, in `stack.env` order.
pub(crate) struct StackEnv(Vec<(&'static str, String)>);

impl StackEnv {
    /// The settings of a dev stack on `rpc_url` with `deployed` contracts.
    pub(crate) fn dev(
        database_url: &str,
        rpc_url: &str,
        deployed: &Deployed,
        confirmations: u64,
        api_listen: &str,
    ) -> Self {
        Self(vec![
            ("DATABASE_URL", database_url.to_string()),
            ("RPC_URL", rpc_url.to_string()),
            ("CHAIN_ID", deployed.chain_id.to_string()),
            ("CONTRACT_ADDRESS", deployed.manager.to_string()),
            ("USDC_ADDRESS", deployed.usdc.to_string()),
            ("START_BLOCK", deployed.deploy_block.to_string()),
            ("CONFIRMATIONS", confirmations.to_string()),
            ("API_LISTEN", api_listen.to_string()),
            ("BASE_URL", format!("http://{api_listen}")),
            (
                "RELAYER_PRIVATE_KEY",
                format!("0x{}", DEV_KEYS[accounts::OPERATOR]),
            ),
            (
                "KEEPER_PRIVATE_KEY",
                format!("0x{}", DEV_KEYS[accounts::KEEPER]),
            ),
            ("CHECKOUT_SIGNING_SECRET", DEV_CHECKOUT_SECRET.to_string()),
            ("WEBHOOK_SECRETS_KEYS", DEV_WEBHOOK_SECRETS_KEYS.to_string()),
        ])
    }

    /// Adds a setting (written to stack.env like the others).
    pub(crate) fn push(&mut self, key: &'static str, value: String) {
        self.0.push((key, value));
    }

    /// The variables, for `Command::envs` when the stack starts its services.
    pub(crate) fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (*k, v.as_str()))
    }

    /// Writes `<dir>/stack.env` (`KEY=value` lines, sourceable by sh) atomically.
    pub(crate) fn write(&self, dir: &Path) -> Result<PathBuf> {
        let mut text = String::from(
            "# Written by `scripts/dev up`; load with: set -a; . .dev/stack.env; set +a\n",
        );
        for (k, v) in &self.0 {
            text.push_str(&format!("{k}={v}\n"));
        }
        let path = dir.join(ENV_FILE);
        let tmp = dir.join(format!("{ENV_FILE}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }
}

/// The pid of a live `up` for this dev directory.
pub(crate) fn running_pid(dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // Guard against a stale file whose pid now belongs to another program.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    String::from_utf8_lossy(&cmdline)
        .contains("chainsub-dev")
        .then_some(pid)
}

/// `down`: SIGTERM to the running `up`, then wait for it to finish stopping its children.
pub(crate) fn down(dir: &Path) -> Result<()> {
    let Some(pid) = running_pid(dir) else {
        println!("no stack is up");
        return Ok(());
    };
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    if !status.success() {
        bail!("kill -TERM {pid} failed");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            bail!("stack (pid {pid}) still running 30 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("stack (pid {pid}) stopped");
    Ok(())
}

/// `status`: up or down, the settings, whether chain and database answer, and each
/// service's health endpoint.
pub(crate) async fn status(dir: &Path) -> Result<()> {
    let env_path = dir.join(ENV_FILE);
    let Some(pid) = running_pid(dir) else {
        println!("down");
        return Ok(());
    };
    println!("up (pid {pid})");
    let text = std::fs::read_to_string(&env_path)
        .with_context(|| format!("read {}", env_path.display()))?;
    print!("{text}");
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    if let Some(rpc) = get("RPC_URL") {
        match signing_provider(&rpc).get_block_number().await {
            Ok(n) => println!("chain: answering at block {n}"),
            Err(e) => println!("chain: NOT answering ({e})"),
        }
    }
    if let Some(url) = get("DATABASE_URL") {
        match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
            Ok(_) => println!("database: answering"),
            Err(e) => println!("database: NOT answering ({e})"),
        }
    }
    let services = [
        ("indexer", "INDEXER_METRICS_LISTEN", "/health"),
        ("keeper", "KEEPER_METRICS_LISTEN", "/health"),
        ("api", "API_LISTEN", "/api/v1/health"),
    ];
    for (name, listen, path) in services {
        let Some(addr) = get(listen).and_then(|a| a.parse::<std::net::SocketAddr>().ok()) else {
            println!("{name}: no {listen} in the settings");
            continue;
        };
        let answer =
            tokio::task::spawn_blocking(move || chainsub_tests::http_get(addr.port(), path))
                .await
                .ok()
                .flatten();
        match answer {
            Some((200, _)) => println!("{name}: healthy (GET {path} on {addr}: 200)"),
            Some((code, body)) => {
                println!(
                    "{name}: NOT healthy (GET {path} on {addr}: {code} {})",
                    body.trim()
                );
            }
            None => println!("{name}: NOT answering on {addr}"),
        }
    }
    Ok(())
}
