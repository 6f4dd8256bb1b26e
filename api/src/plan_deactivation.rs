//! A plan's deactivation from the dashboard: the merchant's own wallet sends
//! `deactivatePlan(planId)` (the contract lets a plan's merchant deactivate it). The service
//! checks the plan is the merchant's and takes subscriptions as the index holds it, and hands
//! back the call; the plan reads `deactivated` once its `PlanDeactivated` is indexed.
//! Existing subscriptions of a deactivated plan renew as before; its checkout takes no new
//! ones.

use alloy::primitives::{Address, U256};
use alloy::sol_types::SolCall;
use chainsub_abi::SubscriptionManager;
use chainsub_core::PlanId;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::merchants::Merchant;
use crate::pages::checkout::TxRequest;

/// The answer: the plan and the one call the merchant's wallet sends.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeactivationRequest {
    pub object: &'static str,
    pub plan_id: PlanId,
    pub onchain_plan_id: i64,
    /// The merchant's wallet: the one that may send it.
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub from: Address,
    pub chain_id: chainsub_core::ChainId,
    pub tx: TxRequest,
}

/// The `deactivatePlan` call for `merchant`'s plan `id`: 404 for an unknown or another
/// merchant's plan, 409 `plan_not_active` before it is on chain, 409 `plan_inactive` once
/// it is deactivated.
pub async fn request(ctx: &Ctx, merchant: &Merchant, id: &str) -> Result<DeactivationRequest> {
    let plan = crate::routes::plans::find(ctx, merchant, id)
        .await?
        .ok_or_else(|| ApiError::not_found("plan", Some("id")))?;
    if plan.deactivated.is_some() {
        return Err(ApiError::Conflict {
            code: Code::PlanInactive,
            message: "the plan is already deactivated".into(),
            param: None,
        });
    }
    let onchain = match &plan.created_on_chain {
        Some(c) if plan.is_active() => c.onchain_id,
        _ => {
            return Err(ApiError::Conflict {
                code: Code::PlanNotActive,
                message: "the plan is not on chain yet: there is nothing to deactivate".into(),
                param: None,
            });
        }
    };
    let from = merchant.wallet();
    let call = SubscriptionManager::deactivatePlanCall {
        planId: U256::from(onchain as u64),
    };
    Ok(DeactivationRequest {
        object: "plan_deactivation",
        plan_id: plan.id,
        onchain_plan_id: onchain,
        from,
        chain_id: ctx.cfg.chain_id,
        tx: TxRequest::call(from, ctx.cfg.contract_address, call.abi_encode()),
    })
}
