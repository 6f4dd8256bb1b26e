//! Provisioning a plan on chain: `createPlan(merchant, amount, planRef)` sent with the
//! relayer key, waited for a bounded time, and its outcome recorded on the plan's row.
//!
//! Retry safety comes from the contract: `planRef` is unique per merchant on chain, and every
//! attempt first asks `planIdByRef(merchant, ref)`, so one API plan can never become two
//! on-chain plans.

use std::time::Duration;

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::sol_types::SolEvent;
use chainsub_abi::SubscriptionManager;
use chainsub_core::OnchainPlanId;
use chainsub_store::plans as store;

use super::{Journal, Outcome, PlanTerms, Relayer, SendFailure, Sent};
use crate::ctx::Ctx;
use crate::http::error::{ApiError, Result};
use crate::merchants::Merchant;

/// Runs one provisioning attempt for plan row `id` and records the outcome.
pub async fn provision(ctx: &Ctx, merchant: &Merchant, id: i64) -> Result<()> {
    let conn = ctx.pool.get().await?;
    let (plan_ref, amount, trial_days) = store::provisioning_input(&conn, merchant, id)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("plan row {id} vanished")))?;
    let plan_ref = B256::from_slice(&plan_ref);
    let amount = U256::from(amount.parse::<u128>().unwrap_or(0));
    drop(conn);
    let Some(relayer) = &ctx.relayer else {
        let conn = ctx.pool.get().await?;
        store::record_provisioning(
            &conn,
            merchant,
            id,
            store::Provisioned::Failed {
                error: "this deployment has no relayer key (RELAYER_PRIVATE_KEY)",
            },
        )
        .await?;
        return Ok(());
    };
    let previous = {
        let conn = ctx.pool.get().await?;
        store::submitted_tx(&conn, merchant, id).await?.map(
            |(hash, nonce, max_fee_per_gas, priority_fee_per_gas)| Sent {
                hash,
                nonce,
                max_fee_per_gas,
                priority_fee_per_gas,
            },
        )
    };
    let mut plan_ref = plan_ref;
    let mut outcome;
    let mut tries = 0;
    loop {
        tries += 1;
        outcome = relayer
            .provision(
                &ctx.pool,
                PlanTerms {
                    merchant: merchant.wallet(),
                    amount,
                    plan_ref,
                    trial_days,
                },
                ctx.cfg.provision_timeout(),
                previous,
                Journal::Plan {
                    scope: merchant,
                    row_id: id,
                },
            )
            .await;
        let Outcome::AlreadyExists { onchain_id } = outcome else {
            break;
        };
        match relayer
            .plan_matches(onchain_id, merchant.wallet(), amount, trial_days)
            .await
        {
            Ok(true) => break,
            Ok(false) if tries < 3 => {
                // The merchant's namespace on chain holds another plan under this reference
                // (only the merchant or we can write there; we never reuse a reference), so
                // our createPlan can never succeed with it, and it can never become a second
                // on-chain plan of this one: continue under a fresh reference.
                let fresh: [u8; 32] = rand::random();
                let conn = ctx.pool.get().await?;
                if !store::replace_plan_ref(&conn, merchant, id, &plan_ref.0, &fresh).await? {
                    break;
                }
                tracing::warn!(
                    plan = id,
                    taken = %plan_ref,
                    "provisioning: planRef taken on chain by another plan of this merchant; \
                     continuing under a fresh reference"
                );
                metrics::counter!("api_plan_ref_replaced_total").increment(1);
                plan_ref = B256::from(fresh);
            }
            Ok(false) => {
                outcome = Outcome::Failed {
                    error: "this plan's planRef is registered on chain for a different plan".into(),
                };
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "provisioning: getPlan failed");
                outcome = Outcome::Failed {
                    error: "the chain RPC could not be reached".into(),
                };
                break;
            }
        }
    }
    let conn = ctx.pool.get().await?;
    let submitted_note = "sent; no receipt within the wait — it becomes active when mined, or \
                          retry with POST /api/v1/plans/{id}/provision";
    let recorded = match &outcome {
        Outcome::Created {
            tx_hash,
            onchain_id,
            block_number,
            block_hash,
            log_index,
        } => store::Provisioned::Created {
            tx_hash: tx_hash.as_slice(),
            onchain_id: *onchain_id,
            block_number: *block_number as i64,
            block_hash: block_hash.as_slice(),
            log_index: *log_index as i64,
        },
        Outcome::AlreadyExists { onchain_id } => store::Provisioned::AlreadyExists {
            onchain_id: *onchain_id,
        },
        Outcome::Submitted { sent } => store::Provisioned::Submitted {
            tx_hash: sent.hash.as_slice(),
            nonce: sent.nonce as i64,
            max_fee_per_gas: sent.max_fee_per_gas,
            priority_fee_per_gas: sent.priority_fee_per_gas,
            note: submitted_note,
        },
        Outcome::Failed { error } => store::Provisioned::Failed { error },
    };
    store::record_provisioning(&conn, merchant, id, recorded).await?;
    Ok(())
}

impl Relayer {
    /// The on-chain plan id registered for `merchant`'s `plan_ref`, if any.
    pub async fn plan_by_ref(
        &self,
        merchant: Address,
        plan_ref: B256,
    ) -> Result<Option<OnchainPlanId>, String> {
        let c = SubscriptionManager::new(self.manager, self.provider.clone());
        let id: U256 = c
            .planIdByRef(merchant, plan_ref)
            .call()
            .await
            .map_err(|e| format!("planIdByRef: {e}"))?;
        if id.is_zero() {
            Ok(None)
        } else {
            Ok(Some(OnchainPlanId::try_from(id)?))
        }
    }

    /// Provisions one plan, waiting at most `timeout` for the receipt. `previous` is the
    /// plan's last transaction if it is still `submitted`: when it has no receipt and its
    /// nonce is still unused, it is replaced at that nonce with higher fees (a new send
    /// would only queue behind a transaction stuck for its fees).
    pub async fn provision(
        &self,
        pool: &crate::db::Pool,
        terms: PlanTerms,
        timeout: Duration,
        previous: Option<Sent>,
        journal: Journal<'_>,
    ) -> Outcome {
        let sent = std::sync::Mutex::new(None);
        let attempt = self.provision_inner(pool, terms, previous, journal, &sent);
        match tokio::time::timeout(timeout, attempt).await {
            Ok(outcome) => outcome,
            // Once sent, the transaction may still land: that is `submitted`, not `failed`.
            Err(_) => match *sent.lock().unwrap_or_else(|p| p.into_inner()) {
                Some(sent) => Outcome::Submitted { sent },
                None => Outcome::Failed {
                    error: format!("no answer from the chain within {} ms", timeout.as_millis()),
                },
            },
        }
    }

    /// Whether `previous` must be replaced at its nonce: no receipt yet and the nonce not
    /// used (counting mined transactions only). A receipt means the earlier attempt was
    /// decided (`plan_by_ref` already saw a success); a used nonce means another transaction
    /// took it, so ours can never be mined.
    async fn stuck(&self, previous: &Sent) -> Result<bool, String> {
        if self
            .provider
            .get_transaction_receipt(previous.hash)
            .await
            .map_err(|e| format!("receipt: {e}"))?
            .is_some()
        {
            return Ok(false);
        }
        let mined = self
            .sender
            .mined_nonce()
            .await
            .map_err(|e| format!("nonce: {e}"))?;
        Ok(mined <= previous.nonce)
    }

    async fn provision_inner(
        &self,
        pool: &crate::db::Pool,
        terms: PlanTerms,
        previous: Option<Sent>,
        journal: Journal<'_>,
        sent: &std::sync::Mutex<Option<Sent>>,
    ) -> Outcome {
        let PlanTerms {
            merchant, plan_ref, ..
        } = terms;
        match self.plan_by_ref(merchant, plan_ref).await {
            Ok(Some(onchain_id)) => return Outcome::AlreadyExists { onchain_id },
            Ok(None) => {}
            Err(detail) => {
                tracing::warn!(error = %detail, "provisioning: chain unreachable");
                return Outcome::Failed {
                    error: "the chain RPC could not be reached".into(),
                };
            }
        }
        let replace = match previous {
            Some(p) => match self.stuck(&p).await {
                Ok(true) => {
                    tracing::warn!(nonce = p.nonce, tx = %p.hash, "provisioning: the last createPlan is still unmined; replacing it at its nonce with higher fees");
                    metrics::counter!("api_relayer_replacements_total").increment(1);
                    Some(p)
                }
                Ok(false) => None,
                Err(detail) => {
                    tracing::warn!(error = %detail, "provisioning: chain unreachable");
                    return Outcome::Failed {
                        error: "the chain RPC could not be reached".into(),
                    };
                }
            },
            None => None,
        };
        let manager = SubscriptionManager::new(self.manager, self.provider.clone());
        let request = match terms.trial_days {
            0 => manager
                .createPlan(merchant, terms.amount, plan_ref)
                .into_transaction_request(),
            days => manager
                .createPlanWithTrial(merchant, terms.amount, plan_ref, days)
                .into_transaction_request(),
        };
        let this = match self.send(pool, request, replace.as_ref(), journal).await {
            Ok(p) => p,
            // The journaled transaction stands, still pending.
            Err(SendFailure::Held(why)) => {
                tracing::info!(reason = %why, "provisioning: the pending createPlan is not replaced");
                return match replace {
                    Some(sent) => Outcome::Submitted { sent },
                    None => Outcome::Failed { error: why },
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "provisioning: createPlan not sent");
                return self
                    .after_failure(merchant, plan_ref, e.for_merchant("createPlan"))
                    .await;
            }
        };
        let tx_hash = this.hash;
        *sent.lock().unwrap_or_else(|p| p.into_inner()) = Some(this);
        // Polled until the caller's timeout; an RPC failure after the send means the
        // transaction may still land: report it as submitted.
        let receipt = loop {
            match self.provider.get_transaction_receipt(tx_hash).await {
                Ok(Some(r)) => break r,
                Ok(None) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(_) => return Outcome::Submitted { sent: this },
            }
        };
        if !receipt.status() {
            return self
                .after_failure(
                    merchant,
                    plan_ref,
                    format!("createPlan reverted in {tx_hash}"),
                )
                .await;
        }
        for log in receipt.inner.logs() {
            if let Ok(ev) = SubscriptionManager::PlanCreated::decode_log(&log.inner)
                && ev.planRef == plan_ref
                && ev.merchant == merchant
            {
                let (Some(block_number), Some(block_hash), Some(log_index)) =
                    (log.block_number, log.block_hash, log.log_index)
                else {
                    break;
                };
                let onchain_id = match OnchainPlanId::try_from(ev.planId) {
                    Ok(id) => id,
                    Err(error) => return Outcome::Failed { error },
                };
                return Outcome::Created {
                    tx_hash,
                    onchain_id,
                    block_number,
                    block_hash,
                    log_index,
                };
            }
        }
        Outcome::Failed {
            error: format!("receipt of {tx_hash} has no PlanCreated log for this plan"),
        }
    }

    /// The on-chain plan `onchain_id` is `merchant`'s at `amount` with `trial_days` (guards
    /// against a planRef registered by someone else).
    pub async fn plan_matches(
        &self,
        onchain_id: OnchainPlanId,
        merchant: Address,
        amount: U256,
        trial_days: u16,
    ) -> Result<bool, String> {
        let c = SubscriptionManager::new(self.manager, self.provider.clone());
        let plan = c
            .getPlan(onchain_id.into())
            .call()
            .await
            .map_err(|e| format!("getPlan: {e}"))?;
        Ok(plan.merchant == merchant && plan.amount == amount && plan.trialDays == trial_days)
    }

    /// A failed send may mean a concurrent attempt won (DuplicatePlanRef): ask the chain.
    async fn after_failure(&self, merchant: Address, plan_ref: B256, error: String) -> Outcome {
        match self.plan_by_ref(merchant, plan_ref).await {
            Ok(Some(onchain_id)) => Outcome::AlreadyExists { onchain_id },
            _ => Outcome::Failed { error },
        }
    }
}
