//! The customer self-service page's HTML (`/account`). Its states (no wallet, connect, wrong
//! chain, sign-in, loading, list, empty, confirm, pending, rejected, confirmed, stalled,
//! failed, error) are
//! driven by `assets/account.js`; the server renders the frame and the settings it needs.

use serde_json::json;
use warp::http::StatusCode;

use super::checkout::chain_id_hex;
use super::html::{esc, json_script, page};
use crate::config::Config;
use crate::http::reply::Resp;

/// The page; `merchant` (a merchant's code) narrows the list to that merchant's
/// subscriptions, for a link a merchant puts on its own site.
pub fn render(cfg: &Config, merchant: Option<&str>) -> Resp {
    let settings = json!({
        "chainId": cfg.chain_id,
        "chainIdHex": chain_id_hex(cfg.chain_id),
        "chainName": crate::pages::network::name(cfg),
        "challengeUrl": "/account/challenge",
        "listUrl": "/account/subscriptions",
        "cancelUrl": "/account/cancel-tx",
        "planChangeUrl": "/account/plan-change-tx",
        "merchant": merchant,
        "explorerTxUrl": cfg.pages.explorer_tx_url,
    });
    let scope = match merchant {
        Some(code) => format!(
            "<p class=\"muted\" id=\"scope\">Showing your subscriptions with merchant <code>{}</code>.</p>",
            esc(code)
        ),
        None => String::new(),
    };
    let body = format!(
        r#"<section class="card account" id="account" data-state="idle" aria-labelledby="title">
<p class="eyebrow">Your subscriptions</p>
<h1 id="title">Manage your subscriptions</h1>
{scope}
<p>Connect the wallet you subscribed with and sign a message (no transaction, no fee) to see its subscriptions and their payments, to change plan and to cancel. Each change is a transaction your wallet sends to the subscription contract; no one else can make it for you from this page.</p>
<noscript><p class="notice">This page needs JavaScript and a browser wallet (such as MetaMask).</p></noscript>
<div class="actions">
  <button type="button" id="connect" class="primary">Connect wallet</button>
  <button type="button" id="switch" class="primary" hidden>Switch network</button>
  <button type="button" id="refresh" hidden>Refresh</button>
</div>
<p id="wallet" class="muted" hidden></p>
<div id="status" class="status" role="status" aria-live="polite"></div>
<ul id="subscriptions" class="subscriptions" aria-label="Subscriptions"></ul>
</section>
{settings}"#,
        scope = scope,
        settings = json_script("account-settings", &settings),
    );
    page(
        StatusCode::OK,
        "Your subscriptions",
        &body,
        &["wallet.js", "account.js"],
    )
}
