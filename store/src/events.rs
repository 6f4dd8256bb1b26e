//! Chain events as the API lists them and webhooks carry them, scoped by merchant wallet.

use std::sync::LazyLock;

use chainsub_core::{EventId, SubscriptionId};
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::page::{self, keyset};
use crate::{MerchantScope, Page, Result};

/// `SELECT … FROM chain_events ce …` with every column the event view reads. Append
/// `WHERE …`; the `plans` join is scoped to the event's merchant, so a planRef cannot
/// resolve to another merchant's plan.
pub const SELECT: &str = "SELECT ce.id, ce.public_id, ce.kind, ce.block_time, ce.chain_id, \
    ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, ce.log_index, \
    ce.subscription_id, ce.decoded, ce.snapshot, p.public_id AS plan_public_id, \
    cur.block_number AS indexed_block \
    FROM chain_events ce \
    LEFT JOIN chain_plans cp ON cp.chain_id = ce.chain_id AND cp.onchain_id = ce.plan_id \
    LEFT JOIN merchants pm ON pm.wallet = ce.merchant_wallet \
    LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = pm.id \
    LEFT JOIN indexer_cursor cur ON cur.chain_id = ce.chain_id";

/// A merchant's lifecycle events: `$1` wallet, `$2` chain id.
const SCOPE: &str =
    " WHERE ce.merchant_wallet = $1 AND ce.kind IS NOT NULL AND ce.chain_id = $2::bigint";

/// The list filters; `None` means "any".
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    /// An event type name (`subscription.charged`), already validated.
    pub kind: Option<&'a str>,
    pub subscription: Option<&'a SubscriptionId>,
    pub from_block: Option<i64>,
    pub to_block: Option<i64>,
    pub created_gte: Option<DateTime<Utc>>,
    pub created_lt: Option<DateTime<Utc>>,
}

/// The 6 list statements: leading filter (none, type, subscription) x 2 directions. `$3`
/// type, `$4` on-chain subscription id, `$5`/`$6` block range, `$7`/`$8` time range, `$9`
/// cursor key, `$10` rows to fetch.
static LIST: LazyLock<[[String; 2]; 3]> = LazyLock::new(|| {
    let kind = |lead| page::filter(lead, 3, "text", "ce.kind = $3");
    let sub = |lead| page::filter(lead, 4, "bigint", "ce.subscription_id = $4");
    let ranges = " AND ($5::bigint IS NULL OR ce.block_number >= $5) \
         AND ($6::bigint IS NULL OR ce.block_number <= $6) \
         AND ($7::timestamptz IS NULL OR ce.block_time >= $7) \
         AND ($8::timestamptz IS NULL OR ce.block_time < $8)";
    let [older, newer] = keyset("ce.id", 9, 10);
    let text = |k: bool, s: bool| {
        [&older, &newer].map(|tail| format!("{SELECT}{SCOPE}{}{}{ranges}{tail}", kind(k), sub(s)))
    };
    [text(false, false), text(true, false), text(false, true)]
});

/// A page of `scope`'s events on `chain_id`, newest first. Returns the rows and whether
/// there are more.
pub async fn list(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    filter: &Filter<'_>,
    page: Page,
) -> Result<(Vec<Row>, bool)> {
    let leading = if filter.subscription.is_some() {
        2
    } else if filter.kind.is_some() {
        1
    } else {
        0
    };
    let sub = filter.subscription.map(SubscriptionId::onchain);
    page::fetch(
        client,
        &LIST[leading][page.direction.index()],
        &[
            &scope.wallet_bytes(),
            &chain_id,
            &filter.kind,
            &sub,
            &filter.from_block,
            &filter.to_block,
            &filter.created_gte,
            &filter.created_lt,
            &page.key,
            &page.fetch(),
        ],
        page,
    )
    .await
}

/// The cursor key of one of `scope`'s events (`None` for an unknown or other merchant's).
pub async fn cursor_key(
    client: &impl GenericClient,
    scope: &MerchantScope,
    id: &EventId,
) -> Result<Option<i64>> {
    let stmt = client
        .prepare_cached(
            "SELECT id FROM chain_events WHERE public_id = $1 AND merchant_wallet = $2 \
             AND kind IS NOT NULL",
        )
        .await?;
    Ok(client
        .query_opt(&stmt, &[&id.as_str(), &scope.wallet_bytes()])
        .await?
        .map(|r| r.get(0)))
}

/// One of `scope`'s events (`None` for an unknown or other merchant's id).
pub async fn get(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    id: &EventId,
) -> Result<Option<Row>> {
    static ONE: LazyLock<String> =
        LazyLock::new(|| format!("{SELECT}{SCOPE} AND ce.public_id = $3::text"));
    let stmt = client.prepare_cached(&ONE).await?;
    Ok(client
        .query_opt(&stmt, &[&scope.wallet_bytes(), &chain_id, &id.as_str()])
        .await?)
}

/// The list statements, for tests that check their plans.
#[doc(hidden)]
pub fn list_statements() -> Vec<&'static str> {
    LIST.iter().flatten().map(String::as_str).collect()
}
