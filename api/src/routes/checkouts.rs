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

/// The longest a checkout link may stay valid.
const MAX_LINK_DAYS: i64 = 366;

fn parse(body: &Map<String, Value>) -> Result<NewCheckout> {
    check_fields(body, &["planId", "customerExternalId", "expiresAt"])?;
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
    let expires_at = match body.get("expiresAt") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let t = v
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "expiresAt",
                        "`expiresAt` must be an RFC 3339 time such as \"2027-01-31T00:00:00Z\"",
                    )
                })?;
            let now = chrono::Utc::now();
            if t <= now || t > now + chrono::Duration::days(MAX_LINK_DAYS) {
                return Err(ApiError::invalid(
                    "expiresAt",
                    format!(
                        "`expiresAt` must be in the future and at most {MAX_LINK_DAYS} days away"
                    ),
                ));
            }
            // Whole seconds: the link carries unix seconds.
            chrono::DateTime::from_timestamp(t.timestamp(), 0)
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
        || async {
            let input = parse(&body)?;
            let plan = find(ctx, &merchant, &input.plan_id)
                .await?
                .ok_or_else(|| ApiError::not_found("plan", Some("planId")))?;
            if !plan.is_active() {
                return Err(ApiError::Conflict {
                    code: "plan_not_active",
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
