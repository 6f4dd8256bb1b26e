//! The Event object (docs/design.md §4): `GET /api/v1/events` and every webhook body.

use alloy::primitives::{Address, B256};
use chainsub_abi::{EndReason, FailureReason};
use chainsub_core::{
    CURRENCY, EventId, OutboxStatus, PlanId, SubscriptionId, SubscriptionSnapshot,
    SubscriptionStatus,
};
use chainsub_store::events::{DeliveryRow, EventRow};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ChainView, rfc3339, rfc3339_millis};
use crate::json::{self, WriteJson};
use crate::subscription::PendingPlanChangeView;

/// One lifecycle event. `delivery` is the webhook's state, listed by the API only: a webhook
/// body is the event alone.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView<'a> {
    pub id: &'a EventId,
    pub object: &'static str,
    #[serde(rename = "type")]
    pub kind: Option<&'a str>,
    #[serde(serialize_with = "super::time")]
    pub created_at: DateTime<Utc>,
    /// 1-based position among the subscription's events in chain order: a receiver sees
    /// a gap or a repeat at once.
    pub sequence: Option<i64>,
    pub data: EventData<'a>,
    /// The log's position on chain; `null` for an observation (`subscription.renewal_at_risk`),
    /// which is no log: reconciliation of on-chain events skips it.
    pub chain: Option<ChainView>,
    /// `subscription.renewal_at_risk` only: the chain state the service read, and where.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation: Option<ObservationView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Option<DeliveryView<'a>>>,
}

/// Where an observation was made: a block (not a transaction).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservationView {
    pub chain_id: chainsub_core::ChainId,
    #[serde(serialize_with = "super::checksummed")]
    pub contract: Address,
    pub block_number: i64,
    pub block_hash: B256,
    #[serde(serialize_with = "super::time")]
    pub block_time: DateTime<Utc>,
    pub onchain_subscription_id: Option<i64>,
}

/// `data.renewalAtRisk`: which of the subscriber's balance or allowance to the contract
/// cannot cover the next charge, by how much, and when it falls due.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenewalAtRiskView<'a> {
    /// `allowance` or `balance`.
    pub reason: &'a str,
    /// The charge due (USDC).
    pub amount_due: Option<String>,
    /// What the wallet needs by then (USDC): this charge and the charges of its other live
    /// subscriptions due no later, which draw on the same balance and allowance.
    pub amount_required: Option<String>,
    /// The balance or allowance observed (USDC).
    pub available: Option<String>,
    /// `amountRequired - available` (USDC).
    pub shortfall: Option<String>,
    #[serde(serialize_with = "super::time")]
    pub due_at: DateTime<Utc>,
    /// The period whose charge is at risk.
    pub period: i32,
}

/// `data`: the payload shape merchants integrate with, the subscription as of the event, and
/// the facts of the log that only some types have.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventData<'a> {
    pub subscription_id: Option<&'a SubscriptionId>,
    pub plan_id: Option<&'a PlanId>,
    pub customer_external_id: Option<&'a str>,
    #[serde(serialize_with = "super::opt_checksummed")]
    pub subscriber_address: Option<Address>,
    pub amount: Option<String>,
    pub currency: &'static str,
    /// The log's transaction; `null` for an observation.
    pub tx_hash: Option<B256>,
    pub status: Option<SubscriptionStatus>,
    pub next_payment_at: Option<&'a str>,
    pub subscription: SnapshotView<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<Option<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_reason: Option<Option<&'static str>>,
    /// `event.retracted` only: the event a reorg removed (the rest of `data` is that event's,
    /// as it was served).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retracted: Option<RetractedView<'a>>,
    /// `subscription.renewal_at_risk` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal_at_risk: Option<RenewalAtRiskView<'a>>,
}

/// The event an `event.retracted` event takes back, and where the chain went instead.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetractedView<'a> {
    /// The removed event's id (also its `webhook-id`): forget it, and accept it again if it
    /// comes back on the new branch.
    pub event_id: &'a EventId,
    #[serde(rename = "type")]
    pub kind: Option<&'a str>,
    pub block_number: i64,
    pub block_hash: B256,
    pub transaction_hash: B256,
    pub log_index: i64,
    /// The last block both branches share.
    pub common_ancestor: AncestorView,
}

/// A block both branches of a reorg share.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AncestorView {
    pub block_number: i64,
    pub block_hash: B256,
}

/// The subscription as of the event; every field null when the index has no snapshot (a
/// subscription created before the indexer's start block).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotView<'a> {
    pub id: Option<&'a SubscriptionId>,
    pub object: &'static str,
    pub status: Option<SubscriptionStatus>,
    pub cancel_at_period_end: Option<bool>,
    pub plan_id: Option<&'a PlanId>,
    pub customer_external_id: Option<&'a str>,
    #[serde(serialize_with = "super::opt_checksummed")]
    pub subscriber: Option<Address>,
    pub amount: Option<String>,
    pub currency: &'static str,
    pub period: Option<u32>,
    pub current_period_start: Option<&'a str>,
    pub current_period_end: Option<&'a str>,
    pub next_payment_at: Option<&'a str>,
    pub failed_attempts: Option<u8>,
    pub trial_end: Option<&'a str>,
    pub pending_plan_change: Option<PendingPlanChangeView<'a>>,
}

/// The webhook of an event, as `GET /api/v1/events` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView<'a> {
    pub status: OutboxStatus,
    pub attempts: i32,
    pub next_attempt_at: Option<String>,
    pub delivered_at: Option<String>,
    pub last_error: Option<&'a str>,
}

impl<'a> From<&'a DeliveryRow> for DeliveryView<'a> {
    fn from(d: &'a DeliveryRow) -> Self {
        let waiting = matches!(d.status, OutboxStatus::Pending | OutboxStatus::Delivering);
        DeliveryView {
            status: d.status,
            attempts: d.attempts,
            next_attempt_at: waiting.then(|| rfc3339_millis(&d.next_attempt_at)),
            delivered_at: d.delivered_at.as_ref().map(rfc3339_millis),
            last_error: d.last_error.as_deref(),
        }
    }
}

fn usdc_text(units: Option<&str>) -> Option<String> {
    super::usdc(units.and_then(|u| u.parse::<u128>().ok()))
}

impl<'a> SnapshotView<'a> {
    fn of(
        s: Option<&'a SubscriptionSnapshot>,
        plan_id: Option<&'a PlanId>,
        pending_plan_id: Option<&'a PlanId>,
    ) -> Self {
        SnapshotView {
            id: s.map(|s| &s.id),
            object: "subscription",
            status: s.map(|s| s.status),
            cancel_at_period_end: s.map(|s| s.cancel_at_period_end),
            plan_id,
            customer_external_id: s.and_then(|s| s.customer_external_id.as_deref()),
            subscriber: s.map(|s| s.subscriber),
            amount: usdc_text(s.map(|s| s.amount.as_str())),
            currency: CURRENCY,
            period: s.map(|s| s.period),
            current_period_start: s.map(|s| s.current_period_start.as_str()),
            current_period_end: s.map(|s| s.current_period_end.as_str()),
            next_payment_at: s.and_then(|s| s.next_payment_at.as_deref()),
            failed_attempts: s.map(|s| s.failed_attempts),
            trial_end: s.and_then(|s| s.trial_end.as_deref()),
            pending_plan_change: s.and_then(|s| {
                s.pending_amount
                    .as_deref()
                    .map(|amount| PendingPlanChangeView {
                        plan_id: pending_plan_id,
                        amount: usdc_text(Some(amount)),
                        currency: CURRENCY,
                        effective_at: s.current_period_end.clone(),
                    })
            }),
        }
    }
}

impl<'a> EventView<'a> {
    /// The webhook body of an event (no `delivery`).
    pub fn webhook(r: &'a EventRow) -> Self {
        let snapshot = r.snapshot.as_ref();
        let log = &r.log;
        let small = |v: &Option<String>| v.as_deref().and_then(|v| v.parse::<i64>().ok());
        let reason = log.reason.as_deref().and_then(|v| v.parse::<u8>().ok());
        let trial_notice = r.kind.as_deref() == Some(chainsub_store::events::TRIAL_WILL_END);
        let (mut failure_reason, mut next_retry_at, mut end_reason) = (None, None, None);
        match (r.kind.as_deref(), reason) {
            (Some("subscription.payment_failed"), Some(code)) => {
                failure_reason = Some(FailureReason::from_u8(code).map(|x| x.as_str()));
                next_retry_at = small(&log.next_retry_at)
                    .map(|t| DateTime::from_timestamp(t, 0).as_ref().map(rfc3339));
            }
            (Some("subscription.ended"), Some(code)) => {
                end_reason = Some(EndReason::from_u8(code).map(|x| x.as_str()));
            }
            _ => {}
        }
        EventView {
            id: &r.id,
            object: "event",
            kind: r.kind.as_deref(),
            created_at: r.created_at,
            sequence: r.sequence,
            data: EventData {
                subscription_id: snapshot.map(|s| &s.id),
                plan_id: r.plan_id.as_ref(),
                customer_external_id: snapshot.and_then(|s| s.customer_external_id.as_deref()),
                subscriber_address: snapshot.map(|s| s.subscriber).or(log.subscriber),
                amount: usdc_text(
                    log.amount
                        .as_deref()
                        .or(snapshot.map(|s| s.amount.as_str())),
                ),
                currency: CURRENCY,
                tx_hash: r.risk.is_none().then_some(r.chain.transaction_hash),
                status: snapshot.map(|s| s.status),
                next_payment_at: snapshot.and_then(|s| s.next_payment_at.as_deref()),
                subscription: SnapshotView::of(
                    snapshot,
                    r.plan_id.as_ref(),
                    r.pending_plan_id.as_ref(),
                ),
                // A trial's notice: the first charge's period (its amount and the trial's
                // end are `amount` and `subscription.trialEnd`).
                period: small(&log.period).or(r
                    .risk
                    .as_ref()
                    .filter(|_| trial_notice)
                    .map(|k| i64::from(k.period))),
                attempt: small(&log.attempt),
                failure_reason,
                next_retry_at,
                end_reason,
                renewal_at_risk: r.risk.as_ref().filter(|_| !trial_notice).map(|k| {
                    RenewalAtRiskView {
                        reason: &k.reason,
                        amount_due: super::usdc(k.amount),
                        amount_required: super::usdc(k.required),
                        available: super::usdc(k.available),
                        shortfall: super::usdc(
                            k.required
                                .zip(k.available)
                                .map(|(a, b)| a.saturating_sub(b)),
                        ),
                        due_at: k.due_at,
                        period: k.period,
                    }
                }),
                retracted: r.retraction.as_ref().map(|x| RetractedView {
                    event_id: &x.event_id,
                    kind: x.kind.as_deref(),
                    block_number: r.chain.block_number,
                    block_hash: r.chain.block_hash,
                    transaction_hash: r.chain.transaction_hash,
                    log_index: r.chain.log_index,
                    common_ancestor: AncestorView {
                        block_number: x.ancestor_block,
                        block_hash: x.ancestor_hash,
                    },
                }),
            },
            chain: r.risk.is_none().then(|| ChainView {
                // Reconciliation can always re-check the event against the contract, and an
                // event of a subscription the index has no snapshot of (created before the
                // indexer's start block) still names it.
                onchain_subscription_id: r.onchain_subscription_id,
                ..ChainView::from(&r.chain)
            }),
            observation: r.risk.is_some().then_some(ObservationView {
                chain_id: r.chain.chain_id,
                contract: r.chain.contract,
                block_number: r.chain.block_number,
                block_hash: r.chain.block_hash,
                block_time: r.created_at,
                onchain_subscription_id: r.onchain_subscription_id,
            }),
            delivery: None,
        }
    }

    /// The event as `GET /api/v1/events` lists it: with `delivery` (null until queued).
    pub fn listed(r: &'a EventRow) -> Self {
        EventView {
            delivery: Some(r.delivery.as_ref().map(DeliveryView::from)),
            ..EventView::webhook(r)
        }
    }
}

// The events page's direct writer (issue 10): the bytes the derived `Serialize` above writes,
// checked on random rows of every kind by `json::tests::an_events_page_is_written_as_serde_writes_it`.
// Text that came from outside (a merchant's customer reference, a stored snapshot's strings,
// a webhook error) goes through the escaping `json::string`; ids, names, hex, decimal amounts
// and times this service formats need none.

impl WriteJson for EventView<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"id\":");
        json::plain(out, self.id.as_str());
        json::raw(out, ",\"object\":");
        json::plain(out, self.object);
        json::raw(out, ",\"type\":");
        json::opt_string(out, self.kind);
        json::raw(out, ",\"createdAt\":");
        json::time(out, &self.created_at);
        json::raw(out, ",\"sequence\":");
        json::opt_int(out, self.sequence);
        json::raw(out, ",\"data\":");
        self.data.write_json(out);
        json::raw(out, ",\"chain\":");
        self.chain.write_json(out);
        if let Some(o) = &self.observation {
            json::raw(out, ",\"observation\":");
            o.write_json(out);
        }
        if let Some(d) = &self.delivery {
            json::raw(out, ",\"delivery\":");
            d.write_json(out);
        }
        json::raw(out, "}");
    }
}

impl WriteJson for EventData<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"subscriptionId\":");
        json::opt_plain(out, self.subscription_id.map(|s| s.as_str()));
        json::raw(out, ",\"planId\":");
        json::opt_plain(out, self.plan_id.map(|p| p.as_str()));
        json::raw(out, ",\"customerExternalId\":");
        json::opt_string(out, self.customer_external_id);
        json::raw(out, ",\"subscriberAddress\":");
        json::opt_address(out, self.subscriber_address.as_ref());
        json::raw(out, ",\"amount\":");
        json::opt_plain(out, self.amount.as_deref());
        json::raw(out, ",\"currency\":");
        json::plain(out, self.currency);
        json::raw(out, ",\"txHash\":");
        json::opt_hash(out, self.tx_hash.as_ref());
        json::raw(out, ",\"status\":");
        json::opt_plain(out, self.status.map(SubscriptionStatus::as_str));
        json::raw(out, ",\"nextPaymentAt\":");
        json::opt_string(out, self.next_payment_at);
        json::raw(out, ",\"subscription\":");
        self.subscription.write_json(out);
        if let Some(period) = self.period {
            json::raw(out, ",\"period\":");
            json::int(out, period);
        }
        if let Some(attempt) = self.attempt {
            json::raw(out, ",\"attempt\":");
            json::int(out, attempt);
        }
        if let Some(reason) = self.failure_reason {
            json::raw(out, ",\"failureReason\":");
            json::opt_plain(out, reason);
        }
        if let Some(at) = &self.next_retry_at {
            json::raw(out, ",\"nextRetryAt\":");
            json::opt_plain(out, at.as_deref());
        }
        if let Some(reason) = self.end_reason {
            json::raw(out, ",\"endReason\":");
            json::opt_plain(out, reason);
        }
        if let Some(r) = &self.retracted {
            json::raw(out, ",\"retracted\":{\"eventId\":");
            json::plain(out, r.event_id.as_str());
            json::raw(out, ",\"type\":");
            json::opt_string(out, r.kind);
            json::raw(out, ",\"blockNumber\":");
            json::int(out, r.block_number);
            json::raw(out, ",\"blockHash\":");
            json::hash(out, &r.block_hash);
            json::raw(out, ",\"transactionHash\":");
            json::hash(out, &r.transaction_hash);
            json::raw(out, ",\"logIndex\":");
            json::int(out, r.log_index);
            json::raw(out, ",\"commonAncestor\":{\"blockNumber\":");
            json::int(out, r.common_ancestor.block_number);
            json::raw(out, ",\"blockHash\":");
            json::hash(out, &r.common_ancestor.block_hash);
            json::raw(out, "}}");
        }
        if let Some(k) = &self.renewal_at_risk {
            json::raw(out, ",\"renewalAtRisk\":{\"reason\":");
            json::string(out, k.reason);
            json::raw(out, ",\"amountDue\":");
            json::opt_plain(out, k.amount_due.as_deref());
            json::raw(out, ",\"amountRequired\":");
            json::opt_plain(out, k.amount_required.as_deref());
            json::raw(out, ",\"available\":");
            json::opt_plain(out, k.available.as_deref());
            json::raw(out, ",\"shortfall\":");
            json::opt_plain(out, k.shortfall.as_deref());
            json::raw(out, ",\"dueAt\":");
            json::time(out, &k.due_at);
            json::raw(out, ",\"period\":");
            json::int(out, k.period);
            json::raw(out, "}");
        }
        json::raw(out, "}");
    }
}

impl WriteJson for SnapshotView<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"id\":");
        json::opt_plain(out, self.id.map(|s| s.as_str()));
        json::raw(out, ",\"object\":");
        json::plain(out, self.object);
        json::raw(out, ",\"status\":");
        json::opt_plain(out, self.status.map(SubscriptionStatus::as_str));
        json::raw(out, ",\"cancelAtPeriodEnd\":");
        match self.cancel_at_period_end {
            Some(v) => json::boolean(out, v),
            None => json::raw(out, "null"),
        }
        json::raw(out, ",\"planId\":");
        json::opt_plain(out, self.plan_id.map(|p| p.as_str()));
        json::raw(out, ",\"customerExternalId\":");
        json::opt_string(out, self.customer_external_id);
        json::raw(out, ",\"subscriber\":");
        json::opt_address(out, self.subscriber.as_ref());
        json::raw(out, ",\"amount\":");
        json::opt_plain(out, self.amount.as_deref());
        json::raw(out, ",\"currency\":");
        json::plain(out, self.currency);
        json::raw(out, ",\"period\":");
        json::opt_int(out, self.period);
        json::raw(out, ",\"currentPeriodStart\":");
        json::opt_string(out, self.current_period_start);
        json::raw(out, ",\"currentPeriodEnd\":");
        json::opt_string(out, self.current_period_end);
        json::raw(out, ",\"nextPaymentAt\":");
        json::opt_string(out, self.next_payment_at);
        json::raw(out, ",\"failedAttempts\":");
        json::opt_int(out, self.failed_attempts);
        json::raw(out, ",\"trialEnd\":");
        json::opt_string(out, self.trial_end);
        json::raw(out, ",\"pendingPlanChange\":");
        PendingPlanChangeView::write_opt(self.pending_plan_change.as_ref(), out);
        json::raw(out, "}");
    }
}

impl WriteJson for ObservationView {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"chainId\":");
        json::int(out, self.chain_id.get());
        json::raw(out, ",\"contract\":");
        json::address(out, &self.contract);
        json::raw(out, ",\"blockNumber\":");
        json::int(out, self.block_number);
        json::raw(out, ",\"blockHash\":");
        json::hash(out, &self.block_hash);
        json::raw(out, ",\"blockTime\":");
        json::time(out, &self.block_time);
        json::raw(out, ",\"onchainSubscriptionId\":");
        json::opt_int(out, self.onchain_subscription_id);
        json::raw(out, "}");
    }
}

impl WriteJson for DeliveryView<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"status\":");
        json::plain(out, self.status.as_str());
        json::raw(out, ",\"attempts\":");
        json::int(out, self.attempts);
        json::raw(out, ",\"nextAttemptAt\":");
        json::opt_plain(out, self.next_attempt_at.as_deref());
        json::raw(out, ",\"deliveredAt\":");
        json::opt_plain(out, self.delivered_at.as_deref());
        json::raw(out, ",\"lastError\":");
        json::opt_string(out, self.last_error);
        json::raw(out, "}");
    }
}
