//! The reporting API checked against sums computed here, independently, from the rows the
//! list endpoints return: every subscription (`GET /api/v1/subscriptions` and each one's
//! ledger), the keeper's `subscription.renewal_at_risk` events.

use std::collections::BTreeMap;

use chainsub_tests::merchant::ApiClient;
use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use serde_json::Value;

/// "9.99" or "-1.50" → signed base units.
fn units(text: &str) -> i128 {
    let (neg, text) = text.strip_prefix('-').map_or((false, text), |t| (true, t));
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let frac = format!("{frac:0<6}");
    let v = whole.parse::<i128>().unwrap() * 1_000_000 + frac[..6].parse::<i128>().unwrap();
    if neg { -v } else { v }
}

fn time(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

fn money(v: &Value) -> i128 {
    let u: i128 = v["baseUnits"].as_str().unwrap().parse().unwrap();
    assert_eq!(u, units(v["amount"].as_str().unwrap()), "{v}");
    u
}

async fn all(api: &ApiClient, key: &str, path: &str) -> Vec<Value> {
    let page = api.get_ok(path, key).await.unwrap();
    assert_eq!(page["hasMore"], false, "a test's rows fit one page");
    page["data"].as_array().unwrap().clone()
}

/// The summary as computed from the subscriptions and events at `as_of`.
async fn summary_from_rows(api: &ApiClient, key: &str, as_of: DateTime<Utc>) -> Value {
    let subs = all(api, key, "/api/v1/subscriptions?limit=100").await;
    let risks = all(
        api,
        key,
        "/api/v1/events?type=subscription.renewal_at_risk&limit=100",
    )
    .await;
    let mut counts = BTreeMap::from(
        [
            "trialing",
            "active",
            "pastDue",
            "cancelling",
            "cancelled",
            "ended",
        ]
        .map(|k| (k, 0i64)),
    );
    let (mut mrr, mut trial_mrr) = (0i128, 0i128);
    let mut due = [(0i64, 0i128); 2];
    let (mut at_risk, mut failing) = ((0i64, 0i128), (0i64, 0i128));
    let (mut started, mut stopped) = (0i64, 0i64);
    // Per state: entered less left on or after `month_ago`, from each subscription's events
    // (each carries the subscription's state after it), in chain order.
    let month_ago = (as_of - Duration::days(30)).date_naive();
    let mut moves: BTreeMap<&'static str, i64> = BTreeMap::new();
    // Each subscription's first UTC day, and its last if it stopped.
    let mut lives: Vec<(NaiveDate, Option<NaiveDate>)> = Vec::new();
    for s in &subs {
        let detail = api
            .get_ok(
                &format!("/api/v1/subscriptions/{}", s["id"].as_str().unwrap()),
                key,
            )
            .await
            .unwrap();
        let status = s["status"].as_str().unwrap();
        let cancelling = s["cancelAtPeriodEnd"] == true;
        let live = matches!(status, "trialing" | "active" | "past_due");
        let renews = live && !cancelling;
        let amount = units(s["amount"].as_str().unwrap());
        let bucket = match status {
            _ if live && cancelling => "cancelling",
            "past_due" => "pastDue",
            "trialing" => "trialing",
            "active" => "active",
            "cancelled" => "cancelled",
            _ => "ended",
        };
        *counts.get_mut(bucket).unwrap() += 1;
        if renews && status != "trialing" {
            mrr += amount;
        }
        if renews && status == "trialing" {
            trial_mrr += amount;
        }
        // The next charge: its time and the amount it will take.
        let next_amount = detail["pendingPlanChange"]["amount"]
            .as_str()
            .map_or(amount, units);
        if let Some(next) = s["nextPaymentAt"].as_str() {
            let next = time(&Value::from(next));
            // Due on or before the UTC day `days` after today's.
            for (i, days) in [7, 30].into_iter().enumerate() {
                if renews && next.date_naive() <= (as_of + Duration::days(days)).date_naive() {
                    due[i].0 += 1;
                    due[i].1 += next_amount;
                }
            }
            // A retry to come, ending at the period end or not.
            if status == "past_due" {
                failing.0 += 1;
                failing.1 += next_amount;
            }
        }
        let period = s["period"].as_i64().unwrap();
        let risked = risks.iter().any(|e| {
            e["data"]["subscriptionId"] == s["id"]
                && e["data"]["renewalAtRisk"]["period"].as_i64() == Some(period + 1)
        });
        if renews && status != "past_due" && risked {
            at_risk.0 += 1;
            at_risk.1 += next_amount;
        }
        let id = s["id"].as_str().unwrap();
        let mut events = all(
            api,
            key,
            &format!("/api/v1/events?subscriptionId={id}&limit=100"),
        )
        .await;
        events.retain(|e| !e["chain"].is_null());
        events.reverse();
        let mut before: Option<&'static str> = None;
        for e in &events {
            let snap = &e["data"]["subscription"];
            let state = match snap["status"].as_str().unwrap() {
                "trialing" | "active" | "past_due" if snap["cancelAtPeriodEnd"] == true => {
                    "cancelling"
                }
                "trialing" => "trialing",
                "active" => "active",
                "past_due" => "pastDue",
                "cancelled" => "cancelled",
                _ => "ended",
            };
            if Some(state) != before && time(&e["createdAt"]).date_naive() >= month_ago {
                *moves.entry(state).or_default() += 1;
                if let Some(b) = before {
                    *moves.entry(b).or_default() -= 1;
                }
            }
            before = Some(state);
        }
        // On or after the UTC day 30 days before today's.
        if time(&s["createdAt"]).date_naive() >= month_ago {
            started += 1;
        }
        if !live && time(&s["updatedAt"]).date_naive() >= month_ago {
            stopped += 1;
        }
        lives.push((
            time(&s["createdAt"]).date_naive(),
            (!live).then(|| time(&s["updatedAt"]).date_naive()),
        ));
    }
    let tally = |(count, amount): (i64, i128)| serde_json::json!({"count": count, "baseUnits": amount.to_string()});
    // The twelve weeks to today: live at each week's end, started and stopped in it.
    let today = as_of.date_naive();
    let weeks: Vec<Value> = (0..12u64)
        .rev()
        .map(|k| {
            let end = today - chrono::Days::new(7 * k);
            let start = end - chrono::Days::new(7);
            let within = |d: NaiveDate| d > start && d <= end;
            serde_json::json!({
                "weekEnding": end.format("%Y-%m-%d").to_string(),
                "live": lives.iter().filter(|(c, s)| *c <= end && s.is_none_or(|s| s > end)).count(),
                "started": lives.iter().filter(|(c, _)| within(*c)).count(),
                "stopped": lives.iter().filter(|(_, s)| s.is_some_and(within)).count(),
            })
        })
        .collect();
    let live_change: i64 = ["trialing", "active", "pastDue", "cancelling"]
        .iter()
        .map(|k| moves.get(k).copied().unwrap_or(0))
        .sum();
    serde_json::json!({
        "subscriptions": counts,
        "mrr": mrr.to_string(),
        "trialMrr": trial_mrr.to_string(),
        "renewalsNext7Days": tally(due[0]),
        "renewalsNext30Days": tally(due[1]),
        "atRisk": tally(at_risk),
        "failedAwaitingRetry": tally(failing),
        "startedLast30Days": started,
        "stoppedLast30Days": stopped,
        "changeLast30Days": {
            "trialing": moves.get("trialing").copied().unwrap_or(0),
            "active": moves.get("active").copied().unwrap_or(0),
            "pastDue": moves.get("pastDue").copied().unwrap_or(0),
            "cancelling": moves.get("cancelling").copied().unwrap_or(0),
            "cancelled": moves.get("cancelled").copied().unwrap_or(0),
            "ended": moves.get("ended").copied().unwrap_or(0),
            "live": live_change,
        },
        "liveByWeek": weeks,
    })
}

/// The same fields of the API's summary.
fn summary_figures(r: &Value) -> Value {
    let tally =
        |v: &Value| serde_json::json!({"count": v["count"], "baseUnits": money(v).to_string()});
    serde_json::json!({
        "subscriptions": r["subscriptions"],
        "mrr": money(&r["mrr"]).to_string(),
        "trialMrr": money(&r["trialMrr"]).to_string(),
        "renewalsNext7Days": tally(&r["renewalsNext7Days"]),
        "renewalsNext30Days": tally(&r["renewalsNext30Days"]),
        "atRisk": tally(&r["atRisk"]),
        "failedAwaitingRetry": tally(&r["failedAwaitingRetry"]),
        "startedLast30Days": r["startedLast30Days"],
        "stoppedLast30Days": r["stoppedLast30Days"],
        "changeLast30Days": r["changeLast30Days"],
        "liveByWeek": r["liveByWeek"],
    })
}

/// Asserts `GET /api/v1/reports/summary` equals the sums of the listed rows (read again
/// until the index holds still across the reads), and `GET /api/v1/reports/revenue` over
/// every month of the ledger equals the ledger entries summed per month. Returns the summary.
pub(crate) async fn assert_reports_agree(api: &ApiClient, key: &str) -> Value {
    let mut last = None;
    for _ in 0..5 {
        let before = api.get_ok("/api/v1/reports/summary", key).await.unwrap();
        let computed = summary_from_rows(api, key, time(&before["asOf"])).await;
        let after = api.get_ok("/api/v1/reports/summary", key).await.unwrap();
        if summary_figures(&before) == summary_figures(&after) {
            assert_eq!(summary_figures(&before), computed, "summary: {before}");
            assert_revenue_agrees(api, key).await;
            return before;
        }
        last = Some((before, after));
    }
    panic!("the index kept moving: {last:?}");
}

async fn assert_revenue_agrees(api: &ApiClient, key: &str) {
    let subs = all(api, key, "/api/v1/subscriptions?limit=100").await;
    // (charges, prorations, refunds, entries) per month, from the ledgers.
    let mut months: BTreeMap<String, (i128, i128, i128, i64)> = BTreeMap::new();
    for s in &subs {
        let detail = api
            .get_ok(
                &format!("/api/v1/subscriptions/{}", s["id"].as_str().unwrap()),
                key,
            )
            .await
            .unwrap();
        for e in detail["ledger"].as_array().unwrap() {
            let t = time(&e["createdAt"]);
            let m = months
                .entry(format!("{:04}-{:02}", t.year(), t.month()))
                .or_default();
            let amount = units(e["amount"].as_str().unwrap());
            match e["type"].as_str().unwrap() {
                "charge" => m.0 += amount,
                "proration" => m.1 += amount,
                "refund" => m.2 -= amount,
                _ => continue,
            }
            m.3 += 1;
        }
    }
    let (Some(first), Some(last)) = (months.keys().next(), months.keys().last()) else {
        return;
    };
    let report = api
        .get_ok(
            &format!("/api/v1/reports/revenue?from={first}&to={last}&interval=month"),
            key,
        )
        .await
        .unwrap();
    let mut total = (0i128, 0i128, 0i128, 0i64);
    for m in report["data"].as_array().unwrap() {
        let want = months
            .get(m["month"].as_str().unwrap())
            .copied()
            .unwrap_or_default();
        let got = (
            money(&m["charges"]),
            money(&m["prorations"]),
            money(&m["refunds"]),
            m["entries"].as_i64().unwrap(),
        );
        assert_eq!(got, want, "{m}");
        assert_eq!(money(&m["net"]), want.0 + want.1 - want.2, "{m}");
        total = (
            total.0 + got.0,
            total.1 + got.1,
            total.2 + got.2,
            total.3 + got.3,
        );
    }
    let t = &report["total"];
    assert_eq!(
        (
            money(&t["charges"]),
            money(&t["prorations"]),
            money(&t["refunds"]),
            t["entries"].as_i64().unwrap()
        ),
        total,
        "{report}"
    );
}
