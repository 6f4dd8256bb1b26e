//! Plans (`GET/POST /api/v1/plans…`).

use alloy::primitives::{Address, B256};
use chainsub_core::{PlanId, ProvisionStatus, format_units};
use chainsub_store::chain::confirmations;
use chainsub_store::plans::PlanRow;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::ChainView;

/// The Plan object.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView<'a> {
    pub id: &'a PlanId,
    pub object: &'static str,
    pub name: &'a str,
    pub amount: String,
    pub currency: &'a str,
    pub interval: &'a str,
    /// Free days before a new subscriber's first charge (0: none).
    pub trial_days: u16,
    pub slug: &'a str,
    /// `active` (indexed, or mined as the relayer saw), `deactivated` (its
    /// `PlanDeactivated` indexed: no new subscriptions), `failed` or `pending`.
    pub status: &'static str,
    #[serde(serialize_with = "super::time")]
    pub created_at: DateTime<Utc>,
    pub provisioning: ProvisioningView<'a>,
    /// Where `createPlan` landed (with `onchainPlanId`); `null` before it did.
    pub chain: Option<ChainView>,
    /// Where `deactivatePlan` landed; `null` while the plan takes subscriptions.
    pub deactivation: Option<DeactivationView>,
}

/// A plan's `deactivation` block.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeactivationView {
    pub block_number: i64,
    pub transaction_hash: B256,
    #[serde(serialize_with = "super::time")]
    pub deactivated_at: DateTime<Utc>,
}

/// A plan's `provisioning` block.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningView<'a> {
    pub state: ProvisionStatus,
    pub error: Option<&'a str>,
    pub transaction_hash: Option<B256>,
    pub plan_ref: B256,
}

impl<'a> PlanView<'a> {
    /// `r` on chain `chain_id`; a plan only the relayer's receipt vouches for was sent to
    /// `contract` (the configured one).
    pub fn new(r: &'a PlanRow, chain_id: chainsub_core::ChainId, contract: Address) -> Self {
        let active = r.is_active();
        let status = r.status();
        let chain = r.created_on_chain.as_ref().map(|c| ChainView {
            chain_id,
            contract: c.contract.unwrap_or(contract),
            block_number: c.block_number,
            block_hash: c.block_hash,
            transaction_hash: c.transaction_hash,
            log_index: c.log_index,
            confirmations: confirmations(c.block_number, r.indexed_block),
            onchain_subscription_id: None,
            onchain_plan_id: Some(c.onchain_id),
        });
        PlanView {
            id: &r.id,
            object: "plan",
            name: &r.name,
            amount: format_units(r.amount),
            currency: &r.currency,
            interval: &r.interval,
            trial_days: r.trial_days,
            slug: &r.slug,
            status,
            created_at: r.created_at,
            provisioning: ProvisioningView {
                state: if active {
                    ProvisionStatus::Active
                } else {
                    r.provision_status
                },
                error: if active {
                    None
                } else {
                    r.provision_error.as_deref()
                },
                transaction_hash: r.provision_tx_hash,
                plan_ref: r.plan_ref,
            },
            chain,
            deactivation: r.deactivated.as_ref().map(|d| DeactivationView {
                block_number: d.block_number,
                transaction_hash: d.transaction_hash,
                deactivated_at: d.block_time,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chainsub_store::plans::PlanCreation;

    fn row(status: ProvisionStatus, created: Option<PlanCreation>) -> PlanRow {
        PlanRow {
            trial_days: 0,
            row_id: 1,
            id: PlanId::parse("plan_0123456789ab").unwrap(),
            name: "Pro".into(),
            amount: 9_990_000,
            currency: "USDC".into(),
            interval: "month".into(),
            slug: "pro".into(),
            plan_ref: B256::repeat_byte(7),
            provision_status: status,
            provision_error: Some("rpc down".into()),
            provision_tx_hash: Some(B256::repeat_byte(9)),
            created_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            created_on_chain: created,
            deactivated: None,
            indexed_block: Some(20),
        }
    }

    fn creation(contract: Option<Address>) -> PlanCreation {
        PlanCreation {
            onchain_id: 4,
            contract,
            block_number: 18,
            block_hash: B256::repeat_byte(1),
            transaction_hash: B256::repeat_byte(2),
            log_index: 3,
        }
    }

    const CONFIGURED: Address = Address::repeat_byte(0xab);

    #[test]
    fn an_indexed_plan_is_active_with_the_emitting_contract_checksummed() {
        let emitter = Address::repeat_byte(0xcd);
        let r = row(ProvisionStatus::Submitted, Some(creation(Some(emitter))));
        let v = serde_json::to_value(PlanView::new(
            &r,
            chainsub_core::ChainId::new(31337).unwrap(),
            CONFIGURED,
        ))
        .unwrap();
        assert_eq!(v["status"], "active");
        assert_eq!(v["amount"], "9.99");
        assert_eq!(v["provisioning"]["state"], "active");
        assert_eq!(v["provisioning"]["error"], serde_json::Value::Null);
        assert_eq!(v["chain"]["contract"], emitter.to_checksum(None));
        assert_eq!(v["chain"]["onchainPlanId"], 4);
        assert_eq!(v["chain"]["confirmations"], 3);
        assert_eq!(v["createdAt"], "2023-11-14T22:13:20Z");
    }

    #[test]
    fn a_plan_known_from_the_receipt_names_the_configured_contract() {
        let r = row(ProvisionStatus::Active, Some(creation(None)));
        let v = serde_json::to_value(PlanView::new(
            &r,
            chainsub_core::ChainId::new(31337).unwrap(),
            CONFIGURED,
        ))
        .unwrap();
        assert_eq!(v["status"], "active");
        assert_eq!(v["chain"]["contract"], CONFIGURED.to_checksum(None));
        assert_eq!(v["chain"]["chainId"], 31337);
    }

    #[test]
    fn a_failed_provisioning_shows_its_error_and_no_chain() {
        let r = row(ProvisionStatus::Failed, None);
        let v = serde_json::to_value(PlanView::new(
            &r,
            chainsub_core::ChainId::new(31337).unwrap(),
            CONFIGURED,
        ))
        .unwrap();
        assert_eq!(v["status"], "failed");
        assert_eq!(v["provisioning"]["state"], "failed");
        assert_eq!(v["provisioning"]["error"], "rpc down");
        assert_eq!(v["chain"], serde_json::Value::Null);
        let pending = row(ProvisionStatus::Submitted, None);
        let v = serde_json::to_value(PlanView::new(
            &pending,
            chainsub_core::ChainId::new(31337).unwrap(),
            CONFIGURED,
        ))
        .unwrap();
        assert_eq!(v["status"], "pending");
        assert_eq!(v["provisioning"]["state"], "submitted");
    }
}
