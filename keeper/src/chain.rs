//! Everything the keeper asks of the chain: chain time, preflight, funds, and — through the
//! one chain sender it shares with the API's relayer (`chainsub-sender`) — fees, signing,
//! broadcasting and receipts. Transactions are signed locally (so their hash is known and
//! journaled before the node ever sees them) and sent with `eth_sendRawTransaction`.

use alloy::eips::BlockNumberOrTag;
use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::TransactionRequest;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolCall;
use alloy::transports::TransportError;
use chainsub_abi::MockUSDC;
use chainsub_abi::SubscriptionManager::{self, SubscriptionManagerErrors};
use chainsub_core::OnchainSubscriptionId;

use super::error::{Error, Result};
use chainsub_sender::Sender;
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
            Self::NotDue => "not_due",
            Self::NotLive => "not_live",
            Self::Reverted(_) => "reverted",
        }
    }
}

pub use chainsub_sender::Broadcast;

/// The chain side of the keeper.
pub struct Chain {
    sender: Sender,
    provider: DynProvider,
    /// The keeper's address (pays gas).
    pub keeper: Address,
    pub chain_id: chainsub_core::ChainId,
    /// SubscriptionManager.
    pub manager: Address,
    /// The token SubscriptionManager pulls (read from the contract).
    pub token: Address,
}

/// Which of the contract's charge functions a keeper transaction calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeCall {
    /// `charge(id)`: one subscription.
    One,
    /// `chargeMany(ids)`: a batch (it skips, rather than reverts, what is not due).
    Many,
}

impl ChargeCall {
    /// The call for a batch of `n` subscriptions.
    pub fn for_batch(n: usize) -> Self {
        if n > 1 { Self::Many } else { Self::One }
    }
}

impl Chain {
    /// Connects, checks the chain id and reads the token address.
    pub async fn connect(
        rpc_url: &chainsub_core::RpcUrl,
        chain_id: chainsub_core::ChainId,
        manager: Address,
        key: PrivateKeySigner,
    ) -> Result<Self> {
        let sender = Sender::connect(rpc_url, chain_id, key).await?;
        let provider = sender.provider().clone();
        let contract = SubscriptionManager::new(manager, provider.clone());
        let not_the_contract =
            |call: &str, e| Error::Config(format!("CONTRACT_ADDRESS {manager}: {call}: {e}"));
        let token = (contract.token().call().await).map_err(|e| not_the_contract("token()", e))?;
        let keeper = sender.address();
        // The operator key is the API relayer's: two senders on one key take the same nonces
        // and replace each other's transactions without an error anywhere.
        let operator =
            (contract.operator().call().await).map_err(|e| not_the_contract("operator()", e))?;
        let pending = (contract.pendingOperator().call().await)
            .map_err(|e| not_the_contract("pendingOperator()", e))?;
        if keeper == operator || keeper == pending {
            let whose = if keeper == operator {
                "operator"
            } else {
                "pending operator"
            };
            return Err(Error::Config(format!(
                "KEEPER_PRIVATE_KEY is the contract {whose}'s key ({keeper}), which the API's \
                 relayer sends with: give the keeper a key of its own (two senders on one key \
                 replace each other's transactions)"
            )));
        }
        Ok(Self {
            sender,
            provider,
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

    /// `charge(id)` (one id, [`ChargeCall::One`]) or `chargeMany(ids)`.
    fn charge_request(
        &self,
        subscription_ids: &[OnchainSubscriptionId],
        call: ChargeCall,
    ) -> TransactionRequest {
        let input = match subscription_ids {
            [one] if call == ChargeCall::One => SubscriptionManager::chargeCall {
                subscriptionId: (*one).into(),
            }
            .abi_encode(),
            many => SubscriptionManager::chargeManyCall {
                subscriptionIds: many.iter().map(|&id| id.into()).collect(),
            }
            .abi_encode(),
        };
        TransactionRequest::default()
            .with_from(self.keeper)
            .with_to(self.manager)
            .with_input(Bytes::from(input))
    }

    /// Estimates `charge(id)` from the keeper's address. A revert (NotDue, NotLive, ...)
    /// means the call must not be sent; otherwise returns the node's estimate.
    pub async fn preflight(
        &self,
        subscription_id: OnchainSubscriptionId,
    ) -> Result<Result<u64, Skip>> {
        // Against the latest block (the sender's rule). A send of ours still in the pool is
        // kept unique by the journal, not by this check.
        match self
            .sender
            .estimate(self.charge_request(&[subscription_id], ChargeCall::One))
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

    /// Estimates `chargeMany(ids)` (which skips rather than reverts, so only a transport
    /// failure or an unexpected revert is an error).
    pub async fn estimate_many(&self, subscription_ids: &[OnchainSubscriptionId]) -> Result<u64> {
        Ok(self
            .sender
            .estimate(self.charge_request(subscription_ids, ChargeCall::Many))
            .await?)
    }

    /// The subscriber's token balance and allowance toward SubscriptionManager (at `block`,
    /// or the latest).
    pub async fn funds(&self, subscriber: Address) -> Result<(U256, U256)> {
        self.funds_at(subscriber, None).await
    }

    /// [`Chain::funds`] at the block with hash `block` (`None`: the latest): both reads see
    /// the same state, or fail if a reorg took that block away.
    pub async fn funds_at(&self, subscriber: Address, block: Option<B256>) -> Result<(U256, U256)> {
        let token = MockUSDC::new(self.token, self.provider.clone());
        let at = block.map_or(alloy::eips::BlockId::latest(), alloy::eips::BlockId::hash);
        let balance = token
            .balanceOf(subscriber)
            .block(at)
            .call()
            .await
            .map_err(|e| Error::Config(format!("balanceOf: {e}")))?;
        let allowance = token
            .allowance(subscriber, self.manager)
            .block(at)
            .call()
            .await
            .map_err(|e| Error::Config(format!("allowance: {e}")))?;
        Ok((balance, allowance))
    }

    /// The latest block: (number, hash, timestamp).
    pub async fn latest_block(&self) -> Result<(u64, B256, u64)> {
        let block = self
            .provider
            .get_block_by_number(BlockNumberOrTag::Latest)
            .await?
            .ok_or_else(|| Error::Config("the node has no latest block".into()))?;
        Ok((
            block.header.number,
            block.header.hash,
            block.header.timestamp,
        ))
    }

    /// Current EIP-1559 fee suggestion: (max fee, priority fee), uncapped.
    pub async fn fees(&self) -> Result<(u128, u128)> {
        Ok(self.sender.fees(None).await?)
    }

    /// Signs `charge(id)` or `chargeMany(ids)` (as `call` says) with the given nonce,
    /// gas and fees.
    pub async fn sign(
        &self,
        subscription_ids: &[OnchainSubscriptionId],
        call: ChargeCall,
        nonce: u64,
        gas_limit: u64,
        max_fee_per_gas: u128,
        max_priority_fee_per_gas: u128,
    ) -> Result<SignedTx> {
        Ok(self
            .sender
            .sign(
                self.charge_request(subscription_ids, call),
                nonce,
                gas_limit,
                max_fee_per_gas,
                max_priority_fee_per_gas,
            )
            .await?)
    }

    /// Broadcasts signed bytes. Transport failures are errors (the outcome is unknown: the
    /// journal keeps the transaction pending and it is re-broadcast later).
    pub async fn broadcast(&self, raw: &[u8]) -> Result<Broadcast> {
        Ok(self.sender.broadcast(raw).await?)
    }

    /// The receipt of `hash`, if mined, with the subscriptions the transaction acted on: the
    /// ids its `SubscriptionCharged`, `PaymentFailed` and `SubscriptionEnded` events name
    /// (`chargeMany` skips an id it cannot charge; `charge` reverts instead).
    pub async fn receipt(
        &self,
        hash: B256,
    ) -> Result<Option<(Outcome, Vec<OnchainSubscriptionId>)>> {
        let Some((out, logs)) = self.sender.receipt_with_logs(hash).await? else {
            return Ok(None);
        };
        let acted = logs
            .iter()
            .filter(|l| l.address() == self.manager)
            .filter_map(|l| acted_on(l.topics()))
            .collect();
        Ok(Some((out, acted)))
    }

    /// Whether the node holds transaction `hash` (in its pool or mined).
    pub async fn node_holds(&self, hash: B256) -> Result<bool> {
        Ok(self.sender.node_holds(hash).await?)
    }

    /// The keeper's next nonce counting transactions in the node's pool.
    pub async fn pending_nonce(&self) -> Result<u64> {
        Ok(self.sender.pending_nonce().await?)
    }

    /// The keeper's next nonce counting mined transactions only.
    pub async fn mined_nonce(&self) -> Result<u64> {
        Ok(self.sender.mined_nonce().await?)
    }

    /// The keeper's ETH balance (reported in metrics).
    pub async fn keeper_balance(&self) -> Result<U256> {
        Ok(self.sender.balance().await?)
    }
}

/// The subscription a manager log says was charged, failed or ended (its first indexed
/// topic), if it is one of those events.
fn acted_on(topics: &[B256]) -> Option<OnchainSubscriptionId> {
    use alloy::sol_types::SolEvent;
    let sig = *topics.first()?;
    let acted = sig == SubscriptionManager::SubscriptionCharged::SIGNATURE_HASH
        || sig == SubscriptionManager::PaymentFailed::SIGNATURE_HASH
        || sig == SubscriptionManager::SubscriptionEnded::SIGNATURE_HASH;
    let id = U256::from_be_bytes(topics.get(1)?.0);
    acted
        .then(|| OnchainSubscriptionId::try_from(id).ok())
        .flatten()
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
