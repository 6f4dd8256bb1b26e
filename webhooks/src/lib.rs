//! Webhooks (docs/design.md §7): Standard Webhooks signing, the outbox dispatcher, the SSRF guard,
//! the retry schedule and the bodies. The dispatcher runs inside `api serve` and alone as
//! `api dispatch` ([`run`] in both); the merchant's endpoint settings are the dashboard's
//! (`api`). Depends on `core`, `store` and `views`, never on `api`.
//!
//! Delivery contract, as merchants see it:
//! - at-least-once: the same event may arrive more than once; `webhook-id` (the event id)
//!   is the same on every attempt, so receivers deduplicate on it;
//! - 2xx is success; anything else (3xx included: redirects are not followed), a timeout or
//!   a refused connection is a failure retried on the schedule, then `failed`;
//! - a 410 disables the endpoint: deliveries are held (`pending`) until the merchant
//!   re-enables it or sets a new URL;
//! - events of a merchant without a webhook URL are held (`pending`) too, and are delivered
//!   once a URL is set (they are always readable through `GET /api/v1/events`).

#![warn(missing_docs)]

pub mod config;
pub mod delivery;
pub mod dispatcher;
pub mod error;
pub mod payload;
pub mod schedule;
pub mod signing;
pub mod ssrf;

pub use config::WebhookConfig;
pub use dispatcher::run;
pub use error::{Error, Result};
pub use signing::WebhookSecret;
