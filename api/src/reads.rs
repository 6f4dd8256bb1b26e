//! Where a read of the chain index runs: on the streaming replica (`READ_DATABASE_URL`) while
//! its replayed index is within `READ_MAX_LAG_BLOCKS` of the primary's, else on the primary.
//!
//! The lists and gets of subscriptions and events, the reports and the ledger export read
//! here; writes, idempotency, API keys, sessions and plans (which the API itself writes, and
//! a merchant reads right after) always use the primary. Each read first reads the indexer's
//! cursor on the connection it will use and reports that height (`Chainsub-Indexed-Block`):
//! the index it then reads is at least that far. A process never reports a lower height than
//! it reported before (barring a reorg on the primary itself): a replica behind what this
//! process already served is passed over for the primary.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use chainsub_core::ChainId;

use crate::db::{Conn, Pool};
use crate::http::error::Result;

/// What every request loop of a process shares about the replica.
#[derive(Debug)]
struct Shared {
    /// The primary's indexed height when the monitor last read it (-1: none yet).
    primary: AtomicI64,
    /// The monitor reached the replica last time and found it within the bound.
    replica_usable: AtomicBool,
    /// The highest height this process has reported.
    served: AtomicI64,
    max_lag: i64,
}

/// The read routing of one request loop.
#[derive(Clone, Debug)]
pub struct Reads {
    /// This loop's pool of replica connections, when a replica is configured.
    replica: Option<Pool>,
    shared: Arc<Shared>,
}

/// Which database a read ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Primary,
    Replica,
}

impl Source {
    fn label(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Replica => "replica",
        }
    }
}

/// A connection for a read, and the index height it had when the read began.
pub struct ReadConn {
    conn: Conn,
    /// The indexer's last block as this connection saw it (`None`: nothing indexed yet).
    pub height: Option<i64>,
    pub source: Source,
    /// The pool the connection came from (a long read takes further connections there).
    pub pool: Pool,
}

impl std::ops::Deref for ReadConn {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl Reads {
    /// Reads on the primary only.
    pub fn primary_only() -> Self {
        Self {
            replica: None,
            shared: Arc::new(Shared {
                primary: AtomicI64::new(-1),
                replica_usable: AtomicBool::new(false),
                served: AtomicI64::new(-1),
                max_lag: 0,
            }),
        }
    }

    /// Reads on `replica` (a pool of `READ_DATABASE_URL`) while it is within `max_lag`
    /// blocks of the primary. Call [`Reads::monitor`] on one loop's value to keep it
    /// measured.
    pub fn with_replica(replica: Pool, max_lag: u64) -> Self {
        let mut reads = Self::primary_only();
        reads.replica = Some(replica);
        Arc::get_mut(&mut reads.shared)
            .expect("a new value")
            .max_lag = i64::try_from(max_lag).unwrap_or(i64::MAX);
        reads
    }

    /// The same routing state for another request loop, with its own replica pool.
    pub fn for_loop(&self, replica: Option<Pool>) -> Self {
        Self {
            replica: replica.filter(|_| self.replica.is_some()),
            shared: self.shared.clone(),
        }
    }

    /// A connection to read the index on: the replica's when it is usable, within the bound
    /// now, not behind what this process already reported and at least at `min` (a read that
    /// needs blocks up to a height), else the primary's.
    pub async fn conn(
        &self,
        primary: &Pool,
        chain_id: ChainId,
        min: Option<i64>,
    ) -> Result<ReadConn> {
        if let Some(replica) = &self.replica
            && self.shared.replica_usable.load(Ordering::Relaxed)
        {
            match on(replica, chain_id).await {
                Ok(read)
                    if self.within_bound(read.height)
                        && read.height.unwrap_or(-1) >= min.unwrap_or(-1) =>
                {
                    return Ok(self.served(read));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "replica read failed; reading on the primary");
                }
            }
        }
        let mut read = on(primary, chain_id).await?;
        read.source = Source::Primary;
        Ok(self.served(read))
    }

    fn within_bound(&self, height: Option<i64>) -> bool {
        let h = height.unwrap_or(-1);
        let s = &self.shared;
        s.primary.load(Ordering::Relaxed) - h <= s.max_lag && h >= s.served.load(Ordering::Relaxed)
    }

    fn served(&self, read: ReadConn) -> ReadConn {
        if let Some(h) = read.height {
            self.shared.served.fetch_max(h, Ordering::Relaxed);
        }
        metrics::counter!("api_index_reads_total", "source" => read.source.label()).increment(1);
        read
    }

    /// Measures the replica every `every` against the primary until the process ends:
    /// usable while it answers and its index is within the bound (`api_read_replica_lag_blocks`).
    pub async fn monitor(self, primary: Pool, chain_id: ChainId, every: Duration) {
        let Some(replica) = self.replica.clone() else {
            return;
        };
        let s = &self.shared;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let limit = Duration::from_secs(1);
            let Ok(Ok(p)) = tokio::time::timeout(limit, on(&primary, chain_id)).await else {
                // The primary's height unknown: keep the last one.
                continue;
            };
            let primary_height = p.height.unwrap_or(-1);
            s.primary.store(primary_height, Ordering::Relaxed);
            drop(p);
            let usable = match tokio::time::timeout(limit, on(&replica, chain_id)).await {
                Ok(Ok(r)) => {
                    let lag = primary_height - r.height.unwrap_or(-1);
                    metrics::gauge!("api_read_replica_lag_blocks").set(lag as f64);
                    lag <= s.max_lag
                }
                _ => false,
            };
            if usable != s.replica_usable.swap(usable, Ordering::Relaxed) {
                tracing::info!(usable, "read replica");
            }
        }
    }
}

async fn on(pool: &Pool, chain_id: ChainId) -> Result<ReadConn> {
    let conn = pool.get().await?;
    let height = chainsub_store::chain::cursor(&conn, chain_id)
        .await?
        .map(|c| c.indexed_block);
    Ok(ReadConn {
        conn,
        height,
        source: Source::Replica,
        pool: pool.clone(),
    })
}
