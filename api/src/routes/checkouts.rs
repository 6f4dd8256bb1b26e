//! `POST /api/v1/checkouts`: a signed checkout URL for one of the merchant's active plans.

use chainsub_core::PlanId;
use chainsub_views::CheckoutView;
use serde::Deserialize;
use serde_json::{Map, Value};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::auth::api_key::{Admitted, Scope, authed_json};
use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::input::{self, FromParam, Text};
use crate::http::reply::Resp;
use crate::routes::plans::find;

/// The checkouts router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    warp::path!("api" / "v1" / "checkouts")
        .and(warp::post())
        .and(authed_json(&ctx))
        .then(|a: Admitted, body| a.serve(body, create))
        .boxed()
}

/// The body of `POST /api/v1/checkouts`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewCheckout {
    #[serde(deserialize_with = "input::required_null_is_missing")]
    plan_id: PlanId,
    #[serde(default, deserialize_with = "input::field")]
    customer_external_id: Option<Text<128>>,
    /// A duration rather than a time: the schema can state its bounds, and no clock of the
    /// caller's is trusted.
    #[serde(default, deserialize_with = "input::field")]
    expires_in: Option<LinkSecs>,
}

impl FromParam for PlanId {
    fn from_text(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| "must be a plan id such as \"plan_…\"".into())
    }
}

/// The shortest and the longest a checkout link may stay valid, in seconds.
const MIN_LINK_SECS: i64 = 60;
const MAX_LINK_SECS: i64 = 366 * 86_400;

/// How long a checkout link stays valid, in whole seconds.
#[derive(Debug, Clone, Copy)]
struct LinkSecs(i64);

impl FromParam for LinkSecs {
    fn from_text(_: &str) -> Result<Self, String> {
        Err(format!(
            "must be whole seconds from {MIN_LINK_SECS} to {MAX_LINK_SECS} (366 days)"
        ))
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        input::json_integer(v, MIN_LINK_SECS..=MAX_LINK_SECS)
            .map(LinkSecs)
            .ok_or_else(|| Self::from_text("").unwrap_err())
    }
}

pub(crate) async fn create(s: Scope, body: Map<String, Value>) -> Result<Resp> {
    let request = format!("POST /api/v1/checkouts\n{}", Value::Object(body.clone()));
    let (ctx, merchant) = (&s.ctx, &s.merchant);
    s.once(&request, |_| async {
        let input: NewCheckout = input::body(&body)?;
        let plan = find(ctx, merchant, input.plan_id.as_str())
            .await?
            .ok_or_else(|| ApiError::not_found("plan", Some("planId")))?;
        if !plan.is_active() {
            return Err(ApiError::Conflict {
                code: Code::PlanNotActive,
                message: "the plan is not provisioned on chain yet (status must be `active`)"
                    .into(),
                param: Some("planId".into()),
            });
        }
        if plan.deactivated.is_some() {
            return Err(ApiError::Conflict {
                code: Code::PlanInactive,
                message: "the plan was deactivated on chain: it takes no new subscriptions".into(),
                param: Some("planId".into()),
            });
        }
        let customer = input.customer_external_id.as_ref().map(|c| c.0.as_str());
        let expires_at = input.expires_in.and_then(|LinkSecs(secs)| {
            chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp() + secs, 0)
        });
        let secret = ctx.cfg.checkout_signing_secret.expose();
        let terms = crate::checkout::LinkTerms {
            customer,
            expires: expires_at.map(|t| t.timestamp()),
        };
        let url = crate::checkout::url(&ctx.cfg.base(), secret, merchant.code(), &plan.slug, terms);
        let customer_ref =
            crate::checkout::customer_ref(secret, merchant.public_id().as_str(), customer);
        let public_id = chainsub_core::CheckoutId::random(12);
        let conn = ctx.pool.get().await?;
        let checkout = chainsub_store::checkouts::NewCheckout {
            public_id: &public_id,
            plan: plan.row_id,
            customer_external_id: customer,
            customer_ref,
            url: &url,
        };
        let created = chainsub_store::checkouts::insert(&conn, merchant, &checkout)
            .await?
            .ok_or_else(|| ApiError::not_found("plan", Some("planId")))?;
        Ok(Resp::json_view(
            StatusCode::CREATED,
            &CheckoutView {
                id: &public_id,
                object: "checkout",
                url: &url,
                plan_id: &plan.id,
                customer_external_id: customer,
                expires_at,
                created_at: created,
            },
        ))
    })
    .await
}
