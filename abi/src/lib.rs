//! The vocabulary every Chainsub process shares: the compiled contract artifacts, alloy
//! bindings generated from them, and one typed [`ContractEvent`] for every contract log.

mod calendar;
mod events;
pub mod ids;

pub use calendar::add_months;
pub use events::{
    ContractEvent, DecodeError, EndReason, EventKind, FailureReason, subscription_status,
};

use alloy::sol;

sol!(
    #[allow(missing_docs, clippy::too_many_arguments)]
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    SubscriptionManager,
    "artifacts/SubscriptionManager.json"
);

sol!(
    #[allow(missing_docs, clippy::too_many_arguments)]
    #[sol(rpc)]
    #[derive(Debug, PartialEq, Eq)]
    MockUSDC,
    "artifacts/MockUSDC.json"
);

sol! {
    /// EIP-2612's signed message (the `Permit` of USDC and `MockUSDC`): `owner` lets
    /// `spender` pull `value`, with the owner's current `nonce`, until `deadline`.
    #[derive(Debug, PartialEq, Eq)]
    struct Permit {
        address owner;
        address spender;
        uint256 value;
        uint256 nonce;
        uint256 deadline;
    }
}

/// The committed SubscriptionManager artifact (ABI + bytecode), as compiled by
/// `scripts/compile-contracts.mjs`.
pub const SUBSCRIPTION_MANAGER_ARTIFACT: &str =
    include_str!("../artifacts/SubscriptionManager.json");
/// The committed MockUSDC artifact.
pub const MOCK_USDC_ARTIFACT: &str = include_str!("../artifacts/MockUSDC.json");

/// USDC has 6 decimals: one USDC is 1_000_000 base units.
pub const USDC_DECIMALS: u32 = 6;
