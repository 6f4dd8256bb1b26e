//! The whole-stack tests, one binary: the contract on anvil (`contract_*`, kit in
//! `contract_support`), the services as separate processes (`e2e_*`, `dev_command`), the
//! pages in headless Chromium (`browser*`, kit in `browser_support`), the committed
//! artifacts and the harness itself.

#[macro_use]
extern crate chainsub_tests;

// Each test module uses the part of the kits it needs.
#[allow(dead_code)]
#[macro_use]
mod contract_support;
#[allow(dead_code)]
mod browser_support;

mod artifacts;
mod browser;
mod browser_pages;
mod cluster;
mod contract_batch;
mod contract_billing;
mod contract_calendar;
mod contract_cancel;
mod contract_charges;
mod contract_failures;
mod contract_gas;
mod contract_guards;
mod contract_operator;
mod contract_permit;
mod contract_plans;
mod dev_command;
mod e2e_billing;
mod e2e_dev_demo;
mod e2e_export;
mod e2e_lifecycle;
mod e2e_renewal_risk;
mod e2e_rpc_secret;
mod guide_snippets;
mod harness;
mod operators_kit;
mod reports_check;
mod settings_documented;
mod startup_errors;
