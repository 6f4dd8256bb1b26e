//! A merchant's cancellation through the API (`POST /api/v1/subscriptions/{id}/cancel`): the
//! relayer sends `cancel` or `cancelAtPeriodEnd` for the merchant — the contract lets the
//! operator act on plans it created — journaled per request in `subscription_cancellations`,
//! so a retry reports, re-sends or replaces the one transaction instead of sending a second.

use crate::idempotency::Run;
use alloy::primitives::B256;
use chainsub_core::{CancelAt, OnchainPlanId, OnchainSubscriptionId};
use chainsub_core::{SubscriptionId, SubscriptionStatus};
use chainsub_store::subscriptions as store;
use chainsub_views::{CancellationView, SubscriptionView};
use warp::http::StatusCode;

use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::reply::Resp;

/// A `sending` request older than this was left by a process that died before signing:
/// nothing of it reached the chain, so a new request may take its place. A live request never
/// stays `sending` this long: its send is bounded by [`SEND_TIMEOUT`], and a request whose
/// row was taken over cannot journal, hence cannot broadcast.
const ABANDONED_SENDING_SECS: f64 = 60.0;

/// Bound on one request's work with the chain (estimate, lock, sign, journal, broadcast).
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// A request's unmined transaction is replaced (same nonce, +25 % fees) only when a new
/// request comes this long after the last one was signed; sooner, its bytes are sent again.
const REPLACE_AFTER_SECS: f64 = 30.0;

/// At most this many transactions per request (the first and its replacements): fees grow
/// by 25 % per replacement, and a caller retrying in a loop must not drain the relayer.
const MAX_SENDS: i32 = 4;

fn terminal() -> ApiError {
    ApiError::Conflict {
        code: Code::SubscriptionTerminal,
        message: "the subscription is already cancelled or ended".into(),
        param: None,
    }
}

fn already_cancelling() -> ApiError {
    ApiError::Conflict {
        code: Code::SubscriptionAlreadyCancelling,
        message: "the subscription is already set to cancel at period end".into(),
        param: Some("atPeriodEnd".into()),
    }
}

/// The 409 of a request that finds the same cancellation being sent by another.
const BEING_SENT: &str = "a cancellation of this subscription is being sent; retry shortly";

fn in_progress(message: &str) -> ApiError {
    ApiError::Conflict {
        code: Code::CancellationInProgress,
        message: message.into(),
        param: None,
    }
}

/// One cancellation request. [`Run::Again`]: the request runs again under its
/// `Idempotency-Key` because its stored answer was pending; once the cancellation it sent is
/// on chain and indexed, it answers 200 `completed` instead of the 409 a new request gets.
pub async fn cancel(
    ctx: &Ctx,
    merchant: &chainsub_store::MerchantScope,
    id: &str,
    when: CancelAt,
    run: Run,
) -> Result<Resp> {
    use super::{CancelError, Journal, Refusal, Sent, TxState};
    use chainsub_sender::Broadcast;
    use chainsub_store::cancellations;

    let at_period_end = when.at_period_end();
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let sub_id = SubscriptionId::parse(id).ok_or_else(not_found)?;
    let chain_id = ctx.cfg.chain_id;
    let conn = ctx.pool.get().await?;
    let row = store::get(&conn, merchant, chain_id, &sub_id)
        .await?
        .ok_or_else(not_found)?;
    let Some(relayer) = &ctx.relayer else {
        return Err(ApiError::Dependency {
            code: Code::RelayerUnavailable,
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
    let unreachable = |e: String| {
        tracing::warn!(error = %e, "cancellation: chain unreachable");
        chain_unreachable()
    };
    let bad_row = |what| ApiError::Internal(format!("subscription {} has no {what} id", row.id));
    let onchain_id =
        OnchainSubscriptionId::from_db(row.onchain_id).ok_or_else(|| bad_row("on-chain"))?;
    let plan_onchain_id =
        OnchainPlanId::from_db(row.plan_onchain_id).ok_or_else(|| bad_row("plan"))?;
    let done = if at_period_end {
        row.cancel_at_period_end || row.status == SubscriptionStatus::Ended
    } else {
        row.status == SubscriptionStatus::Cancelled
    };
    if run == Run::Again
        && done
        && let Some((tx, requested_at)) =
            cancellations::last_sent(&conn, merchant, chain_id, row.onchain_id, when).await?
    {
        return Ok(Resp::json_view(
            StatusCode::OK,
            &CancellationView {
                object: "subscription_cancellation",
                subscription_id: &row.id,
                at_period_end,
                status: "completed",
                transaction_hash: tx,
                requested_at,
                subscription: SubscriptionView::from(&row),
            },
        ));
    }
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
    if at_period_end
        && let Some(now) =
            cancellations::live(&conn, merchant, chain_id, row.onchain_id, CancelAt::Now).await?
    {
        // A cancellation at once is on its way: cancelling at period end would revert.
        let pending = match &now.tx {
            Some(tx) => {
                relayer
                    .tx_state(&Sent::from(tx), onchain_id, CancelAt::Now)
                    .await
                    .map_err(unreachable)?
                    != TxState::Dead
            }
            None => now.age_secs <= ABANDONED_SENDING_SECS,
        };
        if pending {
            return Err(in_progress(
                "this subscription is being cancelled at once; its event follows",
            ));
        }
    }
    // A request already under way for this subscription and kind: report it, send its bytes
    // again, or replace its transaction at its nonce — never a second transaction beside it.
    let mut replace = None;
    let existing = cancellations::live(&conn, merchant, chain_id, row.onchain_id, when).await?;
    if let Some(found) = existing {
        match &found.tx {
            Some(tx) => match relayer
                .tx_state(&Sent::from(tx), onchain_id, when)
                .await
                .map_err(unreachable)?
            {
                TxState::Succeeded => return Ok(accepted(tx.hash, found.created_at)),
                TxState::Unmined
                    if found.since_update_secs < REPLACE_AFTER_SECS || found.sends >= MAX_SENDS =>
                {
                    // Pending, or lost before the node saw it: the same bytes again.
                    return match relayer.rebroadcast(&tx.raw).await.map_err(unreachable)? {
                        Broadcast::Accepted => Ok(accepted(tx.hash, found.created_at)),
                        // Since the read above, its nonce went to another transaction or a
                        // replacement entered the pool: the next request reads where it stands.
                        Broadcast::NonceTooLow | Broadcast::Underpriced => {
                            Err(in_progress(BEING_SENT))
                        }
                        Broadcast::Rejected(why) => Err(unreachable(format!("rebroadcast: {why}"))),
                    };
                }
                TxState::Unmined => replace = Some((found.row_id, tx.clone(), found.created_at)),
                TxState::Dead => {
                    // Only if it still names that transaction (its own request may have
                    // replaced it meanwhile): never a second request beside a live one.
                    let closed = cancellations::fail_if(
                        &conn,
                        merchant,
                        found.row_id,
                        Some(tx.hash),
                        "never mined",
                    )
                    .await?;
                    if !closed {
                        return Err(in_progress(BEING_SENT));
                    }
                }
            },
            None if found.age_secs > ABANDONED_SENDING_SECS => {
                let closed = cancellations::fail_if(
                    &conn,
                    merchant,
                    found.row_id,
                    None,
                    "abandoned before signing",
                )
                .await?;
                if !closed {
                    return Err(in_progress(BEING_SENT));
                }
            }
            None => {
                return Err(in_progress(BEING_SENT));
            }
        }
    }
    relayer.ready_for(&ctx.pool, merchant).await?;
    let (row_id, previous, requested_at) = match replace {
        Some((row_id, tx, at)) => (row_id, Some(tx), at),
        None => {
            let inserted = cancellations::insert(
                &conn,
                merchant,
                chain_id,
                row.onchain_id,
                row.id.as_str(),
                when,
            )
            .await?;
            let Some(new) = inserted else {
                return Err(in_progress(BEING_SENT));
            };
            (new.row_id, None, new.created_at)
        }
    };
    drop(conn);
    // The send runs as a task of its own: a slow chain ends this request's wait, never the
    // send midway (the relayer's nonce lock is held until the node acknowledged it).
    let send = {
        let (ctx, scope) = (ctx.clone(), merchant.clone());
        let expected = (merchant.wallet(), row.subscriber, plan_onchain_id);
        let replace = previous.as_ref().map(Sent::from);
        tokio::spawn(async move {
            let Some(relayer) = &ctx.relayer else {
                return Err(CancelError::NotSent("no relayer".into()));
            };
            let journal = Journal::Cancellation {
                scope: &scope,
                row_id,
            };
            relayer
                .cancel(&ctx.pool, onchain_id, expected, when, replace, journal)
                .await
        })
    };
    let outcome = match tokio::time::timeout(SEND_TIMEOUT, send).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(join)) => Err(CancelError::MaybeSent(format!(
            "the send task failed: {join}"
        ))),
        // Maybe journaled, maybe broadcast: the row says; the next request or the re-driver
        // carries it on.
        Err(_) => Err(CancelError::MaybeSent(
            "no answer from the chain in time".into(),
        )),
    };
    let e = match outcome {
        Ok(sent) => return Ok(accepted(sent.hash, requested_at)),
        // Not replaced yet (too soon, too often, or over the fee cap): the journaled
        // transaction is still the request's, pending.
        Err(CancelError::Held(why)) => match &previous {
            Some(tx) => {
                tracing::info!(reason = %why, "cancellation: the pending transaction is not replaced");
                return Ok(accepted(tx.hash, requested_at));
            }
            None => CancelError::NotSent(why),
        },
        Err(e) => e,
    };
    let conn = ctx.pool.get().await?;
    let replacing = previous.is_some();
    // Nothing of this request is in the pool: its row closes. A replacement's row stays: the
    // earlier transaction is still journaled and may be mined.
    let close = async |why: &'static str| -> Result<()> {
        if !replacing {
            cancellations::fail(&conn, merchant, row_id, why).await?;
        }
        Ok(())
    };
    Err(match e {
        CancelError::Refused(Refusal::NotLive) => {
            close("not live on chain").await?;
            terminal()
        }
        CancelError::Refused(Refusal::AlreadyCancelling) => {
            close("already cancelling on chain").await?;
            already_cancelling()
        }
        CancelError::Refused(Refusal::NotAuthorized) => {
            close("the operator may not act for this plan").await?;
            ApiError::Conflict {
                code: Code::SubscriptionNotCancellable,
                message: "this subscription's plan was not created through the service, so \
                          only the merchant's or the subscriber's wallet can cancel it"
                    .into(),
                param: None,
            }
        }
        CancelError::Refused(Refusal::NotOperator) => {
            close("the relayer is not the operator").await?;
            tracing::error!("cancellation: RELAYER_PRIVATE_KEY is not the contract's operator");
            ApiError::Dependency {
                code: Code::RelayerNotOperator,
                message: "the service's relayer cannot act for merchants right now; the \
                          operator has been alerted — retry later"
                    .into(),
            }
        }
        CancelError::Refused(Refusal::Changed) => {
            close("the id is another subscription on chain").await?;
            ApiError::Conflict {
                code: Code::SubscriptionChanged,
                message: "the chain no longer shows this subscription as indexed (a \
                          reorganization); nothing was sent — retry once the index has caught up"
                    .into(),
                param: None,
            }
        }
        CancelError::NotSent(detail) | CancelError::Held(detail) => {
            close("not sent").await?;
            unreachable(detail)
        }
        CancelError::NodeRefused(detail, refused) => {
            tracing::warn!(error = %detail, "cancellation: the node refused the transaction");
            match &previous {
                // Its replacement never entered the pool: the row names the earlier one again.
                Some(tx) => cancellations::restore(&conn, merchant, row_id, refused, tx).await?,
                None => cancellations::fail(&conn, merchant, row_id, "refused by the node").await?,
            }
            chain_unreachable()
        }
        CancelError::MaybeSent(detail) => {
            tracing::warn!(error = %detail, "cancellation: broadcast unanswered");
            ApiError::Dependency {
                code: Code::ChainUnavailable,
                message: "the chain did not answer; the cancellation may have been sent — \
                          retry: a retry never sends a second one"
                    .into(),
            }
        }
    })
}

fn chain_unreachable() -> ApiError {
    ApiError::Dependency {
        code: Code::ChainUnavailable,
        message: "the chain could not be reached; nothing was sent — retry later".into(),
    }
}
