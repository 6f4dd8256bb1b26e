//! Placeholder router (being written).

use warp::Filter;
use warp::filters::BoxedFilter;

use crate::ctx::Ctx;
use crate::reply::Resp;

/// The router.
pub fn routes(_ctx: Ctx) -> BoxedFilter<(Resp,)> {
    warp::any()
        .and_then(|| async { Err::<Resp, _>(warp::reject::not_found()) })
        .boxed()
}
