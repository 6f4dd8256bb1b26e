//! Browser-facing routes: the checkout page and its transaction endpoint, the developers
//! dashboard page, and the static assets.
//!
//! | Method | Path | |
//! |---|---|---|
//! | GET | /checkout/{merchantCode}/{planSlug}?customer=…&sig=… | checkout page (HTML) |
//! | GET | /checkout/{merchantCode}/{planSlug}/tx?customer=…&sig=…&from=0x… | wallet state + ready tx requests (JSON) |
//! | GET | /account?merchant=… | customer self-service page (HTML) |
//! | GET | /account/challenge?wallet=0x… | the text the wallet signs to list (JSON) |
//! | GET | /account/subscriptions?wallet=0x…&merchant=… | a wallet's subscriptions (JSON; headers `x-wallet-proof-issued-at`, `x-wallet-proof-signature`) |
//! | GET | /account/cancel-tx?from=0x…&subscription=N&atPeriodEnd=true\|false | cancel tx request (JSON) |
//! | GET | /account/plan-change-tx?from=0x…&subscription=N&plan=M | plan change tx request (JSON) |
//! | GET | /dashboard | merchant overview (HTML; signed-in or sign-in view) |
//! | GET | /dashboard/subscriptions?status=…&customer=…&startingAfter=… | subscriptions (HTML) |
//! | GET | /dashboard/subscriptions/{id} | one subscription: ledger, events, refund (HTML) |
//! | GET | /dashboard/plans | plans: create, follow provisioning, checkout links, deactivate (HTML) |
//! | GET | /dashboard/developers | dashboard page (HTML; signed-in or sign-in view) |
//! | GET | /assets/{file} | JS and CSS of the pages |

use std::str::FromStr;

use chrono::Datelike;

use alloy::primitives::Address;
use alloy::providers::DynProvider;
use chainsub_core::{CancelAt, OnchainSubscriptionId};
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::Method;

use crate::auth::{api_key, session};
use crate::ctx::{Ctx, with_ctx};
use crate::http::client_ip::{ClientAddr, client_addr};
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::extract::{param, query_pairs};
use crate::http::reply::{Resp, handle, respond};
use crate::pages::html::error_page;
use crate::pages::{
    account, account_view, assets, checkout, checkout_tx, checkout_view, dashboard, overview,
};
use crate::routes::any_of;
use crate::webhook_settings as settings;

type Query = Vec<(String, String)>;

/// The pages router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    // Built once: a failure here (an unparsable RPC_URL) shows up as 503s on the tx endpoint.
    let provider = checkout::read_provider(&ctx.cfg.rpc_url)
        .inspect_err(|e| tracing::error!(error = %e, "checkout pages cannot read the chain"))
        .ok();

    let checkout_page = warp::path!("checkout" / String / String)
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(client_addr())
        .and(query_pairs())
        .then(
            |code: String, slug: String, ctx: Ctx, remote: ClientAddr, q: Query| async move {
                checkout_page(&ctx, &remote, &code, &slug, &q)
                    .await
                    .unwrap_or_else(html_error)
            },
        );
    let tx = warp::path!("checkout" / String / String / "tx")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(with_provider(provider.clone()))
        .and(client_addr())
        .and(query_pairs())
        .then(
            |code: String,
             slug: String,
             ctx: Ctx,
             provider: Option<DynProvider>,
             remote: ClientAddr,
             q: Query| {
                handle(async move {
                    transactions(&ctx, provider.as_ref(), &remote, &code, &slug, &q).await
                })
            },
        );
    let account_page = warp::path!("account")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(client_addr())
        .and(query_pairs())
        .then(|ctx: Ctx, remote: ClientAddr, q: Query| async move {
            account_page(&ctx, &remote, &q)
                .await
                .unwrap_or_else(html_error)
        });
    let account_challenge = warp::path!("account" / "challenge")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(client_addr())
        .and(query_pairs())
        .map(|ctx: Ctx, remote: ClientAddr, q: Query| {
            respond(account_challenge(&ctx, &remote, &q))
        });
    let account_list = warp::path!("account" / "subscriptions")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(client_addr())
        .and(query_pairs())
        .and(warp::header::optional::<String>("x-wallet-proof-issued-at"))
        .and(warp::header::optional::<String>("x-wallet-proof-signature"))
        .then(
            |ctx: Ctx,
             remote: ClientAddr,
             q: Query,
             issued_at: Option<String>,
             signature: Option<String>| async move {
                let proof = (issued_at.as_deref(), signature.as_deref());
                respond(account_subscriptions(&ctx, &remote, &q, proof).await)
            },
        );
    let account_cancel = warp::path!("account" / "cancel-tx")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(with_provider(provider.clone()))
        .and(client_addr())
        .and(query_pairs())
        .then(
            |ctx: Ctx, provider: Option<DynProvider>, remote: ClientAddr, q: Query| {
                handle(async move { account_cancel_tx(&ctx, provider.as_ref(), &remote, &q).await })
            },
        );
    let account_plan_change =
        warp::path!("account" / "plan-change-tx")
            .and(warp::get())
            .and(with_ctx(ctx.clone()))
            .and(with_provider(provider.clone()))
            .and(client_addr())
            .and(query_pairs())
            .then(
                |ctx: Ctx, provider: Option<DynProvider>, remote: ClientAddr, q: Query| {
                    handle(async move {
                        account_plan_change_tx(&ctx, provider.as_ref(), &remote, &q).await
                    })
                },
            );
    let plan_change_page = warp::path!("account" / "plan-change" / String)
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(query_pairs())
        .then(|code: String, ctx: Ctx, q: Query| {
            handle(async move {
                let link = crate::plan_change::open(&ctx, &code, &q).await?;
                let tx_url = format!(
                    "/account/plan-change/{code}/tx?{}",
                    url::form_urlencoded::Serializer::new(String::new())
                        .extend_pairs(q.iter())
                        .finish()
                );
                Ok(crate::plan_change::render(&ctx.cfg, &link, &tx_url))
            })
        });
    let plan_change_provider = provider;
    let plan_change_tx = warp::path!("account" / "plan-change" / String / "tx")
        .and(warp::get())
        .and(with_ctx(ctx.clone()))
        .and(with_provider(plan_change_provider))
        .and(query_pairs())
        .then(
            |code: String, ctx: Ctx, provider: Option<DynProvider>, q: Query| {
                handle(async move {
                    let from = wallet_param(&q, "from")?;
                    let link = crate::plan_change::open(&ctx, &code, &q).await?;
                    let tx = crate::plan_change::transaction(&ctx, provider.as_ref(), &link, from)
                        .await?;
                    Ok(Resp::view(&tx))
                })
            },
        );
    let overview = warp::path!("dashboard").and(page_get(&ctx)).then(
        |ctx: Ctx, cookie: Option<String>, remote: ClientAddr| async move {
            overview(&ctx, cookie.as_deref(), &remote)
                .await
                .unwrap_or_else(html_error)
        },
    );
    let console_list = warp::path!("dashboard" / "subscriptions")
        .and(page_get(&ctx))
        .and(query_pairs())
        .then(
            |ctx: Ctx, cookie: Option<String>, remote: ClientAddr, q: Query| async move {
                console_list(&ctx, cookie.as_deref(), &remote, &q)
                    .await
                    .unwrap_or_else(html_error)
            },
        );
    let console_detail = warp::path!("dashboard" / "subscriptions" / String)
        .and(page_get(&ctx))
        .then(
            |id: String, ctx: Ctx, cookie: Option<String>, remote: ClientAddr| async move {
                let ctx = &ctx;
                signed_in_page(ctx, cookie, &remote, "Subscription", |s| async move {
                    crate::console::detail(ctx, &s, &id).await
                })
                .await
            },
        );
    let console_plans = warp::path!("dashboard" / "plans").and(page_get(&ctx)).then(
        |ctx: Ctx, cookie: Option<String>, remote: ClientAddr| async move {
            let ctx = &ctx;
            signed_in_page(ctx, cookie, &remote, "Plans", |s| async move {
                crate::console::plans(ctx, &s).await
            })
            .await
        },
    );
    let dash = warp::path!("dashboard" / "developers")
        .and(page_get(&ctx))
        .then(
            |ctx: Ctx, cookie: Option<String>, remote: ClientAddr| async move {
                developers(&ctx, cookie.as_deref(), &remote)
                    .await
                    .unwrap_or_else(html_error)
            },
        );
    let asset =
        warp::path!("assets" / String)
            .and(warp::get())
            .map(|name: String| match assets::get(&name) {
                Some((ct, body)) => Resp::raw(ct, body).header("x-content-type-options", "nosniff"),
                None => ApiError::not_found("asset", None).into_resp(),
            });
    any_of([
        checkout_page.boxed(),
        tx.boxed(),
        account_page.boxed(),
        plan_change_page.boxed(),
        plan_change_tx.boxed(),
        account_challenge.boxed(),
        account_list.boxed(),
        account_cancel.boxed(),
        account_plan_change.boxed(),
        overview.boxed(),
        console_list.boxed(),
        console_detail.boxed(),
        console_plans.boxed(),
        dash.boxed(),
        asset.boxed(),
    ])
}

fn with_provider(
    provider: Option<DynProvider>,
) -> impl Filter<Extract = (Option<DynProvider>,), Error = std::convert::Infallible> + Clone {
    warp::any().map(move || provider.clone())
}

fn check_ip(ctx: &Ctx, remote: &ClientAddr) -> Result<()> {
    ctx.limits.check_client(remote)?;
    Ok(())
}

/// An error as a page a customer can act on (5xx detail goes to the log, never the page).
fn html_error(e: ApiError) -> Resp {
    let status = e.status();
    let (title, detail) = match &e {
        ApiError::Invalid { message, .. } => ("This checkout link is incomplete", message.clone()),
        ApiError::Forbidden { message, .. } => ("This checkout link is not valid", message.clone()),
        ApiError::NotFound { .. } => (
            "Not found",
            "This merchant or plan does not exist (any more). Ask the merchant for a new link."
                .to_string(),
        ),
        ApiError::RateLimited(_) => (
            "Too many requests",
            "Please wait a moment and try again.".to_string(),
        ),
        _ => {
            // The detail goes to the log only, as for every other 5xx.
            tracing::warn!(error = %e, status = status.as_u16(), "page failed");
            (
                "Something went wrong",
                "The service is temporarily unavailable. Please try again in a minute.".to_string(),
            )
        }
    };
    let mut resp = error_page(status, title, &detail);
    if let ApiError::RateLimited(l) = &e {
        for (k, v) in l.headers() {
            resp = resp.header(k, &v);
        }
    }
    resp
}

async fn checkout_page(
    ctx: &Ctx,
    remote: &ClientAddr,
    code: &str,
    slug: &str,
    q: &Query,
) -> Result<Resp> {
    check_ip(ctx, remote)?;
    // Every parameter of the page is the link's, and the signature covers them all.
    if let Some((k, _)) = q
        .iter()
        .find(|(k, _)| !matches!(k.as_str(), "customer" | "expires" | "sig"))
    {
        return Err(ApiError::Invalid {
            code: Code::ParameterUnknown,
            message: format!("`{k}` is not a parameter of checkout links"),
            param: Some(k.clone()),
        });
    }
    let query = checkout::LinkQuery::from_query(q)?;
    let link = checkout::resolve(ctx, code, slug, &query).await?;
    let tx_url = format!("/checkout/{code}/{slug}/tx?{}", query.to_query());
    Ok(checkout_view::render(&ctx.cfg, &link, &tx_url))
}

async fn transactions(
    ctx: &Ctx,
    provider: Option<&DynProvider>,
    remote: &ClientAddr,
    code: &str,
    slug: &str,
    q: &Query,
) -> Result<Resp> {
    check_ip(ctx, remote)?;
    let from = wallet_param(q, "from")?;
    // `permit=off`: the wallet cannot sign typed data; approve + subscribe instead.
    let permit_off = match param(q, "permit") {
        None => false,
        Some("off") => true,
        Some(_) => return Err(ApiError::invalid("permit", "`permit` can only be `off`")),
    };
    let signed = checkout::SignedPermit::from_query(
        param(q, "permitValue"),
        param(q, "permitDeadline"),
        param(q, "permitSignature"),
    )?;
    let link = checkout::LinkQuery::from_query(q)?;
    let asked = checkout_tx::Asked {
        from,
        permit_off,
        signed,
    };
    checkout_tx::answer(ctx, provider, code, slug, &link, asked).await
}

/// A merchant's code in an `/account?merchant=` link: what merchant codes are made of.
fn merchant_code(q: &Query) -> Result<Option<&str>> {
    match param(q, "merchant").filter(|c| !c.is_empty()) {
        None => Ok(None),
        Some(c)
            if c.len() <= 64
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Ok(Some(c))
        }
        Some(_) => Err(ApiError::invalid(
            "merchant",
            "`merchant` must be a merchant code (letters, digits, `-`, `_`)",
        )),
    }
}

fn wallet_param(q: &Query, name: &str) -> Result<Address> {
    let v = param(q, name).ok_or_else(|| ApiError::missing(name))?;
    Address::from_str(v)
        .map_err(|_| ApiError::invalid(name, format!("`{name}` must be a 0x wallet address")))
}

/// The self-service page; 404 for a `merchant` that is no merchant's code (a typo in a
/// merchant's link would otherwise show an empty list as if the customer had nothing).
async fn account_page(ctx: &Ctx, remote: &ClientAddr, q: &Query) -> Result<Resp> {
    check_ip(ctx, remote)?;
    let no_merchant = || ApiError::NotFound {
        message: "no such merchant".into(),
        param: Some("merchant".into()),
    };
    let merchant = merchant_code(q).map_err(|_| no_merchant())?;
    if let Some(code) = merchant {
        let conn = ctx.pool.get().await?;
        if !chainsub_store::customers::merchant_code_exists(&conn, code).await? {
            return Err(no_merchant());
        }
    }
    Ok(account_view::render(&ctx.cfg, merchant))
}

fn account_challenge(ctx: &Ctx, remote: &ClientAddr, q: &Query) -> Result<Resp> {
    check_ip(ctx, remote)?;
    let wallet = wallet_param(q, "wallet")?;
    Ok(Resp::view(&account::Challenge::new(
        &account::ProofTerms::of(&ctx.cfg),
        wallet,
        chrono::Utc::now(),
    )))
}

async fn account_subscriptions(
    ctx: &Ctx,
    remote: &ClientAddr,
    q: &Query,
    (issued_at, signature): (Option<&str>, Option<&str>),
) -> Result<Resp> {
    check_ip(ctx, remote)?;
    let wallet = wallet_param(q, "wallet")?;
    let merchant = merchant_code(q)?;
    account::check_proof(
        &account::ProofTerms::of(&ctx.cfg),
        wallet,
        issued_at,
        signature,
        chrono::Utc::now(),
    )?;
    let conn = ctx.pool.get().await?;
    let rows =
        chainsub_store::customers::subscriptions_of(&conn, ctx.cfg.chain_id, wallet, merchant)
            .await?;
    drop(conn);
    Ok(Resp::view(&account::AccountList::new(
        wallet,
        merchant,
        &rows,
        ctx.cfg.confirmations,
    )))
}

async fn account_cancel_tx(
    ctx: &Ctx,
    provider: Option<&DynProvider>,
    remote: &ClientAddr,
    q: &Query,
) -> Result<Resp> {
    check_ip(ctx, remote)?;
    let from = wallet_param(q, "from")?;
    let id = onchain_subscription(q)?;
    let when = match param(q, "atPeriodEnd") {
        Some("true") => CancelAt::PeriodEnd,
        Some("false") => CancelAt::Now,
        Some(_) => {
            return Err(ApiError::invalid(
                "atPeriodEnd",
                "`atPeriodEnd` must be `true` or `false`",
            ));
        }
        None => return Err(ApiError::missing("atPeriodEnd")),
    };
    let provider = checkout::chain(provider)?;
    let cfg = &ctx.cfg;
    let tx =
        account::cancel_transaction(provider, cfg.chain_id, cfg.contract_address, from, id, when)
            .await?;
    Ok(Resp::view(&tx))
}

/// The `subscription` parameter: the contract's id of a subscription.
fn onchain_subscription(q: &Query) -> Result<OnchainSubscriptionId> {
    let id = param(q, "subscription").ok_or_else(|| ApiError::missing("subscription"))?;
    id.parse()
        .map_err(|_| ApiError::invalid("subscription", "`subscription` must be a positive integer"))
}

async fn account_plan_change_tx(
    ctx: &Ctx,
    provider: Option<&DynProvider>,
    remote: &ClientAddr,
    q: &Query,
) -> Result<Resp> {
    check_ip(ctx, remote)?;
    let from = wallet_param(q, "from")?;
    let id = onchain_subscription(q)?;
    let plan = param(q, "plan").ok_or_else(|| ApiError::missing("plan"))?;
    let plan: u64 = plan
        .parse()
        .ok()
        .filter(|p| (1..=i64::MAX as u64).contains(p))
        .ok_or_else(|| ApiError::invalid("plan", "`plan` must be a positive integer"))?;
    let provider = checkout::chain(provider)?;
    let cfg = &ctx.cfg;
    let tx = account::plan_change_transaction(
        provider,
        cfg.chain_id,
        cfg.contract_address,
        from,
        id,
        plan,
    )
    .await?;
    Ok(Resp::view(&tx))
}

/// A dashboard page's GET: the context, the `Cookie` header and the client's address.
fn page_get(
    ctx: &Ctx,
) -> impl Filter<Extract = (Ctx, Option<String>, ClientAddr), Error = warp::Rejection> + Clone + use<>
{
    warp::get()
        .and(with_ctx(ctx.clone()))
        .and(warp::header::optional::<String>("cookie"))
        .and(client_addr())
}

/// `page` for the signed-in merchant's session, else the sign-in view titled `title`; an
/// error as its HTML page.
async fn signed_in_page<F, Fut>(
    ctx: &Ctx,
    cookie: Option<String>,
    remote: &ClientAddr,
    title: &str,
    page: F,
) -> Resp
where
    F: FnOnce(session::Session) -> Fut,
    Fut: Future<Output = Result<Resp>>,
{
    match signed_in(ctx, cookie.as_deref(), remote, title).await {
        Ok(Ok(s)) => page(s).await,
        Ok(Err(view)) => Ok(view),
        Err(e) => Err(e),
    }
    .unwrap_or_else(html_error)
}

/// The session of a dashboard page's request, or (`Ok(Err)`) the sign-in view titled
/// `title` to answer without one.
async fn signed_in(
    ctx: &Ctx,
    cookie: Option<&str>,
    remote: &ClientAddr,
    title: &str,
) -> Result<std::result::Result<session::Session, Resp>> {
    match session::session_of(ctx, &Method::GET, cookie, None, remote).await {
        Ok(s) => Ok(Ok(s)),
        Err(ApiError::Unauthorized { .. }) => Ok(Err(dashboard::signed_out(
            &ctx.cfg,
            title,
            "see your revenue, subscriptions and renewals and act on them",
        ))),
        Err(e) => Err(e),
    }
}

/// `/dashboard/subscriptions?status=…&customer=…&startingAfter=…`.
async fn console_list(
    ctx: &Ctx,
    cookie: Option<&str>,
    remote: &ClientAddr,
    q: &Query,
) -> Result<Resp> {
    let s = match signed_in(ctx, cookie, remote, "Subscriptions").await? {
        Ok(s) => s,
        Err(page) => return Ok(page),
    };
    let status = match param(q, "status").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(chainsub_core::SubscriptionStatus::parse(v).map_err(|_| {
            ApiError::invalid(
                "status",
                format!(
                    "`status` must be one of {}",
                    chainsub_core::SubscriptionStatus::names()
                ),
            )
        })?),
    };
    let customer = param(q, "customer")
        .map(str::trim)
        .filter(|c| !c.is_empty());
    if customer.is_some_and(|c| c.len() > 128) {
        return Err(ApiError::invalid(
            "customer",
            "a customer id has at most 128 characters",
        ));
    }
    let after = param(q, "startingAfter").map(str::to_string);
    let list = crate::pages::subscriptions::ListQuery { status, customer };
    crate::console::list(ctx, &s, &list, after).await
}

/// `/dashboard`: the overview, or the sign-in view without a session.
async fn overview(ctx: &Ctx, cookie: Option<&str>, remote: &ClientAddr) -> Result<Resp> {
    let s = match signed_in(ctx, cookie, remote, "Overview").await? {
        Ok(s) => s,
        Err(page) => return Ok(page),
    };
    let (summary, _) = crate::reports::summary(ctx, &s.merchant).await?;
    let this_month = summary.as_of.date_naive().with_day(1).unwrap_or_default();
    let from = this_month
        .checked_sub_months(chrono::Months::new(11))
        .unwrap_or(this_month);
    let revenue = crate::reports::revenue(ctx, &s.merchant, from, this_month).await?;
    Ok(overview::render(&s, &summary, &revenue))
}

async fn developers(ctx: &Ctx, cookie: Option<&str>, remote: &ClientAddr) -> Result<Resp> {
    let s = match session::session_of(ctx, &Method::GET, cookie, None, remote).await {
        Ok(s) => s,
        Err(ApiError::Unauthorized { .. }) => {
            return Ok(dashboard::signed_out(
                &ctx.cfg,
                "Developers",
                "manage your API key and webhooks",
            ));
        }
        Err(e) => return Err(e),
    };
    let conn = ctx.pool.get().await?;
    let key = api_key::status(&**conn, &s.merchant).await?;
    let webhook = settings::endpoint(&conn, &s.merchant).await?;
    let name = chainsub_store::merchants::display_name(&conn, &s.merchant).await?;
    Ok(dashboard::signed_in(
        &ctx.cfg,
        &s,
        name.as_deref(),
        &key,
        &webhook,
    ))
}
