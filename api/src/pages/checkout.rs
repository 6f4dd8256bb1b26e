//! The checkout page's server side: resolving a signed link to its plan and customer
//! reference, reading the customer's wallet state on chain, and encoding the `approve` and
//! `subscribe` transactions with alloy so the page needs no ABI library.

use alloy::primitives::{Address, B256, Signature, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::sol_types::{Eip712Domain, SolCall, SolStruct};
use chainsub_abi::{MockUSDC, Permit, SubscriptionManager};
use chainsub_core::ChainId;
use serde::Serialize;

use crate::checkout as link_sig;
use crate::ctx::Ctx;
use crate::domain::format_units;
use crate::http::codes::Code;
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
    /// Free days before the first charge (0: none), as the chain has the plan.
    pub trial_days: u16,
    pub customer: Option<String>,
}

/// A link's own query parameters, checked: `customer` (never empty), `expires` (unix
/// seconds) and `sig`.
#[derive(Debug, Clone)]
pub struct LinkQuery {
    pub customer: Option<String>,
    pub expires: Option<i64>,
    pub sig: String,
}

impl LinkQuery {
    /// The link's parameters of a query; the page's own parameters are for the caller.
    pub fn from_query(q: &[(String, String)]) -> Result<Self> {
        use crate::http::extract::param;
        for name in ["customer", "expires", "sig"] {
            if q.iter().filter(|(k, _)| k == name).count() > 1 {
                return Err(ApiError::invalid(name, format!("`{name}` is given twice")));
            }
        }
        let customer = match param(q, "customer") {
            None => None,
            Some(c) if c.trim().is_empty() => {
                return Err(ApiError::invalid(
                    "customer",
                    "`customer` is empty; ask the merchant for a new link",
                ));
            }
            Some(c) => Some(c.to_string()),
        };
        let expires = match param(q, "expires") {
            None => None,
            Some(e) => Some(e.parse::<i64>().ok().filter(|e| *e > 0).ok_or_else(|| {
                ApiError::invalid("expires", "`expires` must be a time in unix seconds")
            })?),
        };
        let Some(sig) = param(q, "sig").filter(|s| !s.is_empty()) else {
            return Err(ApiError::Invalid {
                code: Code::CheckoutLinkIncomplete,
                message: "this checkout link has no signature; ask the merchant for a new link"
                    .into(),
                param: Some("sig".into()),
            });
        };
        Ok(Self {
            customer,
            expires,
            sig: sig.to_string(),
        })
    }

    fn terms(&self) -> link_sig::LinkTerms<'_> {
        link_sig::LinkTerms {
            customer: self.customer.as_deref(),
            expires: self.expires,
        }
    }

    /// The parameters again, as the page passes them on to its transactions endpoint.
    pub fn to_query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if let Some(c) = &self.customer {
            q.append_pair("customer", c);
        }
        if let Some(e) = self.expires {
            q.append_pair("expires", &e.to_string());
        }
        q.append_pair("sig", &self.sig);
        q.finish()
    }
}

/// Checks the link's `sig` before anything touches the database: a forged or edited link
/// learns nothing about which merchants or plans exist. Then its expiry.
pub fn verify_link(ctx: &Ctx, code: &str, slug: &str, link: &LinkQuery) -> Result<()> {
    let secret = ctx.cfg.checkout_signing_secret.expose();
    if !link_sig::verify(secret, code, slug, link.terms(), &link.sig) {
        return Err(ApiError::Forbidden {
            code: Code::CheckoutSignatureInvalid,
            message: "this checkout link is not valid (it was changed or is not from this \
                      merchant); ask the merchant for a new link"
                .into(),
        });
    }
    if link
        .expires
        .is_some_and(|e| e <= chrono::Utc::now().timestamp())
    {
        return Err(ApiError::Forbidden {
            code: Code::CheckoutLinkExpired,
            message: "this checkout link has expired; ask the merchant for a new link".into(),
        });
    }
    Ok(())
}

/// Verifies and resolves a link: 400 without `sig` or with an empty `customer`, 403 with a
/// wrong signature or past its expiry, 404 for an unknown merchant or plan.
pub async fn resolve(ctx: &Ctx, code: &str, slug: &str, query: &LinkQuery) -> Result<Link> {
    verify_link(ctx, code, slug, query)?;
    let conn = ctx.pool.get().await?;
    let stored_link = chainsub_store::checkouts::resolve(
        &conn,
        code,
        slug,
        ctx.cfg.chain_id,
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
        trial_days,
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
        trial_days,
        customer: query.customer.clone(),
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
    /// `trialUsed(planId, wallet)`: this wallet had the plan's trial (it pays at once).
    pub trial_used: bool,
}

/// A provider for reads only (no signer): the page never sends anything itself.
pub fn read_provider(rpc_url: &chainsub_core::RpcUrl) -> Result<DynProvider> {
    Ok(rpc_url.provider())
}

/// The read provider a route was built with; 503 when there is none (an unparsable
/// RPC_URL), so the pages still serve what needs no chain.
pub fn chain(provider: Option<&DynProvider>) -> Result<&DynProvider> {
    provider.ok_or_else(|| ApiError::Unavailable("no chain provider (RPC_URL unparsable)".into()))
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
    let trial_used = mgr.trialUsed(U256::from(plan_onchain_id), wallet);
    let (balance, allowance, live, trial_used) = tokio::try_join!(
        balance.call(),
        allowance.call(),
        live.call(),
        trial_used.call()
    )
    .map_err(|e| {
        tracing::warn!(error = %e, "checkout: chain read failed");
        ApiError::Unavailable("the chain RPC could not be reached".into())
    })?;
    Ok(WalletState {
        balance,
        allowance,
        live_subscription: live,
        trial_used,
    })
}

/// How long a permit the page asks for stays valid.
pub const PERMIT_VALIDITY_SECS: u64 = 3600;
/// A signed permit with less validity left than this is refused (sign again).
pub const PERMIT_MIN_REMAINING_SECS: u64 = 60;

/// The token's EIP-2612 domain and the wallet's permit nonce: what the page needs to ask for
/// one typed-data signature instead of an `approve` transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitDomain {
    pub name: String,
    pub version: String,
    pub chain_id: ChainId,
    pub token: Address,
    /// `nonces(owner)` now.
    pub nonce: U256,
    /// The latest block's time, when this was read.
    pub block_time: U256,
    /// `block_time` plus [`PERMIT_VALIDITY_SECS`].
    pub deadline: U256,
}

impl PermitDomain {
    fn eip712(&self) -> Eip712Domain {
        Eip712Domain::new(
            Some(self.name.clone().into()),
            Some(self.version.clone().into()),
            Some(U256::from(self.chain_id.get())),
            Some(self.token),
            None,
        )
    }

    /// The message `owner` signs to let `spender` pull `value`.
    pub fn permit(&self, owner: Address, spender: Address, value: U256) -> Permit {
        Permit {
            owner,
            spender,
            value,
            nonce: self.nonce,
            deadline: self.deadline,
        }
    }

    /// The EIP-712 digest the token checks for `permit`.
    pub fn digest(&self, permit: &Permit) -> B256 {
        permit.eip712_signing_hash(&self.eip712())
    }

    /// `eth_signTypedData_v4`'s argument for `permit` (as MetaMask and anvil take it).
    pub fn typed_data(&self, permit: &Permit) -> PermitTypedData {
        PermitTypedData {
            types: PermitTypes {
                eip712_domain: EIP712_DOMAIN_FIELDS,
                permit: PERMIT_FIELDS,
            },
            primary_type: "Permit",
            domain: TypedDomain {
                name: self.name.clone(),
                version: self.version.clone(),
                chain_id: self.chain_id,
                verifying_contract: self.token,
            },
            message: TypedPermit {
                owner: permit.owner,
                spender: permit.spender,
                value: permit.value.to_string(),
                nonce: permit.nonce.to_string(),
                deadline: permit.deadline.to_string(),
            },
        }
    }
}

/// The members of `EIP712Domain` a token's domain has.
const EIP712_DOMAIN_FIELDS: &[TypedField] = &[
    TypedField::new("name", "string"),
    TypedField::new("version", "string"),
    TypedField::new("chainId", "uint256"),
    TypedField::new("verifyingContract", "address"),
];

/// The members of EIP-2612's `Permit`.
const PERMIT_FIELDS: &[TypedField] = &[
    TypedField::new("owner", "address"),
    TypedField::new("spender", "address"),
    TypedField::new("value", "uint256"),
    TypedField::new("nonce", "uint256"),
    TypedField::new("deadline", "uint256"),
];

/// EIP-712 typed data of an EIP-2612 permit, as `eth_signTypedData_v4` takes it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermitTypedData {
    pub types: PermitTypes,
    pub primary_type: &'static str,
    pub domain: TypedDomain,
    pub message: TypedPermit,
}

/// The two struct types a permit's typed data declares.
#[derive(Debug, Clone, Serialize)]
pub struct PermitTypes {
    #[serde(rename = "EIP712Domain")]
    pub eip712_domain: &'static [TypedField],
    #[serde(rename = "Permit")]
    pub permit: &'static [TypedField],
}

/// One member of an EIP-712 struct type.
#[derive(Debug, Clone, Serialize)]
pub struct TypedField {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub ty: &'static str,
}

impl TypedField {
    const fn new(name: &'static str, ty: &'static str) -> Self {
        Self { name, ty }
    }
}

/// The token's EIP-712 domain.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TypedDomain {
    pub name: String,
    pub version: String,
    pub chain_id: ChainId,
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub verifying_contract: Address,
}

/// The permit signed (uint256 values as decimal strings).
#[derive(Debug, Clone, Serialize)]
pub struct TypedPermit {
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub owner: Address,
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub spender: Address,
    pub value: String,
    pub nonce: String,
    pub deadline: String,
}

/// The token's permit domain for `owner`, or `None` when the token has no EIP-2612 `permit`
/// we can use: one of `name`, `version`, `nonces`, `DOMAIN_SEPARATOR` missing, or a domain
/// separator other than the one computed from them (a signature would then not verify, and
/// the customer would sign for nothing). The page then asks for `approve` + `subscribe`.
pub async fn permit_domain(
    provider: &DynProvider,
    chain_id: ChainId,
    usdc: Address,
    owner: Address,
) -> Option<PermitDomain> {
    let token = MockUSDC::new(usdc, provider.clone());
    let name = token.name();
    let version = token.version();
    let nonce = token.nonces(owner);
    let separator = token.DOMAIN_SEPARATOR();
    let (name, version, nonce, separator, block) = tokio::try_join!(
        async { name.call().await.map_err(|e| e.to_string()) },
        async { version.call().await.map_err(|e| e.to_string()) },
        async { nonce.call().await.map_err(|e| e.to_string()) },
        async { separator.call().await.map_err(|e| e.to_string()) },
        async {
            provider
                .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .inspect_err(|e| tracing::info!(error = %e, "checkout: no usable permit on the token"))
    .ok()?;
    let domain = PermitDomain {
        name,
        version,
        chain_id,
        token: usdc,
        nonce,
        block_time: U256::from(block.as_ref()?.header.timestamp),
        deadline: U256::from(block?.header.timestamp + PERMIT_VALIDITY_SECS),
    };
    if domain.eip712().separator() != separator {
        tracing::warn!(token = %usdc, "checkout: the token's DOMAIN_SEPARATOR is not the EIP-712 one of its name and version; permits off");
        return None;
    }
    Some(domain)
}

/// A permit the customer signed, as the page sends it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedPermit {
    pub value: U256,
    pub deadline: U256,
    pub signature: Signature,
}

impl SignedPermit {
    /// `permitValue`, `permitDeadline` and `permitSignature` (65 bytes, hex) of the page's
    /// second request: all three or none; 400 `parameter_invalid` otherwise.
    pub fn from_query(
        value: Option<&str>,
        deadline: Option<&str>,
        signature: Option<&str>,
    ) -> Result<Option<Self>> {
        let (value, deadline, signature) = match (value, deadline, signature) {
            (None, None, None) => return Ok(None),
            (Some(v), Some(d), Some(s)) => (v, d, s),
            _ => {
                return Err(ApiError::invalid(
                    "permitSignature",
                    "`permitValue`, `permitDeadline` and `permitSignature` go together",
                ));
            }
        };
        let number = |name: &str, v: &str| {
            U256::from_str_radix(v, 10)
                .map_err(|_| ApiError::invalid(name, format!("`{name}` must be a decimal integer")))
        };
        let bytes = hex::decode(signature.trim_start_matches("0x")).map_err(|_| {
            ApiError::invalid("permitSignature", "`permitSignature` must be 0x hex")
        })?;
        let signature = Signature::from_raw(&bytes).map_err(|_| {
            ApiError::invalid(
                "permitSignature",
                "`permitSignature` must be a 65-byte signature",
            )
        })?;
        Ok(Some(Self {
            value: number("permitValue", value)?,
            deadline: number("permitDeadline", deadline)?,
            signature,
        }))
    }
}

/// Checks that `signed` is `from`'s permit for `manager` at the token's current nonce and
/// not expired (at the block `domain` was read at), so the transaction handed out will not silently ignore it (and revert for
/// want of allowance). Returns `(v, r, s)` for `subscribeWithPermit`, low-s.
pub fn check_permit(
    domain: &PermitDomain,
    from: Address,
    manager: Address,
    signed: &SignedPermit,
) -> Result<(u8, B256, B256)> {
    // A minute of margin: a permit that expires before the transaction is mined is ignored
    // by the contract, and the subscription then reverts for want of allowance.
    if signed.deadline <= domain.block_time + U256::from(PERMIT_MIN_REMAINING_SECS) {
        return Err(ApiError::Invalid {
            code: Code::PermitExpired,
            message: "the signed permit has expired; sign a new one".into(),
            param: Some("permitDeadline".into()),
        });
    }
    let permit = Permit {
        deadline: signed.deadline,
        ..domain.permit(from, manager, signed.value)
    };
    let sig = signed.signature.normalized_s();
    let signer = sig
        .recover_address_from_prehash(&domain.digest(&permit))
        .ok();
    if signer != Some(from) {
        return Err(ApiError::Invalid {
            code: Code::PermitSignatureInvalid,
            message: "the permit signature is not this wallet's signature of this permit (or \
                      the wallet has used its permit nonce since); sign again"
                .into(),
            param: Some("permitSignature".into()),
        });
    }
    Ok((
        27 + u8::from(sig.v()),
        B256::from(sig.r()),
        B256::from(sig.s()),
    ))
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
            code: Code::PlanMismatch,
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
        code: Code::PlanInactive,
        message: "this plan no longer accepts new subscriptions".into(),
        param: None,
    }
}

/// The chain id the wallet must be on, as `0x…` for EIP-1193 calls.
pub fn chain_id_hex(chain_id: ChainId) -> String {
    format!("{:#x}", chain_id.get())
}

/// An EIP-1193 `eth_sendTransaction` request (the checkout's and the account page's).
#[derive(Debug, Clone, Serialize)]
pub struct TxRequest {
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub from: Address,
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub to: Address,
    /// Calldata, `0x`-prefixed hex.
    pub data: String,
    pub value: &'static str,
}

impl TxRequest {
    /// A call of `to` with calldata `data`, sending no ether.
    pub fn call(from: Address, to: Address, data: Vec<u8>) -> Self {
        Self {
            from,
            to,
            data: format!("0x{}", hex::encode(data)),
            value: "0x0",
        }
    }
}

/// One step the checkout page takes, in order.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum Step {
    /// An `approve` transaction for the allowance.
    Approve { label: String, tx: TxRequest },
    /// A permit to sign (no transaction) for the allowance.
    Permit {
        label: String,
        #[serde(rename = "typedData")]
        typed_data: Box<PermitTypedData>,
        permit: PermitTerms,
    },
    /// The subscription; `tx` is null until the permit it needs is signed (the page asks
    /// again with the signature).
    Subscribe {
        label: String,
        tx: Option<TxRequest>,
    },
}

/// What the page shows of a permit it asks for.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermitTerms {
    pub value: String,
    pub deadline: String,
    /// Chain time, not the browser's: the page counts this down on its own clock from when
    /// it got the answer.
    pub valid_for_secs: u64,
}

/// `GET /checkout/{code}/{slug}/tx`: the wallet's state and the steps still to take.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckoutTransactions {
    pub object: &'static str,
    pub chain_id: ChainId,
    pub chain_id_hex: String,
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub from: Address,
    pub plan_onchain_id: u64,
    pub amount: String,
    pub balance: String,
    pub allowance: String,
    pub requested_allowance: String,
    pub insufficient_balance: bool,
    /// The contract's number of the wallet's live subscription to this plan, if any.
    pub already_subscribed: Option<String>,
    pub steps: Vec<Step>,
}

/// How a short allowance is given.
#[derive(Debug, Clone, Copy)]
pub enum Allowance<'a> {
    /// An `approve` transaction before `subscribe`: a token without `permit`, or a wallet
    /// that cannot sign typed data (the page asks with `permit=off`).
    Approve,
    /// One typed-data signature (EIP-2612), then `subscribeWithPermit`: the page signs, then
    /// asks again with the signature for the transaction.
    Permit(&'a PermitDomain),
    /// The customer signed this permit (checked by [`check_permit`], which gave `(v, r, s)`).
    Signed(&'a SignedPermit, (u8, B256, B256)),
}

/// Everything the page needs to act for `from`: the wallet's state, and the steps still to
/// take, in order — when the allowance is short, an `approve` transaction or a permit to
/// sign first (see [`Allowance`]), then the subscription.
#[allow(clippy::too_many_arguments)]
pub fn plan_transactions(
    chain_id: ChainId,
    usdc: Address,
    manager: Address,
    link: &Link,
    plan_onchain_id: u64,
    periods: u32,
    from: Address,
    customer_ref: B256,
    state: &WalletState,
    allowance: Allowance<'_>,
) -> CheckoutTransactions {
    let amount = U256::from(link.amount);
    let wanted = requested_allowance(link.amount, periods);
    // `approve` and `permit` replace the allowance, which every subscription of this wallet
    // to this contract shares: add to it, so another plan's renewals keep their budget.
    let new_allowance = state.allowance.saturating_add(wanted);
    let allow_label = |verb: &str| {
        format!(
            "{verb} {} USDC{} ({periods} payments)",
            units(wanted),
            if state.allowance.is_zero() {
                ""
            } else {
                " more"
            }
        )
    };
    let short = state.allowance < wanted;
    let mut steps = Vec::new();
    // The terms the page shows travel with the call: the contract reverts if the plan pays
    // another merchant or another amount (SubscriptionManager v2).
    let (plan_id, merchant) = (U256::from(plan_onchain_id), link.merchant.wallet);
    let mut subscribe = SubscriptionManager::subscribeCall {
        planId: plan_id,
        merchant,
        amount,
        customerRef: customer_ref,
    }
    .abi_encode();
    let mut subscribe_tx = None;
    match allowance {
        Allowance::Approve if short => {
            let data = MockUSDC::approveCall {
                spender: manager,
                amount: new_allowance,
            }
            .abi_encode();
            steps.push(Step::Approve {
                label: allow_label("Allow"),
                tx: TxRequest::call(from, usdc, data),
            });
        }
        Allowance::Permit(domain) if short => {
            let permit = domain.permit(from, manager, new_allowance);
            steps.push(Step::Permit {
                label: allow_label("Sign a permit (no transaction) allowing"),
                typed_data: Box::new(domain.typed_data(&permit)),
                permit: PermitTerms {
                    value: permit.value.to_string(),
                    deadline: permit.deadline.to_string(),
                    valid_for_secs: domain
                        .deadline
                        .saturating_sub(domain.block_time)
                        .saturating_to::<u64>(),
                },
            });
            // Encoded once the signature is back (the page asks again with it).
            subscribe_tx = Some(None);
        }
        Allowance::Signed(signed, (v, r, s)) => {
            subscribe = SubscriptionManager::subscribeWithPermitCall {
                planId: plan_id,
                merchant,
                amount,
                customerRef: customer_ref,
                permitValue: signed.value,
                deadline: signed.deadline,
                v,
                r,
                s,
            }
            .abi_encode();
        }
        _ => {}
    }
    // This wallet starts the plan's trial: nothing is pulled now (the allowance must cover
    // the first charge; the balance only when the trial ends).
    let trial = link.trial_days > 0 && !state.trial_used;
    let label = if trial {
        format!(
            "Start the {}-day free trial (nothing charged now)",
            link.trial_days
        )
    } else {
        format!("Subscribe and pay {} USDC now", units(amount))
    };
    steps.push(Step::Subscribe {
        label,
        tx: subscribe_tx.unwrap_or_else(|| Some(TxRequest::call(from, manager, subscribe))),
    });
    // The contract's number (public on chain): the page shows it to the wallet's owner. The
    // API's opaque `sub_…` id needs the index, which may not have the subscription yet.
    let already = (!state.live_subscription.is_zero()).then(|| state.live_subscription.to_string());
    CheckoutTransactions {
        object: "checkout_transactions",
        chain_id,
        chain_id_hex: chain_id_hex(chain_id),
        from,
        plan_onchain_id,
        amount: units(amount),
        balance: units(state.balance),
        allowance: units(state.allowance),
        requested_allowance: units(wanted),
        insufficient_balance: !trial && state.balance < amount,
        already_subscribed: already,
        steps,
    }
}

/// Base units as a USDC decimal string (uint256-safe: values beyond u128 are shown raw).
pub(crate) fn units(v: U256) -> String {
    u128::try_from(v).map_or_else(|_| v.to_string(), format_units)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The response as the page reads it.
    fn json(t: CheckoutTransactions) -> Value {
        serde_json::to_value(t).unwrap()
    }

    fn link() -> Link {
        Link {
            merchant: LinkMerchant {
                public_id: chainsub_core::MerchantId::parse("mer_1").unwrap(),
                wallet: Address::repeat_byte(0x22),
                code: "abcdefgh".into(),
                display_name: None,
            },
            plan_public_id: "plan_1".into(),
            plan_name: "Pro".into(),
            amount: 9_990_000,
            interval: "month".into(),
            slug: "pro".into(),
            plan_ref: B256::repeat_byte(0x5e),
            plan_onchain_id: Some(7),
            deactivated: false,
            trial_days: 0,
            customer: Some("cust_1".into()),
        }
    }

    fn state(balance: u128, allowance: u128, live: u64) -> WalletState {
        WalletState {
            balance: U256::from(balance),
            allowance: U256::from(allowance),
            live_subscription: U256::from(live),
            trial_used: false,
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
        let v = json(plan_transactions(
            ChainId::new(31337).unwrap(),
            USDC,
            MGR,
            &link(),
            7,
            12,
            FROM,
            B256::repeat_byte(0xab),
            &state(50_000_000, 0, 0),
            Allowance::Approve,
        ));
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
        let v = json(plan_transactions(
            ChainId::new(1).unwrap(),
            USDC,
            MGR,
            &link(),
            7,
            12,
            FROM,
            B256::repeat_byte(0xab),
            &state(1, 5_000_000, 0),
            Allowance::Approve,
        ));
        let approve = MockUSDC::approveCall::abi_decode(&data_of(&v["steps"][0])).unwrap();
        assert_eq!(approve.amount, U256::from(5_000_000u64 + 9_990_000 * 12));
        assert_eq!(
            v["steps"][0]["label"],
            "Allow 119.88 USDC more (12 payments)"
        );
    }

    #[test]
    fn enough_allowance_skips_approve_and_flags_balance_and_live_subscription() {
        let v = json(plan_transactions(
            ChainId::new(1).unwrap(),
            USDC,
            MGR,
            &link(),
            7,
            12,
            FROM,
            B256::repeat_byte(0xab),
            &state(1, 200_000_000, 5),
            Allowance::Permit(&domain()),
        ));
        let steps = v["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0]["step"], "subscribe");
        assert_eq!(v["insufficientBalance"], true);
        assert_eq!(v["alreadySubscribed"], "5");
    }

    #[test]
    fn a_trial_needs_no_balance_now_and_its_step_says_so_unless_the_wallet_had_it() {
        let trial_link = Link {
            trial_days: 14,
            ..link()
        };
        let plan = |state: &WalletState| {
            json(plan_transactions(
                ChainId::new(1).unwrap(),
                USDC,
                MGR,
                &trial_link,
                7,
                12,
                FROM,
                B256::repeat_byte(0xab),
                state,
                Allowance::Permit(&domain()),
            ))
        };
        let v = plan(&state(0, 200_000_000, 0));
        assert_eq!(v["insufficientBalance"], false, "nothing is pulled now");
        assert_eq!(
            v["steps"][0]["label"],
            "Start the 14-day free trial (nothing charged now)"
        );
        let had_it = WalletState {
            trial_used: true,
            ..state(0, 200_000_000, 0)
        };
        let v = plan(&had_it);
        assert_eq!(v["insufficientBalance"], true, "it pays at once");
        assert_eq!(v["steps"][0]["label"], "Subscribe and pay 9.99 USDC now");
    }

    fn domain() -> PermitDomain {
        PermitDomain {
            name: "Mock USD Coin".into(),
            version: "2".into(),
            chain_id: ChainId::new(31337).unwrap(),
            token: USDC,
            nonce: U256::from(3),
            block_time: U256::from(1_000),
            deadline: U256::from(1_000 + PERMIT_VALIDITY_SECS),
        }
    }

    #[test]
    fn short_allowance_with_a_permit_token_asks_for_a_signature_then_subscribe_with_it() {
        use alloy::signers::SignerSync;
        use alloy::signers::local::PrivateKeySigner;
        let signer = PrivateKeySigner::random();
        let from = signer.address();
        let d = domain();
        let call = |allowance| {
            json(plan_transactions(
                ChainId::new(31337).unwrap(),
                USDC,
                MGR,
                &link(),
                7,
                12,
                from,
                B256::repeat_byte(0xab),
                &state(50_000_000, 1_000_000, 0),
                allowance,
            ))
        };
        let v = call(Allowance::Permit(&d));
        let steps = v["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2, "{v}");
        assert_eq!(steps[0]["step"], "permit");
        assert_eq!(steps[1]["step"], "subscribe");
        assert_eq!(steps[1]["tx"], Value::Null, "sent only once signed");
        let typed = &steps[0]["typedData"];
        assert_eq!(typed["primaryType"], "Permit");
        assert_eq!(typed["domain"]["verifyingContract"], USDC.to_checksum(None));
        // The permit adds to the allowance, as approve does.
        let value = U256::from(1_000_000u64 + 9_990_000 * 12);
        assert_eq!(typed["message"]["value"], value.to_string());
        assert_eq!(typed["message"]["nonce"], "3");
        assert_eq!(steps[0]["permit"]["deadline"], "4600");
        assert_eq!(steps[0]["permit"]["validForSecs"], 3600);
        // (The wallet's own EIP-712 of this typed data — anvil's in the browser test — must
        // give the digest `check_permit` checks: tests/browser/checkout.mjs signs with it.)
        let permit = d.permit(from, MGR, value);

        let signature = signer.sign_hash_sync(&d.digest(&permit)).unwrap();
        let signed = SignedPermit {
            value,
            deadline: d.deadline,
            signature,
        };
        let vrs = check_permit(&d, from, MGR, &signed).unwrap();
        let v = call(Allowance::Signed(&signed, vrs));
        let steps = v["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 1, "{v}");
        let sub =
            SubscriptionManager::subscribeWithPermitCall::abi_decode(&data_of(&steps[0])).unwrap();
        assert_eq!(
            (sub.planId, sub.amount, sub.permitValue, sub.deadline),
            (U256::from(7), U256::from(9_990_000), value, d.deadline)
        );
        assert_eq!((sub.v, sub.r, sub.s), vrs);
        assert!(sub.v == 27 || sub.v == 28);

        // Another wallet's signature, another spender, an expired or reused-nonce permit: 400.
        let other = PrivateKeySigner::random();
        let forged = SignedPermit {
            signature: other.sign_hash_sync(&d.digest(&permit)).unwrap(),
            ..signed
        };
        let code = |r: Result<(u8, B256, B256)>| match r {
            Err(ApiError::Invalid { code, .. }) => code.as_str(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            code(check_permit(&d, from, MGR, &forged)),
            "permit_signature_invalid"
        );
        assert_eq!(
            code(check_permit(&d, from, USDC, &signed)),
            "permit_signature_invalid"
        );
        let used = PermitDomain {
            nonce: U256::from(4),
            ..d.clone()
        };
        assert_eq!(
            code(check_permit(&used, from, MGR, &signed)),
            "permit_signature_invalid"
        );
        let later = PermitDomain {
            block_time: d.deadline - U256::from(PERMIT_MIN_REMAINING_SECS),
            ..d
        };
        assert_eq!(
            code(check_permit(&later, from, MGR, &signed)),
            "permit_expired"
        );
    }

    #[test]
    fn signed_permit_query_needs_all_three_well_formed() {
        assert_eq!(SignedPermit::from_query(None, None, None).unwrap(), None);
        let sig = format!("0x{}", "11".repeat(64) + "1b");
        assert!(
            SignedPermit::from_query(Some("5"), Some("6"), Some(&sig))
                .unwrap()
                .is_some()
        );
        assert!(SignedPermit::from_query(Some("5"), None, Some(&sig)).is_err());
        assert!(SignedPermit::from_query(Some("x"), Some("6"), Some(&sig)).is_err());
        assert!(SignedPermit::from_query(Some("5"), Some("6"), Some("0x1234")).is_err());
    }
}
