//! The keeper's integration tests, one binary: a real anvil, a fresh database, the real
//! `indexer` and `keeper` binaries (see [`support::Stack`]).

#[macro_use]
extern crate chainsub_tests;

mod charges;
mod ops;
mod reorg;
mod restart;
mod support;
mod throughput;
