//! Subscriptions as the API serves them (rows of the indexer's projection), scoped by the
//! merchant's wallet, with their ledgers.

use chainsub_core::ChainId;
use chainsub_core::LedgerKind;
use std::sync::LazyLock;

use alloy::primitives::Address;
use chainsub_core::{EventId, PlanId, SubscriptionId, SubscriptionStatus};
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::chain::{
    ChainRow, Columns, WithChain, address, ledger_kind, opt_time, time, typed_by, units,
};
use crate::page::{self, keyset};
use crate::{Error, MerchantScope, Page, Result};

/// One subscription as the API serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRow {
    pub id: SubscriptionId,
    pub onchain_id: i64,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    /// The merchant's plan (`None` when the on-chain plan is not one of theirs through us).
    pub plan_id: Option<PlanId>,
    pub plan_onchain_id: i64,
    pub customer_external_id: Option<String>,
    /// Whether the on-chain customer reference resolved to a customer.
    pub customer_reference: CustomerReference,
    pub subscriber: Address,
    /// Base units (`None` beyond u128).
    pub amount: Option<u128>,
    pub period: i32,
    pub current_period_start: DateTime<Utc>,
    pub current_period_end: DateTime<Utc>,
    pub failed_attempts: i32,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub ended_reason: Option<String>,
    /// When the free trial ends (or ended); `None` without a trial.
    pub trial_end: Option<DateTime<Utc>>,
    /// A downgrade scheduled for the next renewal (at the current period's end), if any.
    pub pending_plan_change: Option<PendingPlanRow>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The creating event.
    pub chain: ChainRow,
}

impl SubscriptionRow {
    /// When the keeper will next try to charge: the period end unless it ends there, the
    /// retry time while past due, nothing once terminal (the API's `nextPaymentAt`).
    pub fn next_payment_at(&self) -> Option<DateTime<Utc>> {
        match self.status {
            SubscriptionStatus::Active | SubscriptionStatus::Trialing
                if !self.cancel_at_period_end =>
            {
                Some(self.current_period_end)
            }
            SubscriptionStatus::PastDue => self.next_retry_at,
            _ => None,
        }
    }

    fn from_row(r: &Row) -> Result<Self> {
        Self::at(r, &SubCols::of(r.columns())?)
    }

    /// A row of a result whose column positions are known.
    fn at(r: &Row, c: &SubCols) -> Result<Self> {
        let (s, chain) = (&c.own, &c.chain);
        Ok(Self {
            id: parse_id(r.try_get(s.public_id)?)?,
            onchain_id: r.try_get(s.onchain_id)?,
            status: SubscriptionStatus::parse(r.try_get(s.status)?)
                .map_err(|e| Error::Inconsistent(e.to_string()))?,
            cancel_at_period_end: r.try_get(s.cancel_at_period_end)?,
            plan_id: r
                .try_get::<_, Option<&str>>(s.plan_public_id)?
                .and_then(PlanId::parse),
            plan_onchain_id: r.try_get(s.plan_onchain_id)?,
            customer_reference: CustomerReference::of(
                r.try_get(s.customer_ref)?,
                r.try_get::<_, Option<&str>>(s.customer_external_id)?
                    .is_some(),
            ),
            customer_external_id: r.try_get(s.customer_external_id)?,
            subscriber: address(r.try_get(s.subscriber)?)?,
            amount: units(r.try_get(s.amount)?),
            period: r.try_get(s.period)?,
            current_period_start: time(r, s.current_period_start)?,
            current_period_end: time(r, s.current_period_end)?,
            failed_attempts: r.try_get(s.failed_attempts)?,
            next_retry_at: opt_time(r, s.next_retry_at)?,
            ended_reason: r.try_get(s.ended_reason)?,
            trial_end: opt_time(r, s.trial_end)?,
            pending_plan_change: match r.try_get::<_, Option<i64>>(s.pending_plan_onchain_id)? {
                None => None,
                Some(plan_onchain_id) => Some(PendingPlanRow {
                    plan_id: r
                        .try_get::<_, Option<&str>>(s.pending_plan_public_id)?
                        .and_then(PlanId::parse),
                    plan_onchain_id,
                    amount: r
                        .try_get::<_, Option<&str>>(s.pending_amount)?
                        .and_then(units),
                }),
            },
            created_at: time(r, s.created_at)?,
            updated_at: time(r, s.updated_at)?,
            chain: ChainRow::at(r, chain)?,
        })
    }
}

columns! {
    /// Where [`SubscriptionRow`]'s own columns are in a result.
    SubscriptionCols {
        public_id,
        onchain_id,
        status,
        cancel_at_period_end,
        plan_public_id,
        plan_onchain_id,
        customer_ref,
        customer_external_id,
        subscriber,
        amount,
        period,
        current_period_start,
        current_period_end,
        failed_attempts,
        next_retry_at,
        ended_reason,
        trial_end,
        pending_plan_onchain_id,
        pending_plan_public_id,
        pending_amount,
        created_at,
        updated_at,
    }
}

/// A plan change scheduled for a subscription's next renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPlanRow {
    /// The merchant's plan it moves to (`None` when not one of theirs through us).
    pub plan_id: Option<PlanId>,
    pub plan_onchain_id: i64,
    /// That plan's amount per period, base units (`None` beyond u128).
    pub amount: Option<u128>,
}

/// Where all of [`SubscriptionRow`]'s columns are in a result.
type SubCols = WithChain<SubscriptionCols>;

/// What a subscription's on-chain `customerRef` resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomerReference {
    /// Zero: subscribed without a customer (a link without one, or outside our checkout).
    None,
    /// Made by our checkout for this merchant's customer and this very wallet.
    Matched,
    /// Not one we made for this wallet (e.g. copied from another subscription's public log):
    /// no customer is named.
    Unmatched,
}

impl CustomerReference {
    /// From the stored reference and whether a customer was resolved.
    pub fn of(customer_ref: &[u8], resolved: bool) -> Self {
        if customer_ref.iter().all(|b| *b == 0) {
            Self::None
        } else if resolved {
            Self::Matched
        } else {
            Self::Unmatched
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Matched => "matched",
            Self::Unmatched => "unmatched",
        }
    }
}

/// One entry of a subscription's ledger: a charge, a failed charge, a proration or a refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    /// The event that recorded it.
    pub event_id: EventId,
    pub kind: LedgerKind,
    /// Base units, a magnitude (`None` beyond u128): a refund is money back (stored negative;
    /// its kind says so).
    pub amount: Option<u128>,
    pub period: i32,
    pub period_start: Option<DateTime<Utc>>,
    pub period_end: Option<DateTime<Utc>>,
    pub attempt: i32,
    pub failure_reason: Option<String>,
    pub block_time: DateTime<Utc>,
    pub chain: ChainRow,
}

impl LedgerRow {
    fn from_row(r: &Row) -> Result<Self> {
        let id: &str = r.try_get("public_id")?;
        Ok(Self {
            event_id: EventId::parse(id)
                .ok_or_else(|| Error::Inconsistent(format!("event id {id:?}")))?,
            kind: ledger_kind(r.try_get("kind")?)?,
            amount: units(r.try_get("amount")?),
            period: r.try_get("period")?,
            period_start: r.try_get("period_start")?,
            period_end: r.try_get("period_end")?,
            attempt: r.try_get("attempt")?,
            failure_reason: r.try_get("failure_reason")?,
            block_time: r.try_get("block_time")?,
            chain: ChainRow::from_row(r)?,
        })
    }
}

fn parse_id(id: &str) -> Result<SubscriptionId> {
    SubscriptionId::parse(id).ok_or_else(|| Error::Inconsistent(format!("subscription id {id:?}")))
}

/// Columns and joins; `$1` merchant id, `$2` merchant wallet, `$3` chain id. The chain's
/// indexed head is one row, read once per statement (an uncorrelated subquery), not joined
/// to each row of a page.
const SELECT: &str = "SELECT s.onchain_id, s.public_id, s.status, s.cancel_at_period_end, \
    s.subscriber, s.amount::TEXT AS amount, s.customer_external_id, s.customer_ref, s.period, \
    s.current_period_start, s.current_period_end, s.failed_attempts, s.next_retry_at, \
    s.ended_reason, s.created_at, s.updated_at, s.plan_onchain_id, p.public_id AS plan_public_id, \
    s.trial_end, s.pending_plan_onchain_id, s.pending_amount::TEXT AS pending_amount, \
    pp.public_id AS pending_plan_public_id, ce.chain_id, ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, \
    ce.log_index, \
    (SELECT cur.block_number FROM indexer_cursor cur WHERE cur.chain_id = $3) AS indexed_block \
    FROM subscriptions s \
    JOIN chain_events ce ON ce.id = s.created_event_id \
    LEFT JOIN chain_plans cp ON cp.chain_id = s.chain_id AND cp.onchain_id = s.plan_onchain_id \
    LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = $1 \
    LEFT JOIN chain_plans pcp ON pcp.chain_id = s.chain_id \
         AND pcp.onchain_id = s.pending_plan_onchain_id \
    LEFT JOIN plans pp ON pp.plan_ref = pcp.plan_ref AND pp.merchant_id = $1 \
    WHERE s.merchant_wallet = $2 AND s.chain_id = $3::bigint";

/// The plan filter: the subscriptions of the merchant's plan with public id `$5`. An
/// equality with a scalar subquery (the contract refuses a second plan with the same
/// reference for one merchant; another merchant's plan may carry the same reference, hence
/// the wallet), so `(merchant_wallet, plan_onchain_id, onchain_id)` serves it as an index
/// condition; `IN (…)` read every subscription of the plan and sorted them.
const PLAN_IN: &str = "s.plan_onchain_id = (SELECT cp2.onchain_id FROM plans p2 \
    JOIN chain_plans cp2 ON cp2.plan_ref = p2.plan_ref AND cp2.chain_id = $3 \
    AND cp2.merchant_wallet = $2 \
    WHERE p2.public_id = $5 AND p2.merchant_id = $1 ORDER BY cp2.onchain_id LIMIT 1)";

/// The list filters. Each filtered list statement makes one of them its *leading* filter (a
/// plain equality that its index serves); the others are `($n IS NULL OR …)` parameters.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    pub status: Option<SubscriptionStatus>,
    /// A plan's public id; an unknown or other merchant's plan matches nothing.
    pub plan: Option<&'a str>,
    pub customer_external_id: Option<&'a str>,
}

#[derive(Clone, Copy)]
enum Leading {
    Status,
    Plan,
    Customer,
}

impl Filter<'_> {
    /// The most selective filter given, whose index the statement should use (`None`: no
    /// filter at all).
    fn leading(&self) -> Option<Leading> {
        if self.customer_external_id.is_some() {
            Some(Leading::Customer)
        } else if self.plan.is_some() {
            Some(Leading::Plan)
        } else if self.status.is_some() {
            Some(Leading::Status)
        } else {
            None
        }
    }
}

/// The pages without any filter (what a merchant's poller asks for most): `$4` cursor key,
/// `$5` rows to fetch. Not the filtered statements with three NULL parameters: under a
/// generic plan Postgres still evaluates their `($n IS NULL OR …)` conditions and plans the
/// joins for unknown filters: `bench/api/ab` measured 5,260 against 5,905 pages a second
/// (four 10 s rounds each), Postgres 243 against 202 µs a page.
static UNFILTERED: LazyLock<[String; 2]> =
    LazyLock::new(|| keyset("s.onchain_id", 4, 5).map(|tail| format!("{SELECT}{tail}")));

/// The 6 filtered list statements: 3 leading filters x 2 directions. `$4` status, `$5` plan
/// public id, `$6` customer, `$7` cursor key, `$8` rows to fetch.
static LIST: LazyLock<[[String; 2]; 3]> = LazyLock::new(|| {
    let status = |lead| page::filter(lead, 4, "text", "s.status = $4");
    let plan = |lead| page::filter(lead, 5, "text", PLAN_IN);
    let customer = |lead| page::filter(lead, 6, "text", "s.customer_external_id = $6");
    let [older, newer] = keyset("s.onchain_id", 7, 8);
    let text = |(st, pl, cu): (bool, bool, bool)| {
        [&older, &newer]
            .map(|tail| format!("{SELECT}{}{}{}{tail}", status(st), plan(pl), customer(cu)))
    };
    [
        text((true, false, false)),
        text((false, true, false)),
        text((false, false, true)),
    ]
});

/// A page of `scope`'s subscriptions on `chain_id`, newest first. Returns the rows and
/// whether there are more.
pub async fn list(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    filter: &Filter<'_>,
    page: Page,
) -> Result<(Vec<SubscriptionRow>, bool)> {
    let typed = typed_by(SubscriptionRow::at);
    let Some(leading) = filter.leading() else {
        let text = &UNFILTERED[page.direction.index()];
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
            &scope.id(),
            &scope.wallet_bytes(),
            &chain_id,
            &page.key,
            &page.fetch(),
        ];
        return page::fetch(client, text, &params, page, typed).await;
    };
    let text = &LIST[leading as usize][page.direction.index()];
    let status = filter.status.map(SubscriptionStatus::as_str);
    page::fetch(
        client,
        text,
        &[
            &scope.id(),
            &scope.wallet_bytes(),
            &chain_id,
            &status,
            &filter.plan,
            &filter.customer_external_id,
            &page.key,
            &page.fetch(),
        ],
        page,
        typed,
    )
    .await
}

/// The cursor key of one of `scope`'s subscriptions (`None` for an unknown or other
/// merchant's id).
pub async fn cursor_key(
    client: &impl GenericClient,
    scope: &MerchantScope,
    id: &SubscriptionId,
) -> Result<Option<i64>> {
    let stmt = client
        .prepare_cached(
            "SELECT onchain_id FROM subscriptions WHERE public_id = $1 AND merchant_wallet = $2",
        )
        .await?;
    Ok(client
        .query_opt(&stmt, &[&id.as_str(), &scope.wallet_bytes()])
        .await?
        .map(|r| r.get(0)))
}

/// One of `scope`'s subscriptions (`None` for an unknown or other merchant's id).
pub async fn get(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    id: &SubscriptionId,
) -> Result<Option<SubscriptionRow>> {
    static ONE: LazyLock<String> = LazyLock::new(|| format!("{SELECT} AND s.public_id = $4::text"));
    let stmt = client.prepare_cached(&ONE).await?;
    client
        .query_opt(
            &stmt,
            &[&scope.id(), &scope.wallet_bytes(), &chain_id, &id.as_str()],
        )
        .await?
        .as_ref()
        .map(SubscriptionRow::from_row)
        .transpose()
}

/// At most this many subscriptions of one wallet are found by [`of_wallet`].
pub const MAX_OF_WALLET: i64 = 50;

/// `scope`'s subscriptions paid from `wallet` (the dashboard's search), newest first, at
/// most [`MAX_OF_WALLET`]; index `subscriptions_subscriber` serves it.
pub async fn of_wallet(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    wallet: Address,
) -> Result<Vec<SubscriptionRow>> {
    static OF_WALLET: LazyLock<String> = LazyLock::new(|| {
        format!("{SELECT} AND s.subscriber = $4 ORDER BY s.onchain_id DESC LIMIT $5")
    });
    let stmt = client.prepare_cached(&OF_WALLET).await?;
    client
        .query(
            &stmt,
            &[
                &scope.id(),
                &scope.wallet_bytes(),
                &chain_id,
                &wallet.as_slice(),
                &MAX_OF_WALLET,
            ],
        )
        .await?
        .iter()
        .map(SubscriptionRow::from_row)
        .collect()
}

/// The ledger of one of `scope`'s subscriptions, oldest first (empty for another merchant's).
pub async fn ledger(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    id: &SubscriptionId,
) -> Result<Vec<LedgerRow>> {
    let stmt = client
        .prepare_cached(
            "SELECT le.kind, abs(le.amount)::TEXT AS amount, le.period, le.period_start, \
             le.period_end, le.attempt, le.failure_reason, le.block_time, ce.public_id, \
             ce.chain_id, ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, \
             ce.log_index, cur.block_number AS indexed_block \
             FROM ledger_entries le \
             JOIN chain_events ce ON ce.id = le.event_id \
             JOIN subscriptions s ON s.chain_id = le.chain_id \
                  AND s.onchain_id = le.subscription_id \
             LEFT JOIN indexer_cursor cur ON cur.chain_id = le.chain_id \
             WHERE s.public_id = $2 AND s.merchant_wallet = $3 AND le.chain_id = $1 \
             ORDER BY le.event_id",
        )
        .await?;
    client
        .query(&stmt, &[&chain_id, &id.as_str(), &scope.wallet_bytes()])
        .await?
        .iter()
        .map(LedgerRow::from_row)
        .collect()
}

/// The list statements, for tests that check their plans.
#[doc(hidden)]
pub fn list_statements() -> Vec<&'static str> {
    LIST.iter()
        .flatten()
        .chain(UNFILTERED.iter())
        .map(String::as_str)
        .collect()
}
