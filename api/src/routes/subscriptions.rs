//! `GET /api/v1/subscriptions` (filters + cursor pagination) and
//! `GET /api/v1/subscriptions/{id}` (with its ledger), read from the chain index. Every
//! query is scoped by the merchant's wallet.

use chainsub_core::{SubscriptionId, SubscriptionStatus};
use chainsub_store::subscriptions as store;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Authed, authenticate};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::{ApiError, Result};
use crate::http::extract::{
    Caller, caller, check_fields, check_params, method_fallback, param, query_pairs, text_param,
};
use crate::http::reply::{Resp, body_bytes, handle, parse_json_object};
use crate::pagination::{Page, cursor_key};
use crate::routes::plans::with_rate;
use chainsub_views::{ListView, SubscriptionView, SubscriptionWithLedger};
use warp::hyper::body::Bytes;

/// The subscriptions router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let list = warp::path!("api" / "v1" / "subscriptions").and(
        warp::get()
            .and(with_ctx(ctx.clone()))
            .and(caller())
            .and(query_pairs())
            .then(|ctx: Ctx, c: Caller, q: Vec<(String, String)>| {
                handle(async move { list(&ctx, &c, &q).await })
            })
            .or(method_fallback("GET"))
            .unify(),
    );
    let one_path = || warp::path!("api" / "v1" / "subscriptions" / String);
    let one = one_path()
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(caller())
        .then(|id: String, ctx: Ctx, c: Caller| handle(async move { get_one(&ctx, &c, &id).await }))
        .or(one_path()
            .and(method_fallback("GET"))
            .map(|_: String, r: Resp| r))
        .unify();
    let cancel_path = || warp::path!("api" / "v1" / "subscriptions" / String / "cancel");
    let cancel = cancel_path()
        .and(warp::post())
        .and(with_ctx(ctx))
        .and(caller())
        .and(body_bytes())
        .then(|id: String, ctx: Ctx, c: Caller, body: Bytes| {
            handle(async move { cancel(&ctx, &c, &id, &body).await })
        })
        .or(cancel_path()
            .and(method_fallback("POST"))
            .map(|_: String, r: Resp| r))
        .unify();
    list.or(one).unify().or(cancel).unify().boxed()
}

async fn list(ctx: &Ctx, c: &Caller, q: &[(String, String)]) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    check_params(
        q,
        &[
            "limit",
            "startingAfter",
            "endingBefore",
            "status",
            "planId",
            "customerExternalId",
        ],
    )?;
    let page = Page::parse(q)?;
    let status = param(q, "status")
        .map(|s| {
            SubscriptionStatus::parse(s).map_err(|_| {
                ApiError::invalid(
                    "status",
                    format!("`status` must be one of {}", SubscriptionStatus::names()),
                )
            })
        })
        .transpose()?;
    let filter = store::Filter {
        status,
        // Unknown or another merchant's plan simply matches nothing.
        plan: text_param(q, "planId", 100)?,
        // The same bound as the checkout body's `customerExternalId`.
        customer_external_id: text_param(q, "customerExternalId", 128)?,
    };
    let conn = ctx.pool.get().await?;
    let (c, m) = (&conn, &merchant);
    let key = cursor_key(
        &page,
        "subscription",
        SubscriptionId::parse,
        |id| async move { Ok(store::cursor_key(c, m, &id).await?) },
    )
    .await?;
    let (rows, more) = store::list(
        &conn,
        &merchant,
        ctx.cfg.chain_id as i64,
        &filter,
        page.store_page(key),
    )
    .await?;
    let data = rows.iter().map(SubscriptionView::from).collect();
    // A listed subscription is under 1024 bytes of JSON.
    let size = 256 + rows.len() * 1024;
    Ok(with_rate(
        Resp::written(&ListView::new(data, more), size),
        &rate,
    ))
}

async fn get_one(ctx: &Ctx, c: &Caller, id: &str) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let id = SubscriptionId::parse(id).ok_or_else(not_found)?;
    let conn = ctx.pool.get().await?;
    let chain_id = ctx.cfg.chain_id as i64;
    let row = store::get(&conn, &merchant, chain_id, &id)
        .await?
        .ok_or_else(not_found)?;
    let ledger = store::ledger(&conn, &merchant, chain_id, &id).await?;
    let body = SubscriptionWithLedger {
        subscription: SubscriptionView::from(&row),
        ledger: ledger.iter().map(Into::into).collect(),
    };
    Ok(with_rate(Resp::view(&body), &rate))
}

/// `{"atPeriodEnd": true|false}`: the one field, required.
fn parse_cancel(body: &serde_json::Map<String, serde_json::Value>) -> Result<bool> {
    check_fields(body, &["atPeriodEnd"])?;
    body.get("atPeriodEnd")
        .and_then(serde_json::Value::as_bool)
        .ok_or_else(|| ApiError::invalid("atPeriodEnd", "`atPeriodEnd` is required: true or false"))
}

/// `POST /api/v1/subscriptions/{id}/cancel`: the service cancels on chain for the merchant
/// (the contract lets the operator act on plans it created) and answers 202 with the pending
/// state; the lifecycle event follows through `/events` and webhooks like any other. 404 for
/// an unknown or another merchant's id, 409 when already terminal or already cancelling at
/// period end, or when the plan was not created through the service.
async fn cancel(ctx: &Ctx, c: &Caller, id: &str, body: &[u8]) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let body = parse_json_object(c.content_type.as_deref(), body)?;
    let request = format!(
        "POST /api/v1/subscriptions/{id}/cancel\n{}",
        serde_json::Value::Object(body.clone())
    );
    let resp = crate::idempotency::run(
        ctx,
        &merchant,
        c.idempotency_key.as_deref(),
        &request,
        std::convert::identity,
        |rerun| {
            let (merchant, body) = (&merchant, &body);
            async move {
                let at_period_end = parse_cancel(body)?;
                crate::relayer::cancel::cancel(ctx, merchant, id, at_period_end, rerun).await
            }
        },
    )
    .await?;
    Ok(with_rate(resp, &rate))
}
