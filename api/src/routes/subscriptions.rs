//! `GET /api/v1/subscriptions` (filters + cursor pagination) and
//! `GET /api/v1/subscriptions/{id}` (with its ledger), read from the chain index. Every
//! query is scoped by the merchant's wallet.

use chainsub_core::{SubscriptionId, SubscriptionStatus};
use chainsub_store::subscriptions as store;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_postgres::Row;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Authed, authenticate};
use crate::ctx::{Ctx, with_ctx};
use crate::error::{ApiError, Result};
use crate::pagination::{Page, list_json};
use crate::render::{ChainRef, address, amount_from_str, time};
use crate::reply::{Resp, respond};
use crate::routes::plans::with_rate;
use crate::routes::{
    Caller, caller, check_params, method_fallback, param, query_pairs, text_param,
};

/// The subscriptions router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    let list = warp::path!("api" / "v1" / "subscriptions").and(
        warp::get()
            .and(with_ctx(ctx.clone()))
            .and(caller())
            .and(query_pairs())
            .then(|ctx: Ctx, c: Caller, q: Vec<(String, String)>| async move {
                respond(list(&ctx, &c, &q).await)
            })
            .or(method_fallback("GET"))
            .unify(),
    );
    let one_path = || warp::path!("api" / "v1" / "subscriptions" / String);
    let one = one_path()
        .and(warp::get())
        .and(with_ctx(ctx))
        .and(caller())
        .then(
            |id: String, ctx: Ctx, c: Caller| async move { respond(get_one(&ctx, &c, &id).await) },
        )
        .or(one_path()
            .and(method_fallback("GET"))
            .map(|_: String, r: Resp| r))
        .unify();
    list.or(one).unify().boxed()
}

fn chain_of(r: &Row) -> Value {
    let contract: Vec<u8> = r.get("contract");
    let bh: Vec<u8> = r.get("block_hash");
    let tx: Vec<u8> = r.get("transaction_hash");
    let mut c = ChainRef {
        chain_id: r.get("chain_id"),
        contract: &contract,
        block_number: r.get("block_number"),
        block_hash: &bh,
        transaction_hash: &tx,
        log_index: i64::from(r.get::<_, i32>("log_index")),
        indexed_block: r.get("indexed_block"),
    }
    .to_json();
    c["onchainSubscriptionId"] = json!(r.get::<_, i64>("onchain_id"));
    c["onchainPlanId"] = json!(r.get::<_, i64>("plan_onchain_id"));
    c
}

fn subscription_json(r: &Row) -> Value {
    let status: String = r.get("status");
    let cancel: bool = r.get("cancel_at_period_end");
    let period_end: DateTime<Utc> = r.get("current_period_end");
    let next_payment = match status.as_str() {
        "active" if !cancel => Some(time(period_end)),
        "past_due" => r.get::<_, Option<DateTime<Utc>>>("next_retry_at").map(time),
        _ => None,
    };
    json!({
        "id": r.get::<_, String>("public_id"),
        "object": "subscription",
        "status": status,
        "cancelAtPeriodEnd": cancel,
        "planId": r.get::<_, Option<String>>("plan_public_id"),
        "customerExternalId": r.get::<_, Option<String>>("customer_external_id"),
        "subscriber": address(&r.get::<_, Vec<u8>>("subscriber")),
        "amount": amount_from_str(&r.get::<_, String>("amount")),
        "currency": "USDC",
        "period": r.get::<_, i32>("period"),
        "currentPeriodStart": time(r.get("current_period_start")),
        "currentPeriodEnd": time(period_end),
        "nextPaymentAt": next_payment,
        "failedAttempts": r.get::<_, i32>("failed_attempts"),
        "endedReason": r.get::<_, Option<String>>("ended_reason"),
        "createdAt": time(r.get("created_at")),
        "updatedAt": time(r.get("updated_at")),
        "chain": chain_of(r),
    })
}

fn sub_cursor(param_name: &str, id: &str) -> Result<i64> {
    SubscriptionId::parse(id)
        .map(|s| s.onchain())
        .ok_or_else(|| {
            ApiError::invalid(
                param_name,
                format!("`{param_name}` must be a subscription id (sub_…)"),
            )
        })
}

async fn list(ctx: &Ctx, c: &Caller, q: &[(String, String)]) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    check_params(
        q,
        &[
            "limit",
            "startingAfter",
            "endingBefore",
            "status",
            "planId",
            "customerExternalId",
        ],
    )?;
    let page = Page::parse(q)?;
    let status = param(q, "status")
        .map(|s| {
            SubscriptionStatus::parse(s).map_err(|_| {
                ApiError::invalid(
                    "status",
                    format!("`status` must be one of {}", SubscriptionStatus::names()),
                )
            })
        })
        .transpose()?;
    let filter = store::Filter {
        status,
        // Unknown or another merchant's plan simply matches nothing.
        plan: text_param(q, "planId", 100)?,
        // The same bound as the checkout body's `customerExternalId`.
        customer_external_id: text_param(q, "customerExternalId", 128)?,
    };
    let key = page
        .cursor_param()
        .map(|(name, id)| sub_cursor(name, id))
        .transpose()?;
    let conn = ctx.pool.get().await?;
    let (rows, more) = store::list(
        &conn,
        &merchant,
        ctx.cfg.chain_id as i64,
        &filter,
        page.store_page(key),
    )
    .await?;
    let data = rows.iter().map(subscription_json).collect();
    Ok(with_rate(Resp::json(list_json(data, more)), &rate))
}

async fn get_one(ctx: &Ctx, c: &Caller, id: &str) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let id = SubscriptionId::parse(id).ok_or_else(not_found)?;
    let conn = ctx.pool.get().await?;
    let chain_id = ctx.cfg.chain_id as i64;
    let row = store::get(&conn, &merchant, chain_id, &id)
        .await?
        .ok_or_else(not_found)?;
    let ledger = store::ledger(&conn, &merchant, chain_id, &id).await?;
    let entries: Vec<Value> = ledger.iter().map(ledger_json).collect();
    let mut body = subscription_json(&row);
    body["ledger"] = Value::Array(entries);
    Ok(with_rate(Resp::json(body), &rate))
}

fn ledger_json(r: &Row) -> Value {
    let contract: Vec<u8> = r.get("contract");
    let bh: Vec<u8> = r.get("block_hash");
    let tx: Vec<u8> = r.get("transaction_hash");
    json!({
        "id": r.get::<_, String>("public_id"),
        "object": "ledger_entry",
        "type": r.get::<_, String>("kind"),
        "amount": amount_from_str(&r.get::<_, String>("amount")),
        "currency": "USDC",
        "period": r.get::<_, i32>("period"),
        "periodStart": r.get::<_, Option<DateTime<Utc>>>("period_start").map(time),
        "periodEnd": r.get::<_, Option<DateTime<Utc>>>("period_end").map(time),
        "attempt": r.get::<_, i32>("attempt"),
        "failureReason": r.get::<_, Option<String>>("failure_reason"),
        "createdAt": time(r.get("block_time")),
        "chain": ChainRef {
            chain_id: r.get("chain_id"),
            contract: &contract,
            block_number: r.get("block_number"),
            block_hash: &bh,
            transaction_hash: &tx,
            log_index: i64::from(r.get::<_, i32>("log_index")),
            indexed_block: r.get("indexed_block"),
        }
        .to_json(),
    })
}
