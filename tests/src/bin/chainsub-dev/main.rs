//! `scripts/dev up | down | status`: the local dev stack.
//!
//! `up` installs the npm chain tools if they are missing, starts anvil (or uses `RPC_URL`),
//! deploys MockUSDC and SubscriptionManager (operator = dev account 0), mints test USDC to dev
//! accounts 2..=9, creates and migrates the database, writes `.dev/stack.env` (DESIGN §9) and
//! stays in the foreground holding its children until Ctrl-C or SIGTERM (`scripts/dev down`).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

mod chain;
mod db;
mod stack;

use chainsub_tests::workspace_root;
use stack::{Stack, StackEnv};

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
}

#[derive(Debug, Args)]
struct UpArgs {
    /// Use this chain instead of starting anvil (it must know anvil's dev accounts).
    #[arg(long, env = "RPC_URL")]
    rpc_url: Option<String>,
    /// Port for the anvil this command starts.
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
    /// Listen address written for the API.
    #[arg(long, env = "API_LISTEN", default_value = "127.0.0.1:8080")]
    api_listen: String,
    /// USDC (whole units) minted to each of dev accounts 2..=9.
    #[arg(long, default_value_t = 10_000)]
    mint_usdc: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let dev_dir = workspace_root().join(&cli.dev_dir);
    match cli.cmd {
        Cmd::Up(args) => up(args, dev_dir).await,
        Cmd::Down => stack::down(&dev_dir),
        Cmd::Status => stack::status(&dev_dir).await,
    }
}

async fn up(args: UpArgs, dev_dir: PathBuf) -> Result<()> {
    std::fs::create_dir_all(&dev_dir).with_context(|| format!("create {}", dev_dir.display()))?;
    if let Some(pid) = stack::running_pid(&dev_dir) {
        bail!("a stack is already up (pid {pid}); run `scripts/dev down` first");
    }
    let mut stack = Stack::new(dev_dir.clone());

    let fresh_chain = args.rpc_url.is_none();
    let rpc_url = match args.rpc_url {
        Some(url) => url,
        None => {
            ensure_npm_tools()?;
            chain::start_anvil(&mut stack, args.anvil_port)?
        }
    };
    chain::wait_for_rpc(&rpc_url, &mut stack).await?;
    let deployed = chain::deploy(&rpc_url, args.mint_usdc).await?;
    println!(
        "deployed on chain {}: SubscriptionManager {} (block {}), MockUSDC {}",
        deployed.chain_id, deployed.manager, deployed.deploy_block, deployed.usdc
    );

    db::prepare(&args.database_url, fresh_chain && !args.keep_db).await?;

    let env = StackEnv::dev(
        &args.database_url,
        &rpc_url,
        &deployed,
        args.confirmations,
        &args.api_listen,
    );
    let env_file = env.write(&dev_dir)?;
    println!("wrote {}", env_file.display());

    // Extension point: the indexer, API and keeper join here as more children, e.g.
    //   stack.spawn("indexer", Command::new(bin("indexer")).envs(env.vars()))?;
    // and a demo can drive them once they answer.

    stack.write_pid()?;
    println!("stack is up; Ctrl-C (or `scripts/dev down`) stops it");
    let outcome = stack.hold().await;
    stack.shutdown();
    outcome
}

/// `scripts/chain-tools` (npm ci from the lock) when the chain tools are not installed.
fn ensure_npm_tools() -> Result<()> {
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
