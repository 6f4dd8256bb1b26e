//! Plans: `GET|POST /api/v1/plans`, `GET /api/v1/plans/{id}`, and
//! `POST /api/v1/plans/{id}/provision` (retry a pending or failed provisioning).
//!
//! POST creates the row, then provisions on chain with the relayer and waits a bounded time
//! (PROVISION_TIMEOUT_MS) for the receipt. The answer's `status` is `active` (with `chain`),
//! `pending` (sent, receipt not seen yet; the indexer will flip it) or `failed` (with
//! `provisioning.error`). Retrying is always safe: the contract refuses a second plan with
//! the same `planRef`, and every attempt asks the chain first.

use chainsub_core::PlanId;
use chainsub_store::plans::{self as store, Inserted, PlanRow};
use chainsub_views::{ListView, PlanView};
use serde::Deserialize;
use serde_json::{Map, Value};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::auth::api_key::{Admitted, Scope, authed, authed_json};
use crate::ctx::Ctx;
use crate::domain::{Amount, Slug, random_hex};
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::input::{self, DisplayText, FromParam, no_fields, query_of};
use crate::http::reply::Resp;
use crate::merchants::Merchant;
use crate::pagination::{Page, PageQuery, cursor_key};
use crate::relayer::plans::provision;
use crate::routes::any_of;

/// The plans router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let list = warp::path!("api" / "v1" / "plans")
        .and(warp::get())
        .and(authed(&ctx))
        .and(query_of())
        .then(|a: Admitted, q| a.serve(q, list));
    let create = warp::path!("api" / "v1" / "plans")
        .and(warp::post())
        .and(authed_json(&ctx))
        .then(|a: Admitted, body| a.serve(body, create));
    let get = warp::path!("api" / "v1" / "plans" / String)
        .and(warp::get())
        .and(authed(&ctx))
        .then(|id, a: Admitted| a.serve(id, get_one));
    let provision = warp::path!("api" / "v1" / "plans" / String / "provision")
        .and(warp::post())
        .and(authed_json(&ctx))
        .then(|id, a: Admitted, body| a.serve((id, body), retry));
    any_of([list.boxed(), create.boxed(), get.boxed(), provision.boxed()])
}

/// The plan object of docs/design.md §4.
fn plan_view<'a>(ctx: &Ctx, r: &'a PlanRow) -> PlanView<'a> {
    PlanView::new(r, ctx.cfg.chain_id, ctx.cfg.contract_address)
}

/// The plan object as a JSON value, for the responses the idempotency store keeps.
fn plan_value(ctx: &Ctx, r: &PlanRow) -> Result<Value> {
    serde_json::to_value(plan_view(ctx, r))
        .map_err(|e| ApiError::Internal(format!("serializing a plan: {e}")))
}

/// One plan of `merchant` by public id (404 for unknown or another merchant's).
pub async fn find(ctx: &Ctx, merchant: &Merchant, public_id: &str) -> Result<Option<PlanRow>> {
    let Some(id) = PlanId::parse(public_id) else {
        return Ok(None);
    };
    let conn = ctx.pool.get().await?;
    Ok(store::get(&conn, merchant, ctx.cfg.chain_id, &id).await?)
}

async fn list(s: Scope, q: PageQuery) -> Result<Resp> {
    let page = Page::of(q)?;
    let conn = s.ctx.pool.get().await?;
    let (c, m) = (&conn, &s.merchant);
    let key = cursor_key(&page, "plan", PlanId::parse, |id| async move {
        Ok(store::cursor_key(c, m, &id).await?)
    })
    .await?;
    let chain_id = s.ctx.cfg.chain_id;
    let (rows, more) = store::list(&conn, &s.merchant, chain_id, page.store_page(key)).await?;
    let data = rows.iter().map(|r| plan_view(&s.ctx, r)).collect();
    Ok(Resp::view(&ListView::new(data, more)))
}

pub(crate) async fn get_one(s: Scope, id: String) -> Result<Resp> {
    let row = find(&s.ctx, &s.merchant, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("plan", Some("id")))?;
    Ok(Resp::view(&plan_view(&s.ctx, &row)))
}

/// A plan's name: the checkout shows it to customers beside the price, so no
/// bidirectional control may make it read as another amount ([`DisplayText`]).
type PlanName = DisplayText<100>;

/// The body of `POST /api/v1/plans`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewPlan {
    #[serde(deserialize_with = "input::required")]
    name: PlanName,
    #[serde(deserialize_with = "input::required")]
    amount: Amount,
    #[serde(deserialize_with = "input::required")]
    #[expect(dead_code, reason = "required and checked; USDC is the one currency")]
    currency: Usdc,
    #[serde(deserialize_with = "input::required")]
    #[expect(
        dead_code,
        reason = "required and checked; a month is the one interval"
    )]
    interval: Month,
    #[serde(default, deserialize_with = "input::field")]
    slug: Option<Slug>,
    #[serde(default, deserialize_with = "input::field")]
    trial_days: Option<TrialDays>,
}

/// A plan's free trial, in days: an integer from 0 (none) to 90, the contract's bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TrialDays(u16);

impl FromParam for TrialDays {
    fn from_text(s: &str) -> Result<Self, String> {
        match s.parse::<u16>() {
            Ok(d) if d <= 90 && !s.starts_with('+') => Ok(Self(d)),
            _ => Err("must be an integer from 0 to 90".into()),
        }
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        input::json_integer(v, 0..=90)
            .map(|d| Self(d as u16))
            .ok_or_else(|| "must be an integer from 0 to 90".into())
    }
}

impl FromParam for Amount {
    fn from_text(s: &str) -> Result<Self, String> {
        Self::parse(s).map_err(|e| e.to_string())
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Self::from_text(s),
            _ => Err("must be a decimal string such as \"9.99\", not a number".into()),
        }
    }
}

impl FromParam for Slug {
    fn from_text(s: &str) -> Result<Self, String> {
        Self::parse(s).map_err(|e| e.to_string())
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        v.as_str()
            .ok_or_else(|| "must be a string".to_string())
            .and_then(Self::from_text)
    }
}

/// `"USDC"`, the one currency.
#[derive(Debug)]
struct Usdc;

impl FromParam for Usdc {
    fn from_text(s: &str) -> Result<Self, String> {
        (s == "USDC")
            .then_some(Self)
            .ok_or_else(|| "must be \"USDC\"".into())
    }
}

/// `"month"`, the one interval.
#[derive(Debug)]
struct Month;

impl FromParam for Month {
    fn from_text(s: &str) -> Result<Self, String> {
        (s == "month")
            .then_some(Self)
            .ok_or_else(|| "must be \"month\"".into())
    }
}

pub(crate) async fn create(s: Scope, body: Map<String, Value>) -> Result<Resp> {
    let request = format!("POST /api/v1/plans\n{}", Value::Object(body.clone()));
    let (ctx, merchant, key) = (&s.ctx, &s.merchant, s.idempotency_key.as_deref());
    s.once(&request, |_| async {
        let input: NewPlan = input::body(&body)?;
        let (id, active) = match existing_for_key(ctx, merchant, key, &input).await? {
            Some(found) => found,
            None => {
                // Bounded spend: nothing is written when the merchant's quota is used up or
                // the relayer cannot pay.
                check_quota(ctx, merchant).await?;
                if let Some(relayer) = &ctx.relayer {
                    relayer.ready_for(&ctx.pool, merchant).await?;
                }
                (insert(ctx, merchant, &input, key).await?, false)
            }
        };
        if !active {
            provision(ctx, merchant, id).await?;
        }
        let conn = ctx.pool.get().await?;
        let row = store::get_by_row_id(&conn, merchant, ctx.cfg.chain_id, id)
            .await?
            .ok_or_else(|| ApiError::Internal(format!("plan row {id} vanished")))?;
        Ok(Resp::with_status(
            StatusCode::CREATED,
            plan_value(ctx, &row)?,
        ))
    })
    .await
}

/// PLAN_CREATIONS_PER_DAY: a merchant's plans created in the last 24 hours.
async fn check_quota(ctx: &Ctx, merchant: &Merchant) -> Result<()> {
    let conn = ctx.pool.get().await?;
    let now = chrono::Utc::now();
    let day = chrono::Duration::hours(24);
    let (count, oldest) = store::created_since(&conn, merchant, now - day).await?;
    if count < ctx.cfg.plan_creations_per_day {
        return Ok(());
    }
    let retry_after_secs = oldest
        .map(|t| (t + day - now).num_seconds().max(1) as u64)
        .unwrap_or(86_400);
    metrics::counter!("api_plan_quota_refusals_total").increment(1);
    Err(ApiError::Quota {
        code: Code::PlanQuotaExceeded,
        message: format!(
            "at most {} plans per 24 hours (each is an on-chain transaction); retry after \
             the time in Retry-After",
            ctx.cfg.plan_creations_per_day
        ),
        retry_after_secs,
    })
}

/// The plan an earlier request with this Idempotency-Key created, with whether it is already
/// active. The replay store forgets requests that ended in a 5xx (so the client can retry);
/// this makes such a retry resume the plan it may already have created, never a second one.
/// Like the replay store it holds a key for 24 hours, and like it, it refuses the same key
/// with a different request (409 `idempotency_key_reused`) instead of resuming a plan the
/// request did not ask for.
async fn existing_for_key(
    ctx: &Ctx,
    merchant: &Merchant,
    key: Option<&str>,
    input: &NewPlan,
) -> Result<Option<(i64, bool)>> {
    let Some(key) = key else { return Ok(None) };
    let conn = ctx.pool.get().await?;
    let Some(row) = chainsub_store::plans::by_idempotency_key(&conn, merchant, key).await? else {
        return Ok(None);
    };
    let same = row.name == input.name.as_str()
        && row.amount == input.amount.base_units().to_string()
        && input.slug.as_ref().is_none_or(|s| row.slug == s.as_str())
        && row.trial_days == i32::from(input.trial_days.map_or(0, |d| d.0));
    if !same {
        return Err(ApiError::Conflict {
            code: Code::IdempotencyKeyReused,
            message: "this Idempotency-Key was used with a different request".into(),
            param: None,
        });
    }
    Ok(Some((row.id, row.active)))
}

async fn insert(
    ctx: &Ctx,
    merchant: &Merchant,
    input: &NewPlan,
    idempotency_key: Option<&str>,
) -> Result<i64> {
    let conn = ctx.pool.get().await?;
    let base = input
        .slug
        .clone()
        .unwrap_or_else(|| Slug::from_name(input.name.as_str()));
    for attempt in 0..5 {
        // A derived slug that is taken gets a short random suffix; an explicit one is a 409.
        let slug = if attempt == 0 {
            base.as_str().to_string()
        } else {
            format!("{}-{}", base.as_str(), random_hex(2))
        };
        let public_id = PlanId::random(12);
        let row = chainsub_store::plans::NewPlan {
            public_id: &public_id,
            name: input.name.as_str(),
            amount: input.amount.base_units(),
            trial_days: input.trial_days.map_or(0, |d| d.0),
            slug: &slug,
            plan_ref: rand::random(),
            idempotency_key,
        };
        match chainsub_store::plans::insert(&conn, merchant, &row).await? {
            Inserted::Plan(id) => return Ok(id),
            Inserted::KeyTaken => {
                // A concurrent retry with the same key won the insert: resume its plan.
                if let Some((id, _)) =
                    existing_for_key(ctx, merchant, idempotency_key, input).await?
                {
                    return Ok(id);
                }
            }
            Inserted::SlugTaken if input.slug.is_some() => {
                return Err(ApiError::Conflict {
                    code: Code::SlugTaken,
                    message: format!("you already have a plan with slug `{slug}`"),
                    param: Some("slug".into()),
                });
            }
            Inserted::SlugTaken => {}
        }
    }
    Err(ApiError::Conflict {
        code: Code::SlugTaken,
        message: "could not derive a free slug from the name; give `slug` explicitly".into(),
        param: Some("slug".into()),
    })
}

async fn retry(s: Scope, (id, body): (String, Map<String, Value>)) -> Result<Resp> {
    no_fields(&body)?;
    let request = format!("POST /api/v1/plans/{id}/provision");
    let (ctx, merchant) = (&s.ctx, &s.merchant);
    s.once(&request, |_| async {
        let row = find(ctx, merchant, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("plan", Some("id")))?;
        if row.is_active() {
            return Ok(Resp::json(plan_value(ctx, &row)?));
        }
        if let Some(relayer) = &ctx.relayer {
            relayer.ready_for(&ctx.pool, merchant).await?;
        }
        provision(ctx, merchant, row.row_id).await?;
        let row = find(ctx, merchant, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("plan", Some("id")))?;
        Ok(Resp::json(plan_value(ctx, &row)?))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_name_refuses_bidirectional_controls() {
        assert!(PlanName::from_text("Pro Monthly").is_ok());
        assert!(
            PlanName::from_text("خطة شهرية").is_ok(),
            "right-to-left text is fine"
        );
        for spoof in [
            "Pro \u{202E}99.0 DSU",
            "a\u{2066}b",
            "a\u{200F}",
            "\u{061C}x",
        ] {
            assert_eq!(
                PlanName::from_text(spoof),
                Err("must not contain bidirectional control characters".into()),
                "{spoof:?}"
            );
        }
        // The OpenAPI document says the same.
        let doc: Value = serde_json::from_str(crate::routes::openapi::OPENAPI_JSON).unwrap();
        let pattern = doc["components"]["schemas"]["PlanCreate"]["properties"]["name"]["pattern"]
            .as_str()
            .unwrap();
        assert!(pattern.contains("\\u202a-\\u202e") && pattern.contains("\\u2066-\\u2069"));
    }
}
