//! The end-to-end harness every Chainsub test uses: a fresh anvil on a free port, a fresh
//! Postgres database (created, migrated, dropped), the contracts deployed from the committed
//! bytecode, and paths to the workspace's binaries.

pub mod anvil;
pub mod chain;
pub mod db;
pub mod merchant;
pub mod process;
pub mod receiver;
pub mod services;

pub use anvil::Anvil;
pub use chain::{DevChain, dev_key};
pub use db::TestDb;
pub use process::{ChildGuard, bin_path, free_port, workspace_root};
