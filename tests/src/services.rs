//! The three services as separate processes: `indexer`, `api` (serving, with its webhook
//! dispatcher) and `keeper`, each started from its binary with only the environment given
//! (a sourced `.dev/stack.env` in the parent shell must not leak in).

use std::path::Path;
use std::process::Command;

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
