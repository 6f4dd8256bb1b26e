//! `/dashboard/plans`: the merchant's plans, a form that creates one and follows its
//! provisioning on chain live, a checkout link to copy for any active plan, and the
//! deactivation the merchant's own wallet sends. Server-rendered; `assets/plans.js` asks the
//! dashboard's JSON routes (`/dashboard/api/plans…`, `/dashboard/api/checkouts`, with the
//! session's CSRF token) and the wallet.

use std::fmt::Write as _;

use chainsub_core::format_units;
use chainsub_store::plans::PlanRow;
use warp::http::StatusCode;

use super::html::{esc, json_script, page};
use super::overview::nav;
use crate::auth::session::{CSRF_HEADER, Session};
use crate::config::Config;
use crate::http::reply::Resp;

/// A plan's state as the API names it (`PlanRow::status`), and as a merchant reads it.
fn state(p: &PlanRow) -> (&'static str, &'static str) {
    let status = p.status();
    let label = match status {
        "deactivated" => "deactivated (no new subscriptions)",
        "active" => "active",
        "failed" => "provisioning failed",
        _ => "provisioning on chain…",
    };
    (status, label)
}

/// One row of the plans table (the script adds rows of the same shape).
fn row(p: &PlanRow) -> String {
    let (status, label) = state(p);
    let trial = if p.trial_days == 0 {
        "—".to_string()
    } else {
        format!("{} days", p.trial_days)
    };
    let deactivate = if status == "active" {
        format!(
            "<button type=\"button\" class=\"deactivate danger\" data-plan-id=\"{id}\" \
             aria-label=\"Deactivate {name}\">Deactivate</button>",
            id = esc(p.id.as_str()),
            name = esc(&p.name),
        )
    } else {
        String::new()
    };
    format!(
        "<tr data-plan-id=\"{id}\"><td>{name}<br><code class=\"muted\">{id}</code></td>\
         <td>{amount} USDC / month</td><td>{trial}</td><td><code>{slug}</code></td>\
         <td class=\"plan-state\" data-status=\"{status}\">{label}</td><td>{deactivate}</td></tr>",
        id = esc(p.id.as_str()),
        name = esc(&p.name),
        amount = format_units(p.amount),
        slug = esc(&p.slug),
    )
}

/// The page: `plans` newest first.
pub fn list(cfg: &Config, session: &Session, plans: &[PlanRow]) -> Resp {
    let mut rows = String::new();
    for p in plans {
        rows.push_str(&row(p));
    }
    let mut options = String::new();
    for p in plans.iter().filter(|p| state(p).0 == "active") {
        let _ = write!(
            options,
            "<option value=\"{id}\">{name} — {amount} USDC / month</option>",
            id = esc(p.id.as_str()),
            name = esc(&p.name),
            amount = format_units(p.amount),
        );
    }
    let empty = if plans.is_empty() {
        "<p id=\"no-plans\" class=\"muted\">No plans yet: create one above.</p>"
    } else {
        ""
    };
    let settings = serde_json::json!({
        "csrfHeader": CSRF_HEADER,
        "csrfToken": session.csrf_token,
        "chainId": cfg.chain_id,
        "chainName": crate::pages::network::name(cfg),
    });
    let body = format!(
        r#"{nav}
<section class="card" aria-labelledby="create-title" id="create" data-state="idle">
<h1 id="create-title">Plans</h1>
<p>A plan is created on chain by the service (it pays the gas); customers subscribe to it
through its checkout link.</p>
<form id="create-form" novalidate>
  <label for="plan-name">Name</label>
  <input id="plan-name" name="name" type="text" maxlength="100" required autocomplete="off" placeholder="Pro monthly">
  <label for="plan-amount">Price per month (USDC)</label>
  <input id="plan-amount" name="amount" type="text" inputmode="decimal" required autocomplete="off" placeholder="9.99">
  <label for="plan-trial">Free trial (days, 0 for none)</label>
  <input id="plan-trial" name="trialDays" type="number" min="0" max="90" step="1" value="0">
  <div class="actions"><button type="submit" id="create-send" class="primary">Create on chain</button></div>
</form>
<div id="create-status" class="status" role="status" aria-live="polite"></div>
</section>
<section class="card" aria-labelledby="plans-title">
<h2 id="plans-title">Your plans</h2>
{empty}
<div class="table-scroll" tabindex="0" role="region" aria-label="Plans (scrolls sideways)"><table id="plans">
<caption class="sr-only">Plans, newest first</caption>
<thead><tr><th scope="col">Plan</th><th scope="col">Price</th><th scope="col">Trial</th><th scope="col">Slug</th><th scope="col">State</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
<tbody>{rows}</tbody></table></div>
<div id="plans-status" class="status" role="status" aria-live="polite"></div>
</section>
<section class="card" aria-labelledby="link-title" id="link" data-state="idle">
<h2 id="link-title">Checkout link</h2>
<p>A link to one plan's checkout, optionally for one of your customers (their id comes back
on the subscription and its events).</p>
<label for="link-plan">Plan</label>
<select id="link-plan">{options}</select>
<label for="link-customer">Customer id (optional)</label>
<input id="link-customer" type="text" maxlength="128" autocomplete="off" placeholder="cus_42">
<div class="actions"><button type="button" id="link-make">Make link</button></div>
<div id="link-result" hidden>
  <label for="link-url">Link</label>
  <input id="link-url" type="text" readonly>
  <div class="actions"><button type="button" id="link-copy">Copy</button> <a id="link-open" href="" rel="noopener">Open</a></div>
</div>
<div id="link-status" class="status" role="status" aria-live="polite"></div>
</section>
{settings}"#,
        nav = nav("/dashboard/plans"),
        settings = json_script("plans-settings", &settings),
    );
    page(StatusCode::OK, "Plans", &body, &["wallet.js", "plans.js"])
}
