//! The dev chain: anvil on a fixed port, the contracts deployed from the committed bytecode,
//! and test USDC for the dev accounts.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use anyhow::{Context, Result, anyhow, bail};
use chainsub_abi::{MockUSDC, SubscriptionManager, USDC_DECIMALS};
use chainsub_tests::anvil::anvil_bin;
use chainsub_tests::chain::{DevChain, accounts, signing_provider};

use crate::stack::Stack;

/// What `deploy` put on chain.
#[derive(Debug, Clone)]
pub(crate) struct Deployed {
    pub chain_id: u64,
    pub manager: Address,
    pub usdc: Address,
    /// The block SubscriptionManager was deployed in (START_BLOCK).
    pub deploy_block: u64,
}

/// Starts anvil on 127.0.0.1:`port` as a child of the stack (port 0: a port anvil binds
/// itself, read back from its socket); returns its URL.
pub(crate) fn start_anvil(stack: &mut Stack, port: u16) -> Result<String> {
    // Fail with a useful message rather than letting anvil exit on a taken port.
    TcpListener::bind(("127.0.0.1", port)).map_err(|e| {
        anyhow!(
            "port {port} is taken ({e}): another `scripts/dev up`? \
             Run `scripts/dev down`, or pass --anvil-port"
        )
    })?;
    let log = stack.log_file("anvil")?;
    let mut cmd = Command::new(anvil_bin());
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--chain-id", "31337"])
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log));
    stack.spawn("anvil", cmd)?;
    let port = match port {
        0 => stack.listening_port("anvil")?,
        p => p,
    };
    Ok(format!("http://127.0.0.1:{port}"))
}

/// Waits until the RPC answers, failing early if a child of the stack died.
pub(crate) async fn wait_for_rpc(url: &str, stack: &mut Stack) -> Result<()> {
    let provider = signing_provider(url);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if provider.get_chain_id().await.is_ok() {
            return Ok(());
        }
        if let Some(dead) = stack.exited() {
            bail!(
                "{dead} exited during start-up; see {}",
                stack.dir().display()
            );
        }
        if Instant::now() > deadline {
            bail!("no answer from {url} after 30s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deploys MockUSDC and SubscriptionManager (operator = dev account 0) and mints
/// `mint_usdc` whole USDC to dev accounts 2..=9.
pub(crate) async fn deploy(url: &str, mint_usdc: u64) -> Result<Deployed> {
    let provider = signing_provider(url);
    let chain_id = provider.get_chain_id().await.context("eth_chainId")?;
    let operator = DevChain::address(accounts::OPERATOR);
    let usdc = MockUSDC::deploy(&provider)
        .await
        .context("deploy MockUSDC")?;
    let receipt = SubscriptionManager::deploy_builder(&provider, *usdc.address(), operator)
        .from(operator)
        .send()
        .await
        .context("send SubscriptionManager deployment")?
        .get_receipt()
        .await
        .context("SubscriptionManager deployment receipt")?;
    let manager = receipt
        .contract_address
        .ok_or_else(|| anyhow!("SubscriptionManager deployment created no contract"))?;
    let deploy_block = receipt
        .block_number
        .ok_or_else(|| anyhow!("deployment receipt without a block"))?;

    let per_account = U256::from(mint_usdc) * U256::from(10u64).pow(U256::from(USDC_DECIMALS));
    for i in 2..=9 {
        usdc.mint(DevChain::address(i), per_account)
            .send()
            .await
            .with_context(|| format!("mint to dev account {i}"))?
            .get_receipt()
            .await?;
    }
    Ok(Deployed {
        chain_id,
        manager,
        usdc: *usdc.address(),
        deploy_block,
    })
}
