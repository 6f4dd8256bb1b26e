//! Everything the keeper asks of the chain: chain time, preflight, funds, fees, signing,
//! broadcasting and receipts. Transactions are signed locally (so their hash is known and
//! journaled before the node ever sees them) and sent with `eth_sendRawTransaction`.

use alloy::consensus::TxEnvelope;
use alloy::eips::{BlockNumberOrTag, Encodable2718};
use alloy::network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder};
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::TransactionRequest;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolCall;
use alloy::transports::TransportError;
use chainsub_abi::MockUSDC;
use chainsub_abi::SubscriptionManager::{self, SubscriptionManagerErrors};

use super::error::{Error, Result};
use chainsub_store::keeper::{Outcome, SignedTx};

/// Why a due step was not sent after the preflight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The chain says it is not due yet (the index may be ahead of a lagging node, or the
    /// other way round).
    NotDue,
    /// Cancelled or ended on chain; the index has not caught up.
    NotLive,
    /// Any other revert.
    Reverted(String),
}

impl Skip {
    /// Metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Skip::NotDue => "not_due",
            Skip::NotLive => "not_live",
            Skip::Reverted(_) => "reverted",
        }
    }
}

/// What the node said to a broadcast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broadcast {
    /// In the pool (or already there: a re-broadcast after a restart).
    Accepted,
    /// The nonce is already used: re-sync the counter.
    NonceTooLow,
    /// A replacement whose fee bump the node finds too small.
    Underpriced,
    /// Refused for another reason; the transaction is not in the pool.
    Rejected(String),
}

/// The chain side of the keeper.
pub struct Chain {
    provider: DynProvider,
    wallet: EthereumWallet,
    /// The keeper's address (pays gas).
    pub keeper: Address,
    pub chain_id: u64,
    /// SubscriptionManager.
    pub manager: Address,
    /// The token SubscriptionManager pulls (read from the contract).
    pub token: Address,
}

impl Chain {
    /// Connects, checks the chain id and reads the token address.
    pub async fn connect(
        rpc_url: &str,
        chain_id: u64,
        manager: Address,
        key: PrivateKeySigner,
    ) -> Result<Chain> {
        let url = rpc_url
            .parse()
            .map_err(|e| Error::Config(format!("RPC_URL: {e}")))?;
        // No fillers: nonce, gas and fees are the keeper's own decisions.
        let provider = ProviderBuilder::new()
            .disable_recommended_fillers()
            .connect_http(url)
            .erased();
        let actual = provider.get_chain_id().await?;
        if actual != chain_id {
            return Err(Error::Config(format!(
                "CHAIN_ID is {chain_id} but the RPC serves chain {actual}"
            )));
        }
        let token = SubscriptionManager::new(manager, provider.clone())
            .token()
            .call()
            .await
            .map_err(|e| Error::Config(format!("CONTRACT_ADDRESS {manager}: token(): {e}")))?;
        let keeper = key.address();
        Ok(Chain {
            provider,
            wallet: EthereumWallet::from(key),
            keeper,
            chain_id,
            manager,
            token,
        })
    }

    /// Timestamp of the latest block: the only clock that decides what is due.
    pub async fn chain_time(&self) -> Result<u64> {
        let block = self
            .provider
            .get_block_by_number(BlockNumberOrTag::Latest)
            .await?
            .ok_or_else(|| Error::Config("the node has no latest block".into()))?;
        Ok(block.header.timestamp)
    }

    /// The latest block number.
    pub async fn head(&self) -> Result<u64> {
        Ok(self.provider.get_block_number().await?)
    }

    fn charge_request(&self, subscription_id: u64) -> TransactionRequest {
        let input = SubscriptionManager::chargeCall {
            subscriptionId: U256::from(subscription_id),
        }
        .abi_encode();
        TransactionRequest::default()
            .with_from(self.keeper)
            .with_to(self.manager)
            .with_input(Bytes::from(input))
    }

    /// Estimates `charge(id)` from the keeper's address. A revert (NotDue, NotLive, ...)
    /// means the call must not be sent; otherwise returns the node's estimate.
    pub async fn preflight(&self, subscription_id: u64) -> Result<Result<u64, Skip>> {
        match self
            .provider
            .estimate_gas(self.charge_request(subscription_id))
            // Latest, not pending: nodes disagree on the default. A send of ours still in
            // the pool is kept unique by the journal, not by this check.
            .latest()
            .await
        {
            // The caller adds headroom: the estimate is against the latest block.
            Ok(gas) => Ok(Ok(gas)),
            Err(e) => match classify_revert(&e) {
                Some(skip) => Ok(Err(skip)),
                None => Err(e.into()),
            },
        }
    }

    /// The subscriber's token balance and allowance toward SubscriptionManager.
    pub async fn funds(&self, subscriber: Address) -> Result<(U256, U256)> {
        let token = MockUSDC::new(self.token, self.provider.clone());
        let balance = token
            .balanceOf(subscriber)
            .call()
            .await
            .map_err(|e| Error::Config(format!("balanceOf: {e}")))?;
        let allowance = token
            .allowance(subscriber, self.manager)
            .call()
            .await
            .map_err(|e| Error::Config(format!("allowance: {e}")))?;
        Ok((balance, allowance))
    }

    /// Current EIP-1559 fee suggestion: (max fee, priority fee).
    pub async fn fees(&self) -> Result<(u128, u128)> {
        let est = self.provider.estimate_eip1559_fees().await?;
        Ok((est.max_fee_per_gas, est.max_priority_fee_per_gas))
    }

    /// Signs `charge(id)` with the given nonce, gas and fees.
    pub async fn sign(
        &self,
        subscription_id: u64,
        nonce: u64,
        gas_limit: u64,
        max_fee_per_gas: u128,
        max_priority_fee_per_gas: u128,
    ) -> Result<SignedTx> {
        let request = self
            .charge_request(subscription_id)
            .with_nonce(nonce)
            .with_chain_id(self.chain_id)
            .with_gas_limit(gas_limit)
            .with_max_fee_per_gas(max_fee_per_gas)
            .with_max_priority_fee_per_gas(max_priority_fee_per_gas);
        let envelope: TxEnvelope = request
            .build(&self.wallet)
            .await
            .map_err(|e| Error::Sign(e.to_string()))?;
        Ok(SignedTx {
            nonce,
            hash: *envelope.tx_hash(),
            raw: envelope.encoded_2718(),
            gas_limit,
            max_fee_per_gas,
            max_priority_fee_per_gas,
        })
    }

    /// Broadcasts signed bytes. Transport failures are errors (the outcome is unknown: the
    /// journal keeps the transaction pending and it is re-broadcast later).
    pub async fn broadcast(&self, raw: &[u8]) -> Result<Broadcast> {
        match self.provider.send_raw_transaction(raw).await {
            Ok(_) => Ok(Broadcast::Accepted),
            Err(e) => match e.as_error_resp() {
                Some(payload) => Ok(classify_broadcast(&payload.message)),
                None => Err(e.into()),
            },
        }
    }

    /// The receipt of `hash`, if mined.
    pub async fn receipt(&self, hash: B256) -> Result<Option<Outcome>> {
        let Some(r) = self.provider.get_transaction_receipt(hash).await? else {
            return Ok(None);
        };
        Ok(Some(Outcome {
            success: r.status(),
            block_number: r.block_number.unwrap_or_default(),
            gas_used: r.gas_used,
            effective_gas_price: r.effective_gas_price,
        }))
    }

    /// The keeper's next nonce counting transactions in the node's pool.
    pub async fn pending_nonce(&self) -> Result<u64> {
        Ok(self
            .provider
            .get_transaction_count(self.keeper)
            .pending()
            .await?)
    }

    /// The keeper's next nonce counting mined transactions only.
    pub async fn mined_nonce(&self) -> Result<u64> {
        Ok(self
            .provider
            .get_transaction_count(self.keeper)
            .latest()
            .await?)
    }

    /// The keeper's ETH balance (reported in metrics).
    pub async fn keeper_balance(&self) -> Result<U256> {
        Ok(self.provider.get_balance(self.keeper).await?)
    }
}

fn classify_revert(e: &TransportError) -> Option<Skip> {
    let payload = e.as_error_resp()?;
    if let Some(decoded) = payload.as_decoded_interface_error::<SubscriptionManagerErrors>() {
        return Some(match decoded {
            SubscriptionManagerErrors::NotDue(_) => Skip::NotDue,
            SubscriptionManagerErrors::NotLive(_)
            | SubscriptionManagerErrors::UnknownSubscription(_) => Skip::NotLive,
            other => Skip::Reverted(format!("{other:?}")),
        });
    }
    let msg = payload.message.to_lowercase();
    (msg.contains("revert")).then(|| Skip::Reverted(payload.message.to_string()))
}

/// Maps a node's refusal message (geth, anvil, reth wordings) to what the keeper does next.
fn classify_broadcast(message: &str) -> Broadcast {
    let m = message.to_lowercase();
    if m.contains("already known")
        || m.contains("already imported")
        || m.contains("known transaction")
    {
        Broadcast::Accepted
    } else if m.contains("nonce too low") || m.contains("nonce is too low") {
        Broadcast::NonceTooLow
    } else if m.contains("underpriced") {
        Broadcast::Underpriced
    } else {
        Broadcast::Rejected(message.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_refusals_map_to_keeper_decisions() {
        assert_eq!(classify_broadcast("already known"), Broadcast::Accepted);
        assert_eq!(
            classify_broadcast("transaction already imported"),
            Broadcast::Accepted
        );
        assert_eq!(
            classify_broadcast("nonce too low: next nonce 5, tx nonce 3"),
            Broadcast::NonceTooLow
        );
        assert_eq!(
            classify_broadcast("replacement transaction underpriced"),
            Broadcast::Underpriced
        );
        assert!(matches!(
            classify_broadcast("insufficient funds for gas * price + value"),
            Broadcast::Rejected(_)
        ));
    }
}
