//! Shared fixture for the contract tests: a fresh chain with one plan, a funded customer who
//! approved the manager, and helpers that send a call as one dev account and return the
//! manager's logs decoded through `chainsub_abi::ContractEvent`.

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::rpc::types::TransactionReceipt;
use chainsub_abi::ContractEvent;
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerErrors};
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts;

/// `SubscriptionManager.Status` as the ABI encodes it.
pub(crate) mod status {
    pub(crate) const ACTIVE: u8 = 1;
    pub(crate) const PAST_DUE: u8 = 2;
    pub(crate) const CANCELLED: u8 = 3;
    pub(crate) const ENDED: u8 = 4;
}

/// 9.99 USDC in base units.
pub(crate) const PRICE: u64 = 9_990_000;
pub(crate) const DAY: u64 = 86_400;

/// Sends a contract call as `$from`, expects it to revert, and returns the decoded custom
/// error of SubscriptionManager.
macro_rules! revert_as {
    ($from:expr, $call:expr) => {{
        match $call.from($from).send().await {
            Ok(_) => panic!("expected a revert, the call was accepted"),
            Err(e) => $crate::contract_support::decode_revert(&e),
        }
    }};
}

/// The custom error inside a reverted call.
pub(crate) fn decode_revert(e: &alloy::contract::Error) -> SubscriptionManagerErrors {
    e.as_decoded_interface_error::<SubscriptionManagerErrors>()
        .unwrap_or_else(|| panic!("not a SubscriptionManager custom error: {e}"))
}

/// Every SubscriptionManager log of the receipt, decoded; a log that fails to decode fails
/// the test.
pub(crate) fn manager_events(chain: &DevChain, receipt: &TransactionReceipt) -> Vec<ContractEvent> {
    receipt
        .inner
        .logs()
        .iter()
        .filter(|l| l.address() == chain.manager)
        .map(|l| ContractEvent::decode(&l.inner).expect("every manager log decodes"))
        .collect()
}

/// Timestamp of the block that included the receipt.
pub(crate) async fn block_time(chain: &DevChain, receipt: &TransactionReceipt) -> u64 {
    let n = receipt.block_number.expect("mined receipt");
    chain
        .provider
        .get_block_by_number(n.into())
        .await
        .expect("block")
        .expect("block exists")
        .header
        .timestamp
}

/// Calendar month arithmetic from chrono, the reference the contract must agree with.
pub(crate) fn months_after(anchor: u64, months: u32) -> u64 {
    chainsub_abi::add_months(anchor, months).expect("in chrono's range")
}

/// A chain with a plan of `PRICE` for MERCHANT, created by the operator, and CUSTOMER
/// funded with `funds` and an unlimited approval.
pub(crate) struct Fixture {
    pub chain: DevChain,
    pub plan_id: U256,
    pub amount: U256,
    pub merchant: Address,
    pub customer: Address,
    pub keeper: Address,
    pub stranger: Address,
}

/// A live subscription as created by [`Fixture::subscribe`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sub {
    pub id: U256,
    /// The subscription's anchor (block time of the subscribe transaction).
    pub anchor: u64,
}

impl Fixture {
    /// A plan and a customer holding ten periods' worth of USDC.
    pub(crate) async fn new() -> Self {
        Self::with_funds(10 * PRICE).await
    }

    /// A plan and a customer holding `funds` base units, approved without limit.
    pub(crate) async fn with_funds(funds: u64) -> Self {
        let chain = DevChain::start().await;
        let operator = DevChain::address(accounts::OPERATOR);
        let merchant = DevChain::address(accounts::MERCHANT);
        let customer = DevChain::address(accounts::CUSTOMER);
        let manager = chain.manager();
        send_as!(
            operator,
            manager.createPlan(merchant, U256::from(PRICE), B256::repeat_byte(0x11))
        );
        chain.mint(customer, funds).await;
        send_as!(customer, chain.usdc().approve(chain.manager, U256::MAX));
        Self {
            chain,
            plan_id: U256::from(1),
            amount: U256::from(PRICE),
            merchant,
            customer,
            keeper: DevChain::address(accounts::KEEPER),
            stranger: DevChain::address(accounts::STRANGER),
        }
    }

    /// CUSTOMER subscribes to the plan (first period charged at once).
    pub(crate) async fn subscribe(&self) -> Sub {
        self.subscribe_with_gas().await.0
    }

    /// [`Fixture::subscribe`], with the gas the transaction used.
    pub(crate) async fn subscribe_with_gas(&self) -> (Sub, u64) {
        let receipt = send_as!(
            self.customer,
            self.chain.manager().subscribe(
                self.plan_id,
                self.merchant,
                self.amount,
                B256::repeat_byte(0xcc)
            )
        );
        let anchor = block_time(&self.chain, &receipt).await;
        let id = match manager_events(&self.chain, &receipt).first() {
            Some(ContractEvent::SubscriptionCreated(e)) => e.subscriptionId,
            other => panic!("subscribe emitted {other:?} first"),
        };
        (Sub { id, anchor }, receipt.gas_used)
    }

    /// The keeper calls `charge`; returns the receipt (the call must not revert).
    pub(crate) async fn charge(&self, sub: U256) -> TransactionReceipt {
        send_as!(self.keeper, self.chain.manager().charge(sub))
    }

    /// The keeper's `charge` reverts; returns the error.
    pub(crate) async fn charge_reverts(&self, sub: U256) -> SubscriptionManagerErrors {
        revert_as!(self.keeper, self.chain.manager().charge(sub))
    }

    /// The on-chain subscription record.
    pub(crate) async fn record(&self, sub: U256) -> SM::Subscription {
        self.chain
            .manager()
            .getSubscription(sub)
            .call()
            .await
            .expect("getSubscription")
    }

    /// USDC balance of `who`.
    pub(crate) async fn balance(&self, who: Address) -> U256 {
        self.chain
            .usdc()
            .balanceOf(who)
            .call()
            .await
            .expect("balanceOf")
    }

    /// Moves the chain clock to `ts` (or a little past it) and mines a block.
    pub(crate) async fn advance_to(&self, ts: u64) {
        let now = self.chain.now().await;
        if ts > now {
            self.chain.increase_time(ts - now).await;
        }
    }
}
