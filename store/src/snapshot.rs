//! Each event's subscription snapshot as stored: the `snap_*` columns of `chain_events`,
//! `event_retractions` and `renewal_risks` (migration 0025), typed, where they were one JSON
//! text. The sink writes them from the fold's [`chainsub_core::SubscriptionState`]
//! ([`crate::index::insert_events`]); the events page, webhook bodies and `indexer verify`
//! read them back into the [`SubscriptionSnapshot`] that state gives.

use chainsub_core::{SubscriptionId, SubscriptionSnapshot, SubscriptionStatus};
use tokio_postgres::Row;

use crate::chain::{address, opt_time, time};
use crate::{Error, Result};

/// A `SELECT` list of the snapshot columns of table alias `$t` (the amount as text).
macro_rules! snapshot_columns {
    ($t:literal) => {
        concat!(
            $t,
            ".snap_id, ",
            $t,
            ".snap_status, ",
            $t,
            ".snap_cancel_at_period_end, ",
            $t,
            ".snap_period, ",
            $t,
            ".snap_period_start, ",
            $t,
            ".snap_period_end, ",
            $t,
            ".snap_next_payment_at, ",
            $t,
            ".snap_failed_attempts, ",
            $t,
            ".snap_subscriber, ",
            $t,
            ".snap_customer_external_id, ",
            $t,
            ".snap_amount::text AS snap_amount, ",
            $t,
            ".snap_plan_onchain_id, ",
            $t,
            ".snap_trial_end, ",
            $t,
            ".snap_pending_plan_onchain_id, ",
            $t,
            ".snap_pending_amount::text AS snap_pending_amount"
        )
    };
}
pub(crate) use snapshot_columns;

/// The snapshot columns as stored, each name after `$p` (`""` for an insert's column list,
/// `"x."` for table alias `x`): for statements that copy a snapshot from one table to another.
macro_rules! stored_snapshot {
    ($p:literal) => {
        concat!(
            $p,
            "snap_id, ",
            $p,
            "snap_status, ",
            $p,
            "snap_cancel_at_period_end, ",
            $p,
            "snap_period, ",
            $p,
            "snap_period_start, ",
            $p,
            "snap_period_end, ",
            $p,
            "snap_next_payment_at, ",
            $p,
            "snap_failed_attempts, ",
            $p,
            "snap_subscriber, ",
            $p,
            "snap_customer_external_id, ",
            $p,
            "snap_amount, ",
            $p,
            "snap_plan_onchain_id, ",
            $p,
            "snap_trial_end, ",
            $p,
            "snap_pending_plan_onchain_id, ",
            $p,
            "snap_pending_amount"
        )
    };
}
pub(crate) use stored_snapshot;

columns! {
    /// Where a snapshot's columns are in a result.
    SnapshotCols {
        snap_id,
        snap_status,
        snap_cancel_at_period_end,
        snap_period,
        snap_period_start,
        snap_period_end,
        snap_next_payment_at,
        snap_failed_attempts,
        snap_subscriber,
        snap_customer_external_id,
        snap_amount,
        snap_plan_onchain_id,
        snap_trial_end,
        snap_pending_plan_onchain_id,
        snap_pending_amount,
    }
}

impl SnapshotCols {
    /// The snapshot of a row; `None` where it has none (a subscription created before the
    /// indexer's start block). A stored value the snapshot's types cannot hold is an error.
    pub(crate) fn read(&self, r: &Row) -> Result<Option<SubscriptionSnapshot>> {
        let Some(id) = r.try_get::<_, Option<&str>>(self.snap_id)? else {
            return Ok(None);
        };
        let bad = |what: &str| Error::Inconsistent(format!("snapshot {what} out of range"));
        let status: &str = r.try_get(self.snap_status)?;
        let rfc3339 = |t: chrono::DateTime<chrono::Utc>| chainsub_core::time::rfc3339_of(&t);
        Ok(Some(SubscriptionSnapshot {
            id: SubscriptionId::parse(id).ok_or_else(|| bad("id"))?,
            status: SubscriptionStatus::parse(status).map_err(|_| bad("status"))?,
            cancel_at_period_end: r.try_get(self.snap_cancel_at_period_end)?,
            period: u32::try_from(r.try_get::<_, i32>(self.snap_period)?)
                .map_err(|_| bad("period"))?,
            current_period_start: rfc3339(time(r, self.snap_period_start)?),
            current_period_end: rfc3339(time(r, self.snap_period_end)?),
            next_payment_at: opt_time(r, self.snap_next_payment_at)?.map(rfc3339),
            failed_attempts: u8::try_from(r.try_get::<_, i16>(self.snap_failed_attempts)?)
                .map_err(|_| bad("failed attempts"))?,
            subscriber: address(r.try_get(self.snap_subscriber)?)?,
            customer_external_id: r.try_get(self.snap_customer_external_id)?,
            amount: r.try_get(self.snap_amount)?,
            plan_onchain_id: r.try_get(self.snap_plan_onchain_id)?,
            trial_end: opt_time(r, self.snap_trial_end)?.map(rfc3339),
            pending_plan_onchain_id: r.try_get(self.snap_pending_plan_onchain_id)?,
            pending_amount: r.try_get(self.snap_pending_amount)?,
        }))
    }
}
