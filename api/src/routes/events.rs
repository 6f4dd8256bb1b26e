//! `GET /api/v1/events` (filters + cursor pagination) and `GET /api/v1/events/{id}`: the
//! lifecycle and charge events of the merchant, as [`EventView`]s (the view webhook bodies
//! use), each with its webhook's delivery state.

use chainsub_core::{EventId, SubscriptionId};
use chainsub_store::events as store;
use chainsub_views::{EventView, ListView};
use serde::Deserialize;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Admitted, Scope, authed};
use crate::ctx::Ctx;
use crate::http::error::{ApiError, Result};
use crate::http::input::{self, Block, FromParam, Time, query_of};
use crate::http::reply::Resp;
use crate::pagination::{Limit, Page, cursor_key};
use crate::routes::any_of;

/// The events router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let list = warp::path!("api" / "v1" / "events")
        .and(warp::get())
        .and(authed(&ctx))
        .and(query_of())
        .then(|a: Admitted, q| a.serve(q, list));
    let get = warp::path!("api" / "v1" / "events" / String)
        .and(warp::get())
        .and(authed(&ctx))
        .then(|id, a: Admitted| a.serve(id, get_one));
    any_of([list.boxed(), get.boxed()])
}

/// The query of `GET /api/v1/events`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListEvents {
    #[serde(default, deserialize_with = "input::param")]
    limit: Option<Limit>,
    #[serde(default)]
    starting_after: Option<String>,
    #[serde(default)]
    ending_before: Option<String>,
    #[serde(default, rename = "type", deserialize_with = "input::param")]
    kind: Option<Kind>,
    #[serde(default, deserialize_with = "input::param")]
    subscription_id: Option<SubscriptionId>,
    #[serde(default, deserialize_with = "input::param")]
    from_block: Option<Block>,
    #[serde(default, deserialize_with = "input::param")]
    to_block: Option<Block>,
    #[serde(default, deserialize_with = "input::param")]
    created_gte: Option<Time>,
    #[serde(default, deserialize_with = "input::param")]
    created_lt: Option<Time>,
}

/// An event type to list: a lifecycle type, the retraction a deep reorg produces, or one of
/// the keeper's observations (renewal at risk, trial will end).
#[derive(Debug)]
struct Kind(&'static str);

impl FromParam for Kind {
    fn from_text(t: &str) -> Result<Self, String> {
        chainsub_abi::EventKind::parse(t)
            .map(|k| k.as_str())
            .or(chainsub_store::events::UNLOGGED_KINDS
                .into_iter()
                .find(|k| *k == t))
            .map(Kind)
            .ok_or_else(|| "must be a subscription.* event type or event.retracted".into())
    }
}

impl FromParam for SubscriptionId {
    fn from_text(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| "must be a subscription id (sub_…)".into())
    }
}

async fn list(s: Scope, q: ListEvents) -> Result<Resp> {
    let page = Page::new(q.limit, q.starting_after, q.ending_before)?;
    let filter = store::Filter {
        kind: q.kind.map(|k| k.0),
        subscription: q.subscription_id.as_ref(),
        from_block: q.from_block.map(|b| b.0),
        to_block: q.to_block.map(|b| b.0),
        created_gte: q.created_gte.map(|t| t.0),
        created_lt: q.created_lt.map(|t| t.0),
    };
    let chain_id = s.ctx.cfg.chain_id;
    let (merchant, page, filter) = (&s.merchant, &page, &filter);
    let ((rows, more), height) = s
        .ctx
        .read(|conn| async move {
            let (c, m) = (&conn, merchant);
            let key = cursor_key(page, "event", EventId::parse, |id| async move {
                Ok(store::cursor_key(c, m, &id).await?)
            })
            .await?;
            Ok(store::list(&conn, merchant, chain_id, filter, page.store_page(key)).await?)
        })
        .await?;
    let data = rows.iter().map(EventView::listed).collect();
    // A listed event is under 1536 bytes of JSON.
    let size = 256 + rows.len() * 1536;
    Ok(Resp::written(&ListView::new(data, more), size).indexed_at(height))
}

async fn get_one(s: Scope, id: String) -> Result<Resp> {
    let not_found = || ApiError::not_found("event", Some("id"));
    let id = EventId::parse(&id).ok_or_else(not_found)?;
    let (m, id, chain_id) = (&s.merchant, &id, s.ctx.cfg.chain_id);
    let (row, height) = s
        .ctx
        .read(|conn| async move {
            store::get(&conn, m, chain_id, id)
                .await?
                .ok_or_else(not_found)
        })
        .await?;
    Ok(Resp::view(&EventView::listed(&row)).indexed_at(height))
}
