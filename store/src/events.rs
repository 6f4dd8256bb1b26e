//! Chain events as the API lists them and webhooks carry them, scoped by merchant wallet.
//!
//! Three tables serve events — `chain_events`, `event_retractions` and `renewal_risks` — with
//! the same columns, so the statements are built from shared pieces (the macros below). What
//! Postgres runs is written out, one file per statement, in `store/sql/events/*.sql`
//! ([`statements`]; a test keeps the files equal to the code).

use chainsub_core::ChainId;
use std::sync::LazyLock;

use alloy::primitives::Address;
use chainsub_core::{EventId, OutboxStatus, PlanId, SubscriptionId, SubscriptionSnapshot};
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::chain::{ChainCols, ChainRow, Columns, typed_by};
use crate::outbox::live_status;
use crate::page::{self, keyset};
use crate::snapshot::{SnapshotCols, snapshot_columns};
use crate::{Direction, Error, MerchantScope, Page, Result};

/// The columns every event branch takes from its joins: the plan's public id, the chain's
/// indexed head (`$indexed`) and, with `delivery`, the webhook's delivery state (`no_delivery`:
/// NULLs of the same types, and no outbox join — a webhook body does not carry it).
macro_rules! joined_columns {
    (delivery, $indexed:literal) => {
        concat!(
            "p.public_id AS plan_public_id, pp.public_id AS pending_plan_public_id, ",
            $indexed,
            " AS indexed_block, ",
            live_status!(),
            " AS delivery_status, o.attempts AS delivery_attempts, \
            o.next_attempt_at AS delivery_next_attempt_at, o.delivered_at AS delivery_delivered_at, \
            o.last_error AS delivery_last_error"
        )
    };
    (no_delivery, $indexed:literal) => {
        concat!(
            "p.public_id AS plan_public_id, pp.public_id AS pending_plan_public_id, ",
            $indexed,
            " AS indexed_block, NULL::text AS delivery_status, NULL::integer AS delivery_attempts, \
            NULL::timestamptz AS delivery_next_attempt_at, \
            NULL::timestamptz AS delivery_delivered_at, NULL::text AS delivery_last_error"
        )
    };
}

/// The outbox join of [`joined_columns`]`(delivery, …)` for the event table aliased `$t`.
macro_rules! outbox_join {
    (delivery, $t:literal) => {
        concat!(
            " LEFT JOIN webhook_outbox o ON o.event_id = ",
            $t,
            ".id AND o.test_payload IS NULL AND o.retracted_at IS NULL"
        )
    };
    (no_delivery, $t:literal) => {
        ""
    };
}

/// The joins behind [`joined_columns`] for the event table aliased `$t`. The `plans` join is
/// scoped to the event's merchant, so a planRef cannot resolve to another merchant's plan:
/// `$merchant` is that merchant's id (a parameter in the list statements, else `pm.id` from
/// the `merchants` row of the event's wallet, which `$joins` then brings, with the cursor
/// row where the head is joined).
macro_rules! joins {
    ($d:ident, $t:literal, $merchant:literal, $joins:expr) => {
        concat!(
            " LEFT JOIN chain_plans cp ON cp.chain_id = ",
            $t,
            ".chain_id AND cp.onchain_id = ",
            $t,
            ".plan_id",
            $joins,
            " LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = ",
            $merchant,
            " LEFT JOIN chain_plans pcp ON pcp.chain_id = ",
            $t,
            ".chain_id AND pcp.onchain_id = ",
            $t,
            ".snap_pending_plan_onchain_id",
            " LEFT JOIN plans pp ON pp.plan_ref = pcp.plan_ref AND pp.merchant_id = ",
            $merchant,
            outbox_join!($d, $t)
        )
    };
}

/// `SELECT … FROM chain_events ce …` with every column an [`EventRow`] reads. Append
/// `WHERE …`. `$indexed` is the indexed head of the event's chain; `$merchant`, `$joins` as
/// for [`joins`].
macro_rules! ce_select {
    ($d:ident, $merchant:literal, $indexed:literal, $joins:expr) => {
        concat!(
            "SELECT ce.id, ce.public_id, ce.kind, ce.block_time, ce.chain_id, \
            ce.contract, ce.block_number, ce.block_hash, ce.transaction_hash, ce.log_index, \
            ce.subscription_id, ce.log_amount::text AS log_amount, ce.log_subscriber, \
            ce.log_period::text AS log_period, ce.log_attempt::text AS log_attempt, \
            ce.log_reason::text AS log_reason, ce.log_next_retry_at::text AS log_next_retry_at, ",
            snapshot_columns!("ce"),
            ", ",
            joined_columns!($d, $indexed),
            ", ce.sequence AS subscription_sequence, \
            NULL::text AS retracted_event_id, NULL::text AS retracted_kind, \
            NULL::bigint AS ancestor_block, NULL::bytea AS ancestor_hash, NULL::text AS risk_reason, \
            NULL::text AS risk_amount, NULL::text AS risk_required, NULL::text AS risk_available, \
            NULL::timestamptz AS risk_due_at, NULL::integer AS risk_period \
            FROM chain_events ce",
            joins!($d, "ce", $merchant, $joins)
        )
    };
}

/// The same columns for `event.retracted` events (`event_retractions`, migration 0013): the
/// removed event's position and content, the retraction's own id, type and detection time,
/// and no confirmations (the block is not on the chain any more). `$merchant`, `$joins` as
/// for [`joins`].
macro_rules! r_select {
    ($d:ident, $merchant:literal, $joins:expr) => {
        concat!(
            "SELECT r.id, r.public_id, 'event.retracted'::text AS kind, \
            r.detected_at AS block_time, r.chain_id, r.contract, r.block_number, r.block_hash, \
            r.transaction_hash, r.log_index, r.subscription_id, r.log_amount::text AS log_amount, \
            r.log_subscriber, r.log_period::text AS log_period, r.log_attempt::text AS log_attempt, \
            r.log_reason::text AS log_reason, r.log_next_retry_at::text AS log_next_retry_at, ",
            snapshot_columns!("r"),
            ", ",
            joined_columns!($d, "NULL::bigint"),
            ", NULL::bigint AS subscription_sequence, r.retracted_event_id, r.retracted_kind, \
            r.ancestor_block, r.ancestor_hash, NULL::text AS risk_reason, NULL::text AS risk_amount, \
            NULL::text AS risk_required, NULL::text AS risk_available, \
            NULL::timestamptz AS risk_due_at, NULL::integer AS risk_period \
            FROM event_retractions r",
            joins!($d, "r", $merchant, $joins)
        )
    };
}

/// The event type of a `renewal_risks` row `k`: a trial's notice or a renewal at risk.
macro_rules! k_kind {
    () => {
        "(CASE WHEN k.reason = 'trial_will_end' THEN 'subscription.trial_will_end' \
         ELSE 'subscription.renewal_at_risk' END)"
    };
}

/// The same columns for `subscription.renewal_at_risk` and `subscription.trial_will_end` events (`renewal_risks`, migration
/// 0017): observations of chain state, not logs — the block they were observed at, a zero
/// transaction hash and log index -1 that the view never serves (it renders `chain: null`
/// and an `observation` block instead, so no indexed head either), and the subscription as
/// last indexed. `$merchant`, `$joins` as for [`joins`].
macro_rules! k_select {
    ($d:ident, $merchant:literal, $joins:expr) => {
        concat!(
            "SELECT k.id, k.public_id, ",
            k_kind!(),
            " AS kind, \
            k.block_time, k.chain_id, k.contract, k.block_number, k.block_hash, \
            decode(repeat('00', 32), 'hex') AS transaction_hash, -1 AS log_index, k.subscription_id, \
            k.amount::text AS log_amount, NULL::bytea AS log_subscriber, NULL::text AS log_period, \
            NULL::text AS log_attempt, NULL::text AS log_reason, NULL::text AS log_next_retry_at, ",
            snapshot_columns!("k"),
            ", ",
            joined_columns!($d, "NULL::bigint"),
            ", NULL::bigint AS subscription_sequence, \
            NULL::text AS retracted_event_id, NULL::text AS retracted_kind, \
            NULL::bigint AS ancestor_block, NULL::bytea AS ancestor_hash, k.reason AS risk_reason, \
            k.amount::text AS risk_amount, k.required::text AS risk_required, \
            k.available::text AS risk_available, k.due_at AS risk_due_at, \
            k.period AS risk_period \
            FROM renewal_risks k",
            joins!($d, "k", $merchant, $joins)
        )
    };
}

/// The joins that find the merchant of an event in table `$t` by its wallet (for the scoped
/// `plans` join) when no scope is given.
macro_rules! merchant_join {
    ($t:literal) => {
        concat!(
            " LEFT JOIN merchants pm ON pm.wallet = ",
            $t,
            ".merchant_wallet"
        )
    };
}

/// `SELECT … FROM chain_events ce …` for events of any merchant: each row's merchant and
/// chain head by join. `$d` as for [`joined_columns`].
macro_rules! unscoped_select {
    ($d:ident) => {
        ce_select!(
            $d,
            "pm.id",
            "cur.block_number",
            concat!(
                merchant_join!("ce"),
                " LEFT JOIN indexer_cursor cur ON cur.chain_id = ce.chain_id"
            )
        )
    };
}

/// Events of any merchant, with delivery state: the single-event read.
const SELECT: &str = unscoped_select!(delivery);
const RSELECT: &str = r_select!(delivery, "pm.id", merchant_join!("r"));
const KSELECT: &str = k_select!(delivery, "pm.id", merchant_join!("k"));

/// The same for webhook bodies, without delivery state: a body does not carry it, and the
/// outbox probe per event was ~30 % of the bodies' statement (pgbench, 50 ids).
const BODY_SELECT: &str = unscoped_select!(no_delivery);
const BODY_RSELECT: &str = r_select!(no_delivery, "pm.id", merchant_join!("r"));
const BODY_KSELECT: &str = k_select!(no_delivery, "pm.id", merchant_join!("k"));

/// One merchant's events on one chain (the list statements: `$11` the merchant's id, `$2`
/// the chain): the merchant is known, and the chain head is one row, read once per statement
/// (an uncorrelated subquery) instead of joined to each of a page's rows.
const SCOPED_SELECT: &str = ce_select!(
    delivery,
    "$11",
    "(SELECT cur.block_number FROM indexer_cursor cur WHERE cur.chain_id = $2)",
    ""
);
const SCOPED_RSELECT: &str = r_select!(delivery, "$11", "");
const SCOPED_KSELECT: &str = k_select!(delivery, "$11", "");

/// The type of a retraction event.
pub const RETRACTED: &str = "event.retracted";
/// The type of a renewal-at-risk observation.
pub const RENEWAL_AT_RISK: &str = "subscription.renewal_at_risk";
/// The type of the keeper's notice that a free trial ends soon (a `renewal_risks` row of
/// reason `trial_will_end`).
pub const TRIAL_WILL_END: &str = "subscription.trial_will_end";
/// The event types that come from no contract log: the retraction and the keeper's two
/// observations (the log-made types are `chainsub_abi::EventKind`).
pub const UNLOGGED_KINDS: [&str; 3] = [RETRACTED, RENEWAL_AT_RISK, TRIAL_WILL_END];

/// One lifecycle event, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub id: EventId,
    /// The API event type (`subscription.charged`).
    pub kind: Option<String>,
    /// The block's time.
    pub created_at: DateTime<Utc>,
    pub onchain_subscription_id: Option<i64>,
    /// Facts of the log itself.
    pub log: LogFacts,
    /// The subscription right after the event (`None` for a subscription created before
    /// the indexer's start block).
    pub snapshot: Option<SubscriptionSnapshot>,
    /// The merchant's plan the event's on-chain plan belongs to.
    pub plan_id: Option<PlanId>,
    /// The merchant's plan of the snapshot's scheduled plan change, if any.
    pub pending_plan_id: Option<PlanId>,
    pub chain: ChainRow,
    /// The webhook for this event; `None` until it is confirmed and queued.
    pub delivery: Option<DeliveryRow>,
    /// 1-based position of the event among its subscription's events in chain order (rows
    /// are written in chain order, so by row id); `None` for an event of no subscription
    /// and for a retraction.
    pub sequence: Option<i64>,
    /// For an `event.retracted` event: what it retracts.
    pub retraction: Option<RetractionRow>,
    /// For a `subscription.renewal_at_risk` observation: what was short (its `chain` is the
    /// observed block, with no transaction).
    pub risk: Option<RiskRow>,
}

/// A renewal at risk: what the next charge needs and what the wallet had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RiskRow {
    /// `allowance` or `balance`.
    pub reason: String,
    /// Base units.
    pub amount: Option<u128>,
    /// This charge and the wallet's other live charges due no later.
    pub required: Option<u128>,
    pub available: Option<u128>,
    pub due_at: DateTime<Utc>,
    /// The period whose charge is at risk.
    pub period: i32,
}

/// What an `event.retracted` event retracts; the removed event's position is the row's
/// `chain`, its content the row's `log` and `snapshot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetractionRow {
    pub event_id: EventId,
    pub kind: Option<String>,
    /// The block the index went back to: the last block both branches share.
    pub ancestor_block: i64,
    pub ancestor_hash: alloy::primitives::B256,
}

/// The fields of a log that events serve (`chain_events.log_*`; uints read as decimal text):
/// the rest of the log is not read, parsed or sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFacts {
    pub amount: Option<String>,
    pub subscriber: Option<Address>,
    pub period: Option<String>,
    pub attempt: Option<String>,
    pub reason: Option<String>,
    pub next_retry_at: Option<String>,
}

/// The webhook outbox row of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub status: OutboxStatus,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

impl EventRow {
    fn from_row(r: &Row) -> Result<Self> {
        Self::at(r, &EventCols::of(r.columns())?)
    }

    /// A row of a result whose column positions are known.
    fn at(r: &Row, cols: &EventCols) -> Result<Self> {
        let c = &cols.own;
        let id: &str = r.try_get(c.public_id)?;
        let subscriber: Option<&[u8]> = r.try_get(c.log_subscriber)?;
        let log = LogFacts {
            amount: r.try_get(c.log_amount)?,
            subscriber: subscriber.and_then(|a| Address::try_from(a).ok()),
            period: r.try_get(c.log_period)?,
            attempt: r.try_get(c.log_attempt)?,
            reason: r.try_get(c.log_reason)?,
            next_retry_at: r.try_get(c.log_next_retry_at)?,
        };
        let snapshot = cols.snapshot.read(r)?;
        let delivery = match r.try_get::<_, Option<&str>>(c.delivery_status)? {
            None => None,
            Some(status) => Some(DeliveryRow {
                status: OutboxStatus::parse(status)
                    .map_err(|e| Error::Inconsistent(e.to_string()))?,
                attempts: r.try_get(c.delivery_attempts)?,
                next_attempt_at: crate::chain::time(r, c.delivery_next_attempt_at)?,
                delivered_at: crate::chain::opt_time(r, c.delivery_delivered_at)?,
                last_error: r.try_get(c.delivery_last_error)?,
            }),
        };
        Ok(Self {
            id: EventId::parse(id)
                .ok_or_else(|| Error::Inconsistent(format!("event id {id:?}")))?,
            kind: r.try_get(c.kind)?,
            created_at: crate::chain::time(r, c.block_time)?,
            onchain_subscription_id: r.try_get(c.subscription_id)?,
            log,
            snapshot,
            plan_id: r
                .try_get::<_, Option<&str>>(c.plan_public_id)?
                .and_then(PlanId::parse),
            pending_plan_id: r
                .try_get::<_, Option<&str>>(c.pending_plan_public_id)?
                .and_then(PlanId::parse),
            chain: ChainRow::at(r, &cols.chain)?,
            delivery,
            sequence: r
                .try_get::<_, Option<i64>>(c.subscription_sequence)?
                .filter(|n| *n > 0),
            risk: match r.try_get::<_, Option<String>>(c.risk_reason)? {
                None => None,
                Some(reason) => Some(RiskRow {
                    reason,
                    amount: crate::chain::units(r.try_get(c.risk_amount)?),
                    required: r
                        .try_get::<_, Option<&str>>(c.risk_required)?
                        .and_then(crate::chain::units),
                    available: r
                        .try_get::<_, Option<&str>>(c.risk_available)?
                        .and_then(crate::chain::units),
                    due_at: crate::chain::time(r, c.risk_due_at)?,
                    period: r.try_get(c.risk_period)?,
                }),
            },
            retraction: match r.try_get::<_, Option<&str>>(c.retracted_event_id)? {
                None => None,
                Some(id) => Some(RetractionRow {
                    event_id: EventId::parse(id)
                        .ok_or_else(|| Error::Inconsistent(format!("event id {id:?}")))?,
                    kind: r.try_get(c.retracted_kind)?,
                    ancestor_block: r.try_get(c.ancestor_block)?,
                    ancestor_hash: crate::chain::b256(r.try_get(c.ancestor_hash)?)?,
                }),
            },
        })
    }
}

columns! {
    /// Where [`EventRow`]'s own columns are in a result.
    EventOwnCols {
        ancestor_block,
        ancestor_hash,
        block_time,
        delivery_attempts,
        delivery_delivered_at,
        delivery_last_error,
        delivery_next_attempt_at,
        delivery_status,
        kind,
        log_amount,
        log_attempt,
        log_next_retry_at,
        log_period,
        log_reason,
        log_subscriber,
        pending_plan_public_id,
        plan_public_id,
        public_id,
        retracted_event_id,
        retracted_kind,
        risk_amount,
        risk_available,
        risk_due_at,
        risk_period,
        risk_reason,
        risk_required,
        subscription_id,
        subscription_sequence,
    }
}

/// Where all of [`EventRow`]'s columns are in a result.
struct EventCols {
    own: EventOwnCols,
    chain: ChainCols,
    snapshot: SnapshotCols,
}

impl Columns for EventCols {
    fn of(columns: &[tokio_postgres::Column]) -> Result<Self> {
        Ok(Self {
            own: EventOwnCols::of(columns)?,
            chain: ChainCols::of(columns)?,
            snapshot: SnapshotCols::of(columns)?,
        })
    }
}

/// `by_ids`: the events of these public ids, of any merchant, without delivery state.
static BY_IDS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{BODY_SELECT} WHERE ce.public_id = ANY($1) \
         UNION ALL {BODY_RSELECT} WHERE r.public_id = ANY($1) \
         UNION ALL {BODY_KSELECT} WHERE k.public_id = ANY($1)"
    )
});

/// `get`: one of a merchant's events by public id.
static ONE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{SELECT}{SCOPE} AND ce.public_id = $3::text \
         UNION ALL {RSELECT}{RSCOPE} AND r.public_id = $3::text \
         UNION ALL {KSELECT}{KSCOPE} AND k.public_id = $3::text"
    )
});

/// Events by public id, for webhook bodies (the outbox rows name them; not merchant-scoped:
/// the dispatcher acts for the system). Unknown ids are absent.
pub async fn by_ids(client: &impl GenericClient, ids: &[&str]) -> Result<Vec<EventRow>> {
    let stmt = client.prepare_cached(&BY_IDS).await?;
    let rows = client.query(&stmt, &[&ids]).await?;
    // A row that does not read as an event is left out (logged): its delivery then fails as
    // "event not found" instead of one bad row stalling every body of the claim round.
    Ok(rows
        .iter()
        .filter_map(|r| match EventRow::from_row(r) {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::error!(error = %e, "an event row does not read; its webhook cannot be sent");
                None
            }
        })
        .collect())
}

/// A merchant's lifecycle events: `$1` wallet, `$2` chain id.
const SCOPE: &str =
    " WHERE ce.merchant_wallet = $1 AND ce.kind IS NOT NULL AND ce.chain_id = $2::bigint";
/// A merchant's retractions: `$1` wallet, `$2` chain id.
const RSCOPE: &str = " WHERE r.merchant_wallet = $1 AND r.chain_id = $2::bigint";
/// A merchant's renewal-at-risk observations: `$1` wallet, `$2` chain id.
const KSCOPE: &str = " WHERE k.merchant_wallet = $1 AND k.chain_id = $2::bigint";

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

/// The subscription filter: the on-chain number of the merchant's subscription with public id
/// `$4`, as a scalar subquery so `chain_events_subscription` serves it as an index condition.
const SUB_IS: &str = "ce.subscription_id = (SELECT s.onchain_id FROM subscriptions s \
    WHERE s.public_id = $4 AND s.merchant_wallet = $1 AND s.chain_id = $2)";
/// For retractions, the subscription as the removed event served it (its snapshot's id): the
/// subscription row may be gone with the reorg that removed its creation.
const RSUB_IS: &str = "r.snap_id = $4";
/// For observations, the subscription by its on-chain number, as for chain events.
const KSUB_IS: &str = "k.subscription_id = (SELECT s.onchain_id FROM subscriptions s \
    WHERE s.public_id = $4 AND s.merchant_wallet = $1 AND s.chain_id = $2)";

/// The list statements, each as a pair `[older, newer]` per leading filter (none, type,
/// subscription). `$1` wallet, `$2` chain id, `$3` type, `$4` subscription public id, `$5`/`$6`
/// block range, `$7`/`$8` time range, `$9` cursor key, `$10` rows to fetch, `$11` the
/// merchant's id.
struct ListStatements {
    /// The page of chain events, the page of retractions and the page of renewal-at-risk
    /// observations (each branch ordered and limited on its own index), merged by id: the
    /// three tables take their ids from one sequence.
    merged: [[String; 2]; 3],
    /// The page of chain events alone, each row also carrying `nearest_other`: the id of the
    /// nearest retraction or observation beyond the cursor that the merged statement's other
    /// branches would consider (one-time subqueries over the same snapshot; `NULL` if none).
    /// When there is none, or the page is full and that row lies past its far edge, this page
    /// *is* the merged page ([`chain_page_is_merged_page`]); otherwise [`list`] runs the merged
    /// statement. Most merchants have no such rows near the top of their list, and the merged
    /// statement costs ~25 % more Postgres time per page (three branches to start, each with
    /// its joins).
    chain_only: [[String; 2]; 3],
}

static LIST: LazyLock<ListStatements> = LazyLock::new(|| {
    let kind = |lead| page::filter(lead, 3, "text", "ce.kind = $3");
    let sub = |lead| page::filter(lead, 4, "text", SUB_IS);
    let rkind = |lead| page::filter(lead, 3, "text", "$3 = 'event.retracted'");
    let rsub = |lead| page::filter(lead, 4, "text", RSUB_IS);
    let kkind = |lead| page::filter(lead, 3, "text", concat!("$3 = ", k_kind!()));
    let ksub = |lead| page::filter(lead, 4, "text", KSUB_IS);
    let ranges = |t: &str, time: &str| {
        format!(
            " AND ($5::bigint IS NULL OR {t}.block_number >= $5) \
             AND ($6::bigint IS NULL OR {t}.block_number <= $6) \
             AND ($7::timestamptz IS NULL OR {t}.{time} >= $7) \
             AND ($8::timestamptz IS NULL OR {t}.{time} < $8)"
        )
    };
    let (ce_ranges, r_ranges) = (ranges("ce", "block_time"), ranges("r", "detected_at"));
    let k_ranges = ranges("k", "block_time");
    let tails = keyset("ce.id", 9, 10);
    let r_tails = keyset("r.id", 9, 10);
    let k_tails = keyset("k.id", 9, 10);
    let r_bounds = page::keyset_bound("r.id", 9);
    let k_bounds = page::keyset_bound("k.id", 9);
    let dirs = ["DESC", "ASC"];
    let merged = |k: bool, s: bool| {
        std::array::from_fn(|d| {
            format!(
                "SELECT * FROM (({SCOPED_SELECT}{SCOPE}{}{}{ce_ranges}{}) UNION ALL \
                 ({SCOPED_RSELECT}{RSCOPE}{}{}{r_ranges}{}) UNION ALL \
                 ({SCOPED_KSELECT}{KSCOPE}{}{}{k_ranges}{})) u ORDER BY u.id {} LIMIT $10",
                kind(k),
                sub(s),
                tails[d],
                rkind(k),
                rsub(s),
                r_tails[d],
                kkind(k),
                ksub(s),
                k_tails[d],
                dirs[d],
            )
        })
    };
    // Older pages go down from the cursor: the nearest other row is the greatest id below it;
    // newer pages go up: the least id above it. GREATEST/LEAST skip NULLs.
    let nearest = [("GREATEST", "max"), ("LEAST", "min")];
    let chain_only = |k: bool, s: bool| {
        std::array::from_fn(|d| {
            let (pick, agg) = nearest[d];
            let nearest_other = format!(
                "{pick}((SELECT {agg}(r.id) FROM event_retractions r{RSCOPE}{}{}{r_ranges}{}), \
                 (SELECT {agg}(k.id) FROM renewal_risks k{KSCOPE}{}{}{k_ranges}{})) \
                 AS nearest_other",
                rkind(k),
                rsub(s),
                r_bounds[d],
                kkind(k),
                ksub(s),
                k_bounds[d],
            );
            let columns = SCOPED_SELECT
                .strip_prefix("SELECT ")
                .expect("a SELECT statement");
            format!(
                "SELECT {nearest_other}, {columns}{SCOPE}{}{}{ce_ranges}{}",
                kind(k),
                sub(s),
                tails[d],
            )
        })
    };
    ListStatements {
        merged: [
            merged(false, false),
            merged(true, false),
            merged(false, true),
        ],
        chain_only: [
            chain_only(false, false),
            chain_only(true, false),
            chain_only(false, true),
        ],
    }
});

/// A page of `scope`'s events on `chain_id`, newest first. Returns the rows and whether
/// there are more.
pub async fn list(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    filter: &Filter<'_>,
    page: Page,
) -> Result<(Vec<EventRow>, bool)> {
    list_by(client, scope, chain_id, filter, page, false).await
}

async fn list_by(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    filter: &Filter<'_>,
    page: Page,
    merged_only: bool,
) -> Result<(Vec<EventRow>, bool)> {
    let leading = if filter.subscription.is_some() {
        2
    } else if filter.kind.is_some() {
        1
    } else {
        0
    };
    let (wallet, sub, fetch, id) = (
        scope.wallet_bytes(),
        filter.subscription.map(SubscriptionId::as_str),
        page.fetch(),
        scope.id(),
    );
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
        &wallet,
        &chain_id,
        &filter.kind,
        &sub,
        &filter.from_block,
        &filter.to_block,
        &filter.created_gte,
        &filter.created_lt,
        &page.key,
        &fetch,
        &id,
    ];
    let dir = page.direction.index();
    // Retractions or observations only: the chain-events branch has nothing to give.
    let merged_now = merged_only
        || matches!(
            filter.kind,
            Some(RETRACTED | RENEWAL_AT_RISK | TRIAL_WILL_END)
        );
    let mut rows = if merged_now {
        Vec::new()
    } else {
        let stmt = client
            .prepare_cached(&LIST.chain_only[leading][dir])
            .await?;
        client.query(&stmt, &params).await?
    };
    if merged_now || !chain_page_is_merged_page(&rows, page)? {
        let stmt = client.prepare_cached(&LIST.merged[leading][dir]).await?;
        rows = client.query(&stmt, &params).await?;
    }
    page::typed_page(rows, page, typed_by(EventRow::at))
}

/// Whether a page of the chain-only statement is the page the merged statement would give:
/// the three tables share one id sequence, so it is when no other row lies beyond the cursor
/// (`nearest_other` NULL), or when the page is full (`fetch` rows) and the nearest other row
/// lies past its last row (older pages: below its least id; newer pages: above its greatest).
/// An empty page carries no `nearest_other` and says nothing.
fn chain_page_is_merged_page(rows: &[Row], page: Page) -> Result<bool> {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Ok(false);
    };
    let Some(nearest) = first.try_get::<_, Option<i64>>("nearest_other")? else {
        return Ok(true);
    };
    let edge: i64 = last.try_get("id")?;
    let full = rows.len() as i64 >= page.fetch();
    Ok(full
        && match page.direction {
            Direction::Older => nearest < edge,
            Direction::Newer => nearest > edge,
        })
}

/// [`list`] by the merged statement alone: what [`list`] must always answer (tests compare).
#[doc(hidden)]
pub async fn list_merged(
    client: &impl GenericClient,
    scope: &MerchantScope,
    chain_id: ChainId,
    filter: &Filter<'_>,
    page: Page,
) -> Result<(Vec<EventRow>, bool)> {
    list_by(client, scope, chain_id, filter, page, true).await
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
             AND kind IS NOT NULL \
             UNION ALL SELECT id FROM event_retractions WHERE public_id = $1 AND merchant_wallet = $2 \
             UNION ALL SELECT id FROM renewal_risks WHERE public_id = $1 AND merchant_wallet = $2",
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
    chain_id: ChainId,
    id: &EventId,
) -> Result<Option<EventRow>> {
    let stmt = client.prepare_cached(&ONE).await?;
    client
        .query_opt(&stmt, &[&scope.wallet_bytes(), &chain_id, &id.as_str()])
        .await?
        .as_ref()
        .map(EventRow::from_row)
        .transpose()
}

#[cfg(test)]
/// Every statement this module sends, by the name of its file under `store/sql/events/`,
/// where each is written out as Postgres runs it (laid out on lines; a test keeps the files
/// equal to the statements, `CHAINSUB_WRITE_GENERATED=1` rewrites them).
pub fn statements() -> Vec<(String, &'static str)> {
    let mut out = vec![
        ("get".to_string(), ONE.as_str()),
        ("by_ids".to_string(), BY_IDS.as_str()),
    ];
    let leads = ["all", "by_type", "by_subscription"];
    let dirs = ["older", "newer"];
    for (kind, set) in [("merged", &LIST.merged), ("chain_only", &LIST.chain_only)] {
        for (lead, pair) in leads.iter().zip(set) {
            for (dir, statement) in dirs.iter().zip(pair) {
                out.push((format!("list_{kind}_{lead}_{dir}"), statement.as_str()));
            }
        }
    }
    out
}

#[cfg(test)]
/// A statement laid out for reading: each clause on a line indented by its parenthesis
/// depth, a select list one column per line; only whitespace differs from what is sent.
pub fn layout(statement: &str) -> String {
    const CLAUSES: [&str; 7] = [
        "SELECT ",
        "FROM ",
        "LEFT JOIN ",
        "WHERE ",
        "UNION ALL ",
        "ORDER BY ",
        "LIMIT ",
    ];
    let flat = statement.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(flat.len() * 2);
    // Per depth: whether its current clause is a select list.
    let mut listing: Vec<bool> = vec![false];
    let mut quoted = false;
    let mut rest = flat.as_str();
    while let Some(c) = rest.chars().next() {
        let depth = listing.len() - 1;
        let indent = |n: usize| "  ".repeat(n);
        if !quoted
            && (out.ends_with(' ') || out.ends_with('(') || out.is_empty())
            && let Some(clause) = CLAUSES.iter().find(|k| rest.starts_with(**k))
        {
            if out.ends_with(' ') {
                out.pop();
            }
            if !out.is_empty() {
                out.push('\n');
                out.push_str(&indent(depth));
            }
            out.push_str(clause);
            listing[depth] = *clause == "SELECT ";
            rest = &rest[clause.len()..];
            continue;
        }
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => listing.push(false),
            ')' if !quoted && listing.len() > 1 => {
                listing.pop();
            }
            ',' if !quoted && listing[depth] && rest.starts_with(", ") => {
                out.push_str(",\n");
                out.push_str(&indent(depth + 1));
                rest = &rest[2..];
                continue;
            }
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out.push('\n');
    out
}

/// The list statements, for tests that check their plans.
#[doc(hidden)]
pub fn list_statements() -> Vec<&'static str> {
    LIST.merged
        .iter()
        .chain(&LIST.chain_only)
        .flatten()
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `store/sql/events/<name>.sql` holds each statement as sent, laid out; no other file is
    /// there. `CHAINSUB_WRITE_GENERATED=1` rewrites them.
    #[test]
    fn the_sql_files_are_the_statements_the_code_sends() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/events");
        let write = std::env::var_os("CHAINSUB_WRITE_GENERATED").is_some();
        let header = "-- Generated from store/src/events.rs (events::statements): what Postgres \
                      runs, one clause per line.\n-- A test keeps this file equal to the code; \
                      CHAINSUB_WRITE_GENERATED=1 cargo test -p chainsub-store rewrites it.\n";
        let wanted: Vec<(String, String)> = statements()
            .into_iter()
            .map(|(name, sql)| (format!("{name}.sql"), format!("{header}{}", layout(sql))))
            .collect();
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap() {
                std::fs::remove_file(entry.unwrap().path()).unwrap();
            }
            for (file, text) in &wanted {
                std::fs::write(dir.join(file), text).unwrap();
            }
        }
        let mut present: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; run with CHAINSUB_WRITE_GENERATED=1",
                    dir.display()
                )
            })
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        present.sort();
        let mut names: Vec<String> = wanted.iter().map(|(f, _)| f.clone()).collect();
        names.sort();
        assert_eq!(
            present, names,
            "store/sql/events: run with CHAINSUB_WRITE_GENERATED=1"
        );
        for (file, text) in &wanted {
            let on_disk = std::fs::read_to_string(dir.join(file)).unwrap();
            assert_eq!(
                &on_disk, text,
                "store/sql/events/{file} is not the statement the code sends: run with \
                 CHAINSUB_WRITE_GENERATED=1"
            );
        }
    }

    #[test]
    fn the_layout_changes_only_whitespace() {
        for (_, sql) in statements() {
            let squash = |s: &str| s.split_whitespace().collect::<String>();
            assert_eq!(squash(&layout(sql)), squash(sql));
        }
    }
}
