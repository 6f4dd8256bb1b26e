//! The customer self-service page's server side (issue 14, point 1): a wallet's
//! subscriptions with this service as the page shows them, and the `cancel` /
//! `cancelAtPeriodEnd` transactions the customer's wallet sends, encoded with alloy after the
//! chain confirms the wallet may send them (so the page needs no ABI library, and never asks
//! a wallet to send a call the contract would revert).
//!
//! No sign-in: the list holds only what the chain already shows for the address (terms,
//! status, periods, charges and their transactions) plus the names a checkout link shows (the
//! merchant's code, the plan's name) — never a merchant's customer references. Cancelling
//! needs the wallet itself: the contract accepts it from the subscriber only.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::DynProvider;
use alloy::sol_types::SolCall;
use chainsub_abi::SubscriptionManager;
use chainsub_core::{CancelAt, ChainId, OnchainSubscriptionId};
use chainsub_core::{SubscriptionStatus, format_units};
use chainsub_store::customers::{WalletCharge, WalletSubscription};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::checkout::{TxRequest, chain_id_hex, units};
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};

/// The list the page renders.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountList<'a> {
    pub object: &'static str,
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub wallet: Address,
    pub merchant: Option<&'a str>,
    pub data: Vec<AccountSubscription<'a>>,
}

/// One subscription of the wallet.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountSubscription<'a> {
    /// The contract's id: what `cancel` takes, and what a block explorer shows.
    pub onchain_id: i64,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    /// Whether the page offers to cancel (active or past due).
    pub cancellable: bool,
    pub merchant: AccountMerchant<'a>,
    pub plan_name: Option<&'a str>,
    pub plan_onchain_id: i64,
    /// USDC per period, as a decimal string.
    pub amount: Option<String>,
    pub period: i32,
    pub current_period_end: DateTime<Utc>,
    /// When the next charge is due: the period end (or the next retry when past due);
    /// `None` when no charge will come (cancelled, ended, or ending at the period end).
    pub next_charge_at: Option<DateTime<Utc>>,
    pub ended_reason: Option<&'a str>,
    pub created_at: DateTime<Utc>,
    /// A downgrade scheduled for the next renewal.
    pub pending_plan_change: Option<AccountPendingPlan<'a>>,
    pub ledger: Vec<AccountCharge<'a>>,
    /// The merchant's plans the page offers to move to (empty when the subscription cannot
    /// change plan now).
    pub plan_choices: Vec<AccountPlanChoice<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountPendingPlan<'a> {
    pub plan_onchain_id: i64,
    pub plan_name: Option<&'a str>,
    pub amount: Option<String>,
}

/// A plan the subscription can change to, and how the change would take effect.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountPlanChoice<'a> {
    pub plan_onchain_id: i64,
    pub name: &'a str,
    pub amount: Option<String>,
    /// `upgrade` (now, with a prorated charge for the rest of the period) or `downgrade` (at
    /// the next renewal, nothing charged now).
    pub change: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountMerchant<'a> {
    pub code: Option<&'a str>,
    /// The name the merchant shows customers, when it set one.
    pub name: Option<&'a str>,
    #[serde(serialize_with = "chainsub_views::checksummed")]
    pub wallet: Address,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountCharge<'a> {
    pub kind: &'a str,
    pub amount: Option<String>,
    pub period: i32,
    pub failure_reason: Option<&'a str>,
    pub at: DateTime<Utc>,
    pub block_number: i64,
    pub transaction_hash: B256,
    /// Blocks on top of its block in the index (itself included).
    pub confirmations: i64,
    /// Whether it has the service's `CONFIRMATIONS` (a reorg may still undo it otherwise).
    pub confirmed: bool,
}

impl<'a> AccountList<'a> {
    /// `confirmations`: the service's `CONFIRMATIONS` (a charge with fewer is shown as
    /// confirming).
    pub fn new(
        wallet: Address,
        merchant: Option<&'a str>,
        rows: &'a [WalletSubscription],
        confirmations: u64,
    ) -> Self {
        AccountList {
            object: "account_subscriptions",
            wallet,
            merchant,
            data: rows
                .iter()
                .map(|s| AccountSubscription::of(s, confirmations))
                .collect(),
        }
    }
}

impl<'a> AccountSubscription<'a> {
    fn of(s: &'a WalletSubscription, confirmations: u64) -> Self {
        let live = !s.status.is_terminal();
        let next_charge_at = match s.status {
            _ if !live || s.cancel_at_period_end => None,
            SubscriptionStatus::PastDue => s.next_retry_at.or(Some(s.current_period_end)),
            _ => Some(s.current_period_end),
        };
        AccountSubscription {
            onchain_id: s.onchain_id,
            status: s.status,
            cancel_at_period_end: s.cancel_at_period_end,
            cancellable: live,
            merchant: AccountMerchant {
                code: s.merchant_code.as_deref(),
                name: s.merchant_name.as_deref(),
                wallet: s.merchant_wallet,
            },
            plan_name: s.plan_name.as_deref(),
            plan_onchain_id: s.plan_onchain_id,
            amount: s.amount.map(format_units),
            period: s.period,
            current_period_end: s.current_period_end,
            next_charge_at,
            ended_reason: s.ended_reason.as_deref(),
            created_at: s.created_at,
            pending_plan_change: s.pending_plan.as_ref().map(|p| AccountPendingPlan {
                plan_onchain_id: p.plan_onchain_id,
                plan_name: p.name.as_deref(),
                amount: p.amount.map(format_units),
            }),
            ledger: s
                .ledger
                .iter()
                .map(|c| AccountCharge::of(c, confirmations))
                .collect(),
            plan_choices: s
                .plan_choices
                .iter()
                .map(|p| AccountPlanChoice {
                    plan_onchain_id: p.plan_onchain_id,
                    name: &p.name,
                    amount: p.amount.map(format_units),
                    change: if p.amount > s.amount {
                        "upgrade"
                    } else {
                        "downgrade"
                    },
                })
                .collect(),
        }
    }
}

impl<'a> AccountCharge<'a> {
    fn of(c: &'a WalletCharge, confirmations: u64) -> Self {
        AccountCharge {
            kind: c.kind.as_str(),
            amount: c.amount.map(format_units),
            period: c.period,
            failure_reason: c.failure_reason.as_deref(),
            at: c.block_time,
            block_number: c.block_number,
            transaction_hash: c.transaction_hash,
            confirmations: c.confirmations,
            confirmed: c.confirmations >= i64::try_from(confirmations).unwrap_or(i64::MAX),
        }
    }
}

/// How long a wallet proof lets the page list the wallet's subscriptions.
pub const PROOF_VALIDITY_MINUTES: i64 = 30;

/// What a wallet proof is bound to: this deployment's origin and chain, and its secret (the
/// proof's nonce is keyed with it, so only challenges this service issued prove anything).
#[derive(Debug, Clone, Copy)]
pub struct ProofTerms<'a> {
    pub base_url: &'a url::Url,
    pub chain_id: ChainId,
    /// `CHECKOUT_SIGNING_SECRET`.
    pub secret: &'a str,
}

impl<'a> ProofTerms<'a> {
    pub fn of(cfg: &'a crate::config::Config) -> Self {
        ProofTerms {
            base_url: &cfg.base_url,
            chain_id: cfg.chain_id,
            secret: cfg.checkout_signing_secret.expose(),
        }
    }

    /// The challenge's nonce: 16 hex characters of a keyed hash of the chain, the wallet and
    /// the issue time. Stateless (rebuilt from what the page sends back), and nobody without
    /// the secret can make one the service accepts.
    fn nonce(&self, wallet: Address, issued_at: DateTime<Utc>) -> String {
        let mut input = Vec::with_capacity(96);
        input.extend_from_slice(b"chainsub account proof v1\0");
        input.extend_from_slice(self.secret.as_bytes());
        input.push(0);
        input.extend_from_slice(&self.chain_id.get().to_be_bytes());
        input.extend_from_slice(wallet.as_slice());
        input.extend_from_slice(&issued_at.timestamp().to_be_bytes());
        let digest = alloy::primitives::keccak256(&input);
        alloy::hex::encode(&digest[..8])
    }
}

/// The message the customer's wallet signs (`personal_sign`) to show it holds `wallet`: a
/// Sign-In with Ethereum (EIP-4361) message for this service's domain and `/account` URI —
/// so a wallet checks it against the page's origin and warns on a mismatch — with a nonce
/// and an expiry. The list names the merchants and plans a wallet pays, which the chain does
/// not show, so nobody reads them from an address alone. Stateless: the server rebuilds the
/// message from the wallet and `issued_at` the page sends back with the signature; only the
/// wallet's key can sign it, and it lapses [`PROOF_VALIDITY_MINUTES`] after `issued_at`.
pub fn proof_message(
    terms: &ProofTerms<'_>,
    wallet: Address,
    issued_at: DateTime<Utc>,
) -> crate::auth::siwe::SiweMessage {
    let base = terms.base_url.as_str().trim_end_matches('/');
    crate::auth::siwe::SiweMessage {
        domain: crate::config::siwe_domain(terms.base_url),
        address: wallet,
        statement: Some(
            "Show that you hold this wallet, to list its subscriptions. Signing sends \
             nothing and costs nothing."
                .into(),
        ),
        uri: format!("{base}/account"),
        version: "1".into(),
        chain_id: terms.chain_id.get(),
        nonce: terms.nonce(wallet, issued_at),
        issued_at,
        expiration_time: Some(issued_at + chrono::Duration::minutes(PROOF_VALIDITY_MINUTES)),
        not_before: None,
        request_id: None,
        resources: Vec::new(),
    }
}

/// The challenge the page asks the wallet to sign.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Challenge {
    pub object: &'static str,
    pub message: String,
    pub issued_at: String,
    pub expires_at: String,
}

impl Challenge {
    pub fn new(terms: &ProofTerms<'_>, wallet: Address, now: DateTime<Utc>) -> Self {
        // Whole seconds: the text is rebuilt from the RFC 3339 form the page sends back.
        let issued_at = DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now);
        Self {
            object: "account_challenge",
            message: proof_message(terms, wallet, issued_at).to_text(),
            issued_at: issued_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            expires_at: (issued_at + chrono::Duration::minutes(PROOF_VALIDITY_MINUTES))
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }
}

/// Checks the page's proof (headers `x-wallet-proof-issued-at`, `x-wallet-proof-signature`):
/// 401 `wallet_proof_required` without it, `wallet_proof_expired` when lapsed (or issued in
/// the future), `wallet_proof_invalid` when another key signed (or the text differs).
pub fn check_proof(
    terms: &ProofTerms<'_>,
    wallet: Address,
    issued_at: Option<&str>,
    signature: Option<&str>,
    now: DateTime<Utc>,
) -> Result<()> {
    let unauthorized = |code: Code, message: &str| ApiError::Unauthorized {
        code,
        message: message.into(),
    };
    let (Some(issued_at), Some(signature)) = (issued_at, signature) else {
        return Err(unauthorized(
            Code::WalletProofRequired,
            "sign the challenge from GET /account/challenge with the wallet first",
        ));
    };
    let issued_at = DateTime::parse_from_rfc3339(issued_at)
        .map_err(|_| {
            unauthorized(
                Code::WalletProofInvalid,
                "the proof's issue time is not RFC 3339",
            )
        })?
        .with_timezone(&Utc);
    let expired = now >= issued_at + chrono::Duration::minutes(PROOF_VALIDITY_MINUTES)
        || issued_at > now + chrono::Duration::minutes(1);
    if expired {
        return Err(unauthorized(
            Code::WalletProofExpired,
            "the wallet proof has lapsed; sign a new challenge",
        ));
    }
    let text = proof_message(terms, wallet, issued_at).to_text();
    crate::auth::siwe::verify_signature(&text, signature, wallet).map_err(|e| match e {
        ApiError::Unauthorized { message, .. } | ApiError::Invalid { message, .. } => {
            unauthorized(Code::WalletProofInvalid, &message)
        }
        other => other,
    })
}

/// A cancel transaction for the customer's wallet to send.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTransaction {
    pub object: &'static str,
    pub chain_id: ChainId,
    pub chain_id_hex: String,
    pub onchain_id: OnchainSubscriptionId,
    pub at_period_end: bool,
    pub label: String,
    pub tx: TxRequest,
}

/// Reads subscription `onchain_id` on chain (latest block) and, when `from` may cancel it
/// that way, encodes the call: 404 unknown, 403 `not_subscriber` (another wallet's), 409
/// `subscription_terminal` or `subscription_already_cancelling`, 503 when the chain cannot be
/// read. The chain decides, not the index: a page behind the indexer cannot offer a call the
/// contract would revert.
pub async fn cancel_transaction(
    provider: &DynProvider,
    chain_id: ChainId,
    manager: Address,
    from: Address,
    onchain_id: OnchainSubscriptionId,
    when: CancelAt,
) -> Result<CancelTransaction> {
    let id: U256 = onchain_id.into();
    let at_period_end = when.at_period_end();
    let s = SubscriptionManager::new(manager, provider.clone())
        .getSubscription(id)
        .call()
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "account: getSubscription failed");
            ApiError::Unavailable("the chain RPC could not be reached".into())
        })?;
    let Some(status) = chainsub_abi::subscription_status(s.status) else {
        return Err(ApiError::not_found("subscription", Some("subscription")));
    };
    if s.subscriber != from {
        return Err(ApiError::Forbidden {
            code: Code::NotSubscriber,
            message: "this wallet is not the subscriber of this subscription; connect the \
                      wallet that subscribed"
                .into(),
        });
    }
    if status.is_terminal() {
        return Err(ApiError::Conflict {
            code: Code::SubscriptionTerminal,
            message: "this subscription is already cancelled or ended".into(),
            param: None,
        });
    }
    if at_period_end && s.cancelAtPeriodEnd {
        return Err(ApiError::Conflict {
            code: Code::SubscriptionAlreadyCancelling,
            message: "this subscription already ends at the end of its period".into(),
            param: None,
        });
    }
    let (data, label) = if at_period_end {
        (
            SubscriptionManager::cancelAtPeriodEndCall { subscriptionId: id }.abi_encode(),
            "Cancel at the end of the current period (no further charges)",
        )
    } else {
        (
            SubscriptionManager::cancelCall { subscriptionId: id }.abi_encode(),
            "Cancel now (no further charges; the current period is not refunded)",
        )
    };
    Ok(CancelTransaction {
        object: "account_transaction",
        chain_id,
        chain_id_hex: chain_id_hex(chain_id),
        onchain_id,
        at_period_end,
        label: label.to_string(),
        tx: TxRequest::call(from, manager, data),
    })
}

/// A plan-change transaction for the customer's wallet to send.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanChangeTransaction {
    pub object: &'static str,
    pub chain_id: ChainId,
    pub chain_id_hex: String,
    pub onchain_id: OnchainSubscriptionId,
    pub plan_onchain_id: u64,
    /// `upgrade` (now, prorated), `downgrade` (at the next renewal) or `undo` (of a
    /// scheduled downgrade).
    pub change: &'static str,
    pub label: String,
    pub tx: TxRequest,
}

/// Reads subscription `onchain_id` and plan `plan` on chain and, when `from` may move the
/// one to the other now, encodes `changePlan` with the plan's terms as the chain has them
/// (the terms the page showed: a plan's merchant and amount never change) — or, for the plan
/// it is on while a downgrade is scheduled, `cancelPlanChange`, undoing it: 404 for an
/// unknown subscription or plan, 403 `not_subscriber`, 409 `subscription_terminal`,
/// `subscription_not_active` (trialing, past due or ending), `plan_not_active` (deactivated
/// or another merchant's), 400 `parameter_invalid` for its own plan or one the wallet
/// already holds. As for cancelling, the chain decides, so no call the contract would revert
/// is offered.
pub async fn plan_change_transaction(
    provider: &DynProvider,
    chain_id: ChainId,
    manager: Address,
    from: Address,
    onchain_id: OnchainSubscriptionId,
    plan: u64,
) -> Result<PlanChangeTransaction> {
    let id: U256 = onchain_id.into();
    let plan_id = U256::from(plan);
    let contract = SubscriptionManager::new(manager, provider.clone());
    let unreachable = |e: alloy::contract::Error| {
        tracing::warn!(error = %e, "account: chain read failed");
        ApiError::Unavailable("the chain RPC could not be reached".into())
    };
    let s = contract
        .getSubscription(id)
        .call()
        .await
        .map_err(unreachable)?;
    let Some(status) = chainsub_abi::subscription_status(s.status) else {
        return Err(ApiError::not_found("subscription", Some("subscription")));
    };
    if s.subscriber != from {
        return Err(ApiError::Forbidden {
            code: Code::NotSubscriber,
            message: "this wallet is not the subscriber of this subscription; connect the \
                      wallet that subscribed"
                .into(),
        });
    }
    let conflict = |code, message: &str| ApiError::Conflict {
        code,
        message: message.into(),
        param: None,
    };
    if status.is_terminal() {
        return Err(conflict(
            Code::SubscriptionTerminal,
            "this subscription is already cancelled or ended",
        ));
    }
    if status != SubscriptionStatus::Active || s.cancelAtPeriodEnd {
        return Err(conflict(
            Code::SubscriptionNotActive,
            "only an active subscription that is not ending changes plan (a trial changes after \
             it, a past-due one once paid)",
        ));
    }
    let p = contract
        .getPlan(plan_id)
        .call()
        .await
        .map_err(unreachable)?;
    if p.merchant == Address::ZERO {
        return Err(ApiError::not_found("plan", Some("plan")));
    }
    if p.merchant != s.merchant || !p.active {
        return Err(conflict(
            Code::PlanNotActive,
            "this plan is not one of the merchant's active plans",
        ));
    }
    if plan_id == s.planId {
        // Back to the plan it is on: undoes a scheduled downgrade.
        if s.pendingPlanId == 0 {
            return Err(ApiError::invalid(
                "plan",
                "the subscription is on this plan already",
            ));
        }
        let call = SubscriptionManager::cancelPlanChangeCall { subscriptionId: id };
        return Ok(PlanChangeTransaction {
            object: "account_transaction",
            chain_id,
            chain_id_hex: chain_id_hex(chain_id),
            onchain_id,
            plan_onchain_id: plan,
            change: "undo",
            label: format!(
                "Keep {} USDC a month (undo the scheduled change)",
                units(s.amount)
            ),
            tx: TxRequest::call(from, manager, call.abi_encode()),
        });
    }
    let live = contract
        .liveSubscriptionOf(plan_id, from)
        .call()
        .await
        .map_err(unreachable)?;
    if !live.is_zero() {
        return Err(ApiError::invalid(
            "plan",
            format!("this wallet already has subscription #{live} to this plan"),
        ));
    }
    let upgrade = p.amount > s.amount;
    let (new, old) = (units(p.amount), units(s.amount));
    let label = if upgrade {
        format!(
            "Upgrade from {old} to {new} USDC a month now (prorated charge for the rest of this period)"
        )
    } else {
        format!("Change from {old} to {new} USDC a month at the next renewal (nothing charged now)")
    };
    let call = SubscriptionManager::changePlanCall {
        subscriptionId: id,
        newPlanId: plan_id,
        merchant: p.merchant,
        amount: p.amount,
    };
    Ok(PlanChangeTransaction {
        object: "account_transaction",
        chain_id,
        chain_id_hex: chain_id_hex(chain_id),
        onchain_id,
        plan_onchain_id: plan,
        change: if upgrade { "upgrade" } else { "downgrade" },
        label,
        tx: TxRequest::call(from, manager, call.abi_encode()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn sub(status: SubscriptionStatus, cancelling: bool) -> WalletSubscription {
        let t = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        WalletSubscription {
            onchain_id: 7,
            status,
            cancel_at_period_end: cancelling,
            merchant_wallet: Address::repeat_byte(0xab),
            merchant_code: Some("acme1234".into()),
            merchant_name: None,
            plan_name: Some("Pro".into()),
            plan_onchain_id: 3,
            amount: Some(9_990_000),
            period: 2,
            current_period_end: t,
            next_retry_at: None,
            ended_reason: None,
            created_at: t,
            pending_plan: None,
            plan_choices: vec![
                chainsub_store::customers::PlanChoice {
                    plan_onchain_id: 2,
                    name: "Basic".into(),
                    amount: Some(4_990_000),
                },
                chainsub_store::customers::PlanChoice {
                    plan_onchain_id: 4,
                    name: "Team".into(),
                    amount: Some(19_990_000),
                },
            ],
            ledger: vec![WalletCharge {
                kind: chainsub_core::LedgerKind::Charge,
                amount: Some(9_990_000),
                period: 1,
                failure_reason: None,
                block_time: t,
                block_number: 12,
                transaction_hash: B256::repeat_byte(0x11),
                confirmations: 2,
            }],
        }
    }

    #[test]
    fn only_the_wallets_own_fresh_signature_of_the_challenge_is_a_proof() {
        use alloy::signers::SignerSync;
        use alloy::signers::local::PrivateKeySigner;
        let base: url::Url = "https://pay.example.com".parse().unwrap();
        let terms = ProofTerms {
            base_url: &base,
            chain_id: ChainId::new(1).unwrap(),
            secret: "s3cret",
        };
        let key = PrivateKeySigner::random();
        let wallet = key.address();
        let now = Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).unwrap();
        let c = Challenge::new(&terms, wallet, now);
        // A Sign-In with Ethereum (EIP-4361) message bound to this domain, so wallets check
        // the page's origin and warn on a mismatch; with a nonce and an expiry.
        let m = crate::auth::siwe::SiweMessage::parse(&c.message).unwrap();
        assert_eq!(m.domain, "pay.example.com");
        assert_eq!(m.address, wallet);
        assert_eq!(m.uri, "https://pay.example.com/account");
        assert_eq!((m.version.as_str(), m.chain_id), ("1", 1));
        assert_eq!(m.issued_at, now);
        assert_eq!(
            m.expiration_time,
            Some(now + chrono::Duration::minutes(PROOF_VALIDITY_MINUTES))
        );
        assert!(m.nonce.len() >= 16 && m.nonce.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(m.to_text(), c.message);
        // The nonce is the service's: another deployment's secret, another nonce.
        let elsewhere = Challenge::new(
            &ProofTerms {
                secret: "other",
                ..terms
            },
            wallet,
            now,
        );
        assert_ne!(elsewhere.message, c.message);
        let sig = |text: &str| {
            let s = key.sign_message_sync(text.as_bytes()).unwrap();
            format!("0x{}", hex::encode(s.as_bytes()))
        };
        let good = sig(&c.message);
        let check = |wallet, issued: &str, sig: &str, at| {
            check_proof(&terms, wallet, Some(issued), Some(sig), at)
        };
        let code = |r: Result<()>| match r {
            Err(ApiError::Unauthorized { code, .. }) => code.as_str(),
            other => panic!("{other:?}"),
        };
        assert!(check(wallet, &c.issued_at, &good, now).is_ok());
        assert!(
            check(
                wallet,
                &c.issued_at,
                &good,
                now + chrono::Duration::minutes(29)
            )
            .is_ok()
        );
        let lapsed = now + chrono::Duration::minutes(PROOF_VALIDITY_MINUTES);
        assert_eq!(
            code(check(wallet, &c.issued_at, &good, lapsed)),
            "wallet_proof_expired"
        );
        // Another wallet, another issue time (the text differs), another chain: invalid.
        let other = Address::repeat_byte(7);
        assert_eq!(
            code(check(other, &c.issued_at, &good, now)),
            "wallet_proof_invalid"
        );
        assert_eq!(
            code(check(wallet, "2026-11-26T12:00:01Z", &good, now)),
            "wallet_proof_invalid"
        );
        let on_chain_2 = ProofTerms {
            chain_id: ChainId::new(2).unwrap(),
            ..terms
        };
        assert_eq!(
            code(check_proof(
                &on_chain_2,
                wallet,
                Some(&c.issued_at),
                Some(&good),
                now
            )),
            "wallet_proof_invalid"
        );
        // A challenge another deployment issued (its nonce) does not prove anything here.
        assert_eq!(
            code(check(wallet, &c.issued_at, &sig(&elsewhere.message), now)),
            "wallet_proof_invalid"
        );
        // A proof dated later than now (a clock trick) is not accepted either.
        let future = Challenge::new(&terms, wallet, now + chrono::Duration::hours(1));
        assert_eq!(
            code(check(wallet, &future.issued_at, &sig(&future.message), now)),
            "wallet_proof_expired"
        );
        assert_eq!(
            code(check_proof(&terms, wallet, None, None, now)),
            "wallet_proof_required"
        );
        assert_eq!(
            code(check(wallet, &c.issued_at, "0x12", now)),
            "wallet_proof_invalid"
        );
    }

    #[test]
    fn next_charge_only_for_live_subscriptions_that_renew() {
        let rows = [
            sub(SubscriptionStatus::Active, false),
            sub(SubscriptionStatus::Active, true),
            sub(SubscriptionStatus::Cancelled, false),
        ];
        let list = AccountList::new(Address::repeat_byte(1), None, &rows, 3);
        let v = serde_json::to_value(&list).unwrap();
        assert_eq!(v["data"][0]["nextChargeAt"], "2026-12-01T00:00:00Z");
        assert_eq!(v["data"][0]["cancellable"], true);
        assert_eq!(v["data"][1]["nextChargeAt"], serde_json::Value::Null);
        assert_eq!(v["data"][2]["cancellable"], false);
        assert_eq!(v["data"][0]["amount"], "9.99");
        // A cheaper plan waits for the renewal, a dearer one is now.
        assert_eq!(v["data"][0]["planChoices"][0]["change"], "downgrade");
        assert_eq!(v["data"][0]["planChoices"][1]["change"], "upgrade");
        assert_eq!(v["data"][0]["planChoices"][1]["amount"], "19.99");
        // 2 of the 3 confirmations: shown as confirming.
        assert_eq!(v["data"][0]["ledger"][0]["confirmed"], false);
        assert_eq!(
            v["data"][0]["merchant"]["wallet"],
            Address::repeat_byte(0xab).to_checksum(None)
        );
        assert_eq!(
            v["data"][0]["ledger"][0]["transactionHash"],
            format!("0x{}", "11".repeat(32))
        );
        // Nothing of the merchant's customer references is in the page's answer.
        let text = v.to_string();
        assert!(!text.contains("customer"), "{text}");
    }
}
