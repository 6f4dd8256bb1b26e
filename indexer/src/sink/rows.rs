//! Multi-row statements of the sink: every insert is one `UNNEST` statement per table per
//! transaction, whatever the number of rows.

use std::collections::HashMap;

use alloy::primitives::{Address, B256, U256};
use chainsub_abi::ContractEvent;
use chainsub_core::SubscriptionId;
use tokio_postgres::Transaction;

use crate::block::Block;
use crate::fold::{self, Status, SubState, ts};
use crate::map::{MappedEvent, failure_reason_name, id_to_i64};
use crate::{Error, Result};

fn i32_of(v: u64, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::Inconsistent(format!("{what} {v} does not fit INTEGER")))
}

fn b256(bytes: &[u8]) -> Result<B256> {
    B256::try_from(bytes).map_err(|_| Error::Inconsistent("hash column is not 32 bytes".into()))
}

fn address(bytes: &[u8]) -> Result<Address> {
    Address::try_from(bytes)
        .map_err(|_| Error::Inconsistent("address column is not 20 bytes".into()))
}

/// Inserts `events` with their snapshots; returns their `chain_events.id`s, in order.
pub async fn insert_events(
    tx: &Transaction<'_>,
    chain_id: i64,
    contract: &Address,
    events: &[MappedEvent],
    snapshots: &[Option<serde_json::Value>],
    enqueued: &[bool],
) -> Result<Vec<i64>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let n = events.len();
    let mut public_id = Vec::with_capacity(n);
    let mut bn = Vec::with_capacity(n);
    let mut bh = Vec::with_capacity(n);
    let mut bt = Vec::with_capacity(n);
    let mut th = Vec::with_capacity(n);
    let mut ti = Vec::with_capacity(n);
    let mut li = Vec::with_capacity(n);
    let mut name = Vec::with_capacity(n);
    let mut kind = Vec::with_capacity(n);
    let mut mw = Vec::with_capacity(n);
    let mut sid = Vec::with_capacity(n);
    let mut pid = Vec::with_capacity(n);
    let mut topics: [Vec<Option<&[u8]>>; 4] = Default::default();
    let mut data = Vec::with_capacity(n);
    let mut decoded = Vec::with_capacity(n);
    for e in events {
        public_id.push(e.public_id.as_str());
        bn.push(e.block_number as i64);
        bh.push(e.block_hash.as_slice());
        bt.push(ts(e.block_time));
        th.push(e.tx_hash.as_slice());
        ti.push(i32_of(e.tx_index, "transaction index")?);
        li.push(i32_of(e.log_index, "log index")?);
        name.push(e.name);
        kind.push(e.kind.map(|k| k.as_str()));
        mw.push(e.merchant.as_ref().map(|a| a.as_slice()));
        sid.push(e.subscription_id);
        pid.push(e.plan_id);
        if e.topics.len() > 4 {
            return Err(Error::Inconsistent("log with more than 4 topics".into()));
        }
        for (i, col) in topics.iter_mut().enumerate() {
            col.push(e.topics.get(i).map(|t| t.as_slice()));
        }
        data.push(e.data.as_ref());
        decoded.push(&e.decoded);
    }
    let snapshot: Vec<Option<&serde_json::Value>> = snapshots.iter().map(Option::as_ref).collect();
    let rows = tx
        .query(
            "INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash,
                 block_time, transaction_hash, transaction_index, log_index, name, kind,
                 merchant_wallet, subscription_id, plan_id, topics, data, decoded, snapshot,
                 enqueued)
             SELECT u.public_id, $1, $2, u.bn, u.bh, u.bt, u.th, u.ti, u.li, u.name, u.kind, u.mw,
                 u.sid, u.pid, array_remove(ARRAY[u.t0, u.t1, u.t2, u.t3], NULL), u.data,
                 u.decoded, u.snapshot, u.enq
             FROM unnest($3::text[], $4::int8[], $5::bytea[], $6::timestamptz[], $7::bytea[],
                 $8::int4[], $9::int4[], $10::text[], $11::text[], $12::bytea[], $13::int8[],
                 $14::int8[], $15::bytea[], $16::bytea[], $17::bytea[], $18::bytea[],
                 $19::bytea[], $20::jsonb[], $21::jsonb[], $22::bool[])
               AS u(public_id, bn, bh, bt, th, ti, li, name, kind, mw, sid, pid, t0, t1, t2, t3,
                    data, decoded, snapshot, enq)
             ON CONFLICT (chain_id, block_hash, log_index) DO NOTHING
             RETURNING id, block_hash, log_index",
            &[
                &chain_id,
                &contract.as_slice(),
                &public_id,
                &bn,
                &bh,
                &bt,
                &th,
                &ti,
                &li,
                &name,
                &kind,
                &mw,
                &sid,
                &pid,
                &topics[0],
                &topics[1],
                &topics[2],
                &topics[3],
                &data,
                &decoded,
                &snapshot,
                &enqueued,
            ],
        )
        .await?;
    if rows.len() != n {
        // The cursor check makes a re-applied block impossible; a conflict means the
        // database was written by something else.
        return Err(Error::Inconsistent(format!(
            "{} of {n} events already present",
            n - rows.len()
        )));
    }
    let mut by_key: HashMap<(Vec<u8>, i32), i64> = HashMap::with_capacity(n);
    for r in rows {
        by_key.insert((r.get::<_, Vec<u8>>(1), r.get::<_, i32>(2)), r.get(0));
    }
    events
        .iter()
        .zip(&li)
        .map(|(e, li)| {
            by_key
                .get(&(e.block_hash.to_vec(), *li))
                .copied()
                .ok_or_else(|| Error::Inconsistent("inserted event id missing".into()))
        })
        .collect()
}

/// Outbox rows for the events of this batch marked `enqueued`, in chain order
/// ([`chainsub_store::outbox::enqueue`]).
pub async fn insert_outbox(
    tx: &Transaction<'_>,
    events: &[MappedEvent],
    enqueued: &[bool],
) -> Result<u64> {
    let rows: Vec<(&str, Vec<u8>)> = events
        .iter()
        .zip(enqueued)
        .filter(|(_, q)| **q)
        .map(|(e, _)| {
            let wallet = e.merchant.map(|m| m.to_vec()).unwrap_or_default();
            (e.public_id.as_str(), wallet)
        })
        .collect();
    Ok(chainsub_store::outbox::enqueue(tx, &rows).await?)
}

/// Ledger rows (charges and failed charges), plans and plan deactivations for the events
/// just inserted.
pub async fn insert_projections(
    tx: &Transaction<'_>,
    chain_id: i64,
    events: &[MappedEvent],
    ids: &[i64],
) -> Result<()> {
    let (mut l_eid, mut l_sid, mut l_kind, mut l_amount, mut l_period) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut l_ps, mut l_pe, mut l_attempt, mut l_reason, mut l_bt) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut p_id, mut p_m, mut p_ref, mut p_amount, mut p_by, mut p_eid) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut d_id, mut d_eid) = (vec![], vec![]);
    for (e, id) in events.iter().zip(ids) {
        match &e.event {
            Some(ContractEvent::SubscriptionCharged(c)) => {
                l_eid.push(*id);
                l_sid.push(id_to_i64(c.subscriptionId)?);
                l_kind.push("charge");
                l_amount.push(c.amount.to_string());
                l_period.push(c.period as i32);
                l_ps.push(Some(ts(c.periodStart)));
                l_pe.push(Some(ts(c.periodEnd)));
                l_attempt.push(c.attempt as i32);
                l_reason.push(None);
                l_bt.push(ts(e.block_time));
            }
            Some(ContractEvent::PaymentFailed(f)) => {
                l_eid.push(*id);
                l_sid.push(id_to_i64(f.subscriptionId)?);
                l_kind.push("failed_charge");
                l_amount.push(f.amount.to_string());
                l_period.push(f.period as i32);
                l_ps.push(None);
                l_pe.push(None);
                l_attempt.push(f.attempt as i32);
                l_reason.push(Some(failure_reason_name(f.reason)));
                l_bt.push(ts(e.block_time));
            }
            Some(ContractEvent::PlanCreated(p)) => {
                p_id.push(id_to_i64(p.planId)?);
                p_m.push(p.merchant.to_vec());
                p_ref.push(p.planRef.to_vec());
                p_amount.push(p.amount.to_string());
                p_by.push(p.createdBy.to_vec());
                p_eid.push(*id);
            }
            Some(ContractEvent::PlanDeactivated(d)) => {
                d_id.push(id_to_i64(d.planId)?);
                d_eid.push(*id);
            }
            _ => {}
        }
    }
    if !l_eid.is_empty() {
        tx.execute(
            "INSERT INTO ledger_entries (event_id, chain_id, subscription_id, kind, amount, period,
                 period_start, period_end, attempt, failure_reason, block_time)
             SELECT u.eid, $1, u.sid, u.kind, u.amount::numeric, u.period, u.ps, u.pe, u.attempt,
                 u.reason, u.bt
             FROM unnest($2::int8[], $3::int8[], $4::text[], $5::text[], $6::int4[],
                 $7::timestamptz[], $8::timestamptz[], $9::int4[], $10::text[], $11::timestamptz[])
               AS u(eid, sid, kind, amount, period, ps, pe, attempt, reason, bt)",
            &[
                &chain_id, &l_eid, &l_sid, &l_kind, &l_amount, &l_period, &l_ps, &l_pe, &l_attempt,
                &l_reason, &l_bt,
            ],
        )
        .await?;
    }
    if !p_id.is_empty() {
        tx.execute(
            "INSERT INTO chain_plans (chain_id, onchain_id, merchant_wallet, plan_ref, amount,
                 created_by, event_id)
             SELECT $1, u.id, u.m, u.r, u.a::numeric, u.c, u.e
             FROM unnest($2::int8[], $3::bytea[], $4::bytea[], $5::text[], $6::bytea[], $7::int8[])
               AS u(id, m, r, a, c, e)",
            &[&chain_id, &p_id, &p_m, &p_ref, &p_amount, &p_by, &p_eid],
        )
        .await?;
    }
    if !d_id.is_empty() {
        // After the plans: a plan created and deactivated in one batch exists by now.
        tx.execute(
            "UPDATE chain_plans cp SET deactivated_event_id = u.e
             FROM unnest($2::int8[], $3::int8[]) AS u(id, e)
             WHERE cp.chain_id = $1 AND cp.onchain_id = u.id",
            &[&chain_id, &d_id, &d_eid],
        )
        .await?;
    }
    Ok(())
}

const SUB_COLUMNS: &str =
    "onchain_id, public_id, merchant_wallet, subscriber, plan_onchain_id, amount::text,
    customer_ref, customer_external_id, status, cancel_at_period_end, period,
    current_period_start, current_period_end, failed_attempts, next_retry_at, ended_reason,
    created_event_id, last_event_id, created_at, updated_at";

fn sub_of_row(r: &tokio_postgres::Row) -> Result<SubState> {
    let status: String = r.get(8);
    let amount: String = r.get(5);
    Ok(SubState {
        onchain_id: r.get(0),
        public_id: SubscriptionId::parse(r.get(1)).ok_or_else(|| {
            Error::Inconsistent(format!("subscription id {:?}", r.get::<_, &str>(1)))
        })?,
        merchant: address(r.get(2))?,
        subscriber: address(r.get(3))?,
        plan_onchain_id: r.get(4),
        amount: amount
            .parse::<U256>()
            .map_err(|e| Error::Inconsistent(format!("amount {amount}: {e}")))?,
        customer_ref: b256(r.get(6))?,
        customer_external_id: r.get(7),
        status: Status::parse(&status).map_err(|e| Error::Inconsistent(e.to_string()))?,
        cancel_at_period_end: r.get(9),
        period: r.get::<_, i32>(10) as u32,
        current_period_start: r.get::<_, chrono::DateTime<chrono::Utc>>(11).timestamp() as u64,
        current_period_end: r.get::<_, chrono::DateTime<chrono::Utc>>(12).timestamp() as u64,
        failed_attempts: r.get::<_, i32>(13) as u8,
        next_retry_at: r
            .get::<_, Option<chrono::DateTime<chrono::Utc>>>(14)
            .map(|t| t.timestamp() as u64),
        ended_reason: r.get(15),
        created_event: r.get(16),
        last_event: r.get(17),
        created_at: r.get::<_, chrono::DateTime<chrono::Utc>>(18).timestamp() as u64,
        updated_at: r.get::<_, chrono::DateTime<chrono::Utc>>(19).timestamp() as u64,
    })
}

/// The stored state of the given subscriptions.
pub async fn load_subs(
    tx: &Transaction<'_>,
    chain_id: i64,
    ids: &[i64],
) -> Result<HashMap<i64, SubState>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = tx
        .query(
            &format!(
                "SELECT {SUB_COLUMNS} FROM subscriptions WHERE chain_id = $1 AND onchain_id = ANY($2)"
            ),
            &[&chain_id, &ids],
        )
        .await?;
    rows.iter()
        .map(|r| sub_of_row(r).map(|s| (s.onchain_id, s)))
        .collect()
}

/// Inserts or replaces subscription rows.
pub async fn upsert_subs(tx: &Transaction<'_>, chain_id: i64, subs: &[&SubState]) -> Result<()> {
    if subs.is_empty() {
        return Ok(());
    }
    let (mut id, mut pubid, mut m, mut sub, mut plan, mut amount, mut cref, mut ext) = (
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
    );
    let (mut status, mut cape, mut period, mut ps, mut pe, mut fa, mut nra, mut er) = (
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
    );
    let (mut ce, mut le, mut ca, mut ua) = (vec![], vec![], vec![], vec![]);
    for s in subs {
        id.push(s.onchain_id);
        pubid.push(s.public_id.as_str());
        m.push(s.merchant.to_vec());
        sub.push(s.subscriber.to_vec());
        plan.push(s.plan_onchain_id);
        amount.push(s.amount.to_string());
        cref.push(s.customer_ref.to_vec());
        ext.push(s.customer_external_id.clone());
        status.push(s.status.as_str());
        cape.push(s.cancel_at_period_end);
        period.push(s.period as i32);
        ps.push(ts(s.current_period_start));
        pe.push(ts(s.current_period_end));
        fa.push(s.failed_attempts as i32);
        nra.push(s.next_retry_at.map(ts));
        er.push(s.ended_reason.clone());
        ce.push(s.created_event);
        le.push(s.last_event);
        ca.push(ts(s.created_at));
        ua.push(ts(s.updated_at));
    }
    tx.execute(
        "INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet, subscriber,
             plan_onchain_id, amount, customer_ref, customer_external_id, status,
             cancel_at_period_end, period, current_period_start, current_period_end,
             failed_attempts, next_retry_at, ended_reason, created_event_id, last_event_id,
             created_at, updated_at)
         SELECT $1, u.id, u.pubid, u.m, u.sub, u.plan, u.amount::numeric, u.cref, u.ext, u.status,
             u.cape, u.period, u.ps, u.pe, u.fa, u.nra, u.er, u.ce, u.le, u.ca, u.ua
         FROM unnest($2::int8[], $3::text[], $4::bytea[], $5::bytea[], $6::int8[], $7::text[],
             $8::bytea[], $9::text[], $10::text[], $11::bool[], $12::int4[], $13::timestamptz[],
             $14::timestamptz[], $15::int4[], $16::timestamptz[], $17::text[], $18::int8[],
             $19::int8[], $20::timestamptz[], $21::timestamptz[])
           AS u(id, pubid, m, sub, plan, amount, cref, ext, status, cape, period, ps, pe, fa, nra,
                er, ce, le, ca, ua)
         ON CONFLICT (chain_id, onchain_id) DO UPDATE SET
             status = EXCLUDED.status, cancel_at_period_end = EXCLUDED.cancel_at_period_end,
             period = EXCLUDED.period, current_period_start = EXCLUDED.current_period_start,
             current_period_end = EXCLUDED.current_period_end,
             failed_attempts = EXCLUDED.failed_attempts, next_retry_at = EXCLUDED.next_retry_at,
             ended_reason = EXCLUDED.ended_reason, last_event_id = EXCLUDED.last_event_id,
             updated_at = EXCLUDED.updated_at",
        &[
            &chain_id, &id, &pubid, &m, &sub, &plan, &amount, &cref, &ext, &status, &cape, &period,
            &ps, &pe, &fa, &nra, &er, &ce, &le, &ca, &ua,
        ],
    )
    .await?;
    Ok(())
}

/// The customer external id for each `(customer_ref, merchant, subscriber)`: the checkout's
/// customer only when the reference was made for that merchant AND that subscribing wallet
/// (`checkout_wallet_refs`); `None` for a zero reference, a subscription made outside our
/// checkout, or a reference copied into another wallet's subscription.
pub async fn resolve_customers(
    tx: &Transaction<'_>,
    refs: &[(B256, Address, Address)],
) -> Result<Vec<Option<String>>> {
    let wanted: Vec<usize> = (0..refs.len()).filter(|&i| !refs[i].0.is_zero()).collect();
    let mut out = vec![None; refs.len()];
    if wanted.is_empty() {
        return Ok(out);
    }
    let r: Vec<&[u8]> = wanted.iter().map(|&i| refs[i].0.as_slice()).collect();
    let w: Vec<&[u8]> = wanted.iter().map(|&i| refs[i].1.as_slice()).collect();
    let s: Vec<&[u8]> = wanted.iter().map(|&i| refs[i].2.as_slice()).collect();
    let rows = tx
        .query(
            "SELECT (SELECT c.customer_external_id FROM checkout_wallet_refs c
                     JOIN merchants m ON m.id = c.merchant_id
                     WHERE c.customer_ref = u.r AND m.wallet = u.w AND c.wallet = u.s)
             FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) WITH ORDINALITY AS u(r, w, s, i)
             ORDER BY u.i",
            &[&r, &w, &s],
        )
        .await?;
    for (row, &i) in rows.iter().zip(&wanted) {
        out[i] = row.get(0);
    }
    Ok(out)
}

/// Rebuilds subscriptions from their stored events (after a reorg removed some of them).
pub async fn rebuild_subs(
    tx: &Transaction<'_>,
    chain_id: i64,
    ids: &[i64],
) -> Result<Vec<SubState>> {
    let rows = tx
        .query(
            "SELECT id, block_time, topics, data, transaction_hash FROM chain_events
             WHERE chain_id = $1 AND subscription_id = ANY($2)
             ORDER BY subscription_id, block_number, log_index",
            &[&chain_id, &ids],
        )
        .await?;
    let mut decoded = Vec::with_capacity(rows.len());
    for r in &rows {
        let topics: Vec<Vec<u8>> = r.get(2);
        let topics = topics.iter().map(|t| b256(t)).collect::<Result<Vec<_>>>()?;
        let data: Vec<u8> = r.get(3);
        let bt: chrono::DateTime<chrono::Utc> = r.get(1);
        let tx_hash = b256(r.get(4))?;
        if let Ok(ev) = crate::map::decode(&topics, &data.into()) {
            decoded.push((r.get::<_, i64>(0), bt.timestamp() as u64, tx_hash, ev));
        }
    }
    let refs: Vec<(B256, Address, Address)> = decoded
        .iter()
        .filter_map(|(_, _, _, ev)| match ev {
            ContractEvent::SubscriptionCreated(c) => {
                Some((c.customerRef, c.merchant, c.subscriber))
            }
            _ => None,
        })
        .collect();
    let mut customers = resolve_customers(tx, &refs).await?.into_iter();
    let mut states: HashMap<i64, SubState> = HashMap::new();
    for (id, bt, tx_hash, ev) in &decoded {
        let Some(sid) = ev.subscription_id() else {
            continue;
        };
        let sid = id_to_i64(sid)?;
        let customer_external_id = match ev {
            ContractEvent::SubscriptionCreated(_) => customers.next().flatten(),
            _ => None,
        };
        let ctx = fold::EventCtx {
            chain_id: chain_id as u64,
            tx_hash: *tx_hash,
            event_ref: *id,
            block_time: *bt,
            customer_external_id,
        };
        if let Some(s) = fold::apply(states.remove(&sid), ev, &ctx)? {
            states.insert(sid, s);
        }
    }
    Ok(states.into_values().collect())
}

/// Block checkpoints for the unfinalized window (and always the batch's last block), and
/// pruning of the ones no reorg can reach any more.
pub async fn write_checkpoints(
    tx: &Transaction<'_>,
    chain_id: i64,
    blocks: &[Block],
    finalized: u64,
) -> Result<()> {
    let last = blocks.last().map(|b| b.number).unwrap_or(0);
    let keep: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.number >= finalized || b.number == last)
        .collect();
    let bn: Vec<i64> = keep.iter().map(|b| b.number as i64).collect();
    let bh: Vec<&[u8]> = keep.iter().map(|b| b.hash.as_slice()).collect();
    let ph: Vec<&[u8]> = keep.iter().map(|b| b.parent_hash.as_slice()).collect();
    let bt: Vec<_> = keep.iter().map(|b| ts(b.timestamp)).collect();
    tx.execute(
        "INSERT INTO block_checkpoints (chain_id, block_number, block_hash, parent_hash, block_time)
         SELECT $1, u.n, u.h, u.p, u.t
         FROM unnest($2::int8[], $3::bytea[], $4::bytea[], $5::timestamptz[]) AS u(n, h, p, t)
         ON CONFLICT (chain_id, block_number) DO UPDATE SET block_hash = EXCLUDED.block_hash,
             parent_hash = EXCLUDED.parent_hash, block_time = EXCLUDED.block_time",
        &[&chain_id, &bn, &bh, &ph, &bt],
    )
    .await?;
    let floor = finalized.min(last) as i64;
    tx.execute(
        "DELETE FROM block_checkpoints WHERE chain_id = $1 AND block_number < $2",
        &[&chain_id, &floor],
    )
    .await?;
    Ok(())
}
