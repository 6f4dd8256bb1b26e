//! The checkout page's server side: resolving a signed link to its plan and customer
//! reference, reading the customer's wallet state on chain, and encoding the `approve` and
//! `subscribe` transactions with alloy so the page needs no ABI library.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::sol_types::SolCall;
use chainsub_abi::{MockUSDC, SubscriptionManager};
use serde_json::{Value, json};

use crate::checkout as link_sig;
use crate::ctx::Ctx;
use crate::domain::format_units;
use crate::http::error::{ApiError, Result};
use chainsub_store::checkouts::LinkMerchant;

/// A checkout link whose signature checked out, resolved to its plan.
#[derive(Debug, Clone)]
pub struct Link {
    pub merchant: LinkMerchant,
    pub plan_public_id: String,
    pub plan_name: String,
    /// USDC base units per period.
    pub amount: u128,
    pub interval: String,
    pub slug: String,
    /// The plan's reference on chain.
    pub plan_ref: B256,
    /// `None` while the plan is not (yet) indexed with `CONFIRMATIONS`.
    pub plan_onchain_id: Option<u64>,
    /// Deactivated on chain: no new subscriptions.
    pub deactivated: bool,
    pub customer: Option<String>,
}

/// Checks the link's `sig` before anything touches the database: a forged or edited link
/// learns nothing about which merchants or plans exist.
pub fn verify_link(
    ctx: &Ctx,
    code: &str,
    slug: &str,
    customer: Option<&str>,
    sig: Option<&str>,
) -> Result<()> {
    let Some(sig) = sig.filter(|s| !s.is_empty()) else {
        return Err(ApiError::Invalid {
            code: "checkout_link_incomplete",
            message: "this checkout link has no signature; ask the merchant for a new link".into(),
            param: Some("sig".into()),
        });
    };
    let secret = ctx.cfg.checkout_signing_secret.expose();
    if !link_sig::verify(secret, code, slug, customer, sig) {
        return Err(ApiError::Forbidden {
            code: "checkout_signature_invalid",
            message: "this checkout link is not valid (it was changed or is not from this \
                      merchant); ask the merchant for a new link"
                .into(),
        });
    }
    Ok(())
}

/// Verifies and resolves a link: 400 without `sig`, 403 with a wrong one, 404 for an unknown
/// merchant or plan.
pub async fn resolve(
    ctx: &Ctx,
    code: &str,
    slug: &str,
    customer: Option<&str>,
    sig: Option<&str>,
) -> Result<Link> {
    verify_link(ctx, code, slug, customer, sig)?;
    let conn = ctx.pool.get().await?;
    let stored_link = chainsub_store::checkouts::resolve(
        &conn,
        code,
        slug,
        ctx.cfg.chain_id as i64,
        ctx.cfg.confirmations as i64,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("checkout link", None))?;
    let amount: u128 = stored_link.amount.parse().map_err(|_| {
        ApiError::Internal(format!(
            "plan amount {} is not an integer",
            stored_link.amount
        ))
    })?;
    drop(conn);
    let chainsub_store::checkouts::Link {
        merchant,
        plan_public_id,
        plan_name,
        interval,
        slug,
        plan_ref,
        plan_onchain_id,
        deactivated,
        ..
    } = stored_link;
    Ok(Link {
        merchant,
        plan_public_id,
        plan_name,
        amount,
        interval,
        slug,
        plan_ref,
        plan_onchain_id: plan_onchain_id.and_then(|id| u64::try_from(id).ok()),
        deactivated,
        customer: customer.map(str::to_string),
    })
}

/// The allowance the page asks for: `periods` charges of the plan amount.
pub fn requested_allowance(amount: u128, periods: u32) -> U256 {
    U256::from(amount) * U256::from(periods)
}

/// What the chain says about the customer's wallet for this plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalletState {
    pub balance: U256,
    pub allowance: U256,
    /// `liveSubscriptionOf(planId, wallet)`: non-zero when already subscribed.
    pub live_subscription: U256,
}

/// A provider for reads only (no signer): the page never sends anything itself.
pub fn read_provider(rpc_url: &str) -> Result<DynProvider> {
    let url = rpc_url
        .parse()
        .map_err(|e| ApiError::Internal(format!("RPC_URL: {e}")))?;
    Ok(ProviderBuilder::new().connect_http(url).erased())
}

/// Reads balance, allowance and the live subscription in parallel.
pub async fn wallet_state(
    provider: &DynProvider,
    usdc: Address,
    manager: Address,
    plan_onchain_id: u64,
    wallet: Address,
) -> Result<WalletState> {
    let token = MockUSDC::new(usdc, provider.clone());
    let mgr = SubscriptionManager::new(manager, provider.clone());
    let balance = token.balanceOf(wallet);
    let allowance = token.allowance(wallet, manager);
    let live = mgr.liveSubscriptionOf(U256::from(plan_onchain_id), wallet);
    let (balance, allowance, live) =
        tokio::try_join!(balance.call(), allowance.call(), live.call()).map_err(|e| {
            tracing::warn!(error = %e, "checkout: chain read failed");
            ApiError::Unavailable("the chain RPC could not be reached".into())
        })?;
    Ok(WalletState {
        balance,
        allowance,
        live_subscription: live,
    })
}

/// Reads plan `plan_onchain_id` on chain (`getPlan`, at the latest block) and refuses, with
/// no transaction, unless it is the link's: the merchant's wallet, the amount, the reference
/// and still active. The index should never disagree; this check is what makes a wrong
/// index (or a reorg the index has not caught up with) unable to send a customer's payment
/// elsewhere.
pub async fn check_plan_on_chain(
    provider: &DynProvider,
    manager: Address,
    link: &Link,
    plan_onchain_id: u64,
) -> Result<()> {
    let plan = SubscriptionManager::new(manager, provider.clone())
        .getPlan(U256::from(plan_onchain_id))
        .call()
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "checkout: getPlan failed");
            ApiError::Unavailable("the chain RPC could not be reached".into())
        })?;
    if plan.merchant != link.merchant.wallet
        || plan.amount != U256::from(link.amount)
        || plan.planRef != link.plan_ref
    {
        tracing::error!(
            plan = plan_onchain_id,
            expected_merchant = %link.merchant.wallet,
            chain_merchant = %plan.merchant,
            "checkout: the on-chain plan differs from the link's plan; refused"
        );
        metrics::counter!("api_checkout_plan_mismatch_total").increment(1);
        return Err(ApiError::Conflict {
            code: "plan_mismatch",
            message: "the plan on chain does not match this checkout (merchant, amount or \
                      reference); the service will not prepare a payment to it"
                .into(),
            param: None,
        });
    }
    if !plan.active {
        return Err(plan_inactive());
    }
    Ok(())
}

/// The 409 for a plan deactivated on chain.
pub fn plan_inactive() -> ApiError {
    ApiError::Conflict {
        code: "plan_inactive",
        message: "this plan no longer accepts new subscriptions".into(),
        param: None,
    }
}

/// The chain id the wallet must be on, as `0x…` for EIP-1193 calls.
pub fn chain_id_hex(chain_id: u64) -> String {
    format!("{chain_id:#x}")
}

fn tx(from: Address, to: Address, data: Vec<u8>) -> Value {
    json!({
        "from": from.to_checksum(None),
        "to": to.to_checksum(None),
        "data": format!("0x{}", hex::encode(data)),
        "value": "0x0",
    })
}

/// Everything the page needs to act for `from`: the wallet's state, and the transaction
/// requests still to send, in order (`approve` only when the allowance is short).
#[allow(clippy::too_many_arguments)]
pub fn plan_transactions(
    chain_id: u64,
    usdc: Address,
    manager: Address,
    link: &Link,
    plan_onchain_id: u64,
    periods: u32,
    from: Address,
    customer_ref: B256,
    state: &WalletState,
) -> Value {
    let amount = U256::from(link.amount);
    let wanted = requested_allowance(link.amount, periods);
    let mut steps = Vec::new();
    if state.allowance < wanted {
        // `approve` replaces the allowance, which every subscription of this wallet to this
        // contract shares: add to it, so another plan's renewals keep their budget.
        let data = MockUSDC::approveCall {
            spender: manager,
            amount: state.allowance.saturating_add(wanted),
        }
        .abi_encode();
        steps.push(json!({
            "step": "approve",
            "label": format!(
                "Allow {} USDC{} ({periods} payments)",
                units(wanted),
                if state.allowance.is_zero() { "" } else { " more" }
            ),
            "tx": tx(from, usdc, data),
        }));
    }
    // The terms the page shows travel with the call: the contract reverts if the plan pays
    // another merchant or another amount (SubscriptionManager v2).
    let data = SubscriptionManager::subscribeCall {
        planId: U256::from(plan_onchain_id),
        merchant: link.merchant.wallet,
        amount,
        customerRef: customer_ref,
    }
    .abi_encode();
    steps.push(json!({
        "step": "subscribe",
        "label": format!("Subscribe and pay {} USDC now", units(amount)),
        "tx": tx(from, manager, data),
    }));
    // The contract's number (public on chain): the page shows it to the wallet's owner. The
    // API's opaque `sub_…` id needs the index, which may not have the subscription yet.
    let already = (!state.live_subscription.is_zero()).then(|| state.live_subscription.to_string());
    json!({
        "object": "checkout_transactions",
        "chainId": chain_id,
        "chainIdHex": chain_id_hex(chain_id),
        "from": from.to_checksum(None),
        "planOnchainId": plan_onchain_id,
        "amount": units(amount),
        "balance": units(state.balance),
        "allowance": units(state.allowance),
        "requestedAllowance": units(wanted),
        "insufficientBalance": state.balance < amount,
        "alreadySubscribed": already,
        "steps": steps,
    })
}

/// Base units as a USDC decimal string (uint256-safe: values beyond u128 are shown raw).
fn units(v: U256) -> String {
    u128::try_from(v).map_or_else(|_| v.to_string(), format_units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link() -> Link {
        Link {
            merchant: LinkMerchant {
                public_id: chainsub_core::MerchantId::parse("mer_1").unwrap(),
                wallet: Address::repeat_byte(0x22),
                code: "abcdefgh".into(),
            },
            plan_public_id: "plan_1".into(),
            plan_name: "Pro".into(),
            amount: 9_990_000,
            interval: "month".into(),
            slug: "pro".into(),
            plan_ref: B256::repeat_byte(0x5e),
            plan_onchain_id: Some(7),
            deactivated: false,
            customer: Some("cust_1".into()),
        }
    }

    fn state(balance: u128, allowance: u128, live: u64) -> WalletState {
        WalletState {
            balance: U256::from(balance),
            allowance: U256::from(allowance),
            live_subscription: U256::from(live),
        }
    }

    const USDC: Address = Address::repeat_byte(0x01);
    const MGR: Address = Address::repeat_byte(0x02);
    const FROM: Address = Address::repeat_byte(0x03);

    fn data_of(step: &Value) -> Vec<u8> {
        hex::decode(
            step["tx"]["data"]
                .as_str()
                .unwrap()
                .trim_start_matches("0x"),
        )
        .unwrap()
    }

    #[test]
    fn short_allowance_gets_an_approve_for_all_periods_before_subscribe() {
        let v = plan_transactions(
            31337,
            USDC,
            MGR,
            &link(),
            7,
            12,
            FROM,
            B256::repeat_byte(0xab),
            &state(50_000_000, 0, 0),
        );
        let steps = v["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0]["step"], "approve");
        assert_eq!(steps[0]["tx"]["to"], USDC.to_checksum(None));
        let approve = MockUSDC::approveCall::abi_decode(&data_of(&steps[0])).unwrap();
        assert_eq!(approve.spender, MGR);
        assert_eq!(approve.amount, U256::from(9_990_000u64 * 12));
        let sub = SubscriptionManager::subscribeCall::abi_decode(&data_of(&steps[1])).unwrap();
        assert_eq!(sub.planId, U256::from(7));
        assert_eq!(sub.merchant, Address::repeat_byte(0x22));
        assert_eq!(sub.amount, U256::from(9_990_000u64));
        assert_eq!(sub.customerRef, B256::repeat_byte(0xab));
        assert_eq!(steps[1]["tx"]["to"], MGR.to_checksum(None));
        assert_eq!(v["requestedAllowance"], "119.88");
        assert_eq!(v["insufficientBalance"], false);
        assert_eq!(v["alreadySubscribed"], Value::Null);
        assert_eq!(v["chainIdHex"], "0x7a69");
    }

    #[test]
    fn approve_adds_to_an_allowance_other_subscriptions_use() {
        let v = plan_transactions(
            1,
            USDC,
            MGR,
            &link(),
            7,
            12,
            FROM,
            B256::repeat_byte(0xab),
            &state(1, 5_000_000, 0),
        );
        let approve = MockUSDC::approveCall::abi_decode(&data_of(&v["steps"][0])).unwrap();
        assert_eq!(approve.amount, U256::from(5_000_000u64 + 9_990_000 * 12));
        assert_eq!(
            v["steps"][0]["label"],
            "Allow 119.88 USDC more (12 payments)"
        );
    }

    #[test]
    fn enough_allowance_skips_approve_and_flags_balance_and_live_subscription() {
        let v = plan_transactions(
            1,
            USDC,
            MGR,
            &link(),
            7,
            12,
            FROM,
            B256::repeat_byte(0xab),
            &state(1, 200_000_000, 5),
        );
        let steps = v["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0]["step"], "subscribe");
        assert_eq!(v["insufficientBalance"], true);
        assert_eq!(v["alreadySubscribed"], "5");
    }
}
