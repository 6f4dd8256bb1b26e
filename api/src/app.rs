//! Composes the per-resource routers into one filter, with the single `recover`, request ids,
//! access logs, metrics and tracing spans around all of them.

use std::convert::Infallible;
use std::time::Instant;

use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::Method;

use crate::ctx::Ctx;
use crate::http::reply::Resp;
use crate::http::reply::recover;
use crate::routes;

/// Every JSON route `api_routes` serves — the REST API under /api/v1 and the dashboard's
/// under /dashboard/api — as (method, OpenAPI path template). The OpenAPI test holds the
/// server, this table and `api/openapi.json` to each other.
pub const API_ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/v1/health"),
    ("GET", "/api/v1/openapi.json"),
    ("POST", "/api/v1/auth/nonce"),
    ("GET", "/api/v1/auth/session"),
    ("POST", "/api/v1/auth/session"),
    ("DELETE", "/api/v1/auth/session"),
    ("GET", "/api/v1/auth/keys"),
    ("POST", "/api/v1/auth/keys"),
    ("DELETE", "/api/v1/auth/keys"),
    ("GET", "/api/v1/plans"),
    ("POST", "/api/v1/plans"),
    ("GET", "/api/v1/plans/{id}"),
    ("POST", "/api/v1/plans/{id}/provision"),
    ("POST", "/api/v1/checkouts"),
    ("GET", "/api/v1/subscriptions"),
    ("GET", "/api/v1/subscriptions/{id}"),
    ("POST", "/api/v1/subscriptions/{id}/cancel"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/events/{id}"),
    ("GET", "/api/v1/ledger"),
    ("GET", "/dashboard/api/webhook"),
    ("PUT", "/dashboard/api/webhook/url"),
    ("GET", "/dashboard/api/webhook/secret"),
    ("POST", "/dashboard/api/webhook/secret/rotate"),
    ("POST", "/dashboard/api/webhook/secret/revoke-previous"),
    ("POST", "/dashboard/api/webhook/enable"),
    ("POST", "/dashboard/api/webhook/test"),
    ("GET", "/dashboard/api/webhook/deliveries"),
    ("POST", "/dashboard/api/webhook/deliveries/{id}/retry"),
];

/// Every route of the API, behind the guard that keeps control characters in the path or
/// query from reaching any of them.
pub fn api_routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    crate::http::extract::request_text_guard()
        .and(resource_routes(ctx))
        .boxed()
}

fn resource_routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    routes::health::routes(ctx.clone())
        .or(routes::auth::routes(ctx.clone()))
        .unify()
        .or(routes::keys::routes(ctx.clone()))
        .unify()
        .or(routes::plans::routes(ctx.clone()))
        .unify()
        .or(routes::checkouts::routes(ctx.clone()))
        .unify()
        .or(routes::subscriptions::routes(ctx.clone()))
        .unify()
        .or(routes::events::routes(ctx.clone()))
        .unify()
        .or(routes::ledger::routes(ctx.clone()))
        .unify()
        .or(routes::openapi::routes())
        .unify()
        .or(routes::webhooks::routes(ctx.clone()))
        .unify()
        .or(routes::pages::routes(ctx.clone()))
        .unify()
        .boxed()
}

/// The whole server filter: routes + recover + X-Request-Id + metrics + spans.
pub fn app(ctx: Ctx) -> impl Filter<Extract = (impl warp::Reply,), Error = Infallible> + Clone {
    let routes = api_routes(ctx).recover(recover).unify();
    warp::any()
        .map(|| (Instant::now(), new_request_id()))
        .and(warp::method())
        .and(warp::path::full())
        .and(routes)
        .map(
            |(start, rid): (Instant, String),
             method: Method,
             path: warp::path::FullPath,
             resp: Resp| {
                let status = resp.status.as_u16();
                let route = crate::metrics::route_label(path.as_str());
                let secs = start.elapsed().as_secs_f64();
                crate::metrics::record(method.as_str(), route, status, secs);
                tracing::info!(
                    request_id = %rid,
                    method = %method,
                    route,
                    status,
                    latency_ms = secs * 1000.0,
                    "request"
                );
                resp.finish(&rid)
            },
        )
        .with(warp::trace::request())
}

/// `req_<24 hex>`: unique per request, quoted in error bodies.
pub fn new_request_id() -> String {
    let bytes: [u8; 12] = rand::random();
    format!("req_{}", hex::encode(bytes))
}
