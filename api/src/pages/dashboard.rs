//! `/dashboard/developers`: Sign-In with Ethereum, the API key (generate, rotate, revoke; the
//! plaintext is shown once, by `assets/dashboard.js`, from the POST response and never
//! rendered by the server), the webhook endpoint and its signing secret, and recent
//! deliveries with retry. Actions call the JSON endpoints of `routes/{auth,keys,webhooks}.rs`
//! with the session's CSRF token.

use serde_json::{Value, json};
use warp::http::StatusCode;

use super::html::{esc, json_script, page};
use crate::auth::session::{CSRF_HEADER, Session};
use crate::config::Config;
use crate::http::reply::Resp;

/// A dashboard page for a visitor without a session: explains and offers sign-in. `title`
/// is the page's, `purpose` what signing in gives.
pub fn signed_out(cfg: &Config, title: &str, purpose: &str) -> Resp {
    let settings = json!({ "signedIn": false, "chainId": cfg.chain_id });
    let body = format!(
        r#"<section class="card" aria-labelledby="title" id="signin-card">
<h1 id="title">{title}</h1>
<p>Sign in with your merchant wallet to {purpose}. Your wallet will ask
you to sign a message (Sign-In with Ethereum); this costs nothing and sends no transaction.</p>
<noscript><p class="notice">Signing in needs JavaScript and a browser wallet.</p></noscript>
<div class="actions"><button type="button" id="signin" class="primary">Sign in with Ethereum</button></div>
<div id="status" class="status" role="status" aria-live="polite"></div>
</section>
{settings}"#,
        title = esc(title),
        purpose = esc(purpose),
        settings = json_script("dashboard-settings", &settings)
    );
    page(StatusCode::OK, title, &body, &["wallet.js", "dashboard.js"])
}

/// `sk_live_…abcd · created … · last used …`, or that there is no key.
pub fn key_summary(status: &Value) -> String {
    match status.get("key").filter(|k| !k.is_null()) {
        None => "No API key. Generate one to call the API from your backend.".into(),
        Some(k) => {
            let s = |f: &str| k.get(f).and_then(Value::as_str).unwrap_or("");
            let used = match s("lastUsedAt") {
                "" => "never used".to_string(),
                t => format!("last used {t}"),
            };
            format!(
                "{}…{} · created {} · {used}",
                s("prefix"),
                s("last4"),
                s("createdAt")
            )
        }
    }
}

/// The signed-in page. `key_status` is `api_key::status`, `webhook` is
/// `webhook_settings::endpoint`.
pub fn signed_in(
    cfg: &Config,
    session: &Session,
    display_name: Option<&str>,
    key_status: &Value,
    webhook: &Value,
) -> Resp {
    let has_key = key_status["active"].as_bool().unwrap_or(false);
    let settings = json!({
        "signedIn": true,
        "chainId": cfg.chain_id,
        "csrfHeader": CSRF_HEADER,
        "csrfToken": session.csrf_token,
        "hasKey": has_key,
    });
    let wallet = session.merchant.wallet().to_checksum(None);
    let url = webhook["url"].as_str().unwrap_or("");
    let enabled = webhook["enabled"].as_bool().unwrap_or(true);
    let disabled_note = if enabled {
        String::new()
    } else {
        format!(
            "<p class=\"notice\" id=\"webhook-disabled\">Deliveries are paused: {}. \
             <button type=\"button\" id=\"webhook-enable\">Resume deliveries</button></p>",
            esc(webhook["disabledReason"].as_str().unwrap_or("disabled"))
        )
    };
    let body = format!(
        r#"{nav}
<section class="card" aria-labelledby="title">
<h1 id="title">Developers</h1>
<p>Signed in as <code id="merchant-wallet">{wallet}</code> <span class="muted">(merchant {code})</span>
<button type="button" id="signout" class="link">Sign out</button></p>
<div id="status" class="status" role="status" aria-live="polite"></div>
</section>

<section class="card" aria-labelledby="name-title" id="profile">
<h2 id="name-title">Name shown to customers</h2>
<p>The checkout and account pages show it beside your wallet, instead of your code <code>{code}</code>.</p>
<form id="name-form" novalidate>
  <label for="display-name">Business name</label>
  <input id="display-name" name="displayName" type="text" maxlength="60" autocomplete="organization" value="{display_name}">
  <button type="submit">Save name</button>
</form>
</section>

<section class="card" aria-labelledby="keys-title" id="keys">
<h2 id="keys-title">API key</h2>
<p>Your backend sends it as <code>Authorization: Bearer sk_live_…</code>. We store only its hash:
the full key is shown once, when it is created.</p>
<p id="key-status" data-has-key="{has_key}">{summary}</p>
<div class="actions">
  <button type="button" id="key-generate" class="primary"{gen_hidden}>Generate key</button>
  <button type="button" id="key-rotate"{key_hidden}>Rotate key</button>
  <button type="button" id="key-revoke" class="danger"{key_hidden}>Revoke key</button>
</div>
<div id="key-confirm" class="confirm" hidden>
  <p id="key-confirm-text"></p>
  <button type="button" id="key-confirm-yes" class="danger">Confirm</button>
  <button type="button" id="key-confirm-no">Cancel</button>
</div>
<div id="key-once" class="secret" hidden>
  <p><strong>Copy your new key now.</strong> It will not be shown again.</p>
  <label for="key-plaintext">New API key</label>
  <input id="key-plaintext" type="text" readonly spellcheck="false" autocomplete="off">
  <button type="button" id="key-copy">Copy</button>
</div>
</section>

<section class="card" aria-labelledby="wh-title" id="webhooks">
<h2 id="wh-title">Webhooks</h2>
<form id="webhook-form" novalidate>
  <label for="webhook-url">Endpoint URL</label>
  <input id="webhook-url" name="url" type="url" inputmode="url" placeholder="https://example.com/webhooks/chainsub" value="{url}">
  <button type="submit">Save URL</button>
  <button type="button" id="webhook-clear">Remove URL</button>
</form>
{disabled_note}
<h3>Signing secret</h3>
<p>Deliveries are signed with Standard Webhooks headers (<code>webhook-id</code>, <code>webhook-timestamp</code>, <code>webhook-signature</code>).</p>
<div class="actions">
  <button type="button" id="secret-reveal">Reveal secret</button>
  <button type="button" id="secret-rotate">Rotate secret</button>
  <button type="button" id="webhook-test">Send test event</button>
</div>
<div id="secret-box" class="secret" hidden>
  <label for="secret-value">Current signing secret</label>
  <input id="secret-value" type="text" readonly spellcheck="false" autocomplete="off">
  <p id="secret-previous" class="muted"></p>
  <button type="button" id="secret-revoke-previous" hidden>End the previous secret now</button>
</div>
</section>

<section class="card" aria-labelledby="dl-title" id="deliveries-card">
<h2 id="dl-title">Recent deliveries</h2>
<div class="actions"><button type="button" id="deliveries-refresh">Refresh</button></div>
<p class="muted">A subscription's webhooks go out in chain order: a delivery waits while an earlier event of the same subscription is pending.</p>
<div class="table-scroll" tabindex="0" role="region" aria-label="Recent deliveries (scrolls sideways)"><table id="deliveries">
  <caption class="sr-only">Recent webhook deliveries, newest first</caption>
  <thead><tr><th scope="col">Event</th><th scope="col">Type</th><th scope="col">Status</th><th scope="col">Attempts</th><th scope="col">Last error</th><th scope="col">Created</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
  <tbody><tr><td colspan="7" class="muted">Loading…</td></tr></tbody>
</table></div>
</section>
{settings}"#,
        nav = super::overview::nav("/dashboard/developers"),
        wallet = esc(&wallet),
        code = esc(session.merchant.code()),
        display_name = esc(display_name.unwrap_or("")),
        has_key = has_key,
        summary = esc(&key_summary(key_status)),
        gen_hidden = if has_key { " hidden" } else { "" },
        key_hidden = if has_key { "" } else { " hidden" },
        url = esc(url),
        disabled_note = disabled_note,
        settings = json_script("dashboard-settings", &settings),
    );
    page(
        StatusCode::OK,
        "Developers",
        &body,
        &["wallet.js", "dashboard.js"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_summary_shows_only_prefix_and_last4() {
        let s = key_summary(
            &json!({"active": true, "key": {"prefix": "sk_live_", "last4": "abcd",
            "createdAt": "2026-01-01T00:00:00Z", "lastUsedAt": null}}),
        );
        assert_eq!(
            s,
            "sk_live_…abcd · created 2026-01-01T00:00:00Z · never used"
        );
        assert!(key_summary(&json!({"active": false, "key": null})).starts_with("No API key"));
    }
}
