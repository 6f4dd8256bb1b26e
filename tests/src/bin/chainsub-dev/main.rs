//! `scripts/dev up | down | status`: the local dev stack.
//!
//! `up` installs the npm chain tools if they are missing, starts anvil (or uses `RPC_URL`),
//! deploys MockUSDC and SubscriptionManager (operator = dev account 0), mints test USDC to dev
//! accounts 2..=9, creates and migrates the database, writes `.dev/stack.env` (docs/design.md §9) and
//! then starts `indexer`, `api` (with the webhook dispatcher) and `keeper` as separate processes,
//! runs the demo (`demo.rs`) and stays in the foreground holding its children until Ctrl-C or
//! SIGTERM (`scripts/dev down`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};

mod chain;
mod cluster;
mod db;
mod demo;
mod services;
mod stack;

use chainsub_tests::{Reserved, workspace_root};
use stack::{Stack, StackEnv};
use tokio::signal::unix::{SignalKind, signal};

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/chainsub_dev";

#[derive(Debug, Parser)]
#[command(name = "chainsub-dev", about = "Chainsub's local dev stack")]
struct Cli {
    /// Where stack.env, the pid file and logs go (relative paths are from the workspace root).
    #[arg(long, global = true, default_value = ".dev")]
    dev_dir: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Start the stack and hold it in the foreground until Ctrl-C.
    Up(UpArgs),
    /// Stop a stack started by `up` (SIGTERM to the pid in <dev-dir>/stack.pid).
    Down,
    /// Show whether the stack is up and what it runs on.
    Status,
    /// The whole service as a cluster on this machine (`scripts/cluster`).
    #[command(subcommand)]
    Cluster(ClusterCmd),
}

#[derive(Debug, Subcommand)]
enum ClusterCmd {
    /// Start the cluster and hold it in the foreground until Ctrl-C.
    Up(cluster::ClusterArgs),
    /// Stop a cluster started by `up`.
    Down,
    /// Show whether the cluster is up and each process's health.
    Status,
}

#[derive(Debug, Args)]
struct UpArgs {
    /// Use this chain instead of starting anvil (it must know anvil's dev accounts).
    #[arg(long, env = "RPC_URL")]
    rpc_url: Option<String>,
    /// Port for the anvil this command starts (0: any free port).
    #[arg(long, env = "ANVIL_PORT", default_value_t = 8545)]
    anvil_port: u16,
    /// The dev database; created if missing.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
    database_url: String,
    /// Keep the database's rows. By default a fresh anvil gets a fresh database, since an
    /// index of a previous chain is meaningless for the new one.
    #[arg(long)]
    keep_db: bool,
    /// Confirmations the stack's processes wait for (0 on a dev chain).
    #[arg(long, env = "CONFIRMATIONS", default_value_t = 0)]
    confirmations: u64,
    /// The API's listen address (port 0: any free port). Bound here and handed to the
    /// API as its standard input, so the address is known and held before it starts.
    #[arg(long, env = "API_LISTEN", default_value = "127.0.0.1:8080")]
    api_listen: String,
    /// USDC (whole units) minted to each of dev accounts 2..=9.
    #[arg(long, default_value_t = 10_000)]
    mint_usdc: u64,
    /// Chain and database only: do not start indexer, api and keeper (nor the demo).
    #[arg(long)]
    no_services: bool,
    /// Start the services but skip the demo.
    #[arg(long)]
    no_demo: bool,
    /// The indexer's /health and /metrics listen address.
    #[arg(long, env = "INDEXER_METRICS_LISTEN", default_value = "127.0.0.1:9101")]
    indexer_metrics_listen: String,
    /// The keeper's /health and /metrics listen address.
    #[arg(long, env = "KEEPER_METRICS_LISTEN", default_value = "127.0.0.1:9102")]
    keeper_metrics_listen: String,
    /// The demo's webhook receiver's listen address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    webhook_receiver_listen: std::net::SocketAddr,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let dev_dir = workspace_root().join(&cli.dev_dir);
    match cli.cmd {
        Cmd::Up(args) => up(args, dev_dir).await,
        Cmd::Down => stack::down(&dev_dir),
        Cmd::Status => stack::status(&dev_dir).await,
        Cmd::Cluster(ClusterCmd::Up(args)) => cluster::up(args, dev_dir).await,
        Cmd::Cluster(ClusterCmd::Down) => stack::down(&dev_dir),
        Cmd::Cluster(ClusterCmd::Status) => cluster::status(&dev_dir).await,
    }
}

async fn up(args: UpArgs, dev_dir: PathBuf) -> Result<()> {
    std::fs::create_dir_all(&dev_dir).with_context(|| format!("create {}", dev_dir.display()))?;
    if let Some(pid) = stack::running_pid(&dev_dir) {
        bail!("a stack is already up (pid {pid}); run `scripts/dev down` first");
    }
    let mut stack = Stack::new(dev_dir.clone());
    // Ctrl-C during start-up or the demo must stop the children too (they run in their own
    // process groups, so the terminal's SIGINT reaches only this command).
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let booted = tokio::select! {
        r = boot(&args, &dev_dir, &mut stack) => r,
        _ = int.recv() => Err(anyhow!("interrupted during start-up")),
        _ = term.recv() => Err(anyhow!("terminated during start-up")),
    };
    let summary = match booted {
        Ok(s) => s,
        Err(e) => {
            stack.shutdown();
            return Err(e);
        }
    };
    drop((int, term));

    stack.write_pid()?;
    println!("{summary}");
    println!("Ctrl-C (or `scripts/dev down`) stops it");
    let outcome = stack.hold(true).await;
    stack.shutdown();
    outcome
}

/// Everything up to "the stack is up": chain, contracts, database, stack.env, services and
/// the demo. Returns the summary to print (the demo's receiver stays alive inside it).
async fn boot(args: &UpArgs, dev_dir: &Path, stack: &mut Stack) -> Result<Summary> {
    let fresh_chain = args.rpc_url.is_none();
    let rpc_url = match &args.rpc_url {
        Some(url) => url.clone(),
        None => {
            ensure_npm_tools()?;
            chain::start_anvil(stack, args.anvil_port)?
        }
    };
    chain::wait_for_rpc(&rpc_url, stack).await?;
    let deployed = chain::deploy(&rpc_url, args.mint_usdc).await?;
    println!(
        "deployed on chain {}: SubscriptionManager {} (block {}), MockUSDC {}",
        deployed.chain_id, deployed.manager, deployed.deploy_block, deployed.usdc
    );

    db::prepare(&args.database_url, fresh_chain && !args.keep_db).await?;

    // Each service's socket, bound here first (port 0 becomes a real port) and handed over
    // as its stdin; stack.env names the bound addresses. Without services, stack.env names
    // the addresses as given, for services started by hand.
    let bind = |what: &str, addr: &str| {
        Reserved::bind(addr).with_context(|| {
            format!("{what} {addr} is taken: another `scripts/dev up`? Run `scripts/dev down`, or pass another address")
        })
    };
    let sockets = if args.no_services {
        None
    } else {
        Some(services::Sockets {
            api: bind("--api-listen", &args.api_listen)?,
            indexer: bind("--indexer-metrics-listen", &args.indexer_metrics_listen)?,
            keeper: bind("--keeper-metrics-listen", &args.keeper_metrics_listen)?,
        })
    };
    let bound = |pick: fn(&services::Sockets) -> &Reserved, given: &str| {
        sockets
            .as_ref()
            .map_or_else(|| given.to_string(), |s| pick(s).addr.to_string())
    };
    let api_listen = bound(|s| &s.api, &args.api_listen);
    let mut env = StackEnv::dev(
        &args.database_url,
        &rpc_url,
        &deployed,
        args.confirmations,
        &api_listen,
    );
    env.push(
        "INDEXER_METRICS_LISTEN",
        bound(|s| &s.indexer, &args.indexer_metrics_listen),
    );
    env.push(
        "KEEPER_METRICS_LISTEN",
        bound(|s| &s.keeper, &args.keeper_metrics_listen),
    );
    for (k, v) in services::DEV_EXTRAS {
        env.push(k, v.to_string());
    }
    let env_file = env.write(dev_dir)?;
    println!("wrote {}", env_file.display());

    let api_base = format!("http://{api_listen}");
    let mut demo = None;
    if let Some(sockets) = &sockets {
        services::start(stack, &env, sockets).await?;
        if !args.no_demo {
            demo = Some(
                demo::run(
                    &api_base,
                    &rpc_url,
                    args.webhook_receiver_listen,
                    &dev_dir.join("api-key"),
                )
                .await?,
            );
        }
    }

    let mut text = format!(
        "\nstack is up:\n  chain      {rpc_url} (chain id {})\n  settings   {env} (set -a; . {env}; set +a)\n",
        deployed.chain_id,
        env = env_file.display()
    );
    if !args.no_services {
        let lines = [
            format!(
                "  API        {api_base}/api/v1/health  (OpenAPI: {api_base}/api/v1/openapi.json)"
            ),
            format!(
                "  dashboard  {api_base}/dashboard  (overview, subscriptions, refunds; keys and webhooks: {api_base}/dashboard/developers)"
            ),
            format!(
                "  account    {api_base}/account  (customers: a wallet's subscriptions, cancel)"
            ),
            format!(
                "  logs       {}/{{indexer,api,keeper,anvil}}.log",
                dev_dir.display()
            ),
        ];
        text.push_str(&(lines.join("\n") + "\n"));
    }
    if let Some(d) = &demo {
        text.push_str(&format!(
            "  checkout   {}\n  webhooks   {} (demo receiver, still verifying)",
            d.checkout_url,
            d.receiver.url()
        ));
    }
    Ok(Summary { text, _demo: demo })
}

/// The start-up summary; holds the demo's webhook receiver for as long as the stack runs.
struct Summary {
    text: String,
    _demo: Option<demo::DemoOutcome>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// `scripts/chain-tools` (npm ci from the lock) when the chain tools are not installed.
pub(crate) fn ensure_npm_tools() -> Result<()> {
    let root = workspace_root();
    if root.join("node_modules/.bin/anvil").exists() && root.join("node_modules/solc").exists() {
        return Ok(());
    }
    println!("installing the npm chain tools (scripts/chain-tools)");
    let status = Command::new(root.join("scripts/chain-tools"))
        .current_dir(&root)
        .status()
        .context("run scripts/chain-tools (are Node.js and npm installed?)")?;
    if !status.success() {
        bail!("scripts/chain-tools failed: {status}");
    }
    Ok(())
}
