//! The merchant's figures, read from the index: the reporting API's answers and the
//! dashboard overview's.

use chainsub_views::{RevenueView, SummaryView};
use chrono::{NaiveDate, Utc};

use crate::ctx::Ctx;
use crate::http::error::Result;
use crate::merchants::Merchant;

/// The summary now, and the height to report for it.
pub async fn summary(ctx: &Ctx, merchant: &Merchant) -> Result<(SummaryView, Option<i64>)> {
    let now = Utc::now();
    let chain_id = ctx.cfg.chain_id;
    let (s, height) = ctx
        .read(|conn| async move {
            Ok(chainsub_store::reports::summary(&conn, merchant, chain_id, now).await?)
        })
        .await?;
    Ok((SummaryView::new(s, now), height))
}

/// The revenue of the months `from ..= to` (first days).
pub async fn revenue(
    ctx: &Ctx,
    merchant: &Merchant,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<RevenueView> {
    let chain_id = ctx.cfg.chain_id;
    let (months, height) = ctx
        .read(|conn| async move {
            Ok(
                chainsub_store::reports::revenue_months(&conn, merchant, chain_id, from, to)
                    .await?,
            )
        })
        .await?;
    // A height the index had reached when the read began: the months cover at least that far.
    Ok(RevenueView::monthly(from, to, &months, height))
}
