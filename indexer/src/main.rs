//! The `indexer` binary: `indexer run` (default), `indexer migrate`, `indexer verify`,
//! `indexer verify-export`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chainsub_indexer::config::{Cli, Command, Settings};
use chainsub_indexer::source::RpcSource;
use chainsub_indexer::{ops, run, verify, verify_export, writer};
use chainsub_store::startup;
use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let json = std::env::var("LOG_FORMAT").is_ok_and(|f| f == "json");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        // Colour only on a terminal: log files and journald get plain text.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .init();
    }
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Run) {
        Command::Run => run_indexer(&cli.settings).await,
        Command::Migrate => migrate(&cli.settings).await,
        Command::Verify { from, to, json } => verify_range(&cli.settings, from, to, json).await,
        Command::VerifyExport { file, json } => verify_export(&cli.settings, &file, json).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "indexer failed");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate(s: &Settings) -> anyhow::Result<ExitCode> {
    let db = chainsub_store::pg::Database::from_url(&s.database_url()?)?;
    let deadline = Duration::from_secs(s.startup_deadline_secs);
    let applied = startup::migrate(&db, deadline).await?;
    tracing::info!(?applied, "migrations up to date");
    Ok(ExitCode::SUCCESS)
}

async fn run_indexer(s: &Settings) -> anyhow::Result<ExitCode> {
    let cfg = s.indexer_config()?;
    let url = s.database_url()?;
    let metrics = ops::install_metrics()?;
    let status = ops::Status::new(cfg.chain_id.get());
    status.set_max_lag(s.max_lag_blocks);
    ops::serve(s.metrics_listen, s.http.clone(), status.clone(), metrics).await?;
    let deadline = Duration::from_secs(s.startup_deadline_secs);
    if !s.no_migrate {
        let db = chainsub_store::pg::Database::from_url(&url)?;
        startup::migrate(&db, deadline)
            .await
            .context("migrations")?;
    }
    let source = Arc::new(RpcSource::new(&s.rpc_url()?, cfg.contract)?);
    // Any RPC failure here can pass (the node starting, a restart, a load balancer).
    let node_chain = startup::retry("eth_chainId", deadline, |_| true, || source.chain_id())
        .await
        .map_err(|e| anyhow::anyhow!("eth_chainId: {e}"))?;
    anyhow::ensure!(
        node_chain == cfg.chain_id.get(),
        "RPC_URL serves chain {node_chain}, CHAIN_ID is {}",
        cfg.chain_id
    );
    let shutdown = run::signal_shutdown();
    match run::run(&cfg, &url, source, status.clone(), shutdown.clone()).await {
        Ok(()) => {
            tracing::info!("stopped");
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ chainsub_indexer::Error::DeepReorg { .. }) => {
            // Halted on purpose (INDEXER_REORG_POLICY=halt): stay up and say so on
            // /health (503, with the reason) instead of exiting into a restart loop that
            // halts again at the same block and answers nothing. Liveness stays 200: the
            // process is waiting for an operator, not wedged.
            tracing::error!(error = %e, "halted; waiting for an operator (SIGTERM to stop)");
            status.set_writer(false);
            status.set_fault(Some(format!("halted: {e}")));
            let mut stop = shutdown;
            let _ = stop.wait_for(|s| *s).await;
            Ok(ExitCode::from(3))
        }
        Err(e) => Err(e.into()),
    }
}

async fn verify_range(s: &Settings, from: u64, to: u64, json: bool) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(from <= to, "--from must not exceed --to");
    let cfg = s.indexer_config()?;
    let client = writer::connect(&s.database_url()?).await?;
    let rpc_url = s.rpc_url()?;
    let source = Arc::new(RpcSource::new(&rpc_url, cfg.contract)?);
    let provider = chainsub_indexer::source::provider(&rpc_url)?;
    let target = verify::Target {
        chain_id: cfg.chain_id,
        contract: cfg.contract,
        confirmations: cfg.confirmations,
    };
    let findings = verify::verify(
        target,
        cfg.fetch,
        source,
        Some(&provider),
        &client,
        from,
        to,
    )
    .await?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "from": from, "to": to, "clean": findings.is_empty(), "findings": findings })
        );
    } else {
        for f in &findings {
            println!("{f}");
        }
        if findings.is_empty() {
            println!("verify: blocks {from}..={to}: clean");
        } else {
            println!(
                "verify: blocks {from}..={to}: {} difference(s)",
                findings.len()
            );
        }
    }
    Ok(if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn verify_export(
    s: &Settings,
    file: &std::path::Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use std::io::Read;
    let mut text = String::new();
    if file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    }
    let records = verify_export::parse(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let provider = chainsub_indexer::source::provider(&s.rpc_url()?)?;
    let (findings, entries) = verify_export::verify_export(provider, &records).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "entries": entries, "clean": findings.is_empty(), "findings": findings })
        );
    } else {
        for f in &findings {
            println!("{f}");
        }
        if findings.is_empty() {
            println!("verify-export: {entries} entries: clean");
        } else {
            println!(
                "verify-export: {entries} entries: {} difference(s)",
                findings.len()
            );
        }
    }
    Ok(if findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
