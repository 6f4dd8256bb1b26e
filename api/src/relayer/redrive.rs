//! The cancellation re-driver (runs beside `api serve` when a relayer key is configured):
//! every few seconds it looks at journaled cancellation transactions (`submitted`) whose
//! outcome is unknown, records the mined and the dead ones, and sends the bytes of the
//! unmined ones again. A process that died between the journal and the broadcast, or a
//! broadcast nobody answered, therefore never loses a merchant's cancellation, even when the
//! merchant does not ask again. Sending signed bytes again can never make a second
//! transaction (same hash, same nonce); replacing a stuck one at higher fees is left to the
//! merchant's next request.

use std::future::Future;
use std::time::Duration;

use chainsub_core::{CancelAt, OnchainSubscriptionId};
use chainsub_store::cancellations;

use super::{Sent, TxState};
use crate::ctx::Ctx;

/// How often the re-driver looks.
pub const EVERY: Duration = Duration::from_secs(5);
/// A transaction is looked at once it was signed this long ago (a request in flight is
/// left to finish its own broadcast).
pub const SETTLE_AFTER_SECS: f64 = 10.0;
/// Rows per pass.
const BATCH: i64 = 100;

/// The `error` of a row the re-driver found dead.
pub const DEAD: &str = "never mined: its nonce went to another transaction; ask again";

/// Runs passes until `stop` resolves.
pub async fn redrive(ctx: Ctx, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        match pass(&ctx).await {
            Ok(n) if n > 0 => tracing::info!(rows = n, "cancellation re-driver pass"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cancellation re-driver pass failed"),
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
    }
}

/// One pass; the number of rows looked at.
pub async fn pass(ctx: &Ctx) -> Result<usize, String> {
    let Some(relayer) = &ctx.relayer else {
        return Ok(0);
    };
    let conn = ctx.pool.get().await.map_err(|e| e.to_string())?;
    let rows = cancellations::unsettled(&conn, SETTLE_AFTER_SECS, BATCH)
        .await
        .map_err(|e| e.to_string())?;
    for row in &rows {
        let sent = Sent::from(&row.tx);
        let Some(onchain_id) = OnchainSubscriptionId::from_db(row.onchain_id) else {
            tracing::error!(row = row.row_id, "cancellation row without an on-chain id");
            continue;
        };
        let settled = match relayer
            .tx_state(
                &sent,
                onchain_id,
                CancelAt::from_at_period_end(row.at_period_end),
            )
            .await?
        {
            TxState::Succeeded => Some((true, None)),
            TxState::Dead => {
                // Its nonce went to another transaction and the chain does not show the
                // cancellation: it will not happen unless the merchant asks again. Said loudly,
                // for the operator to alert on (the merchant was told "pending").
                tracing::error!(
                    row = row.row_id,
                    subscription = row.onchain_id,
                    tx = %row.tx.hash,
                    "cancellation lost its nonce to another transaction and never took effect: \
                     the merchant must ask again"
                );
                metrics::counter!("api_cancellations_dead_total").increment(1);
                Some((false, Some(DEAD)))
            }
            TxState::Unmined => {
                match relayer.rebroadcast(&row.tx.raw).await {
                    Ok(chainsub_sender::Broadcast::Accepted) => {
                        metrics::counter!("api_cancellations_rebroadcast_total").increment(1);
                    }
                    // The next pass reads where it stands.
                    Ok(said) => {
                        tracing::warn!(tx = %row.tx.hash, ?said, "cancellation re-driver");
                    }
                    Err(e) => {
                        tracing::warn!(tx = %row.tx.hash, error = %e, "cancellation re-driver");
                    }
                }
                None
            }
        };
        if let Some((mined, error)) = settled {
            cancellations::settle(&conn, row.row_id, row.tx.hash, mined, error)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(rows.len())
}
