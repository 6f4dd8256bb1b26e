//! Where a read of the chain index runs: on the streaming replica (`READ_DATABASE_URL`) while
//! its replayed index is within `READ_MAX_LAG_BLOCKS` of the primary's, else on the primary.
//!
//! The lists and gets of subscriptions and events, the reports and the ledger export read
//! here; writes, idempotency, API keys, sessions and plans (which the API itself writes, and
//! a merchant reads right after) always use the primary. Each response reports a height
//! (`Chainsub-Indexed-Block`) that the index it read had reached: a read on the replica reads
//! the indexer's cursor on its connection first (it needs it to check the bound); a read on
//! the primary reports the primary's height as the monitor last read it (every 200 ms), or
//! what this process already reported if that is higher — the primary is never behind a
//! height any replica showed — so a read on the primary costs no extra statement (except a
//! streaming read, the ledger export, whose default range ends at the height it reads: it
//! reads the cursor on its connection). A process
//! never reports a lower height than it reported before (barring a reorg on the primary
//! itself): a replica behind what this process already served is passed over for the primary.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use chainsub_core::ChainId;

use crate::db::{Conn, Pool};
use crate::http::error::Result;

/// A read on the replica that takes longer than this is run on the primary instead (a standby
/// that stopped answering must not hold requests).
pub const REPLICA_READ_TIMEOUT: Duration = Duration::from_secs(2);

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
    /// needs blocks up to a height), else the primary's. For reads that hold a connection
    /// while they stream (the ledger export); a request's read uses [`Reads::run`].
    pub async fn conn(
        &self,
        primary: &Pool,
        chain_id: ChainId,
        min: Option<i64>,
    ) -> Result<ReadConn> {
        let read = match self.replica_conn(chain_id, min).await {
            Some(read) => read,
            // The export's default range ends at the height it reads: the monitor's last
            // reading (up to 200 ms old) could leave out blocks the index, and /health,
            // already have. One cursor read on the connection, per export.
            None => self.primary_conn(primary, chain_id, true).await?,
        };
        self.report(read.source, read.height);
        Ok(read)
    }

    /// Runs `read` on the replica when it is usable, within the bound and not behind what
    /// this process already reported, and on the primary otherwise — or again on the primary
    /// when the replica's answer was an error (a row not there yet: the replica may lag by
    /// the bound; a query cancelled by replay; the standby gone), took over
    /// [`REPLICA_READ_TIMEOUT`], or finished behind a height this process reported meanwhile.
    /// Reads are idempotent, so running one twice changes nothing. Returns its answer and
    /// the height to report.
    pub async fn run<T, F, Fut>(
        &self,
        primary: &Pool,
        chain_id: ChainId,
        read: F,
    ) -> Result<(T, Option<i64>)>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if let Some(r) = self.replica_conn(chain_id, None).await {
            let height = r.height;
            match tokio::time::timeout(REPLICA_READ_TIMEOUT, read(r.conn)).await {
                Ok(Ok(answer))
                    if height.unwrap_or(-1) >= self.shared.served.load(Ordering::Relaxed) =>
                {
                    self.report(Source::Replica, height);
                    return Ok((answer, height));
                }
                Ok(Ok(_)) => tracing::debug!(
                    "replica read fell behind a reported height; reading on the primary"
                ),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "replica read failed; reading on the primary")
                }
                Err(_) => tracing::warn!("replica read timed out; reading on the primary"),
            }
        }
        let r = self.primary_conn(primary, chain_id, false).await?;
        let height = r.height;
        let answer = read(r.conn).await?;
        self.report(Source::Primary, height);
        Ok((answer, height))
    }

    /// A replica connection and its height, when the replica is usable and within the bound
    /// now (and at least at `min`).
    async fn replica_conn(&self, chain_id: ChainId, min: Option<i64>) -> Option<ReadConn> {
        let replica = self.replica.as_ref()?;
        if !self.shared.replica_usable.load(Ordering::Relaxed) {
            return None;
        }
        match tokio::time::timeout(REPLICA_READ_TIMEOUT, on(replica, chain_id)).await {
            Ok(Ok(read))
                if self.within_bound(read.height)
                    && read.height.unwrap_or(-1) >= min.unwrap_or(-1) =>
            {
                Some(read)
            }
            Ok(Ok(_)) => None,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "replica unavailable; reading on the primary");
                None
            }
            Err(_) => None,
        }
    }

    /// A primary connection, with the primary's height as last measured — or read on the
    /// connection when `fresh` (or not measured yet) — or what this process already reported,
    /// if higher: the primary is never behind a replica.
    async fn primary_conn(
        &self,
        primary: &Pool,
        chain_id: ChainId,
        fresh: bool,
    ) -> Result<ReadConn> {
        let conn = primary.get().await?;
        let s = &self.shared;
        let known = s.primary.load(Ordering::Relaxed);
        let served = s.served.load(Ordering::Relaxed);
        let height = if fresh || known < 0 {
            chainsub_store::chain::cursor(&conn, chain_id)
                .await?
                .map(|c| c.indexed_block.max(served))
        } else {
            Some(known.max(served))
        };
        Ok(ReadConn {
            conn,
            height,
            source: Source::Primary,
            pool: primary.clone(),
        })
    }

    fn within_bound(&self, height: Option<i64>) -> bool {
        let h = height.unwrap_or(-1);
        let s = &self.shared;
        s.primary.load(Ordering::Relaxed) - h <= s.max_lag && h >= s.served.load(Ordering::Relaxed)
    }

    /// Records a read's source and the height it reports.
    fn report(&self, source: Source, height: Option<i64>) {
        if let Some(h) = height {
            self.shared.served.fetch_max(h, Ordering::Relaxed);
        }
        metrics::counter!("api_index_reads_total", "source" => source.label()).increment(1);
    }

    /// Reads the primary's height every `every` until the process ends, and measures the
    /// replica against it: usable while it answers and its index is within the bound
    /// (`api_read_replica_lag_blocks`).
    pub async fn monitor(self, primary: Pool, chain_id: ChainId, every: Duration) {
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
            let Some(replica) = &self.replica else {
                continue;
            };
            let usable = match tokio::time::timeout(limit, on(replica, chain_id)).await {
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
