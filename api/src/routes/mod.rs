//! One router per resource, each exporting `routes(ctx) -> BoxedFilter<(Resp,)>`: its
//! routes (path, method, the filters that authenticate and parse the request into typed
//! input), then a handful of short handlers. `app.rs` composes the routers and answers 405
//! once for all of them. Typed input is [`crate::http::input`]; API-key authentication and
//! the rate-limit headers are [`crate::auth::api_key::authed`].

use warp::Filter;
use warp::filters::BoxedFilter;

use crate::http::reply::Resp;

pub mod auth;
pub mod checkouts;
pub mod console;
pub mod events;
pub mod health;
pub mod keys;
pub mod ledger;
pub mod openapi;
pub mod pages;
pub mod plans;
pub mod reports;
pub mod subscriptions;
pub mod webhooks;

/// The routes of one router as one filter: the first whose path and method match answers.
pub fn any_of<const N: usize>(routes: [BoxedFilter<(Resp,)>; N]) -> BoxedFilter<(Resp,)> {
    let mut routes = routes.into_iter();
    let first = routes.next().expect("a router has at least one route");
    routes.fold(first, |all, route| all.or(route).unify().boxed())
}
