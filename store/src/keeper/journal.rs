//! The send journal: `keeper_steps` (one row per due step, unique) and `keeper_txs` (every
//! signed transaction of a send — one step, or many with `chargeMany` — all with the send's
//! nonce, `step_ids` naming the steps it carries).

use alloy::primitives::B256;
use chainsub_core::OnchainSubscriptionId;

use super::{
    Journaled, OpenSend, OpenStep, Outcome, SignedTx, Step, Store, TxRow, parse_u128, to_i64,
};
use crate::{Error, Result};

impl Store {
    /// Journals a send — its steps and its first transaction — in one transaction. A step
    /// that already has a row is not taken again (it was sent before: never send twice)
    /// unless that row was closed without ever reaching the chain, or reverted on chain and
    /// may be retried; if any step of `steps` is such a row, nothing is written and
    /// [`Journaled::Already`] names them.
    pub async fn insert_send(&self, steps: &[Step], tx: &SignedTx) -> Result<Journaled> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        let nonce = to_i64(tx.nonce, "nonce")?;
        let mut ids = Vec::with_capacity(steps.len());
        let mut already = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let row = db
                .query_opt(
                    "INSERT INTO keeper_steps
                         (chain_id, contract, subscription_id, period, attempt, due_at, action,
                          keeper_address, nonce)
                     VALUES ($1, $2, $3, $4, $5, $10, $6, $7, $8)
                     ON CONFLICT (chain_id, subscription_id, period, attempt, due_at) DO UPDATE
                         SET nonce = EXCLUDED.nonce, keeper_address = EXCLUDED.keeper_address,
                             status = 'pending', error = NULL, finished_at = NULL, updated_at = now(),
                             tx_hash = NULL, block_number = NULL, retry_at = NULL
                         -- Only a step that provably never reached the chain, or one that reverted
                         -- on chain and may be retried (after its backoff, a bounded number of
                         -- times), is taken up again; its old transactions stay as the record.
                         WHERE keeper_steps.status = 'failed'
                           AND (keeper_steps.tx_hash IS NULL
                                OR (keeper_steps.reverts <= $9 AND keeper_steps.retry_at <= now()))
                     RETURNING id",
                    &[
                        &self.chain_id,
                        &self.contract.as_slice(),
                        &step.subscription_id,
                        &step.period,
                        &step.attempt,
                        &step.action.as_str(),
                        &self.keeper.as_slice(),
                        &nonce,
                        &self.max_revert_retries,
                        &step.due_at,
                    ],
                )
                .await?;
            match row {
                Some(row) => ids.push(row.get::<_, i64>(0)),
                None => already.push(i),
            }
        }
        if !already.is_empty() {
            // Dropping the transaction rolls it back.
            return Ok(Journaled::Already(already));
        }
        let tx_id = insert_tx(&db, &ids, tx).await?;
        db.commit().await?;
        Ok(Journaled::New {
            step_ids: ids,
            tx_id,
        })
    }

    /// Re-signs a send whose transaction was refused for a too-low nonce (so it can never be
    /// mined): the old transaction is marked failed and the steps move to `tx`'s nonce.
    pub async fn renonce(&self, step_ids: &[i64], old_tx_id: i64, tx: &SignedTx) -> Result<i64> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        db.execute(
            "UPDATE keeper_txs SET status = 'failed', error = 'nonce too low', updated_at = now()
             WHERE id = $1",
            &[&old_tx_id],
        )
        .await?;
        db.execute(
            "UPDATE keeper_steps SET nonce = $2, updated_at = now() WHERE id = ANY($1)",
            &[&step_ids, &to_i64(tx.nonce, "nonce")?],
        )
        .await?;
        let tx_id = insert_tx(&db, step_ids, tx).await?;
        db.commit().await?;
        Ok(tx_id)
    }

    /// Journals a replacement (same nonce, higher fee) of an open send.
    pub async fn add_replacement(&self, step_ids: &[i64], tx: &SignedTx) -> Result<i64> {
        let client = self.pool.get().await?;
        insert_tx(&client, step_ids, tx).await
    }

    /// The node acknowledged `tx_id`: it and its steps are `sent`; older transactions of the
    /// send (same nonce, same steps) that were sent are now `replaced`.
    pub async fn mark_sent(&self, tx_id: i64) -> Result<()> {
        let client = self.pool.get().await?;
        client
            .execute(
                "WITH me AS (SELECT nonce, step_ids FROM keeper_txs WHERE id = $1),
                 t AS (
                     UPDATE keeper_txs SET status = 'sent', sent_at = COALESCE(sent_at, now()),
                                           updated_at = now()
                     WHERE id = $1 AND status = 'pending' RETURNING id),
                 older AS (
                     UPDATE keeper_txs o SET status = 'replaced', updated_at = now()
                     FROM me
                     WHERE o.nonce = me.nonce AND o.step_ids && me.step_ids AND o.id < $1
                       AND o.status IN ('pending', 'sent') RETURNING o.id)
                 UPDATE keeper_steps k SET status = 'sent', updated_at = now()
                 FROM me
                 WHERE k.id = ANY(me.step_ids) AND k.nonce = me.nonce AND k.status = 'pending'",
                &[&tx_id],
            )
            .await?;
        Ok(())
    }

    /// The node refused `tx_id` for good; it was never in a pool.
    pub async fn mark_tx_rejected(&self, tx_id: i64, error: &str) -> Result<()> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE keeper_txs SET status = 'failed', error = $2, updated_at = now() WHERE id = $1",
                &[&tx_id, &error],
            )
            .await?;
        Ok(())
    }

    /// Records the receipt of `tx_id` and closes the steps it carried. Mined: a step whose
    /// subscription is in `acted` (the ids the transaction's events name) is mined; any other
    /// was skipped by the contract (not due or not live when it ran) and is closed without a
    /// tx hash, so it is taken up again if still due. Reverted: every step is failed, counts
    /// the revert and may be retried after `backoff` doubled per earlier revert. Returns the
    /// most reverts of a step so far.
    pub async fn finish(
        &self,
        tx_id: i64,
        out: &Outcome,
        acted: &[OnchainSubscriptionId],
        backoff: std::time::Duration,
    ) -> Result<i32> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        let fee = (out.gas_used as u128).saturating_mul(out.effective_gas_price);
        let status = if out.success { "mined" } else { "failed" };
        let row = db
            .query_one(
                "UPDATE keeper_txs SET status = $2, gas_used = $3, effective_gas_price = $4::TEXT::NUMERIC,
                                       fee_paid_wei = $5::TEXT::NUMERIC, block_number = $6,
                                       updated_at = now()
                 WHERE id = $1
                 RETURNING nonce, step_ids, tx_hash",
                &[
                    &tx_id,
                    &status,
                    &to_i64(out.gas_used, "gas used")?,
                    &out.effective_gas_price.to_string(),
                    &fee.to_string(),
                    &to_i64(out.block_number, "block number")?,
                ],
            )
            .await?;
        let (nonce, step_ids, hash): (i64, Vec<i64>, Vec<u8>) =
            (row.get(0), row.get(1), row.get(2));
        db.execute(
            "UPDATE keeper_txs SET status = 'replaced', updated_at = now()
             WHERE nonce = $1 AND step_ids && $2 AND id <> $3 AND status IN ('pending', 'sent')",
            &[&nonce, &step_ids, &tx_id],
        )
        .await?;
        let acted: Vec<i64> = acted.iter().map(|id| id.db()).collect();
        let backoff_ms = i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX);
        let reverts: Option<i32> = db
            .query_one(
                "WITH closed AS (
                     UPDATE keeper_steps SET
                         status = CASE WHEN NOT $4 OR subscription_id = ANY($6) THEN $2::TEXT
                                       ELSE 'failed' END,
                         tx_hash = CASE WHEN NOT $4 OR subscription_id = ANY($6) THEN $3::BYTEA END,
                         block_number = CASE WHEN NOT $4 OR subscription_id = ANY($6)
                                             THEN $5::BIGINT END,
                         error = CASE WHEN NOT $4 THEN 'reverted on chain'
                                      WHEN subscription_id = ANY($6) THEN NULL
                                      ELSE 'skipped by chargeMany: not due or not live when mined' END,
                         updated_at = now(), finished_at = now(),
                         reverts = reverts + CASE WHEN $4::BOOL THEN 0 ELSE 1 END,
                         retry_at = CASE WHEN $4 THEN NULL
                                    ELSE now() + make_interval(secs => $7::BIGINT * power(2, reverts) / 1000.0)
                                    END
                     WHERE id = ANY($1) AND nonce = $8::BIGINT AND status IN ('pending', 'sent')
                     RETURNING reverts)
                 SELECT max(reverts) FROM closed",
                &[
                    &step_ids,
                    &status,
                    &hash,
                    &out.success,
                    &to_i64(out.block_number, "block number")?,
                    &acted,
                    &backoff_ms,
                    &nonce,
                ],
            )
            .await?
            .get(0);
        db.commit().await?;
        Ok(reverts.unwrap_or(0))
    }

    /// Closes the steps of a send that can never be mined (e.g. its nonce was used by another
    /// transaction, or the node refused it).
    pub async fn fail_send(&self, step_ids: &[i64], nonce: u64, error: &str) -> Result<()> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        let nonce = to_i64(nonce, "nonce")?;
        db.execute(
            "UPDATE keeper_txs SET status = 'failed', error = $3, updated_at = now()
             WHERE nonce = $2 AND step_ids && $1 AND status IN ('pending', 'sent')",
            &[&step_ids, &nonce, &error],
        )
        .await?;
        db.execute(
            "UPDATE keeper_steps SET status = 'failed', error = $3, updated_at = now(), finished_at = now()
             WHERE id = ANY($1) AND nonce = $2 AND status IN ('pending', 'sent')",
            &[&step_ids, &nonce, &error],
        )
        .await?;
        db.commit().await?;
        Ok(())
    }

    /// Transactions of this keeper mined at or above `min_block`: a reorg may still take them
    /// back. (tx id, tx hash, block number), by nonce.
    pub async fn recently_closed(&self, min_block: u64) -> Result<Vec<(i64, B256, u64)>> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT t.id, t.tx_hash, t.block_number FROM keeper_txs t
                 JOIN keeper_steps k ON k.id = t.step_id
                 WHERE k.chain_id = $1 AND k.keeper_address = $2
                   AND t.status IN ('mined', 'failed') AND t.block_number >= $3
                 ORDER BY t.nonce, t.id",
                &[
                    &self.chain_id,
                    &self.keeper.as_slice(),
                    &to_i64(min_block, "block number")?,
                ],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let hash: Vec<u8> = r.get(1);
                Ok((
                    r.get(0),
                    B256::try_from(hash.as_slice())
                        .map_err(|_| Error::Inconsistent("keeper_txs: bad hash".into()))?,
                    r.get::<_, i64>(2) as u64,
                ))
            })
            .collect()
    }

    /// A reorg took a transaction out of the chain: the steps it carried that were not taken
    /// up by a later send (still at its nonce) are open again, and its journaled bytes (same
    /// nonce) are re-broadcast by the next reconcile. Returns how many steps reopened, and
    /// the signed bytes: with none reopened (every one taken up elsewhere) the caller
    /// re-broadcasts them itself, or the nonce would stay a gap.
    pub async fn reopen(&self, tx_id: i64) -> Result<(i64, Vec<u8>)> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        let row = db
            .query_one(
                "WITH t AS (
                     UPDATE keeper_txs SET status = 'pending', gas_used = NULL,
                                           effective_gas_price = NULL, fee_paid_wei = NULL,
                                           block_number = NULL, sent_at = NULL, updated_at = now()
                     WHERE id = $1 RETURNING nonce, step_ids, raw_tx),
                 s AS (
                     UPDATE keeper_steps k SET status = 'pending', tx_hash = NULL, block_number = NULL,
                                               error = 'reorged out; re-broadcasting',
                                               finished_at = NULL, updated_at = now()
                     FROM t
                     WHERE k.id = ANY(t.step_ids) AND k.nonce = t.nonce
                       AND k.status IN ('mined', 'failed')
                     RETURNING k.id)
                 SELECT (SELECT count(*) FROM s), (SELECT raw_tx FROM t)",
                &[&tx_id],
            )
            .await?;
        db.commit().await?;
        Ok((row.get(0), row.get(1)))
    }

    /// A re-broadcast transaction that no step owns any more (see [`Store::reopen`]) is in
    /// the pools again.
    pub async fn mark_orphan_sent(&self, tx_id: i64) -> Result<()> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE keeper_txs SET status = 'sent', sent_at = now(), updated_at = now()
                 WHERE id = $1",
                &[&tx_id],
            )
            .await?;
        Ok(())
    }

    /// The transaction `hash` was re-mined in another block.
    pub async fn move_block(&self, hash: B256, block: u64) -> Result<()> {
        let client = self.pool.get().await?;
        let block = to_i64(block, "block number")?;
        client
            .execute(
                "WITH t AS (UPDATE keeper_txs SET block_number = $3, updated_at = now()
                            WHERE tx_hash = $2 RETURNING id)
                 UPDATE keeper_steps SET block_number = $3, updated_at = now()
                 WHERE chain_id = $1 AND tx_hash = $2",
                &[&self.chain_id, &hash.as_slice(), &block],
            )
            .await?;
        Ok(())
    }

    /// Every send in flight of this keeper, by nonce, with its transactions.
    pub async fn open_sends(&self) -> Result<Vec<OpenSend>> {
        let client = self.pool.get().await?;
        let steps = client
            .query(
                "SELECT id, subscription_id, period, attempt, nonce FROM keeper_steps
                 WHERE chain_id = $1 AND keeper_address = $2 AND status IN ('pending', 'sent')
                 ORDER BY nonce, id",
                &[&self.chain_id, &self.keeper.as_slice()],
            )
            .await?;
        let ids: Vec<i64> = steps.iter().map(|r| r.get(0)).collect();
        let nonces: Vec<i64> = steps.iter().map(|r| r.get(4)).collect();
        let txs = client
            .query(
                "SELECT step_ids, id, nonce, tx_hash, raw_tx, gas_limit, max_fee_per_gas::TEXT,
                        max_priority_fee_per_gas::TEXT, status,
                        (EXTRACT(EPOCH FROM (now() - sent_at)) * 1000)::BIGINT
                 FROM keeper_txs WHERE nonce = ANY($2) AND step_ids && $1 ORDER BY id",
                &[&ids, &nonces],
            )
            .await?;
        let mut out: Vec<OpenSend> = Vec::new();
        for s in &steps {
            let nonce = s.get::<_, i64>(4) as u64;
            let step = OpenStep {
                id: s.get(0),
                subscription_id: s.try_get(1)?,
                period: s.get(2),
                attempt: s.get(3),
            };
            match out.last_mut() {
                Some(send) if send.nonce == nonce => send.steps.push(step),
                _ => out.push(OpenSend {
                    nonce,
                    steps: vec![step],
                    txs: Vec::new(),
                }),
            }
        }
        for send in &mut out {
            let ids = send.step_ids();
            for t in &txs {
                let carried: Vec<i64> = t.get(0);
                if t.get::<_, i64>(2) as u64 != send.nonce
                    || !carried.iter().any(|c| ids.contains(c))
                {
                    continue;
                }
                let id: i64 = t.get(1);
                let hash: Vec<u8> = t.get(3);
                let fee: String = t.get(6);
                let prio: String = t.get(7);
                send.txs.push(TxRow {
                    id,
                    step_ids: carried,
                    tx: SignedTx {
                        nonce: send.nonce,
                        hash: B256::try_from(hash.as_slice()).map_err(|_| {
                            Error::Inconsistent(format!("keeper_txs {id}: bad hash"))
                        })?,
                        raw: t.get(4),
                        gas_limit: t.get::<_, i64>(5) as u64,
                        max_fee_per_gas: parse_u128(&fee)?,
                        max_priority_fee_per_gas: parse_u128(&prio)?,
                    },
                    status: t.get(8),
                    sent_age_ms: t.get(9),
                });
            }
        }
        Ok(out)
    }

    /// Number of sends in flight (transactions not yet decided, one per nonce) of this keeper.
    pub async fn open_count(&self) -> Result<usize> {
        let client = self.pool.get().await?;
        let n: i64 = client
            .query_one(
                "SELECT count(DISTINCT nonce) FROM keeper_steps
                 WHERE chain_id = $1 AND keeper_address = $2 AND status IN ('pending', 'sent')",
                &[&self.chain_id, &self.keeper.as_slice()],
            )
            .await?
            .get(0);
        Ok(n as usize)
    }

    /// Gas spent in the last `window_secs`: fees paid by mined (or reverted) transactions
    /// plus the worst case of those still in flight.
    pub async fn spent_in_window(&self, window_secs: u64) -> Result<u128> {
        let client = self.pool.get().await?;
        let secs = window_secs as f64;
        let spent: String = client
            .query_one(
                "SELECT COALESCE(SUM(COALESCE(t.fee_paid_wei,
                            CASE WHEN t.status IN ('pending', 'sent')
                                 THEN t.gas_limit * t.max_fee_per_gas ELSE 0 END)), 0)::TEXT
                 FROM keeper_txs t JOIN keeper_steps k ON k.id = t.step_id
                 WHERE k.chain_id = $1 AND k.keeper_address = $2
                   AND t.created_at > now() - make_interval(secs => $3)",
                &[&self.chain_id, &self.keeper.as_slice(), &secs],
            )
            .await?
            .get(0);
        parse_u128(&spent)
    }

    /// The highest nonce of an open step, so a restarted keeper never hands it out again.
    pub async fn max_open_nonce(&self) -> Result<Option<u64>> {
        let client = self.pool.get().await?;
        let n: Option<i64> = client
            .query_one(
                "SELECT max(nonce) FROM keeper_steps
                 WHERE chain_id = $1 AND keeper_address = $2 AND status IN ('pending', 'sent')",
                &[&self.chain_id, &self.keeper.as_slice()],
            )
            .await?
            .get(0);
        Ok(n.map(|n| n as u64))
    }
}

async fn insert_tx<C: deadpool_postgres::GenericClient>(
    db: &C,
    step_ids: &[i64],
    tx: &SignedTx,
) -> Result<i64> {
    let first = *step_ids
        .first()
        .ok_or_else(|| Error::Inconsistent("a keeper transaction carries no step".into()))?;
    let row = db
        .query_one(
            "INSERT INTO keeper_txs (step_id, step_ids, nonce, tx_hash, raw_tx, gas_limit,
                                     max_fee_per_gas, max_priority_fee_per_gas)
             VALUES ($1, $2, $3, $4, $5, $6, $7::TEXT::NUMERIC, $8::TEXT::NUMERIC)
             -- A send taken up again after a refusal may sign the very same bytes (same
             -- nonce, same fees, same steps): that is the same transaction, so its row is
             -- reused.
             ON CONFLICT (tx_hash) DO UPDATE SET status = 'pending', error = NULL, updated_at = now()
                 WHERE keeper_txs.step_ids = EXCLUDED.step_ids AND keeper_txs.status = 'failed'
             RETURNING id",
            &[
                &first,
                &step_ids,
                &to_i64(tx.nonce, "nonce")?,
                &tx.hash.as_slice(),
                &tx.raw,
                &to_i64(tx.gas_limit, "gas limit")?,
                &tx.max_fee_per_gas.to_string(),
                &tx.max_priority_fee_per_gas.to_string(),
            ],
        )
        .await?;
    Ok(row.get(0))
}
