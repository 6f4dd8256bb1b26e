//! The merchant's plans as the API reads them (with their on-chain provisioning facts).

use std::sync::LazyLock;

use chainsub_core::PlanId;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::page::keyset;
use crate::{MerchantScope, Page, Result};

/// Columns and joins; `$1` merchant id, `$2` chain id.
const SELECT: &str = "SELECT p.id, p.public_id, p.name, p.amount::TEXT AS amount, p.currency, \
    p.interval, p.slug, p.plan_ref, p.provision_status, p.provision_error, p.provision_tx_hash, \
    p.onchain_plan_id, p.provision_block_number, p.provision_block_hash, \
    p.provision_log_index, p.created_at, cp.onchain_id AS cp_onchain_id, \
    ce.block_number AS ce_block_number, ce.block_hash AS ce_block_hash, \
    ce.transaction_hash AS ce_tx, ce.log_index AS ce_log_index, ce.contract AS ce_contract, \
    cur.block_number AS indexed_block \
    FROM plans p JOIN merchants m ON m.id = p.merchant_id \
    LEFT JOIN chain_plans cp ON cp.plan_ref = p.plan_ref AND cp.chain_id = $2::bigint \
         AND cp.merchant_wallet = m.wallet \
    LEFT JOIN chain_events ce ON ce.id = cp.event_id \
    LEFT JOIN indexer_cursor cur ON cur.chain_id = $2::bigint \
    WHERE p.merchant_id = $1";

/// `$3` cursor key, `$4` rows to fetch.
static LIST: LazyLock<[String; 2]> =
    LazyLock::new(|| keyset("p.id", 3, 4).map(|tail| format!("{SELECT}{tail}")));

/// A page of `scope`'s plans, newest first. Returns the rows and whether there are more.
pub async fn list(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    page: Page,
) -> Result<(Vec<Row>, bool)> {
    let stmt = client.prepare_cached(&LIST[page.direction.index()]).await?;
    let mut rows = client
        .query(&stmt, &[&scope.id(), &chain_id, &page.key, &page.fetch()])
        .await?;
    let more = page.finish(&mut rows);
    Ok((rows, more))
}

/// One of `scope`'s plans by public id (`None` for an unknown or other merchant's).
pub async fn get(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    public_id: &PlanId,
) -> Result<Option<Row>> {
    static ONE: LazyLock<String> = LazyLock::new(|| format!("{SELECT} AND p.public_id = $3::text"));
    let stmt = client.prepare_cached(&ONE).await?;
    Ok(client
        .query_opt(&stmt, &[&scope.id(), &chain_id, &public_id.as_str()])
        .await?)
}

/// One of `scope`'s plans by row id.
pub async fn get_by_row_id(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: i64,
    row_id: i64,
) -> Result<Option<Row>> {
    static ONE: LazyLock<String> = LazyLock::new(|| format!("{SELECT} AND p.id = $3::bigint"));
    let stmt = client.prepare_cached(&ONE).await?;
    Ok(client
        .query_opt(&stmt, &[&scope.id(), &chain_id, &row_id])
        .await?)
}

/// The cursor key of one of `scope`'s plans (`None` for an unknown or other merchant's).
pub async fn cursor_key(
    client: &impl GenericClient,
    scope: &MerchantScope,
    public_id: &PlanId,
) -> Result<Option<i64>> {
    let stmt = client
        .prepare_cached("SELECT id FROM plans WHERE merchant_id = $1 AND public_id = $2")
        .await?;
    Ok(client
        .query_opt(&stmt, &[&scope.id(), &public_id.as_str()])
        .await?
        .map(|r| r.get(0)))
}
/// The list statements, for tests that check their plans.
#[doc(hidden)]
pub fn list_statements() -> Vec<&'static str> {
    LIST.iter().map(String::as_str).collect()
}
