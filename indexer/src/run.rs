//! The long-running loop: wait for the writer lock, step the pipeline, idle at the head,
//! start over on a fresh session after an error, stop cleanly on shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::IndexerConfig;
use crate::indexer::{Indexer, Progress};
use crate::ops::Status;
use crate::source::BlockSource;
use crate::{Error, Result, writer};

/// How long a step in flight may take to finish after a shutdown signal before it is dropped
/// (which rolls its transaction back).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A shutdown signal: flips to `true` once.
pub type Shutdown = watch::Receiver<bool>;

/// Runs until `shutdown` or a fatal error (a deep reorg under the halt policy, bad config).
pub async fn run<S: BlockSource + ?Sized>(
    cfg: &IndexerConfig,
    database_url: &str,
    source: Arc<S>,
    status: Arc<Status>,
    mut shutdown: Shutdown,
) -> Result<()> {
    status.set_started();
    let mut failures = 0u32;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        match session(cfg, database_url, source.clone(), &status, &mut shutdown).await {
            Ok(()) => return Ok(()),
            Err(e @ (Error::DeepReorg { .. } | Error::Config(_))) => return Err(e),
            Err(e) => {
                status.set_writer(false);
                status.set_fault(Some(fault(&e)));
                metrics::counter!("indexer_session_restarts_total").increment(1);
                failures += 1;
                let wait = cfg
                    .fetch
                    .min_backoff
                    .saturating_mul(1 << failures.min(10))
                    .min(cfg.fetch.max_backoff);
                tracing::error!(error = %e, ?wait, "indexer session failed; starting a new one");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.changed() => return Ok(()),
                }
            }
        }
    }
}

/// One writer session: lock, open, step until shutdown or error.
async fn session<S: BlockSource + ?Sized>(
    cfg: &IndexerConfig,
    database_url: &str,
    source: Arc<S>,
    status: &Arc<Status>,
    shutdown: &mut Shutdown,
) -> Result<()> {
    let client = writer::connect(database_url).await?;
    // A session again: whatever failed the last one (a demoted writer's killed session, a
    // database that was away) is over. A standby waiting on the lock is ready as one.
    status.set_fault(None);
    tokio::select! {
        r = writer::acquire(&client, cfg.chain_id) => r?,
        _ = shutdown.changed() => return Ok(()),
    }
    // Only now: a standby's session waits inside `pg_advisory_lock`, which is not idle, but
    // nothing is gained by bounding it.
    writer::bound_session(&client, cfg.writer_idle_timeout).await?;
    writer::check_schema(&client).await?;
    status.set_writer(true);
    let mut ix = Indexer::open(cfg, source, client, status.clone()).await?;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let progress = {
            let step = ix.step();
            tokio::pin!(step);
            tokio::select! {
            r = &mut step => r?,
            _ = shutdown.changed() => {
                // Let the transaction in flight commit; if it cannot in time, dropping the
                // step (and then the connection) rolls it back. Never half.
                return match tokio::time::timeout(SHUTDOWN_GRACE, &mut step).await {
                    Ok(r) => r.map(|_| tracing::info!("finished the step in flight; stopping")),
                    Err(_) => {
                        // Either its batch had not committed (rolled back with the
                        // connection) or only the fetch of the next range was left.
                        tracing::info!("step in flight dropped (an uncommitted batch rolls back); stopping");
                        Ok(())
                    }
                };
            }
            }
        };
        status.set_fault(None);
        status.beat();
        match progress {
            Progress::Idle { .. } => {
                tokio::select! {
                    _ = tokio::time::sleep(cfg.poll_interval) => {}
                    _ = shutdown.changed() => return Ok(()),
                }
            }
            Progress::Applied(a) => {
                tracing::debug!(
                    blocks = a.blocks,
                    events = a.events,
                    cursor = ix.cursor().number,
                    "applied"
                );
            }
            Progress::Undone { depth } => tracing::info!(depth, "reorg undone"),
        }
    }
}

/// What readiness says about a failed session.
fn fault(e: &Error) -> String {
    match e {
        Error::Db(_) => format!("database unreachable or failing: {e}"),
        Error::Rpc(_) => format!("node unreachable or failing: {e}"),
        _ => format!("indexer session failed: {e}"),
    }
}

/// A shutdown signal that flips on SIGTERM or SIGINT.
pub fn signal_shutdown() -> Shutdown {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        }
        let _ = tx.send(true);
    });
    rx
}
