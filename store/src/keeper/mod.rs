//! The keeper's reads of the index and its send journal (`keeper_steps`, `keeper_txs`; see
//! migrations/sql/0005_keeper.sql). Token amounts and fees are NUMERIC in SQL and go through
//! text, so no precision is lost.

use alloy::primitives::{Address, U256};
use chainsub_core::ChainId;
use chainsub_core::OnchainSubscriptionId;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;

use crate::{Error, Result};

mod journal;
mod risks;

pub use risks::{FundsObservation, Upcoming};

/// What the keeper does for a due subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Pull the next period (or retry a failed pull).
    Charge,
    /// End a cancel-at-period-end subscription (the same `charge` call; the contract ends it).
    End,
}

impl Action {
    /// The journal's name for the action.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Charge => "charge",
            Self::End => "end",
        }
    }
}

/// One due step: the journal key that makes a send unique. Every attempt on chain is its own
/// step: a token-side failure counts no attempt (period and attempt stay the same), but its
/// retry falls due later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub subscription_id: OnchainSubscriptionId,
    /// The period being charged: `subscriptions.period + 1`.
    pub period: i32,
    /// `failed_attempts + 1` for a charge, 0 for the end step.
    pub attempt: i32,
    /// When it fell due (chain time): the period end, or a past-due retry's time.
    pub due_at: DateTime<Utc>,
    pub action: Action,
}

/// A live subscription of the index whose next step is due by chain time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSubscription {
    pub onchain_id: OnchainSubscriptionId,
    pub period: i32,
    pub failed_attempts: i32,
    pub cancel_at_period_end: bool,
    pub subscriber: Address,
    /// The merchant the subscription pays (its per-merchant gas budget).
    pub merchant: Address,
    pub amount: U256,
    /// When the step fell due: the period end, or for a past-due retry the retry time.
    pub due_at: DateTime<Utc>,
    /// On-chain reverts of this very step so far (a retry of a reverted charge).
    pub reverts: i32,
}

impl DueSubscription {
    /// The step the keeper would send for this subscription now.
    pub fn step(&self) -> Step {
        if self.cancel_at_period_end {
            Step {
                subscription_id: self.onchain_id,
                period: self.period + 1,
                attempt: 0,
                due_at: self.due_at,
                action: Action::End,
            }
        } else {
            Step {
                subscription_id: self.onchain_id,
                period: self.period + 1,
                attempt: self.failed_attempts + 1,
                due_at: self.due_at,
                action: Action::Charge,
            }
        }
    }
}

/// The journal records what the chain sender (`chainsub-sender`) signs and sees mined.
pub use chainsub_core::{Outcome, SignedTx};

/// A journaled transaction of an open step.
#[derive(Debug, Clone)]
pub struct TxRow {
    pub id: i64,
    /// The steps it carries, in the order its call names them.
    pub step_ids: Vec<i64>,
    pub tx: SignedTx,
    pub status: String,
    /// Milliseconds since the node acknowledged it (None while pending).
    pub sent_age_ms: Option<i64>,
}

/// A step that is not finished (pending or sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenStep {
    pub id: i64,
    pub subscription_id: OnchainSubscriptionId,
    pub period: i32,
    pub attempt: i32,
}

/// A send in flight: the open steps that share one nonce (one transaction carries them all:
/// `charge(id)` for one step, `chargeMany(ids)` for more, and any replacement carries the
/// same), with its transactions, oldest first.
#[derive(Debug, Clone)]
pub struct OpenSend {
    pub nonce: u64,
    pub steps: Vec<OpenStep>,
    pub txs: Vec<TxRow>,
}

impl OpenSend {
    /// The journal ids of its steps.
    pub fn step_ids(&self) -> Vec<i64> {
        self.steps.iter().map(|s| s.id).collect()
    }

    /// The on-chain ids its transaction charges, in the order it charges them.
    pub fn subscription_ids(&self) -> Vec<OnchainSubscriptionId> {
        self.steps.iter().map(|s| s.subscription_id).collect()
    }
}

/// What journaling a send did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Journaled {
    /// Every step is journaled with the transaction: (step ids in order, tx id).
    New { step_ids: Vec<i64>, tx_id: i64 },
    /// Nothing was written: these steps (indexes into the request) were journaled before
    /// (sent by an earlier pass or a keeper that died), so they must not be sent again.
    Already(Vec<usize>),
}

/// Journal and index access for one chain, contract and keeper key.
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    chain_id: ChainId,
    contract: Address,
    keeper: Address,
    /// Retries of a step that reverted on chain (0: a revert is final).
    max_revert_retries: i32,
    /// Which subscriptions the keeper is responsible for.
    scope: ChargeScope,
}

/// The SQL condition "the keeper is responsible for subscription `$alias`": plans the service
/// provisioned (an API plan with the on-chain plan's reference and merchant), plans of allowed
/// merchants (parameter `$allow`), or everything when so configured (parameter `$any`). One
/// text for the charges, the watchdog and the renewal-at-risk checks.
macro_rules! in_scope {
    ($alias:literal, $any:literal, $allow:literal) => {
        concat!(
            "(",
            $any,
            " OR ",
            $alias,
            ".merchant_wallet = ANY(",
            $allow,
            ") OR EXISTS (
                SELECT 1 FROM chain_plans cp
                JOIN merchants m ON m.wallet = cp.merchant_wallet
                JOIN plans p ON p.merchant_id = m.id AND p.plan_ref = cp.plan_ref
                WHERE cp.chain_id = ",
            $alias,
            ".chain_id AND cp.onchain_id = ",
            $alias,
            ".plan_onchain_id))"
        )
    };
}
pub(crate) use in_scope;

/// `live`: the index's live subscriptions of chain `$1` whose period ended by `$2`, each with
/// the time its next step falls due (`due_at`): a past-due subscription (not cancelling)
/// retries at `next_retry_at`, everything else is due at its period end. Mirrors
/// `SubscriptionManager.nextAttemptAt`.
macro_rules! due_steps {
    () => {
        r#"WITH live AS (
                     SELECT s.*,
                            CASE WHEN s.status = 'past_due' AND NOT s.cancel_at_period_end
                                 THEN GREATEST(COALESCE(s.next_retry_at, s.current_period_end),
                                               s.current_period_end)
                                 ELSE s.current_period_end END AS due_at
                     FROM subscriptions s
                     WHERE s.chain_id = $1 AND s.status IN ('active', 'past_due', 'trialing')
                       AND s.current_period_end <= $2)"#
    };
}

/// The join condition "journal row `$k` is the next step of live subscription `$l`" (see
/// [`Step`]: subscription, period, attempt and due time).
macro_rules! step_of {
    ($l:literal, $k:literal) => {
        concat!(
            $k,
            ".chain_id = ",
            $l,
            ".chain_id AND ",
            $k,
            ".subscription_id = ",
            $l,
            ".onchain_id
                  AND ",
            $k,
            ".period = ",
            $l,
            ".period + 1
                  AND ",
            $k,
            ".attempt = CASE WHEN ",
            $l,
            ".cancel_at_period_end THEN 0
                                       ELSE ",
            $l,
            ".failed_attempts + 1 END
                  AND ",
            $k,
            ".due_at = ",
            $l,
            ".due_at"
        )
    };
}

/// What one keeper pass has read and not sent: `Store::due` reads past them.
#[derive(Debug, Clone, Default)]
pub struct PassedOver {
    /// On-chain ids of subscriptions skipped this pass (not fundable yet, preflight
    /// reverted, already journaled...).
    pub subscriptions: Vec<i64>,
    /// Merchants whose gas budget this pass has used up.
    pub merchants: Vec<Address>,
}

/// The subscriptions a keeper charges.
#[derive(Debug, Clone, Default)]
pub struct ChargeScope {
    /// Every plan on the contract.
    pub any_plan: bool,
    /// Plans of these merchants, provisioned by the service or not.
    pub allow_merchants: Vec<Address>,
}

fn to_i64(v: u64, what: &str) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::Inconsistent(format!("{what} {v} does not fit in BIGINT")))
}

fn parse_u128(s: &str) -> Result<u128> {
    s.parse()
        .map_err(|_| Error::Inconsistent(format!("numeric {s} does not fit in u128")))
}

impl Store {
    /// A store over `pool` for this keeper.
    pub fn new(pool: Pool, chain_id: ChainId, contract: Address, keeper: Address) -> Result<Self> {
        Ok(Self {
            pool,
            chain_id,
            contract,
            keeper,
            max_revert_retries: 0,
            scope: ChargeScope::default(),
        })
    }

    /// `$6` of [`in_scope!`]: the merchants charged beside the service's own plans.
    fn allowed_merchants(&self) -> Vec<&[u8]> {
        self.scope
            .allow_merchants
            .iter()
            .map(|a| a.as_slice())
            .collect()
    }

    /// Charges `scope` (default: only plans this service provisioned).
    pub fn with_scope(mut self, scope: ChargeScope) -> Self {
        self.scope = scope;
        self
    }

    /// Gas units each merchant's charges used in the last `window_secs`: gas used once
    /// mined, the gas limit while in flight (a batch's shared equally by its steps). One
    /// statement for every merchant, read once per pass.
    pub async fn merchant_gas_in_window(
        &self,
        window_secs: u64,
    ) -> Result<std::collections::HashMap<Address, u64>> {
        let client = self.pool.get().await?;
        let rows = client
            .query(
                // A transaction carrying many steps counts for each step's merchant in equal
                // parts.
                "SELECT s.merchant_wallet,
                        COALESCE(SUM(COALESCE(t.gas_used,
                            CASE WHEN t.status IN ('pending', 'sent') THEN t.gas_limit ELSE 0 END)::NUMERIC
                            / cardinality(t.step_ids)), 0)::BIGINT
                 FROM keeper_txs t CROSS JOIN LATERAL unnest(t.step_ids) AS carried(step_id)
                 JOIN keeper_steps k ON k.id = carried.step_id
                 JOIN subscriptions s ON s.chain_id = k.chain_id AND s.onchain_id = k.subscription_id
                 WHERE k.chain_id = $1 AND t.created_at > now() - make_interval(secs => $2)
                 GROUP BY s.merchant_wallet",
                &[&self.chain_id, &(window_secs as f64)],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let wallet: Vec<u8> = r.get(0);
                let merchant = Address::try_from(wallet.as_slice()).map_err(|_| {
                    Error::Inconsistent("subscriptions: bad merchant wallet".into())
                })?;
                Ok((merchant, r.get::<_, i64>(1).max(0) as u64))
            })
            .collect()
    }

    /// Takes up a step that reverted on chain again, after its backoff, up to `n` times.
    pub fn with_revert_retries(mut self, n: u32) -> Self {
        self.max_revert_retries = i32::try_from(n).unwrap_or(i32::MAX);
        self
    }

    /// Steps abandoned after reverting on chain more often than the retries allow.
    pub async fn abandoned_count(&self) -> Result<i64> {
        let client = self.pool.get().await?;
        Ok(client
            .query_one(
                "SELECT count(*) FROM keeper_steps
                 WHERE chain_id = $1 AND status = 'failed' AND tx_hash IS NOT NULL
                   AND reverts > $2",
                &[&self.chain_id, &self.max_revert_retries],
            )
            .await?
            .get(0))
    }

    /// The watchdog: live subscriptions of the keeper's scope whose step is due at `chain_now`
    /// while the journal holds that very step as mined more than `settled` blocks below the
    /// index's cursor (a reorg the index has seen but the keeper has not yet re-checked must
    /// not count). The chain took the step, the index says it is still due, and `due()` will
    /// never offer it again: renewals of that subscription have silently stopped. Always 0
    /// unless the step identity misses a way the contract records an attempt (a token-side
    /// failure once did: it counts no attempt).
    pub async fn stranded(&self, chain_now: DateTime<Utc>, settled: u64) -> Result<i64> {
        let client = self.pool.get().await?;
        Ok(client
            .query_one(
                concat!(
                    due_steps!(),
                    r#"
                 SELECT count(*)
                 FROM live l
                 JOIN keeper_steps k ON "#,
                    step_of!("l", "k"),
                    r#"
                 WHERE l.due_at <= $2 AND k.status = 'mined'
                   AND k.block_number <= (SELECT block_number FROM indexer_cursor
                                          WHERE chain_id = $1) - $5
                   AND "#,
                    in_scope!("l", "$3", "$4"),
                ),
                &[
                    &self.chain_id,
                    &chain_now,
                    &self.scope.any_plan,
                    &self.allowed_merchants(),
                    &to_i64(settled, "blocks")?,
                ],
            )
            .await?
            .get(0))
    }

    /// Live subscriptions whose next step is due at `chain_now` and that have no journal row
    /// for that step yet, earliest due first — but for `pass`'s: the subscriptions and
    /// merchants it already passed over, so that what one read could not send never hides
    /// what is due behind it.
    pub async fn due(
        &self,
        chain_now: DateTime<Utc>,
        limit: i64,
        pass: &PassedOver,
    ) -> Result<Vec<DueSubscription>> {
        let client = self.pool.get().await?;
        let merchants: Vec<&[u8]> = pass.merchants.iter().map(|m| m.as_slice()).collect();
        let rows = client
            .query(
                concat!(
                    due_steps!(),
                    r#"
                 SELECT l.onchain_id, l.period, l.failed_attempts, l.cancel_at_period_end,
                        l.subscriber, l.amount::TEXT, l.due_at, COALESCE(k.reverts, 0),
                        l.merchant_wallet
                 FROM live l
                 LEFT JOIN keeper_steps k ON "#,
                    step_of!("l", "k"),
                    r#"
                 WHERE l.due_at <= $2
                   AND l.onchain_id <> ALL($7) AND l.merchant_wallet <> ALL($8)
                   AND "#,
                    in_scope!("l", "$5", "$6"),
                    r#"
                   AND (k.id IS NULL
                        -- A step closed without ever being mined (refused by the node, or its
                        -- nonce taken by another transaction) did not happen: it may be retried.
                        OR (k.status = 'failed' AND k.tx_hash IS NULL)
                        -- A step that reverted on chain is retried after its backoff, a
                        -- bounded number of times.
                        OR (k.status = 'failed' AND k.tx_hash IS NOT NULL
                            AND k.reverts <= $4 AND k.retry_at <= now()))
                 ORDER BY l.due_at, l.onchain_id
                 LIMIT $3"#
                ),
                &[
                    &self.chain_id,
                    &chain_now,
                    &limit,
                    &self.max_revert_retries,
                    &self.scope.any_plan,
                    &self.allowed_merchants(),
                    &pass.subscriptions,
                    &merchants,
                ],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let id: OnchainSubscriptionId = r.try_get(0)?;
                let subscriber: Vec<u8> = r.get(4);
                let amount: String = r.get(5);
                Ok(DueSubscription {
                    onchain_id: id,
                    period: r.get(1),
                    failed_attempts: r.get(2),
                    cancel_at_period_end: r.get(3),
                    subscriber: Address::try_from(subscriber.as_slice()).map_err(|_| {
                        Error::Inconsistent(format!("subscription {id}: bad subscriber"))
                    })?,
                    amount: amount.parse().map_err(|_| {
                        Error::Inconsistent(format!("subscription {id}: bad amount"))
                    })?,
                    due_at: r.get(6),
                    reverts: r.get(7),
                    merchant: Address::try_from(r.get::<_, &[u8]>(8)).map_err(|_| {
                        Error::Inconsistent(format!("subscription {id}: bad merchant"))
                    })?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(cancel: bool, failed: i32) -> DueSubscription {
        DueSubscription {
            onchain_id: OnchainSubscriptionId::new(7).unwrap(),
            period: 3,
            failed_attempts: failed,
            cancel_at_period_end: cancel,
            subscriber: Address::ZERO,
            merchant: Address::ZERO,
            amount: U256::from(1),
            due_at: DateTime::<Utc>::UNIX_EPOCH,
            reverts: 0,
        }
    }

    #[test]
    fn step_charges_the_next_period_with_the_next_attempt() {
        let step = due(false, 0).step();
        assert_eq!(
            (step.period, step.attempt, step.action),
            (4, 1, Action::Charge)
        );
        let retry = due(false, 2).step();
        assert_eq!(
            (retry.period, retry.attempt, retry.action),
            (4, 3, Action::Charge)
        );
    }

    #[test]
    fn cancelling_subscription_has_a_single_end_step_whatever_its_failures() {
        for failed in [0, 1, 2] {
            let step = due(true, failed).step();
            assert_eq!(
                (step.period, step.attempt, step.action),
                (4, 0, Action::End)
            );
        }
    }
}
