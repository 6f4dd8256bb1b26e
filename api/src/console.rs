//! What the dashboard's subscription and plan pages read: the same store calls as the REST API's
//! list and get, with the merchant of the session.

use chainsub_core::SubscriptionId;
use chainsub_store::{events, subscriptions as store};

use crate::auth::session::Session;
use crate::ctx::Ctx;
use crate::http::error::{ApiError, Result};
use crate::http::reply::Resp;
use crate::merchants::Merchant;
use crate::pages::subscriptions::{self as view, EventLine, ListQuery};
use crate::pagination::{Limit, Page};

/// Rows per page of the list.
const PER_PAGE: i64 = 50;

/// The list page: `status` and `customer` as the API's filters, `after` a cursor.
pub async fn list(
    ctx: &Ctx,
    session: &Session,
    q: &ListQuery<'_>,
    after: Option<String>,
) -> Result<Resp> {
    let merchant = &session.merchant;
    // A wallet in the search box: that wallet's subscriptions (one page, newest first).
    if let Some(wallet) = q
        .customer
        .and_then(|c| c.parse::<alloy::primitives::Address>().ok())
    {
        let chain_id = ctx.cfg.chain_id;
        let (mut rows, _) =
            ctx.read(|conn| async move {
                Ok(store::of_wallet(&conn, merchant, chain_id, wallet).await?)
            })
            .await?;
        rows.retain(|r| q.status.is_none_or(|s| r.status == s));
        return Ok(view::list(session, q, &rows, None));
    }
    let page = Page::new(Some(Limit(PER_PAGE)), after, None)?;
    let filter = store::Filter {
        status: q.status,
        plan: None,
        customer_external_id: q.customer,
    };
    let (rows, more, _) =
        crate::routes::subscriptions::list_page(ctx, merchant, &filter, &page).await?;
    let next = more.then(|| rows.last().map(|r| r.id.as_str())).flatten();
    Ok(view::list(session, q, &rows, next))
}

/// The detail page of `id` (404 for another merchant's).
pub async fn detail(ctx: &Ctx, session: &Session, id: &str) -> Result<Resp> {
    let merchant: &Merchant = &session.merchant;
    let not_found = || ApiError::not_found("subscription", None);
    let id = SubscriptionId::parse(id).ok_or_else(not_found)?;
    let chain_id = ctx.cfg.chain_id;
    let id = &id;
    // The subscription, its ledger and its events: a read of the index (`crate::reads`).
    let ((row, ledger, rows), _) = ctx
        .read(|conn| async move {
            let row = store::get(&conn, merchant, chain_id, id)
                .await?
                .ok_or_else(not_found)?;
            let ledger = store::ledger(&conn, merchant, chain_id, id).await?;
            let filter = events::Filter {
                kind: None,
                subscription: Some(id),
                from_block: None,
                to_block: None,
                created_gte: None,
                created_lt: None,
            };
            let page = Page::new(Some(Limit(100)), None, None)?;
            let (rows, _) =
                events::list(&conn, merchant, chain_id, &filter, page.store_page(None)).await?;
            Ok((row, ledger, rows))
        })
        .await?;
    let conn = ctx.pool.get().await?;
    let lines: Vec<EventLine> = rows
        .iter()
        .map(|e| EventLine {
            id: e.id.as_str().to_string(),
            kind: e.kind.clone().unwrap_or_default(),
            at: e.created_at,
            delivery: e.delivery.as_ref().map_or_else(
                || "no webhook (no endpoint, or not confirmed yet)".to_string(),
                |d| match (&d.delivered_at, &d.last_error) {
                    (Some(at), _) => format!("delivered {}", at.format("%Y-%m-%d %H:%M UTC")),
                    (None, Some(err)) => format!(
                        "{} after {} attempt(s): {err}",
                        d.status.as_str(),
                        d.attempts
                    ),
                    (None, None) => format!("{}, {} attempt(s)", d.status.as_str(), d.attempts),
                },
            ),
        })
        .collect();
    // The plans a plan-change link may offer: the merchant's others on chain.
    let page = Page::new(Some(Limit(100)), None, None)?;
    let (plans, _) =
        chainsub_store::plans::list(&conn, merchant, chain_id, page.store_page(None)).await?;
    let choices: Vec<(String, String)> = plans
        .iter()
        .filter(|p| p.is_active() && row.plan_id.as_ref() != Some(&p.id))
        .map(|p| {
            (
                p.id.as_str().to_string(),
                format!(
                    "{} · {} USDC",
                    p.name,
                    chainsub_core::format_units(p.amount)
                ),
            )
        })
        .collect();
    Ok(view::detail(
        &ctx.cfg, session, &row, &ledger, &lines, &choices,
    ))
}

/// The plans page: the merchant's plans, newest first (the first 100, as the API's list).
pub async fn plans(ctx: &Ctx, session: &Session) -> Result<Resp> {
    let page = Page::new(Some(Limit(100)), None, None)?;
    let conn = ctx.pool.get().await?;
    let (rows, _) = chainsub_store::plans::list(
        &conn,
        &session.merchant,
        ctx.cfg.chain_id,
        page.store_page(None),
    )
    .await?;
    Ok(crate::pages::plans::list(&ctx.cfg, session, &rows))
}
