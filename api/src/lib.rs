//! Chainsub's merchant API (warp): REST v1, SIWE dashboard sessions, API keys, plan
//! provisioning on chain, checkouts, and reads of the chain index. The webhook dispatcher
//! (module `webhooks`, added by its owner) runs inside `serve` or alone as `api dispatch`.

pub mod app;
pub mod auth;
pub mod chain;
pub mod checkout;
pub mod client_ip;
pub mod config;
pub mod ctx;
pub mod db;
pub mod domain;
pub mod error;
pub mod idempotency;
pub mod merchants;
pub mod metrics;
pub mod pages;
pub mod pagination;
pub mod ratelimit;
pub mod render;
pub mod reply;
pub mod routes;
pub mod server;
pub mod views;
pub mod webhooks;

pub use config::Config;
pub use ctx::{AppState, Ctx};
pub use db::Pool;
pub use error::{ApiError, Result};
