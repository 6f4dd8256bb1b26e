//! Merchants: one per wallet, created on first sign-in (or by `api admin create-key`). The
//! type is the store's [`MerchantScope`]: only authentication builds one.

use alloy::primitives::Address;

use crate::http::error::Result;

/// The authenticated merchant every merchant-scoped query takes.
pub use chainsub_store::MerchantScope as Merchant;

/// The merchant of `wallet`, created if it does not exist yet (safe under concurrency). Only
/// after the wallet proved itself (SIWE) or for the operator's `admin create-key`.
pub async fn find_or_create(
    client: &impl tokio_postgres::GenericClient,
    wallet: Address,
) -> Result<Merchant> {
    Ok(chainsub_store::merchants::sign_in(client, wallet).await?)
}
