//! The dashboard's subscription actions (session + CSRF, like the webhook settings):
//!
//! | Method | Path | |
//! |---|---|---|
//! | POST | /dashboard/api/subscriptions/{id}/refunds | the refund's transactions for the merchant's wallet, as `POST /api/v1/subscriptions/{id}/refunds` |

use bytes::Bytes;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::session::{Session, require_session};
use crate::ctx::{Ctx, with_ctx};
use crate::http::reply::{Resp, body_bytes, handle, parse_json_object};

/// The console's router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    // For reads only (the refund's limits), as the API's refund route.
    let provider = crate::pages::checkout::read_provider(&ctx.cfg.rpc_url).ok();
    warp::path!("dashboard" / "api" / "subscriptions" / String / "refunds")
        .and(warp::post())
        .and(with_ctx(ctx.clone()))
        .and(require_session(ctx))
        .and(warp::header::optional::<String>("content-type"))
        .and(body_bytes())
        .then(
            move |id: String, ctx: Ctx, s: Session, ct: Option<String>, body: Bytes| {
                let provider = provider.clone();
                handle(async move {
                    let body = parse_json_object(ct.as_deref(), &body)?;
                    let asked = crate::routes::subscriptions::refund_asked(&body)?;
                    let view =
                        crate::refunds::request(&ctx, provider.as_ref(), &s.merchant, &id, asked)
                            .await?;
                    Ok(Resp::view(&view))
                })
            },
        )
        .boxed()
}
