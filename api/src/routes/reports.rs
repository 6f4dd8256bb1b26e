//! `GET /api/v1/reports/summary` and `GET /api/v1/reports/revenue`: the merchant's figures
//! (the dashboard's overview shows the same), each a sum of rows the list endpoints serve.

use chrono::{Datelike, NaiveDate, Utc};
use serde::Deserialize;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Admitted, Scope, authed};
use crate::ctx::Ctx;
use crate::http::error::Result;
use crate::http::input::{self, FromParam, query_of};
use crate::http::reply::Resp;
use crate::routes::any_of;

/// The reports router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let summary = warp::path!("api" / "v1" / "reports" / "summary")
        .and(warp::get())
        .and(authed(&ctx))
        .and(query_of())
        .then(|a: Admitted, q| a.serve(q, summary));
    let revenue = warp::path!("api" / "v1" / "reports" / "revenue")
        .and(warp::get())
        .and(authed(&ctx))
        .and(query_of())
        .then(|a: Admitted, q| a.serve(q, revenue));
    any_of([summary.boxed(), revenue.boxed()])
}

/// `GET /api/v1/reports/summary` takes no parameters.
#[derive(Debug, Deserialize)]
struct SummaryQuery {}

async fn summary(s: Scope, _: SummaryQuery) -> Result<Resp> {
    let (summary, height) = crate::reports::summary(&s.ctx, &s.merchant).await?;
    Ok(Resp::view(&summary).indexed_at(height))
}

/// A calendar month, `YYYY-MM`, of the years 2000 to 2099 (a report spans at most 1,200
/// months).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Month(pub NaiveDate);

impl FromParam for Month {
    fn from_text(s: &str) -> std::result::Result<Self, String> {
        let bad = || "must be a month (YYYY-MM) of the years 2000 to 2099".to_string();
        let (y, m) = s.split_once('-').ok_or_else(bad)?;
        if y.len() != 4 || m.len() != 2 || !(y.bytes().chain(m.bytes())).all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let (y, m) = (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if !(2000..=2099).contains(&y) {
            return Err(bad());
        }
        NaiveDate::from_ymd_opt(y, m, 1).map(Month).ok_or_else(bad)
    }
}

/// How a revenue report is split.
#[derive(Debug, Clone, Copy)]
enum Interval {
    Month,
}

impl FromParam for Interval {
    fn from_text(s: &str) -> std::result::Result<Self, String> {
        match s {
            "month" => Ok(Self::Month),
            _ => Err("must be `month`".into()),
        }
    }
}

/// The query of `GET /api/v1/reports/revenue`.
#[derive(Debug, Deserialize)]
struct RevenueQuery {
    #[serde(default, deserialize_with = "input::param")]
    from: Option<Month>,
    #[serde(default, deserialize_with = "input::param")]
    to: Option<Month>,
    #[serde(default, deserialize_with = "input::param")]
    interval: Option<Interval>,
}

async fn revenue(s: Scope, q: RevenueQuery) -> Result<Resp> {
    let today = Utc::now().date_naive();
    let to =
        q.to.map_or_else(|| today.with_day(1).unwrap_or(today), |m| m.0);
    // Twelve months to `to` by default.
    let from = q.from.map_or_else(
        || to.checked_sub_months(chrono::Months::new(11)).unwrap_or(to),
        |m| m.0,
    );
    // `from` after `to` is an empty report, as an empty block range is an empty export.
    let report = match q.interval.unwrap_or(Interval::Month) {
        Interval::Month => crate::reports::revenue(&s.ctx, &s.merchant, from, to).await?,
    };
    Ok(Resp::view(&report).indexed_at(report.indexed_block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_is_written_yyyy_mm() {
        let m = |s: &str| Month::from_text(s).map(|m| m.0.to_string());
        assert_eq!(m("2026-11").as_deref(), Ok("2026-11-01"));
        for bad in [
            "2026-13",
            "2026-1",
            "26-11",
            "2026-11-01",
            "2026/11",
            "+026-11",
            "2026-00",
            "1999-12",
            "2100-01",
        ] {
            assert!(m(bad).is_err(), "{bad}");
        }
        assert_eq!(m("2000-01").as_deref(), Ok("2000-01-01"));
        assert_eq!(m("2099-12").as_deref(), Ok("2099-12-01"));
    }
}
