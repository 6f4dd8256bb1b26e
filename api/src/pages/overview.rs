//! `/dashboard`: the merchant's overview — the reporting API's figures (MRR, subscriptions by
//! state, renewals due, at risk, failing) and the revenue of the last twelve months, rendered
//! on the server: the charts are inline SVG (no script, nothing from another origin), each
//! bar labelled with its value and each chart followed by its figures as a table, so
//! nothing is told by colour alone. Each figure links to the subscriptions it counts.

use std::fmt::Write as _;

use chainsub_views::{MoneyView, RevenueView, SummaryView};
use warp::http::StatusCode;

use super::html::{esc, json_script, page};
use crate::auth::session::{CSRF_HEADER, Session};
use crate::http::reply::Resp;

/// The dashboard's navigation; `current` is the page's path.
pub fn nav(current: &str) -> String {
    let link = |href: &str, label: &str| {
        let here = if href == current {
            " aria-current=\"page\""
        } else {
            ""
        };
        format!("<a href=\"{href}\"{here}>{label}</a>")
    };
    format!(
        "<nav class=\"dash-nav\" aria-label=\"Dashboard\">{}{}{}{}</nav>",
        link("/dashboard", "Overview"),
        link("/dashboard/subscriptions", "Subscriptions"),
        link("/dashboard/plans", "Plans"),
        link("/dashboard/developers", "Developers"),
    )
}

/// `12.50 USDC`.
fn usdc(m: &MoneyView) -> String {
    format!("{} USDC", m.amount)
}

/// One figure: its label, value, an explanation and the list it counts.
fn figure(id: &str, label: &str, value: &str, note: &str, href: &str) -> String {
    format!(
        "<a class=\"figure\" data-figure=\"{id}\" href=\"{href}\">\
         <span class=\"figure-label\">{label}</span>\
         <span class=\"figure-value\">{value}</span>\
         <span class=\"figure-note\">{note}</span></a>",
        href = esc(href),
        label = esc(label),
        value = esc(value),
        note = esc(note),
    )
}

/// Bars as inline SVG: `(label, value, value as shown)`, one bar each, its value written
/// above it and its label below (so it reads without colour).
fn bar_chart(id: &str, title: &str, bars: &[(String, f64, String)]) -> String {
    let (w, h, top, bottom) = (720.0_f64, 240.0_f64, 24.0_f64, 36.0_f64);
    let max = bars.iter().map(|b| b.1).fold(0.0_f64, f64::max);
    let slot = w / bars.len().max(1) as f64;
    let scale = if max > 0.0 {
        (h - top - bottom) / max
    } else {
        0.0
    };
    let mut svg = format!(
        "<svg class=\"chart\" id=\"{id}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-labelledby=\"{id}-title\" preserveAspectRatio=\"xMidYMid meet\">\
         <title id=\"{id}-title\">{title}</title>\
         <line class=\"axis\" x1=\"0\" y1=\"{base}\" x2=\"{w}\" y2=\"{base}\"/>",
        title = esc(title),
        base = h - bottom,
    );
    for (i, (label, value, shown)) in bars.iter().enumerate() {
        let bh = (value.max(0.0) * scale).max(if *value > 0.0 { 1.0 } else { 0.0 });
        let x = i as f64 * slot + slot * 0.15;
        let y = h - bottom - bh;
        let cx = i as f64 * slot + slot / 2.0;
        let _ = write!(
            svg,
            "<g class=\"bar\"><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bw:.1}\" height=\"{bh:.1}\"/>\
             <text class=\"value\" x=\"{cx:.1}\" y=\"{vy:.1}\" text-anchor=\"middle\">{shown}</text>\
             <text class=\"label\" x=\"{cx:.1}\" y=\"{ly:.1}\" text-anchor=\"middle\">{label}</text></g>",
            bw = slot * 0.7,
            vy = y - 6.0,
            ly = h - bottom + 22.0,
            shown = esc(shown),
            label = esc(label),
        );
    }
    svg.push_str("</svg>");
    svg
}

/// `2026-11` → `Nov 26` (the chart's short label).
fn short_month(month: &str) -> String {
    let names = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, m) = month.split_once('-').unwrap_or((month, "01"));
    let m: usize = m.parse().unwrap_or(1);
    format!("{} {}", names[m.clamp(1, 12) - 1], y.get(2..).unwrap_or(y))
}

/// `2026-11-30` → `Nov 30`.
fn short_day(day: &str) -> String {
    let month = short_month(day.get(..7).unwrap_or(day));
    let d = day.get(8..).unwrap_or("").trim_start_matches('0');
    format!("{} {d}", month.split(' ').next().unwrap_or(""))
}

/// Base units as a chart's bar height (an f64 is exact enough for a drawing).
fn height(m: &MoneyView) -> f64 {
    m.base_units.parse::<f64>().unwrap_or(0.0)
}

/// The signed-in overview.
pub fn render(session: &Session, s: &SummaryView, revenue: &RevenueView) -> Resp {
    let list = |status: &str| format!("/dashboard/subscriptions?status={status}");
    let c = &s.subscriptions;
    let count = |n: i64| n.to_string();
    let figures = [
        figure(
            "mrr",
            "Monthly recurring revenue",
            &usdc(&s.mrr),
            "active and past-due subscriptions that renew",
            &list("active"),
        ),
        figure(
            "trial-mrr",
            "In trials",
            &usdc(&s.trial_mrr),
            "what trials add once they convert",
            &list("trialing"),
        ),
        figure(
            "renewals-7",
            "Renewals in 7 days",
            &format!(
                "{} · {}",
                s.renewals_next_7_days.count,
                usdc(&s.renewals_next_7_days.total)
            ),
            "next charges due this week",
            &list("active"),
        ),
        figure(
            "renewals-30",
            "Renewals in 30 days",
            &format!(
                "{} · {}",
                s.renewals_next_30_days.count,
                usdc(&s.renewals_next_30_days.total)
            ),
            "next charges due this month",
            &list("active"),
        ),
        figure(
            "at-risk",
            "At risk",
            &format!("{} · {}", s.at_risk.count, usdc(&s.at_risk.total)),
            "the wallet cannot cover the next charge",
            "/dashboard/subscriptions?status=active",
        ),
        figure(
            "failing",
            "Failed, awaiting retry",
            &format!(
                "{} · {}",
                s.failed_awaiting_retry.count,
                usdc(&s.failed_awaiting_retry.total)
            ),
            "past due, the keeper retries",
            &list("past_due"),
        ),
    ]
    .concat();
    let by_status = [
        ("Trialing", c.trialing, "trialing"),
        ("Active", c.active, "active"),
        ("Past due", c.past_due, "past_due"),
        ("Cancelling", c.cancelling, "active"),
        ("Cancelled", c.cancelled, "cancelled"),
        ("Ended", c.ended, "ended"),
    ];
    let status_bars: Vec<(String, f64, String)> = by_status
        .iter()
        .map(|(label, n, _)| ((*label).to_string(), *n as f64, count(*n)))
        .collect();
    // The change over 30 days, where the index keeps it: what stopped as cancelled or ended;
    // the live states together (started − stopped), not one by one.
    let signed = |n: i64| {
        if n > 0 {
            format!("+{n}")
        } else {
            n.to_string()
        }
    };
    let change = &s.change_last_30_days;
    let mut status_rows: String = by_status
        .iter()
        .map(|(label, n, status)| {
            let c = &change.states;
            let delta = signed(match *label {
                "Trialing" => c.trialing,
                "Active" => c.active,
                "Past due" => c.past_due,
                "Cancelling" => c.cancelling,
                "Cancelled" => c.cancelled,
                _ => c.ended,
            });
            format!(
                "<tr data-status=\"{label}\"><th scope=\"row\"><a href=\"{href}\">{label}</a></th><td>{n}</td><td>{delta}</td></tr>",
                href = esc(&list(status)),
            )
        })
        .collect();
    let live = c.trialing + c.active + c.past_due + c.cancelling;
    let _ = write!(
        status_rows,
        "<tr data-status=\"Live\"><th scope=\"row\">Live (the four above)</th><td>{live}</td><td>{}</td></tr>",
        signed(change.live)
    );
    let week_bars: Vec<(String, f64, String)> = s
        .live_by_week
        .iter()
        .map(|w| (short_day(&w.week_ending), w.live as f64, w.live.to_string()))
        .collect();
    let week_rows: String = s
        .live_by_week
        .iter()
        .map(|w| {
            format!(
                "<tr data-week=\"{end}\"><th scope=\"row\">{end}</th><td>{}</td><td>{}</td><td>{}</td></tr>",
                w.live,
                w.started,
                w.stopped,
                end = esc(&w.week_ending),
            )
        })
        .collect();
    let revenue_bars: Vec<(String, f64, String)> = revenue
        .data
        .iter()
        .map(|m| (short_month(&m.month), height(&m.net), m.net.amount.clone()))
        .collect();
    let revenue_rows: String = revenue
        .data
        .iter()
        .map(|m| {
            format!(
                "<tr data-month=\"{month}\"><th scope=\"row\">{month}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.charges.amount),
                esc(&m.prorations.amount),
                esc(&m.refunds.amount),
                esc(&m.net.amount),
                month = esc(&m.month),
            )
        })
        .collect();
    let settings = serde_json::json!({
        "signedIn": true,
        "csrfHeader": CSRF_HEADER,
        "csrfToken": session.csrf_token,
    });
    let as_of = s.as_of.format("%Y-%m-%d %H:%M UTC");
    let height_note = s.indexed_block.map_or_else(
        || "nothing indexed yet".to_string(),
        |b| format!("block {b}"),
    );
    let body = format!(
        r#"{nav}
<section class="card" aria-labelledby="title">
<h1 id="title">Overview</h1>
<p class="muted">Merchant <code>{code}</code> · figures as of {as_of}, index at {height_note}. <button type="button" id="signout" class="link">Sign out</button></p>
<div id="status" class="status" role="status" aria-live="polite"></div>
<div class="figures" id="figures">{figures}</div>
</section>

<section class="card" aria-labelledby="revenue-title" id="revenue">
<h2 id="revenue-title">Revenue per month</h2>
<p class="muted">Net USDC: charges and upgrade prorations, less refunds, by the block time of each ledger entry (UTC). Total over the twelve months: <strong data-figure="revenue-total">{total}</strong>.</p>
{revenue_chart}
<details><summary>The figures</summary>
<div class="table-scroll" tabindex="0" role="region" aria-label="Revenue per month (scrolls sideways)"><table id="revenue-table">
<caption class="sr-only">Revenue per month</caption>
<thead><tr><th scope="col">Month</th><th scope="col">Charges</th><th scope="col">Prorations</th><th scope="col">Refunds</th><th scope="col">Net</th></tr></thead>
<tbody>{revenue_rows}</tbody></table></div>
</details>
</section>

<section class="card" aria-labelledby="status-title" id="by-status">
<h2 id="status-title">Subscriptions by state</h2>
<p class="muted">Started in the last 30 days: <strong data-figure="started-30">{started}</strong> · cancelled or ended: <strong data-figure="stopped-30">{stopped}</strong>.</p>
{status_chart}
<div class="table-scroll" tabindex="0" role="region" aria-label="Subscriptions by state (scrolls sideways)"><table id="status-table">
<caption class="sr-only">Subscriptions by state</caption>
<thead><tr><th scope="col">State</th><th scope="col">Subscriptions</th><th scope="col">Change, 30 days</th></tr></thead>
<tbody>{status_rows}</tbody></table></div>
<p class="muted">Change: subscriptions that entered the state less those that left it in the last 30 days (UTC days), by the block of the event that moved them.</p>
</section>

<section class="card" aria-labelledby="weeks-title" id="by-week">
<h2 id="weeks-title">Live subscriptions by week</h2>
<p class="muted">Trialing, active, past due or cancelling at the end of each of the last twelve weeks (UTC days).</p>
{week_chart}
<details><summary>The figures</summary>
<div class="table-scroll" tabindex="0" role="region" aria-label="Live subscriptions by week (scrolls sideways)"><table id="week-table">
<caption class="sr-only">Live subscriptions by week</caption>
<thead><tr><th scope="col">Week ending</th><th scope="col">Live</th><th scope="col">Started</th><th scope="col">Cancelled or ended</th></tr></thead>
<tbody>{week_rows}</tbody></table></div>
</details>
</section>
{settings}"#,
        nav = nav("/dashboard"),
        code = esc(session.merchant.code()),
        total = esc(&usdc(&revenue.total.net)),
        revenue_chart = bar_chart(
            "revenue-chart",
            "Net revenue per month, last twelve months",
            &revenue_bars
        ),
        status_chart = bar_chart("status-chart", "Subscriptions by state", &status_bars),
        week_chart = bar_chart(
            "week-chart",
            "Live subscriptions at the end of each week, last twelve weeks",
            &week_bars
        ),
        started = s.started_last_30_days,
        stopped = s.stopped_last_30_days,
        settings = json_script("dashboard-settings", &settings),
    );
    page(StatusCode::OK, "Overview", &body, &["overview.js"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_carry_their_value_and_label_and_a_zero_draws_nothing() {
        let svg = bar_chart(
            "c",
            "T",
            &[
                ("Nov 26".into(), 0.0, "0.00".into()),
                ("Dec 26".into(), 5.0, "5.00".into()),
            ],
        );
        assert!(svg.contains("role=\"img\"") && svg.contains("<title id=\"c-title\">T</title>"));
        assert!(svg.contains(">5.00</text>") && svg.contains(">Dec 26</text>"));
        assert!(svg.contains("height=\"0.0\""), "{svg}");
        assert_eq!(short_month("2026-11"), "Nov 26");
        assert_eq!(short_day("2026-11-03"), "Nov 3");
    }
}
