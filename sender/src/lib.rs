//! The one chain sender of the keeper (renewal charges) and the relayer (plan provisioning).
//!
//! Neither lets alloy decide a nonce, gas or fees: a cached nonce that advanced on a failed
//! estimate or send left every later transaction waiting at a nonce the chain never reaches.
//! The caller estimates (against the latest block), decides the nonce under its own
//! discipline (the keeper's journal and lock, the relayer's per-key database lock), and
//! [`Sender::sign`]s locally — so the hash is known, and can be journaled, before the node
//! sees the transaction — then [`Sender::broadcast`]s the raw bytes, getting the node's
//! refusals as a [`Broadcast`] it can act on (re-sync a nonce, bump a replacement).

#![warn(missing_docs)]

use alloy::consensus::TxEnvelope;
use alloy::eips::Encodable2718;
use alloy::network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder};
use alloy::primitives::{Address, B256, U256, keccak256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::TransactionRequest;
use alloy::signers::local::PrivateKeySigner;
use alloy::transports::TransportError;
use chainsub_core::ChainId;
use chainsub_core::RpcUrl;
pub use chainsub_core::{Outcome, SignedTx};

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The node could not be reached or answered with an error.
    #[error("rpc: {0}")]
    Rpc(#[from] TransportError),
    /// A configuration mismatch, such as the node serving another chain than `CHAIN_ID`.
    #[error("{0}")]
    Config(String),
    /// The transaction could not be built or signed.
    #[error("signing: {0}")]
    Sign(String),
}

/// What the node said to a broadcast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broadcast {
    /// In the pool (or already there: a re-broadcast).
    Accepted,
    /// The nonce is already used: re-read it from the node.
    NonceTooLow,
    /// A replacement whose fee bump the node finds too small.
    Underpriced,
    /// Refused for another reason; the transaction is not in the pool.
    Rejected(String),
}

/// Signs with one key and sends to one node.
pub struct Sender {
    provider: DynProvider,
    wallet: EthereumWallet,
    address: Address,
    chain_id: ChainId,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("address", &self.address)
            .field("chain_id", &self.chain_id)
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// A sender for `key` on `rpc_url` (no request yet: the node may still be down).
    pub fn new(rpc_url: &RpcUrl, chain_id: ChainId, key: PrivateKeySigner) -> Result<Self, Error> {
        // No fillers: nonce, gas and fees are the caller's decisions.
        let provider = rpc_url.provider();
        Ok(Self {
            provider,
            address: key.address(),
            wallet: EthereumWallet::from(key),
            chain_id,
        })
    }

    /// [`Sender::new`], checking that the node serves `chain_id`.
    pub async fn connect(
        rpc_url: &RpcUrl,
        chain_id: ChainId,
        key: PrivateKeySigner,
    ) -> Result<Self, Error> {
        let sender = Self::new(rpc_url, chain_id, key)?;
        let actual = sender.provider.get_chain_id().await?;
        if actual != chain_id.get() {
            return Err(Error::Config(format!(
                "CHAIN_ID is {chain_id} but the RPC serves chain {actual}"
            )));
        }
        Ok(sender)
    }

    /// The node (for reads: calls, logs, receipts).
    pub fn provider(&self) -> &DynProvider {
        &self.provider
    }

    /// The key's address (pays the gas).
    pub fn address(&self) -> Address {
        self.address
    }

    /// Gas of `request` from this key, against the latest block (nodes disagree on the
    /// default; the pending state may hold the very transaction a replacement replaces).
    pub async fn estimate(&self, request: TransactionRequest) -> Result<u64, TransportError> {
        self.provider
            .estimate_gas(request.with_from(self.address))
            .latest()
            .await
    }

    /// The node's EIP-1559 suggestion (max fee, priority fee), the max fee capped at `cap`.
    pub async fn fees(&self, cap: Option<u128>) -> Result<(u128, u128), Error> {
        let est = self.provider.estimate_eip1559_fees().await?;
        let mut max_fee = est.max_fee_per_gas;
        if let Some(cap) = cap {
            max_fee = max_fee.min(cap);
        }
        Ok((max_fee, est.max_priority_fee_per_gas.min(max_fee)))
    }

    /// Signs `request` (to, input) with the given nonce, gas limit and fees.
    pub async fn sign(
        &self,
        request: TransactionRequest,
        nonce: u64,
        gas_limit: u64,
        max_fee_per_gas: u128,
        max_priority_fee_per_gas: u128,
    ) -> Result<SignedTx, Error> {
        let envelope: TxEnvelope = request
            .with_from(self.address)
            .with_nonce(nonce)
            .with_chain_id(self.chain_id.get())
            .with_gas_limit(gas_limit)
            .with_max_fee_per_gas(max_fee_per_gas)
            .with_max_priority_fee_per_gas(max_priority_fee_per_gas)
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

    /// Broadcasts signed bytes. A transport failure is an error (the outcome is unknown:
    /// whoever journaled the bytes sends them again later).
    pub async fn broadcast(&self, raw: &[u8]) -> Result<Broadcast, TransportError> {
        match self.provider.send_raw_transaction(raw).await {
            Ok(_) => Ok(Broadcast::Accepted),
            Err(e) => match e.as_error_resp() {
                Some(payload) => Ok(classify_broadcast(&payload.message)),
                None => Err(e),
            },
        }
    }

    /// [`Sender::broadcast`] of journaled bytes that others may send too (every reader of the
    /// journal may re-broadcast them): a used nonce that this very transaction took — mined
    /// from someone else's copy — is the transaction accepted, not a nonce to re-read.
    pub async fn broadcast_journaled(&self, raw: &[u8]) -> Result<Broadcast, TransportError> {
        match self.broadcast(raw).await? {
            Broadcast::NonceTooLow if self.receipt(keccak256(raw)).await?.is_some() => {
                Ok(Broadcast::Accepted)
            }
            said => Ok(said),
        }
    }

    /// The receipt of `hash`, if mined.
    pub async fn receipt(&self, hash: B256) -> Result<Option<Outcome>, TransportError> {
        Ok(self.receipt_with_logs(hash).await?.map(|(out, _)| out))
    }

    /// [`Sender::receipt`] with the transaction's logs (what a call that acts on many
    /// items did to each).
    pub async fn receipt_with_logs(
        &self,
        hash: B256,
    ) -> Result<Option<(Outcome, Vec<alloy::rpc::types::Log>)>, TransportError> {
        let Some(r) = self.provider.get_transaction_receipt(hash).await? else {
            return Ok(None);
        };
        let out = Outcome {
            success: r.status(),
            block_number: r.block_number.unwrap_or_default(),
            gas_used: r.gas_used,
            effective_gas_price: r.effective_gas_price,
        };
        Ok(Some((out, r.inner.logs().to_vec())))
    }

    /// Whether the node holds the transaction `hash`, in its pool or in a block. A
    /// transaction that was sent and that the node no longer holds (a reorg removed the block
    /// it was in; the node restarted or evicted it) reaches no block until someone
    /// broadcasts it again.
    pub async fn node_holds(&self, hash: B256) -> Result<bool, TransportError> {
        Ok(self.provider.get_transaction_by_hash(hash).await?.is_some())
    }

    /// The key's next nonce counting transactions in the node's pool.
    pub async fn pending_nonce(&self) -> Result<u64, TransportError> {
        self.provider
            .get_transaction_count(self.address)
            .pending()
            .await
    }

    /// The key's next nonce counting mined transactions only.
    pub async fn mined_nonce(&self) -> Result<u64, TransportError> {
        self.provider
            .get_transaction_count(self.address)
            .latest()
            .await
    }

    /// The key's ETH balance.
    pub async fn balance(&self) -> Result<U256, TransportError> {
        self.provider.get_balance(self.address).await
    }
}

/// `fee` raised by `percent` (and by at least 1 wei): a replacement's fee.
pub fn bumped(fee: u128, percent: u128) -> u128 {
    fee.saturating_mul(100 + percent) / 100 + 1
}

/// Maps a node's refusal message (geth, anvil, reth wordings) to what the caller does next.
pub fn classify_broadcast(message: &str) -> Broadcast {
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
    fn node_refusals_map_to_decisions() {
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

    #[test]
    fn a_bump_is_at_least_the_percentage_and_one_wei() {
        assert_eq!(bumped(100, 25), 126);
        assert_eq!(bumped(0, 25), 1);
    }
}
