//! The dashboard's subscription actions (session + CSRF, like the webhook settings), each
//! the REST API's action for the signed-in merchant:
//!
//! | Method | Path | |
//! |---|---|---|
//! | POST | /dashboard/api/subscriptions/{id}/refunds | the refund's transactions for the merchant's wallet (`POST /api/v1/subscriptions/{id}/refunds`) |
//! | POST | /dashboard/api/subscriptions/{id}/cancel | cancel now or at period end (`POST /api/v1/subscriptions/{id}/cancel`) |
//! | POST | /dashboard/api/subscriptions/{id}/plan-change-links | a plan-change link (`POST /api/v1/subscriptions/{id}/plan-change-links`) |
//! | POST | /dashboard/api/plans | create and provision a plan (`POST /api/v1/plans`, `Idempotency-Key` too) |
//! | GET | /dashboard/api/plans/{id} | one plan (`GET /api/v1/plans/{id}`): the page follows its provisioning |
//! | POST | /dashboard/api/plans/{id}/deactivation | the `deactivatePlan` call for the merchant's wallet |
//! | POST | /dashboard/api/checkouts | a checkout link (`POST /api/v1/checkouts`) |
//! | PUT | /dashboard/api/merchant/display-name | `{"displayName": "…" \| null}`: the name customers see |

use bytes::Bytes;
use serde_json::{Map, Value};
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::Scope;
use crate::auth::session::{Session, require_session};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::Result;
use crate::http::input::{DisplayText, FromParam};
use crate::http::reply::{Resp, body_bytes, handle, parse_json_object};
use crate::routes::any_of;
use crate::routes::subscriptions as api;

/// The console's router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    // For reads only (the refund's limits), as the API's refund route.
    let provider = crate::pages::checkout::read_provider(&ctx.cfg.rpc_url).ok();
    // A JSON object body, or its 4xx.
    let json_body = || {
        warp::header::optional::<String>("content-type")
            .and(body_bytes())
            .and_then(|ct: Option<String>, body: Bytes| async move {
                parse_json_object(ct.as_deref(), &body).map_err(warp::reject::custom)
            })
    };
    let action = |name: &'static str| {
        warp::path("dashboard")
            .and(warp::path("api"))
            .and(warp::path("subscriptions"))
            .and(warp::path::param::<String>())
            .and(warp::path(name))
            .and(warp::path::end())
            .and(warp::post())
            .and(with_ctx(ctx.clone()))
            .and(require_session(ctx.clone()))
            .and(json_body())
    };
    let refund = action("refunds").then(
        move |id: String, ctx: Ctx, s: Session, body: Map<String, Value>| {
            let provider = provider.clone();
            handle(async move {
                let asked = api::refund_asked(&body)?;
                let view =
                    crate::refunds::request(&ctx, provider.as_ref(), &s.merchant, &id, asked)
                        .await?;
                Ok(Resp::view(&view))
            })
        },
    );
    let cancel = action("cancel").then(
        |id: String, ctx: Ctx, s: Session, body: Map<String, Value>| {
            handle(async move { cancel(&ctx, &s, &id, &body).await })
        },
    );
    let link = action("plan-change-links").then(
        |id: String, ctx: Ctx, s: Session, body: Map<String, Value>| {
            handle(async move { api::plan_change_link_for(&ctx, &s.merchant, &id, &body).await })
        },
    );
    // The plans page's calls: the API's handlers, run for the session's merchant.
    let scope = move || {
        with_ctx(ctx.clone())
            .and(require_session(ctx.clone()))
            .and(warp::header::optional::<String>("idempotency-key"))
            .map(|ctx: Ctx, s: Session, key: Option<String>| Scope {
                ctx,
                merchant: s.merchant,
                idempotency_key: key,
            })
    };
    let plan_create = warp::path!("dashboard" / "api" / "plans")
        .and(warp::post())
        .and(scope())
        .and(json_body())
        .then(|s: Scope, body| handle(crate::routes::plans::create(s, body)));
    let plan_get = warp::path!("dashboard" / "api" / "plans" / String)
        .and(warp::get())
        .and(scope())
        .then(|id: String, s: Scope| handle(crate::routes::plans::get_one(s, id)));
    let deactivation = warp::path!("dashboard" / "api" / "plans" / String / "deactivation")
        .and(warp::post())
        .and(scope())
        .and(json_body())
        .then(|id: String, s: Scope, body: Map<String, Value>| {
            handle(async move {
                crate::http::input::no_fields(&body)?;
                let view = crate::plan_deactivation::request(&s.ctx, &s.merchant, &id).await?;
                Ok(Resp::view(&view))
            })
        });
    let checkout = warp::path!("dashboard" / "api" / "checkouts")
        .and(warp::post())
        .and(scope())
        .and(json_body())
        .then(|s: Scope, body| handle(crate::routes::checkouts::create(s, body)));
    let display_name = warp::path!("dashboard" / "api" / "merchant" / "display-name")
        .and(warp::put())
        .and(scope())
        .and(json_body())
        .then(|s: Scope, body: Map<String, Value>| {
            handle(async move { set_display_name(&s, &body).await })
        });
    any_of([
        display_name.boxed(),
        refund.boxed(),
        cancel.boxed(),
        link.boxed(),
        plan_create.boxed(),
        plan_get.boxed(),
        deactivation.boxed(),
        checkout.boxed(),
    ])
}

/// The API's cancellation, without an `Idempotency-Key`: a second click while the first is
/// pending answers what the relayer's journal says (409 once it is cancelling).
async fn cancel(ctx: &Ctx, s: &Session, id: &str, body: &Map<String, Value>) -> Result<Resp> {
    let when = api::cancel_when(body)?;
    let request = format!("POST /dashboard/api/subscriptions/{id}/cancel");
    crate::idempotency::run(
        ctx,
        &s.merchant,
        None,
        &request,
        std::convert::identity,
        |run| crate::relayer::cancel::cancel(ctx, &s.merchant, id, when, run),
    )
    .await
}

/// `PUT /dashboard/api/merchant/display-name`: the name the checkout and `/account` pages
/// show customers (1 to 60 characters, no control or bidirectional control characters), or
/// `null` for the merchant's code again.
async fn set_display_name(s: &Scope, body: &Map<String, Value>) -> Result<Resp> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Body {
        #[serde(deserialize_with = "crate::http::input::required")]
        display_name: NameOrNull,
    }
    let Body {
        display_name: NameOrNull(name),
    } = crate::http::input::body(body)?;
    let name = name.as_ref().map(DisplayText::as_str);
    let conn = s.ctx.pool.get().await?;
    chainsub_store::merchants::set_display_name(&conn, &s.merchant, name).await?;
    Ok(Resp::json(serde_json::json!({
        "object": "merchant_profile",
        "displayName": name,
        "code": s.merchant.code(),
    })))
}

/// A display name, or `null` to clear it.
struct NameOrNull(Option<DisplayText<60>>);

impl FromParam for NameOrNull {
    fn from_text(s: &str) -> std::result::Result<Self, String> {
        DisplayText::from_text(s).map(|t| Self(Some(t)))
    }

    fn from_json(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Null => Ok(Self(None)),
            v => DisplayText::from_json(v).map(|t| Self(Some(t))),
        }
    }
}
