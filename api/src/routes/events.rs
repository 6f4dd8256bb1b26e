//! `GET /api/v1/events` (filters + cursor pagination) and `GET /api/v1/events/{id}`: the
//! lifecycle and charge events of the merchant, rendered by [`crate::render::event_object`]
//! (the same renderer webhooks use).

use chrono::{DateTime, Utc};
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Authed, authenticate};
use crate::ctx::{Ctx, with_ctx};
use crate::error::{ApiError, Result};
use crate::pagination::{Cursor, Page};
use crate::render::{EVENT_SELECT, event_object};
use crate::reply::{Resp, respond};
use crate::routes::plans::with_rate;
use crate::routes::{Caller, SqlParams, caller, check_params, method_fallback, param, query_pairs};

/// The events router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let list = warp::path!("api" / "v1" / "events").and(
        warp::get()
            .and(with_ctx(ctx.clone()))
            .and(caller())
            .and(query_pairs())
            .then(|ctx: Ctx, c: Caller, q: Vec<(String, String)>| async move {
                respond(list(&ctx, &c, &q).await)
            })
            .or(method_fallback("GET"))
            .unify(),
    );
    let one_path = || warp::path!("api" / "v1" / "events" / String);
    let one = one_path()
        .and(warp::get())
        .and(with_ctx(ctx))
        .and(caller())
        .then(
            |id: String, ctx: Ctx, c: Caller| async move { respond(get_one(&ctx, &c, &id).await) },
        )
        .or(one_path()
            .and(method_fallback("GET"))
            .map(|_: String, r: Resp| r))
        .unify();
    list.or(one).unify().boxed()
}

fn scope(chain_id: u64) -> String {
    format!(" WHERE ce.merchant_wallet = $1 AND ce.kind IS NOT NULL AND ce.chain_id = {chain_id}")
}

fn block_param(q: &[(String, String)], name: &str) -> Result<Option<i64>> {
    param(q, name)
        .map(|v| {
            v.parse::<i64>()
                .ok()
                .filter(|n| *n >= 0 && !v.starts_with('+'))
                .ok_or_else(|| ApiError::invalid(name, format!("`{name}` must be a block number")))
        })
        .transpose()
}

fn time_param(q: &[(String, String)], name: &str) -> Result<Option<DateTime<Utc>>> {
    param(q, name)
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::invalid(name, format!("`{name}` must be an RFC 3339 time")))
        })
        .transpose()
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
    let mut params = SqlParams::default();
    params.push(merchant.wallet_bytes());
    let mut sql = format!("{EVENT_SELECT}{}", scope(ctx.cfg.chain_id));
    if let Some(t) = param(q, "type") {
        let kind = chainsub_abi::EventKind::parse(t).ok_or_else(|| {
            ApiError::invalid("type", "`type` must be a subscription.* event type")
        })?;
        sql.push_str(&format!(
            " AND ce.kind = {}",
            params.push(kind.as_str().to_string())
        ));
    }
    if let Some(s) = param(q, "subscriptionId") {
        let id = chainsub_abi::ids::parse_subscription_id(s)
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| {
                ApiError::invalid(
                    "subscriptionId",
                    "`subscriptionId` must be a subscription id (sub_…)",
                )
            })?;
        sql.push_str(&format!(" AND ce.subscription_id = {}", params.push(id)));
    }
    if let Some(b) = block_param(q, "fromBlock")? {
        sql.push_str(&format!(" AND ce.block_number >= {}", params.push(b)));
    }
    if let Some(b) = block_param(q, "toBlock")? {
        sql.push_str(&format!(" AND ce.block_number <= {}", params.push(b)));
    }
    if let Some(t) = time_param(q, "createdGte")? {
        sql.push_str(&format!(" AND ce.block_time >= {}", params.push(t)));
    }
    if let Some(t) = time_param(q, "createdLt")? {
        sql.push_str(&format!(" AND ce.block_time < {}", params.push(t)));
    }
    let conn = ctx.pool.get().await?;
    let key: Option<i64> = match &page.cursor {
        None => None,
        Some(cur) => {
            let (name, id) = match cur {
                Cursor::After(id) => ("startingAfter", id),
                Cursor::Before(id) => ("endingBefore", id),
            };
            let row = conn
                .query_opt(
                    "SELECT id FROM chain_events WHERE public_id = $1 AND merchant_wallet = $2 \
                     AND kind IS NOT NULL",
                    &[id, &merchant.wallet_bytes()],
                )
                .await?
                .ok_or_else(|| ApiError::NotFound {
                    message: format!("no such event `{id}`"),
                    param: Some(name.into()),
                })?;
            Some(row.get(0))
        }
    };
    let (cond, order, reversed) = page.sql("ce.id", key, params.next_index());
    if let Some(k) = key {
        params.push(k);
    }
    sql.push_str(&format!("{cond}{order} LIMIT {}", page.limit + 1));
    // Cached per connection: planning these joins costs more than running them.
    let stmt = conn.prepare_cached(&sql).await?;
    let rows = conn.query(&stmt, &params.refs()).await?;
    let mut data: Vec<_> = rows.iter().map(event_object).collect();
    crate::webhooks::settings::attach_delivery(&conn, &mut data).await?;
    Ok(with_rate(Resp::json(page.finish(data, reversed)), &rate))
}

async fn get_one(ctx: &Ctx, c: &Caller, id: &str) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let conn = ctx.pool.get().await?;
    let row = conn
        .query_opt(
            &format!(
                "{EVENT_SELECT}{} AND ce.public_id = $2",
                scope(ctx.cfg.chain_id)
            ),
            &[&merchant.wallet_bytes(), &id],
        )
        .await?
        .ok_or_else(|| ApiError::not_found("event", Some("id")))?;
    let mut event = [event_object(&row)];
    crate::webhooks::settings::attach_delivery(&conn, &mut event).await?;
    let [event] = event;
    Ok(with_rate(Resp::json(event), &rate))
}
