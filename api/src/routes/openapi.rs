//! `GET /api/v1/openapi.json`: the hand-written OpenAPI 3.1 document (api/openapi.json).

use warp::Filter;
use warp::filters::BoxedFilter;

use crate::http::reply::Resp;

/// The document, embedded at compile time.
pub const OPENAPI_JSON: &str = include_str!("../../openapi.json");

/// The router.
pub fn routes() -> BoxedFilter<(Resp,)> {
    warp::path!("api" / "v1" / "openapi.json")
        .and(warp::get())
        .map(|| Resp::raw("application/json", OPENAPI_JSON))
        .boxed()
}
