//! `GET /api/v1/subscriptions` (filters + cursor pagination) and
//! `GET /api/v1/subscriptions/{id}` (with its ledger), read from the chain index. Every
//! query is scoped by the merchant's wallet.

use crate::ctx::Ctx;
use chainsub_core::{SubscriptionId, SubscriptionStatus};
use chainsub_store::subscriptions as store;
use chainsub_views::{ListView, SubscriptionView, SubscriptionWithLedger};
use serde::Deserialize;
use serde_json::{Map, Value};
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Admitted, Scope, authed, authed_json};
use crate::http::error::{ApiError, Result};
use crate::http::input::{self, Flag, FromParam, Text, query_of};
use crate::http::reply::Resp;
use crate::pagination::{Limit, Page, cursor_key};
use crate::routes::any_of;

/// The subscriptions router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let list = warp::path!("api" / "v1" / "subscriptions")
        .and(warp::get())
        .and(authed(&ctx))
        .and(query_of())
        .then(|a: Admitted, q| a.serve(q, list));
    let get = warp::path!("api" / "v1" / "subscriptions" / String)
        .and(warp::get())
        .and(authed(&ctx))
        .then(|id, a: Admitted| a.serve(id, get_one));
    let cancel = warp::path!("api" / "v1" / "subscriptions" / String / "cancel")
        .and(warp::post())
        .and(authed_json(&ctx))
        .then(|id, a: Admitted, body| a.serve((id, body), cancel));
    // Built once, for reads only (the refund's limits): the API never signs for a merchant.
    let provider = crate::pages::checkout::read_provider(&ctx.cfg.rpc_url).ok();
    let refund = warp::path!("api" / "v1" / "subscriptions" / String / "refunds")
        .and(warp::post())
        .and(authed_json(&ctx))
        .then(move |id, a: Admitted, body| {
            let provider = provider.clone();
            a.serve((id, body, provider), refund)
        });
    let plan_change = warp::path!("api" / "v1" / "subscriptions" / String / "plan-change-links")
        .and(warp::post())
        .and(authed_json(&ctx))
        .then(|id, a: Admitted, body| a.serve((id, body), plan_change_link));
    any_of([
        list.boxed(),
        get.boxed(),
        cancel.boxed(),
        refund.boxed(),
        plan_change.boxed(),
    ])
}

/// The query of `GET /api/v1/subscriptions`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListSubscriptions {
    #[serde(default, deserialize_with = "input::param")]
    limit: Option<Limit>,
    #[serde(default)]
    starting_after: Option<String>,
    #[serde(default)]
    ending_before: Option<String>,
    #[serde(default, deserialize_with = "input::param")]
    status: Option<SubscriptionStatus>,
    /// Unknown or another merchant's plan simply matches nothing.
    #[serde(default, deserialize_with = "input::param")]
    plan_id: Option<Text<100>>,
    /// The same bound as the checkout body's `customerExternalId`.
    #[serde(default, deserialize_with = "input::param")]
    customer_external_id: Option<Text<128>>,
}

impl FromParam for SubscriptionStatus {
    fn from_text(s: &str) -> Result<Self, String> {
        Self::parse(s).map_err(|_| format!("must be one of {}", Self::names()))
    }
}

async fn list(s: Scope, q: ListSubscriptions) -> Result<Resp> {
    let page = Page::new(q.limit, q.starting_after, q.ending_before)?;
    let filter = store::Filter {
        status: q.status,
        plan: q.plan_id.as_ref().map(|t| t.0.as_str()),
        customer_external_id: q.customer_external_id.as_ref().map(|t| t.0.as_str()),
    };
    let (rows, more, height) = list_page(&s.ctx, &s.merchant, &filter, &page).await?;
    let data = rows.iter().map(SubscriptionView::from).collect();
    // A listed subscription is under 1024 bytes of JSON.
    let size = 256 + rows.len() * 1024;
    Ok(Resp::written(&ListView::new(data, more), size).indexed_at(height))
}

/// A page of `merchant`'s subscriptions matching `filter` from the page's cursor (a
/// subscription id; unknown: 400): the API's list and the dashboard's, with the index height
/// it read at.
pub async fn list_page(
    ctx: &Ctx,
    merchant: &crate::merchants::Merchant,
    filter: &store::Filter<'_>,
    page: &Page,
) -> Result<(Vec<store::SubscriptionRow>, bool, Option<i64>)> {
    let chain_id = ctx.cfg.chain_id;
    let ((rows, more), height) = ctx
        .read(|conn| async move {
            let (c, m) = (&conn, merchant);
            let key = cursor_key(
                page,
                "subscription",
                SubscriptionId::parse,
                |id| async move { Ok(store::cursor_key(c, m, &id).await?) },
            )
            .await?;
            Ok(store::list(&conn, merchant, chain_id, filter, page.store_page(key)).await?)
        })
        .await?;
    Ok((rows, more, height))
}

async fn get_one(s: Scope, id: String) -> Result<Resp> {
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let id = SubscriptionId::parse(&id).ok_or_else(not_found)?;
    let chain_id = s.ctx.cfg.chain_id;
    let (m, id) = (&s.merchant, &id);
    let ((row, ledger), height) = s
        .ctx
        .read(|conn| async move {
            let row = store::get(&conn, m, chain_id, id)
                .await?
                .ok_or_else(not_found)?;
            Ok((row, store::ledger(&conn, m, chain_id, id).await?))
        })
        .await?;
    let body = SubscriptionWithLedger {
        subscription: SubscriptionView::from(&row),
        ledger: chainsub_views::LedgerEntryView::list(&ledger),
    };
    Ok(Resp::view(&body).indexed_at(height))
}

/// The body of a refund request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewRefund {
    #[serde(deserialize_with = "input::required")]
    amount: chainsub_core::Amount,
    #[serde(default, deserialize_with = "input::field")]
    cancel: Option<Flag>,
}

/// A refund request's body (`{"amount": "1.50", "cancel": false}`), checked; the dashboard's
/// refund takes the same.
pub fn refund_asked(body: &Map<String, Value>) -> Result<crate::refunds::Asked> {
    let NewRefund { amount, cancel } = input::body(body)?;
    Ok(crate::refunds::Asked {
        amount,
        cancel: cancel.is_some_and(|Flag(c)| c),
    })
}

/// `POST /api/v1/subscriptions/{id}/refunds`: the transactions the merchant's wallet sends to
/// refund `amount` of the subscription's latest charged period (and, with `cancel`, cancel
/// it); nothing is sent or stored ([`crate::refunds`]).
async fn refund(
    s: Scope,
    (id, body, provider): (
        String,
        Map<String, Value>,
        Option<alloy::providers::DynProvider>,
    ),
) -> Result<Resp> {
    let asked = refund_asked(&body)?;
    let view = crate::refunds::request(&s.ctx, provider.as_ref(), &s.merchant, &id, asked).await?;
    Ok(Resp::view(&view))
}

/// The body of a plan-change link.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewPlanChangeLink {
    #[serde(deserialize_with = "input::required")]
    plan_id: Text<100>,
    #[serde(default, deserialize_with = "input::field")]
    expires_in: Option<LinkLife>,
}

/// A plan-change link's life in seconds: 60 to 30 days.
#[derive(Debug, Clone, Copy)]
struct LinkLife(i64);

impl FromParam for LinkLife {
    fn from_text(s: &str) -> Result<Self, String> {
        Err(format!("must be a number of seconds, not {s:?}"))
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        let max = crate::plan_change::MAX_SECS;
        input::json_integer(v, 60..=max)
            .map(Self)
            .ok_or_else(|| format!("must be whole seconds from 60 to {max}"))
    }
}

/// `POST /api/v1/subscriptions/{id}/plan-change-links`: a signed link the subscriber opens to
/// confirm and sign a move to another of the merchant's plans ([`crate::plan_change`]).
async fn plan_change_link(s: Scope, (id, body): (String, Map<String, Value>)) -> Result<Resp> {
    plan_change_link_for(&s.ctx, &s.merchant, &id, &body).await
}

/// A plan-change link from its request body (`{"planId": …, "expiresIn": …}`); the
/// dashboard's button sends the same.
pub async fn plan_change_link_for(
    ctx: &Ctx,
    merchant: &crate::merchants::Merchant,
    id: &str,
    body: &Map<String, Value>,
) -> Result<Resp> {
    let NewPlanChangeLink {
        plan_id,
        expires_in,
    } = input::body(body)?;
    let secs = expires_in.map_or(crate::plan_change::DEFAULT_SECS, |LinkLife(s)| s);
    let link = crate::plan_change::link(ctx, merchant, id, &plan_id.0, secs).await?;
    Ok(Resp::json_view(warp::http::StatusCode::CREATED, &link))
}

/// The body of a cancellation: `{"atPeriodEnd": true|false}`, the one field, required.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cancel {
    #[serde(default, deserialize_with = "input::field")]
    at_period_end: Option<Flag>,
}

/// A cancellation's body, checked: when it takes effect. The dashboard's buttons send the
/// same.
pub fn cancel_when(body: &Map<String, Value>) -> Result<chainsub_core::CancelAt> {
    let Cancel { at_period_end } = input::body(body)?;
    let Flag(at_period_end) = at_period_end.ok_or_else(|| {
        ApiError::invalid("atPeriodEnd", "`atPeriodEnd` is required: true or false")
    })?;
    Ok(chainsub_core::CancelAt::from_at_period_end(at_period_end))
}

/// `POST /api/v1/subscriptions/{id}/cancel`: the service cancels on chain for the merchant
/// (the contract lets the operator act on plans it created) and answers 202 with the pending
/// state; the lifecycle event follows through `/events` and webhooks like any other. 404 for
/// an unknown or another merchant's id, 409 when already terminal or already cancelling at
/// period end, or when the plan was not created through the service.
async fn cancel(s: Scope, (id, body): (String, Map<String, Value>)) -> Result<Resp> {
    let request = format!(
        "POST /api/v1/subscriptions/{id}/cancel\n{}",
        Value::Object(body.clone())
    );
    let (ctx, merchant) = (&s.ctx, &s.merchant);
    s.once(&request, |run| {
        let (body, id) = (&body, &id);
        async move {
            let when = cancel_when(body)?;
            crate::relayer::cancel::cancel(ctx, merchant, id, when, run).await
        }
    })
    .await
}
