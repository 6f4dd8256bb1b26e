//! Chains generated directly: `contracts/LogFlood.sol` (test-only) installed at a dev chain's
//! manager address emits SubscriptionManager's own events without its state, so a test or a
//! benchmark can build blocks with tens of thousands of events in seconds instead of sending
//! a real `subscribe` for each. The indexer cannot tell its logs from the manager's; the
//! contract's own rules are not exercised (the contract tests do that on the real code).

use alloy::primitives::U256;
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::TransactionReceipt;

use crate::chain::accounts;

use crate::DevChain;

alloy::sol!(
    #[allow(missing_docs, clippy::too_many_arguments)]
    #[sol(rpc)]
    LogFlood,
    "../abi/artifacts/LogFlood.json"
);

/// Replaces the manager's code with LogFlood's (`anvil_setCode`); returns it bound to the
/// chain's signing provider, at the manager's address.
pub async fn install(chain: &DevChain) -> LogFlood::LogFloodInstance<DynProvider> {
    let artifact: serde_json::Value =
        serde_json::from_str(include_str!("../../abi/artifacts/LogFlood.json"))
            .expect("LogFlood artifact");
    let code = artifact["deployedBytecode"]["object"]
        .as_str()
        .expect("deployed bytecode");
    let _: serde_json::Value = chain
        .provider
        .raw_request("anvil_setCode".into(), (chain.manager, code))
        .await
        .expect("anvil_setCode");
    LogFlood::new(chain.manager, chain.provider.clone())
}

/// One block holding plan 1 (of MERCHANT, 9.99 USDC) and `subs` subscriptions to it, each
/// created and charged: 2 x `subs` + 1 logs, in one transaction of at most `gas`. LogFlood
/// must be installed ([`install`]).
pub async fn flood_block(
    flood: &LogFlood::LogFloodInstance<DynProvider>,
    chain: &DevChain,
    subs: u64,
    gas: u64,
) -> TransactionReceipt {
    let receipt = flood
        .flood(
            U256::from(1),
            DevChain::address(accounts::MERCHANT),
            U256::from(9_990_000u64),
            U256::from(1),
            U256::from(subs),
            chain.now().await,
            true,
        )
        .from(DevChain::address(0))
        .gas(gas)
        .send()
        .await
        .expect("send flood")
        .get_receipt()
        .await
        .expect("flood receipt");
    assert!(receipt.status(), "flood reverted (out of gas?)");
    receipt
}
