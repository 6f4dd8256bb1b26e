//! Chainsub's indexer: a pipeline that follows the SubscriptionManager contract into Postgres.
//!
//! Read it top to bottom:
//! [`source`] (RPC with retries, adaptive `eth_getLogs` ranges, distrust checks) ->
//! [`stream`] (ordered [`block::Block`] batches and `Undo` signals from a cursor) ->
//! [`map`] (pure: logs -> decoded events) and [`fold`] (pure: events -> subscription state) ->
//! [`sink`] (one Postgres transaction per block or batch, reversible on a reorg).
//! [`indexer`] wires one step of that pipeline, [`run`] loops it under the single-writer lock
//! ([`writer`]), [`ops`] serves health and metrics, [`verify`] reconciles the database with
//! the chain, and [`verify_export`] a merchant's ledger export.

pub mod block;
pub mod config;
pub mod error;
pub mod fold;
pub mod indexer;
pub mod map;
pub mod ops;
pub mod run;
pub mod sink;
pub mod source;
pub mod stream;
pub mod verify;
pub mod verify_export;
pub mod writer;

pub use error::{Error, Result};
