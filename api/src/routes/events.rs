//! `GET /api/v1/events` (filters + cursor pagination) and `GET /api/v1/events/{id}`: the
//! lifecycle and charge events of the merchant, as [`EventView`]s (the view webhook bodies
//! use), each with its webhook's delivery state.

use chainsub_core::{EventId, SubscriptionId};
use chainsub_store::events as store;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Authed, authenticate};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::{ApiError, Result};
use crate::http::extract::{
    Caller, block_param, caller, check_params, method_fallback, param, query_pairs, time_param,
};
use crate::http::reply::{Resp, handle};
use crate::pagination::{Page, cursor_key};
use crate::routes::plans::with_rate;
use chainsub_views::{EventView, ListView};

/// The events router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let list = warp::path!("api" / "v1" / "events").and(
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
    let one_path = || warp::path!("api" / "v1" / "events" / String);
    let one = one_path()
        .and(warp::get())
        .and(with_ctx(ctx))
        .and(caller())
        .then(|id: String, ctx: Ctx, c: Caller| handle(async move { get_one(&ctx, &c, &id).await }))
        .or(one_path()
            .and(method_fallback("GET"))
            .map(|_: String, r: Resp| r))
        .unify();
    list.or(one).unify().boxed()
}

async fn list(ctx: &Ctx, c: &Caller, q: &[(String, String)]) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    check_params(
        q,
        &[
            "limit",
            "startingAfter",
            "endingBefore",
            "type",
            "subscriptionId",
            "fromBlock",
            "toBlock",
            "createdGte",
            "createdLt",
        ],
    )?;
    let page = Page::parse(q)?;
    // A lifecycle type, the retraction a deep reorg produces, or the renewal-at-risk
    // observation.
    let kind = param(q, "type")
        .map(|t| {
            use chainsub_store::events::{RENEWAL_AT_RISK, RETRACTED};
            chainsub_abi::EventKind::parse(t)
                .map(|k| k.as_str())
                .or([RETRACTED, RENEWAL_AT_RISK].into_iter().find(|k| *k == t))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "type",
                        "`type` must be a subscription.* event type or event.retracted",
                    )
                })
        })
        .transpose()?;
    let subscription = param(q, "subscriptionId")
        .map(|s| {
            SubscriptionId::parse(s).ok_or_else(|| {
                ApiError::invalid(
                    "subscriptionId",
                    "`subscriptionId` must be a subscription id (sub_…)",
                )
            })
        })
        .transpose()?;
    let filter = store::Filter {
        kind,
        subscription: subscription.as_ref(),
        from_block: block_param(q, "fromBlock")?,
        to_block: block_param(q, "toBlock")?,
        created_gte: time_param(q, "createdGte")?,
        created_lt: time_param(q, "createdLt")?,
    };
    let conn = ctx.pool.get().await?;
    let (c, m) = (&conn, &merchant);
    let key = cursor_key(&page, "event", EventId::parse, |id| async move {
        Ok(store::cursor_key(c, m, &id).await?)
    })
    .await?;
    let (rows, more) = store::list(
        &conn,
        &merchant,
        ctx.cfg.chain_id as i64,
        &filter,
        page.store_page(key),
    )
    .await?;
    let data = rows.iter().map(EventView::listed).collect();
    // A listed event is under 1536 bytes of JSON.
    let size = 256 + rows.len() * 1536;
    Ok(with_rate(
        Resp::written(&ListView::new(data, more), size),
        &rate,
    ))
}

async fn get_one(ctx: &Ctx, c: &Caller, id: &str) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let not_found = || ApiError::not_found("event", Some("id"));
    let id = EventId::parse(id).ok_or_else(not_found)?;
    let conn = ctx.pool.get().await?;
    let row = store::get(&conn, &merchant, ctx.cfg.chain_id as i64, &id)
        .await?
        .ok_or_else(not_found)?;
    Ok(with_rate(Resp::view(&EventView::listed(&row)), &rate))
}
