//! A dev chain: anvil with MockUSDC and SubscriptionManager deployed from the committed
//! bytecode, and a provider that can sign for every anvil dev account.

use alloy::network::EthereumWallet;
use alloy::primitives::{Address, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::signers::local::PrivateKeySigner;
use chainsub_abi::{MockUSDC, SubscriptionManager};

use crate::anvil::Anvil;

alloy::sol!(
    /// The misbehaving test token (contracts/HostileToken.sol).
    #[sol(rpc)]
    HostileToken,
    "../abi/artifacts/HostileToken.json"
);

/// Private keys of anvil's ten default dev accounts (mnemonic "test test ... junk").
pub const DEV_KEYS: [&str; 10] = [
    "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
];

/// Role of each dev account in tests and the dev stack.
pub mod accounts {
    /// Deployer and operator (relayer) of SubscriptionManager.
    pub const OPERATOR: usize = 0;
    /// The keeper's key.
    pub const KEEPER: usize = 1;
    /// A merchant wallet.
    pub const MERCHANT: usize = 2;
    /// A second merchant wallet.
    pub const MERCHANT_B: usize = 3;
    /// Customers.
    pub const CUSTOMER: usize = 4;
    pub const CUSTOMER_B: usize = 5;
    /// An account with no role (for "a stranger is refused").
    pub const STRANGER: usize = 9;
}

/// The signer of dev account `i`.
pub fn dev_key(i: usize) -> PrivateKeySigner {
    DEV_KEYS[i].parse().expect("valid dev key")
}

/// A fresh anvil with the contracts deployed.
pub struct DevChain {
    pub anvil: Anvil,
    /// Signs for every dev account; pick one per call with `.from(addr)`.
    pub provider: DynProvider,
    pub usdc: Address,
    pub manager: Address,
    /// The block SubscriptionManager was deployed in (START_BLOCK).
    pub deploy_block: u64,
}

impl DevChain {
    /// Starts anvil and deploys MockUSDC and SubscriptionManager (operator = account 0).
    pub async fn start() -> Self {
        Self::with_anvil(Anvil::start()).await
    }

    /// Deploys onto an already running anvil.
    pub async fn with_anvil(anvil: Anvil) -> Self {
        let provider = signing_provider(&anvil.url);
        let usdc = MockUSDC::deploy(&provider).await.expect("deploy MockUSDC");
        let manager = SubscriptionManager::deploy(
            &provider,
            *usdc.address(),
            Self::address(accounts::OPERATOR),
        )
        .await
        .expect("deploy SubscriptionManager");
        let deploy_block = provider.get_block_number().await.expect("block number");
        Self {
            usdc: *usdc.address(),
            manager: *manager.address(),
            deploy_block,
            anvil,
            provider,
        }
    }

    /// Address of dev account `i`.
    pub fn address(i: usize) -> Address {
        dev_key(i).address()
    }

    /// SubscriptionManager bound to the signing provider.
    pub fn manager(&self) -> SubscriptionManager::SubscriptionManagerInstance<DynProvider> {
        SubscriptionManager::new(self.manager, self.provider.clone())
    }

    /// The terms `subscribe` must carry for plan `plan` (its merchant and amount), as the
    /// chain has them.
    pub async fn plan_terms(&self, plan: U256) -> (Address, U256) {
        let p = self.manager().getPlan(plan).call().await.expect("getPlan");
        (p.merchant, p.amount)
    }

    /// MockUSDC bound to the signing provider.
    pub fn usdc(&self) -> MockUSDC::MockUSDCInstance<DynProvider> {
        MockUSDC::new(self.usdc, self.provider.clone())
    }

    /// Mints `amount` base units to `to`.
    pub async fn mint(&self, to: Address, amount: u64) {
        self.usdc()
            .mint(to, U256::from(amount))
            .send()
            .await
            .expect("mint")
            .get_receipt()
            .await
            .expect("mint receipt");
    }

    /// Makes every USDC transfer fail without reverting (`true`) — as a paused token, a
    /// blocked recipient or a `false` return would — or puts the real MockUSDC back
    /// (`false`). The token's code is swapped for HostileToken's in `ReturnFalse` mode, whose
    /// storage layout keeps balances and allowances readable: the subscriber can pay, the pull
    /// still fails (`TransferFailed`, not the subscriber's fault).
    pub async fn token_transfers_fail(&self, fail: bool) {
        // MockUSDC has no immutables: its deployed code is the artifact's.
        let code = if fail {
            HostileToken::DEPLOYED_BYTECODE.clone()
        } else {
            MockUSDC::DEPLOYED_BYTECODE.clone()
        };
        let _: serde_json::Value = self
            .provider
            .raw_request("anvil_setCode".into(), (self.usdc, code))
            .await
            .expect("anvil_setCode");
        if fail {
            let mode = 1u8; // HostileToken.Mode.ReturnFalse
            HostileToken::new(self.usdc, self.provider.clone())
                .setMode(mode, Address::ZERO, Default::default())
                .send()
                .await
                .expect("setMode")
                .get_receipt()
                .await
                .expect("setMode receipt");
        }
    }

    /// Moves the chain clock forward by `secs` and mines a block.
    pub async fn increase_time(&self, secs: u64) {
        let _: serde_json::Value = self
            .provider
            .raw_request("evm_increaseTime".into(), (secs,))
            .await
            .expect("evm_increaseTime");
        self.mine(1).await;
    }

    /// `anvil_reorg`: replaces the last `depth` blocks with new ones holding `txs`
    /// (`(from, to, calldata, block offset)`; unsigned, anvil signs for its dev accounts),
    /// keeping the height.
    pub async fn reorg(&self, depth: u64, txs: &[(Address, Address, Vec<u8>, u64)]) {
        let txs: Vec<serde_json::Value> = txs
            .iter()
            .map(|(from, to, data, offset)| {
                serde_json::json!([
                    { "from": from, "to": to, "input": alloy::hex::encode_prefixed(data), "gas": "0x100000" },
                    offset
                ])
            })
            .collect();
        let _: serde_json::Value = self
            .provider
            .raw_request("anvil_reorg".into(), (depth, txs))
            .await
            .expect("anvil_reorg");
    }

    /// Mines `n` empty blocks.
    pub async fn mine(&self, n: u64) {
        let _: serde_json::Value = self
            .provider
            .raw_request("anvil_mine".into(), (format!("{n:#x}"),))
            .await
            .expect("anvil_mine");
    }

    /// Timestamp of the latest block.
    pub async fn now(&self) -> u64 {
        let block = self
            .provider
            .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
            .await
            .expect("latest block")
            .expect("a latest block");
        block.header.timestamp
    }
}

/// A provider that signs for all ten dev accounts.
pub fn signing_provider(url: &str) -> DynProvider {
    let mut wallet = EthereumWallet::from(dev_key(0));
    for i in 1..DEV_KEYS.len() {
        wallet.register_signer(dev_key(i));
    }
    // Simple (not cached) nonces: the cached manager reserves a nonce before gas estimation,
    // so a call that reverts in estimation leaves a gap and the account's next transaction
    // never mines. Tests send reverting calls on purpose.
    ProviderBuilder::new()
        .disable_recommended_fillers()
        .with_gas_estimation()
        .with_simple_nonce_management()
        .fetch_chain_id()
        .wallet(wallet)
        .connect_http(url.parse().expect("rpc url"))
        .erased()
}
