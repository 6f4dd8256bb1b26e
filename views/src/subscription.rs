//! Subscriptions and their ledgers (`GET /api/v1/subscriptions[/{id}]`).

use alloy::primitives::Address;
use chainsub_core::{CURRENCY, EventId, LedgerKind, PlanId, SubscriptionId, SubscriptionStatus};
use chainsub_store::subscriptions::{LedgerRow, SubscriptionRow};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ChainView, usdc};
use crate::json::{self, WriteJson};

/// The Subscription object.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionView<'a> {
    pub id: &'a SubscriptionId,
    pub object: &'static str,
    pub status: SubscriptionStatus,
    pub cancel_at_period_end: bool,
    pub plan_id: Option<&'a PlanId>,
    pub customer_external_id: Option<&'a str>,
    /// `matched`, `unmatched` (a reference not made for this wallet: no customer named) or
    /// `none`.
    pub customer_reference: &'static str,
    #[serde(serialize_with = "super::checksummed")]
    pub subscriber: Address,
    pub amount: Option<String>,
    pub currency: &'static str,
    pub period: i32,
    #[serde(serialize_with = "super::time")]
    pub current_period_start: DateTime<Utc>,
    #[serde(serialize_with = "super::time")]
    pub current_period_end: DateTime<Utc>,
    #[serde(serialize_with = "super::opt_time")]
    pub next_payment_at: Option<DateTime<Utc>>,
    pub failed_attempts: i32,
    pub ended_reason: Option<&'a str>,
    /// When the free trial ends (or ended); null without a trial.
    #[serde(serialize_with = "super::opt_time")]
    pub trial_end: Option<DateTime<Utc>>,
    /// A downgrade scheduled for the next renewal, if any.
    pub pending_plan_change: Option<PendingPlanChangeView<'a>>,
    #[serde(serialize_with = "super::time")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "super::time")]
    pub updated_at: DateTime<Utc>,
    pub chain: ChainView,
}

impl<'a> From<&'a SubscriptionRow> for SubscriptionView<'a> {
    fn from(r: &'a SubscriptionRow) -> Self {
        let next_payment_at = r.next_payment_at();
        let mut chain = ChainView::from(&r.chain);
        chain.onchain_subscription_id = Some(r.onchain_id);
        chain.onchain_plan_id = Some(r.plan_onchain_id);
        SubscriptionView {
            id: &r.id,
            object: "subscription",
            status: r.status,
            cancel_at_period_end: r.cancel_at_period_end,
            plan_id: r.plan_id.as_ref(),
            customer_external_id: r.customer_external_id.as_deref(),
            customer_reference: r.customer_reference.as_str(),
            subscriber: r.subscriber,
            amount: usdc(r.amount),
            currency: CURRENCY,
            period: r.period,
            current_period_start: r.current_period_start,
            current_period_end: r.current_period_end,
            next_payment_at,
            failed_attempts: r.failed_attempts,
            ended_reason: r.ended_reason.as_deref(),
            trial_end: r.trial_end,
            pending_plan_change: r
                .pending_plan_change
                .as_ref()
                .map(|p| PendingPlanChangeView {
                    plan_id: p.plan_id.as_ref(),
                    amount: usdc(p.amount),
                    currency: CURRENCY,
                    effective_at: super::rfc3339(&r.current_period_end),
                }),
            created_at: r.created_at,
            updated_at: r.updated_at,
            chain,
        }
    }
}

impl WriteJson for SubscriptionView<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"id\":");
        json::plain(out, self.id.as_str());
        json::raw(out, ",\"object\":");
        json::plain(out, self.object);
        json::raw(out, ",\"status\":");
        json::plain(out, self.status.as_str());
        json::raw(out, ",\"cancelAtPeriodEnd\":");
        json::boolean(out, self.cancel_at_period_end);
        json::raw(out, ",\"planId\":");
        json::opt_plain(out, self.plan_id.map(|p| p.as_str()));
        json::raw(out, ",\"customerExternalId\":");
        json::opt_string(out, self.customer_external_id);
        json::raw(out, ",\"customerReference\":");
        json::plain(out, self.customer_reference);
        json::raw(out, ",\"subscriber\":");
        json::address(out, &self.subscriber);
        json::raw(out, ",\"amount\":");
        json::opt_plain(out, self.amount.as_deref());
        json::raw(out, ",\"currency\":");
        json::plain(out, self.currency);
        json::raw(out, ",\"period\":");
        json::int(out, self.period);
        json::raw(out, ",\"currentPeriodStart\":");
        json::time(out, &self.current_period_start);
        json::raw(out, ",\"currentPeriodEnd\":");
        json::time(out, &self.current_period_end);
        json::raw(out, ",\"nextPaymentAt\":");
        json::opt_time(out, self.next_payment_at.as_ref());
        json::raw(out, ",\"failedAttempts\":");
        json::int(out, self.failed_attempts);
        json::raw(out, ",\"endedReason\":");
        json::opt_string(out, self.ended_reason);
        json::raw(out, ",\"trialEnd\":");
        json::opt_time(out, self.trial_end.as_ref());
        json::raw(out, ",\"pendingPlanChange\":");
        PendingPlanChangeView::write_opt(self.pending_plan_change.as_ref(), out);
        json::raw(out, ",\"createdAt\":");
        json::time(out, &self.created_at);
        json::raw(out, ",\"updatedAt\":");
        json::time(out, &self.updated_at);
        json::raw(out, ",\"chain\":");
        self.chain.write_json(out);
        json::raw(out, "}");
    }
}

/// A plan change scheduled for the next renewal: the plan it moves to (null when not one of
/// the merchant's plans through us), its amount per period, and when it takes effect (the
/// current period's end).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingPlanChangeView<'a> {
    pub plan_id: Option<&'a PlanId>,
    pub amount: Option<String>,
    pub currency: &'static str,
    pub effective_at: String,
}

impl PendingPlanChangeView<'_> {
    /// The view, or `null`.
    pub(crate) fn write_opt(v: Option<&Self>, out: &mut Vec<u8>) {
        match v {
            Some(v) => v.write_json(out),
            None => json::raw(out, "null"),
        }
    }
}

impl WriteJson for PendingPlanChangeView<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"planId\":");
        json::opt_plain(out, self.plan_id.map(|p| p.as_str()));
        json::raw(out, ",\"amount\":");
        json::opt_plain(out, self.amount.as_deref());
        json::raw(out, ",\"currency\":");
        json::plain(out, self.currency);
        json::raw(out, ",\"effectiveAt\":");
        json::string(out, &self.effective_at);
        json::raw(out, "}");
    }
}

/// A subscription with its ledger (`GET /api/v1/subscriptions/{id}`).
#[derive(Debug, Serialize)]
pub struct SubscriptionWithLedger<'a> {
    #[serde(flatten)]
    pub subscription: SubscriptionView<'a>,
    pub ledger: Vec<LedgerEntryView<'a>>,
}

/// One ledger entry: a charge, a failed charge, a proration (an upgrade's prorated charge) or
/// a refund (money the merchant paid back: a negative amount).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntryView<'a> {
    pub id: &'a EventId,
    pub object: &'static str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub amount: Option<String>,
    pub currency: &'static str,
    pub period: i32,
    #[serde(serialize_with = "super::opt_time")]
    pub period_start: Option<DateTime<Utc>>,
    #[serde(serialize_with = "super::opt_time")]
    pub period_end: Option<DateTime<Utc>>,
    pub attempt: i32,
    pub failure_reason: Option<&'a str>,
    #[serde(serialize_with = "super::time")]
    pub created_at: DateTime<Utc>,
    pub chain: ChainView,
    /// A charge's: how much of its period the merchant refunded so far (the refunds naming
    /// this period, positive); `null` for the other kinds.
    pub refunded: Option<String>,
}

impl LedgerEntryView<'_> {
    /// A ledger's entries, each charge with what its period's refunds total.
    pub fn list(rows: &[LedgerRow]) -> Vec<LedgerEntryView<'_>> {
        rows.iter()
            .map(|r| {
                let mut view = LedgerEntryView::from(r);
                if r.kind == LedgerKind::Charge {
                    let refunded: u128 = rows
                        .iter()
                        .filter(|x| x.kind == LedgerKind::Refund && x.period == r.period)
                        .filter_map(|x| x.amount)
                        .sum();
                    view.refunded = usdc(Some(refunded));
                }
                view
            })
            .collect()
    }
}

impl<'a> From<&'a LedgerRow> for LedgerEntryView<'a> {
    fn from(r: &'a LedgerRow) -> Self {
        LedgerEntryView {
            id: &r.event_id,
            object: "ledger_entry",
            kind: r.kind.as_str(),
            amount: match r.kind {
                LedgerKind::Refund => usdc(r.amount).map(|a| format!("-{a}")),
                _ => usdc(r.amount),
            },
            currency: CURRENCY,
            period: r.period,
            period_start: r.period_start,
            period_end: r.period_end,
            attempt: r.attempt,
            failure_reason: r.failure_reason.as_deref(),
            created_at: r.block_time,
            chain: ChainView::from(&r.chain),
            refunded: None,
        }
    }
}

/// `POST /api/v1/subscriptions/{id}/cancel` → 202: the cancellation as sent on chain for the
/// merchant, with the subscription as indexed so far. The lifecycle event
/// (`subscription.cancel_at_period_end_set` or `subscription.cancelled`) follows through `/events`
/// and webhooks once the transaction is mined and confirmed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancellationView<'a> {
    pub object: &'static str,
    pub subscription_id: &'a SubscriptionId,
    pub at_period_end: bool,
    /// `pending`: sent, the index has not seen it yet; `completed` (a replay under the same
    /// `Idempotency-Key`): on chain and indexed, `subscription` shows it.
    pub status: &'static str,
    pub transaction_hash: alloy::primitives::B256,
    #[serde(serialize_with = "super::time")]
    pub requested_at: DateTime<Utc>,
    pub subscription: SubscriptionView<'a>,
}
