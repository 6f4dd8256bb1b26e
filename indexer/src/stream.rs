//! Ordered `Blocks` / `Undo` items from a cursor: backfill to the head, then follow it.
//!
//! The stream is a state machine driven by [`Stream::next`], one item per call, so the same
//! code serves backfill and live (a live step is a backfill of the few blocks since the last
//! poll), which is why the hand-off has no gap and no duplicate: there is no hand-off.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

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
    /// How long a head below the cursor, on the same chain as ours up to that head, counts
    /// as a lagging node before the index believes the chain really lost its tip (e.g.
    /// `anvil_rollback`, or a reorg to a shorter branch that is not extended yet) and
    /// undoes the blocks above the head.
    pub shorter_chain_grace: Duration,
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
    /// Since when the node's head has been below the cursor on our own chain.
    behind_since: Option<Instant>,
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
        Self {
            fetcher,
            cfg,
            cursor,
            window,
            behind_since: None,
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
            return self.below(head).await;
        }
        self.behind_since = None;
        if head == self.cursor.number {
            let Some(tip) = self.fetcher.header_if_exists(head).await else {
                // Gone since we read the head: look again.
                return Ok(Item::Idle { head });
            };
            if tip.hash == self.cursor.hash {
                return Ok(Item::Idle { head });
            }
            // Same height, different block: a reorg that did not make the chain longer.
            return self.undo(head).await;
        }
        let blocks = self.fetcher.fetch(self.cursor.number + 1, head).await;
        let Some(first) = blocks.first() else {
            // The chain got shorter than the range while we read it: look at the head again.
            return Ok(Item::Idle { head });
        };
        if first.parent_hash != self.cursor.hash {
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

    /// The node's head is below the cursor. Its block at that height tells a dead branch
    /// from a lagging node: a different hash than ours means the blocks we indexed above
    /// it are gone (undo at once); the same hash is what a lagging replica of our chain
    /// returns, so we wait — but a chain that stays shorter than the index for
    /// `shorter_chain_grace` has lost its tip (a rollback with no new blocks yet), and the
    /// blocks above its head are undone. A head below our window cannot be compared; after
    /// the grace it is handled as a reorg deeper than the window (`INDEXER_REORG_POLICY`).
    async fn below(&mut self, head: u64) -> Result<Item> {
        let ours = self.window.get(&head).copied();
        let Some(theirs) = self.fetcher.header_if_exists(head).await else {
            // Shorter still: look at the head again.
            return Ok(Item::Idle { head });
        };
        if let Some(ours) = ours
            && theirs.hash != ours
        {
            self.behind_since = None;
            return self.undo(head).await;
        }
        let since = *self.behind_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.cfg.shorter_chain_grace {
            // A lagging node (or a load balancer's stale replica) is not a reorg by itself.
            return Ok(Item::Idle { head });
        }
        tracing::warn!(
            head,
            cursor = self.cursor.number,
            grace = ?self.cfg.shorter_chain_grace,
            "the chain stayed shorter than the index: its tip was taken back"
        );
        self.behind_since = None;
        self.undo(head).await
    }

    /// Walks back from the cursor to the newest block that is still on the chain.
    async fn undo(&mut self, head: u64) -> Result<Item> {
        let finalized = self.finalized(head).await;
        let mut k = self.cursor.number.min(head);
        let back_to = loop {
            let ours = self.window.get(&k).copied();
            match ours {
                Some(ours)
                    if self
                        .fetcher
                        .header_if_exists(k)
                        .await
                        .is_some_and(|h| h.hash == ours) =>
                {
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use alloy::primitives::{Bloom, keccak256};
    use async_trait::async_trait;

    use super::*;
    use crate::block::{Header, RawLog};
    use crate::source::{FetchConfig, SourceError};

    /// Headers only (no logs); `head_override` plays a lagging node.
    struct Chain {
        headers: Mutex<Vec<Header>>,
        head_override: Mutex<Option<u64>>,
        /// A head answered once, then forgotten (the head read just before a rollback).
        stale_head_once: Mutex<Option<u64>>,
    }

    impl Chain {
        fn new(len: u64) -> Arc<Self> {
            let c = Arc::new(Self {
                headers: Mutex::new(vec![]),
                head_override: Mutex::new(None),
                stale_head_once: Mutex::new(None),
            });
            c.extend(len, 0);
            c
        }

        fn extend(&self, n: u64, branch: u8) {
            let mut hs = self.headers.lock().unwrap();
            for _ in 0..n {
                let number = hs.len() as u64;
                let parent = hs.last().map(|h| h.hash).unwrap_or_default();
                let mut seed = number.to_be_bytes().to_vec();
                seed.push(branch);
                hs.push(Header {
                    number,
                    hash: keccak256(seed),
                    parent_hash: parent,
                    timestamp: number * 12,
                    logs_bloom: Bloom::ZERO,
                });
            }
        }

        fn reorg(&self, depth: u64, branch: u8) {
            let len = self.headers.lock().unwrap().len() as u64;
            self.headers
                .lock()
                .unwrap()
                .truncate((len - depth) as usize);
            self.extend(depth, branch);
        }

        fn hash(&self, n: u64) -> B256 {
            self.headers.lock().unwrap()[n as usize].hash
        }
    }

    #[async_trait]
    impl BlockSource for Chain {
        async fn head(&self) -> Result<u64, SourceError> {
            if let Some(stale) = self.stale_head_once.lock().unwrap().take() {
                return Ok(stale);
            }
            let real = self.headers.lock().unwrap().len() as u64 - 1;
            Ok(self.head_override.lock().unwrap().unwrap_or(real))
        }
        async fn finalized(&self) -> Result<Option<u64>, SourceError> {
            Ok(None)
        }
        async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError> {
            let hs = self.headers.lock().unwrap();
            if to as usize >= hs.len() {
                return Err(SourceError::Transient(format!("block {to} not found")));
            }
            Ok(hs[from as usize..=to as usize].to_vec())
        }
        async fn logs(&self, _: u64, _: u64) -> Result<Vec<RawLog>, SourceError> {
            Ok(vec![])
        }
        async fn block_logs(&self, _: u64, _: B256) -> Result<Vec<RawLog>, SourceError> {
            Ok(vec![])
        }
    }

    fn stream(chain: &Arc<Chain>, depth: u64, policy: ReorgPolicy) -> Stream<Chain> {
        let genesis = Cursor {
            number: 0,
            hash: chain.hash(0),
        };
        let fetcher = Fetcher::new(chain.clone(), Address::ZERO, FetchConfig::default());
        let cfg = StreamConfig {
            finality_depth: depth,
            use_finalized_tag: false,
            reorg_policy: policy,
            genesis,
            shorter_chain_grace: Duration::from_secs(3600),
        };
        Stream::new(fetcher, cfg, genesis, BTreeMap::new())
    }

    use alloy::primitives::Address;

    async fn drain(s: &mut Stream<Chain>) -> Vec<Item> {
        let mut items = vec![];
        loop {
            let item = s.next().await.unwrap();
            if matches!(item, Item::Idle { .. }) {
                return items;
            }
            items.push(item);
        }
    }

    #[tokio::test]
    async fn blocks_come_in_order_without_gap_or_duplicate() {
        let chain = Chain::new(30);
        let mut s = stream(&chain, 64, ReorgPolicy::Halt);
        let mut seen = vec![];
        for item in drain(&mut s).await {
            let Item::Blocks { blocks, .. } = item else {
                panic!("no reorg here")
            };
            seen.extend(blocks.iter().map(|b| b.number));
        }
        chain.extend(5, 0);
        for item in drain(&mut s).await {
            let Item::Blocks { blocks, .. } = item else {
                panic!("no reorg here")
            };
            seen.extend(blocks.iter().map(|b| b.number));
        }
        assert_eq!(seen, (1..=34).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn lagging_node_is_not_a_reorg() {
        let chain = Chain::new(20);
        let mut s = stream(&chain, 64, ReorgPolicy::Halt);
        drain(&mut s).await;
        *chain.head_override.lock().unwrap() = Some(15);
        assert_eq!(s.next().await.unwrap(), Item::Idle { head: 15 });
        assert_eq!(s.cursor().number, 19);
    }

    #[tokio::test]
    async fn head_below_the_cursor_on_another_branch_is_undone_at_once() {
        let chain = Chain::new(20);
        let mut s = stream(&chain, 64, ReorgPolicy::Halt);
        drain(&mut s).await;
        // The node switched to a branch forking after 12 that is only 15 long.
        chain.reorg(7, 1);
        *chain.head_override.lock().unwrap() = Some(15);
        let back_to = Cursor {
            number: 12,
            hash: chain.hash(12),
        };
        assert_eq!(s.next().await.unwrap(), Item::Undo { back_to, depth: 7 });
        let Item::Blocks { blocks, .. } = s.next().await.unwrap() else {
            panic!()
        };
        assert_eq!(blocks.last().unwrap().hash, chain.hash(15));
    }

    #[tokio::test]
    async fn a_chain_that_stays_shorter_than_the_index_is_undone_after_the_grace() {
        let chain = Chain::new(20);
        let mut s = stream(&chain, 64, ReorgPolicy::Halt);
        s.cfg.shorter_chain_grace = Duration::from_millis(50);
        drain(&mut s).await;
        // A rollback: blocks 17..=19 are gone, 16 is unchanged, nothing new yet.
        chain.headers.lock().unwrap().truncate(17);
        assert_eq!(s.next().await.unwrap(), Item::Idle { head: 16 });
        assert_eq!(
            s.cursor().number,
            19,
            "within the grace it may be a lagging node"
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        let back_to = Cursor {
            number: 16,
            hash: chain.hash(16),
        };
        assert_eq!(s.next().await.unwrap(), Item::Undo { back_to, depth: 3 });
        assert_eq!(s.next().await.unwrap(), Item::Idle { head: 16 });
    }

    #[tokio::test]
    async fn a_block_that_vanishes_after_the_head_was_read_is_not_waited_for() {
        let chain = Chain::new(20);
        let mut s = stream(&chain, 64, ReorgPolicy::Halt);
        s.cfg.shorter_chain_grace = Duration::ZERO;
        drain(&mut s).await;
        // The head is read as 19, then the chain loses 17..=19 before the header is asked
        // for: the stream looks at the head again instead of retrying block 19 forever.
        *chain.stale_head_once.lock().unwrap() = Some(19);
        chain.headers.lock().unwrap().truncate(17);
        let item = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("no wait for a block that is gone")
            .unwrap();
        assert_eq!(item, Item::Idle { head: 19 });
        let back_to = Cursor {
            number: 16,
            hash: chain.hash(16),
        };
        assert_eq!(s.next().await.unwrap(), Item::Undo { back_to, depth: 3 });
    }

    #[tokio::test]
    async fn a_lagging_node_that_catches_up_within_the_grace_changes_nothing() {
        let chain = Chain::new(20);
        let mut s = stream(&chain, 64, ReorgPolicy::Halt);
        s.cfg.shorter_chain_grace = Duration::from_millis(50);
        drain(&mut s).await;
        *chain.head_override.lock().unwrap() = Some(15);
        assert_eq!(s.next().await.unwrap(), Item::Idle { head: 15 });
        *chain.head_override.lock().unwrap() = None;
        assert_eq!(s.next().await.unwrap(), Item::Idle { head: 19 });
        // Behind again later: the grace starts over.
        tokio::time::sleep(Duration::from_millis(60)).await;
        *chain.head_override.lock().unwrap() = Some(15);
        assert_eq!(s.next().await.unwrap(), Item::Idle { head: 15 });
        assert_eq!(s.cursor().number, 19);
    }

    #[tokio::test]
    async fn same_height_reorg_undoes_to_the_common_ancestor_then_replays() {
        let chain = Chain::new(20);
        let mut s = stream(&chain, 64, ReorgPolicy::Halt);
        drain(&mut s).await;
        chain.reorg(3, 1);
        let back_to = Cursor {
            number: 16,
            hash: chain.hash(16),
        };
        assert_eq!(s.next().await.unwrap(), Item::Undo { back_to, depth: 3 });
        let Item::Blocks { blocks, .. } = s.next().await.unwrap() else {
            panic!()
        };
        assert_eq!(blocks.first().unwrap().number, 17);
        assert_eq!(blocks.last().unwrap().hash, chain.hash(19));
    }

    #[tokio::test]
    async fn reorg_deeper_than_the_finality_window_halts() {
        let chain = Chain::new(40);
        let mut s = stream(&chain, 5, ReorgPolicy::Halt);
        drain(&mut s).await;
        chain.reorg(10, 1);
        chain.extend(1, 1);
        assert!(matches!(s.next().await, Err(Error::DeepReorg { .. })));
    }

    #[tokio::test]
    async fn deep_reorg_with_resync_policy_goes_back_to_start() {
        let chain = Chain::new(40);
        let mut s = stream(&chain, 5, ReorgPolicy::Resync);
        drain(&mut s).await;
        chain.reorg(10, 1);
        let Item::Undo { back_to, .. } = s.next().await.unwrap() else {
            panic!()
        };
        assert_eq!(back_to.number, 0);
    }
}
