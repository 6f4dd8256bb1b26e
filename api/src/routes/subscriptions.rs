//! `GET /api/v1/subscriptions` (filters + cursor pagination) and
//! `GET /api/v1/subscriptions/{id}` (with its ledger), read from the chain index. Every
//! query is scoped by the merchant's wallet.

use alloy::primitives::B256;
use chainsub_core::{SubscriptionId, SubscriptionStatus};
use chainsub_store::subscriptions as store;
use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;

use crate::auth::api_key::{Authed, authenticate};
use crate::ctx::{Ctx, with_ctx};
use crate::http::error::{ApiError, Result};
use crate::http::extract::{
    Caller, caller, check_params, method_fallback, param, query_pairs, text_param,
};
use crate::http::reply::{Resp, body_bytes, parse_json_object, respond};
use crate::pagination::{Page, cursor_key};
use crate::routes::plans::with_rate;
use chainsub_views::{CancellationView, ListView, SubscriptionView, SubscriptionWithLedger};
use warp::hyper::body::Bytes;

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
        .and(with_ctx(ctx.clone()))
        .and(caller())
        .then(
            |id: String, ctx: Ctx, c: Caller| async move { respond(get_one(&ctx, &c, &id).await) },
        )
        .or(one_path()
            .and(method_fallback("GET"))
            .map(|_: String, r: Resp| r))
        .unify();
    let cancel_path = || warp::path!("api" / "v1" / "subscriptions" / String / "cancel");
    let cancel = cancel_path()
        .and(warp::post())
        .and(with_ctx(ctx))
        .and(caller())
        .and(body_bytes())
        .then(|id: String, ctx: Ctx, c: Caller, body: Bytes| async move {
            respond(cancel(&ctx, &c, &id, &body).await)
        })
        .or(cancel_path()
            .and(method_fallback("POST"))
            .map(|_: String, r: Resp| r))
        .unify();
    list.or(one).unify().or(cancel).unify().boxed()
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
    let conn = ctx.pool.get().await?;
    let (c, m) = (&conn, &merchant);
    let key = cursor_key(
        &page,
        "subscription",
        SubscriptionId::parse,
        |id| async move { Ok(store::cursor_key(c, m, &id).await?) },
    )
    .await?;
    let (rows, more) = store::list(
        &conn,
        &merchant,
        ctx.cfg.chain_id as i64,
        &filter,
        page.store_page(key),
    )
    .await?;
    let data = rows.iter().map(SubscriptionView::from).collect();
    // A listed subscription is under 1024 bytes of JSON.
    let size = 256 + rows.len() * 1024;
    Ok(with_rate(
        Resp::view_sized(&ListView::new(data, more), size),
        &rate,
    ))
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
    let body = SubscriptionWithLedger {
        subscription: SubscriptionView::from(&row),
        ledger: ledger.iter().map(Into::into).collect(),
    };
    Ok(with_rate(Resp::view(&body), &rate))
}

/// `{"atPeriodEnd": true|false}`: the one field, required.
fn parse_cancel(body: &serde_json::Map<String, serde_json::Value>) -> Result<bool> {
    if let Some(k) = body.keys().find(|k| k.as_str() != "atPeriodEnd") {
        return Err(ApiError::Invalid {
            code: "parameter_unknown",
            message: format!("unknown field `{k}`"),
            param: Some(k.clone()),
        });
    }
    body.get("atPeriodEnd")
        .and_then(serde_json::Value::as_bool)
        .ok_or_else(|| ApiError::invalid("atPeriodEnd", "`atPeriodEnd` is required: true or false"))
}

/// A `sending` request older than this was left by a process that died before signing:
/// nothing of it reached the chain, so a new request may take its place.
const ABANDONED_SENDING: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// A request's unmined transaction is replaced (same nonce, higher fees) only when a new
/// request comes this long after the first: sooner, it is simply still pending.
const REPLACE_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// `POST /api/v1/subscriptions/{id}/cancel`: the service cancels on chain for the merchant
/// (the contract lets the operator act on plans it created) and answers 202 with the pending
/// state; the lifecycle event follows through `/events` and webhooks like any other. 404 for
/// an unknown or another merchant's id, 409 when already terminal or already cancelling at
/// period end, or when the plan was not created through the service.
async fn cancel(ctx: &Ctx, c: &Caller, id: &str, body: &[u8]) -> Result<Resp> {
    let Authed { merchant, rate } = authenticate(ctx, c).await?;
    let body = parse_json_object(c.content_type.as_deref(), body)?;
    let request = format!(
        "POST /api/v1/subscriptions/{id}/cancel\n{}",
        serde_json::Value::Object(body.clone())
    );
    let resp = crate::idempotency::run(
        ctx,
        &merchant,
        c.idempotency_key.as_deref(),
        &request,
        std::convert::identity,
        || cancel_once(ctx, &merchant, id, &body),
    )
    .await?;
    Ok(with_rate(resp, &rate))
}

fn terminal() -> ApiError {
    ApiError::Conflict {
        code: "subscription_terminal",
        message: "the subscription is already cancelled or ended".into(),
        param: None,
    }
}

fn already_cancelling() -> ApiError {
    ApiError::Conflict {
        code: "subscription_already_cancelling",
        message: "the subscription is already set to cancel at period end".into(),
        param: Some("atPeriodEnd".into()),
    }
}

async fn cancel_once(
    ctx: &Ctx,
    merchant: &chainsub_store::MerchantScope,
    id: &str,
    body: &serde_json::Map<String, serde_json::Value>,
) -> Result<Resp> {
    use crate::chain::{CancelError, Journal, Refusal, Sent, TxState};
    use chainsub_store::cancellations;

    let at_period_end = parse_cancel(body)?;
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let sub_id = SubscriptionId::parse(id).ok_or_else(not_found)?;
    let chain_id = ctx.cfg.chain_id as i64;
    let conn = ctx.pool.get().await?;
    let row = store::get(&conn, merchant, chain_id, &sub_id)
        .await?
        .ok_or_else(not_found)?;
    let Some(relayer) = &ctx.relayer else {
        return Err(ApiError::Dependency {
            code: "relayer_unavailable",
            message: "this deployment has no relayer key (RELAYER_PRIVATE_KEY): the \
                      merchant's wallet cancels on chain instead"
                .into(),
        });
    };
    let accepted = |tx: B256, requested_at| {
        Resp::json_view(
            StatusCode::ACCEPTED,
            &CancellationView {
                object: "subscription_cancellation",
                subscription_id: &row.id,
                at_period_end,
                status: "pending",
                transaction_hash: tx,
                requested_at,
                subscription: SubscriptionView::from(&row),
            },
        )
    };
    // What the index knows refuses first (a cancellation the index has seen is done); the
    // chain has the last word (the estimate).
    if matches!(
        row.status,
        SubscriptionStatus::Cancelled | SubscriptionStatus::Ended
    ) {
        return Err(terminal());
    }
    if at_period_end && row.cancel_at_period_end {
        return Err(already_cancelling());
    }
    // A request already under way for this subscription and kind: report it, or carry it
    // on (replace its transaction at its nonce) — never a second transaction beside it.
    let mut replace = None;
    let existing =
        cancellations::live(&conn, merchant, chain_id, row.onchain_id, at_period_end).await?;
    if let Some(found) = existing {
        match found.tx {
            Some(tx) => {
                let sent = Sent {
                    hash: tx.hash,
                    nonce: tx.nonce,
                    max_fee_per_gas: tx.max_fee_per_gas,
                    priority_fee_per_gas: tx.priority_fee_per_gas,
                };
                match relayer.tx_state(&sent).await {
                    Ok(TxState::Succeeded) => return Ok(accepted(tx.hash, found.created_at)),
                    // Just sent: waiting is all there is to do. Older: stuck (fees below what
                    // blocks take) or lost before the node saw it — replace it at its nonce.
                    Ok(TxState::Unmined)
                        if chrono::Utc::now() - found.created_at < REPLACE_AFTER =>
                    {
                        return Ok(accepted(tx.hash, found.created_at));
                    }
                    Ok(TxState::Unmined) => replace = Some((found.row_id, sent, found.created_at)),
                    Ok(TxState::Dead) => {
                        cancellations::fail(&conn, merchant, found.row_id, "never mined").await?;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cancellation: chain unreachable");
                        return Err(chain_unreachable());
                    }
                }
            }
            None if chrono::Utc::now() - found.created_at > ABANDONED_SENDING => {
                cancellations::fail(&conn, merchant, found.row_id, "abandoned before signing")
                    .await?;
            }
            None => {
                return Err(ApiError::Conflict {
                    code: "cancellation_in_progress",
                    message: "a cancellation of this subscription is being sent; retry shortly"
                        .into(),
                    param: None,
                });
            }
        }
    }
    relayer.ensure_funded().await?;
    let (row_id, replace, requested_at) = match replace {
        Some((row_id, sent, at)) => (row_id, Some(sent), at),
        None => {
            let inserted = cancellations::insert(
                &conn,
                merchant,
                chain_id,
                row.onchain_id,
                row.id.as_str(),
                at_period_end,
            )
            .await?;
            let Some(new) = inserted else {
                return Err(ApiError::Conflict {
                    code: "cancellation_in_progress",
                    message: "a cancellation of this subscription is being sent; retry shortly"
                        .into(),
                    param: None,
                });
            };
            (new.row_id, None, new.created_at)
        }
    };
    drop(conn);
    let onchain_id = u64::try_from(row.onchain_id)
        .map_err(|_| ApiError::Internal(format!("subscription {} has a negative id", row.id)))?;
    let outcome = relayer
        .cancel(
            &ctx.pool,
            onchain_id,
            at_period_end,
            replace,
            Journal::Cancellation {
                scope: merchant,
                row_id,
            },
        )
        .await;
    match outcome {
        Ok(sent) => Ok(accepted(sent.hash, requested_at)),
        Err(e) => {
            let conn = ctx.pool.get().await?;
            let (why, err) = match e {
                CancelError::Refused(Refusal::NotLive) => ("not live on chain", terminal()),
                CancelError::Refused(Refusal::AlreadyCancelling) => {
                    ("already cancelling on chain", already_cancelling())
                }
                CancelError::Refused(Refusal::NotAuthorized) => (
                    "the operator may not act for this plan",
                    ApiError::Conflict {
                        code: "subscription_not_cancellable",
                        message: "this subscription's plan was not created through the \
                                  service, so only the merchant's or the subscriber's wallet \
                                  can cancel it"
                            .into(),
                        param: None,
                    },
                ),
                CancelError::Unavailable(detail) => {
                    tracing::warn!(error = %detail, "cancellation: not sent");
                    ("not sent", chain_unreachable())
                }
            };
            // A replacement that failed leaves the earlier transaction as it was: it may
            // still be mined, so its row stays live.
            if replace.is_none() || !matches!(err, ApiError::Dependency { .. }) {
                cancellations::fail(&conn, merchant, row_id, why).await?;
            }
            Err(err)
        }
    }
}

fn chain_unreachable() -> ApiError {
    ApiError::Dependency {
        code: "chain_unavailable",
        message: "the chain could not be reached; nothing was sent — retry later".into(),
    }
}
