//! One step of the pipeline: take the next stream item and hand it to the sink.

use std::sync::Arc;

use tokio_postgres::Client;

use crate::block::Cursor;
use crate::config::IndexerConfig;
use crate::ops::Status;
use crate::sink::{Applied, Sink};
use crate::source::{BlockSource, Fetcher};
use crate::stream::{Item, Stream, StreamConfig};
use crate::{Result, writer};

/// Live batches up to this many blocks are committed block by block.
const LIVE_PER_BLOCK_MAX: usize = 16;

/// How often an idle writer checks that its database is still there.
const PING_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Applied(Applied),
    Undone { depth: u64 },
    Idle { head: u64 },
}

/// Source, stream and sink of one writer session.
pub struct Indexer<S: ?Sized> {
    stream: Stream<S>,
    sink: Sink,
    status: Arc<Status>,
    /// When the idle writer last checked its database connection.
    last_ping: std::time::Instant,
    /// The database's cursor (the stream's runs one item ahead while backfilling).
    committed: Cursor,
    /// The next item, fetched while the previous backfill batch committed (at most one:
    /// memory stays bounded by two ranges). An error is kept for the step that would have
    /// used the item.
    ahead: Option<Result<Item>>,
}

impl<S: BlockSource + ?Sized> Indexer<S> {
    /// Opens a session on `client`, which must already hold the writer lock: claims the
    /// cursor (bumping the epoch) and resumes from it.
    pub async fn open(
        cfg: &IndexerConfig,
        source: Arc<S>,
        client: Client,
        status: Arc<Status>,
    ) -> Result<Self> {
        let fetcher = Fetcher::new(source, cfg.contract, cfg.fetch.clone())
            .with_trouble(status.node_trouble());
        // The cursor starts on the block before START_BLOCK, so the first block's parent
        // hash is checked like any other. Block 0 has no logs, so START_BLOCK 0 means 1.
        let start = cfg.start_block.max(1);
        let before = fetcher.header(start - 1).await;
        let genesis = Cursor {
            number: before.number,
            hash: before.hash,
        };
        let epoch = writer::claim_cursor(&client, cfg.chain_id, cfg.contract, genesis).await?;
        let sink = Sink::new(client, cfg.chain_id, cfg.contract, epoch, cfg.confirmations);
        let (cursor, window) = sink.load().await?;
        tracing::info!(epoch, cursor = cursor.number, "writer session opened");
        status.set_indexed(cursor.number);
        let stream = Stream::new(
            fetcher,
            StreamConfig {
                finality_depth: cfg.finality_depth,
                use_finalized_tag: cfg.use_finalized_tag,
                reorg_policy: cfg.reorg_policy,
                genesis,
                shorter_chain_grace: cfg.shorter_chain_grace,
            },
            cursor,
            window,
        );
        Ok(Self {
            stream,
            sink,
            status,
            last_ping: std::time::Instant::now(),
            committed: cursor,
            ahead: None,
        })
    }

    /// The database's cursor after the last successful step.
    pub fn cursor(&self) -> Cursor {
        self.committed
    }

    /// The next item: the one fetched ahead, or a fresh one.
    async fn pull(&mut self) -> Result<Item> {
        if let Some(item) = self.ahead.take() {
            return item;
        }
        let next = self.stream.next();
        tokio::pin!(next);
        pinging(&self.sink, &mut self.last_ping, next).await?
    }

    /// Pulls one item and commits it. While backfilling, the next range is fetched from
    /// the node while this one is written (source and sink overlap instead of taking turns).
    pub async fn step(&mut self) -> Result<Progress> {
        let item = self.pull().await?;
        let progress = match item {
            Item::Idle { head } => {
                if self.status.head() != head {
                    self.sink.record_head(head).await?;
                } else if self.last_ping.elapsed() >= PING_EVERY {
                    // Idle at the head: make sure the database is still there, so that
                    // readiness fails while it is not.
                    self.sink.ping().await?;
                    self.last_ping = std::time::Instant::now();
                }
                self.status.set_head(head);
                Progress::Idle { head }
            }
            Item::Undo { back_to, depth } => {
                self.sink.undo(back_to).await?;
                self.committed = back_to;
                metrics::counter!("indexer_reorgs_total").increment(1);
                metrics::histogram!("indexer_reorg_depth").record(depth as f64);
                Progress::Undone { depth }
            }
            Item::Blocks {
                blocks,
                head,
                finalized,
            } => {
                self.status.set_head(head);
                let last = blocks.last().map(|b| b.number).unwrap_or(0);
                let live = last == head && blocks.len() <= LIVE_PER_BLOCK_MAX;
                let mut total = Applied::default();
                if live {
                    for b in blocks.chunks(1) {
                        let a = self.sink.apply(b, head, finalized).await?;
                        total.blocks += a.blocks;
                        total.events += a.events;
                        total.enqueued += a.enqueued;
                    }
                } else {
                    // The stream's next item does not depend on this batch being written
                    // (its cursor and window moved when it produced the batch); if the write
                    // fails, the session restarts from the database's cursor and the item
                    // fetched ahead is dropped with it.
                    let next = self.stream.next();
                    tokio::pin!(next);
                    let mut fetched = None;
                    let applied = {
                        let apply = self.sink.apply(&blocks, head, finalized);
                        tokio::pin!(apply);
                        loop {
                            tokio::select! {
                                a = &mut apply => break a,
                                n = &mut next, if fetched.is_none() => fetched = Some(n),
                            }
                        }
                    };
                    total = applied?;
                    self.ahead = Some(match fetched {
                        Some(n) => n,
                        // Committed; the node is still answering: keep the writer's session
                        // busy meanwhile, as `pull` does.
                        None => pinging(&self.sink, &mut self.last_ping, next).await?,
                    });
                }
                if let Some(b) = blocks.last() {
                    self.committed = b.cursor();
                }
                Progress::Applied(total)
            }
        };
        self.status.set_indexed(self.committed.number);
        Ok(progress)
    }
}

/// Waits for `next` while keeping the writer's session busy: the server ends it after
/// INDEXER_WRITER_IDLE_TIMEOUT_MS without a statement (so a frozen writer is replaced), and a
/// slow range or a node that is down and retried must not look like that. The outer error is
/// the database's (a failed ping), the inner one the item's.
async fn pinging(
    sink: &Sink,
    last_ping: &mut std::time::Instant,
    mut next: std::pin::Pin<&mut impl Future<Output = Result<Item>>>,
) -> Result<Result<Item>> {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        tokio::select! {
            item = &mut next => return Ok(item),
            _ = tick.tick() => {
                sink.ping().await?;
                *last_ping = std::time::Instant::now();
            }
        }
    }
}
