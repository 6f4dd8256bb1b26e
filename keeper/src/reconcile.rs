//! Resuming journaled sends: record receipts, re-broadcast what never reached the node, and
//! replace what is stuck with the same nonce and a higher fee.

use super::Keeper;
use super::chain::Broadcast;
use super::error::Result;
use super::telemetry::names;
use crate::chain::ChargeCall;
use chainsub_store::keeper::{OpenSend, TxRow};

/// `fee` raised by `percent`, rounded up (nodes compare with >=).
fn bump(fee: u128, percent: u32) -> u128 {
    let raised = fee.saturating_mul(100 + percent as u128);
    raised.div_ceil(100).max(fee + 1)
}

/// Fees of a replacement: at least `bump_percent` above the stuck transaction (as nodes
/// require) and at least the current suggestion; None when the cap forbids a valid bump.
pub(super) fn replacement_fees(
    old: (u128, u128),
    suggested: (u128, u128),
    bump_percent: u32,
    cap: Option<u128>,
) -> Option<(u128, u128)> {
    let min_fee = bump(old.0, bump_percent);
    let min_prio = bump(old.1, bump_percent);
    let mut fee = min_fee.max(suggested.0);
    if let Some(cap) = cap {
        if min_fee > cap {
            return None;
        }
        fee = fee.min(cap);
    }
    let prio = min_prio.max(suggested.1).min(fee);
    (prio >= min_prio).then_some((fee, prio))
}

impl Keeper {
    /// Walks every send in flight of this keeper, oldest nonce first.
    pub(super) async fn reconcile(&self) -> Result<()> {
        self.recheck_recent().await?;
        let sends = self.store.open_sends().await?;
        let mut mined_nonce = None;
        for send in &sends {
            self.reconcile_send(send, &mut mined_nonce).await?;
        }
        Ok(())
    }

    /// Transactions that closed steps within `--reorg-depth` blocks of the head are checked
    /// again: if a reorg removed one, its steps reopen and the same signed bytes (same nonce)
    /// go out again. Never a new transaction for a step that may still come back.
    async fn recheck_recent(&self) -> Result<()> {
        let head = self.chain.head().await?;
        let recent = self
            .store
            .recently_closed(head.saturating_sub(self.cfg.reorg_depth))
            .await?;
        for (tx_id, hash, block) in recent {
            match self.chain.receipt(hash).await? {
                Some((out, _)) if out.block_number == block => {}
                Some((out, _)) => self.store.move_block(hash, out.block_number).await?,
                None => {
                    metrics::counter!(names::REORGED).increment(1);
                    tracing::warn!(tx_id, tx = %hash, block, "keeper transaction reorged out; re-broadcasting it");
                    let (reopened, raw) = self.store.reopen(tx_id).await?;
                    if reopened == 0 {
                        // Every step it carried went out again in a later send; its nonce
                        // must still be used, or every later transaction waits behind it.
                        if self.chain.broadcast(&raw).await? == Broadcast::Accepted {
                            self.store.mark_orphan_sent(tx_id).await?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn reconcile_send(&self, send: &OpenSend, mined_nonce: &mut Option<u64>) -> Result<()> {
        if self.record_receipt(send).await? {
            return Ok(());
        }
        let mined = match *mined_nonce {
            Some(n) => n,
            None => *mined_nonce.insert(self.chain.mined_nonce().await?),
        };
        if mined > send.nonce {
            // The nonce is used. One of ours may have been mined between the two reads.
            if self.record_receipt(send).await? {
                return Ok(());
            }
            tracing::error!(
                steps = ?send.step_ids(),
                nonce = send.nonce,
                "nonce used by a transaction the keeper did not journal"
            );
            return self
                .store
                .fail_send(
                    &send.step_ids(),
                    send.nonce,
                    "nonce used by a transaction the keeper did not journal",
                )
                .await
                .map_err(Into::into);
        }
        let Some(latest) = send
            .txs
            .iter()
            .rev()
            .find(|t| t.status == "pending" || t.status == "sent")
        else {
            *self.nonce.lock().await = None;
            return self
                .store
                .fail_send(
                    &send.step_ids(),
                    send.nonce,
                    "no transaction of this send is in a pool",
                )
                .await
                .map_err(Into::into);
        };
        if latest.status == "pending" {
            return self.rebroadcast(send, latest).await;
        }
        // Sent and without a receipt. If the node no longer holds it, nothing will mine it:
        // a reorg removed its block before this keeper recorded the receipt (so
        // `recheck_recent`, which walks closed steps, never sees it), or the node restarted
        // or evicted it. The same bytes go out again now; once it is older than
        // `--replace-after-ms` it is replaced instead (a node that evicted it for its fee
        // would drop the same bytes again).
        let young = latest.sent_age_ms.unwrap_or(0) < self.cfg.replace_after_ms as i64;
        if !self.chain.node_holds(latest.tx.hash).await? {
            metrics::counter!(names::LOST).increment(1);
            tracing::warn!(
                subscriptions = ?send.subscription_ids(), nonce = send.nonce, tx = %latest.tx.hash,
                "sent transaction is neither mined nor in the node's pool; sending it again"
            );
            if young {
                return self.rebroadcast(send, latest).await;
            }
        } else if young {
            return Ok(());
        }
        if send.txs.len() > self.cfg.max_replacements as usize {
            // Out of replacements: keep the last one in the pools and wait.
            return self.rebroadcast(send, latest).await;
        }
        self.replace(send, latest).await
    }

    /// Records a receipt of any transaction of the send; true when its steps are now closed.
    async fn record_receipt(&self, send: &OpenSend) -> Result<bool> {
        for tx in send.txs.iter().rev() {
            if let Some((out, acted)) = self.chain.receipt(tx.tx.hash).await? {
                let backoff = std::time::Duration::from_millis(self.cfg.revert_backoff_ms);
                let reverts = self.store.finish(tx.id, &out, &acted, backoff).await?;
                let result = if out.success { "mined" } else { "reverted" };
                metrics::counter!(names::RECEIPTS, "result" => result).increment(1);
                for step in &send.steps {
                    let (sub, period, attempt) = (step.subscription_id, step.period, step.attempt);
                    if out.success && acted.contains(&sub) {
                        tracing::info!(subscription = %sub, period, attempt, tx = %tx.tx.hash, block = out.block_number, "charge mined");
                    } else if out.success {
                        metrics::counter!(names::SKIPPED, "reason" => "skipped_on_chain")
                            .increment(1);
                        tracing::info!(subscription = %sub, period, attempt, tx = %tx.tx.hash, "chargeMany skipped it (no longer due or live when mined); taken up again if still due");
                    } else if reverts as u32 > self.cfg.max_revert_retries {
                        metrics::counter!(names::ABANDONED).increment(1);
                        tracing::error!(
                            subscription = %sub, period, attempt, tx = %tx.tx.hash, reverts,
                            "charge reverted on chain again; retries used up, step ABANDONED: this \
                             subscription is not renewed until an operator acts"
                        );
                    } else {
                        tracing::warn!(
                            subscription = %sub, period, attempt, tx = %tx.tx.hash, reverts,
                            retries_left = self.cfg.max_revert_retries - reverts as u32 + 1,
                            "charge reverted on chain; it will be sent again after a backoff"
                        );
                    }
                }
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Sends the journaled bytes again (a crash between journal and broadcast, or a node
    /// that dropped it). Byte-identical, so it can never become a second send.
    async fn rebroadcast(&self, send: &OpenSend, tx: &TxRow) -> Result<()> {
        match self.chain.broadcast(&tx.tx.raw).await? {
            Broadcast::Accepted => {
                if tx.status == "pending" {
                    tracing::info!(subscriptions = ?send.subscription_ids(), tx = %tx.tx.hash, "resumed a journaled send");
                }
                Ok(self.store.mark_sent(tx.id).await?)
            }
            // Mined meanwhile (the next pass sees the receipt) or a higher-fee twin of ours
            // is in the pool: nothing to do.
            Broadcast::NonceTooLow | Broadcast::Underpriced => Ok(()),
            Broadcast::Rejected(why) => {
                let others = send
                    .txs
                    .iter()
                    .any(|t| t.id != tx.id && (t.status == "pending" || t.status == "sent"));
                if others {
                    Ok(self.store.mark_tx_rejected(tx.id, &why).await?)
                } else {
                    *self.nonce.lock().await = None;
                    self.reject(&send.step_ids(), send.nonce, tx.id, &why).await
                }
            }
        }
    }

    /// Replaces a stuck transaction: same nonce, same steps, higher fee.
    async fn replace(&self, send: &OpenSend, stuck: &TxRow) -> Result<()> {
        let suggested = self.chain.fees().await?;
        let Some((fee, prio)) = replacement_fees(
            (stuck.tx.max_fee_per_gas, stuck.tx.max_priority_fee_per_gas),
            suggested,
            self.cfg.fee_bump_percent,
            self.cfg.max_fee_per_gas_wei,
        ) else {
            tracing::warn!(
                nonce = send.nonce,
                "stuck transaction cannot be re-priced under the fee cap"
            );
            return self.rebroadcast(send, stuck).await;
        };
        // The same call as the stuck transaction: its steps in its order (those still open),
        // and `chargeMany` if it was one (a lone `charge` would revert where it skips).
        let (step_ids, subscription_ids): (Vec<i64>, Vec<chainsub_core::OnchainSubscriptionId>) =
            stuck
                .step_ids
                .iter()
                .filter_map(|id| {
                    send.steps
                        .iter()
                        .find(|s| s.id == *id)
                        .map(|s| (s.id, s.subscription_id))
                })
                .unzip();
        if step_ids.is_empty() {
            return self.rebroadcast(send, stuck).await;
        }
        let signed = self
            .chain
            .sign(
                &subscription_ids,
                ChargeCall::for_batch(stuck.step_ids.len()),
                send.nonce,
                stuck.tx.gas_limit,
                fee,
                prio,
            )
            .await?;
        let tx_id = self.store.add_replacement(&step_ids, &signed).await?;
        match self.chain.broadcast(&signed.raw).await? {
            Broadcast::Accepted => {
                self.store.mark_sent(tx_id).await?;
                metrics::counter!(names::REPLACEMENTS).increment(1);
                tracing::info!(
                    subscriptions = ?send.subscription_ids(), nonce = send.nonce, old = %stuck.tx.hash,
                    new = %signed.hash, max_fee_per_gas = fee, "replaced a stuck transaction"
                );
                Ok(())
            }
            Broadcast::NonceTooLow => Ok(self
                .store
                .mark_tx_rejected(
                    tx_id,
                    "nonce too low: an earlier transaction of this send was mined",
                )
                .await?),
            Broadcast::Underpriced => Ok(self
                .store
                .mark_tx_rejected(tx_id, "replacement underpriced")
                .await?),
            Broadcast::Rejected(why) => Ok(self.store.mark_tx_rejected(tx_id, &why).await?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_raises_both_fees_by_at_least_the_bump() {
        let (fee, prio) = replacement_fees((1_000, 100), (500, 50), 25, None).unwrap();
        assert_eq!((fee, prio), (1_250, 125));
    }

    #[test]
    fn replacement_follows_a_higher_market_price() {
        let (fee, prio) = replacement_fees((1_000, 100), (5_000, 400), 25, None).unwrap();
        assert_eq!((fee, prio), (5_000, 400));
    }

    #[test]
    fn replacement_respects_the_fee_cap_or_gives_up() {
        assert_eq!(
            replacement_fees((1_000, 100), (5_000, 400), 25, Some(2_000)),
            Some((2_000, 400))
        );
        assert_eq!(
            replacement_fees((1_000, 100), (1_000, 100), 25, Some(1_100)),
            None
        );
    }

    #[test]
    fn bump_of_tiny_fees_still_increases() {
        assert_eq!(bump(0, 25), 1);
        assert_eq!(bump(1, 10), 2);
    }
}
