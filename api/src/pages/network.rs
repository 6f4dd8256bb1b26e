//! The network's name as the pages show it (`CHAIN_NAME`, else a well-known chain id's).

/// The names of the chains a deployment is likely to run on.
const KNOWN_CHAINS: &[(u64, &str)] = &[
    (1, "Ethereum"),
    (10, "OP Mainnet"),
    (137, "Polygon"),
    (8453, "Base"),
    (42161, "Arbitrum One"),
    (43114, "Avalanche C-Chain"),
    (84532, "Base Sepolia (testnet)"),
    (11155111, "Sepolia (testnet)"),
    (31337, "Local development chain (Anvil)"),
];

/// The network's name as the pages show it to customers.
pub fn name(cfg: &crate::config::Config) -> String {
    let id = cfg.chain_id.get();
    cfg.pages.chain_name.clone().unwrap_or_else(|| {
        KNOWN_CHAINS
            .iter()
            .find(|(known, _)| *known == id)
            .map_or_else(|| format!("Chain {id}"), |(_, name)| (*name).to_string())
    })
}
