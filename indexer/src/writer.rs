//! The single-writer rule. The indexer that holds the session advisory lock
//! `locks::indexer_writer(chain_id.db())` is the only one that writes chain-owned tables; it
//! writes through the very connection that holds the lock, so losing the lock (the session
//! dies) also loses the means to write. Each new holder bumps `indexer_cursor.writer_epoch`
//! and every cursor update is fenced on it, so a stale writer cannot commit after a takeover.

use alloy::primitives::Address;
use chainsub_core::ChainId;
use tokio_postgres::Client;

use crate::block::Cursor;
use crate::{Error, Result};

/// Connects and drives the connection on a background task.
pub async fn connect(url: &str) -> Result<Client> {
    // TLS as DATABASE_URL's sslmode says (the one connector of every binary).
    let db =
        chainsub_store::pg::Database::from_url(url).map_err(|e| Error::Config(e.to_string()))?;
    Ok(db.connect().await?)
}

/// Bounds the writer's session on the server (`store::pg::bound_lock_session`), so a
/// frozen or partitioned writer loses the lock and a standby takes over. A healthy writer is
/// never idle that long: it pings its database every second at the head, and a resumed
/// stale writer finds its session gone (and its epoch fenced) before it can write.
pub async fn bound_session(client: &Client, idle: std::time::Duration) -> Result<()> {
    Ok(chainsub_store::pg::bound_lock_session(client, idle).await?)
}

/// Refuses (fatally: [`Error::Config`]) a database a newer release has migrated, or one not
/// yet migrated to this release: this binary would write rows the schema keeps differently.
/// Checked on every takeover, so an indexer left running across an upgrade stops at its next
/// session.
pub async fn check_schema(client: &Client) -> Result<()> {
    match chainsub_migrations::check_known(client).await {
        Err(
            e
            @ (chainsub_migrations::Error::Unknown(_) | chainsub_migrations::Error::Behind { .. }),
        ) => Err(Error::Config(e.to_string())),
        r => Ok(r?),
    }
}

/// Blocks until this session holds the writer lock for `chain_id` (a hot standby waits here).
pub async fn acquire(client: &Client, chain_id: ChainId) -> Result<()> {
    let key = chainsub_migrations::locks::indexer_writer(chain_id.db());
    if !chainsub_store::pg::try_lock(client, key).await? {
        tracing::info!(
            %chain_id,
            "another indexer holds the writer lock; waiting as hot standby"
        );
        chainsub_store::pg::lock(client, key).await?;
        tracing::info!(%chain_id, "took over the writer lock");
    }
    Ok(())
}

/// Creates the cursor row at `genesis` if there is none, checks it belongs to `contract`, and
/// bumps the writer epoch. Returns our epoch.
pub async fn claim_cursor(
    client: &Client,
    chain_id: ChainId,
    contract: Address,
    genesis: Cursor,
) -> Result<i64> {
    let (epoch, theirs) =
        chainsub_store::index::claim_cursor(client, chain_id, contract, genesis).await?;
    if theirs != contract.as_slice() {
        return Err(Error::Config(format!(
            "the database indexes contract 0x{} on chain {chain_id}, not {contract}",
            alloy::hex::encode(theirs)
        )));
    }
    Ok(epoch)
}
