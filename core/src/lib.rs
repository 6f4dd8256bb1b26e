//! Chainsub's vocabulary, shared by every crate above it (`store`, `indexer`, `keeper`,
//! `webhooks`, `api`): typed prefixed ids built from one macro, USDC [`Amount`]s, plan
//! [`Slug`]s, the status enums stored in Postgres, and EIP-55 address formatting.
//!
//! Values are parsed once at the boundary (a request, a row) and cannot be invalid after
//! that; every type here renders to exactly the text the API and the database use.

#![warn(missing_docs)]

pub mod address;
pub mod amount;
pub mod cancel;
pub mod chain_id;
pub mod ids;
pub mod listen;
pub mod metrics;
pub mod rpc;
pub mod sealed;
pub mod slug;
pub mod snapshot;
pub mod state;
pub mod status;
pub mod time;
pub mod tx;

pub use address::{checksum, hex0x};
pub use amount::{Amount, AmountError, MAX_AMOUNT_BASE_UNITS, format_units};
pub use cancel::CancelAt;
pub use chain_id::{ChainId, OnchainPlanId, OnchainSubscriptionId};
pub use ids::{CheckoutId, EventId, MerchantId, PlanId, SubscriptionId};
pub use listen::Listen;
pub use rpc::RpcUrl;
pub use slug::Slug;
pub use snapshot::SubscriptionSnapshot;
pub use state::{PendingPlanChange, SubscriptionState};
pub use status::{LedgerKind, OutboxStatus, ProvisionStatus, SubscriptionStatus, UnknownStatus};
pub use time::{rfc3339, ts};
pub use tx::{Outcome, SignedTx};

/// USDC's decimals: 1 USDC = 1,000,000 base units.
pub const USDC_DECIMALS: u8 = 6;

/// The one currency the service bills in.
pub const CURRENCY: &str = "USDC";
