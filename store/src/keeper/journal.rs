//! The send journal: `keeper_steps` (one row per due step, unique) and `keeper_txs` (every
//! signed transaction of a step, all with the step's nonce).

use alloy::primitives::B256;

use super::{OpenStep, Outcome, SignedTx, Step, Store, TxRow, parse_u128, to_i64};
use crate::{Error, Result};

impl Store {
    /// Journals a step and its first transaction in one transaction. Returns the step and tx
    /// ids, or None when the step already has a row (it was sent before: never send again)
    /// unless that row was closed without ever reaching the chain.
    pub async fn insert_step(&self, step: &Step, tx: &SignedTx) -> Result<Option<(i64, i64)>> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        let sub = to_i64(step.subscription_id, "subscription id")?;
        let nonce = to_i64(tx.nonce, "nonce")?;
        let row = db
            .query_opt(
                "INSERT INTO keeper_steps
                     (chain_id, contract, subscription_id, period, attempt, action, keeper_address, nonce)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (chain_id, subscription_id, period, attempt) DO UPDATE
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
                    &sub,
                    &step.period,
                    &step.attempt,
                    &step.action.as_str(),
                    &self.keeper.as_slice(),
                    &nonce,
                    &self.max_revert_retries,
                ],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let step_id: i64 = row.get(0);
        let tx_id = insert_tx(&db, step_id, tx).await?;
        db.commit().await?;
        Ok(Some((step_id, tx_id)))
    }

    /// Re-signs a step whose transaction was refused for a too-low nonce (so it can never be
    /// mined): the old transaction is marked failed and the step moves to `tx`'s nonce.
    pub async fn renonce_step(&self, step_id: i64, old_tx_id: i64, tx: &SignedTx) -> Result<i64> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        db.execute(
            "UPDATE keeper_txs SET status = 'failed', error = 'nonce too low', updated_at = now()
             WHERE id = $1",
            &[&old_tx_id],
        )
        .await?;
        db.execute(
            "UPDATE keeper_steps SET nonce = $2, updated_at = now() WHERE id = $1",
            &[&step_id, &to_i64(tx.nonce, "nonce")?],
        )
        .await?;
        let tx_id = insert_tx(&db, step_id, tx).await?;
        db.commit().await?;
        Ok(tx_id)
    }

    /// Journals a replacement (same nonce, higher fee) of an open step.
    pub async fn add_replacement(&self, step_id: i64, tx: &SignedTx) -> Result<i64> {
        let client = self.pool.get().await?;
        insert_tx(&client, step_id, tx).await
    }

    /// The node acknowledged `tx_id`: it and its step are `sent`; older transactions of the
    /// step that were sent are now `replaced`.
    pub async fn mark_sent(&self, step_id: i64, tx_id: i64) -> Result<()> {
        let client = self.pool.get().await?;
        client
            .execute(
                "WITH t AS (
                     UPDATE keeper_txs SET status = 'sent', sent_at = COALESCE(sent_at, now()),
                                           updated_at = now()
                     WHERE id = $2 AND status = 'pending' RETURNING id),
                 older AS (
                     UPDATE keeper_txs SET status = 'replaced', updated_at = now()
                     WHERE step_id = $1 AND id < $2 AND status IN ('pending', 'sent') RETURNING id)
                 UPDATE keeper_steps SET status = 'sent', updated_at = now()
                 WHERE id = $1 AND status = 'pending'",
                &[&step_id, &tx_id],
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

    /// Records the receipt of `tx_id` and closes its step (mined, or failed when reverted: a
    /// reverted step counts the revert and may be retried after `backoff` doubled per earlier
    /// revert). Returns the step's reverts so far.
    pub async fn finish(
        &self,
        step_id: i64,
        tx_id: i64,
        out: &Outcome,
        backoff: std::time::Duration,
    ) -> Result<i32> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        let fee = (out.gas_used as u128).saturating_mul(out.effective_gas_price);
        let status = if out.success { "mined" } else { "failed" };
        db.execute(
            "UPDATE keeper_txs SET status = $2, gas_used = $3, effective_gas_price = $4::TEXT::NUMERIC,
                                   fee_paid_wei = $5::TEXT::NUMERIC, updated_at = now()
             WHERE id = $1",
            &[
                &tx_id,
                &status,
                &to_i64(out.gas_used, "gas used")?,
                &out.effective_gas_price.to_string(),
                &fee.to_string(),
            ],
        )
        .await?;
        db.execute(
            "UPDATE keeper_txs SET status = 'replaced', updated_at = now()
             WHERE step_id = $1 AND id <> $2 AND status IN ('pending', 'sent')",
            &[&step_id, &tx_id],
        )
        .await?;
        let error = (!out.success).then_some("reverted on chain");
        let backoff_ms = i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX);
        let reverts: i32 = db
            .query_one(
                "UPDATE keeper_steps SET status = $2,
                     tx_hash = (SELECT tx_hash FROM keeper_txs WHERE id = $3),
                     block_number = $4, error = $5, updated_at = now(), finished_at = now(),
                     reverts = reverts + CASE WHEN $6 THEN 0 ELSE 1 END,
                     retry_at = CASE WHEN $6 THEN NULL
                                ELSE now() + make_interval(secs => $7::BIGINT * power(2, reverts) / 1000.0)
                                END
                 WHERE id = $1
                 RETURNING reverts",
                &[
                    &step_id,
                    &status,
                    &tx_id,
                    &to_i64(out.block_number, "block number")?,
                    &error,
                    &out.success,
                    &backoff_ms,
                ],
            )
            .await?
            .get(0);
        db.commit().await?;
        Ok(reverts)
    }

    /// Closes a step that can never be mined (e.g. its nonce was used by another transaction).
    pub async fn fail_step(&self, step_id: i64, error: &str) -> Result<()> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        db.execute(
            "UPDATE keeper_txs SET status = 'failed', error = $2, updated_at = now()
             WHERE step_id = $1 AND status IN ('pending', 'sent')",
            &[&step_id, &error],
        )
        .await?;
        db.execute(
            "UPDATE keeper_steps SET status = 'failed', error = $2, updated_at = now(), finished_at = now()
             WHERE id = $1",
            &[&step_id, &error],
        )
        .await?;
        db.commit().await?;
        Ok(())
    }

    /// Closed steps whose deciding transaction was mined at or above `min_block`: a reorg
    /// may still take them back. (step id, tx id, tx hash, block number).
    pub async fn recently_closed(&self, min_block: u64) -> Result<Vec<(i64, i64, B256, u64)>> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT k.id, t.id, t.tx_hash, k.block_number FROM keeper_steps k
                 JOIN keeper_txs t ON t.step_id = k.id AND t.tx_hash = k.tx_hash
                 WHERE k.chain_id = $1 AND k.keeper_address = $2
                   AND k.status IN ('mined', 'failed') AND k.block_number >= $3
                 ORDER BY k.nonce",
                &[
                    &self.chain_id,
                    &self.keeper.as_slice(),
                    &to_i64(min_block, "block number")?,
                ],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let hash: Vec<u8> = r.get(2);
                Ok((
                    r.get(0),
                    r.get(1),
                    B256::try_from(hash.as_slice())
                        .map_err(|_| Error::Inconsistent("keeper_txs: bad hash".into()))?,
                    r.get::<_, i64>(3) as u64,
                ))
            })
            .collect()
    }

    /// A reorg took a closed step's transaction out of the chain: the step is open again and
    /// its journaled bytes (same nonce) are re-broadcast by the next reconcile.
    pub async fn reopen(&self, step_id: i64, tx_id: i64) -> Result<()> {
        let mut client = self.pool.get().await?;
        let db = client.transaction().await?;
        db.execute(
            "UPDATE keeper_txs SET status = 'pending', gas_used = NULL, effective_gas_price = NULL,
                                   fee_paid_wei = NULL, sent_at = NULL, updated_at = now()
             WHERE id = $1",
            &[&tx_id],
        )
        .await?;
        db.execute(
            "UPDATE keeper_steps SET status = 'pending', tx_hash = NULL, block_number = NULL,
                                     error = 'reorged out; re-broadcasting', finished_at = NULL,
                                     updated_at = now()
             WHERE id = $1",
            &[&step_id],
        )
        .await?;
        db.commit().await?;
        Ok(())
    }

    /// The deciding transaction of a closed step was re-mined in another block.
    pub async fn move_block(&self, step_id: i64, block: u64) -> Result<()> {
        let client = self.pool.get().await?;
        client
            .execute(
                "UPDATE keeper_steps SET block_number = $2, updated_at = now() WHERE id = $1",
                &[&step_id, &to_i64(block, "block number")?],
            )
            .await?;
        Ok(())
    }

    /// Every open step of this keeper, by nonce, with its transactions.
    pub async fn open_steps(&self) -> Result<Vec<OpenStep>> {
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
        let txs = client
            .query(
                "SELECT step_id, id, nonce, tx_hash, raw_tx, gas_limit, max_fee_per_gas::TEXT,
                        max_priority_fee_per_gas::TEXT, status,
                        (EXTRACT(EPOCH FROM (now() - sent_at)) * 1000)::BIGINT
                 FROM keeper_txs WHERE step_id = ANY($1) ORDER BY id",
                &[&ids],
            )
            .await?;
        let mut out = Vec::with_capacity(steps.len());
        for s in &steps {
            let id: i64 = s.get(0);
            let mut rows = Vec::new();
            for t in txs.iter().filter(|t| t.get::<_, i64>(0) == id) {
                let hash: Vec<u8> = t.get(3);
                let fee: String = t.get(6);
                let prio: String = t.get(7);
                rows.push(TxRow {
                    id: t.get(1),
                    tx: SignedTx {
                        nonce: t.get::<_, i64>(2) as u64,
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
            out.push(OpenStep {
                id,
                subscription_id: s.get::<_, i64>(1) as u64,
                period: s.get(2),
                attempt: s.get(3),
                nonce: s.get::<_, i64>(4) as u64,
                txs: rows,
            });
        }
        Ok(out)
    }

    /// Number of open (pending or sent) steps of this keeper.
    pub async fn open_count(&self) -> Result<usize> {
        let client = self.pool.get().await?;
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM keeper_steps
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
    step_id: i64,
    tx: &SignedTx,
) -> Result<i64> {
    let row = db
        .query_one(
            "INSERT INTO keeper_txs (step_id, nonce, tx_hash, raw_tx, gas_limit, max_fee_per_gas,
                                     max_priority_fee_per_gas)
             VALUES ($1, $2, $3, $4, $5, $6::TEXT::NUMERIC, $7::TEXT::NUMERIC)
             -- A step taken up again after a refusal may sign the very same bytes (same
             -- nonce, same fees): that is the same transaction, so its row is reused.
             ON CONFLICT (tx_hash) DO UPDATE SET status = 'pending', error = NULL, updated_at = now()
                 WHERE keeper_txs.step_id = EXCLUDED.step_id AND keeper_txs.status = 'failed'
             RETURNING id",
            &[
                &step_id,
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
