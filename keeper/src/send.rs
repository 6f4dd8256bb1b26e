//! Sending due steps: preflight in parallel, then nonce, budget, journal and broadcast in
//! order under the nonce lock.

use futures::StreamExt;

use super::chain::Broadcast;
use super::error::Result;
use super::telemetry::names;
use super::{Keeper, PassReport, chain_datetime};
use chainsub_store::keeper::{Action, DueSubscription, SignedTx};

/// The gas limit of a send: `headroom_percent` of the estimate, and 50% more per earlier
/// on-chain revert of the same step (an out-of-gas revert must not repeat as it was).
fn gas_limit(estimate: u64, headroom_percent: u64, reverts: i32) -> u64 {
    let mut gas = estimate.saturating_mul(headroom_percent) / 100;
    for _ in 0..reverts.clamp(0, 8) {
        gas = gas.saturating_mul(3) / 2;
    }
    gas
}

#[cfg(test)]
mod tests {
    #[test]
    fn gas_limit_adds_headroom_and_half_again_per_revert() {
        assert_eq!(super::gas_limit(100_000, 125, 0), 125_000);
        assert_eq!(super::gas_limit(100_000, 60, 1), 90_000);
        assert_eq!(super::gas_limit(100_000, 60, 2), 135_000);
    }
}

/// What happened to one due subscription in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handled {
    Sent,
    Skipped(&'static str),
    BudgetStop,
}

impl Keeper {
    pub(super) async fn send_due(&self, chain_now: u64) -> Result<PassReport> {
        let due = self
            .store
            .due(chain_datetime(chain_now), self.cfg.batch_size)
            .await?;
        metrics::gauge!(names::DUE).set(due.len() as f64);
        let mut report = PassReport {
            due: due.len(),
            ..PassReport::default()
        };
        if due.is_empty() {
            metrics::gauge!(names::BUDGET_EXHAUSTED).set(0.0);
            return Ok(report);
        }
        // Cheap checks first, so a full pipeline or a spent budget costs no RPC calls.
        if self.store.open_count().await? >= self.cfg.concurrency {
            metrics::counter!(names::SKIPPED, "reason" => "concurrency")
                .increment(due.len() as u64);
            report.skipped = due.len();
            return Ok(report);
        }
        if self
            .store
            .spent_in_window(self.cfg.budget_window_secs)
            .await?
            >= self.cfg.gas_budget_wei
        {
            metrics::counter!(names::SKIPPED, "reason" => "budget").increment(due.len() as u64);
            metrics::gauge!(names::BUDGET_EXHAUSTED).set(1.0);
            tracing::warn!(budget_wei = %self.cfg.gas_budget_wei, "gas budget exhausted: due charges were not sent");
            report.skipped = due.len();
            report.budget_stopped = true;
            return Ok(report);
        }
        let results: Vec<Result<Handled>> = futures::stream::iter(due)
            .map(|sub| self.handle_due(sub, chain_now))
            .buffer_unordered(self.cfg.concurrency)
            .collect()
            .await;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(Handled::Sent) => report.sent += 1,
                Ok(Handled::Skipped(_)) => report.skipped += 1,
                Ok(Handled::BudgetStop) => {
                    report.skipped += 1;
                    report.budget_stopped = true;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        metrics::gauge!(names::BUDGET_EXHAUSTED).set(if report.budget_stopped { 1.0 } else { 0.0 });
        if report.budget_stopped {
            tracing::warn!(
                budget_wei = %self.cfg.gas_budget_wei,
                window_secs = self.cfg.budget_window_secs,
                "gas budget exhausted: due charges were not sent"
            );
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    async fn handle_due(&self, sub: DueSubscription, chain_now: u64) -> Result<Handled> {
        let step = sub.step();
        let handled = self.try_send(&sub, chain_now).await?;
        if let Handled::Skipped(reason) = handled {
            metrics::counter!(names::SKIPPED, "reason" => reason).increment(1);
            tracing::debug!(
                subscription = step.subscription_id,
                period = step.period,
                attempt = step.attempt,
                reason,
                "due step not sent"
            );
        }
        if handled == Handled::BudgetStop {
            metrics::counter!(names::SKIPPED, "reason" => "budget").increment(1);
        }
        Ok(handled)
    }

    async fn try_send(&self, sub: &DueSubscription, chain_now: u64) -> Result<Handled> {
        let step = sub.step();
        if self.cfg.precheck_funds && step.action == Action::Charge {
            let (balance, allowance) = self.chain.funds(sub.subscriber).await?;
            if balance < sub.amount || allowance < sub.amount {
                let due_at = sub.due_at.timestamp().max(0) as u64;
                if chain_now < due_at.saturating_add(self.cfg.futile_defer_secs) {
                    return Ok(Handled::Skipped("futile_deferred"));
                }
                tracing::info!(
                    subscription = sub.onchain_id,
                    attempt = step.attempt,
                    "subscriber still cannot pay; sending the attempt so the failure is recorded"
                );
            }
        }
        let gas_limit = match self.chain.preflight(sub.onchain_id).await? {
            Ok(gas) => gas_limit(gas, self.cfg.gas_headroom_percent, sub.reverts),
            Err(skip) => {
                if let super::chain::Skip::Reverted(why) = &skip {
                    tracing::warn!(
                        subscription = sub.onchain_id,
                        why,
                        "charge would revert; not sent"
                    );
                }
                return Ok(Handled::Skipped(skip.label()));
            }
        };
        let (max_fee, prio) = self.capped_fees().await?;

        // From here on, one send at a time: nonces reach the node in order.
        let mut next = self.nonce.lock().await;
        self.ensure_lock()?;
        if self.store.open_count().await? >= self.cfg.concurrency {
            return Ok(Handled::Skipped("concurrency"));
        }
        let spent = self
            .store
            .spent_in_window(self.cfg.budget_window_secs)
            .await?;
        let worst = max_fee.saturating_mul(gas_limit as u128);
        if spent.saturating_add(worst) > self.cfg.gas_budget_wei {
            return Ok(Handled::BudgetStop);
        }
        if self.cfg.merchant_gas_budget > 0 {
            let used = self
                .store
                .merchant_gas_in_window(sub.merchant, self.cfg.budget_window_secs)
                .await?;
            if used.saturating_add(gas_limit) > self.cfg.merchant_gas_budget {
                tracing::warn!(
                    merchant = %sub.merchant, subscription = sub.onchain_id, used,
                    budget = self.cfg.merchant_gas_budget,
                    "merchant gas budget exhausted: charge not sent"
                );
                return Ok(Handled::Skipped("merchant_budget"));
            }
        }
        let nonce = match *next {
            Some(n) => n,
            None => self.synced_nonce().await?,
        };
        let signed = self
            .chain
            .sign(sub.onchain_id, nonce, gas_limit, max_fee, prio)
            .await?;
        let inserted = match self.store.insert_step(&step, &signed).await {
            Ok(inserted) => inserted,
            Err(e) => {
                // The commit may have landed anyway: re-sync from the journal next time.
                *next = None;
                return Err(e.into());
            }
        };
        let Some((step_id, tx_id)) = inserted else {
            // Journaled before (e.g. by a keeper that died): reconcile owns it.
            *next = Some(nonce);
            return Ok(Handled::Skipped("already_journaled"));
        };
        *next = Some(nonce + 1);
        self.fail_point("after-persist");

        let mut current: (i64, SignedTx) = (tx_id, signed);
        for retry in 0..2 {
            match self.chain.broadcast(&current.1.raw).await {
                Ok(Broadcast::Accepted) => {
                    self.store.mark_sent(step_id, current.0).await?;
                    metrics::counter!(names::SENDS, "action" => step.action.as_str()).increment(1);
                    tracing::info!(
                        subscription = sub.onchain_id, period = step.period, attempt = step.attempt,
                        action = step.action.as_str(), nonce = current.1.nonce, tx = %current.1.hash,
                        "charge sent"
                    );
                    return Ok(Handled::Sent);
                }
                Ok(Broadcast::NonceTooLow) if retry == 0 => {
                    // Our counter is behind the chain (the key was used elsewhere, or a
                    // restart raced): this tx can never be mined, so re-sign the step.
                    let fresh = self.synced_nonce().await?;
                    tracing::warn!(old = current.1.nonce, fresh, "nonce too low; re-synced");
                    let resigned = self
                        .chain
                        .sign(sub.onchain_id, fresh, gas_limit, max_fee, prio)
                        .await?;
                    let id = self
                        .store
                        .renonce_step(step_id, current.0, &resigned)
                        .await?;
                    *next = Some(fresh + 1);
                    current = (id, resigned);
                }
                Ok(refused) => {
                    let why = match refused {
                        Broadcast::Rejected(m) => m,
                        Broadcast::Underpriced => "underpriced".to_string(),
                        _ => "nonce too low after a re-sync".to_string(),
                    };
                    self.reject(step_id, current.0, &why).await?;
                    *next = None;
                    return Ok(Handled::Skipped("rejected"));
                }
                Err(e) => {
                    // Unknown outcome: the row stays pending; reconcile re-broadcasts it.
                    tracing::warn!(error = %e, tx = %current.1.hash, "broadcast failed; will retry");
                    return Ok(Handled::Sent);
                }
            }
        }
        Ok(Handled::Sent)
    }

    /// A refused transaction never entered a pool: close its step and leave the nonce to be
    /// re-synced (the gap would block every later transaction).
    pub(super) async fn reject(&self, step_id: i64, tx_id: i64, why: &str) -> Result<()> {
        metrics::counter!(names::REJECTED).increment(1);
        tracing::error!(
            step_id,
            why,
            "the node refused a keeper transaction; step closed as failed"
        );
        self.store.mark_tx_rejected(tx_id, why).await?;
        Ok(self
            .store
            .fail_step(step_id, &format!("rejected by the node: {why}"))
            .await?)
    }

    /// The next free nonce: the node's pending nonce, never below an open journal row.
    async fn synced_nonce(&self) -> Result<u64> {
        let node = self.chain.pending_nonce().await?;
        let journal = self
            .store
            .max_open_nonce()
            .await?
            .map(|n| n + 1)
            .unwrap_or(0);
        Ok(node.max(journal))
    }

    /// The node's fee suggestion, capped by `--max-fee-per-gas-wei`.
    pub(super) async fn capped_fees(&self) -> Result<(u128, u128)> {
        let (mut max_fee, mut prio) = self.chain.fees().await?;
        if let Some(cap) = self.cfg.max_fee_per_gas_wei {
            max_fee = max_fee.min(cap);
            prio = prio.min(max_fee);
        }
        Ok((max_fee, prio))
    }

    /// Test-only crash points (`--fail-point`): abort the process at a chosen moment, as a
    /// `kill -9` would, to prove that a restart resumes instead of re-sending.
    fn fail_point(&self, name: &str) {
        if self.cfg.fail_point.as_deref() == Some(name) {
            tracing::warn!(name, "fail point reached: aborting");
            std::process::abort();
        }
    }
}
