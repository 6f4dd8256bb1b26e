//! An in-process chain for the seeded simulation: it generates valid SubscriptionManager logs
//! from a small model of the contract, reorgs on demand, and, as a [`BlockSource`], answers
//! like a bad RPC node would (errors, "too many results", truncated and empty answers, stale
//! block hashes, a lagging head), all decided by a seeded RNG.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use alloy::primitives::{Address, B256, Bloom, BloomInput, U256, keccak256};
use alloy::sol_types::SolEvent;
use async_trait::async_trait;
use chainsub_abi::SubscriptionManager as SM;
use chainsub_indexer::block::{Header, RawLog};
use chainsub_indexer::source::{BlockSource, SourceError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Fault probabilities per call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Faults {
    pub error: f64,
    pub too_large: f64,
    pub truncate: f64,
    pub empty: f64,
    pub stale_hash: f64,
    pub lagging_head: f64,
    /// Ranges longer than this always get "too many results" (with a suggested range).
    pub max_range: u64,
}

impl Faults {
    /// A node that always answers right.
    pub(crate) fn none() -> Self {
        Self {
            error: 0.0,
            too_large: 0.0,
            truncate: 0.0,
            empty: 0.0,
            stale_hash: 0.0,
            lagging_head: 0.0,
            max_range: u64::MAX,
        }
    }

    /// A hostile node.
    pub(crate) fn hostile() -> Self {
        Self {
            error: 0.08,
            too_large: 0.05,
            truncate: 0.08,
            empty: 0.05,
            stale_hash: 0.04,
            lagging_head: 0.1,
            max_range: 40,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum SubStatus {
    Active,
    PastDue(u8),
    Done,
}

#[derive(Debug, Clone)]
struct Sub {
    id: u64,
    plan: u64,
    merchant: Address,
    subscriber: Address,
    period: u32,
    start: u64,
    end: u64,
    cape: bool,
    status: SubStatus,
}

/// The contract model's state; cloned per block so a reorg can rewind it.
#[derive(Debug, Clone, Default)]
struct Model {
    plans: Vec<(u64, Address)>,
    subs: Vec<Sub>,
}

#[derive(Debug, Clone)]
struct FakeBlock {
    header: Header,
    logs: Vec<RawLog>,
    model: Model,
}

struct Inner {
    blocks: Vec<FakeBlock>,
    gen_rng: StdRng,
    fault_rng: StdRng,
    branch: u64,
}

/// The fake chain.
pub(crate) struct FakeChain {
    inner: Mutex<Inner>,
    contract: Address,
    faults: Faults,
    faulty: AtomicBool,
}

const T0: u64 = 1_767_225_600;
const MONTH: u64 = 30 * 86_400;

fn addr(n: u64) -> Address {
    Address::left_padding_from(&n.to_be_bytes())
}

fn u(v: u64) -> U256 {
    U256::from(v)
}

impl FakeChain {
    /// A chain of `blocks` blocks (genesis included) generated from `seed`.
    pub(crate) fn new(seed: u64, contract: Address, blocks: u64, faults: Faults) -> Self {
        let genesis = FakeBlock {
            header: Header {
                number: 0,
                hash: keccak256(b"genesis"),
                parent_hash: B256::ZERO,
                timestamp: T0,
                logs_bloom: Bloom::ZERO,
            },
            logs: vec![],
            model: Model::default(),
        };
        let chain = Self {
            inner: Mutex::new(Inner {
                blocks: vec![genesis],
                gen_rng: StdRng::seed_from_u64(seed),
                fault_rng: StdRng::seed_from_u64(seed ^ 0x5eed),
                branch: 0,
            }),
            contract,
            faults,
            faulty: AtomicBool::new(true),
        };
        chain.grow(blocks.saturating_sub(1));
        chain
    }

    /// Turns the node's misbehaviour on or off (off: a perfect node, for the ground truth).
    pub(crate) fn set_faulty(&self, on: bool) {
        self.faulty.store(on, Ordering::SeqCst);
    }

    /// The tip (number, hash).
    pub(crate) fn tip(&self) -> (u64, B256) {
        let inner = self.inner.lock().unwrap();
        let b = inner.blocks.last().unwrap();
        (b.header.number, b.header.hash)
    }

    /// Every log of the canonical chain: (block number, block hash, tx hash, log index).
    pub(crate) fn canonical_logs(&self) -> Vec<(u64, B256, B256, u64)> {
        let inner = self.inner.lock().unwrap();
        inner
            .blocks
            .iter()
            .flat_map(|b| {
                b.logs
                    .iter()
                    .map(|l| (l.block_number, l.block_hash, l.tx_hash, l.log_index))
            })
            .collect()
    }

    /// Mines `n` new blocks.
    pub(crate) fn grow(&self, n: u64) {
        let mut inner = self.inner.lock().unwrap();
        for _ in 0..n {
            let block = self.next_block(&mut inner);
            inner.blocks.push(block);
        }
    }

    /// Replaces the last `depth` blocks with `depth + extra` new ones.
    pub(crate) fn reorg(&self, depth: u64, extra: u64) {
        let mut inner = self.inner.lock().unwrap();
        let keep = inner.blocks.len().saturating_sub(depth as usize).max(1);
        inner.blocks.truncate(keep);
        inner.branch += 1;
        for _ in 0..depth + extra {
            let block = self.next_block(&mut inner);
            inner.blocks.push(block);
        }
    }

    fn next_block(&self, inner: &mut Inner) -> FakeBlock {
        let parent = inner.blocks.last().unwrap().clone();
        let number = parent.header.number + 1;
        let timestamp = parent.header.timestamp + 12 + inner.gen_rng.random_range(0..86_400 * 3);
        let mut salt = [0u8; 80];
        salt[..32].copy_from_slice(parent.header.hash.as_slice());
        salt[32..40].copy_from_slice(&number.to_be_bytes());
        salt[40..48].copy_from_slice(&inner.branch.to_be_bytes());
        let hash = keccak256(salt);
        let mut model = parent.model.clone();
        let mut events: Vec<alloy::primitives::LogData> = Vec::new();
        let actions = inner.gen_rng.random_range(0..4);
        for _ in 0..actions {
            act(&mut inner.gen_rng, &mut model, timestamp, &mut events);
        }
        let mut bloom = Bloom::ZERO;
        let logs: Vec<RawLog> = events
            .into_iter()
            .enumerate()
            .map(|(i, data)| {
                bloom.accrue(BloomInput::Raw(self.contract.as_slice()));
                for t in data.topics() {
                    bloom.accrue(BloomInput::Raw(t.as_slice()));
                }
                let mut tx = [0u8; 40];
                tx[..32].copy_from_slice(hash.as_slice());
                tx[32..].copy_from_slice(&(i as u64 / 2).to_be_bytes());
                RawLog {
                    address: self.contract,
                    block_number: number,
                    block_hash: hash,
                    tx_hash: keccak256(tx),
                    tx_index: i as u64 / 2,
                    // Other contracts' logs interleave on a real chain: leave gaps.
                    log_index: i as u64 * 2 + 1,
                    topics: data.topics().to_vec(),
                    data: data.data.clone(),
                }
            })
            .collect();
        FakeBlock {
            header: Header {
                number,
                hash,
                parent_hash: parent.header.hash,
                timestamp,
                logs_bloom: bloom,
            },
            logs,
            model,
        }
    }

    fn fault(&self, p: f64) -> bool {
        if !self.faulty.load(Ordering::SeqCst) {
            return false;
        }
        self.inner.lock().unwrap().fault_rng.random_bool(p)
    }
}

/// One random contract action, as the contract would log it.
fn act(rng: &mut StdRng, m: &mut Model, now: u64, out: &mut Vec<alloy::primitives::LogData>) {
    let live: Vec<usize> = (0..m.subs.len())
        .filter(|&i| m.subs[i].status != SubStatus::Done)
        .collect();
    let roll = rng.random_range(0..10);
    if m.plans.is_empty() || roll == 0 {
        let id = m.plans.len() as u64 + 1;
        let merchant = addr(0x1000 + rng.random_range(0..3));
        m.plans.push((id, merchant));
        out.push(
            SM::PlanCreated {
                planId: u(id),
                merchant,
                planRef: keccak256(id.to_be_bytes()),
                amount: u(1_000_000 * id),
                createdBy: merchant,
            }
            .encode_log_data(),
        );
        return;
    }
    if live.is_empty() || roll <= 3 {
        let (plan, merchant) = m.plans[rng.random_range(0..m.plans.len())];
        let id = m.subs.len() as u64 + 1;
        let subscriber = addr(0x2000 + rng.random_range(0..50));
        let sub = Sub {
            id,
            plan,
            merchant,
            subscriber,
            period: 1,
            start: now,
            end: now + MONTH,
            cape: false,
            status: SubStatus::Active,
        };
        let cref = if rng.random_bool(0.5) {
            B256::ZERO
        } else {
            keccak256(id.to_be_bytes())
        };
        out.push(
            SM::SubscriptionCreated {
                subscriptionId: u(id),
                merchant,
                subscriber,
                planId: u(plan),
                customerRef: cref,
                amount: u(1_000_000 * plan),
                periodStart: now,
                periodEnd: now + MONTH,
                trialEnd: 0,
            }
            .encode_log_data(),
        );
        out.push(charged(&sub, 1));
        m.subs.push(sub);
        return;
    }
    let i = live[rng.random_range(0..live.len())];
    let s = &mut m.subs[i];
    match roll {
        4..=6 => {
            if s.cape {
                s.status = SubStatus::Done;
                out.push(ended(s, 2));
            } else if rng.random_bool(0.7) {
                s.period += 1;
                s.start = s.end;
                s.end += MONTH;
                let attempt = match s.status {
                    SubStatus::PastDue(n) => n + 1,
                    _ => 1,
                };
                s.status = SubStatus::Active;
                out.push(charged(s, attempt));
            } else {
                let attempt = match s.status {
                    SubStatus::PastDue(n) => n + 1,
                    _ => 1,
                };
                let exhausted = attempt >= 3;
                out.push(
                    SM::PaymentFailed {
                        subscriptionId: u(s.id),
                        merchant: s.merchant,
                        subscriber: s.subscriber,
                        planId: u(s.plan),
                        amount: u(1_000_000 * s.plan),
                        period: s.period + 1,
                        attempt,
                        reason: 2,
                        nextRetryAt: if exhausted { 0 } else { now + 86_400 },
                    }
                    .encode_log_data(),
                );
                s.status = SubStatus::PastDue(attempt);
                if exhausted {
                    s.status = SubStatus::Done;
                    out.push(ended(s, 1));
                }
            }
        }
        7 | 8 if !s.cape => {
            s.cape = true;
            out.push(
                SM::CancelAtPeriodEndSet {
                    subscriptionId: u(s.id),
                    merchant: s.merchant,
                    subscriber: s.subscriber,
                    planId: u(s.plan),
                    by: s.subscriber,
                    periodEnd: s.end,
                }
                .encode_log_data(),
            );
        }
        _ => {
            s.status = SubStatus::Done;
            out.push(
                SM::SubscriptionCancelled {
                    subscriptionId: u(s.id),
                    merchant: s.merchant,
                    subscriber: s.subscriber,
                    planId: u(s.plan),
                    by: s.merchant,
                }
                .encode_log_data(),
            );
        }
    }
}

fn charged(s: &Sub, attempt: u8) -> alloy::primitives::LogData {
    SM::SubscriptionCharged {
        subscriptionId: u(s.id),
        merchant: s.merchant,
        subscriber: s.subscriber,
        planId: u(s.plan),
        amount: u(1_000_000 * s.plan),
        period: s.period,
        periodStart: s.start,
        periodEnd: s.end,
        attempt,
    }
    .encode_log_data()
}

fn ended(s: &Sub, reason: u8) -> alloy::primitives::LogData {
    SM::SubscriptionEnded {
        subscriptionId: u(s.id),
        merchant: s.merchant,
        subscriber: s.subscriber,
        planId: u(s.plan),
        reason,
    }
    .encode_log_data()
}

#[async_trait]
impl BlockSource for FakeChain {
    async fn head(&self) -> Result<u64, SourceError> {
        if self.fault(self.faults.error) {
            return Err(SourceError::Transient("injected: head error".into()));
        }
        let tip = self.tip().0;
        if self.fault(self.faults.lagging_head) {
            return Ok(tip.saturating_sub(3));
        }
        Ok(tip)
    }

    async fn finalized(&self) -> Result<Option<u64>, SourceError> {
        Ok(None)
    }

    async fn headers(&self, from: u64, to: u64) -> Result<Vec<Header>, SourceError> {
        if self.fault(self.faults.error) {
            return Err(SourceError::Transient("injected: headers error".into()));
        }
        let inner = self.inner.lock().unwrap();
        (from..=to)
            .map(|n| {
                inner
                    .blocks
                    .get(n as usize)
                    .map(|b| b.header.clone())
                    .ok_or_else(|| SourceError::Transient(format!("block {n} not found")))
            })
            .collect()
    }

    async fn logs(&self, from: u64, to: u64) -> Result<Vec<RawLog>, SourceError> {
        if self.fault(self.faults.error) {
            return Err(SourceError::Transient("injected: logs error".into()));
        }
        if to - from + 1 > self.faults.max_range && self.faulty.load(Ordering::SeqCst) {
            return Err(SourceError::TooLarge {
                suggested_to: Some(from + self.faults.max_range - 1),
            });
        }
        if to > from && self.fault(self.faults.too_large) {
            return Err(SourceError::TooLarge { suggested_to: None });
        }
        let mut logs: Vec<RawLog> = {
            let inner = self.inner.lock().unwrap();
            let end = (to as usize + 1).min(inner.blocks.len());
            inner.blocks[(from as usize).min(end)..end]
                .iter()
                .flat_map(|b| b.logs.clone())
                .collect()
        };
        if self.fault(self.faults.empty) {
            return Ok(vec![]);
        }
        if !logs.is_empty() && self.fault(self.faults.truncate) {
            // Cut at a block boundary, as a node hitting a size limit mid-answer would.
            let last_block = logs.last().unwrap().block_number;
            logs.retain(|l| l.block_number < last_block);
        }
        if !logs.is_empty() && self.fault(self.faults.stale_hash) {
            logs[0].block_hash = keccak256(b"orphaned branch");
        }
        Ok(logs)
    }

    async fn block_logs(&self, number: u64, hash: B256) -> Result<Vec<RawLog>, SourceError> {
        if self.fault(self.faults.error) {
            return Err(SourceError::Transient("injected: receipts error".into()));
        }
        let inner = self.inner.lock().unwrap();
        match inner.blocks.get(number as usize) {
            Some(b) if b.header.hash == hash => Ok(b.logs.clone()),
            _ => Err(SourceError::Transient(format!("block {hash} unknown"))),
        }
    }
}
