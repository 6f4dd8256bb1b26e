//! `POST /api/v1/checkouts`: a signed checkout URL for one of the merchant's active plans.

use bytes::Bytes;
use chainsub_views::CheckoutView;
use serde_json::{Map, Value};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::auth::api_key::{Authed, authenticate};
use crate::ctx::{Ctx, with_ctx};
use crate::domain::text;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::extract::{Caller, caller, check_fields, method_fallback};
use crate::http::reply::{Resp, body_bytes, handle, parse_json_object};
use crate::routes::plans::{find, with_rate};

/// The checkouts router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let create = warp::post()
        .and(with_ctx(ctx))
        .and(caller())
        .and(body_bytes())
        .then(|ctx: Ctx, c: Caller, body: Bytes| {
            handle(async move { create(&ctx, &c, &body).await })
        });
    warp::path!("api" / "v1" / "checkouts")
        .and(create.or(method_fallback("POST")).unify())
        .boxed()
}

struct NewCheckout {
    plan_id: String,
    customer: Option<String>,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The shortest and the longest a checkout link may stay valid, in seconds.
const MIN_LINK_SECS: i64 = 60;
const MAX_LINK_SECS: i64 = 366 * 86_400;

fn parse(body: &Map<String, Value>) -> Result<NewCheckout> {
    check_fields(body, &["planId", "customerExternalId", "expiresIn"])?;
    let plan_id = match body.get("planId") {
        None | Some(Value::Null) => return Err(ApiError::missing("planId")),
        Some(Value::String(s)) if chainsub_core::PlanId::parse(s).is_some() => s.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "planId",
                "`planId` must be a plan id such as \"plan_…\"",
            ));
        }
    };
    let customer = match body.get("customerExternalId") {
        None | Some(Value::Null) => None,
        v => Some(text("customerExternalId", v, 128)?),
    };
    // A duration rather than a time: the schema can state its bounds, and no clock of the
    // caller's is trusted.
    let expires_at = match body.get("expiresIn") {
        None | Some(Value::Null) => None,
        Some(v) => {
            // JSON Schema's integer: 694 and 694.0 alike.
            let secs = v
                .as_i64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                        .map(|f| f as i64)
                })
                .filter(|s| (MIN_LINK_SECS..=MAX_LINK_SECS).contains(s))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "expiresIn",
                        format!(
                            "`expiresIn` must be whole seconds from {MIN_LINK_SECS} to \
                             {MAX_LINK_SECS} (366 days)"
                        ),
                    )
                })?;
            chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp() + secs, 0)
        }
    };
    Ok(NewCheckout {
        plan_id,
        customer,
        expires_at,
    })
}

async fn create(ctx: &Ctx, c: &Caller, body: &[u8]) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let body = parse_json_object(c.content_type.as_deref(), body)?;
    let request = format!("POST /api/v1/checkouts\n{}", Value::Object(body.clone()));
    let resp = crate::idempotency::run(
        ctx,
        &merchant,
        c.idempotency_key.as_deref(),
        &request,
        std::convert::identity,
        |_| async {
            let input = parse(&body)?;
            let plan = find(ctx, &merchant, &input.plan_id)
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
            let secret = ctx.cfg.checkout_signing_secret.expose();
            let customer = input.customer.as_deref();
            let terms = crate::checkout::LinkTerms {
                customer,
                expires: input.expires_at.map(|t| t.timestamp()),
            };
            let url =
                crate::checkout::url(&ctx.cfg.base(), secret, merchant.code(), &plan.slug, terms);
            let customer_ref =
                crate::checkout::customer_ref(secret, merchant.public_id().as_str(), customer);
            let public_id = chainsub_core::CheckoutId::random(12);
            let conn = ctx.pool.get().await?;
            let checkout = chainsub_store::checkouts::NewCheckout {
                public_id: &public_id,
                plan: plan.row_id,
                customer_external_id: input.customer.as_deref(),
                customer_ref,
                url: &url,
            };
            let created = chainsub_store::checkouts::insert(&conn, &merchant, &checkout)
                .await?
                .ok_or_else(|| ApiError::not_found("plan", Some("planId")))?;
            Ok(Resp::json_view(
                StatusCode::CREATED,
                &CheckoutView {
                    id: &public_id,
                    object: "checkout",
                    url: &url,
                    plan_id: &plan.id,
                    customer_external_id: input.customer.as_deref(),
                    expires_at: input.expires_at,
                    created_at: created,
                },
            ))
        },
    )
    .await?;
    Ok(with_rate(resp, &rate))
}
