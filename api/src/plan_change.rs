//! Plan-change links: a merchant cannot move a customer to another plan (only the subscriber
//! may, consenting to the terms, on chain), so `POST /api/v1/subscriptions/{id}/plan-change-links`
//! makes a signed link the customer opens; its page (`/account/plan-change/{merchantCode}`)
//! states the change and its JSON endpoint (`…/tx`) hands the customer's wallet the
//! `changePlan` call carrying the terms shown — after checking on chain that the wallet is
//! the subscriber.
//!
//! URL: `{BASE_URL}/account/plan-change/{merchantCode}?subscription=<sub_…>&plan=<plan_…>&expires=<unix>&sig=<hex>`,
//! `sig` = HMAC-SHA256(CHECKOUT_SIGNING_SECRET, "plan-change:v1\n{code}\n{subscription}\n{plan}\n{expires}").

use alloy::primitives::{Address, U256};
use alloy::providers::DynProvider;
use alloy::sol_types::SolCall;
use chainsub_abi::SubscriptionManager;
use chainsub_core::{PlanId, SubscriptionId, SubscriptionStatus, format_units};
use chainsub_store::plans::PlanRow;
use chainsub_store::subscriptions::SubscriptionRow;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::merchants::Merchant;
use crate::pages::checkout::TxRequest;

/// A link's default and longest life.
pub const DEFAULT_SECS: i64 = 7 * 86_400;
pub const MAX_SECS: i64 = 30 * 86_400;

fn signed_text(code: &str, sub: &str, plan: &str, expires: i64) -> String {
    format!("plan-change:v1\n{code}\n{sub}\n{plan}\n{expires}")
}

/// The link's query string (`subscription`, `plan`, `expires`, `sig`).
pub fn query(secret: &str, code: &str, sub: &str, plan: &str, expires: i64) -> String {
    let sig = hex::encode(crate::checkout::mac(
        secret,
        &signed_text(code, sub, plan, expires),
    ));
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("subscription", sub);
    q.append_pair("plan", plan);
    q.append_pair("expires", &expires.to_string());
    q.append_pair("sig", &sig);
    q.finish()
}

/// The API's answer: the link and what it changes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanChangeLink {
    pub object: &'static str,
    pub url: String,
    pub subscription_id: SubscriptionId,
    pub plan_id: PlanId,
    /// `upgrade` (now, with a prorated charge) or `downgrade` (at the next renewal).
    pub kind: &'static str,
    pub expires_at: String,
}

/// A link for `merchant`'s subscription `sub` to move to its plan `plan`, valid `secs`.
pub async fn link(
    ctx: &Ctx,
    merchant: &Merchant,
    sub: &str,
    plan: &str,
    secs: i64,
) -> Result<PlanChangeLink> {
    let (sub, plan) = resolve(ctx, merchant, sub, plan, Some("planId")).await?;
    let expires = chrono::Utc::now().timestamp() + secs;
    let q = query(
        ctx.cfg.checkout_signing_secret.expose(),
        merchant.code(),
        sub.id.as_str(),
        plan.id.as_str(),
        expires,
    );
    Ok(PlanChangeLink {
        object: "plan_change_link",
        url: format!(
            "{}/account/plan-change/{}?{q}",
            ctx.cfg.base(),
            merchant.code()
        ),
        kind: kind(&sub, &plan),
        subscription_id: sub.id,
        plan_id: plan.id,
        expires_at: chainsub_core::rfc3339(expires as u64),
    })
}

fn kind(sub: &SubscriptionRow, plan: &PlanRow) -> &'static str {
    if sub.amount.is_some_and(|a| plan.amount > a) {
        "upgrade"
    } else {
        "downgrade"
    }
}

/// The subscription and the target plan, both `merchant`'s, the change allowed as the index
/// sees it: the subscription active, the plan another one of theirs, on chain and not
/// deactivated. `plan_param` names the plan in errors (the API's `planId`; `plan` on a link).
async fn resolve(
    ctx: &Ctx,
    merchant: &Merchant,
    sub: &str,
    plan: &str,
    plan_param: Option<&str>,
) -> Result<(SubscriptionRow, PlanRow)> {
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let sub_id = SubscriptionId::parse(sub).ok_or_else(not_found)?;
    let conn = ctx.pool.get().await?;
    let sub = chainsub_store::subscriptions::get(&conn, merchant, ctx.cfg.chain_id, &sub_id)
        .await?
        .ok_or_else(not_found)?;
    drop(conn);
    let plan = crate::routes::plans::find(ctx, merchant, plan)
        .await?
        .ok_or_else(|| ApiError::not_found("plan", plan_param))?;
    let conflict = |code, message: &str| ApiError::Conflict {
        code,
        message: message.into(),
        param: None,
    };
    if sub.status.is_terminal() {
        return Err(conflict(
            Code::SubscriptionTerminal,
            "the subscription is cancelled or ended",
        ));
    }
    if sub.status != SubscriptionStatus::Active || sub.cancel_at_period_end {
        return Err(conflict(
            Code::SubscriptionNotActive,
            "only an active subscription that is not ending changes plan (a trial changes after it, a past-due one once paid)",
        ));
    }
    if !plan.is_active() {
        return Err(conflict(
            Code::PlanNotActive,
            "the plan is not provisioned on chain yet",
        ));
    }
    if sub.plan_id.as_ref() == Some(&plan.id) {
        return Err(ApiError::invalid(
            plan_param.unwrap_or("plan"),
            "the subscription is on this plan already",
        ));
    }
    Ok((sub, plan))
}

/// The link's parameters, checked: its merchant, subscription and plan, unexpired, signed.
pub struct Link {
    pub merchant: Merchant,
    pub sub: SubscriptionRow,
    pub plan: PlanRow,
}

/// Resolves a link from its path code and query.
pub async fn open(ctx: &Ctx, code: &str, q: &[(String, String)]) -> Result<Link> {
    use crate::http::extract::param;
    let get = |name: &str| param(q, name).ok_or_else(|| ApiError::missing(name));
    let (sub, plan, expires, sig) = (
        get("subscription")?,
        get("plan")?,
        get("expires")?,
        get("sig")?,
    );
    let expires: i64 = expires
        .parse()
        .map_err(|_| ApiError::invalid("expires", "`expires` must be unix seconds"))?;
    let text = signed_text(code, sub, plan, expires);
    if !crate::checkout::mac_matches(ctx.cfg.checkout_signing_secret.expose(), &text, sig) {
        return Err(ApiError::Forbidden {
            code: Code::CheckoutSignatureInvalid,
            message: "the link was changed after it was signed".into(),
        });
    }
    if expires < chrono::Utc::now().timestamp() {
        return Err(ApiError::Forbidden {
            code: Code::CheckoutLinkExpired,
            message: "the link has expired; ask the merchant for a new one".into(),
        });
    }
    let conn = ctx.pool.get().await?;
    let merchant = chainsub_store::merchants::by_code(&**conn, code)
        .await?
        .ok_or_else(|| ApiError::not_found("merchant", None))?;
    drop(conn);
    let (sub, plan) = resolve(ctx, &merchant, sub, plan, Some("plan")).await?;
    Ok(Link {
        merchant,
        sub,
        plan,
    })
}

/// What the page's wallet sends: `changePlan` with the terms the page showed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanChangeTx {
    pub object: &'static str,
    pub kind: &'static str,
    pub tx: TxRequest,
}

/// The `changePlan` call for `from`, after checking on chain that it is the subscriber.
pub async fn transaction(
    ctx: &Ctx,
    provider: Option<&DynProvider>,
    link: &Link,
    from: Address,
) -> Result<PlanChangeTx> {
    let provider = crate::pages::checkout::chain(provider)?;
    let cfg = &ctx.cfg;
    let onchain_sub = U256::from(link.sub.onchain_id as u64);
    let s = SubscriptionManager::new(cfg.contract_address, provider.clone())
        .getSubscription(onchain_sub)
        .call()
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "plan change: chain read failed");
            ApiError::Unavailable("the chain RPC could not be reached".into())
        })?;
    if s.subscriber != from {
        return Err(ApiError::Forbidden {
            code: Code::NotSubscriber,
            message: "the connected wallet is not this subscription's subscriber".into(),
        });
    }
    let onchain_plan = link
        .plan
        .created_on_chain
        .as_ref()
        .map(|c| c.onchain_id)
        .ok_or_else(|| ApiError::Conflict {
            code: Code::PlanNotActive,
            message: "the plan is not provisioned on chain yet".into(),
            param: None,
        })?;
    let call = SubscriptionManager::changePlanCall {
        subscriptionId: onchain_sub,
        newPlanId: U256::from(onchain_plan as u64),
        merchant: link.merchant.wallet(),
        amount: U256::from(link.plan.amount),
    };
    Ok(PlanChangeTx {
        object: "plan_change_transaction",
        kind: kind(&link.sub, &link.plan),
        tx: TxRequest::call(from, cfg.contract_address, call.abi_encode()),
    })
}

/// The sentence the page shows.
pub fn terms_text(link: &Link) -> String {
    let new = format_units(link.plan.amount);
    let old = link.sub.amount.map_or_else(|| "?".into(), format_units);
    match kind(&link.sub, &link.plan) {
        "upgrade" => format!(
            "From {old} to {new} USDC a month, at once: you pay now the difference for the rest \
             of the current period, prorated by the seconds left and rounded down, and {new} USDC \
             at each renewal after."
        ),
        _ => format!(
            "From {old} to {new} USDC a month, from your next renewal on {}: nothing is charged \
             now, and you can undo it until then.",
            link.sub.current_period_end.format("%B %-d, %Y")
        ),
    }
}

/// The page a plan-change link opens: the change in plain words, then the wallet's steps
/// (`assets/plan_change.js`: connect, the right chain, the `changePlan` call from `tx_url`).
pub fn render(cfg: &crate::config::Config, link: &Link, tx_url: &str) -> crate::http::reply::Resp {
    use crate::pages::html::{esc, json_script, page};
    let settings = serde_json::json!({
        "chainId": cfg.chain_id,
        "chainIdHex": crate::pages::checkout::chain_id_hex(cfg.chain_id),
        "chainName": crate::pages::network::name(cfg),
        "txUrl": tx_url,
        "explorerTxUrl": cfg.pages.explorer_tx_url,
    });
    let body = format!(
        r#"<section class="card plan-change" id="plan-change" data-state="idle" aria-labelledby="title">
<p class="eyebrow">Change your plan</p>
<h1 id="title">{name}</h1>
<dl class="facts">
  <dt>Change</dt><dd id="terms">{terms}</dd>
  <dt>Merchant</dt><dd><code>{code}</code></dd>
  <dt>Subscription</dt><dd>#{onchain}</dd>
</dl>
<p>Your wallet sends the change to the subscription contract with these terms; nothing changes unless you confirm it there.</p>
<noscript><p class="notice">This page needs JavaScript and a browser wallet (such as MetaMask).</p></noscript>
<div class="actions">
  <button type="button" id="connect" class="primary">Connect wallet</button>
  <button type="button" id="switch" class="primary" hidden>Switch network</button>
  <button type="button" id="confirm" class="primary" hidden>Confirm the change</button>
</div>
<div id="status" class="status" role="status" aria-live="polite"></div>
</section>
{settings}"#,
        name = esc(&link.plan.name),
        terms = esc(&terms_text(link)),
        code = esc(link.merchant.code()),
        onchain = link.sub.onchain_id,
        settings = json_script("plan-change-settings", &settings),
    );
    page(
        warp::http::StatusCode::OK,
        "Change your plan",
        &body,
        &["wallet.js", "plan_change.js"],
    )
}
