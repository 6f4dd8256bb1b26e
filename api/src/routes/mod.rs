//! One router per resource, each exporting `routes(ctx) -> BoxedFilter<(Resp,)>`; `app.rs`
//! composes them. The request helpers they share (queries, callers, method fallbacks) are
//! [`crate::http::extract`].

pub mod auth;
pub mod checkouts;
pub mod events;
pub mod health;
pub mod keys;
pub mod ledger;
pub mod openapi;
pub mod pages;
pub mod plans;
pub mod subscriptions;
pub mod webhooks;
