//! The Postgres sink: applies a batch of blocks, or undoes blocks after a reorg, each in one
//! transaction that also moves the cursor. A crash at any point leaves either all of a batch
//! or none of it.

mod rows;

use std::collections::{BTreeMap, HashSet};

use alloy::primitives::{Address, B256};
use chainsub_abi::ContractEvent;
use tokio_postgres::{Client, Transaction};

use crate::block::{Block, Cursor};
use crate::fold::{self, EventCtx};
use crate::map::{self, MappedEvent};
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
}

/// The sink's identity and settings, copied out so a transaction can borrow the client.
#[derive(Debug, Clone, Copy)]
struct Ctx {
    chain_id: i64,
    contract: Address,
    epoch: i64,
    confirmations: u64,
}

impl Sink {
    /// A sink writing as the holder of `epoch`.
    pub fn new(
        client: Client,
        chain_id: u64,
        contract: Address,
        epoch: i64,
        confirmations: u64,
    ) -> Self {
        Sink {
            client,
            ctx: Ctx {
                chain_id: chain_id as i64,
                contract,
                epoch,
                confirmations,
            },
        }
    }

    /// The cursor and the checkpoints of the unfinalized window.
    pub async fn load(&self) -> Result<(Cursor, BTreeMap<u64, B256>)> {
        let row = self
            .client
            .query_one(
                "SELECT block_number, block_hash FROM indexer_cursor WHERE chain_id = $1",
                &[&self.ctx.chain_id],
            )
            .await?;
        let cursor = Cursor {
            number: row.get::<_, i64>(0) as u64,
            hash: B256::try_from(row.get::<_, &[u8]>(1))
                .map_err(|_| Error::Inconsistent("cursor hash".into()))?,
        };
        let rows = self
            .client
            .query(
                "SELECT block_number, block_hash FROM block_checkpoints WHERE chain_id = $1",
                &[&self.ctx.chain_id],
            )
            .await?;
        let mut window = BTreeMap::new();
        for r in rows {
            let h = B256::try_from(r.get::<_, &[u8]>(1))
                .map_err(|_| Error::Inconsistent("checkpoint hash".into()))?;
            window.insert(r.get::<_, i64>(0) as u64, h);
        }
        Ok((cursor, window))
    }

    /// Records the chain head seen while idle (for the API's lag), fenced like every write.
    /// Checks the writer's connection with a round trip (an idle writer otherwise never
    /// notices that its database went away).
    pub async fn ping(&self) -> Result<()> {
        self.client.simple_query("").await?;
        Ok(())
    }

    pub async fn record_head(&self, head: u64) -> Result<()> {
        self.client
            .execute(
                "UPDATE indexer_cursor SET head_number = $2 WHERE chain_id = $1 AND writer_epoch = $3",
                &[&self.ctx.chain_id, &(head as i64), &self.ctx.epoch],
            )
            .await?;
        Ok(())
    }

    /// Applies consecutive `blocks` in one transaction: events, plans, subscriptions, ledger,
    /// checkpoints, outbox rows of newly confirmed events, and the cursor.
    pub async fn apply(&mut self, blocks: &[Block], head: u64, finalized: u64) -> Result<Applied> {
        let (Some(first), Some(last)) = (blocks.first(), blocks.last()) else {
            return Ok(Applied::default());
        };
        let ctx = self.ctx;
        let tx = self.client.transaction().await?;
        let cur = ctx.lock_cursor(&tx).await?;
        if first.parent_hash != cur.hash || first.number != cur.number + 1 {
            return Err(Error::CursorMismatch {
                db_number: cur.number as i64,
                db_hash: cur.hash,
                parent: first.parent_hash,
            });
        }
        let mut events: Vec<MappedEvent> = Vec::new();
        for b in blocks {
            events.extend(map::map_block(ctx.chain_id as u64, b)?);
        }
        let snapshots = ctx.fold_batch(&tx, &events).await?;
        // Older events this batch confirms go to the outbox first (chain order); the batch's
        // own confirmed events are inserted already marked, so no row is written twice.
        let mut enqueued = ctx.enqueue_confirmed(&tx, last.number).await?;
        let upto = ctx.confirmed_upto(last.number);
        let confirmed: Vec<bool> = events
            .iter()
            .map(|e| e.kind.is_some() && upto.is_some_and(|u| e.block_number <= u))
            .collect();
        let ids = rows::insert_events(
            &tx,
            ctx.chain_id,
            &ctx.contract,
            &events,
            &snapshots.0,
            &confirmed,
        )
        .await?;
        enqueued += rows::insert_outbox(&tx, &events, &confirmed).await?;
        rows::insert_projections(&tx, ctx.chain_id, &events, &ids).await?;
        let mut subs = snapshots.1;
        for s in subs.iter_mut() {
            // Swap the batch placeholders for the ids the insert assigned.
            for r in [&mut s.created_event, &mut s.last_event] {
                if *r < 0 {
                    *r = ids[(-*r - 1) as usize];
                }
            }
        }
        rows::upsert_subs(&tx, ctx.chain_id, &subs.iter().collect::<Vec<_>>()).await?;
        rows::write_checkpoints(&tx, ctx.chain_id, blocks, finalized).await?;
        ctx.move_cursor(&tx, last.cursor(), Some(head)).await?;
        tx.commit().await?;
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

    /// Undoes every block above `back_to` in one transaction: their events (with ledger rows
    /// and plans, by cascade), outbox rows not yet attempted, and checkpoints; rebuilds the
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
        let touched: Vec<i64> = tx
            .query(
                "SELECT DISTINCT subscription_id FROM chain_events
                 WHERE chain_id = $1 AND block_number > $2 AND subscription_id IS NOT NULL",
                &[&ctx.chain_id, &above],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let (dropped, sent) =
            chainsub_store::outbox::retract_above(&tx, ctx.chain_id, above).await?;
        if sent > 0 {
            // Webhooks already attempted for events that are no longer on the chain: the
            // confirmations setting was too low for this chain. Loud, but not fatal.
            tracing::error!(
                count = sent,
                "reorg removed events whose webhooks were already sent"
            );
            metrics::counter!("indexer_reorged_sent_events_total").increment(sent as u64);
        }
        tx.execute(
            "DELETE FROM subscriptions WHERE chain_id = $1 AND onchain_id = ANY($2)",
            &[&ctx.chain_id, &touched],
        )
        .await?;
        let removed = tx
            .execute(
                "DELETE FROM chain_events WHERE chain_id = $1 AND block_number > $2",
                &[&ctx.chain_id, &above],
            )
            .await?;
        let rebuilt = rows::rebuild_subs(&tx, ctx.chain_id, &touched).await?;
        rows::upsert_subs(&tx, ctx.chain_id, &rebuilt.iter().collect::<Vec<_>>()).await?;
        tx.execute(
            "DELETE FROM block_checkpoints WHERE chain_id = $1 AND block_number > $2",
            &[&ctx.chain_id, &above],
        )
        .await?;
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
        let row = tx
            .query_one(
                "SELECT block_number, block_hash, writer_epoch FROM indexer_cursor
                 WHERE chain_id = $1 FOR UPDATE",
                &[&self.chain_id],
            )
            .await?;
        let theirs: i64 = row.get(2);
        if theirs != self.epoch {
            return Err(Error::Fenced {
                ours: self.epoch,
                theirs,
            });
        }
        Ok(Cursor {
            number: row.get::<_, i64>(0) as u64,
            hash: B256::try_from(row.get::<_, &[u8]>(1))
                .map_err(|_| Error::Inconsistent("cursor hash".into()))?,
        })
    }

    async fn move_cursor(&self, tx: &Transaction<'_>, to: Cursor, head: Option<u64>) -> Result<()> {
        let head = head.map(|h| h as i64);
        let n = tx
            .execute(
                "UPDATE indexer_cursor SET block_number = $2, block_hash = $3,
                     head_number = COALESCE($4, head_number), updated_at = now()
                 WHERE chain_id = $1 AND writer_epoch = $5",
                &[
                    &self.chain_id,
                    &(to.number as i64),
                    &to.hash.as_slice(),
                    &head,
                    &self.epoch,
                ],
            )
            .await?;
        if n != 1 {
            return Err(Error::Fenced {
                ours: self.epoch,
                theirs: -1,
            });
        }
        Ok(())
    }

    /// Folds the batch's subscription events over the stored states: the snapshot of each
    /// event, and the final state of each subscription the batch touched.
    async fn fold_batch(
        &self,
        tx: &Transaction<'_>,
        events: &[MappedEvent],
    ) -> Result<(Vec<Option<serde_json::Value>>, Vec<fold::SubState>)> {
        let touched: Vec<i64> = events
            .iter()
            .filter_map(|e| e.subscription_id)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let mut states = rows::load_subs(tx, self.chain_id, &touched).await?;
        let refs: Vec<(B256, Address, Address)> = events
            .iter()
            .filter_map(|e| match &e.event {
                Some(ContractEvent::SubscriptionCreated(c)) => {
                    Some((c.customerRef, c.merchant, c.subscriber))
                }
                _ => None,
            })
            .collect();
        let mut customers = rows::resolve_customers(tx, &refs).await?.into_iter();
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
                chain_id: self.chain_id as u64,
                tx_hash: e.tx_hash,
                event_ref: -(i as i64) - 1,
                block_time: e.block_time,
                customer_external_id,
            };
            match fold::apply(states.remove(&sid), ev, &ctx)? {
                Some(s) => {
                    snapshots[i] =
                        Some(serde_json::to_value(s.snapshot()).expect("a snapshot serializes"));
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
        let mut subs: Vec<fold::SubState> = states
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
