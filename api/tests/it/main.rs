//! The API's integration tests, one binary: the REST API against a real Postgres and anvil
//! (`api_common` spawns the server in-process on port 0), and the webhook dispatcher against
//! real receivers (`webhooks_common`). `webhooks_bench` is ignored by default
//! (`bench/webhooks.sh`).

// Each test module uses the part of the kits it needs.
#[allow(dead_code)]
mod api_common;
#[allow(dead_code)]
mod webhooks_common;

mod auth;
mod checkout_chain;
mod http;
mod ledger_export;
mod openapi;
mod plans;
mod reads;
mod replica_reads;
mod subscription_cancel;
mod webhooks_bench;
mod webhooks_dashboard;
mod webhooks_delivery;
mod webhooks_processes;
mod webhooks_reorg;
