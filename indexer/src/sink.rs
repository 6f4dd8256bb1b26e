//! The Postgres sink: applies a batch of blocks, or undoes blocks after a reorg, each in one
//! transaction that also moves the cursor. A crash at any point leaves either all of a batch
//! or none of it.

use chainsub_core::ChainId;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256};
use chainsub_abi::ContractEvent;
use chainsub_core::{LedgerKind, SubscriptionState};
use chainsub_store::index::{self as store, Checkpoint, NewEvent, NewLedgerEntry, NewPlan};
use chainsub_store::outbox::NewDelivery;
use tokio_postgres::{Client, Transaction};

use crate::block::{Block, Cursor};
use crate::fold::{self, EventCtx};
use crate::map::{self, MappedEvent, failure_reason_name, onchain_plan, onchain_subscription};
use crate::{Error, Result};

/// What one applied batch contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    pub blocks: usize,
    pub events: usize,
    pub enqueued: u64,
}

/// Writes chain-owned tables through the writer's connection.
pub struct Sink {
    client: Client,
    ctx: Ctx,
    times: StageTimes,
}

/// Where [`Sink::apply`]'s time goes, by step, summed over every batch applied (also
/// recorded as the histogram `indexer_sink_stage_seconds{stage}`). The benchmark prints it
/// next to the sink's throughput.
#[derive(Debug, Clone, Default)]
pub struct StageTimes(pub Vec<(&'static str, Duration)>);

impl StageTimes {
    fn add(&mut self, stage: &'static str, d: Duration) {
        metrics::histogram!("indexer_sink_stage_seconds", "stage" => stage).record(d.as_secs_f64());
        match self.0.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, total)) => *total += d,
            None => self.0.push((stage, d)),
        }
    }
}

/// A stopwatch over the steps of one batch.
struct Laps {
    at: Instant,
    laps: Vec<(&'static str, Duration)>,
}

impl Laps {
    fn start() -> Self {
        Self {
            at: Instant::now(),
            laps: Vec::new(),
        }
    }

    /// Ends the step `stage` now.
    fn lap(&mut self, stage: &'static str) {
        let now = Instant::now();
        self.laps.push((stage, now - self.at));
        self.at = now;
    }
}

/// The sink's identity and settings, copied out so a transaction can borrow the client.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    chain_id: ChainId,
    contract: Address,
    epoch: i64,
    confirmations: u64,
}

impl Sink {
    /// A sink writing as the holder of `epoch`.
    pub fn new(
        client: Client,
        chain_id: ChainId,
        contract: Address,
        epoch: i64,
        confirmations: u64,
    ) -> Self {
        Self {
            client,
            ctx: Ctx {
                chain_id,
                contract,
                epoch,
                confirmations,
            },
            times: StageTimes::default(),
        }
    }

    /// Time spent in each step of [`Sink::apply`] so far.
    pub fn stage_times(&self) -> &StageTimes {
        &self.times
    }

    /// The cursor and the checkpoints of the unfinalized window.
    pub async fn load(&self) -> Result<(Cursor, BTreeMap<u64, B256>)> {
        Ok(store::load_cursor(&self.client, self.ctx.chain_id).await?)
    }

    /// Checks the writer's connection with a round trip (an idle writer otherwise never
    /// notices that its database went away).
    pub async fn ping(&self) -> Result<()> {
        chainsub_store::pg::ping(&self.client).await?;
        Ok(())
    }

    /// Records the chain head seen while idle (for the API's lag), fenced like every write.
    pub async fn record_head(&self, head: u64) -> Result<()> {
        Ok(store::record_head(&self.client, self.ctx.chain_id, self.ctx.epoch, head).await?)
    }

    /// Applies consecutive `blocks` in one transaction: events, plans, subscriptions, ledger,
    /// checkpoints, outbox rows of newly confirmed events, and the cursor.
    pub async fn apply(&mut self, blocks: &[Block], head: u64, finalized: u64) -> Result<Applied> {
        let (Some(first), Some(last)) = (blocks.first(), blocks.last()) else {
            return Ok(Applied::default());
        };
        let ctx = self.ctx;
        let mut laps = Laps::start();
        let tx = self.client.transaction().await?;
        let cur = ctx.lock_cursor(&tx).await?;
        if first.parent_hash != cur.hash || first.number != cur.number + 1 {
            return Err(Error::CursorMismatch {
                db_number: cur.number as i64,
                db_hash: cur.hash,
                parent: first.parent_hash,
            });
        }
        laps.lap("begin_and_lock");
        let mut events: Vec<MappedEvent> = Vec::new();
        for b in blocks {
            events.extend(map::map_block(ctx.chain_id.get(), b)?);
        }
        laps.lap("decode");
        let snapshots = ctx.fold_batch(&tx, &events).await?;
        laps.lap("fold");
        // Older events this batch confirms go to the outbox first (chain order); the batch's
        // own confirmed events are inserted already marked, so no row is written twice.
        let mut enqueued = ctx.enqueue_confirmed(&tx, last.number).await?;
        laps.lap("enqueue_confirmed");
        let upto = ctx.confirmed_upto(last.number);
        let confirmed: Vec<bool> = events
            .iter()
            .map(|e| e.kind.is_some() && upto.is_some_and(|u| e.block_number <= u))
            .collect();
        let rows: Vec<NewEvent<'_>> = events
            .iter()
            .zip(&snapshots.0)
            .zip(&confirmed)
            .map(|((e, folded), &enqueued)| new_event(e, folded.as_ref(), enqueued))
            .collect();
        let ids = store::insert_events(&tx, ctx.chain_id, &ctx.contract, &rows).await?;
        laps.lap("insert_events");
        enqueued += insert_outbox(&tx, ctx.chain_id, &events, &ids, &confirmed).await?;
        laps.lap("insert_outbox");
        insert_projections(&tx, ctx.chain_id, &events, &ids).await?;
        laps.lap("ledger_and_plans");
        // Subscriptions created in this batch (their creation is a batch placeholder) have
        // no row yet: copied; the others are updated.
        let (mut created, mut updated): (Vec<_>, Vec<_>) =
            snapshots.1.into_iter().partition(|s| s.created_event < 0);
        for s in created.iter_mut().chain(updated.iter_mut()) {
            // Swap the batch placeholders for the ids the insert assigned.
            for r in [&mut s.created_event, &mut s.last_event] {
                if *r < 0 {
                    *r = ids[(-*r - 1) as usize];
                }
            }
        }
        store::insert_subscriptions(&tx, ctx.chain_id, &created).await?;
        store::upsert_subscriptions(&tx, ctx.chain_id, &updated).await?;
        laps.lap("upsert_subscriptions");
        write_checkpoints(&tx, ctx.chain_id, blocks, finalized).await?;
        ctx.move_cursor(&tx, last.cursor(), Some(head)).await?;
        laps.lap("checkpoints_and_cursor");
        tx.commit().await?;
        laps.lap("commit");
        for (stage, d) in laps.laps {
            self.times.add(stage, d);
        }
        metrics::counter!("indexer_blocks_total").increment(blocks.len() as u64);
        metrics::counter!("indexer_events_total").increment(events.len() as u64);
        metrics::counter!("indexer_outbox_enqueued_total").increment(enqueued);
        metrics::histogram!("indexer_batch_blocks").record(blocks.len() as f64);
        metrics::histogram!("indexer_batch_events").record(events.len() as f64);
        Ok(Applied {
            blocks: blocks.len(),
            events: events.len(),
            enqueued,
        })
    }

    /// Undoes every block above `back_to` in one transaction: their events (with their ledger
    /// rows and plans), outbox rows not yet attempted, and checkpoints; rebuilds the
    /// subscriptions they touched from the events that remain; moves the cursor back.
    pub async fn undo(&mut self, back_to: Cursor) -> Result<()> {
        let ctx = self.ctx;
        let tx = self.client.transaction().await?;
        let cur = ctx.lock_cursor(&tx).await?;
        if back_to.number > cur.number {
            return Err(Error::Inconsistent(format!(
                "undo to {} above the cursor {}",
                back_to.number, cur.number
            )));
        }
        let above = back_to.number as i64;
        let touched = store::subscriptions_touched_above(&tx, ctx.chain_id, above).await?;
        let (dropped, retracted) = chainsub_store::outbox::retract_above(
            &tx,
            ctx.chain_id,
            above,
            back_to.hash.as_slice(),
        )
        .await?;
        if retracted > 0 {
            // Webhooks already attempted for events that are no longer on the chain: each
            // gets an `event.retracted` event. The confirmations setting was too low for this
            // chain: loud, but not fatal.
            tracing::error!(
                count = retracted,
                back_to = back_to.number,
                "reorg removed events whose webhooks were already sent; retractions queued"
            );
            metrics::counter!("indexer_reorged_sent_events_total").increment(retracted);
        }
        store::delete_subscriptions(&tx, ctx.chain_id, &touched).await?;
        let removed = store::delete_above(&tx, ctx.chain_id, above).await?;
        let rebuilt = rebuild_subs(&tx, ctx.chain_id, &touched).await?;
        store::upsert_subscriptions(&tx, ctx.chain_id, &rebuilt).await?;
        ctx.move_cursor(&tx, back_to, None).await?;
        tx.commit().await?;
        tracing::info!(
            back_to = back_to.number,
            removed_events = removed,
            dropped_outbox = dropped,
            rebuilt_subscriptions = rebuilt.len(),
            "undo committed"
        );
        Ok(())
    }
}

impl Ctx {
    /// Locks the cursor row for this transaction and checks that we still own it.
    async fn lock_cursor(&self, tx: &Transaction<'_>) -> Result<Cursor> {
        let (cursor, theirs) = store::lock_cursor(tx, self.chain_id).await?;
        if theirs != self.epoch {
            return Err(Error::Fenced {
                ours: self.epoch,
                theirs,
            });
        }
        Ok(cursor)
    }

    async fn move_cursor(&self, tx: &Transaction<'_>, to: Cursor, head: Option<u64>) -> Result<()> {
        if !store::move_cursor(tx, self.chain_id, self.epoch, to, head).await? {
            return Err(Error::Fenced {
                ours: self.epoch,
                theirs: -1,
            });
        }
        Ok(())
    }

    /// Folds the batch's subscription events over the stored states: the snapshot and the
    /// sequence of each event, and the final state of each subscription the batch touched.
    async fn fold_batch(
        &self,
        tx: &Transaction<'_>,
        events: &[MappedEvent],
    ) -> Result<(Vec<Option<Folded>>, Vec<SubscriptionState>)> {
        let touched: Vec<i64> = events
            .iter()
            .filter_map(|e| e.subscription_id)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let mut states = store::load_subscriptions(tx, self.chain_id, &touched).await?;
        let refs: Vec<(B256, Address, Address)> = events
            .iter()
            .filter_map(|e| match &e.event {
                Some(ContractEvent::SubscriptionCreated(c)) => {
                    Some((c.customerRef, c.merchant, c.subscriber))
                }
                _ => None,
            })
            .collect();
        let mut customers = store::resolve_customers(tx, &refs).await?.into_iter();
        let mut snapshots = vec![None; events.len()];
        let mut changed: HashSet<i64> = HashSet::new();
        for (i, e) in events.iter().enumerate() {
            let (Some(ev), Some(sid)) = (&e.event, e.subscription_id) else {
                continue;
            };
            let customer_external_id = match ev {
                ContractEvent::SubscriptionCreated(_) => customers.next().flatten(),
                _ => None,
            };
            let ctx = EventCtx {
                chain_id: self.chain_id.get(),
                tx_hash: e.tx_hash,
                event_ref: -(i as i64) - 1,
                block_time: e.block_time,
                customer_external_id,
            };
            match fold::apply(states.remove(&sid), ev, &ctx)? {
                Some(s) => {
                    snapshots[i] = Some(Folded {
                        sequence: s.events,
                        state: s.clone(),
                    });
                    states.insert(sid, s);
                    changed.insert(sid);
                }
                None => tracing::warn!(
                    subscription = sid,
                    event = e.name,
                    "event of a subscription created before START_BLOCK; not projected"
                ),
            }
        }
        let mut subs: Vec<SubscriptionState> = states
            .into_iter()
            .filter(|(id, _)| changed.contains(id))
            .map(|(_, s)| s)
            .collect();
        subs.sort_by_key(|s| s.onchain_id);
        Ok((snapshots, subs))
    }

    /// The highest block with CONFIRMATIONS confirmations when `tip` is the newest block.
    fn confirmed_upto(&self, tip: u64) -> Option<u64> {
        (tip + 1).checked_sub(self.confirmations.max(1))
    }

    /// Writes outbox rows for stored lifecycle events whose block now has CONFIRMATIONS
    /// confirmations counting `tip` (confirmations = tip - block + 1; 0 and 1 mean at once).
    async fn enqueue_confirmed(&self, tx: &Transaction<'_>, tip: u64) -> Result<u64> {
        let Some(upto) = self.confirmed_upto(tip) else {
            return Ok(0);
        };
        Ok(chainsub_store::outbox::enqueue_confirmed(tx, self.chain_id, upto as i64).await?)
    }
}

/// What the fold says of one subscription event: the subscription right after it, and the
/// event's place among the subscription's events.
#[derive(Debug, Clone)]
struct Folded {
    /// The subscription right after the event: its snapshot.
    state: SubscriptionState,
    sequence: u64,
}

/// The `chain_events` row of a mapped log.
fn new_event<'a>(e: &'a MappedEvent, folded: Option<&'a Folded>, enqueued: bool) -> NewEvent<'a> {
    NewEvent {
        public_id: &e.public_id,
        block_number: e.block_number,
        block_hash: &e.block_hash,
        block_time: e.block_time,
        tx_hash: &e.tx_hash,
        tx_index: e.tx_index,
        log_index: e.log_index,
        name: e.name,
        kind: e.kind.map(|k| k.as_str()),
        merchant: e.merchant.as_ref(),
        subscription_id: e.subscription_id,
        plan_id: e.plan_id,
        topics: &e.topics,
        data: &e.data,
        fields: &e.fields,
        snapshot: folded.map(|f| &f.state),
        enqueued,
        sequence: folded.map(|f| f.sequence),
    }
}

/// Outbox rows for the events of this batch marked `enqueued`, in chain order
/// ([`chainsub_store::outbox::enqueue_new`]); `ids` are the events' row ids, in the same order.
async fn insert_outbox(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    events: &[MappedEvent],
    ids: &[i64],
    enqueued: &[bool],
) -> Result<u64> {
    let rows: Vec<NewDelivery<'_>> = events
        .iter()
        .zip(ids)
        .zip(enqueued)
        .filter(|(_, q)| **q)
        .map(|((e, &event_id), _)| NewDelivery {
            event_id,
            event_public_id: &e.public_id,
            merchant_wallet: e.merchant.as_ref().map_or(&[], |m| m.as_slice()),
            subscription_id: e.subscription_id,
        })
        .collect();
    Ok(chainsub_store::outbox::enqueue_new(tx, chain_id, &rows).await?)
}

/// Ledger rows (charges, failed charges, prorations, refunds), plans, their trials and plan
/// deactivations for the events just inserted (`ids`, in the same order).
async fn insert_projections(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    events: &[MappedEvent],
    ids: &[i64],
) -> Result<()> {
    let (mut ledger, mut plans, mut deactivated) = (Vec::new(), Vec::new(), Vec::new());
    let mut trials = Vec::new();
    for (e, &event_id) in events.iter().zip(ids) {
        if let Some(entry) = ledger_entry(e, event_id)? {
            ledger.push(entry);
        }
        match &e.event {
            Some(ContractEvent::PlanCreated(p)) => plans.push(NewPlan {
                onchain_id: onchain_plan(p.planId)?.db(),
                merchant: p.merchant,
                plan_ref: p.planRef,
                amount: p.amount,
                created_by: p.createdBy,
                event_id,
            }),
            Some(ContractEvent::PlanDeactivated(d)) => {
                deactivated.push((onchain_plan(d.planId)?.db(), event_id))
            }
            Some(ContractEvent::PlanTrial(t)) => {
                trials.push((onchain_plan(t.planId)?.db(), t.trialDays))
            }
            _ => {}
        }
    }
    store::insert_ledger(tx, chain_id, &ledger).await?;
    store::insert_plans(tx, chain_id, &plans).await?;
    store::set_plan_trials(tx, chain_id, &trials).await?;
    store::mark_plans_deactivated(tx, chain_id, &deactivated).await?;
    Ok(())
}

/// Rebuilds subscriptions from their stored events (after a reorg removed some of them).
async fn rebuild_subs(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    ids: &[i64],
) -> Result<Vec<SubscriptionState>> {
    let logs = store::subscription_logs(tx, chain_id, ids).await?;
    let decoded: Vec<(&store::StoredLog, ContractEvent)> = logs
        .iter()
        .filter_map(|l| {
            map::decode(&l.topics, &l.data.clone().into())
                .ok()
                .map(|ev| (l, ev))
        })
        .collect();
    let refs: Vec<(B256, Address, Address)> = decoded
        .iter()
        .filter_map(|(_, ev)| match ev {
            ContractEvent::SubscriptionCreated(c) => {
                Some((c.customerRef, c.merchant, c.subscriber))
            }
            _ => None,
        })
        .collect();
    let mut customers = store::resolve_customers(tx, &refs).await?.into_iter();
    let mut states: HashMap<i64, SubscriptionState> = HashMap::new();
    for (log, ev) in &decoded {
        let Some(sid) = ev.subscription_id() else {
            continue;
        };
        let sid = onchain_subscription(sid)?.db();
        let customer_external_id = match ev {
            ContractEvent::SubscriptionCreated(_) => customers.next().flatten(),
            _ => None,
        };
        let ctx = EventCtx {
            chain_id: chain_id.get(),
            tx_hash: log.tx_hash,
            event_ref: log.id,
            block_time: log.block_time,
            customer_external_id,
        };
        if let Some(s) = fold::apply(states.remove(&sid), ev, &ctx)? {
            states.insert(sid, s);
        }
    }
    Ok(states.into_values().collect())
}

/// Block checkpoints for the unfinalized window (and always the batch's last block), and
/// pruning of the ones no reorg can reach any more.
async fn write_checkpoints(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    blocks: &[Block],
    finalized: u64,
) -> Result<()> {
    let last = blocks.last().map(|b| b.number).unwrap_or(0);
    let keep: Vec<Checkpoint> = blocks
        .iter()
        .filter(|b| b.number >= finalized || b.number == last)
        .map(|b| Checkpoint {
            number: b.number,
            hash: b.hash,
            parent_hash: b.parent_hash,
            time: b.timestamp,
        })
        .collect();
    Ok(store::write_checkpoints(tx, chain_id, &keep, finalized.min(last)).await?)
}

/// The ledger row a mapped log makes (`SubscriptionCharged`, `PaymentFailed`, a
/// `PlanChanged` with a proration, `SubscriptionRefunded`), if any: the sink writes it and
/// `verify` expects it. A refund's amount is stored negative (its kind says so).
pub fn ledger_entry(e: &MappedEvent, event_id: i64) -> Result<Option<NewLedgerEntry>> {
    Ok(match &e.event {
        Some(ContractEvent::SubscriptionCharged(c)) => Some(NewLedgerEntry {
            event_id,
            subscription_id: onchain_subscription(c.subscriptionId)?.db(),
            kind: LedgerKind::Charge,
            amount: c.amount,
            period: c.period,
            period_start: Some(c.periodStart),
            period_end: Some(c.periodEnd),
            attempt: c.attempt.into(),
            failure_reason: None,
            block_time: e.block_time,
        }),
        Some(ContractEvent::PaymentFailed(f)) => Some(NewLedgerEntry {
            event_id,
            subscription_id: onchain_subscription(f.subscriptionId)?.db(),
            kind: LedgerKind::FailedCharge,
            amount: f.amount,
            period: f.period,
            period_start: None,
            period_end: None,
            attempt: f.attempt.into(),
            failure_reason: Some(failure_reason_name(f.reason)),
            block_time: e.block_time,
        }),
        Some(ContractEvent::PlanChanged(c)) if !c.proration.is_zero() => Some(NewLedgerEntry {
            event_id,
            subscription_id: onchain_subscription(c.subscriptionId)?.db(),
            kind: LedgerKind::Proration,
            amount: c.proration,
            period: c.period,
            period_start: None,
            period_end: None,
            attempt: 1,
            failure_reason: None,
            block_time: e.block_time,
        }),
        Some(ContractEvent::SubscriptionRefunded(r)) => Some(NewLedgerEntry {
            event_id,
            subscription_id: onchain_subscription(r.subscriptionId)?.db(),
            kind: LedgerKind::Refund,
            amount: r.amount,
            period: r.period,
            period_start: None,
            period_end: None,
            attempt: 1,
            failure_reason: None,
            block_time: e.block_time,
        }),
        _ => None,
    })
}
