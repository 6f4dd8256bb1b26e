//! Refund requests (`POST /api/v1/subscriptions/{id}/refunds`): the transactions the
//! merchant's own wallet sends to refund all or part of a subscription's latest charged
//! period through the contract. The API never holds merchant funds or keys: it reads the
//! period, what was paid for it and what is refunded already from the contract, checks the
//! amount against them, and hands back the calls (an `approve` first when the wallet's
//! allowance to the contract is short). The refund itself then comes back as a
//! `subscription.refunded` event like any other.

use alloy::primitives::{Address, U256};
use alloy::providers::DynProvider;
use alloy::sol_types::SolCall;
use chainsub_abi::{MockUSDC, SubscriptionManager};
use chainsub_core::{Amount, SubscriptionId};
use serde::Serialize;

use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::merchants::Merchant;
use crate::pages::checkout::{TxRequest, units};

/// What the merchant asked for.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    pub amount: Amount,
    /// Also cancel the subscription at once (when it is live).
    pub cancel: bool,
}

/// One transaction of a refund request, in order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefundStep {
    /// `approve` or `refund`.
    pub step: &'static str,
    pub label: String,
    pub tx: TxRequest,
}

/// The answer: the period it refunds, the limits read from the contract, and the calls.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefundRequest {
    pub object: &'static str,
    pub subscription_id: SubscriptionId,
    pub period: u32,
    pub amount: String,
    pub currency: &'static str,
    /// Paid for the period (its charge and any proration) and refunded of it so far.
    pub paid: String,
    pub refunded: String,
    pub cancel: bool,
    /// The merchant's wallet: it sends the transactions and pays the refund.
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub from: Address,
    pub chain_id: chainsub_core::ChainId,
    /// The wallet's USDC balance is below the refund: the `refund` call would revert.
    pub insufficient_balance: bool,
    pub steps: Vec<RefundStep>,
}

/// The refund request for `merchant`'s subscription `id`. 404 for an unknown or another
/// merchant's id; 409 `nothing_to_refund` when nothing of its latest period is left to
/// refund (a trial, or refunded in full); 400 when `amount` is more than what is left.
pub async fn request(
    ctx: &Ctx,
    provider: Option<&DynProvider>,
    merchant: &Merchant,
    id: &str,
    asked: Asked,
) -> Result<RefundRequest> {
    let not_found = || ApiError::not_found("subscription", Some("id"));
    let id = SubscriptionId::parse(id).ok_or_else(not_found)?;
    let cfg = &ctx.cfg;
    let row = {
        let conn = ctx.pool.get().await?;
        chainsub_store::subscriptions::get(&conn, merchant, cfg.chain_id, &id)
            .await?
            .ok_or_else(not_found)?
    };
    let provider = crate::pages::checkout::chain(provider)?;
    let wallet = merchant.wallet();
    let manager = SubscriptionManager::new(cfg.contract_address, provider.clone());
    let token = MockUSDC::new(cfg.usdc_address, provider.clone());
    let onchain = U256::from(row.onchain_id as u64);
    let (sub, allowance, balance) = tokio::try_join!(
        async { manager.getSubscription(onchain).call().await },
        async { token.allowance(wallet, cfg.contract_address).call().await },
        async { token.balanceOf(wallet).call().await },
    )
    .map_err(|e| {
        tracing::warn!(error = %e, "refund request: chain read failed");
        ApiError::Unavailable("the chain RPC could not be reached".into())
    })?;
    if sub.merchant != wallet {
        // The index and the chain disagree about whose it is (a reorganization).
        return Err(ApiError::Conflict {
            code: Code::SubscriptionChanged,
            message: "the chain shows another subscription under this id; retry shortly".into(),
            param: None,
        });
    }
    let (paid, refunded) = (U256::from(sub.paid), U256::from(sub.refunded));
    let left = paid.saturating_sub(refunded);
    if sub.period == 0 || left.is_zero() {
        return Err(ApiError::Conflict {
            code: Code::NothingToRefund,
            message: if sub.period == 0 {
                "nothing was charged yet: the subscription is in its free trial".into()
            } else {
                format!("period {} is refunded in full", sub.period)
            },
            param: None,
        });
    }
    let amount = U256::from(asked.amount.base_units());
    if amount > left {
        return Err(ApiError::invalid(
            "amount",
            format!(
                "at most {} USDC of period {} is left to refund (paid {}, refunded {})",
                units(left),
                sub.period,
                units(paid),
                units(refunded)
            ),
        ));
    }
    let mut steps = Vec::new();
    if allowance < amount {
        steps.push(RefundStep {
            step: "approve",
            label: format!(
                "Allow the subscription contract to pay {} USDC",
                units(amount)
            ),
            tx: TxRequest::call(
                wallet,
                cfg.usdc_address,
                MockUSDC::approveCall {
                    spender: cfg.contract_address,
                    amount: allowance.saturating_add(amount),
                }
                .abi_encode(),
            ),
        });
    }
    steps.push(RefundStep {
        step: "refund",
        label: format!(
            "Refund {} USDC of period {}{}",
            units(amount),
            sub.period,
            if asked.cancel { " and cancel" } else { "" }
        ),
        tx: TxRequest::call(
            wallet,
            cfg.contract_address,
            SubscriptionManager::refundCall {
                subscriptionId: onchain,
                period: sub.period,
                amount,
                cancelSubscription: asked.cancel,
            }
            .abi_encode(),
        ),
    });
    Ok(RefundRequest {
        object: "refund_request",
        subscription_id: id,
        period: sub.period,
        amount: units(amount),
        currency: chainsub_core::CURRENCY,
        paid: units(paid),
        refunded: units(refunded),
        cancel: asked.cancel,
        from: wallet,
        chain_id: cfg.chain_id,
        insufficient_balance: balance < amount,
        steps,
    })
}
