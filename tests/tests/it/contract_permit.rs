//! One-signature subscribe on a real anvil (issue 14, point 4, contract half): MockUSDC has
//! EIP-2612 `permit` as USDC does, and `subscribeWithPermit` takes the customer's signed
//! permit with the subscribe call — one typed-data signature and one transaction where
//! `approve` + `subscribe` took two transactions. The signature is made with alloy's own
//! EIP-712 implementation, so the token's domain and type hashes are checked against an
//! independent one.

use crate::contract_support::{PRICE, manager_events};
use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{Eip712Domain, SolStruct};
use chainsub_abi::ContractEvent;
use chainsub_abi::MockUSDC::MockUSDCErrors;
use chainsub_abi::SubscriptionManager::{self as SM, SubscriptionManagerErrors as E};
use chainsub_tests::DevChain;
use chainsub_tests::chain::accounts::{CUSTOMER, MERCHANT, OPERATOR, STRANGER};
use chainsub_tests::dev_key;

/// The token's custom error of a call that must revert.
macro_rules! token_revert {
    ($call:expr) => {{
        match $call.from(DevChain::address(STRANGER)).send().await {
            Ok(_) => panic!("expected a revert, the call was accepted"),
            Err(e) => e
                .as_decoded_interface_error::<MockUSDCErrors>()
                .unwrap_or_else(|| panic!("not a MockUSDC error: {e}")),
        }
    }};
}

/// `subscribeWithPermit` of plan 1 at its terms, with the permit (`value`, `deadline`, and
/// the signature `(v, r, s)`).
macro_rules! with_permit {
    ($chain:expr, $value:expr, $deadline:expr, $sig:expr) => {
        $chain.manager().subscribeWithPermit(
            U256::from(1),
            DevChain::address(MERCHANT),
            U256::from(PRICE),
            B256::ZERO,
            $value,
            $deadline,
            $sig.0,
            $sig.1,
            $sig.2,
        )
    };
}

use chainsub_abi::Permit;

/// A chain with an operator-created plan of `PRICE` for MERCHANT, and CUSTOMER holding ten
/// periods of USDC but no allowance.
async fn chain() -> DevChain {
    let chain = DevChain::start().await;
    let merchant = DevChain::address(MERCHANT);
    send_as!(
        DevChain::address(OPERATOR),
        chain
            .manager()
            .createPlan(merchant, U256::from(PRICE), B256::repeat_byte(0x11))
    );
    chain.mint(DevChain::address(CUSTOMER), 10 * PRICE).await;
    chain
}

async fn domain(chain: &DevChain) -> Eip712Domain {
    Eip712Domain::new(
        Some("Mock USD Coin".into()),
        Some("2".into()),
        Some(U256::from(chain.provider.get_chain_id().await.unwrap())),
        Some(chain.usdc),
        None,
    )
}

/// `signer`'s permit for the manager to spend `value` of `owner`'s USDC: (v, r, s).
async fn sign_permit(
    chain: &DevChain,
    signer: &PrivateKeySigner,
    owner: Address,
    value: U256,
    deadline: U256,
) -> (u8, B256, B256) {
    let nonce = chain.usdc().nonces(owner).call().await.unwrap();
    let permit = Permit {
        owner,
        spender: chain.manager,
        value,
        nonce,
        deadline,
    };
    let hash = permit.eip712_signing_hash(&domain(chain).await);
    let sig = signer.sign_hash_sync(&hash).unwrap();
    (
        27 + u8::from(sig.v()),
        B256::from(sig.r()),
        B256::from(sig.s()),
    )
}

async fn deadline(chain: &DevChain) -> U256 {
    U256::from(chain.now().await + 3600)
}

#[tokio::test]
async fn a_customer_without_allowance_subscribes_with_one_signature_and_one_transaction() {
    let chain = chain().await;
    let customer = DevChain::address(CUSTOMER);
    assert_eq!(
        chain.usdc().DOMAIN_SEPARATOR().call().await.unwrap(),
        domain(&chain).await.separator(),
        "the token's EIP-712 domain is alloy's"
    );
    let value = U256::from(12 * PRICE);
    let deadline = deadline(&chain).await;
    let (v, r, s) = sign_permit(&chain, &dev_key(CUSTOMER), customer, value, deadline).await;

    let receipt = send_as!(customer, with_permit!(chain, value, deadline, (v, r, s)));
    let events = manager_events(&chain, &receipt);
    assert!(
        matches!(
            events.as_slice(),
            [
                ContractEvent::SubscriptionCreated(_),
                ContractEvent::SubscriptionCharged(_)
            ]
        ),
        "{events:?}"
    );
    let usdc = chain.usdc();
    assert_eq!(
        usdc.allowance(customer, chain.manager)
            .call()
            .await
            .unwrap(),
        value - U256::from(PRICE),
        "the permit's allowance, less the first period"
    );
    assert_eq!(usdc.nonces(customer).call().await.unwrap(), U256::from(1));
    assert_eq!(
        usdc.balanceOf(DevChain::address(MERCHANT))
            .call()
            .await
            .unwrap(),
        U256::from(PRICE)
    );
    let approve = send_as!(
        DevChain::address(STRANGER),
        usdc.approve(chain.manager, U256::MAX)
    );
    println!(
        "gas: subscribeWithPermit {} (one transaction) against approve {} + subscribe (see \
         gas_of_subscribe_and_of_one_renewal_charge)",
        receipt.gas_used, approve.gas_used
    );
    assert!(receipt.gas_used < 400_000, "used {}", receipt.gas_used);
}

/// Someone submits the customer's permit first (it is public in the mempool): the permit in
/// `subscribeWithPermit` then fails, is ignored, and the allowance it set is used.
#[tokio::test]
async fn a_front_run_permit_does_not_block_the_subscription() {
    let chain = chain().await;
    let customer = DevChain::address(CUSTOMER);
    let value = U256::from(12 * PRICE);
    let deadline = deadline(&chain).await;
    let (v, r, s) = sign_permit(&chain, &dev_key(CUSTOMER), customer, value, deadline).await;
    send_as!(
        DevChain::address(STRANGER),
        chain
            .usdc()
            .permit(customer, chain.manager, value, deadline, v, r, s)
    );

    let receipt = send_as!(customer, with_permit!(chain, value, deadline, (v, r, s)));
    assert!(receipt.status());
    assert_eq!(
        chain.manager().subscriptionCount().call().await.unwrap(),
        U256::from(1)
    );
}

/// A permit signed by someone else, an expired one, or one used twice gives no allowance:
/// the token refuses each, and a subscription without allowance reverts as `subscribe` does.
#[tokio::test]
async fn a_bad_expired_or_replayed_permit_gives_no_allowance() {
    let chain = chain().await;
    let customer = DevChain::address(CUSTOMER);
    let usdc = chain.usdc();
    let value = U256::from(12 * PRICE);
    let deadline = deadline(&chain).await;

    let forged = sign_permit(&chain, &dev_key(STRANGER), customer, value, deadline).await;
    let refused = token_revert!(usdc.permit(
        customer,
        chain.manager,
        value,
        deadline,
        forged.0,
        forged.1,
        forged.2,
    ));
    assert_eq!(
        refused,
        MockUSDCErrors::InvalidSignature(chainsub_abi::MockUSDC::InvalidSignature {})
    );
    let err = revert_as!(customer, with_permit!(chain, value, deadline, forged));
    assert_eq!(
        err,
        E::FirstPaymentFailed(SM::FirstPaymentFailed { reason: 1 }),
        "no allowance"
    );

    let past = U256::from(chain.now().await - 1);
    let old = sign_permit(&chain, &dev_key(CUSTOMER), customer, value, past).await;
    let expired =
        token_revert!(usdc.permit(customer, chain.manager, value, past, old.0, old.1, old.2));
    assert_eq!(
        expired,
        MockUSDCErrors::PermitExpired(chainsub_abi::MockUSDC::PermitExpired {})
    );

    let good = sign_permit(&chain, &dev_key(CUSTOMER), customer, value, deadline).await;
    send_as!(
        customer,
        usdc.permit(
            customer,
            chain.manager,
            value,
            deadline,
            good.0,
            good.1,
            good.2
        )
    );
    let replayed = token_revert!(usdc.permit(
        customer,
        chain.manager,
        value,
        deadline,
        good.0,
        good.1,
        good.2
    ));
    assert_eq!(
        replayed,
        MockUSDCErrors::InvalidSignature(chainsub_abi::MockUSDC::InvalidSignature {})
    );
}
