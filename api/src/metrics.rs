//! Prometheus metrics: request counts and latencies, served at `/metrics`.

use std::cell::RefCell;
use std::collections::HashMap;

use metrics_exporter_prometheus::PrometheusHandle;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::ctx::{Ctx, with_ctx};
use crate::http::reply::Resp;

/// Installs the global recorder (with its upkeep) once per process (tests start several
/// servers in one).
pub fn install() -> Option<PrometheusHandle> {
    let handle = chainsub_core::metrics::install();
    chainsub_core::metrics::register_counters(COUNTERS);
    handle
}

/// The counters `api serve` and `api dispatch` count, on every scrape from the start
/// (`register_counters`); those counted per request (`api_requests_total`, key lookups) are
/// there from the first request.
const COUNTERS: &[&str] = &[
    "api_cancellations_dead_total",
    "api_cancellations_rebroadcast_total",
    "api_checkout_plan_mismatch_total",
    "api_ledger_export_failures_total",
    "api_ledger_exports_cut_total",
    "api_plan_quota_refusals_total",
    "api_plan_ref_replaced_total",
    "api_relayer_quota_refusals_total",
    "api_relayer_replacements_total",
    "api_relayer_replacements_held_total",
    "chainsub_webhook_handed_back_total",
];

/// Counts one request. The counter and histogram of each (method, route, status) are looked
/// up in the recorder once per thread and kept: the macros build their labels' strings and
/// hash the key on every call (~5,600 instructions a request, callgrind, more than the rest
/// of serving `/api/v1/openapi.json`). The label values are bounded, so is the cache.
/// Handles taken before the global recorder exists would count nowhere for the thread's life:
/// requests reach here only through a server built by `server::build_ctx`, which installs it
/// first (`core::metrics::install`).
pub fn record(method: &str, route: &'static str, status: u16, secs: f64) {
    type Handles = (metrics::Counter, metrics::Histogram);
    thread_local! {
        static HANDLES: RefCell<HashMap<(&'static str, &'static str, u16), Handles>> =
            RefCell::new(HashMap::new());
    }
    let key = (method_label(method), route, status);
    HANDLES.with_borrow_mut(|handles| {
        let (count, duration) = handles.entry(key).or_insert_with(|| {
            let labels = [
                ("method", key.0.to_string()),
                ("route", route.to_string()),
                ("status", status.to_string()),
            ];
            (
                metrics::counter!("api_requests_total", &labels),
                metrics::histogram!("api_request_duration_seconds", &labels),
            )
        });
        count.increment(1);
        duration.record(secs);
    });
}

/// A bounded label for a method: any method a client invents is `other`.
pub fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// A bounded label for a path (ids collapse to `{id}`, unknown paths to `other`).
pub fn route_label(path: &str) -> &'static str {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", "v1", "health"] => "/api/v1/health",
        ["api", "v1", "openapi.json"] => "/api/v1/openapi.json",
        ["api", "v1", "auth", "nonce"] => "/api/v1/auth/nonce",
        ["api", "v1", "auth", "session"] => "/api/v1/auth/session",
        ["api", "v1", "auth", "keys"] => "/api/v1/auth/keys",
        ["api", "v1", "plans"] => "/api/v1/plans",
        ["api", "v1", "plans", _] => "/api/v1/plans/{id}",
        ["api", "v1", "plans", _, "provision"] => "/api/v1/plans/{id}/provision",
        ["api", "v1", "checkouts"] => "/api/v1/checkouts",
        ["api", "v1", "subscriptions"] => "/api/v1/subscriptions",
        ["api", "v1", "subscriptions", _] => "/api/v1/subscriptions/{id}",
        ["api", "v1", "subscriptions", _, "cancel"] => "/api/v1/subscriptions/{id}/cancel",
        ["api", "v1", "events"] => "/api/v1/events",
        ["api", "v1", "events", _] => "/api/v1/events/{id}",
        ["api", "v1", "ledger"] => "/api/v1/ledger",
        _ => "other",
    }
}

/// `GET /metrics` (Prometheus text format), served only on its own listener
/// (`API_METRICS_LISTEN`), never on the public API port.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let metrics = warp::path!("metrics")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .map(|ctx: Ctx| {
            let text = ctx.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
            Resp::raw("text/plain; version=0.0.4", text)
        });
    let health = warp::path!("health")
        .and(warp::get())
        .and(with_ctx(ctx))
        .then(|ctx: Ctx| async move { crate::routes::health::operator(&ctx).await });
    metrics.or(health).unify().boxed()
}
