//! `indexer verify --from N --to M`: recomputes from the chain every row the API can serve for
//! blocks `N..=M` and compares it with the database. The reconciliation team's tool; it writes
//! nothing.
//!
//! What it checks, each difference reported by table and key:
//! - `chain_events`: every log of the contract in the range is stored, with the same columns,
//!   and nothing else is; each subscription event's `snapshot` equals the subscription folded
//!   from its events (the same [`fold`] the sink runs; events before `N` are taken from the
//!   database, so verify from the start block to check everything);
//! - `ledger_entries`: one per charge and failed charge, with its amount, period, times,
//!   attempt and reason;
//! - `chain_plans`: every plan created or deactivated in the range, as its logs say;
//! - `subscriptions`: the row of every subscription with events in the range (when it has none
//!   after `M`) equals the fold;
//! - the contract's own state at block `M` (`getSubscription`, `getPlan` by `eth_call`) for every
//!   subscription and plan touched, against the fold and the stored plan;
//! - `webhook_outbox`: one row for each lifecycle event with `CONFIRMATIONS` (none before),
//!   naming the event's chain, subscription and merchant (its delivery order and its merchant's
//!   queue), and no row for an event the index does not hold;
//! - rows above the chain head, and a cursor whose block is not on the chain;
//! - over the whole index, whatever the range: ledger entries, plans and subscriptions that
//!   name an event the index does not hold (no foreign key keeps those links since migration
//!   0022; every other check finds rows through their events, so it would not see them).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use alloy::eips::BlockId;
use alloy::primitives::{Address, B256, U256};
use alloy::providers::DynProvider;
use chainsub_abi::{ContractEvent, SubscriptionManager};
use chainsub_core::{SubscriptionSnapshot, SubscriptionState, SubscriptionStatus};
use chainsub_store::index::{self as store, EventKey, NewLedgerEntry, StoredEvent};
use serde::Serialize;
use tokio_postgres::Client;

use crate::Result;
use crate::fold::{self, EventCtx};
use crate::map::{self, MappedEvent, onchain_plan, onchain_subscription};
use crate::source::{BlockSource, FetchConfig, Fetcher};

/// One difference between the chain and the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub table: &'static str,
    pub key: String,
    pub what: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.table, self.key, self.what)
    }
}

/// What verify needs to know about the deployment.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub chain_id: chainsub_core::ChainId,
    pub contract: Address,
    /// The indexer's CONFIRMATIONS: which events must have an outbox row.
    pub confirmations: u64,
}

fn key_text((block, tx, log): &EventKey) -> String {
    format!("block {block} tx {tx} log {log}")
}

/// The findings so far.
#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, table: &'static str, key: impl Into<String>, what: impl Into<String>) {
        self.0.push(Finding {
            table,
            key: key.into(),
            what: what.into(),
        });
    }
}

/// Compares blocks `from..=to` of the chain with the database. `contract_reads` is the node
/// to `eth_call` for the contract's state at `to` (`None` skips those checks).
pub async fn verify<S: BlockSource + ?Sized>(
    target: Target,
    fetch: FetchConfig,
    source: Arc<S>,
    contract_reads: Option<&DynProvider>,
    client: &Client,
    from: u64,
    to: u64,
) -> Result<Vec<Finding>> {
    let chain_id = target.chain_id;
    let mut fetcher = Fetcher::new(source, target.contract, fetch);
    let mut out = Findings::default();
    let head = fetcher.head().await;

    // Nothing may stand above the chain: not the cursor, not a row.
    let (cursor, _) = store::load_cursor(client, chain_id).await?;
    if cursor.number > head {
        out.add(
            "indexer_cursor",
            format!("chain {chain_id}"),
            format!("at block {} above the chain head {head}", cursor.number),
        );
    } else {
        match fetcher.header_if_exists(cursor.number).await {
            Some(h) if h.hash == cursor.hash => {}
            Some(h) => out.add(
                "indexer_cursor",
                format!("chain {chain_id}"),
                format!(
                    "block {} is {} in the index, {} on the chain: the index is on a dead branch",
                    cursor.number, cursor.hash, h.hash
                ),
            ),
            None => out.add(
                "indexer_cursor",
                format!("chain {chain_id}"),
                format!("block {} is not on the chain", cursor.number),
            ),
        }
    }
    if let Some(top) = store::highest_event_block(client, chain_id).await?
        && top > head
    {
        out.add(
            "chain_events",
            format!("above block {head}"),
            format!("events up to block {top} above the chain head {head}"),
        );
    }
    let to = to.min(head);

    // The chain's logs in the range, mapped as the sink maps them.
    let mut mapped: Vec<MappedEvent> = Vec::new();
    let mut next = from;
    while next <= to {
        let blocks = fetcher.fetch(next, to).await;
        for b in &blocks {
            mapped.extend(map::map_block(target.chain_id.get(), b)?);
        }
        next = blocks.last().map(|b| b.number + 1).unwrap_or(to + 1);
    }
    let key_of = |e: &MappedEvent| (e.block_number, e.tx_hash, e.log_index);

    // chain_events, column by column.
    let db: BTreeMap<EventKey, StoredEvent> = store::events_in_range(client, chain_id, from, to)
        .await?
        .into_iter()
        .map(|r| ((r.block_number, r.tx_hash, r.log_index), r))
        .collect();
    let db_ids: HashMap<EventKey, i64> = db.iter().map(|(k, r)| (*k, r.id)).collect();
    for e in &mapped {
        let k = key_of(e);
        match db.get(&k) {
            None => out.add("chain_events", key_text(&k), "missing"),
            Some(have) => {
                let cols = diff_columns(&expected(target.contract, e), have);
                if !cols.is_empty() {
                    out.add(
                        "chain_events",
                        key_text(&k),
                        format!("differs ({})", cols.join(", ")),
                    );
                }
            }
        }
    }
    let on_chain: BTreeSet<EventKey> = mapped.iter().map(key_of).collect();
    for k in db.keys().filter(|k| !on_chain.contains(k)) {
        out.add("chain_events", key_text(k), "extra: not on the chain");
    }

    ledger(&mut out, client, chain_id, &mapped, &db_ids, from, to).await?;
    plans(
        &mut out,
        client,
        chain_id,
        &mapped,
        contract_reads,
        target.contract,
        to,
    )
    .await?;
    subscriptions(
        &mut out,
        client,
        target,
        &mapped,
        &db,
        &db_ids,
        contract_reads,
        from,
        to,
    )
    .await?;

    // Outbox: exactly the confirmed lifecycle events, and nothing for events we do not hold.
    let confirmed_upto = (cursor.number + 1).checked_sub(target.confirmations.max(1));
    let outbox = store::outbox_in_range(client, chain_id, from, to).await?;
    for e in mapped.iter().filter(|e| e.kind.is_some()) {
        let want = i64::from(confirmed_upto.is_some_and(|u| e.block_number <= u));
        let rows = outbox.get(&e.public_id).map_or(&[][..], Vec::as_slice);
        let have = rows.len() as i64;
        let expected = store::StoredDelivery {
            event_id: db_ids.get(&key_of(e)).copied(),
            chain_id: Some(chain_id),
            subscription_id: e.subscription_id,
            merchant_wallet: e.merchant.map(|m| m.to_vec()).unwrap_or_default(),
        };
        for row in rows.iter().filter(|r| **r != expected) {
            out.add(
                "webhook_outbox",
                e.public_id.clone(),
                format!("row differs (db {row:?}, chain {expected:?})"),
            );
        }
        if have != want {
            out.add(
                "webhook_outbox",
                e.public_id.clone(),
                format!(
                    "{have} row(s) for a {} event; expected {want}",
                    if want == 1 {
                        "confirmed"
                    } else {
                        "not yet confirmed"
                    }
                ),
            );
        }
    }
    // Rows that name an event the index does not hold (a reorg's undo that left them, or a
    // hand edit).
    for (table, key, column, event) in store::dangling_event_links(client, chain_id).await? {
        out.add(
            table,
            key,
            format!("{column} names event {event}, which the index does not hold"),
        );
    }
    // The revenue per month the ledger's triggers keep, against the ledger itself.
    for (wallet, month, stored, fresh) in store::revenue_months_drift(client, chain_id).await? {
        out.add(
            "revenue_months",
            format!(
                "merchant 0x{} {}",
                hex::encode(wallet),
                month.format("%Y-%m")
            ),
            format!("charges/prorations/refunds/entries {stored}, the ledger sums to {fresh}"),
        );
    }
    // The subscriptions' counts their triggers keep, against the subscriptions.
    for (wallet, bucket, stored, fresh) in
        store::subscription_tallies_drift(client, chain_id).await?
    {
        out.add(
            "subscription_tallies",
            format!("merchant 0x{} {bucket}", hex::encode(wallet)),
            format!("subscriptions/amount/due_amount {stored}, the subscriptions count {fresh}"),
        );
    }
    // The subscriptions' moves between states per day, against the events that make them.
    for (wallet, key, stored, fresh) in store::state_moves_drift(client, chain_id).await? {
        out.add(
            "subscription_state_moves",
            format!("merchant 0x{} {key}", hex::encode(wallet)),
            format!("subscriptions {stored}, the events move {fresh}"),
        );
    }
    for (id, event, status, row) in store::orphan_outbox(client).await? {
        let row = row.map_or("no row id".to_string(), |n| format!("row id {n}"));
        out.add(
            "webhook_outbox",
            format!("{id}"),
            format!(
                "row ({status}) for event {event} ({row}), which the index does not hold under that id"
            ),
        );
    }
    for (id, outbox) in store::orphan_attempts(client).await? {
        out.add(
            "webhook_attempts",
            format!("{id}"),
            format!("names outbox row {outbox}, which does not exist"),
        );
    }
    Ok(out.0)
}

/// The row the chain says `chain_events` should hold for `e`.
fn expected(contract: Address, e: &MappedEvent) -> StoredEvent {
    StoredEvent {
        id: 0,
        block_number: e.block_number,
        tx_hash: e.tx_hash,
        log_index: e.log_index,
        public_id: e.public_id.clone(),
        contract: contract.to_vec(),
        block_hash: e.block_hash.to_vec(),
        tx_index: e.tx_index as i64,
        name: e.name.to_string(),
        kind: e.kind.map(|k| k.as_str().to_string()),
        merchant: e.merchant.map(|m| m.to_vec()),
        subscription_id: e.subscription_id,
        plan_id: e.plan_id,
        topics: e.topics.iter().map(|t| t.to_vec()).collect(),
        data: e.data.to_vec(),
        fields: Some(e.fields),
        snapshot: Ok(None),
        sequence: None,
    }
}

fn diff_columns(a: &StoredEvent, b: &StoredEvent) -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! cmp {
        ($($f:ident),*) => { $( if a.$f != b.$f { out.push(stringify!($f)); } )* };
    }
    cmp!(
        public_id,
        contract,
        block_hash,
        tx_index,
        name,
        kind,
        merchant,
        subscription_id,
        plan_id,
        topics,
        data
    );
    let (Some(a), Some(b)) = (&a.fields, &b.fields) else {
        if a.fields != b.fields {
            out.push("log_* (a stored value out of its field's range)");
        }
        return out;
    };
    macro_rules! field {
        ($($f:ident => $col:literal),*) => { $( if a.$f != b.$f { out.push($col); } )* };
    }
    field!(
        amount => "log_amount",
        subscriber => "log_subscriber",
        period => "log_period",
        attempt => "log_attempt",
        reason => "log_reason",
        next_retry_at => "log_next_retry_at"
    );
    out
}

async fn ledger(
    out: &mut Findings,
    client: &Client,
    chain_id: chainsub_core::ChainId,
    mapped: &[MappedEvent],
    db_ids: &HashMap<EventKey, i64>,
    from: u64,
    to: u64,
) -> Result<()> {
    let mut db: HashMap<EventKey, NewLedgerEntry> =
        store::ledger_in_range(client, chain_id, from, to)
            .await?
            .into_iter()
            .collect();
    for e in mapped {
        let k = (e.block_number, e.tx_hash, e.log_index);
        let id = db_ids.get(&k).copied().unwrap_or(0);
        let Some(want) = crate::sink::ledger_entry(e, id)? else {
            continue;
        };
        match db.remove(&k) {
            None => out.add("ledger_entries", key_text(&k), "missing"),
            Some(have) => {
                let mut cols = Vec::new();
                macro_rules! cmp {
                    ($($f:ident),*) => { $( if want.$f != have.$f { cols.push(format!("{} (db {:?}, chain {:?})", stringify!($f), have.$f, want.$f)); } )* };
                }
                cmp!(
                    subscription_id,
                    kind,
                    amount,
                    period,
                    period_start,
                    period_end,
                    attempt,
                    failure_reason,
                    block_time
                );
                if !cols.is_empty() {
                    out.add(
                        "ledger_entries",
                        key_text(&k),
                        format!("differs: {}", cols.join(", ")),
                    );
                }
            }
        }
    }
    for k in db.keys() {
        out.add(
            "ledger_entries",
            key_text(k),
            "extra: no charge or failed charge on the chain there",
        );
    }
    Ok(())
}

/// Plans created or deactivated in the range, and the contract's view of them (and of the
/// plans the range's subscriptions belong to).
async fn plans(
    out: &mut Findings,
    client: &Client,
    chain_id: chainsub_core::ChainId,
    mapped: &[MappedEvent],
    contract_reads: Option<&DynProvider>,
    contract: Address,
    to: u64,
) -> Result<()> {
    let mut created = BTreeMap::new();
    let mut deactivated = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for e in mapped {
        match &e.event {
            Some(ContractEvent::PlanCreated(p)) => {
                let id = onchain_plan(p.planId)?.db();
                created.insert(id, (p.clone(), (e.block_number, e.tx_hash, e.log_index)));
                ids.insert(id);
            }
            Some(ContractEvent::PlanDeactivated(d)) => {
                let id = onchain_plan(d.planId)?.db();
                deactivated.insert(id, e.block_number);
                ids.insert(id);
            }
            _ => {
                if let Some(p) = e.plan_id {
                    ids.insert(p);
                }
            }
        }
    }
    let ids_vec: Vec<i64> = ids.iter().copied().collect();
    let stored: HashMap<i64, store::StoredPlan> = store::plans(client, chain_id, &ids_vec)
        .await?
        .into_iter()
        .map(|p| (p.plan.onchain_id, p))
        .collect();
    for (id, (p, at)) in &created {
        let key = format!("plan {id}");
        let Some(have) = stored.get(id) else {
            out.add("chain_plans", key, "missing");
            continue;
        };
        let mut cols = Vec::new();
        differ(
            &mut cols,
            "merchant_wallet",
            ("db", have.plan.merchant),
            ("chain", p.merchant),
        );
        differ(
            &mut cols,
            "plan_ref",
            ("db", have.plan.plan_ref),
            ("chain", p.planRef),
        );
        differ(
            &mut cols,
            "amount",
            ("db", have.plan.amount),
            ("chain", p.amount),
        );
        differ(
            &mut cols,
            "created_by",
            ("db", have.plan.created_by),
            ("chain", p.createdBy),
        );
        if have.created_at != *at {
            cols.push(format!(
                "event_id (created at {}, chain {})",
                key_text(&have.created_at),
                key_text(at)
            ));
        }
        if !cols.is_empty() {
            out.add("chain_plans", key, format!("differs: {}", cols.join(", ")));
        }
    }
    for (id, block) in &deactivated {
        if let Some(have) = stored.get(id)
            && have.deactivated_block != Some(*block)
        {
            out.add(
                "chain_plans",
                format!("plan {id}"),
                format!(
                    "deactivated at {:?} in the index, at block {block} on the chain",
                    have.deactivated_block
                ),
            );
        }
    }
    if let Some(provider) = contract_reads {
        let sm = SubscriptionManager::new(contract, provider);
        for id in &ids {
            let Some(have) = stored.get(id) else {
                continue;
            };
            let p = sm
                .getPlan(U256::from(*id as u64))
                .block(BlockId::number(to))
                .call()
                .await
                .map_err(|e| crate::Error::Inconsistent(format!("getPlan({id}): {e}")))?;
            let active_in_index = have.deactivated_block.is_none_or(|b| b > to);
            let mut cols = Vec::new();
            differ(
                &mut cols,
                "merchant",
                ("contract", p.merchant),
                ("db", have.plan.merchant),
            );
            differ(
                &mut cols,
                "amount",
                ("contract", p.amount),
                ("db", have.plan.amount),
            );
            differ(
                &mut cols,
                "planRef",
                ("contract", p.planRef),
                ("db", have.plan.plan_ref),
            );
            if p.active != active_in_index {
                cols.push(format!(
                    "active (contract {}, db {active_in_index})",
                    p.active
                ));
            }
            if !cols.is_empty() {
                out.add(
                    "chain_plans",
                    format!("plan {id}"),
                    format!(
                        "the contract's state at block {to} differs: {}",
                        cols.join(", ")
                    ),
                );
            }
        }
    }
    Ok(())
}

/// What a subscription's latest charged period was paid (its charge and the prorations of
/// upgrades in it) and refunded, from its events in chain order: the contract's `paid` and
/// `refunded` (a charge starts a period: both reset).
fn paid_and_refunded(evs: &[SubEvent]) -> (U256, U256) {
    let (mut paid, mut refunded) = (U256::ZERO, U256::ZERO);
    for e in evs {
        match &e.event {
            ContractEvent::SubscriptionCharged(c) => (paid, refunded) = (c.amount, U256::ZERO),
            ContractEvent::PlanChanged(c) => paid += c.proration,
            ContractEvent::SubscriptionRefunded(r) => refunded = r.totalRefunded,
            _ => {}
        }
    }
    (paid, refunded)
}

/// One event of a subscription, from the database (before the range) or the chain.
struct SubEvent {
    key: EventKey,
    block_time: u64,
    event_ref: i64,
    event: ContractEvent,
    in_range: bool,
}

#[allow(clippy::too_many_arguments)]
async fn subscriptions(
    out: &mut Findings,
    client: &Client,
    target: Target,
    mapped: &[MappedEvent],
    db: &BTreeMap<EventKey, StoredEvent>,
    db_ids: &HashMap<EventKey, i64>,
    contract_reads: Option<&DynProvider>,
    from: u64,
    to: u64,
) -> Result<()> {
    let chain_id = target.chain_id;
    let touched: Vec<i64> = mapped
        .iter()
        .filter_map(|e| e.subscription_id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if touched.is_empty() {
        return Ok(());
    }
    // Each subscription's events: stored ones before the range, the chain's inside it.
    let mut events: BTreeMap<i64, Vec<SubEvent>> = BTreeMap::new();
    let mut later: BTreeSet<i64> = BTreeSet::new();
    for l in store::subscription_logs(client, chain_id, &touched).await? {
        if l.block_number > to {
            if let Ok(ev) = map::decode(&l.topics, &l.data.clone().into())
                && let Some(sid) = ev.subscription_id()
            {
                later.insert(onchain_subscription(sid)?.db());
            }
            continue;
        }
        if l.block_number >= from {
            continue;
        }
        if let Ok(ev) = map::decode(&l.topics, &l.data.clone().into())
            && let Some(sid) = ev.subscription_id()
        {
            events
                .entry(onchain_subscription(sid)?.db())
                .or_default()
                .push(SubEvent {
                    key: (l.block_number, l.tx_hash, 0),
                    block_time: l.block_time,
                    event_ref: l.id,
                    event: ev,
                    in_range: false,
                });
        }
    }
    for e in mapped {
        let (Some(sid), Some(ev)) = (e.subscription_id, &e.event) else {
            continue;
        };
        let key = (e.block_number, e.tx_hash, e.log_index);
        events.entry(sid).or_default().push(SubEvent {
            key,
            block_time: e.block_time,
            event_ref: db_ids.get(&key).copied().unwrap_or(0),
            event: ev.clone(),
            in_range: true,
        });
    }
    let refs: Vec<(B256, Address, Address)> = events
        .values()
        .flatten()
        .filter_map(|e| match &e.event {
            ContractEvent::SubscriptionCreated(c) => {
                Some((c.customerRef, c.merchant, c.subscriber))
            }
            _ => None,
        })
        .collect();
    let mut customers = store::resolve_customers(client, &refs).await?.into_iter();
    let rows = store::load_subscriptions(client, chain_id, &touched).await?;
    let sm = contract_reads.map(|p| SubscriptionManager::new(target.contract, p));
    for (sid, evs) in &events {
        let mut state: Option<SubscriptionState> = None;
        for (position, e) in (1i64..).zip(evs) {
            let customer_external_id = match e.event {
                ContractEvent::SubscriptionCreated(_) => customers.next().flatten(),
                _ => None,
            };
            let ctx = EventCtx {
                chain_id: target.chain_id.get(),
                tx_hash: e.key.1,
                event_ref: e.event_ref,
                block_time: e.block_time,
                customer_external_id,
            };
            state = fold::apply(state, &e.event, &ctx)?;
            if !e.in_range {
                continue;
            }
            let want = state.as_ref().map(|s| s.snapshot());
            let json = |s: &Option<SubscriptionSnapshot>| {
                s.as_ref()
                    .map(|s| serde_json::to_value(s).expect("a snapshot serializes"))
            };
            match db.get(&e.key).map(|have| &have.snapshot) {
                Some(Ok(have)) if *have != want => out.add(
                    "chain_events",
                    key_text(&e.key),
                    format!(
                        "snapshot differs ({})",
                        json_diff(json(have).as_ref(), json(&want).as_ref())
                    ),
                ),
                Some(Err(unreadable)) => out.add(
                    "chain_events",
                    key_text(&e.key),
                    format!("snapshot unreadable ({unreadable})"),
                ),
                _ => {}
            }
            // Its place among the subscription's stored events (those before the range are
            // stored ones, those inside it the chain's, both in chain order).
            if let Some(have) = db.get(&e.key)
                && have.sequence != Some(position)
            {
                out.add(
                    "chain_events",
                    key_text(&e.key),
                    format!(
                        "sequence differs (stored {:?}, expected {position})",
                        have.sequence
                    ),
                );
            }
        }
        let Some(state) = state else {
            continue; // created before the index's start block: nothing is projected
        };
        let key = format!("onchain {sid}");
        if !later.contains(sid) {
            match rows.get(sid) {
                None => out.add("subscriptions", key.clone(), "missing"),
                Some(have) => {
                    let cols = diff_state(have, &state);
                    if !cols.is_empty() {
                        out.add(
                            "subscriptions",
                            key.clone(),
                            format!("differs: {}", cols.join(", ")),
                        );
                    }
                }
            }
        }
        if let Some(sm) = &sm {
            let c = sm
                .getSubscription(U256::from(*sid as u64))
                .block(BlockId::number(to))
                .call()
                .await
                .map_err(|e| crate::Error::Inconsistent(format!("getSubscription({sid}): {e}")))?;
            let status = chainsub_abi::subscription_status(c.status);
            let mut cols = Vec::new();
            differ(
                &mut cols,
                "status",
                (
                    "contract",
                    status.map_or("none", SubscriptionStatus::as_str),
                ),
                ("events", state.status.as_str()),
            );
            differ(
                &mut cols,
                "period",
                ("contract", c.period),
                ("events", state.period),
            );
            differ(
                &mut cols,
                "periodEnd",
                ("contract", c.periodEnd),
                ("events", state.current_period_end),
            );
            differ(
                &mut cols,
                "failedAttempts",
                ("contract", c.failedAttempts),
                ("events", state.failed_attempts),
            );
            differ(
                &mut cols,
                "cancelAtPeriodEnd",
                ("contract", c.cancelAtPeriodEnd),
                ("events", state.cancel_at_period_end),
            );
            differ(
                &mut cols,
                "planId",
                ("contract", c.planId),
                ("events", U256::from(state.plan_onchain_id as u64)),
            );
            differ(
                &mut cols,
                "pendingPlanId",
                ("contract", c.pendingPlanId),
                (
                    "events",
                    state
                        .pending_plan_change
                        .map_or(0, |p| p.plan_onchain_id as u64),
                ),
            );
            // A trial's end is the anchor of the monthly periods that follow it.
            if let Some(trial_end) = state.trial_end {
                differ(
                    &mut cols,
                    "anchor",
                    ("contract", c.anchor),
                    ("events (trial end)", trial_end),
                );
            }
            // The refund limit: what its latest charged period was paid (the charge and any
            // proration) and refunded, re-derived from its events.
            let (paid, refunded) = paid_and_refunded(evs);
            differ(
                &mut cols,
                "paid",
                ("contract", U256::from(c.paid)),
                ("events", paid),
            );
            differ(
                &mut cols,
                "refunded",
                ("contract", U256::from(c.refunded)),
                ("events", refunded),
            );
            if c.amount != state.amount
                || c.merchant != state.merchant
                || c.subscriber != state.subscriber
            {
                cols.push("terms (amount, merchant or subscriber)".into());
            }
            if !cols.is_empty() {
                out.add(
                    "subscriptions",
                    key,
                    format!(
                        "the contract's state at block {to} differs: {}",
                        cols.join(", ")
                    ),
                );
            }
        }
    }
    Ok(())
}

/// The columns of a stored subscription that differ from the fold, with both values.
fn diff_state(have: &SubscriptionState, want: &SubscriptionState) -> Vec<String> {
    let mut cols = Vec::new();
    macro_rules! cmp {
        ($($f:ident),*) => { $( if have.$f != want.$f { cols.push(format!("{} (db {:?}, chain {:?})", stringify!($f), have.$f, want.$f)); } )* };
    }
    cmp!(
        public_id,
        merchant,
        subscriber,
        plan_onchain_id,
        amount,
        customer_ref,
        customer_external_id,
        status,
        cancel_at_period_end,
        period,
        current_period_start,
        current_period_end,
        failed_attempts,
        next_retry_at,
        ended_reason,
        trial_end,
        pending_plan_change,
        created_event,
        last_event,
        created_at,
        updated_at,
        events
    );
    cols
}

/// The fields two snapshots disagree on, with both values.
fn json_diff(have: Option<&serde_json::Value>, want: Option<&serde_json::Value>) -> String {
    let (Some(serde_json::Value::Object(h)), Some(serde_json::Value::Object(w))) = (have, want)
    else {
        return format!("db {have:?}, chain {want:?}");
    };
    let keys: BTreeSet<&String> = h.keys().chain(w.keys()).collect();
    keys.into_iter()
        .filter(|k| h.get(*k) != w.get(*k))
        .map(|k| {
            format!(
                "{k}: db {}, chain {}",
                h.get(k).map_or("none".into(), |v| v.to_string()),
                w.get(k).map_or("none".into(), |v| v.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Notes column `name` in `cols` when the two sides' values differ, with both values.
fn differ<T: PartialEq + fmt::Display>(
    cols: &mut Vec<String>,
    name: &str,
    (side_a, a): (&str, T),
    (side_b, b): (&str, T),
) {
    if a != b {
        cols.push(format!("{name} ({side_a} {a}, {side_b} {b})"));
    }
}
