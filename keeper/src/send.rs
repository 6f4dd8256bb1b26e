//! Sending due steps: preflight in parallel, then — one transaction per up to
//! `--charges-per-tx` steps (`chargeMany`) — nonce, budget, journal and broadcast in order
//! under the nonce lock.

use crate::chain::ChargeCall;
use chainsub_core::OnchainSubscriptionId;
use futures::StreamExt;

use super::chain::Broadcast;
use super::error::Result;
use super::telemetry::names;
use super::{Keeper, PassReport, chain_datetime};
use alloy::primitives::Address;
use chainsub_store::keeper::{Action, DueSubscription, Journaled, PassedOver, SignedTx};

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

/// A due step that passed its checks, with the gas limit its own `charge` would get.
struct Ready {
    sub: DueSubscription,
    gas: u64,
}

/// How the steps of one send went.
#[derive(Debug, Clone, Copy, Default)]
struct Sent {
    sent: usize,
    skipped: usize,
    budget_stopped: bool,
    /// The global budget or the in-flight bound held sends back: more is due.
    stopped: bool,
}

/// What one pass has passed over (read and not sent) and each merchant's gas in the budget
/// window (read once per pass; this pass's sends add to it).
#[derive(Default)]
struct PassState {
    passed: std::sync::Mutex<PassedOver>,
    merchant_gas: Option<std::collections::HashMap<Address, u64>>,
}

impl PassState {
    fn pass_over(&self, sub: &DueSubscription) {
        let id = sub.onchain_id.db();
        self.passed
            .lock()
            .expect("pass state")
            .subscriptions
            .push(id);
    }
}

impl Keeper {
    /// Sends what is due, reading `--batch-size` due subscriptions at a time until none is
    /// left (or the budget or the in-flight bound stops the pass). What a read could not send
    /// — not fundable yet, a reverting preflight, a merchant over its gas budget — is passed
    /// over for the rest of the pass, so it never hides the renewals due behind it.
    pub(super) async fn send_due(&self, chain_now: u64) -> Result<PassReport> {
        let mut report = PassReport::default();
        let mut state = PassState::default();
        loop {
            let passed = state.passed.lock().expect("pass state").clone();
            let due = self
                .store
                .due(chain_datetime(chain_now), self.cfg.batch_size, &passed)
                .await?;
            let read = due.len();
            report.due += read;
            if read == 0 {
                break;
            }
            let round = self.send_read(due, chain_now, &mut state).await?;
            report.sent += round.sent;
            report.skipped += round.skipped;
            report.budget_stopped |= round.budget_stopped;
            // The in-flight bound frees as receipts come (a spent budget only with the window):
            // go on soon — if this pass got anything out; slots held by stuck transactions
            // free no faster than the poll interval.
            report.more_due |= round.stopped && !round.budget_stopped && report.sent > 0;
            if round.stopped || (read as i64) < self.cfg.batch_size {
                break;
            }
        }
        metrics::gauge!(names::DUE).set(report.due as f64);
        metrics::gauge!(names::BUDGET_EXHAUSTED).set(if report.budget_stopped { 1.0 } else { 0.0 });
        if report.budget_stopped {
            tracing::warn!(
                budget_wei = %self.cfg.gas_budget_wei,
                window_secs = self.cfg.budget_window_secs,
                "gas budget exhausted: due charges were not sent"
            );
        }
        Ok(report)
    }

    /// One read of due subscriptions: checks, preflights, then the sends. `stopped` when the
    /// global budget or the in-flight bound held sends back (more is due than was sent).
    async fn send_read(
        &self,
        due: Vec<DueSubscription>,
        chain_now: u64,
        state: &mut PassState,
    ) -> Result<Sent> {
        let mut report = Sent::default();
        // Cheap checks first, so a full pipeline or a spent budget costs no RPC calls.
        if self.store.open_count().await? >= self.cfg.concurrency {
            metrics::counter!(names::SKIPPED, "reason" => "concurrency")
                .increment(due.len() as u64);
            report.skipped = due.len();
            report.stopped = true;
            return Ok(report);
        }
        if self
            .store
            .spent_in_window(self.cfg.budget_window_secs)
            .await?
            >= self.cfg.gas_budget_wei
        {
            metrics::counter!(names::SKIPPED, "reason" => "budget").increment(due.len() as u64);
            report.skipped = due.len();
            report.budget_stopped = true;
            report.stopped = true;
            return Ok(report);
        }
        // Preflights in parallel (in due order), then the sends one after another.
        let prepared: Vec<Result<Option<Ready>>> = {
            let state = &*state;
            futures::stream::iter(due)
                .map(|sub| self.check_due(sub, chain_now, state))
                .buffered(self.cfg.concurrency)
                .collect()
                .await
        };
        let mut first_error = None;
        let mut sends: Vec<Vec<Ready>> = Vec::new();
        let mut batch: Vec<Ready> = Vec::new();
        for p in prepared {
            match p {
                Ok(Some(ready)) if ready.sub.reverts > 0 => {
                    // A step that reverted on chain is retried alone: whatever made it
                    // revert cannot take other renewals down with it.
                    sends.push(vec![ready]);
                }
                Ok(Some(ready)) => {
                    batch.push(ready);
                    if batch.len() >= self.cfg.charges_per_tx {
                        sends.push(std::mem::take(&mut batch));
                    }
                }
                Ok(None) => report.skipped += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if !batch.is_empty() {
            sends.push(batch);
        }
        for group in sends {
            let n = group.len();
            if report.stopped {
                report.skipped += n;
                let reason = if report.budget_stopped {
                    "budget"
                } else {
                    "concurrency"
                };
                metrics::counter!(names::SKIPPED, "reason" => reason).increment(n as u64);
                continue;
            }
            match self.send(group, state).await {
                Ok(sent) => {
                    report.sent += sent.sent;
                    report.skipped += sent.skipped;
                    report.budget_stopped |= sent.budget_stopped;
                    report.stopped |= sent.stopped;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// A due step not sent, counted and logged.
    fn skip(&self, sub: &DueSubscription, reason: &'static str) {
        let step = sub.step();
        metrics::counter!(names::SKIPPED, "reason" => reason).increment(1);
        tracing::debug!(
            subscription = %step.subscription_id,
            period = step.period,
            attempt = step.attempt,
            reason,
            "due step not sent"
        );
    }

    /// The checks of one due step that need no lock: funds (with `--precheck-funds`) and
    /// the preflight of its own `charge`. None when it is not to be sent now.
    async fn check_due(
        &self,
        sub: DueSubscription,
        chain_now: u64,
        state: &PassState,
    ) -> Result<Option<Ready>> {
        let step = sub.step();
        if self.cfg.precheck_funds && step.action == Action::Charge {
            let (balance, allowance) = self.chain.funds(sub.subscriber).await?;
            if balance < sub.amount || allowance < sub.amount {
                let due_at = sub.due_at.timestamp().max(0) as u64;
                if chain_now < due_at.saturating_add(self.cfg.futile_defer_secs) {
                    self.skip(&sub, "futile_deferred");
                    state.pass_over(&sub);
                    return Ok(None);
                }
                tracing::info!(
                    subscription = %sub.onchain_id,
                    attempt = step.attempt,
                    "subscriber still cannot pay; sending the attempt so the failure is recorded"
                );
            }
        }
        match self.chain.preflight(sub.onchain_id).await? {
            Ok(gas) => Ok(Some(Ready {
                gas: gas_limit(gas, self.cfg.gas_headroom_percent, sub.reverts),
                sub,
            })),
            Err(skip) => {
                if let super::chain::Skip::Reverted(why) = &skip {
                    tracing::warn!(
                        subscription = %sub.onchain_id,
                        why,
                        "charge would revert; not sent"
                    );
                }
                self.skip(&sub, skip.label());
                state.pass_over(&sub);
                Ok(None)
            }
        }
    }

    /// Drops the steps whose merchant's gas budget they would exceed (each step counts its
    /// own charge's gas limit, its merchant's other steps of this send included).
    /// The merchants' gas in the window is read once per pass (one statement for all of
    /// them); each step kept adds its gas limit, so the check costs nothing per send. A
    /// merchant whose budget a step would exceed is passed over for the rest of the pass.
    async fn within_merchant_budgets(
        &self,
        group: Vec<Ready>,
        out: &mut Sent,
        state: &mut PassState,
    ) -> Result<Vec<Ready>> {
        if self.cfg.merchant_gas_budget == 0 {
            return Ok(group);
        }
        let used = match &mut state.merchant_gas {
            Some(used) => used,
            None => state.merchant_gas.insert(
                self.store
                    .merchant_gas_in_window(self.cfg.budget_window_secs)
                    .await?,
            ),
        };
        let mut kept = Vec::with_capacity(group.len());
        for r in group {
            let merchant = r.sub.merchant;
            let so_far = used.get(&merchant).copied().unwrap_or(0);
            if so_far.saturating_add(r.gas) > self.cfg.merchant_gas_budget {
                tracing::warn!(
                    merchant = %merchant, subscription = %r.sub.onchain_id, used = so_far,
                    budget = self.cfg.merchant_gas_budget,
                    "merchant gas budget exhausted: charge not sent"
                );
                self.skip(&r.sub, "merchant_budget");
                out.skipped += 1;
                let mut passed = state.passed.lock().expect("pass state");
                if !passed.merchants.contains(&merchant) {
                    passed.merchants.push(merchant);
                }
                continue;
            }
            used.insert(merchant, so_far + r.gas);
            kept.push(r);
        }
        Ok(kept)
    }

    /// Sends one transaction for `group`: `charge(id)` for one step, `chargeMany(ids)` for
    /// more. Budget, nonce, journal and broadcast happen under the nonce lock, in order.
    async fn send(&self, group: Vec<Ready>, state: &mut PassState) -> Result<Sent> {
        let mut out = Sent::default();
        let mut group = self.within_merchant_budgets(group, &mut out, state).await?;
        if group.is_empty() {
            return Ok(out);
        }
        let (max_fee, prio) = self.capped_fees().await?;

        // From here on, one send at a time: nonces reach the node in order.
        let mut next = self.nonce.lock().await;
        self.ensure_lock()?;
        if self.store.open_count().await? >= self.cfg.concurrency {
            for r in &group {
                self.skip(&r.sub, "concurrency");
            }
            out.skipped += group.len();
            out.stopped = true;
            return Ok(out);
        }
        let (ids, gas_limit, signed, step_ids, tx_id) = loop {
            let ids: Vec<OnchainSubscriptionId> = group.iter().map(|r| r.sub.onchain_id).collect();
            let gas_limit = match group.as_slice() {
                [one] => one.gas,
                _ => gas_limit(
                    self.chain.estimate_many(&ids).await?,
                    self.cfg.gas_headroom_percent,
                    0,
                ),
            };
            let spent = self
                .store
                .spent_in_window(self.cfg.budget_window_secs)
                .await?;
            let worst = max_fee.saturating_mul(gas_limit as u128);
            if spent.saturating_add(worst) > self.cfg.gas_budget_wei {
                for r in &group {
                    self.skip(&r.sub, "budget");
                }
                out.skipped += group.len();
                out.budget_stopped = true;
                out.stopped = true;
                return Ok(out);
            }
            let nonce = match *next {
                Some(n) => n,
                None => self.synced_nonce().await?,
            };
            let signed = self
                .chain
                .sign(
                    &ids,
                    ChargeCall::for_batch(ids.len()),
                    nonce,
                    gas_limit,
                    max_fee,
                    prio,
                )
                .await?;
            let steps: Vec<_> = group.iter().map(|r| r.sub.step()).collect();
            match self.store.insert_send(&steps, &signed).await {
                Ok(Journaled::New { step_ids, tx_id }) => {
                    break (ids, gas_limit, signed, step_ids, tx_id);
                }
                Ok(Journaled::Already(journaled)) => {
                    // Journaled before (e.g. by a keeper that died): reconcile owns them.
                    *next = Some(nonce);
                    let mut i = 0;
                    group.retain(|r| {
                        let keep = !journaled.contains(&i);
                        i += 1;
                        if !keep {
                            self.skip(&r.sub, "already_journaled");
                            state.pass_over(&r.sub);
                        }
                        keep
                    });
                    out.skipped += journaled.len();
                    if group.is_empty() {
                        return Ok(out);
                    }
                }
                Err(e) => {
                    // The commit may have landed anyway: re-sync from the journal next time.
                    *next = None;
                    return Err(e.into());
                }
            }
        };
        *next = Some(signed.nonce + 1);
        self.fail_point("after-persist");

        let n = group.len();
        let mut current: (i64, SignedTx) = (tx_id, signed);
        for retry in 0..2 {
            match self.chain.broadcast(&current.1.raw).await {
                Ok(Broadcast::Accepted) => {
                    self.store.mark_sent(current.0).await?;
                    for r in &group {
                        let step = r.sub.step();
                        metrics::counter!(names::SENDS, "action" => step.action.as_str())
                            .increment(1);
                        tracing::info!(
                            subscription = %r.sub.onchain_id, period = step.period, attempt = step.attempt,
                            action = step.action.as_str(), nonce = current.1.nonce, tx = %current.1.hash,
                            batch = n, "charge sent"
                        );
                    }
                    out.sent += n;
                    return Ok(out);
                }
                Ok(Broadcast::NonceTooLow) if retry == 0 => {
                    // Our counter is behind the chain (the key was used elsewhere, or a
                    // restart raced): this tx can never be mined, so re-sign the send.
                    let fresh = self.synced_nonce().await?;
                    tracing::warn!(old = current.1.nonce, fresh, "nonce too low; re-synced");
                    let resigned = self
                        .chain
                        .sign(
                            &ids,
                            ChargeCall::for_batch(ids.len()),
                            fresh,
                            gas_limit,
                            max_fee,
                            prio,
                        )
                        .await?;
                    let id = self.store.renonce(&step_ids, current.0, &resigned).await?;
                    *next = Some(fresh + 1);
                    current = (id, resigned);
                }
                Ok(refused) => {
                    let why = match refused {
                        Broadcast::Rejected(m) => m,
                        Broadcast::Underpriced => "underpriced".to_string(),
                        _ => "nonce too low after a re-sync".to_string(),
                    };
                    self.reject(&step_ids, current.1.nonce, current.0, &why)
                        .await?;
                    *next = None;
                    for r in &group {
                        self.skip(&r.sub, "rejected");
                        state.pass_over(&r.sub);
                    }
                    out.skipped += n;
                    return Ok(out);
                }
                Err(e) => {
                    // Unknown outcome: the rows stay pending; reconcile re-broadcasts them.
                    tracing::warn!(error = %e, tx = %current.1.hash, "broadcast failed; will retry");
                    out.sent += n;
                    return Ok(out);
                }
            }
        }
        out.sent += n;
        Ok(out)
    }

    /// A refused transaction never entered a pool: close its send and leave the nonce to be
    /// re-synced (the gap would block every later transaction).
    pub(super) async fn reject(
        &self,
        step_ids: &[i64],
        nonce: u64,
        tx_id: i64,
        why: &str,
    ) -> Result<()> {
        metrics::counter!(names::REJECTED).increment(1);
        tracing::error!(
            ?step_ids,
            why,
            "the node refused a keeper transaction; its steps closed as failed"
        );
        self.store.mark_tx_rejected(tx_id, why).await?;
        Ok(self
            .store
            .fail_send(step_ids, nonce, &format!("rejected by the node: {why}"))
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
