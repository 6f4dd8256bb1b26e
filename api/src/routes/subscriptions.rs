//! `GET /api/v1/subscriptions` (filters + cursor pagination) and
//! `GET /api/v1/subscriptions/{id}` (with its ledger), read from the chain index. Every
//! query is scoped by the merchant's wallet.

use chainsub_abi::ids::parse_subscription_id;
use chainsub_core::SubscriptionStatus;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_postgres::Row;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Authed, authenticate};
use crate::ctx::{Ctx, with_ctx};
use crate::error::{ApiError, Result};
use crate::pagination::{Cursor, Page};
use crate::render::{ChainRef, address, amount_from_str, time};
use crate::reply::{Resp, respond};
use crate::routes::plans::with_rate;
use crate::routes::{
    Caller, SqlParams, caller, check_params, method_fallback, param, query_pairs, text_param,
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

/// Columns and joins; `$1` = merchant id, `$2` = merchant wallet.
fn select(chain_id: u64) -> String {
    format!(
        "SELECT s.onchain_id, s.public_id, s.status, s.cancel_at_period_end, s.subscriber, \
         s.amount::TEXT AS amount, s.customer_external_id, s.period, s.current_period_start, \
         s.current_period_end, s.failed_attempts, s.next_retry_at, s.ended_reason, s.created_at, \
         s.updated_at, s.plan_onchain_id, p.public_id AS plan_public_id, \
         ce.chain_id, ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, \
         ce.log_index, cur.block_number AS indexed_block \
         FROM subscriptions s \
         JOIN chain_events ce ON ce.id = s.created_event_id \
         LEFT JOIN chain_plans cp ON cp.chain_id = s.chain_id AND cp.onchain_id = s.plan_onchain_id \
         LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = $1 \
         LEFT JOIN indexer_cursor cur ON cur.chain_id = s.chain_id \
         WHERE s.merchant_wallet = $2 AND s.chain_id = {chain_id}"
    )
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
    parse_subscription_id(id)
        .and_then(|n| i64::try_from(n).ok())
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
    let mut params = SqlParams::default();
    params.push(merchant.id);
    params.push(merchant.wallet_bytes());
    let mut sql = select(ctx.cfg.chain_id);
    if let Some(s) = param(q, "status") {
        let status = SubscriptionStatus::parse(s).map_err(|_| {
            ApiError::invalid(
                "status",
                format!("`status` must be one of {}", SubscriptionStatus::names()),
            )
        })?;
        sql.push_str(&format!(
            " AND s.status = {}",
            params.push(status.as_str().to_string())
        ));
    }
    if let Some(p) = text_param(q, "planId", 100)? {
        // Unknown or another merchant's plan simply matches nothing.
        let ph = params.push(p.to_string());
        sql.push_str(&format!(
            " AND s.plan_onchain_id IN (SELECT cp2.onchain_id FROM plans p2 \
             JOIN chain_plans cp2 ON cp2.plan_ref = p2.plan_ref AND cp2.chain_id = {} \
             WHERE p2.public_id = {ph} AND p2.merchant_id = $1)",
            ctx.cfg.chain_id
        ));
    }
    // The same bound as the checkout body's `customerExternalId`.
    if let Some(cx) = text_param(q, "customerExternalId", 128)? {
        sql.push_str(&format!(
            " AND s.customer_external_id = {}",
            params.push(cx.to_string())
        ));
    }
    let key = match &page.cursor {
        Some(Cursor::After(id)) => Some(sub_cursor("startingAfter", id)?),
        Some(Cursor::Before(id)) => Some(sub_cursor("endingBefore", id)?),
        None => None,
    };
    let (cond, order, reversed) = page.sql("s.onchain_id", key, params.next_index());
    if let Some(k) = key {
        params.push(k);
    }
    sql.push_str(&format!("{cond}{order} LIMIT {}", page.limit + 1));
    let conn = ctx.pool.get().await?;
    // Cached per connection: planning these joins costs more than running them.
    let stmt = conn.prepare_cached(&sql).await?;
    let rows = conn.query(&stmt, &params.refs()).await?;
    let data = rows.iter().map(subscription_json).collect();
    Ok(with_rate(Resp::json(page.finish(data, reversed)), &rate))
}

async fn get_one(ctx: &Ctx, c: &Caller, id: &str) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let onchain = parse_subscription_id(id)
        .and_then(|n| i64::try_from(n).ok())
        .ok_or_else(not_found)?;
    let conn = ctx.pool.get().await?;
    let stmt = conn
        .prepare_cached(&format!(
            "{} AND s.onchain_id = $3",
            select(ctx.cfg.chain_id)
        ))
        .await?;
    let row = conn
        .query_opt(&stmt, &[&merchant.id, &merchant.wallet_bytes(), &onchain])
        .await?
        .ok_or_else(not_found)?;
    let ledger = conn
        .query(
            "SELECT le.kind, le.amount::TEXT AS amount, le.period, le.period_start, le.period_end, \
             le.attempt, le.failure_reason, le.block_time, ce.public_id, ce.chain_id, ce.contract, \
             ce.block_number, ce.block_hash, ce.transaction_hash, ce.log_index, \
             cur.block_number AS indexed_block \
             FROM ledger_entries le JOIN chain_events ce ON ce.id = le.event_id \
             LEFT JOIN indexer_cursor cur ON cur.chain_id = le.chain_id \
             WHERE le.chain_id = $1 AND le.subscription_id = $2 ORDER BY le.event_id",
            &[&(ctx.cfg.chain_id as i64), &onchain],
        )
        .await?;
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
