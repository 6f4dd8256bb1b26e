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
use chainsub_core::{SubscriptionStatus, format_units};
use chainsub_store::customers::{WalletCharge, WalletSubscription};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::checkout::chain_id_hex;
use crate::http::error::{ApiError, Result};

/// The list the page renders.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountList<'a> {
    pub object: &'static str,
    #[serde(serialize_with = "checksummed")]
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
    pub ledger: Vec<AccountCharge<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountMerchant<'a> {
    pub code: Option<&'a str>,
    #[serde(serialize_with = "checksummed")]
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
}

fn checksummed<S: serde::Serializer>(a: &Address, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&a.to_checksum(None))
}

impl<'a> AccountList<'a> {
    pub fn new(
        wallet: Address,
        merchant: Option<&'a str>,
        rows: &'a [WalletSubscription],
    ) -> AccountList<'a> {
        AccountList {
            object: "account_subscriptions",
            wallet,
            merchant,
            data: rows.iter().map(AccountSubscription::of).collect(),
        }
    }
}

impl<'a> AccountSubscription<'a> {
    fn of(s: &'a WalletSubscription) -> AccountSubscription<'a> {
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
            ledger: s.ledger.iter().map(AccountCharge::of).collect(),
        }
    }
}

impl<'a> AccountCharge<'a> {
    fn of(c: &'a WalletCharge) -> AccountCharge<'a> {
        AccountCharge {
            kind: &c.kind,
            amount: c.amount.map(format_units),
            period: c.period,
            failure_reason: c.failure_reason.as_deref(),
            at: c.block_time,
            block_number: c.block_number,
            transaction_hash: c.transaction_hash,
        }
    }
}

/// A cancel transaction for the customer's wallet to send.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTransaction {
    pub object: &'static str,
    pub chain_id: u64,
    pub chain_id_hex: String,
    pub onchain_id: u64,
    pub at_period_end: bool,
    pub label: String,
    pub tx: TxRequest,
}

/// An EIP-1193 `eth_sendTransaction` request.
#[derive(Debug, Serialize)]
pub struct TxRequest {
    #[serde(serialize_with = "checksummed")]
    pub from: Address,
    #[serde(serialize_with = "checksummed")]
    pub to: Address,
    pub data: String,
    pub value: &'static str,
}

/// Reads subscription `onchain_id` on chain (latest block) and, when `from` may cancel it
/// that way, encodes the call: 404 unknown, 403 `not_subscriber` (another wallet's), 409
/// `subscription_terminal` or `subscription_already_cancelling`, 503 when the chain cannot be
/// read. The chain decides, not the index: a page behind the indexer cannot offer a call the
/// contract would revert.
pub async fn cancel_transaction(
    provider: &DynProvider,
    chain_id: u64,
    manager: Address,
    from: Address,
    onchain_id: u64,
    at_period_end: bool,
) -> Result<CancelTransaction> {
    let id = U256::from(onchain_id);
    let s = SubscriptionManager::new(manager, provider.clone())
        .getSubscription(id)
        .call()
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "account: getSubscription failed");
            ApiError::Unavailable("the chain RPC could not be reached".into())
        })?;
    // Status: 0 none, 1 active, 2 past due, 3 cancelled, 4 ended.
    if s.status == 0 {
        return Err(ApiError::not_found("subscription", Some("subscription")));
    }
    if s.subscriber != from {
        return Err(ApiError::Forbidden {
            code: "not_subscriber",
            message: "this wallet is not the subscriber of this subscription; connect the \
                      wallet that subscribed"
                .into(),
        });
    }
    if s.status != 1 && s.status != 2 {
        return Err(ApiError::Conflict {
            code: "subscription_terminal",
            message: "this subscription is already cancelled or ended".into(),
            param: None,
        });
    }
    if at_period_end && s.cancelAtPeriodEnd {
        return Err(ApiError::Conflict {
            code: "subscription_already_cancelling",
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
        tx: TxRequest {
            from,
            to: manager,
            data: format!("0x{}", hex::encode(data)),
            value: "0x0",
        },
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
            plan_name: Some("Pro".into()),
            plan_onchain_id: 3,
            amount: Some(9_990_000),
            period: 2,
            current_period_end: t,
            next_retry_at: None,
            ended_reason: None,
            created_at: t,
            ledger: vec![WalletCharge {
                kind: "charge".into(),
                amount: Some(9_990_000),
                period: 1,
                failure_reason: None,
                block_time: t,
                block_number: 12,
                transaction_hash: B256::repeat_byte(0x11),
            }],
        }
    }

    #[test]
    fn next_charge_only_for_live_subscriptions_that_renew() {
        let rows = [
            sub(SubscriptionStatus::Active, false),
            sub(SubscriptionStatus::Active, true),
            sub(SubscriptionStatus::Cancelled, false),
        ];
        let list = AccountList::new(Address::repeat_byte(1), None, &rows);
        let v = serde_json::to_value(&list).unwrap();
        assert_eq!(v["data"][0]["nextChargeAt"], "2026-12-01T00:00:00Z");
        assert_eq!(v["data"][0]["cancellable"], true);
        assert_eq!(v["data"][1]["nextChargeAt"], serde_json::Value::Null);
        assert_eq!(v["data"][2]["cancellable"], false);
        assert_eq!(v["data"][0]["amount"], "9.99");
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
