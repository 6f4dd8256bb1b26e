//! Ordered `Blocks` / `Undo` items from a cursor: backfill to the head, then follow it.
//!
//! The stream is a state machine driven by [`Stream::next`], one item per call, so the same
//! code serves backfill and live (a live step is a backfill of the few blocks since the last
//! poll), which is why the hand-off has no gap and no duplicate: there is no hand-off.

use std::collections::BTreeMap;

use alloy::primitives::B256;

use crate::block::{Block, Cursor};
use crate::source::{BlockSource, Fetcher};
use crate::{Error, Result};

/// What to do with a reorg deeper than the finality window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReorgPolicy {
    /// Stop with an error and a metric; an operator decides.
    Halt,
    /// Undo everything back to START_BLOCK and index again from there.
    Resync,
}

/// Settings of the stream.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// Blocks below `head - finality_depth` are final when the node has no `finalized` tag.
    pub finality_depth: u64,
    /// Ask the node for its `finalized` block.
    pub use_finalized_tag: bool,
    pub reorg_policy: ReorgPolicy,
    /// The position before START_BLOCK (where a `Resync` goes back to).
    pub genesis: Cursor,
}

/// One item of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// Consecutive blocks following the cursor. `head` is the chain head seen; blocks at or
    /// below `finalized` can no longer be reorged.
    Blocks {
        blocks: Vec<Block>,
        head: u64,
        finalized: u64,
    },
    /// Everything above `back_to` is no longer canonical.
    Undo { back_to: Cursor, depth: u64 },
    /// Nothing new (or the node is behind us); poll again later.
    Idle { head: u64 },
}

/// The block stream.
pub struct Stream<S: ?Sized> {
    fetcher: Fetcher<S>,
    cfg: StreamConfig,
    cursor: Cursor,
    /// Hashes of the blocks we applied inside the unfinalized window (mirrors
    /// `block_checkpoints`); always holds the cursor.
    window: BTreeMap<u64, B256>,
}

impl<S: BlockSource + ?Sized> Stream<S> {
    /// A stream resuming at `cursor`, with the checkpoints the sink holds.
    pub fn new(
        fetcher: Fetcher<S>,
        cfg: StreamConfig,
        cursor: Cursor,
        mut window: BTreeMap<u64, B256>,
    ) -> Self {
        window.insert(cursor.number, cursor.hash);
        Stream {
            fetcher,
            cfg,
            cursor,
            window,
        }
    }

    /// The cursor after the last item.
    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// The fetcher (for its adaptive range).
    pub fn fetcher(&self) -> &Fetcher<S> {
        &self.fetcher
    }

    async fn finalized(&self, head: u64) -> u64 {
        let by_depth = head.saturating_sub(self.cfg.finality_depth);
        if self.cfg.use_finalized_tag
            && let Some(f) = self.fetcher.finalized().await
        {
            return f.min(head);
        }
        by_depth
    }

    /// The next item.
    pub async fn next(&mut self) -> Result<Item> {
        let head = self.fetcher.head().await;
        if head < self.cursor.number {
            // A lagging node (or a load balancer's stale replica) is not a reorg by itself.
            return Ok(Item::Idle { head });
        }
        if head == self.cursor.number {
            let tip = self.fetcher.header(head).await;
            if tip.hash == self.cursor.hash {
                return Ok(Item::Idle { head });
            }
            // Same height, different block: a reorg that did not make the chain longer.
            return self.undo(head).await;
        }
        let blocks = self.fetcher.fetch(self.cursor.number + 1, head).await;
        if blocks[0].parent_hash != self.cursor.hash {
            return self.undo(head).await;
        }
        let finalized = self.finalized(head).await;
        let last = blocks
            .last()
            .expect("fetch returns at least one block")
            .cursor();
        for b in &blocks {
            if b.number >= finalized {
                self.window.insert(b.number, b.hash);
            }
        }
        self.cursor = last;
        self.window.insert(last.number, last.hash);
        // Keep the window bounded: below the finalized block no reorg is expected.
        self.window = self.window.split_off(&finalized.min(last.number));
        Ok(Item::Blocks {
            blocks,
            head,
            finalized,
        })
    }

    /// Walks back from the cursor to the newest block that is still on the chain.
    async fn undo(&mut self, head: u64) -> Result<Item> {
        let finalized = self.finalized(head).await;
        let mut k = self.cursor.number.min(head);
        let back_to = loop {
            let ours = self.window.get(&k).copied();
            match ours {
                Some(ours) if self.fetcher.header(k).await.hash == ours => {
                    break Cursor {
                        number: k,
                        hash: ours,
                    };
                }
                _ => {}
            }
            let exhausted = ours.is_none() || k == 0 || k <= finalized;
            if exhausted {
                metrics::counter!("indexer_deep_reorgs_total").increment(1);
                let err = Error::DeepReorg {
                    number: self.cursor.number,
                    ours: self.cursor.hash,
                    lowest: k,
                };
                match self.cfg.reorg_policy {
                    ReorgPolicy::Halt => return Err(err),
                    ReorgPolicy::Resync => {
                        tracing::error!(%err, "resyncing from START_BLOCK (REORG_POLICY=resync)");
                        break self.cfg.genesis;
                    }
                }
            }
            k -= 1;
        };
        let depth = self.cursor.number - back_to.number;
        tracing::warn!(
            from = self.cursor.number,
            back_to = back_to.number,
            depth,
            "reorg: undoing blocks above the common ancestor"
        );
        self.cursor = back_to;
        self.window.split_off(&(back_to.number + 1));
        self.window.insert(back_to.number, back_to.hash);
        Ok(Item::Undo { back_to, depth })
    }
}
