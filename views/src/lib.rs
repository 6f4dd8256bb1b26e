//! Views: the response objects of the REST API and the bodies of webhooks, as `Serialize`
//! structs built from the store's typed rows and written straight into the response (no
//! intermediate JSON tree). A webhook body and `GET /api/v1/events` share [`EventView`], so
//! they agree byte for byte.

mod account;
mod chain;
mod event;
mod export;
mod json;
mod plan;
mod report;
mod subscription;
mod webhook;

pub use account::{
    CheckoutView, DeletedView, HealthChainView, HealthView, IssuedKeyView, KeyStatusView, KeyView,
    MerchantView, NonceView, OperatorHealthView, SessionView,
};
pub use chain::ChainView;
pub use event::{DeliveryView, EventView};
pub use export::{
    EXPORT_COLUMNS, ExportEntryView, ExportTotalView, ExportTotals, csv_header,
    signed as signed_amount,
};
pub use json::WriteJson;
pub use plan::{PlanView, ProvisioningView};
pub use report::{DECIMALS, MoneyView, RevenueView, SummaryView};
pub use subscription::{
    CancellationView, LedgerEntryView, SubscriptionView, SubscriptionWithLedger,
};
pub use webhook::{
    AttemptView, PreviousSecretView, QueuedDeliveryView, RotatedSecretView, WebhookDeliveryView,
    WebhookEndpointView, WebhookSecretsView,
};

use chrono::{DateTime, Utc};
use serde::Serialize;

/// `{object: "list", data, hasMore}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListView<T> {
    pub object: &'static str,
    pub data: Vec<T>,
    pub has_more: bool,
}

impl<T> ListView<T> {
    pub fn new(data: Vec<T>, has_more: bool) -> Self {
        Self {
            object: "list",
            data,
            has_more,
        }
    }
}

impl<T: WriteJson> WriteJson for ListView<T> {
    fn write_json(&self, out: &mut Vec<u8>) {
        json::raw(out, "{\"object\":");
        json::plain(out, self.object);
        json::raw(out, ",\"data\":[");
        for (i, item) in self.data.iter().enumerate() {
            if i > 0 {
                json::raw(out, ",");
            }
            item.write_json(out);
        }
        json::raw(out, "],\"hasMore\":");
        json::boolean(out, self.has_more);
        json::raw(out, "}");
    }
}

use chainsub_core::time::rfc3339_into;
/// RFC 3339 UTC with milliseconds: webhook delivery times (attempts are seconds apart at
/// first), in the events list and the dashboard alike.
pub use chainsub_core::time::rfc3339_millis_of as rfc3339_millis;
/// RFC 3339 UTC with second precision and `Z` (every time the API serves).
pub use chainsub_core::time::rfc3339_of as rfc3339;

/// Amount in base units -> `"9.99"`.
fn usdc(units: Option<u128>) -> Option<String> {
    units.map(chainsub_core::format_units)
}

/// `serialize_with` for times.
fn time<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = [0u8; 24];
    match rfc3339_into(t, &mut buf, false) {
        Some(text) => s.serialize_str(text),
        None => s.serialize_str(&rfc3339(t)),
    }
}

/// `serialize_with` for optional times.
fn opt_time<S: serde::Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => time(t, s),
        None => s.serialize_none(),
    }
}

/// `serialize_with` for addresses: EIP-55 in every field (also the pages' JSON).
pub fn checksummed<S: serde::Serializer>(
    a: &alloy::primitives::Address,
    s: S,
) -> Result<S::Ok, S::Error> {
    with_checksum(a, |text| s.serialize_str(text))
}

use chainsub_core::address::with_checksum;

/// `serialize_with` for optional addresses.
fn opt_checksummed<S: serde::Serializer>(
    a: &Option<alloy::primitives::Address>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match a {
        Some(a) => with_checksum(a, |text| s.serialize_str(text)),
        None => s.serialize_none(),
    }
}
