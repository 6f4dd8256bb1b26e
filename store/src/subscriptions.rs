//! Subscriptions as the API serves them (rows of the indexer's projection), scoped by the
//! merchant's wallet, with their ledgers.

use std::sync::LazyLock;

use chainsub_core::{SubscriptionId, SubscriptionStatus};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::page::{self, keyset};
use crate::{MerchantScope, Page, Result};

/// Columns and joins; `$1` merchant id, `$2` merchant wallet, `$3` chain id.
const SELECT: &str = "SELECT s.onchain_id, s.public_id, s.status, s.cancel_at_period_end, \
    s.subscriber, s.amount::TEXT AS amount, s.customer_external_id, s.period, \
    s.current_period_start, s.current_period_end, s.failed_attempts, s.next_retry_at, \
    s.ended_reason, s.created_at, s.updated_at, s.plan_onchain_id, p.public_id AS plan_public_id, \
    ce.chain_id, ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, \
    ce.log_index, cur.block_number AS indexed_block \
    FROM subscriptions s \
    JOIN chain_events ce ON ce.id = s.created_event_id \
    LEFT JOIN chain_plans cp ON cp.chain_id = s.chain_id AND cp.onchain_id = s.plan_onchain_id \
    LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = $1 \
    LEFT JOIN indexer_cursor cur ON cur.chain_id = s.chain_id \
    WHERE s.merchant_wallet = $2 AND s.chain_id = $3::bigint";

/// The plan filter: the subscriptions of the merchant's plan with public id `$5`. An
/// equality with a scalar subquery (the contract refuses a second plan with the same
/// reference), so `(merchant_wallet, plan_onchain_id, onchain_id)` serves it as an index
/// condition; `IN (…)` read every subscription of the plan and sorted them.
const PLAN_IN: &str = "s.plan_onchain_id = (SELECT cp2.onchain_id FROM plans p2 \
    JOIN chain_plans cp2 ON cp2.plan_ref = p2.plan_ref AND cp2.chain_id = $3 \
    WHERE p2.public_id = $5 AND p2.merchant_id = $1 ORDER BY cp2.onchain_id LIMIT 1)";

/// The list filters. Each list statement makes one of them its *leading* filter (a plain
/// equality that its index serves); the others are `($n IS NULL OR …)` parameters.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    pub status: Option<SubscriptionStatus>,
    /// A plan's public id; an unknown or other merchant's plan matches nothing.
    pub plan: Option<&'a str>,
    pub customer_external_id: Option<&'a str>,
}

#[derive(Clone, Copy)]
enum Leading {
    None,
    Status,
    Plan,
    Customer,
}

impl Filter<'_> {
    /// The most selective filter given, whose index the statement should use.
    fn leading(&self) -> Leading {
        if self.customer_external_id.is_some() {
            Leading::Customer
        } else if self.plan.is_some() {
            Leading::Plan
        } else if self.status.is_some() {
            Leading::Status
        } else {
            Leading::None
        }
    }
}

/// The 8 list statements: 4 leading filters x 2 directions. `$4` status, `$5` plan public
/// id, `$6` customer, `$7` cursor key, `$8` rows to fetch.
static LIST: LazyLock<[[String; 2]; 4]> = LazyLock::new(|| {
    let status = |lead| page::filter(lead, 4, "text", "s.status = $4");
    let plan = |lead| page::filter(lead, 5, "text", PLAN_IN);
    let customer = |lead| page::filter(lead, 6, "text", "s.customer_external_id = $6");
    let [older, newer] = keyset("s.onchain_id", 7, 8);
    let text = |(st, pl, cu): (bool, bool, bool)| {
        [&older, &newer]
            .map(|tail| format!("{SELECT}{}{}{}{tail}", status(st), plan(pl), customer(cu)))
    };
    [
        text((false, false, false)),
        text((true, false, false)),
        text((false, true, false)),
        text((false, false, true)),
    ]
});

/// A page of `scope`'s subscriptions on `chain_id`, newest first (rows for the API's view).
/// Returns the rows and whether there are more.
pub async fn list(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    filter: &Filter<'_>,
    page: Page,
) -> Result<(Vec<Row>, bool)> {
    let text = &LIST[filter.leading() as usize][page.direction.index()];
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
    )
    .await
}

/// One of `scope`'s subscriptions (`None` for an unknown or other merchant's id).
pub async fn get(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    id: &SubscriptionId,
) -> Result<Option<Row>> {
    static ONE: LazyLock<String> =
        LazyLock::new(|| format!("{SELECT} AND s.onchain_id = $4::bigint"));
    let stmt = client.prepare_cached(&ONE).await?;
    Ok(client
        .query_opt(
            &stmt,
            &[&scope.id(), &scope.wallet_bytes(), &chain_id, &id.onchain()],
        )
        .await?)
}

/// The ledger of one of `scope`'s subscriptions, oldest first (empty for another merchant's).
pub async fn ledger(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    id: &SubscriptionId,
) -> Result<Vec<Row>> {
    let stmt = client
        .prepare_cached(
            "SELECT le.kind, le.amount::TEXT AS amount, le.period, le.period_start, \
             le.period_end, le.attempt, le.failure_reason, le.block_time, ce.public_id, \
             ce.chain_id, ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, \
             ce.log_index, cur.block_number AS indexed_block \
             FROM ledger_entries le \
             JOIN chain_events ce ON ce.id = le.event_id \
             JOIN subscriptions s ON s.chain_id = le.chain_id \
                  AND s.onchain_id = le.subscription_id AND s.merchant_wallet = $3 \
             LEFT JOIN indexer_cursor cur ON cur.chain_id = le.chain_id \
             WHERE le.chain_id = $1 AND le.subscription_id = $2 ORDER BY le.event_id",
        )
        .await?;
    Ok(client
        .query(&stmt, &[&chain_id, &id.onchain(), &scope.wallet_bytes()])
        .await?)
}

/// The list statements, for tests that check their plans.
#[doc(hidden)]
pub fn list_statements() -> Vec<&'static str> {
    LIST.iter().flatten().map(String::as_str).collect()
}
