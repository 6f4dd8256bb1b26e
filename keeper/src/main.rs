//! `keeper`: the renewal keeper binary (see the crate docs and docs/operations.md).

use chainsub_keeper as keeper;
use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cfg = keeper::Config::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if cfg.log_format == keeper::config::LogFormat::Json {
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
    let prometheus = match keeper::telemetry::install_metrics() {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "could not install the metrics recorder");
            return std::process::ExitCode::FAILURE;
        }
    };
    match keeper::run(cfg, prometheus).await {
        Ok(keeper::Exit::Done) => std::process::ExitCode::SUCCESS,
        Ok(keeper::Exit::BudgetExhausted) => std::process::ExitCode::from(2),
        Ok(keeper::Exit::LockBusy) => std::process::ExitCode::from(3),
        Ok(keeper::Exit::Stranded) => std::process::ExitCode::from(4),
        Err(e) => {
            tracing::error!(error = %e, "keeper stopped");
            // The one line an operator reads when the process will not start.
            eprintln!("keeper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
