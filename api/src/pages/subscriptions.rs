//! `/dashboard/subscriptions` and `/dashboard/subscriptions/{id}`: the merchant's
//! subscriptions as the API lists them (its filters, a search by customer id, pages by
//! cursor), and one subscription with its ledger — each entry linked to the block explorer
//! (`EXPLORER_TX_URL`) with its confirmations against `CONFIRMATIONS` — its events with their
//! webhook deliveries, and a refund the merchant's own wallet sends (`assets/subscription.js`
//! asks `POST /dashboard/api/subscriptions/{id}/refunds` for the calls, then the wallet).
//! Server-rendered; the wallet step is the only script.

use std::fmt::Write as _;

use chainsub_core::time::rfc3339_of;
use chainsub_core::{SubscriptionStatus, format_units};
use chainsub_store::subscriptions::{LedgerRow, SubscriptionRow};
use chrono::{DateTime, Utc};
use warp::http::StatusCode;

use super::html::{esc, json_script, page};
use super::overview::nav;
use crate::auth::session::{CSRF_HEADER, Session};
use crate::config::Config;
use crate::http::reply::Resp;

/// `2026-11-29 14:03 UTC`, the exact RFC 3339 time on hover.
fn when(t: &DateTime<Utc>) -> String {
    format!(
        "<time datetime=\"{exact}\" title=\"{exact}\">{short}</time>",
        exact = rfc3339_of(t),
        short = t.format("%Y-%m-%d %H:%M UTC"),
    )
}

fn usdc(units: Option<u128>) -> String {
    units.map_or_else(|| "?".into(), |u| format!("{} USDC", format_units(u)))
}

/// The state as a merchant reads it: `active, ending 2026-12-29`.
fn state(s: &SubscriptionRow) -> String {
    let base = s.status.as_str().replace('_', " ");
    if s.cancel_at_period_end && !s.status.is_terminal() {
        format!("{base}, ending {}", s.current_period_end.format("%Y-%m-%d"))
    } else {
        base
    }
}

/// What the list shows above its table: the filters as they were asked.
pub struct ListQuery<'a> {
    pub status: Option<SubscriptionStatus>,
    pub customer: Option<&'a str>,
}

/// The list page: the filter form, a table of `rows`, and a link to the next page (`next`:
/// the last row's id, when there are more).
pub fn list(
    session: &Session,
    q: &ListQuery<'_>,
    rows: &[SubscriptionRow],
    next: Option<&str>,
) -> Resp {
    let mut options = String::from("<option value=\"\">Any state</option>");
    for &status in SubscriptionStatus::ALL {
        let selected = if q.status == Some(status) {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            options,
            "<option value=\"{v}\"{selected}>{label}</option>",
            v = status.as_str(),
            label = status.as_str().replace('_', " "),
        );
    }
    let mut body_rows = String::new();
    for s in rows {
        let _ = write!(
            body_rows,
            "<tr data-id=\"{id}\"><td><a href=\"/dashboard/subscriptions/{id}\">{id}</a></td>\
             <td>{customer}</td><td><code class=\"wallet\">{wallet}</code></td><td>{amount}</td>\
             <td data-status=\"{status}\">{state}</td><td>{next}</td></tr>",
            id = esc(s.id.as_str()),
            customer = esc(s.customer_external_id.as_deref().unwrap_or("—")),
            wallet = s.subscriber.to_checksum(None),
            amount = esc(&usdc(s.amount)),
            status = s.status.as_str(),
            state = esc(&state(s)),
            next = s.next_payment_at().map_or_else(|| "—".into(), |t| when(&t)),
        );
    }
    if rows.is_empty() {
        body_rows
            .push_str("<tr><td colspan=\"6\" class=\"muted\">No subscriptions match.</td></tr>");
    }
    let more = next.map_or_else(String::new, |after| {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        if let Some(st) = q.status {
            query.append_pair("status", st.as_str());
        }
        if let Some(c) = q.customer {
            query.append_pair("customer", c);
        }
        query.append_pair("startingAfter", after);
        format!(
            "<p><a id=\"next-page\" href=\"/dashboard/subscriptions?{}\">Next page</a></p>",
            esc(&query.finish())
        )
    });
    let body = format!(
        r#"{nav}
<section class="card" aria-labelledby="title">
<h1 id="title">Subscriptions</h1>
<form class="filters" method="get" action="/dashboard/subscriptions">
  <label for="status">State</label>
  <select id="status" name="status">{options}</select>
  <label for="customer">Customer id or wallet</label>
  <input id="customer" name="customer" type="text" value="{customer}" autocomplete="off">
  <button type="submit">Show</button>
</form>
<div class="table-scroll" tabindex="0" role="region" aria-label="Subscriptions (scrolls sideways)"><table id="subscriptions">
<caption class="sr-only">Subscriptions, newest first</caption>
<thead><tr><th scope="col">Subscription</th><th scope="col">Customer</th><th scope="col">Wallet</th><th scope="col">Amount</th><th scope="col">State</th><th scope="col">Next payment</th></tr></thead>
<tbody>{body_rows}</tbody></table></div>
{more}
</section>"#,
        nav = nav("/dashboard/subscriptions"),
        customer = esc(q.customer.unwrap_or("")),
    );
    let _ = session;
    page(StatusCode::OK, "Subscriptions", &body, &[])
}

/// One event of the subscription, with its delivery.
pub struct EventLine {
    pub id: String,
    pub kind: String,
    pub at: DateTime<Utc>,
    pub delivery: String,
}

/// The detail page.
pub fn detail(
    cfg: &Config,
    session: &Session,
    s: &SubscriptionRow,
    ledger: &[LedgerRow],
    events: &[EventLine],
    plan_choices: &[(String, String)],
) -> Resp {
    let confirmations = cfg.confirmations;
    let tx_link = |hash: &str| match &cfg.pages.explorer_tx_url {
        Some(t) => format!(
            "<a href=\"{}\" rel=\"noopener noreferrer\"><code>{hash}</code></a>",
            esc(&t.replace("{hash}", hash))
        ),
        None => format!("<code>{hash}</code>"),
    };
    let mut ledger_rows = String::new();
    for e in ledger {
        let confirmed =
            chainsub_store::chain::confirmations(e.chain.block_number, e.chain.indexed_block);
        let amount = match e.kind {
            chainsub_core::LedgerKind::Refund => format!("−{}", usdc(e.amount)),
            _ => usdc(e.amount),
        };
        let _ = write!(
            ledger_rows,
            "<tr data-kind=\"{kind}\"><td>{kind_label}</td><td>{period}</td><td>{amount}</td>\
             <td>{at}</td><td>{block}</td><td>{tx}</td><td>{conf}</td></tr>",
            kind = e.kind.as_str(),
            kind_label = e.kind.as_str().replace('_', " "),
            period = e.period,
            amount = esc(&amount),
            at = when(&e.block_time),
            block = e.chain.block_number,
            tx = tx_link(&e.chain.transaction_hash.to_string()),
            conf = if confirmed >= i64::try_from(confirmations).unwrap_or(i64::MAX) {
                format!("{confirmed} (final)")
            } else {
                format!("{confirmed} of {confirmations}")
            },
        );
    }
    if ledger.is_empty() {
        ledger_rows
            .push_str("<tr><td colspan=\"7\" class=\"muted\">Nothing charged yet.</td></tr>");
    }
    let mut event_rows = String::new();
    for e in events {
        let _ = write!(
            event_rows,
            "<tr><td><code>{id}</code></td><td>{kind}</td><td>{at}</td><td>{delivery}</td></tr>",
            id = esc(&e.id),
            kind = esc(&e.kind),
            at = when(&e.at),
            delivery = esc(&e.delivery),
        );
    }
    let refundable = ledger
        .iter()
        .rev()
        .find(|e| e.kind == chainsub_core::LedgerKind::Charge)
        .map(|e| e.period);
    let refund = match refundable {
        Some(period) => format!(
            r#"<section class="card" aria-labelledby="refund-title" id="refund" data-state="idle">
<h2 id="refund-title">Refund</h2>
<p>Refund all or part of period {period}, the latest charged, from your merchant wallet
<code>{wallet}</code>: your wallet sends the transactions (an approval first when needed);
the service never holds your funds or keys.</p>
<label for="refund-amount">Amount (USDC)</label>
<input id="refund-amount" type="text" inputmode="decimal" autocomplete="off" placeholder="1.50">
<label class="check"><input id="refund-cancel" type="checkbox"> Also cancel the subscription now</label>
<div class="actions"><button type="button" id="refund-send" class="primary">Refund with my wallet</button></div>
<div id="refund-status" class="status" role="status" aria-live="polite"></div>
</section>"#,
            wallet = session.merchant.wallet().to_checksum(None),
        ),
        None => String::new(),
    };
    let live = !s.status.is_terminal();
    let cancel_buttons = if live {
        let at_end = if s.cancel_at_period_end {
            ""
        } else {
            "<button type=\"button\" id=\"cancel-at-period-end\">Cancel at period end</button>"
        };
        format!(
            "<h3>Cancel</h3><p>The service sends the cancellation on chain for you (for plans it created).</p>\
             <div class=\"actions\">{at_end}<button type=\"button\" id=\"cancel-now\" class=\"danger\">Cancel now</button></div>"
        )
    } else {
        String::new()
    };
    let changeable = s.status == SubscriptionStatus::Active && !s.cancel_at_period_end;
    let plan_change = if changeable && !plan_choices.is_empty() {
        let options: String = plan_choices
            .iter()
            .map(|(id, label)| format!("<option value=\"{}\">{}</option>", esc(id), esc(label)))
            .collect();
        format!(
            "<h3>Change plan</h3><p>Only the subscriber can change plan: make a link, send it to them; they confirm it with their wallet.</p>\
             <label for=\"plan-change-plan\">New plan</label><select id=\"plan-change-plan\">{options}</select>\
             <div class=\"actions\"><button type=\"button\" id=\"plan-change-make\">Make a plan-change link</button></div>\
             <div id=\"plan-change-result\" hidden><label for=\"plan-change-url\">Link for the customer</label>\
             <input id=\"plan-change-url\" type=\"text\" readonly spellcheck=\"false\"><button type=\"button\" id=\"plan-change-copy\">Copy</button></div>"
        )
    } else {
        String::new()
    };
    let actions = if cancel_buttons.is_empty() && plan_change.is_empty() {
        String::new()
    } else {
        format!(
            "<section class=\"card\" aria-labelledby=\"actions-title\" id=\"actions\" data-state=\"idle\">\
             <h2 id=\"actions-title\">Actions</h2>{cancel_buttons}{plan_change}\
             <div id=\"actions-status\" class=\"status\" role=\"status\" aria-live=\"polite\"></div></section>"
        )
    };
    let pending = s
        .pending_plan_change
        .as_ref()
        .map_or_else(String::new, |p| {
            format!(
                "<dt>Plan change</dt><dd>to plan #{} at {} from {}</dd>",
                p.plan_onchain_id,
                esc(&usdc(p.amount)),
                when(&s.current_period_end)
            )
        });
    let trial = s.trial_end.map_or_else(String::new, |t| {
        format!("<dt>Trial end</dt><dd>{}</dd>", when(&t))
    });
    let settings = serde_json::json!({
        "subscriptionId": s.id.as_str(),
        "chainId": cfg.chain_id,
        "chainIdHex": crate::pages::checkout::chain_id_hex(cfg.chain_id),
        "chainName": crate::pages::network::name(cfg),
        "csrfHeader": CSRF_HEADER,
        "csrfToken": session.csrf_token,
        "explorerTxUrl": cfg.pages.explorer_tx_url,
    });
    let body = format!(
        r#"{nav}
<section class="card" aria-labelledby="title" id="subscription" data-id="{id}">
<p class="eyebrow"><a href="/dashboard/subscriptions">Subscriptions</a></p>
<h1 id="title">{id}</h1>
<dl class="facts">
  <dt>State</dt><dd id="state" data-status="{status}">{state}</dd>
  <dt>Customer</dt><dd>{customer}</dd>
  <dt>Wallet</dt><dd><code class="wallet">{wallet}</code></dd>
  <dt>Amount</dt><dd>{amount} a month</dd>
  <dt>Period</dt><dd>{period}: {start} to {end}</dd>
  <dt>Next payment</dt><dd>{next}</dd>
  {trial}{pending}
  <dt>On chain</dt><dd>subscription #{onchain}, plan #{plan}, created in block {block}</dd>
</dl>
</section>
<section class="card" aria-labelledby="ledger-title">
<h2 id="ledger-title">Ledger</h2>
<p class="muted">Final after {confirmations} confirmations; before, a reorg may still undo an entry.</p>
<div class="table-scroll" tabindex="0" role="region" aria-label="Ledger (scrolls sideways)"><table id="ledger">
<caption class="sr-only">Ledger entries, oldest first</caption>
<thead><tr><th scope="col">Entry</th><th scope="col">Period</th><th scope="col">Amount</th><th scope="col">Time</th><th scope="col">Block</th><th scope="col">Transaction</th><th scope="col">Confirmations</th></tr></thead>
<tbody>{ledger_rows}</tbody></table></div>
</section>
{actions}
{refund}
<section class="card" aria-labelledby="events-title">
<h2 id="events-title">Events and webhooks</h2>
<div class="table-scroll" tabindex="0" role="region" aria-label="Events (scrolls sideways)"><table id="events">
<caption class="sr-only">Events, newest first</caption>
<thead><tr><th scope="col">Event</th><th scope="col">Type</th><th scope="col">Time</th><th scope="col">Webhook</th></tr></thead>
<tbody>{event_rows}</tbody></table></div>
</section>
{settings}"#,
        nav = nav("/dashboard/subscriptions"),
        id = esc(s.id.as_str()),
        status = s.status.as_str(),
        state = esc(&state(s)),
        customer = esc(s.customer_external_id.as_deref().unwrap_or("—")),
        wallet = s.subscriber.to_checksum(None),
        amount = esc(&usdc(s.amount)),
        period = s.period,
        start = when(&s.current_period_start),
        end = when(&s.current_period_end),
        next = s
            .next_payment_at()
            .map_or_else(|| "none".into(), |t| when(&t)),
        onchain = s.onchain_id,
        plan = s.plan_onchain_id,
        block = s.chain.block_number,
        settings = json_script("subscription-settings", &settings),
    );
    page(
        StatusCode::OK,
        "Subscription",
        &body,
        &["wallet.js", "subscription.js"],
    )
}
