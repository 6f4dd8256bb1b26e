//! The merchant's figures, read from the index: the reporting API's answers and the
//! dashboard overview's.

use chainsub_views::{RevenueView, SummaryView};
use chrono::{NaiveDate, Utc};

use crate::ctx::Ctx;
use crate::http::error::Result;
use crate::merchants::Merchant;

/// The summary now.
pub async fn summary(ctx: &Ctx, merchant: &Merchant) -> Result<SummaryView> {
    let now = Utc::now();
    let conn = ctx.pool.get().await?;
    let s = chainsub_store::reports::summary(&conn, merchant, ctx.cfg.chain_id, now).await?;
    Ok(SummaryView::new(s, now))
}

/// The revenue of the months `from ..= to` (first days).
pub async fn revenue(
    ctx: &Ctx,
    merchant: &Merchant,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<RevenueView> {
    let conn = ctx.pool.get().await?;
    let months =
        chainsub_store::reports::revenue_months(&conn, merchant, ctx.cfg.chain_id, from, to)
            .await?;
    let cursor = chainsub_store::chain::cursor(&conn, ctx.cfg.chain_id).await?;
    Ok(RevenueView::monthly(
        from,
        to,
        &months,
        cursor.map(|c| c.indexed_block),
    ))
}
