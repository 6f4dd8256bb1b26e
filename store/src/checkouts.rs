//! What the unauthenticated checkout page may read: a signed link's merchant and plan. A
//! [`Link`] names its merchant (public facts only) but is no [`crate::MerchantScope`]: it
//! cannot be passed to anything that reads or changes a merchant's data.

use alloy::primitives::{Address, B256};
use chainsub_core::ChainId;
use chainsub_core::MerchantId;
use deadpool_postgres::GenericClient;

use crate::{Error, Result};

/// The public facts of a link's merchant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMerchant {
    pub public_id: MerchantId,
    pub wallet: Address,
    pub code: String,
    /// The name it shows customers, when it set one.
    pub display_name: Option<String>,
}

/// A checkout link's merchant and plan, as stored.
#[derive(Debug, Clone)]
pub struct Link {
    pub merchant: LinkMerchant,
    pub plan_public_id: String,
    pub plan_name: String,
    /// Base units, as stored (NUMERIC as text).
    pub amount: String,
    pub interval: String,
    pub slug: String,
    /// The plan's on-chain reference (scoped to the merchant's wallet on chain).
    pub plan_ref: B256,
    /// The on-chain plan id, only from the index and only once the plan's block has the
    /// required confirmations (never from the relayer's receipt: a reorg can give that id
    /// to another merchant's plan).
    pub plan_onchain_id: Option<i64>,
    /// The indexed plan was deactivated on chain (no new subscriptions).
    pub deactivated: bool,
    /// Free days before the first charge: the indexed plan's (the chain's), else the row's.
    pub trial_days: u16,
}

/// The link `/checkout/{code}/{slug}` (call only after its signature checked out); the
/// on-chain plan only with `confirmations` (blocks from the plan's to the indexer's tip, both
/// counted; 0 and 1 mean once indexed).
pub async fn resolve(
    client: &impl GenericClient,
    code: &str,
    slug: &str,
    chain_id: ChainId,
    confirmations: i64,
) -> Result<Option<Link>> {
    let confirmations = confirmations.max(1);
    let row = client
        .query_opt(
            "SELECT m.public_id AS merchant_public_id, \
             m.wallet AS merchant_wallet, m.code AS merchant_code, \
             m.display_name AS merchant_name, \
             p.public_id AS plan_public_id, p.name, \
             p.amount::TEXT AS amount, p.interval, p.slug, \
             p.plan_ref, cp.onchain_id, cp.deactivated_event_id IS NOT NULL AS deactivated, \
             COALESCE(cp.trial_days, p.trial_days) AS trial_days \
             FROM merchants m JOIN plans p ON p.merchant_id = m.id \
             LEFT JOIN LATERAL (SELECT cp.onchain_id, cp.deactivated_event_id, cp.trial_days \
               FROM chain_plans cp JOIN chain_events ce ON ce.id = cp.event_id \
               JOIN indexer_cursor cur ON cur.chain_id = cp.chain_id \
               WHERE cp.plan_ref = p.plan_ref AND cp.chain_id = $3 \
               AND cp.merchant_wallet = m.wallet \
               AND cur.block_number - ce.block_number + 1 >= $4 \
               ORDER BY cp.onchain_id LIMIT 1) cp ON true \
             WHERE m.code = $1 AND p.slug = $2",
            &[&code, &slug, &chain_id, &confirmations],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let public_id: String = row.get("merchant_public_id");
    let wallet: Vec<u8> = row.get("merchant_wallet");
    Ok(Some(Link {
        merchant: LinkMerchant {
            public_id: MerchantId::parse(&public_id)
                .ok_or_else(|| Error::Inconsistent(format!("merchant id {public_id}")))?,
            wallet: Address::try_from(wallet.as_slice())
                .map_err(|_| Error::Inconsistent("merchant wallet is not 20 bytes".into()))?,
            code: row.get("merchant_code"),
            display_name: row.get("merchant_name"),
        },
        plan_public_id: row.get("plan_public_id"),
        plan_name: row.get("name"),
        amount: row.get("amount"),
        interval: row.get("interval"),
        slug: row.get("slug"),
        plan_ref: crate::chain::b256(row.get("plan_ref"))?,
        plan_onchain_id: row.get("onchain_id"),
        deactivated: row.get::<_, Option<bool>>("deactivated").unwrap_or(false),
        trial_days: u16::try_from(row.get::<_, i32>("trial_days"))
            .map_err(|_| Error::Inconsistent("plan trial days".into()))?,
    }))
}

/// Records that `customer_ref` is `customer`'s reference for subscriptions from `wallet` to
/// the link's merchant (what the indexer resolves customerExternalId by). Idempotent.
pub async fn record_wallet_ref(
    client: &impl GenericClient,
    merchant: &LinkMerchant,
    customer: &str,
    wallet: Address,
    customer_ref: B256,
) -> Result<()> {
    let stmt = client
        .prepare_cached(
            "INSERT INTO checkout_wallet_refs (customer_ref, merchant_id, customer_external_id, \
             wallet) SELECT $1, m.id, $3, $4 FROM merchants m WHERE m.public_id = $2 \
             ON CONFLICT (customer_ref) DO NOTHING",
        )
        .await?;
    client
        .execute(
            &stmt,
            &[
                &customer_ref.as_slice(),
                &merchant.public_id.as_str(),
                &customer,
                &wallet.as_slice(),
            ],
        )
        .await?;
    Ok(())
}

/// A new checkout link of one of the merchant's plans.
#[derive(Debug, Clone)]
pub struct NewCheckout<'a> {
    pub public_id: &'a chainsub_core::CheckoutId,
    /// The plan's row id (from a scoped plan lookup).
    pub plan: i64,
    pub customer_external_id: Option<&'a str>,
    pub customer_ref: [u8; 32],
    pub url: &'a str,
}

/// Records a checkout link of `scope`'s; returns its creation time (`None` when the plan is
/// not one of `scope`'s).
pub async fn insert(
    client: &impl GenericClient,
    scope: &crate::MerchantScope,
    c: &NewCheckout<'_>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
    Ok(client
        .query_opt(
            "INSERT INTO checkouts (public_id, merchant_id, plan_id, customer_external_id, \
             customer_ref, url) \
             SELECT $1, $2, p.id, $4, $5, $6 FROM plans p WHERE p.id = $3 AND p.merchant_id = $2 \
             RETURNING created_at",
            &[
                &c.public_id.as_str(),
                &scope.id(),
                &c.plan,
                &c.customer_external_id,
                &c.customer_ref.as_slice(),
                &c.url,
            ],
        )
        .await?
        .map(|r| r.get(0)))
}
