//! Chains generated directly: `contracts/LogFlood.sol` (test-only) installed at a dev chain's
//! manager address emits SubscriptionManager's own events without its state, so a test or a
//! benchmark can build blocks with tens of thousands of events in seconds instead of sending
//! a real `subscribe` for each. The indexer cannot tell its logs from the manager's; the
//! contract's own rules are not exercised (the contract tests do that on the real code).

use alloy::providers::{DynProvider, Provider};

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
