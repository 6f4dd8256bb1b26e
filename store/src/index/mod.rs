//! The indexer's tables: the cursor and its writer lock, block checkpoints, and the rows a
//! batch of blocks writes or a reorg undoes (`chain_events`, `ledger_entries`,
//! `chain_plans`, `subscriptions`). Only the holder of the writer lock calls these, through
//! the connection that holds it; every cursor write is fenced on the writer's epoch.
//!
//! The indexer decides *what* to write (decoding, the subscription fold, confirmations);
//! this module owns *how*: every SQL text, and one `UNNEST` statement per table per batch.

use chainsub_core::ChainId;
mod undo;
mod verify;
mod write;

use std::collections::BTreeMap;

use alloy::primitives::{Address, B256};
use tokio_postgres::{Client, Transaction};

use crate::{Error, Result};

pub use undo::{Checkpoint, delete_above, write_checkpoints};
pub use verify::{
    EventKey, StoredDelivery, StoredEvent, StoredPlan, dangling_event_links, events_in_range,
    highest_event_block, ledger_in_range, orphan_attempts, orphan_outbox, outbox_in_range, plans,
    revenue_months_drift, state_moves_drift, subscription_tallies_drift,
};
pub use write::{
    LogFields, NewEvent, NewLedgerEntry, NewPlan, StoredLog, insert_events, insert_ledger,
    insert_plans, insert_subscriptions, load_subscriptions, mark_plans_deactivated,
    resolve_customers, set_plan_trials, subscription_logs, upsert_subscriptions,
};

/// Where the index stands: the last block whose effects are committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub number: u64,
    pub hash: B256,
}

pub(crate) fn b256(bytes: &[u8], what: &str) -> Result<B256> {
    B256::try_from(bytes).map_err(|_| Error::Inconsistent(format!("{what} is not 32 bytes")))
}

pub(crate) fn address(bytes: &[u8], what: &str) -> Result<Address> {
    Address::try_from(bytes).map_err(|_| Error::Inconsistent(format!("{what} is not 20 bytes")))
}

/// Creates the cursor row at `genesis` if there is none and bumps the writer epoch. Returns
/// the new epoch and the contract the database indexes (the caller refuses a different one).
pub async fn claim_cursor(
    client: &Client,
    chain_id: ChainId,
    contract: Address,
    genesis: Cursor,
) -> Result<(i64, Vec<u8>)> {
    let row = client
        .query_one(
            "INSERT INTO indexer_cursor (chain_id, contract, block_number, block_hash, writer_epoch)
             VALUES ($1, $2, $3, $4, 1)
             ON CONFLICT (chain_id) DO UPDATE SET writer_epoch = indexer_cursor.writer_epoch + 1
             RETURNING writer_epoch, contract",
            &[
                &chain_id,
                &contract.as_slice(),
                &(genesis.number as i64),
                &genesis.hash.as_slice(),
            ],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// The cursor and the checkpoints of the unfinalized window.
pub async fn load_cursor(
    client: &impl tokio_postgres::GenericClient,
    chain_id: ChainId,
) -> Result<(Cursor, BTreeMap<u64, B256>)> {
    let row = client
        .query_one(
            "SELECT block_number, block_hash FROM indexer_cursor WHERE chain_id = $1",
            &[&chain_id],
        )
        .await?;
    let cursor = Cursor {
        number: row.get::<_, i64>(0) as u64,
        hash: b256(row.get(1), "cursor hash")?,
    };
    let rows = client
        .query(
            "SELECT block_number, block_hash FROM block_checkpoints WHERE chain_id = $1",
            &[&chain_id],
        )
        .await?;
    let mut window = BTreeMap::new();
    for r in rows {
        window.insert(
            r.get::<_, i64>(0) as u64,
            b256(r.get(1), "checkpoint hash")?,
        );
    }
    Ok((cursor, window))
}

/// Records the chain head seen while idle (for the API's lag), fenced on `epoch`.
pub async fn record_head(client: &Client, chain_id: ChainId, epoch: i64, head: u64) -> Result<()> {
    client
        .execute(
            "UPDATE indexer_cursor SET head_number = $2 WHERE chain_id = $1 AND writer_epoch = $3",
            &[&chain_id, &(head as i64), &epoch],
        )
        .await?;
    Ok(())
}

/// Locks the cursor row for this transaction; returns it with the epoch that owns it.
pub async fn lock_cursor(tx: &Transaction<'_>, chain_id: ChainId) -> Result<(Cursor, i64)> {
    let row = tx
        .query_one(
            "SELECT block_number, block_hash, writer_epoch FROM indexer_cursor
             WHERE chain_id = $1 FOR UPDATE",
            &[&chain_id],
        )
        .await?;
    let cursor = Cursor {
        number: row.get::<_, i64>(0) as u64,
        hash: b256(row.get(1), "cursor hash")?,
    };
    Ok((cursor, row.get(2)))
}

/// Moves the cursor (and the head, when given) if `epoch` still owns it; `false` when fenced.
pub async fn move_cursor(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    epoch: i64,
    to: Cursor,
    head: Option<u64>,
) -> Result<bool> {
    let head = head.map(|h| h as i64);
    let n = tx
        .execute(
            "UPDATE indexer_cursor SET block_number = $2, block_hash = $3,
                 head_number = COALESCE($4, head_number), updated_at = now()
             WHERE chain_id = $1 AND writer_epoch = $5",
            &[
                &chain_id,
                &(to.number as i64),
                &to.hash.as_slice(),
                &head,
                &epoch,
            ],
        )
        .await?;
    Ok(n == 1)
}

/// The subscriptions with events above block `above` (a reorg is about to remove them).
pub async fn subscriptions_touched_above(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    above: i64,
) -> Result<Vec<i64>> {
    Ok(tx
        .query(
            "SELECT DISTINCT subscription_id FROM chain_events
             WHERE chain_id = $1 AND block_number > $2 AND subscription_id IS NOT NULL",
            &[&chain_id, &above],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Deletes subscription rows (to be rebuilt from the events that remain).
pub async fn delete_subscriptions(
    tx: &Transaction<'_>,
    chain_id: ChainId,
    ids: &[i64],
) -> Result<()> {
    tx.execute(
        "DELETE FROM subscriptions WHERE chain_id = $1 AND onchain_id = ANY($2)",
        &[&chain_id, &ids],
    )
    .await?;
    Ok(())
}
