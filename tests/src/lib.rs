//! The end-to-end harness every Chainsub test uses: a fresh anvil on a port it bound itself, a fresh
//! Postgres database (created, migrated, dropped), the contracts deployed from the committed
//! bytecode, and paths to the workspace's binaries.

pub mod anvil;
pub mod chain;
pub mod db;
pub mod flood;
pub mod merchant;
pub mod process;
pub mod proxy;
pub mod receiver;
pub mod services;
pub mod wait;

pub use anvil::Anvil;
pub use chain::{DevChain, dev_key};
pub use db::TestDb;
pub use process::{
    ChildGuard, Reserved, bin_path, http_get, listening_port, scratch_dir, workspace_root,
};
pub use wait::{wait_for_some, wait_until};

/// The 1-, 5- and 15-minute load averages (`/proc/loadavg`), which every benchmark prints
/// beside its figures.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
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
