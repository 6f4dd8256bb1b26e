//! `api`: serve (default), migrate, dispatch, admin create-key.

use std::process::ExitCode;

use alloy::primitives::Address;
use clap::{Parser, Subcommand};

use chainsub_api::config::Config;

/// mimalloc: a list page allocates a few hundred small objects (rows, strings, the JSON
/// buffer) and frees them at once; glibc's malloc spent ~13 % of the API's CPU on that in
/// `bench/api/run` (perf), mimalloc about a third of it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "api", version, about = "Chainsub merchant API")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the REST API, dashboard and checkout pages, and (unless --no-dispatcher) the
    /// webhook dispatcher. The default when no subcommand is given.
    Serve(Box<Config>),
    /// Apply pending migrations and exit.
    Migrate {
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
    },
    /// Run only the webhook dispatcher.
    Dispatch(Box<chainsub_api::dispatch::DispatchArgs>),
    /// Operator commands.
    #[command(subcommand)]
    Admin(Admin),
}

#[derive(Subcommand)]
enum Admin {
    /// Create the merchant of WALLET if needed and print a fresh API key (rotating any old
    /// one) on stdout.
    CreateKey {
        #[arg(long)]
        wallet: Address,
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
    },
}

const SUBCOMMANDS: [&str; 6] = ["serve", "migrate", "dispatch", "admin", "help", "--help"];

fn main() -> ExitCode {
    // `api` alone, or `api --flag …`, means `api serve …`.
    let mut args: Vec<String> = std::env::args().collect();
    let first = args.get(1).map(String::as_str);
    if !first
        .is_some_and(|a| SUBCOMMANDS.contains(&a) || a == "-h" || a == "-V" || a == "--version")
    {
        args.insert(1, "serve".into());
    }
    let cli = Cli::parse_from(args);
    init_tracing();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Cmd::Serve(cfg) = &cli.cmd
        && let Some(n) = cfg.worker_threads
    {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.enable_all().build().expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "api failed");
            eprintln!("api: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v == "json");
    // Colour only on a terminal: log files and journald get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Serve(cfg) => serve(*cfg).await,
        Cmd::Migrate { database_url } => {
            let deadline = chainsub_store::startup::DEFAULT_DEADLINE;
            let applied = chainsub_api::db::migrate(&database_url, deadline).await?;
            println!("applied migrations: {applied:?}");
            Ok(())
        }
        Cmd::Dispatch(args) => {
            println!("dispatching webhooks");
            chainsub_api::dispatch::run_standalone(*args, shutdown_signal()).await?;
            Ok(())
        }
        Cmd::Admin(Admin::CreateKey {
            wallet,
            database_url,
        }) => {
            let mut client = chainsub_api::db::connect(&database_url).await?;
            let (merchant, key) =
                chainsub_api::auth::api_key::admin_create_key(&mut client, wallet).await?;
            eprintln!(
                "merchant {} (code {})",
                merchant.public_id(),
                merchant.code()
            );
            // stdout carries only the key, so scripts can capture it.
            println!("{}", key.expose());
            Ok(())
        }
    }
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    tracing::info!(config = ?cfg, "starting api");
    let shards = chainsub_api::server::shards(&cfg);
    let listener = cfg
        .listen
        .bind()
        .map_err(|e| anyhow::anyhow!("listen on {}: {e}", cfg.listen))?;
    let running = chainsub_api::server::start_sharded(cfg, listener, shards).await?;
    // Scripts and tests read the bound address (API_LISTEN may ask for port 0) from here.
    println!("listening on {}", running.addr);
    if let Some(m) = running.metrics_addr {
        println!("metrics on {m}");
    }
    // The webhook dispatcher runs beside the server unless `--no-dispatcher`; on SIGTERM it
    // stops claiming and finishes its in-flight deliveries while the server drains.
    let (stop_dispatch, dispatch_stopped) = tokio::sync::oneshot::channel::<()>();
    let dispatcher = (!running.ctx.cfg.no_dispatcher).then(|| {
        tokio::spawn(chainsub_api::dispatch::run_dispatcher(
            running.ctx.clone(),
            async move {
                let _ = dispatch_stopped.await;
            },
        ))
    });
    // Journaled cancellations whose outcome is unknown are carried on beside the server.
    let (stop_redrive, redrive_stopped) = tokio::sync::oneshot::channel::<()>();
    let redriver = running.ctx.relayer.is_some().then(|| {
        tokio::spawn(chainsub_api::relayer::redrive::redrive(
            running.ctx.clone(),
            async move {
                let _ = redrive_stopped.await;
            },
        ))
    });
    shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight requests");
    let _ = stop_dispatch.send(());
    let _ = stop_redrive.send(());
    if let Some(r) = redriver {
        let _ = r.await;
    }
    running.shutdown().await;
    if let Some(d) = dispatcher {
        d.await??;
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
