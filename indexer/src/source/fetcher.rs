//! Retries, backoff, the adaptive log range, and the distrust checks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, BloomInput};

use super::{BlockSource, SourceError};
use crate::block::{Block, Header, RawLog};

/// Knobs of the fetcher (see the README's settings table).
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// First `eth_getLogs` range, in blocks.
    pub initial_range: u64,
    /// The range never grows beyond this.
    pub max_range: u64,
    /// A response with at least this many logs is treated as truncated and the range halved.
    pub max_logs_per_response: usize,
    /// Backoff after a failed call starts here and doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// Per-call timeout; a timed-out `eth_getLogs` shrinks the range.
    pub rpc_timeout: Duration,
    /// How many times an empty answer is retried for a block whose bloom says the contract
    /// emitted; after that the block is read through its receipts, which settles it (blooms
    /// have false positives, so an empty answer can be true).
    pub bloom_retries: u32,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            initial_range: 100,
            max_range: 2000,
            max_logs_per_response: 10_000,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            rpc_timeout: Duration::from_secs(30),
            bloom_retries: 3,
        }
    }
}

/// What the fetcher reports while the node keeps failing: the fetcher retries forever (it
/// never skips a block), so without this an indexer whose node is down or inconsistent
/// would look healthy while it waits. Readiness reads [`NodeTrouble::failing`]; liveness
/// counts a retry as activity (a loop that retries is not wedged).
#[derive(Debug, Default)]
pub struct NodeTrouble {
    failing: Mutex<Option<String>>,
    activity_ms: AtomicU64,
}

/// Consecutive failures of one call before the node counts as failing.
const FAILING_AFTER: u32 = 3;

impl NodeTrouble {
    /// What keeps failing, once a call has failed [`FAILING_AFTER`] times in a row.
    pub fn failing(&self) -> Option<String> {
        self.failing.lock().expect("trouble lock").clone()
    }

    /// The node answered consistently again (a step succeeded).
    pub fn clear(&self) {
        *self.failing.lock().expect("trouble lock") = None;
    }

    /// Unix milliseconds of the last retry (0: none).
    pub fn last_activity_ms(&self) -> u64 {
        self.activity_ms.load(Ordering::Relaxed)
    }

    fn report(&self, what: &str, attempt: u32, err: &str) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.activity_ms.store(now, Ordering::Relaxed);
        if attempt + 1 >= FAILING_AFTER {
            *self.failing.lock().expect("trouble lock") =
                Some(format!("{what}: {err} ({} attempts in a row)", attempt + 1));
        }
    }
}

/// Why one attempt at a range failed.
enum Attempt {
    TooLarge(Option<u64>),
    Retry(String),
    /// Bloom says logs exist but none came back; retried a bounded number of times.
    BloomMismatch(u64),
}

/// A [`BlockSource`] made trustworthy. Every method retries until it gets a consistent
/// answer: the indexer never skips a block, it waits.
pub struct Fetcher<S: ?Sized> {
    src: Arc<S>,
    contract: Address,
    cfg: FetchConfig,
    range: u64,
    trouble: Arc<NodeTrouble>,
}

impl<S: BlockSource + ?Sized> Fetcher<S> {
    /// A fetcher for `contract`'s logs.
    pub fn new(src: Arc<S>, contract: Address, cfg: FetchConfig) -> Self {
        let range = cfg.initial_range.clamp(1, cfg.max_range.max(1));
        Self {
            src,
            contract,
            cfg,
            range,
            trouble: Arc::default(),
        }
    }

    /// Reports retries to `trouble` (shared with the health endpoints).
    pub fn with_trouble(mut self, trouble: Arc<NodeTrouble>) -> Self {
        self.trouble = trouble;
        self
    }

    /// The current adaptive range (blocks per `eth_getLogs`).
    pub fn range(&self) -> u64 {
        self.range
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
        self.cfg
            .min_backoff
            .saturating_mul(factor)
            .min(self.cfg.max_backoff)
    }

    async fn retry_wait(&self, what: &'static str, attempt: u32, err: &str) {
        metrics::counter!("indexer_rpc_errors_total", "call" => what).increment(1);
        metrics::counter!("indexer_rpc_retries_total").increment(1);
        self.trouble.report(what, attempt, err);
        if attempt >= 3 {
            tracing::warn!(
                call = what,
                attempt,
                error = err,
                "rpc call failing, retrying"
            );
        } else {
            tracing::debug!(
                call = what,
                attempt,
                error = err,
                "rpc call failed, retrying"
            );
        }
        tokio::time::sleep(self.backoff(attempt)).await;
    }

    async fn timed<T>(
        &self,
        fut: impl Future<Output = Result<T, SourceError>>,
        on_timeout: SourceError,
    ) -> Result<T, SourceError> {
        timed(self.cfg.rpc_timeout, fut, on_timeout).await
    }

    /// The chain head.
    pub async fn head(&self) -> u64 {
        let mut attempt = 0;
        loop {
            let timeout = SourceError::Transient("timeout".into());
            match self.timed(self.src.head(), timeout).await {
                Ok(n) => return n,
                Err(e) => self.retry_wait("head", attempt, &e.to_string()).await,
            }
            attempt += 1;
        }
    }

    /// The node's finalized block, if it has the tag.
    pub async fn finalized(&self) -> Option<u64> {
        let mut attempt = 0;
        loop {
            let timeout = SourceError::Transient("timeout".into());
            match self.timed(self.src.finalized(), timeout).await {
                Ok(n) => return n,
                Err(e) => self.retry_wait("finalized", attempt, &e.to_string()).await,
            }
            attempt += 1;
        }
    }

    /// One header.
    pub async fn header(&self, number: u64) -> Header {
        let mut attempt = 0;
        loop {
            let timeout = SourceError::Transient("timeout".into());
            match self.timed(self.src.headers(number, number), timeout).await {
                Ok(mut h) if h.len() == 1 && h[0].number == number => return h.remove(0),
                Ok(_) => self.retry_wait("header", attempt, "wrong header").await,
                Err(e) => self.retry_wait("header", attempt, &e.to_string()).await,
            }
            attempt += 1;
        }
    }

    /// One header, or `None` once the node's head is below `number` (the chain got shorter
    /// since the caller read the head: a rollback, or a reorg to a shorter branch). The
    /// stream asks this for blocks it compares, so a vanished block makes it look at the
    /// head again instead of waiting forever for a block that may never come back.
    pub async fn header_if_exists(&self, number: u64) -> Option<Header> {
        let mut attempt = 0;
        loop {
            let timeout = SourceError::Transient("timeout".into());
            match self.timed(self.src.headers(number, number), timeout).await {
                Ok(mut h) if h.len() == 1 && h[0].number == number => return Some(h.remove(0)),
                Ok(_) => self.retry_wait("header", attempt, "wrong header").await,
                Err(e) => self.retry_wait("header", attempt, &e.to_string()).await,
            }
            if self.below_head(number).await {
                return None;
            }
            attempt += 1;
        }
    }

    /// Whether the node's head is now below `number` (an error reading it says no).
    async fn below_head(&self, number: u64) -> bool {
        let timeout = SourceError::Transient("timeout".into());
        matches!(self.timed(self.src.head(), timeout).await, Ok(h) if h < number)
    }

    /// Consecutive, verified blocks `from..=to` for some `to <= to_limit` (at least one block,
    /// or none when the chain got shorter than `from` meanwhile: look at the head again).
    /// The range adapts: it grows after a success and shrinks when the node refuses, down to
    /// a single block, which is then read through receipts if it is still too large.
    pub async fn fetch(&mut self, from: u64, to_limit: u64) -> Vec<Block> {
        assert!(
            from <= to_limit,
            "fetch of an empty range {from}..={to_limit}"
        );
        let mut attempt = 0u32;
        let mut bloom_misses = 0u32;
        let mut to = to_limit.min(from.saturating_add(self.range - 1));
        loop {
            match self.try_fetch(from, to).await {
                Ok(blocks) => {
                    let size = to - from + 1;
                    let logs: usize = blocks.iter().map(|b| b.logs.len()).sum();
                    // Grow only after a full-size success (a quiet tip must not inflate it)
                    // whose answer was well under the log cap (a dense range must not be
                    // asked for again at twice the size just to be refused).
                    if size >= self.range && logs < self.cfg.max_logs_per_response / 2 {
                        self.range = (self.range * 2).min(self.cfg.max_range.max(1));
                    }
                    metrics::gauge!("indexer_getlogs_range_blocks").set(self.range as f64);
                    return blocks;
                }
                Err(Attempt::TooLarge(suggested)) => {
                    metrics::counter!("indexer_rpc_errors_total", "call" => "logs_too_large")
                        .increment(1);
                    if from == to {
                        return self.fetch_single_block(from).await;
                    }
                    let new_to = match suggested {
                        Some(s) if s >= from && s < to => s,
                        _ => from + (to - from) / 2,
                    };
                    tracing::debug!(from, to, new_to, "shrinking eth_getLogs range");
                    to = new_to;
                    self.range = to - from + 1;
                    metrics::gauge!("indexer_getlogs_range_blocks").set(self.range as f64);
                }
                Err(Attempt::BloomMismatch(block)) => {
                    bloom_misses += 1;
                    metrics::counter!("indexer_bloom_retries_total").increment(1);
                    if bloom_misses > self.cfg.bloom_retries {
                        // Settle it through the receipts: up to the block before it now, the
                        // block itself alone (by receipts) on its own.
                        if block == from {
                            return self.fetch_single_block(from).await;
                        }
                        to = block - 1;
                        bloom_misses = 0;
                        continue;
                    }
                    let msg = format!("bloom of block {block} says the contract emitted, no logs");
                    self.retry_wait("logs", attempt, &msg).await;
                    attempt += 1;
                }
                Err(Attempt::Retry(msg)) => {
                    self.retry_wait("logs", attempt, &msg).await;
                    attempt += 1;
                    // Blocks of the range may have vanished (the chain got shorter since
                    // the caller read the head): never wait for them.
                    if self.below_head(from).await {
                        return Vec::new();
                    }
                }
            }
        }
    }

    /// One block, by receipts. It cannot be split: a block too large to read within
    /// `rpc_timeout` (a dense block on a busy node) gets twice the time on each retry, up to
    /// [`SINGLE_BLOCK_TIMEOUT_GROWTH`] times it, instead of timing out forever.
    async fn fetch_single_block(&self, number: u64) -> Vec<Block> {
        let mut attempt = 0;
        loop {
            let header = self.header(number).await;
            let timeout = SourceError::Transient("timeout".into());
            let limit = self
                .cfg
                .rpc_timeout
                .saturating_mul(1 << attempt.min(SINGLE_BLOCK_TIMEOUT_GROWTH.ilog2()));
            let logs = timed(limit, self.src.block_logs(number, header.hash), timeout).await;
            match logs {
                // Receipts are the authority: an empty answer here is the truth.
                Ok(logs) => match self.assemble(std::slice::from_ref(&header), logs, false) {
                    Ok(blocks) => return blocks,
                    Err(Attempt::Retry(m)) => self.retry_wait("block_logs", attempt, &m).await,
                    Err(_) => self.retry_wait("block_logs", attempt, "bad answer").await,
                },
                Err(e) => self.retry_wait("block_logs", attempt, &e.to_string()).await,
            }
            attempt += 1;
        }
    }

    async fn try_fetch(&self, from: u64, to: u64) -> Result<Vec<Block>, Attempt> {
        let too_large = SourceError::TooLarge { suggested_to: None };
        let logs = self
            .timed(self.src.logs(from, to), too_large)
            .await
            .map_err(|e| match e {
                SourceError::TooLarge { suggested_to } => Attempt::TooLarge(suggested_to),
                SourceError::Transient(m) => Attempt::Retry(m),
            })?;
        if logs.len() >= self.cfg.max_logs_per_response && to > from {
            // A provider cap reached exactly: the answer may be cut short.
            return Err(Attempt::TooLarge(None));
        }
        let timeout = SourceError::Transient("timeout".into());
        let headers = self
            .timed(self.src.headers(from, to), timeout)
            .await
            .map_err(|e| Attempt::Retry(format!("headers: {e}")))?;
        self.assemble(&headers, logs, true)
    }

    /// Checks an answer and groups the logs by block. Any inconsistency means the node
    /// answered from two different views of the chain (a reorg under us, a lagging replica
    /// behind a load balancer): retry rather than guess.
    fn assemble(
        &self,
        headers: &[Header],
        logs: Vec<RawLog>,
        check_bloom: bool,
    ) -> Result<Vec<Block>, Attempt> {
        let Some(first) = headers.first() else {
            return Err(Attempt::Retry("no headers".into()));
        };
        for (i, pair) in headers.windows(2).enumerate() {
            if pair[1].number != pair[0].number + 1 || pair[1].parent_hash != pair[0].hash {
                return Err(Attempt::Retry(format!(
                    "headers do not link at block {}",
                    first.number + i as u64 + 1
                )));
            }
        }
        let mut by_block: BTreeMap<u64, Vec<RawLog>> = BTreeMap::new();
        for log in logs {
            let idx = log.block_number.checked_sub(first.number);
            let header = idx.and_then(|i| headers.get(i as usize)).ok_or_else(|| {
                Attempt::Retry(format!(
                    "log of block {} outside the range",
                    log.block_number
                ))
            })?;
            if log.block_hash != header.hash {
                return Err(Attempt::Retry(format!(
                    "log of block {} has hash {}, header says {}",
                    log.block_number, log.block_hash, header.hash
                )));
            }
            if log.address != self.contract {
                return Err(Attempt::Retry(format!(
                    "log of another contract {}",
                    log.address
                )));
            }
            by_block.entry(log.block_number).or_default().push(log);
        }
        let mut blocks = Vec::with_capacity(headers.len());
        for h in headers {
            let mut logs = by_block.remove(&h.number).unwrap_or_default();
            logs.sort_by_key(|l| l.log_index);
            if logs.windows(2).any(|w| w[0].log_index == w[1].log_index) {
                return Err(Attempt::Retry(format!(
                    "duplicate log index in block {}",
                    h.number
                )));
            }
            if logs.is_empty()
                && check_bloom
                && h.logs_bloom
                    .contains_input(BloomInput::Raw(self.contract.as_slice()))
            {
                return Err(Attempt::BloomMismatch(h.number));
            }
            blocks.push(Block {
                number: h.number,
                hash: h.hash,
                parent_hash: h.parent_hash,
                timestamp: h.timestamp,
                logs,
            });
        }
        Ok(blocks)
    }
}

/// How many times `rpc_timeout` a single block's receipts may take, at most (a power of 2):
/// 4 keeps one call within the liveness bound (`ops::STALL`, 120 s) at the default 30 s.
const SINGLE_BLOCK_TIMEOUT_GROWTH: u32 = 4;

/// `fut`, or `on_timeout` once `limit` has passed.
async fn timed<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, SourceError>>,
    on_timeout: SourceError,
) -> Result<T, SourceError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(on_timeout),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use alloy::primitives::{B256, Bloom, Bytes, keccak256};
    use async_trait::async_trait;

    use super::*;

    const CONTRACT: Address = Address::repeat_byte(0xcc);
    /// Block holding more logs than any `eth_getLogs` answer may carry.
    const HUGE: u64 = 7;

    /// A node that refuses ranges over 5 blocks (suggesting 5), refuses block HUGE always,
    /// and serves a stale block hash on its first answer.
    struct Picky {
        stale_once: Mutex<bool>,
        calls: Mutex<Vec<(u64, u64)>>,
    }

    fn hash(n: u64) -> B256 {
        keccak256(n.to_be_bytes())
    }

    /// Headers of blocks `from..=to`, each the child of the one before.
    fn headers(from: u64, to: u64) -> Vec<Header> {
        (from..=to)
            .map(|n| Header {
                number: n,
                hash: hash(n),
                parent_hash: if n == 0 { B256::ZERO } else { hash(n - 1) },
                timestamp: n,
                logs_bloom: Bloom::ZERO,
            })
            .collect()
    }

    fn log(n: u64, i: u64) -> RawLog {
        RawLog {
            address: CONTRACT,
            block_number: n,
            block_hash: hash(n),
            tx_hash: B256::repeat_byte(1),
            tx_index: 0,
            log_index: i,
            topics: vec![B256::repeat_byte(2)],
            data: Bytes::new(),
        }
    }

    #[async_trait]
    impl BlockSource for Picky {
        async fn head(&self) -> Result<u64, SourceError> {
            Ok(20)
        }
        async fn finalized(&self) -> Result<Option<u64>, SourceError> {
            Ok(None)
        }
        async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError> {
            Ok(headers(from, to))
        }
        async fn logs(&self, from: u64, to: u64) -> Result<Vec<RawLog>, SourceError> {
            self.calls.lock().unwrap().push((from, to));
            if to - from + 1 > 5 {
                return Err(SourceError::TooLarge {
                    suggested_to: Some(from + 4),
                });
            }
            if (from..=to).contains(&HUGE) {
                return Err(SourceError::TooLarge { suggested_to: None });
            }
            let mut logs: Vec<RawLog> = (from..=to).map(|n| log(n, 0)).collect();
            let mut stale = self.stale_once.lock().unwrap();
            if *stale {
                *stale = false;
                logs[0].block_hash = B256::repeat_byte(0xde);
            }
            Ok(logs)
        }
        async fn block_logs(&self, number: u64, h: B256) -> Result<Vec<RawLog>, SourceError> {
            assert_eq!(h, hash(number));
            Ok((0..3).map(|i| log(number, i)).collect())
        }
    }

    fn fast() -> FetchConfig {
        FetchConfig {
            initial_range: 50,
            min_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
            ..FetchConfig::default()
        }
    }

    /// Logs per block of [`Dense`] below [`DENSE_UNTIL`] (one per block above it).
    const PER_DENSE_BLOCK: u64 = 20;
    const DENSE_UNTIL: u64 = 40;
    /// The log cap of the [`Dense`] tests: a node answers at most this many (silently cut
    /// short, as some providers do).
    const CAP: usize = 100;

    /// How many logs block `n` of [`Dense`] holds.
    fn dense_logs(n: u64) -> u64 {
        if n <= DENSE_UNTIL { PER_DENSE_BLOCK } else { 1 }
    }

    /// A node whose first blocks hold many logs each, then one log per block, and which cuts
    /// every `eth_getLogs` answer at [`CAP`] logs without saying so.
    struct Dense {
        calls: Mutex<Vec<(u64, u64)>>,
    }

    #[async_trait]
    impl BlockSource for Dense {
        async fn head(&self) -> Result<u64, SourceError> {
            Ok(200)
        }
        async fn finalized(&self) -> Result<Option<u64>, SourceError> {
            Ok(None)
        }
        async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError> {
            Ok(headers(from, to))
        }
        async fn logs(&self, from: u64, to: u64) -> Result<Vec<RawLog>, SourceError> {
            self.calls.lock().unwrap().push((from, to));
            Ok((from..=to)
                .flat_map(|n| (0..dense_logs(n)).map(move |i| log(n, i)))
                .take(CAP)
                .collect())
        }
        async fn block_logs(&self, _: u64, _: B256) -> Result<Vec<RawLog>, SourceError> {
            unreachable!("no single block is over the cap")
        }
    }

    /// The range adapts to events as well as blocks: an answer that reaches the log cap
    /// counts as cut short (the range halves until an answer fits), the range does not grow
    /// while answers carry half the cap or more, and it grows back once they are sparse.
    #[tokio::test]
    async fn the_range_halves_on_answers_at_the_log_cap_and_grows_only_when_they_are_sparse() {
        let src = Arc::new(Dense {
            calls: Mutex::new(vec![]),
        });
        let cfg = FetchConfig {
            initial_range: 16,
            max_range: 64,
            max_logs_per_response: CAP,
            ..fast()
        };
        let mut f = Fetcher::new(src.clone(), CONTRACT, cfg);
        let (mut got, mut next, mut ranges) = (vec![], 1, vec![]);
        while next <= 200 {
            let blocks = f.fetch(next, 200).await;
            next = blocks.last().unwrap().number + 1;
            ranges.push((blocks.first().unwrap().number, f.range()));
            got.extend(blocks);
        }
        // Every log of every block, once: no answer cut at the cap was taken for whole.
        let logs: Vec<(u64, u64)> = got
            .iter()
            .flat_map(|b| b.logs.iter().map(|l| (b.number, l.log_index)))
            .collect();
        let want: Vec<(u64, u64)> = (1..=200u64)
            .flat_map(|n| (0..dense_logs(n)).map(move |i| (n, i)))
            .collect();
        assert_eq!(logs, want);
        let calls = src.calls.lock().unwrap().clone();
        // 16 blocks (320 logs) and 8 (160) reach the cap; 4 blocks (80 logs) fit.
        assert_eq!(calls[..3], [(1, 16), (1, 8), (1, 4)]);
        // Over the dense blocks the range stays at 4: 80 logs is over half the cap.
        let dense: Vec<u64> = ranges
            .iter()
            .filter(|(first, _)| *first <= DENSE_UNTIL)
            .map(|(_, r)| *r)
            .collect();
        assert!(dense.iter().all(|r| *r == 4), "{dense:?}");
        // Past them it doubles after each sparse answer, up to the maximum.
        let sparse: Vec<u64> = ranges
            .iter()
            .filter(|(first, _)| *first > DENSE_UNTIL)
            .map(|(_, r)| *r)
            .collect();
        assert_eq!(sparse[..4], [8, 16, 32, 64], "{ranges:?}");
    }

    /// A node that takes `slow` to answer anything about block [`HUGE`] (a dense block on a
    /// busy node), and answers the rest at once.
    struct Slow {
        slow: Duration,
    }

    #[async_trait]
    impl BlockSource for Slow {
        async fn head(&self) -> Result<u64, SourceError> {
            Ok(20)
        }
        async fn finalized(&self) -> Result<Option<u64>, SourceError> {
            Ok(None)
        }
        async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError> {
            Ok(headers(from, to))
        }
        async fn logs(&self, from: u64, to: u64) -> Result<Vec<RawLog>, SourceError> {
            if (from..=to).contains(&HUGE) {
                tokio::time::sleep(self.slow).await;
            }
            Ok((from..=to).map(|n| log(n, 0)).collect())
        }
        async fn block_logs(&self, number: u64, _: B256) -> Result<Vec<RawLog>, SourceError> {
            tokio::time::sleep(self.slow).await;
            Ok((0..3).map(|i| log(number, i)).collect())
        }
    }

    /// A single block cannot be split: one whose logs take longer than the RPC timeout to
    /// read (a dense block on a busy node) gets more time on each retry and is read, instead
    /// of timing out for ever (the indexer stuck at that block).
    #[tokio::test(start_paused = true)]
    async fn a_single_block_slower_than_the_rpc_timeout_is_read_with_a_growing_timeout() {
        let src = Arc::new(Slow {
            slow: Duration::from_secs(100),
        });
        let cfg = FetchConfig {
            rpc_timeout: Duration::from_secs(30),
            ..fast()
        };
        let mut f = Fetcher::new(src, CONTRACT, cfg);
        let blocks = tokio::time::timeout(Duration::from_secs(3_600), f.fetch(HUGE, HUGE))
            .await
            .expect("the block is read in the end");
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].logs.len(), 3);
    }

    #[tokio::test]
    async fn range_shrinks_to_the_suggestion_and_a_huge_block_is_read_by_receipts() {
        let src = Arc::new(Picky {
            stale_once: Mutex::new(true),
            calls: Mutex::new(vec![]),
        });
        let mut f = Fetcher::new(src.clone(), CONTRACT, fast());
        let mut got = vec![];
        let mut next = 1;
        while next <= 12 {
            let blocks = f.fetch(next, 12).await;
            next = blocks.last().unwrap().number + 1;
            got.extend(blocks);
        }
        let numbers: Vec<u64> = got.iter().map(|b| b.number).collect();
        assert_eq!(
            numbers,
            (1..=12).collect::<Vec<_>>(),
            "every block once, in order"
        );
        assert!(
            got.iter()
                .all(|b| b.logs.iter().all(|l| l.block_hash == b.hash))
        );
        let huge = &got[(HUGE - 1) as usize];
        assert_eq!(
            huge.logs.len(),
            3,
            "the huge block came whole through receipts"
        );
        let calls = src.calls.lock().unwrap().clone();
        assert_eq!(calls[0], (1, 12));
        assert_eq!(
            calls[1],
            (1, 5),
            "the provider's suggested range is honoured"
        );
        assert_eq!(
            calls[2],
            (1, 5),
            "a stale block hash is retried, not accepted"
        );
    }
}
