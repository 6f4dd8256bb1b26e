//! The dashboard's account objects: merchant, session, SIWE nonce, API key, plus the
//! checkout a merchant creates and the health answer.

use alloy::primitives::Address;
use chainsub_core::{CheckoutId, MerchantId, PlanId};
use chainsub_store::MerchantScope;
use chainsub_store::merchants::KeyStatus;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// The Merchant object.
#[derive(Debug, Serialize)]
pub struct MerchantView<'a> {
    pub id: &'a MerchantId,
    pub object: &'static str,
    #[serde(serialize_with = "super::checksummed")]
    pub wallet: Address,
    pub code: &'a str,
}

impl<'a> From<&'a MerchantScope> for MerchantView<'a> {
    fn from(m: &'a MerchantScope) -> Self {
        MerchantView {
            id: m.public_id(),
            object: "merchant",
            wallet: m.wallet(),
            code: m.code(),
        }
    }
}

/// A dashboard session (`POST /api/v1/auth/siwe`, `GET /api/v1/auth/session`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView<'a> {
    pub object: &'static str,
    pub merchant: MerchantView<'a>,
    pub csrf_token: &'a str,
    #[serde(serialize_with = "super::time")]
    pub expires_at: DateTime<Utc>,
}

impl<'a> SessionView<'a> {
    pub fn new(
        merchant: &'a MerchantScope,
        csrf_token: &'a str,
        expires_at: DateTime<Utc>,
    ) -> Self {
        SessionView {
            object: "session",
            merchant: merchant.into(),
            csrf_token,
            expires_at,
        }
    }
}

/// `DELETE /api/v1/auth/session`.
#[derive(Debug, Serialize)]
pub struct DeletedView {
    pub object: &'static str,
    pub deleted: bool,
}

/// A SIWE nonce with what the message must say (`POST /api/v1/auth/nonce`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NonceView<'a> {
    pub object: &'static str,
    pub nonce: &'a str,
    #[serde(serialize_with = "super::time")]
    pub expires_at: DateTime<Utc>,
    pub domain: &'a str,
    pub uri: &'a str,
    pub chain_id: chainsub_core::ChainId,
    pub version: &'static str,
    pub statement: &'static str,
}

/// The merchant's live key as the dashboard shows it (never the key itself).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyView<'a> {
    pub prefix: &'a str,
    pub last4: &'a str,
    #[serde(serialize_with = "super::time")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "super::opt_time")]
    pub last_used_at: Option<DateTime<Utc>>,
}

/// `GET /api/v1/auth/keys` (and `DELETE`, with `revoked`).
#[derive(Debug, Serialize)]
pub struct KeyStatusView<'a> {
    pub object: &'static str,
    pub active: bool,
    pub key: Option<KeyView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked: Option<bool>,
}

impl<'a> From<Option<&'a KeyStatus>> for KeyStatusView<'a> {
    fn from(k: Option<&'a KeyStatus>) -> Self {
        KeyStatusView {
            object: "api_key_status",
            active: k.is_some(),
            key: k.map(|k| KeyView {
                prefix: &k.prefix,
                last4: &k.last4,
                created_at: k.created_at,
                last_used_at: k.last_used_at,
            }),
            revoked: None,
        }
    }
}

/// `POST /api/v1/auth/keys`: the new key, shown once.
#[derive(Debug, Serialize)]
pub struct IssuedKeyView<'a> {
    pub object: &'static str,
    pub key: &'a str,
    pub rotated: bool,
    pub status: KeyStatusView<'a>,
}

/// The Checkout object (`POST /api/v1/checkouts`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckoutView<'a> {
    pub id: &'a CheckoutId,
    pub object: &'static str,
    pub url: &'a str,
    pub plan_id: &'a PlanId,
    pub customer_external_id: Option<&'a str>,
    /// When the link stops opening (`null`: never).
    #[serde(serialize_with = "super::opt_time")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "super::time")]
    pub created_at: DateTime<Utc>,
}

/// `GET /api/v1/health`: what the public may know.
#[derive(Debug, Serialize)]
pub struct HealthView {
    pub object: &'static str,
    pub version: &'static str,
    pub docs: String,
    /// `ok`, or `degraded` while the database does not answer.
    pub status: &'static str,
    pub chain: HealthChainView,
}

/// `GET /health` on the API's metrics listener: the public health and what only the
/// operator sees.
#[derive(Debug, Serialize)]
pub struct OperatorHealthView {
    #[serde(flatten)]
    pub public: HealthView,
    /// `ok` or `unreachable`.
    pub database: &'static str,
    /// The plan relayer's funds at its last check: `ok`, `low_balance` (provisioning is
    /// refused until the operator tops it up), `unknown` (not checked yet) or `none` (no
    /// relayer configured). A warning: it does not make the health check fail.
    pub relayer: &'static str,
}

/// The chain the API serves and how far the index has followed it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthChainView {
    pub chain_id: chainsub_core::ChainId,
    #[serde(serialize_with = "super::checksummed")]
    pub contract: Address,
    pub indexed_block: Option<i64>,
    pub head_block: Option<i64>,
    pub lag_blocks: Option<i64>,
}
