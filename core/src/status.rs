//! The status names stored in Postgres (each column has a CHECK listing exactly these) and
//! served by the API, as enums from one macro. Nothing else in the code spells them.

use std::fmt;

/// A stored status text that is not one of the enum's names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status `{0}`")]
pub struct UnknownStatus(pub String);

macro_rules! status_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stored and served name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// Parses a stored or requested name.
            pub fn parse(s: &str) -> Result<$name, UnknownStatus> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownStatus(other.to_string())),
                }
            }

            /// "a, b, c" — for error messages that list the accepted names.
            pub fn names() -> String {
                [$($text),+].join(", ")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

status_enum!(
    /// A subscription's state, derived from its on-chain events.
    SubscriptionStatus {
        /// Paid for the current period.
        Active => "active",
        /// A charge failed; retries remain.
        PastDue => "past_due",
        /// Cancelled by the subscriber, merchant or operator.
        Cancelled => "cancelled",
        /// Ended by the contract (grace exhausted, or cancel at period end).
        Ended => "ended",
        /// In its free trial: nothing charged yet; the first charge falls due at the trial's end.
        Trialing => "trialing",
    }
);

impl SubscriptionStatus {
    /// Cancelled and ended subscriptions never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Cancelled | Self::Ended)
    }
}

status_enum!(
    /// Where a plan's on-chain provisioning stands.
    ProvisionStatus {
        /// Created in the API; not sent yet.
        Pending => "pending",
        /// `createPlan` sent; waiting for the receipt.
        Submitted => "submitted",
        /// On chain.
        Active => "active",
        /// The last attempt failed; `provision` retries it.
        Failed => "failed",
    }
);

status_enum!(
    /// A webhook outbox row's delivery state (the one state machine of `store::outbox`).
    OutboxStatus {
        /// Waiting for its next attempt.
        Pending => "pending",
        /// Leased by a dispatcher.
        Delivering => "delivering",
        /// Answered 2xx.
        Delivered => "delivered",
        /// Out of attempts (or the endpoint answered 410); a merchant may retry it.
        Failed => "failed",
    }
);

status_enum!(
    /// What a ledger entry records (from `SubscriptionCharged` and `PaymentFailed`).
    LedgerKind {
        /// A successful pull of one period's amount.
        Charge => "charge",
        /// A pull that failed (reason in `failure_reason`).
        FailedCharge => "failed_charge",
        /// The prorated difference pulled by an upgrade (`PlanChanged.proration`).
        Proration => "proration",
        /// Money the merchant paid back (`SubscriptionRefunded`); its amount is negative.
        Refund => "refund",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in SubscriptionStatus::ALL {
            assert_eq!(SubscriptionStatus::parse(s.as_str()), Ok(*s));
        }
        for s in OutboxStatus::ALL {
            assert_eq!(OutboxStatus::parse(s.as_str()), Ok(*s));
        }
        assert!(SubscriptionStatus::parse("Active").is_err());
        assert_eq!(
            SubscriptionStatus::names(),
            "active, past_due, cancelled, ended, trialing"
        );
        assert_eq!(
            serde_json::to_string(&ProvisionStatus::Submitted).unwrap(),
            "\"submitted\""
        );
        assert!(SubscriptionStatus::Ended.is_terminal());
        assert!(!SubscriptionStatus::PastDue.is_terminal());
    }
}
