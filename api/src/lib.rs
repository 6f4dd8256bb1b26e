//! Chainsub's merchant API (warp): REST v1, SIWE dashboard sessions, API keys, plan
//! provisioning on chain, checkouts, and reads of the chain index. The webhook dispatcher
//! (crate `chainsub-webhooks`) runs inside `serve` or alone as `api dispatch` ([`dispatch`]).

pub mod app;
pub mod auth;
pub mod checkout;
pub mod config;
pub mod console;
pub mod ctx;
pub mod db;
pub mod dispatch;
pub mod domain;
pub mod http;
pub mod idempotency;
pub mod ledger_export;
pub mod merchants;
pub mod metrics;
pub mod pages;
pub mod pagination;
pub mod plan_change;
pub mod plan_deactivation;
pub mod reads;
pub mod refunds;
pub mod relayer;
pub mod reports;
pub mod routes;
pub mod server;
pub mod webhook_settings;

pub use config::Config;
pub use ctx::{AppState, Ctx};
pub use db::Pool;
pub use http::error::{ApiError, Result};
