//! Gas of the two calls the service pays for or asks customers to pay for: `subscribe` (a
//! customer's first subscription to a plan, first period charged) and one renewal `charge`
//! (the keeper's, period 2). Printed for docs/contract.md; the bounds only catch a regression
//! of an order of magnitude (gas is deterministic on anvil, so they cannot flake).

use crate::contract_support::{DAY, Fixture};

#[tokio::test]
async fn gas_of_subscribe_and_of_one_renewal_charge() {
    let fx = Fixture::new().await;
    let (sub, subscribe_gas) = fx.subscribe_with_gas().await;
    fx.advance_to(crate::contract_support::months_after(sub.anchor, 1) + DAY)
        .await;
    let receipt = fx.charge(sub.id).await;
    let charge_gas = receipt.gas_used;
    println!("gas: subscribe {subscribe_gas}, renewal charge {charge_gas}");
    assert!(
        subscribe_gas < 400_000,
        "subscribe used {subscribe_gas} gas"
    );
    assert!(charge_gas < 150_000, "charge used {charge_gas} gas");
}
