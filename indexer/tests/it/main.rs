//! The indexer's integration tests, one binary: the pipeline against real anvil chains and
//! a fresh Postgres per test, the process (signals, the single-writer lock), reorgs, the
//! outbox, `verify`, and a seeded simulation (`common` holds the kit, `common::fake` a
//! scriptable chain source).

#[allow(dead_code)]
#[macro_use]
mod common;

mod lifecycle;
mod outbox;
mod pipeline;
mod process;
mod reorg;
mod simulation;
mod sink;
mod verify;
