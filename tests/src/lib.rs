//! The end-to-end harness every Chainsub test uses: a fresh anvil on a port it bound itself, a fresh
//! Postgres database (created, migrated, dropped), the contracts deployed from the committed
//! bytecode, and paths to the workspace's binaries.

pub mod anvil;
pub mod bulk;
pub mod chain;
pub mod db;
pub mod flood;
pub mod merchant;
pub mod net;
pub mod pg_cluster;
pub mod process;
pub mod proxy;
pub mod receiver;
pub mod services;
pub mod wait;

pub use anvil::Anvil;
pub use chain::{DevChain, dev_key};
pub use db::TestDb;
pub use process::{
    BINARY_CRATES, ChildGuard, Reserved, bin_path, binary_sources, http_get, listening_port,
    scratch_dir, workspace_root,
};
pub use wait::{wait_for_some, wait_until};

/// `WEBHOOK_SECRETS_KEYS` of every API the tests start: one fixed test key (32 bytes 1..=32).
pub const TEST_WEBHOOK_SECRETS_KEYS: &str = "test:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`), which every benchmark prints
/// beside its figures.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat` (Linux
/// clock ticks of 1/100 s); 0 for a process that is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name (which may hold spaces): state is the
    // first, utime the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The pids of every process whose command name (`/proc/<pid>/comm`) is `name`, e.g. all
/// of Postgres's backends (`postgres`).
pub fn pids_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .collect()
}

/// Sends a contract call as `$from`, waits for its receipt and returns it; panics when the
/// transaction reverts on chain. Tests use it for the setup steps that must succeed.
#[macro_export]
macro_rules! send_as {
    ($from:expr, $call:expr) => {{
        let receipt = $call
            .from($from)
            .send()
            .await
            .expect("send")
            .get_receipt()
            .await
            .expect("receipt");
        assert!(receipt.status(), "transaction reverted on chain");
        receipt
    }};
}

/// [`TEST_WEBHOOK_SECRETS_KEYS`] parsed, for code under test called in process.
pub fn test_sealing_keys() -> chainsub_core::sealed::SealingKeys {
    TEST_WEBHOOK_SECRETS_KEYS.parse().expect("the test key")
}
