//! The keeper's observations of upcoming charges (migrations 0017 and 0030): which renewals
//! are coming up, the one check per subscription and period with the
//! `subscription.renewal_at_risk` events (and their webhooks) it finds, and the one
//! `subscription.trial_will_end` notice per trial.

use alloy::primitives::{Address, B256, U256};
use chainsub_core::OnchainSubscriptionId;
use chrono::{DateTime, Utc};

use super::{Store, in_scope, parse_u128};
use crate::snapshot::stored_snapshot;
use crate::{Error, Result};

/// An active subscription whose renewal falls due within the warning lead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upcoming {
    pub onchain_id: OnchainSubscriptionId,
    /// The period whose charge falls due (`subscriptions.period + 1`).
    pub period: i32,
    pub subscriber: Address,
    pub amount: U256,
    pub due_at: DateTime<Utc>,
}

/// What the chain said at one block about a subscriber's funds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FundsObservation {
    pub block_number: u64,
    pub block_hash: B256,
    pub block_time: DateTime<Utc>,
    pub balance: U256,
    pub allowance: U256,
}

/// A join of subscription `s` to `last`: its latest event's snapshot columns (the
/// subscription as last indexed), for an observation to carry.
macro_rules! last_snapshot {
    () => {
        concat!(
            " LEFT JOIN LATERAL (SELECT ",
            stored_snapshot!("ce."),
            " FROM chain_events ce \
              WHERE ce.chain_id = s.chain_id AND ce.subscription_id = s.onchain_id \
                AND ce.snap_id IS NOT NULL \
              ORDER BY ce.id DESC LIMIT 1) AS last ON TRUE "
        )
    };
}

/// The CTE `queued` that writes a webhook outbox row for each observation the CTE `$cte`
/// returned (id, public_id, merchant_wallet, chain_id, subscription_id), in id order.
macro_rules! queue_webhooks {
    ($cte:literal) => {
        concat!(
            "queued AS (INSERT INTO webhook_outbox \
                 (event_id, event_public_id, merchant_wallet, chain_id, subscription_id) \
             SELECT id, public_id, merchant_wallet, chain_id, subscription_id FROM ",
            $cte,
            " ORDER BY id)"
        )
    };
}

impl Store {
    /// Active and trialing subscriptions (not ending at the period end) of this keeper's scope whose
    /// renewal falls due in `(chain_now, chain_now + lead]` and that have not been checked
    /// for that period yet, soonest first.
    pub async fn renewals_to_check(
        &self,
        chain_now: DateTime<Utc>,
        lead_secs: u64,
        limit: i64,
    ) -> Result<Vec<Upcoming>> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                concat!(
                    "SELECT s.onchain_id, s.period + 1, s.subscriber, s.amount::TEXT,
                        s.current_period_end
                 FROM subscriptions s
                 WHERE s.chain_id = $1 AND s.status IN ('active', 'trialing') AND NOT s.cancel_at_period_end
                   AND s.current_period_end > $2
                   AND s.current_period_end <= $2 + make_interval(secs => $3)
                   AND NOT EXISTS (
                        SELECT 1 FROM renewal_checks c
                        WHERE c.chain_id = s.chain_id AND c.subscription_id = s.onchain_id
                          AND c.period = s.period + 1)
                   AND ",
                    in_scope!("s", "$5", "$6"),
                    "
                 ORDER BY s.current_period_end, s.onchain_id
                 LIMIT $4"
                ),
                &[
                    &self.chain_id,
                    &chain_now,
                    &(lead_secs as f64),
                    &limit,
                    &self.scope.any_plan,
                    &self.allowed_merchants(),
                ],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let id: OnchainSubscriptionId = r.try_get(0)?;
                let bad =
                    |what: &str| Error::Inconsistent(format!("subscription {id}: bad {what}"));
                Ok(Upcoming {
                    onchain_id: id,
                    period: r.get(1),
                    subscriber: Address::try_from(r.get::<_, &[u8]>(2))
                        .map_err(|_| bad("subscriber"))?,
                    amount: U256::from(parse_u128(r.get(3))?),
                    due_at: r.get(4),
                })
            })
            .collect()
    }

    /// Records the check of `sub`'s renewal and, in the same statement, a
    /// `subscription.renewal_at_risk` event per shortfall (allowance, balance: less than
    /// this charge plus the wallet's other live charges due no later) with its webhook. At most once per subscription, period and reason: a second check of the same
    /// period (another keeper, a restart) writes nothing. Nothing either when the index has
    /// moved on (the subscription renewed, ended or is ending). Returns the reasons recorded.
    pub async fn record_renewal_check(
        &self,
        sub: &Upcoming,
        seen: &FundsObservation,
    ) -> Result<Vec<String>> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        // Event ids come from the sequence chain_events share, and the events list pages by
        // id: an id must not commit before a lower one the indexer holds in an open batch.
        // The indexer takes this row lock before it writes a batch; taking it first orders
        // this write after (or before) a whole batch.
        tx.execute(
            "SELECT 1 FROM indexer_cursor WHERE chain_id = $1 FOR UPDATE",
            &[&self.chain_id],
        )
        .await?;
        let rows = tx
            .query(
                concat!(
                "WITH checked AS (
                     INSERT INTO renewal_checks
                         (chain_id, subscription_id, period, block_number, block_hash, balance, allowance)
                     SELECT $1, $2, $3, $4, $5, $6::TEXT::NUMERIC, $7::TEXT::NUMERIC
                     FROM subscriptions s
                     WHERE s.chain_id = $1 AND s.onchain_id = $2 AND s.period + 1 = $3
                       AND s.status IN ('active', 'trialing') AND NOT s.cancel_at_period_end
                     ON CONFLICT DO NOTHING
                     RETURNING chain_id, subscription_id, period),
                 risks AS (
                     INSERT INTO renewal_risks (public_id, chain_id, contract, merchant_wallet,
                         subscription_id, plan_id, period, reason, amount, required, available,
                         due_at, block_number, block_hash, block_time, ",
                stored_snapshot!(""),
                ")
                     SELECT 'evt_' || md5('chainsub.renewal_at_risk:' || c.chain_id || ':'
                                          || c.subscription_id || ':' || c.period || ':' || r.reason),
                         c.chain_id, $8, s.merchant_wallet, s.onchain_id, s.plan_onchain_id,
                         c.period, r.reason, s.amount, need.total, r.available, s.current_period_end,
                         $4, $5, $9, ",
                stored_snapshot!("last."),
                "
                     FROM checked c
                     JOIN subscriptions s ON s.chain_id = c.chain_id AND s.onchain_id = c.subscription_id
",
                last_snapshot!(),
                "
                     -- The wallet's balance and allowance serve all its subscriptions: this
                     -- charge and every other live one due no later need them first.
                     CROSS JOIN LATERAL (
                         SELECT sum(o.amount) AS total FROM subscriptions o
                         WHERE o.subscriber = s.subscriber AND o.chain_id = s.chain_id
                           AND o.status IN ('active', 'past_due', 'trialing') AND NOT o.cancel_at_period_end
                           AND (o.current_period_end, o.onchain_id)
                               <= (s.current_period_end, s.onchain_id)) AS need
                     CROSS JOIN LATERAL (VALUES ('allowance', $7::TEXT::NUMERIC),
                                                ('balance', $6::TEXT::NUMERIC)) AS r(reason, available)
                     WHERE r.available < need.total
                     ORDER BY r.reason
                     ON CONFLICT DO NOTHING
                     RETURNING id, public_id, merchant_wallet, chain_id, subscription_id, reason),
                 ",
                queue_webhooks!("risks"),
                "
                 SELECT reason FROM risks ORDER BY id"
                ),
                &[
                    &self.chain_id,
                    &sub.onchain_id,
                    &sub.period,
                    &(seen.block_number as i64),
                    &seen.block_hash.as_slice(),
                    &seen.balance.to_string(),
                    &seen.allowance.to_string(),
                    &self.contract.as_slice(),
                    &seen.block_time,
                ],
            )
            .await?;
        tx.commit().await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Trialing subscriptions of this keeper's scope, not ending at the trial's end, whose
    /// trial ends in `(chain_now, chain_now + lead_secs]` and that have no trial notice yet,
    /// soonest first.
    pub async fn trials_to_notice(
        &self,
        chain_now: DateTime<Utc>,
        lead_secs: u64,
        limit: i64,
    ) -> Result<Vec<OnchainSubscriptionId>> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                concat!(
                    "SELECT s.onchain_id FROM subscriptions s
                     WHERE s.chain_id = $1 AND s.status = 'trialing' AND NOT s.cancel_at_period_end
                       AND s.current_period_end > $2
                       AND s.current_period_end <= $2 + make_interval(secs => $3)
                       AND NOT EXISTS (
                            SELECT 1 FROM renewal_risks k
                            WHERE k.chain_id = s.chain_id AND k.subscription_id = s.onchain_id
                              AND k.reason = 'trial_will_end')
                       AND ",
                    in_scope!("s", "$5", "$6"),
                    "
                     ORDER BY s.current_period_end, s.onchain_id
                     LIMIT $4"
                ),
                &[
                    &self.chain_id,
                    &chain_now,
                    &(lead_secs as f64),
                    &limit,
                    &self.scope.any_plan,
                    &self.allowed_merchants(),
                ],
            )
            .await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// Records a `subscription.trial_will_end` event (with its webhook) for each of `ids`
    /// still trialing and not ending at the trial's end — once per subscription, whoever
    /// records it first (another keeper, a restart: the same row). Observed at block `seen`
    /// (no funds are read: the renewal-at-risk check covers the first charge). Returns the
    /// subscriptions noticed.
    pub async fn record_trial_notices(
        &self,
        ids: &[OnchainSubscriptionId],
        seen: (u64, B256, DateTime<Utc>),
    ) -> Result<Vec<OnchainSubscriptionId>> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        // As in `record_renewal_check`: event ids must not commit before a lower one the
        // indexer holds in an open batch.
        tx.execute(
            "SELECT 1 FROM indexer_cursor WHERE chain_id = $1 FOR UPDATE",
            &[&self.chain_id],
        )
        .await?;
        let rows = tx
            .query(
                concat!(
                    "WITH notices AS (
                     INSERT INTO renewal_risks (public_id, chain_id, contract, merchant_wallet,
                         subscription_id, plan_id, period, reason, amount, required, available,
                         due_at, block_number, block_hash, block_time, ",
                    stored_snapshot!(""),
                    ")
                     SELECT 'evt_' || md5('chainsub.trial_will_end:' || s.chain_id || ':'
                                          || s.onchain_id),
                         s.chain_id, $3, s.merchant_wallet, s.onchain_id, s.plan_onchain_id,
                         s.period + 1, 'trial_will_end', s.amount, NULL, NULL,
                         s.current_period_end, $4, $5, $6, ",
                    stored_snapshot!("last."),
                    "
                     FROM subscriptions s
",
                    last_snapshot!(),
                    "
                     WHERE s.chain_id = $1 AND s.onchain_id = ANY($2)
                       AND s.status = 'trialing' AND NOT s.cancel_at_period_end
                     ORDER BY s.current_period_end, s.onchain_id
                     ON CONFLICT DO NOTHING
                     RETURNING id, public_id, merchant_wallet, chain_id, subscription_id),
                 ",
                    queue_webhooks!("notices"),
                    "
                 SELECT subscription_id FROM notices ORDER BY id"
                ),
                &[
                    &self.chain_id,
                    &ids,
                    &self.contract.as_slice(),
                    &(seen.0 as i64),
                    &seen.1.as_slice(),
                    &seen.2,
                ],
            )
            .await?;
        tx.commit().await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }
}
