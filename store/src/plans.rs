//! The merchant's plans as the API reads them (with their on-chain provisioning facts).

use chainsub_core::ChainId;
use chainsub_core::OnchainPlanId;
use std::sync::LazyLock;

use alloy::primitives::{Address, B256};
use chainsub_core::{PlanId, ProvisionStatus};
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::chain::{address, b256, units};
use crate::page::{self, keyset};
use crate::{Error, MerchantScope, Page, Result};

/// A plan as the API serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRow {
    /// The row id (checkouts and provisioning refer to it).
    pub row_id: i64,
    pub id: PlanId,
    pub name: String,
    /// Base units per period.
    pub amount: u128,
    /// Free days before a new subscriber's first charge (0: none).
    pub trial_days: u16,
    pub currency: String,
    pub interval: String,
    pub slug: String,
    pub plan_ref: B256,
    pub provision_status: ProvisionStatus,
    pub provision_error: Option<String>,
    pub provision_tx_hash: Option<B256>,
    pub created_at: DateTime<Utc>,
    /// Where `createPlan` landed: the indexed event when the index has it, else the receipt
    /// the relayer saw; `None` before either.
    pub created_on_chain: Option<PlanCreation>,
    /// The indexed `PlanDeactivated`: the plan takes no new subscriptions.
    pub deactivated: Option<PlanDeactivation>,
    /// The indexer's tip (for confirmations).
    pub indexed_block: Option<i64>,
}

/// Where a plan's `deactivatePlan` landed (indexed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanDeactivation {
    pub block_number: i64,
    pub transaction_hash: B256,
    pub block_time: DateTime<Utc>,
}

/// The block facts of a plan's `createPlan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanCreation {
    pub onchain_id: i64,
    /// The emitting contract when indexed; `None` when only the relayer's receipt (sent to
    /// the configured contract) vouches for it.
    pub contract: Option<Address>,
    pub block_number: i64,
    pub block_hash: B256,
    pub transaction_hash: B256,
    pub log_index: i64,
}

impl PlanRow {
    /// Active once indexed, or once the relayer saw it mined.
    pub fn is_active(&self) -> bool {
        self.created_on_chain
            .as_ref()
            .is_some_and(|c| c.contract.is_some())
            || self.provision_status == ProvisionStatus::Active
    }

    /// The plan's state as the API names it: `deactivated` (its `PlanDeactivated` indexed),
    /// `active`, `failed` or `pending`.
    pub fn status(&self) -> &'static str {
        if self.deactivated.is_some() {
            "deactivated"
        } else if self.is_active() {
            "active"
        } else if self.provision_status == ProvisionStatus::Failed {
            "failed"
        } else {
            "pending"
        }
    }

    fn from_row(r: &Row) -> Result<Self> {
        let id: &str = r.try_get("public_id")?;
        let amount: &str = r.try_get("amount")?;
        let indexed = match r.try_get::<_, Option<i64>>("cp_onchain_id")? {
            Some(onchain_id) => Some(PlanCreation {
                onchain_id,
                contract: Some(address(r.try_get("ce_contract")?)?),
                block_number: r.try_get("ce_block_number")?,
                block_hash: b256(r.try_get("ce_block_hash")?)?,
                transaction_hash: b256(r.try_get("ce_tx")?)?,
                log_index: i64::from(r.try_get::<_, i32>("ce_log_index")?),
            }),
            None => None,
        };
        let receipt = match (
            r.try_get::<_, Option<i64>>("onchain_plan_id")?,
            r.try_get::<_, Option<i64>>("provision_block_number")?,
            r.try_get::<_, Option<&[u8]>>("provision_block_hash")?,
            r.try_get::<_, Option<&[u8]>>("provision_tx_hash")?,
            r.try_get::<_, Option<i32>>("provision_log_index")?,
        ) {
            (Some(onchain_id), Some(block_number), Some(bh), Some(tx), Some(li)) => {
                Some(PlanCreation {
                    onchain_id,
                    contract: None,
                    block_number,
                    block_hash: b256(bh)?,
                    transaction_hash: b256(tx)?,
                    log_index: i64::from(li),
                })
            }
            _ => None,
        };
        Ok(Self {
            row_id: r.try_get("id")?,
            id: PlanId::parse(id).ok_or_else(|| Error::Inconsistent(format!("plan id {id:?}")))?,
            name: r.try_get("name")?,
            amount: units(amount)
                .ok_or_else(|| Error::Inconsistent(format!("plan amount {amount:?}")))?,
            trial_days: u16::try_from(r.try_get::<_, i32>("trial_days")?)
                .map_err(|_| Error::Inconsistent("plan trial days".into()))?,
            currency: r.try_get("currency")?,
            interval: r.try_get("interval")?,
            slug: r.try_get("slug")?,
            plan_ref: b256(r.try_get("plan_ref")?)?,
            provision_status: ProvisionStatus::parse(r.try_get("provision_status")?)
                .map_err(|e| Error::Inconsistent(e.to_string()))?,
            provision_error: r.try_get("provision_error")?,
            provision_tx_hash: r
                .try_get::<_, Option<&[u8]>>("provision_tx_hash")?
                .map(b256)
                .transpose()?,
            created_at: r.try_get("created_at")?,
            // The index wins when it has the plan; until then the receipt is the evidence.
            created_on_chain: indexed.or(receipt),
            deactivated: match r.try_get::<_, Option<i64>>("de_block_number")? {
                Some(block_number) => Some(PlanDeactivation {
                    block_number,
                    transaction_hash: b256(r.try_get("de_tx")?)?,
                    block_time: r.try_get("de_block_time")?,
                }),
                None => None,
            },
            indexed_block: r.try_get("indexed_block")?,
        })
    }
}

/// Columns and joins; `$1` merchant id, `$2` chain id.
const SELECT: &str = "SELECT p.id, p.public_id, p.name, p.amount::TEXT AS amount, p.trial_days, p.currency, \
    p.interval, p.slug, p.plan_ref, p.provision_status, p.provision_error, p.provision_tx_hash, \
    p.onchain_plan_id, p.provision_block_number, p.provision_block_hash, \
    p.provision_log_index, p.created_at, cp.onchain_id AS cp_onchain_id, \
    ce.block_number AS ce_block_number, ce.block_hash AS ce_block_hash, \
    ce.transaction_hash AS ce_tx, ce.log_index AS ce_log_index, ce.contract AS ce_contract, \
    de.block_number AS de_block_number, de.transaction_hash AS de_tx, \
    de.block_time AS de_block_time, cur.block_number AS indexed_block \
    FROM plans p JOIN merchants m ON m.id = p.merchant_id \
    LEFT JOIN chain_plans cp ON cp.plan_ref = p.plan_ref AND cp.chain_id = $2::bigint \
         AND cp.merchant_wallet = m.wallet \
    LEFT JOIN chain_events ce ON ce.id = cp.event_id \
    LEFT JOIN chain_events de ON de.id = cp.deactivated_event_id \
    LEFT JOIN indexer_cursor cur ON cur.chain_id = $2::bigint \
    WHERE p.merchant_id = $1";

/// `$3` cursor key, `$4` rows to fetch.
static LIST: LazyLock<[String; 2]> =
    LazyLock::new(|| keyset("p.id", 3, 4).map(|tail| format!("{SELECT}{tail}")));

/// A page of `scope`'s plans, newest first. Returns the rows and whether there are more.
pub async fn list(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    page: Page,
) -> Result<(Vec<PlanRow>, bool)> {
    page::fetch(
        client,
        &LIST[page.direction.index()],
        &[&scope.id(), &chain_id, &page.key, &page.fetch()],
        page,
        |r| PlanRow::from_row(&r),
    )
    .await
}

/// One of `scope`'s plans by public id (`None` for an unknown or other merchant's).
pub async fn get(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    public_id: &PlanId,
) -> Result<Option<PlanRow>> {
    static ONE: LazyLock<String> = LazyLock::new(|| format!("{SELECT} AND p.public_id = $3::text"));
    let stmt = client.prepare_cached(&ONE).await?;
    client
        .query_opt(&stmt, &[&scope.id(), &chain_id, &public_id.as_str()])
        .await?
        .as_ref()
        .map(PlanRow::from_row)
        .transpose()
}

/// One of `scope`'s plans by row id.
pub async fn get_by_row_id(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    row_id: i64,
) -> Result<Option<PlanRow>> {
    static ONE: LazyLock<String> = LazyLock::new(|| format!("{SELECT} AND p.id = $3::bigint"));
    let stmt = client.prepare_cached(&ONE).await?;
    client
        .query_opt(&stmt, &[&scope.id(), &chain_id, &row_id])
        .await?
        .as_ref()
        .map(PlanRow::from_row)
        .transpose()
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
/// The plan key, amount (base units, as text) and trial days provisioning sends on chain.
pub async fn provisioning_input(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
) -> Result<Option<(Vec<u8>, String, u16)>> {
    client
        .query_opt(
            "SELECT plan_ref, amount::TEXT, trial_days FROM plans WHERE id = $1 AND merchant_id = $2",
            &[&row_id, &scope.id()],
        )
        .await?
        .map(|r| {
            let days = u16::try_from(r.get::<_, i32>(2))
                .map_err(|_| Error::Inconsistent("plan trial days".into()))?;
            Ok((r.get(0), r.get(1), days))
        })
        .transpose()
}

/// Gives `scope`'s plan `row_id` a new on-chain reference, if it still has `old` and is not
/// active. Only for a reference that can never be provisioned any more (the merchant's own
/// namespace on chain holds a different plan under it), so the old one can never become a
/// second on-chain plan of this API plan. Returns whether the row changed.
pub async fn replace_plan_ref(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
    old: &[u8; 32],
    new: &[u8; 32],
) -> Result<bool> {
    let n = client
        .execute(
            "UPDATE plans SET plan_ref = $4 \
             WHERE id = $1 AND merchant_id = $2 AND plan_ref = $3 AND provision_status <> $5",
            &[
                &row_id,
                &scope.id(),
                &old.as_slice(),
                &new.as_slice(),
                &ProvisionStatus::Active.as_str(),
            ],
        )
        .await?;
    Ok(n == 1)
}

/// How many plans `scope` created since `since`, and when the oldest of them was created
/// (when the count drops again).
pub async fn created_since(
    client: &impl GenericClient,
    scope: &MerchantScope,
    since: DateTime<Utc>,
) -> Result<(i64, Option<DateTime<Utc>>)> {
    let row = client
        .query_one(
            "SELECT count(*), min(created_at) FROM plans WHERE merchant_id = $1 AND created_at > $2",
            &[&scope.id(), &since],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Journals a provisioning transaction of `scope`'s plan `row_id` as signed, BEFORE it is
/// broadcast: the plan is `submitted` with the transaction's hash, nonce and fees, so a
/// process that dies before or after the broadcast leaves a retry enough to replace it at
/// the same nonce instead of sending a second one behind it. An active plan is not touched.
pub async fn journal_send(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
    tx_hash: &[u8],
    nonce: i64,
    max_fee_per_gas: u128,
    priority_fee_per_gas: u128,
) -> Result<()> {
    client
        .execute(
            "UPDATE plans SET provision_status = $3, provision_tx_hash = $4, \
             provision_error = 'signed; not acknowledged by the node yet', \
             provision_nonce = $5, provision_max_fee_per_gas = $6::TEXT::NUMERIC, \
             provision_priority_fee_per_gas = $7::TEXT::NUMERIC \
             WHERE id = $1 AND merchant_id = $2 AND provision_status <> $8",
            &[
                &row_id,
                &scope.id(),
                &ProvisionStatus::Submitted.as_str(),
                &tx_hash,
                &nonce,
                &max_fee_per_gas.to_string(),
                &priority_fee_per_gas.to_string(),
                &ProvisionStatus::Active.as_str(),
            ],
        )
        .await?;
    Ok(())
}

/// The last provisioning transaction of `scope`'s plan `row_id` while it is `submitted`:
/// (hash, nonce, max fee per gas, priority fee per gas).
pub async fn submitted_tx(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
) -> Result<Option<(B256, u64, u128, u128)>> {
    let row = client
        .query_opt(
            "SELECT provision_tx_hash, provision_nonce, provision_max_fee_per_gas::TEXT, \
             provision_priority_fee_per_gas::TEXT FROM plans \
             WHERE id = $1 AND merchant_id = $2 AND provision_status = $3 \
             AND provision_tx_hash IS NOT NULL AND provision_nonce IS NOT NULL",
            &[&row_id, &scope.id(), &ProvisionStatus::Submitted.as_str()],
        )
        .await?;
    let Some(r) = row else { return Ok(None) };
    let fee = |i: usize| -> Result<u128> {
        let s: String = r.get(i);
        s.parse()
            .map_err(|_| Error::Inconsistent(format!("fee {s} does not fit u128")))
    };
    Ok(Some((
        b256(r.get(0))?,
        u64::try_from(r.get::<_, i64>(1))
            .map_err(|_| Error::Inconsistent("negative nonce".into()))?,
        fee(2)?,
        fee(3)?,
    )))
}

/// What one provisioning attempt of a plan ended in.
#[derive(Debug, Clone, Copy)]
pub enum Provisioned<'a> {
    /// `createPlan` mined; the plan's on-chain facts.
    Created {
        tx_hash: &'a [u8],
        onchain_id: OnchainPlanId,
        block_number: i64,
        block_hash: &'a [u8],
        log_index: i64,
    },
    /// The reference was already on chain as this very plan.
    AlreadyExists { onchain_id: OnchainPlanId },
    /// Sent, no receipt within the wait: the transaction as sent (nonce and fees, so a stuck
    /// one can be replaced at the same nonce).
    Submitted {
        tx_hash: &'a [u8],
        nonce: i64,
        max_fee_per_gas: u128,
        priority_fee_per_gas: u128,
        note: &'a str,
    },
    /// Did not happen, and why.
    Failed { error: &'a str },
}

/// Records a provisioning attempt on `scope`'s plan `row_id` (a plan already active is
/// never moved back to submitted or failed). Returns whether a row changed.
pub async fn record_provisioning(
    client: &impl GenericClient,
    scope: &MerchantScope,
    row_id: i64,
    outcome: Provisioned<'_>,
) -> Result<bool> {
    let active = ProvisionStatus::Active.as_str();
    let n = match outcome {
        Provisioned::Created {
            tx_hash,
            onchain_id,
            block_number,
            block_hash,
            log_index,
        } => {
            client
                .execute(
                    "UPDATE plans SET provision_status = $3, provision_error = NULL, \
                     provision_tx_hash = $4, onchain_plan_id = $5, provision_block_number = $6, \
                     provision_block_hash = $7, provision_log_index = $8 \
                     WHERE id = $1 AND merchant_id = $2",
                    &[
                        &row_id,
                        &scope.id(),
                        &active,
                        &tx_hash,
                        &onchain_id,
                        &block_number,
                        &block_hash,
                        &(log_index as i32),
                    ],
                )
                .await?
        }
        Provisioned::AlreadyExists { onchain_id } => {
            client
                .execute(
                    "UPDATE plans SET provision_status = $3, provision_error = NULL, \
                     onchain_plan_id = $4 WHERE id = $1 AND merchant_id = $2",
                    &[&row_id, &scope.id(), &active, &onchain_id],
                )
                .await?
        }
        Provisioned::Submitted {
            tx_hash,
            nonce,
            max_fee_per_gas,
            priority_fee_per_gas,
            note,
        } => {
            client
                .execute(
                    "UPDATE plans SET provision_status = $3, provision_tx_hash = $4, \
                     provision_error = $5, provision_nonce = $7, \
                     provision_max_fee_per_gas = $8::TEXT::NUMERIC, \
                     provision_priority_fee_per_gas = $9::TEXT::NUMERIC \
                     WHERE id = $1 AND merchant_id = $2 AND provision_status <> $6",
                    &[
                        &row_id,
                        &scope.id(),
                        &ProvisionStatus::Submitted.as_str(),
                        &tx_hash,
                        &note,
                        &active,
                        &nonce,
                        &max_fee_per_gas.to_string(),
                        &priority_fee_per_gas.to_string(),
                    ],
                )
                .await?
        }
        Provisioned::Failed { error } => {
            client
                .execute(
                    "UPDATE plans SET provision_status = $3, provision_error = $4 \
                     WHERE id = $1 AND merchant_id = $2 AND provision_status <> $5",
                    &[
                        &row_id,
                        &scope.id(),
                        &ProvisionStatus::Failed.as_str(),
                        // Node error texts can carry raw revert bytes; Postgres text cannot
                        // hold NUL.
                        &error.replace('\0', "\u{fffd}"),
                        &active,
                    ],
                )
                .await?
        }
    };
    Ok(n > 0)
}

/// The list statements, for tests that check their plans.
#[doc(hidden)]
pub fn list_statements() -> Vec<&'static str> {
    LIST.iter().map(String::as_str).collect()
}

/// The plan a merchant created with an Idempotency-Key (keys older than 24 hours are
/// released first: the key is free for a new request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedPlan {
    pub id: i64,
    pub active: bool,
    pub name: String,
    /// Base units, as text.
    pub amount: String,
    pub slug: String,
    pub trial_days: i32,
}

/// `scope`'s plan created with Idempotency-Key `key`, if any (releasing expired keys first).
pub async fn by_idempotency_key(
    client: &impl GenericClient,
    scope: &MerchantScope,
    key: &str,
) -> Result<Option<KeyedPlan>> {
    client
        .execute(
            "UPDATE plans SET idempotency_key = NULL WHERE merchant_id = $1 \
             AND idempotency_key = $2 AND created_at < now() - interval '24 hours'",
            &[&scope.id(), &key],
        )
        .await?;
    let row = client
        .query_opt(
            "SELECT id, provision_status = 'active', name, amount::TEXT, slug, trial_days FROM plans \
             WHERE merchant_id = $1 AND idempotency_key = $2",
            &[&scope.id(), &key],
        )
        .await?;
    Ok(row.map(|r| KeyedPlan {
        id: r.get(0),
        active: r.get(1),
        name: r.get(2),
        amount: r.get(3),
        slug: r.get(4),
        trial_days: r.get(5),
    }))
}

/// A new plan row (not yet provisioned).
#[derive(Debug, Clone)]
pub struct NewPlan<'a> {
    pub public_id: &'a PlanId,
    pub name: &'a str,
    /// Base units.
    pub amount: u128,
    /// Free days before the first charge (0: none).
    pub trial_days: u16,
    pub slug: &'a str,
    pub plan_ref: [u8; 32],
    pub idempotency_key: Option<&'a str>,
}

/// What [`insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// The new plan's row id.
    Plan(i64),
    /// `scope` already has a plan with this slug.
    SlugTaken,
    /// `scope` already has a plan with this Idempotency-Key (a concurrent request won).
    KeyTaken,
}

/// Inserts one of `scope`'s plans.
pub async fn insert(
    client: &impl GenericClient,
    scope: &MerchantScope,
    plan: &NewPlan<'_>,
) -> Result<Inserted> {
    let res = client
        .query_one(
            "INSERT INTO plans (public_id, merchant_id, name, amount, currency, interval, slug, \
             plan_ref, idempotency_key, trial_days) \
             VALUES ($1, $2, $3, $4::TEXT::NUMERIC, 'USDC', 'month', $5, $6, $7, $8) RETURNING id",
            &[
                &plan.public_id.as_str(),
                &scope.id(),
                &plan.name,
                &plan.amount.to_string(),
                &plan.slug,
                &plan.plan_ref.as_slice(),
                &plan.idempotency_key,
                &i32::from(plan.trial_days),
            ],
        )
        .await;
    match res {
        Ok(row) => Ok(Inserted::Plan(row.get(0))),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            let constraint = e.as_db_error().and_then(|d| d.constraint());
            Ok(if constraint == Some("plans_idempotency_key") {
                Inserted::KeyTaken
            } else {
                Inserted::SlugTaken
            })
        }
        Err(e) => Err(e.into()),
    }
}
