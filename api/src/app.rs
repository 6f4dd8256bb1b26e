//! Composes the per-resource routers into one filter, with the single `recover`, request ids,
//! access logs, metrics and tracing spans around all of them.

use std::convert::Infallible;
use std::time::Instant;

use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::Method;

use crate::ctx::Ctx;
use crate::http::error::ApiError;
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
    ("POST", "/api/v1/subscriptions/{id}/refunds"),
    ("POST", "/api/v1/subscriptions/{id}/plan-change-links"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/events/{id}"),
    ("GET", "/api/v1/ledger"),
    ("GET", "/api/v1/reports/summary"),
    ("GET", "/api/v1/reports/revenue"),
    ("GET", "/dashboard/api/webhook"),
    ("PUT", "/dashboard/api/webhook/url"),
    ("GET", "/dashboard/api/webhook/secret"),
    ("POST", "/dashboard/api/webhook/secret/rotate"),
    ("POST", "/dashboard/api/webhook/secret/revoke-previous"),
    ("POST", "/dashboard/api/webhook/enable"),
    ("POST", "/dashboard/api/webhook/test"),
    ("GET", "/dashboard/api/webhook/deliveries"),
    ("POST", "/dashboard/api/webhook/deliveries/{id}/retry"),
    ("POST", "/dashboard/api/subscriptions/{id}/refunds"),
    ("POST", "/dashboard/api/subscriptions/{id}/cancel"),
    (
        "POST",
        "/dashboard/api/subscriptions/{id}/plan-change-links",
    ),
    ("POST", "/dashboard/api/plans"),
    ("GET", "/dashboard/api/plans/{id}"),
    ("POST", "/dashboard/api/plans/{id}/deactivation"),
    ("POST", "/dashboard/api/checkouts"),
    ("PUT", "/dashboard/api/merchant/display-name"),
];

/// The browser-facing routes (`routes::pages`), as (method, path template): with
/// [`API_ROUTES`], what the router's one method fallback answers 405 from.
pub const PAGE_ROUTES: &[(&str, &str)] = &[
    ("GET", "/checkout/{merchantCode}/{planSlug}"),
    ("GET", "/checkout/{merchantCode}/{planSlug}/tx"),
    ("GET", "/account"),
    ("GET", "/account/challenge"),
    ("GET", "/account/subscriptions"),
    ("GET", "/account/cancel-tx"),
    ("GET", "/account/plan-change-tx"),
    ("GET", "/account/plan-change/{merchantCode}"),
    ("GET", "/account/plan-change/{merchantCode}/tx"),
    ("GET", "/dashboard"),
    ("GET", "/dashboard/subscriptions"),
    ("GET", "/dashboard/subscriptions/{id}"),
    ("GET", "/dashboard/plans"),
    ("GET", "/dashboard/developers"),
    ("GET", "/assets/{file}"),
];

/// The methods the route tables serve at `path`, in the order `Allow` lists them; `None`
/// when no route has this path. A `{…}` segment of a template matches any non-empty one.
pub fn allowed_methods(path: &str) -> Option<String> {
    let path = path
        .strip_suffix('/')
        .filter(|p| !p.is_empty())
        .unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    let matches = |template: &str| {
        let parts: Vec<&str> = template.split('/').collect();
        parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(t, s)| {
                if t.starts_with('{') {
                    !s.is_empty()
                } else {
                    t == s
                }
            })
    };
    let served: Vec<&str> = API_ROUTES
        .iter()
        .chain(PAGE_ROUTES)
        .filter(|(_, template)| matches(template))
        .map(|(method, _)| *method)
        .collect();
    let allow: Vec<&str> = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        .into_iter()
        .filter(|m| served.contains(m))
        .collect();
    (!allow.is_empty()).then(|| allow.join(", "))
}

/// The router's one method fallback, tried after every route: 405 with `Allow` for a path
/// that is served with other methods (HEAD included: GET routes answer GET only), a 404 for
/// any other request no route took.
fn method_fallback() -> BoxedFilter<(Resp,)> {
    warp::method()
        .and(warp::path::full())
        .and_then(|method: Method, path: warp::path::FullPath| async move {
            match allowed_methods(path.as_str()) {
                Some(allow) if !allow.split(", ").any(|m| m == method.as_str()) => {
                    Err(warp::reject::custom(ApiError::MethodNotAllowed { allow }))
                }
                // A route for this method took the request and refused it (its rejection
                // wins), or no route has the path.
                _ => Err(warp::reject::not_found()),
            }
        })
        .boxed()
}

/// Every route of the API, behind the guard that keeps control characters in the path or
/// query from reaching any of them.
pub fn api_routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    crate::http::extract::request_text_guard()
        .and(resource_routes(ctx))
        .boxed()
}

fn resource_routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    routes::any_of([
        routes::health::routes(ctx.clone()),
        routes::auth::routes(ctx.clone()),
        routes::keys::routes(ctx.clone()),
        routes::plans::routes(ctx.clone()),
        routes::checkouts::routes(ctx.clone()),
        routes::subscriptions::routes(ctx.clone()),
        routes::events::routes(ctx.clone()),
        routes::ledger::routes(ctx.clone()),
        routes::reports::routes(ctx.clone()),
        routes::openapi::routes(),
        routes::webhooks::routes(ctx.clone()),
        routes::console::routes(ctx.clone()),
        routes::pages::routes(ctx),
        method_fallback(),
    ])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowed_methods_of_a_path_come_from_the_route_tables() {
        assert_eq!(
            allowed_methods("/api/v1/plans").as_deref(),
            Some("GET, POST")
        );
        assert_eq!(
            allowed_methods("/api/v1/auth/session").as_deref(),
            Some("GET, POST, DELETE")
        );
        assert_eq!(
            allowed_methods("/api/v1/plans/plan_1/provision").as_deref(),
            Some("POST")
        );
        assert_eq!(
            allowed_methods("/checkout/abc/pro/tx").as_deref(),
            Some("GET")
        );
        assert_eq!(allowed_methods("/assets/app.js").as_deref(), Some("GET"));
        // A parameter segment is never empty; unknown paths have no methods.
        assert_eq!(allowed_methods("/api/v1/plans//provision"), None);
        assert_eq!(allowed_methods("/api/v1/nothing"), None);
        assert_eq!(allowed_methods("/"), None);
    }
}
