//! The checkout page's HTML. The page's states (connect, wrong chain, insufficient balance,
//! ready, pending, rejected, confirmed, already subscribed) are driven by
//! `assets/checkout.js`; the server renders the facts and the settings it needs.

use serde_json::json;
use warp::http::StatusCode;

use super::checkout::{Link, chain_id_hex, requested_allowance};
use super::html::{esc, json_script, page};
use crate::config::Config;
use crate::domain::format_units;
use crate::http::reply::Resp;

/// `0x1234…abcd`: enough to recognise, short enough to read.
fn short(addr: &str) -> String {
    if addr.len() > 12 {
        format!("{}…{}", &addr[..6], &addr[addr.len() - 4..])
    } else {
        addr.to_string()
    }
}

/// What the customer pays and when, in one sentence (HTML): a trial is stated plainly, with
/// the date it ends if the customer starts it `now`.
fn billing_text(
    link: &Link,
    amount: &str,
    per: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let amount = esc(amount);
    match link.trial_days {
        0 => format!(
            "{amount} USDC now, then every calendar {per} on the same day until you cancel."
        ),
        days => {
            let until = (now + chrono::Duration::days(i64::from(days))).format("%B %-d, %Y");
            format!(
                "Free for {days} days: nothing is charged now. Starting today, the trial ends on \
                 {until}; then {amount} USDC every calendar {per} on that day until you cancel. \
                 Cancel before the trial ends and you pay nothing. One free trial per wallet: a \
                 wallet that already had this plan's trial pays {amount} USDC at once."
            )
        }
    }
}

fn interval_text(interval: &str) -> &'static str {
    match interval {
        "month" => "month",
        _ => "period",
    }
}

/// The page for a verified link. `tx_url` is the JSON endpoint with the link's query.
pub fn render(cfg: &Config, link: &Link, tx_url: &str) -> Resp {
    let periods = cfg.pages.checkout_allowance_periods;
    let amount = format_units(link.amount);
    let allowance = u128::try_from(requested_allowance(link.amount, periods))
        .map_or_else(|_| "?".to_string(), format_units);
    let merchant_wallet = link.merchant.wallet.to_checksum(None);
    let contract = cfg.contract_address.to_checksum(None);
    let per = interval_text(&link.interval);
    let settings = json!({
        "chainId": cfg.chain_id,
        "chainIdHex": chain_id_hex(cfg.chain_id),
        "chainName": crate::pages::network::name(cfg),
        "txUrl": tx_url,
        "explorerTxUrl": cfg.pages.explorer_tx_url,
        "available": link.plan_onchain_id.is_some() && !link.deactivated,
        "inactive": link.deactivated,
        // The self-service page, narrowed to this merchant: where the customer cancels.
        "accountUrl": format!("/account?merchant={}", link.merchant.code),
    });
    let unavailable = if link.deactivated {
        "<p class=\"notice\" role=\"alert\">This plan no longer accepts new subscriptions.</p>"
    } else if link.plan_onchain_id.is_none() {
        "<p class=\"notice\" role=\"alert\">This plan is not available on chain yet. \
         Please try again in a few minutes.</p>"
    } else {
        ""
    };
    let body = format!(
        r#"<section class="card checkout" id="checkout" data-state="idle" aria-labelledby="title">
<p class="eyebrow">Subscription checkout</p>
<h1 id="title">{name}</h1>
<p class="price"><span id="amount">{amount}</span> USDC <span class="per">/ {per}</span></p>
<dl class="facts">
  <dt>Merchant</dt><dd>{merchant_name}<code title="{mw}">{mw_short}</code> <span class="muted">({code})</span></dd>
  <dt>Billing</dt><dd id="billing">{billing}</dd>
  <dt>Allowance requested</dt><dd><span id="allowance">{allowance}</span> USDC ({periods} payments), added to any allowance you already gave the subscription contract <code title="{contract}">{contract_short}</code>. The contract can only take the plan amount once per {per}; you can lower or revoke the allowance at any time.</dd>
  <dt>Network</dt><dd>{network} <span class="muted">(chain {chain_id})</span></dd>
</dl>
{unavailable}
<noscript><p class="notice">This page needs JavaScript and a browser wallet (such as MetaMask).</p></noscript>
<div class="actions">
  <button type="button" id="connect" class="primary">Connect wallet</button>
  <button type="button" id="switch" class="primary" hidden>Switch network</button>
  <button type="button" id="subscribe" class="primary" hidden>Subscribe</button>
  <button type="button" id="refresh" hidden>Check again</button>
</div>
<p id="account" class="muted" hidden></p>
<ol id="steps" class="steps" aria-label="Transactions"></ol>
<div id="status" class="status" role="status" aria-live="polite"></div>
<div id="result" class="result" hidden>
  <p>Transaction <code id="tx-hash"></code></p>
  <p><a id="explorer-link" href="" target="_blank" rel="noopener noreferrer" hidden>View on the block explorer</a></p>
  <p><a id="account-link" href="">Manage or cancel your subscription</a></p>
</div>
</section>
{settings}"#,
        name = esc(&link.plan_name),
        billing = billing_text(link, &amount, per, chrono::Utc::now()),
        amount = esc(&amount),
        per = per,
        mw = esc(&merchant_wallet),
        mw_short = esc(&short(&merchant_wallet)),
        code = esc(&link.merchant.code),
        merchant_name =
            link.merchant
                .display_name
                .as_deref()
                .map_or_else(String::new, |n| format!(
                    "<strong id=\"merchant-name\">{}</strong> ",
                    esc(n)
                )),
        allowance = esc(&allowance),
        periods = periods,
        contract = esc(&contract),
        contract_short = esc(&short(&contract)),
        chain_id = cfg.chain_id,
        unavailable = unavailable,
        network = esc(&crate::pages::network::name(cfg)),
        settings = json_script("checkout-settings", &settings),
    );
    page(
        StatusCode::OK,
        &format!("Subscribe to {}", link.plan_name),
        &body,
        &["wallet.js", "checkout.js"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_addresses_keep_both_ends() {
        assert_eq!(
            short("0x1234567890abcdef1234567890abcdef12345678"),
            "0x1234…5678"
        );
        assert_eq!(short("0x12"), "0x12");
    }

    #[test]
    fn a_trial_is_stated_with_its_end_and_what_follows() {
        use chainsub_store::checkouts::LinkMerchant;
        let mut link = Link {
            merchant: LinkMerchant {
                public_id: chainsub_core::MerchantId::parse("mer_1").unwrap(),
                wallet: alloy::primitives::Address::repeat_byte(0x22),
                code: "abcdefgh".into(),
                display_name: None,
            },
            plan_public_id: "plan_1".into(),
            plan_name: "Pro".into(),
            amount: 9_990_000,
            interval: "month".into(),
            slug: "pro".into(),
            plan_ref: alloy::primitives::B256::ZERO,
            plan_onchain_id: Some(7),
            deactivated: false,
            trial_days: 0,
            customer: None,
        };
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T20:00:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            billing_text(&link, "9.99", "month", now),
            "9.99 USDC now, then every calendar month on the same day until you cancel."
        );
        link.trial_days = 14;
        let text = billing_text(&link, "9.99", "month", now);
        assert!(
            text.starts_with("Free for 14 days: nothing is charged now.")
                && text.contains(
                    "the trial ends on December 13, 2026; then 9.99 USDC every calendar month"
                ),
            "{text}"
        );
    }
}
