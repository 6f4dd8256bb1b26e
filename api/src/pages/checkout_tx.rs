//! The checkout page's transaction endpoint (`GET /checkout/{merchantCode}/{planSlug}/tx`):
//! the wallet's state on chain and the transaction requests it signs next — a permit or an
//! approval when its allowance is short, then `subscribe` with the terms of the link.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::DynProvider;

use super::checkout::{self, LinkQuery, SignedPermit};
use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::reply::Resp;

/// What the page asks for, besides the link.
#[derive(Debug)]
pub struct Asked {
    /// The customer's wallet.
    pub from: Address,
    /// `permit=off`: the wallet cannot sign typed data; approve + subscribe instead.
    pub permit_off: bool,
    /// A permit the wallet has signed, to be used in `subscribeWithPermit`.
    pub signed: Option<SignedPermit>,
}

/// The wallet's state and its next transaction requests for the link `code`/`slug`/`query`.
pub async fn answer(
    ctx: &Ctx,
    provider: Option<&DynProvider>,
    code: &str,
    slug: &str,
    query: &LinkQuery,
    asked: Asked,
) -> Result<Resp> {
    let Asked {
        from,
        permit_off,
        signed,
    } = asked;
    let link = checkout::resolve(ctx, code, slug, query).await?;
    if link.deactivated {
        return Err(checkout::plan_inactive());
    }
    let plan_onchain_id = link.plan_onchain_id.ok_or_else(|| ApiError::Conflict {
        code: Code::PlanNotActive,
        message: "this plan is not on chain yet (or not confirmed); try again in a few minutes"
            .into(),
        param: None,
    })?;
    let provider = checkout::chain(provider)?;
    let cfg = &ctx.cfg;
    let (_, state) = tokio::try_join!(
        checkout::check_plan_on_chain(provider, cfg.contract_address, &link, plan_onchain_id),
        checkout::wallet_state(
            provider,
            cfg.usdc_address,
            cfg.contract_address,
            plan_onchain_id,
            from,
        )
    )?;
    // The reference is bound to this wallet, and recorded before the wallet can use it:
    // the indexer resolves customerExternalId only for a subscription from this wallet.
    let customer_ref = B256::from(crate::checkout::wallet_customer_ref(
        cfg.checkout_signing_secret.expose(),
        link.merchant.public_id.as_str(),
        link.customer.as_deref(),
        from,
    ));
    if let Some(customer) = link.customer.as_deref() {
        let conn = ctx.pool.get().await?;
        chainsub_store::checkouts::record_wallet_ref(
            &conn,
            &link.merchant,
            customer,
            from,
            customer_ref,
        )
        .await?;
    }
    let short = state.allowance
        < checkout::requested_allowance(link.amount, cfg.pages.checkout_allowance_periods);
    let domain = if short && !permit_off {
        checkout::permit_domain(provider, cfg.chain_id, cfg.usdc_address, from).await
    } else {
        None
    };
    let allowance = match (&signed, &domain) {
        // The allowance suffices (or the page asked for approve): a signature is not needed.
        _ if !short || permit_off => checkout::Allowance::Approve,
        (Some(signed), Some(domain)) => {
            if signed.value < U256::from(link.amount) {
                return Err(ApiError::invalid(
                    "permitValue",
                    "`permitValue` does not cover one payment",
                ));
            }
            let vrs = checkout::check_permit(domain, from, cfg.contract_address, signed)?;
            checkout::Allowance::Signed(signed, vrs)
        }
        (Some(_), None) => {
            return Err(ApiError::Conflict {
                code: Code::PermitUnsupported,
                message: "the token does not take a permit here; approve instead (permit=off)"
                    .into(),
                param: Some("permitSignature".into()),
            });
        }
        (None, Some(domain)) => checkout::Allowance::Permit(domain),
        (None, None) => checkout::Allowance::Approve,
    };
    Ok(Resp::view(&checkout::plan_transactions(
        cfg.chain_id,
        cfg.usdc_address,
        cfg.contract_address,
        &link,
        plan_onchain_id,
        cfg.pages.checkout_allowance_periods,
        from,
        customer_ref,
        &state,
        allowance,
    )))
}
