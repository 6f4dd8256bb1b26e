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
    let conn = ctx.read_conn().await?;
    let s = chainsub_store::reports::summary(&*conn, merchant, ctx.cfg.chain_id, now).await?;
    Ok(SummaryView::new(s, now))
}

/// The revenue of the months `from ..= to` (first days).
pub async fn revenue(
    ctx: &Ctx,
    merchant: &Merchant,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<RevenueView> {
    let conn = ctx.read_conn().await?;
    let months =
        chainsub_store::reports::revenue_months(&*conn, merchant, ctx.cfg.chain_id, from, to)
            .await?;
    // The height the read began at: the months cover at least that far.
    Ok(RevenueView::monthly(from, to, &months, conn.height))
}
