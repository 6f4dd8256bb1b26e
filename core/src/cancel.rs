//! When a cancellation takes effect.

use postgres_types::{IsNull, ToSql, Type, accepts, to_sql_checked};

/// When a cancellation ends the subscription: at once (`cancel`), or when the period paid
/// for is over (`cancelAtPeriodEnd`). Stored and served as the boolean `atPeriodEnd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelAt {
    /// Now: the subscription ends with this transaction.
    Now,
    /// At the end of the current period: no further charge, access until then.
    PeriodEnd,
}

impl CancelAt {
    /// The value of an `atPeriodEnd` flag.
    pub const fn from_at_period_end(at_period_end: bool) -> Self {
        if at_period_end {
            Self::PeriodEnd
        } else {
            Self::Now
        }
    }

    /// The `atPeriodEnd` flag of this cancellation.
    pub const fn at_period_end(self) -> bool {
        matches!(self, Self::PeriodEnd)
    }
}

impl ToSql for CancelAt {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.at_period_end().to_sql(ty, out)
    }
    accepts!(BOOL);
    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_round_trips() {
        for when in [CancelAt::Now, CancelAt::PeriodEnd] {
            assert_eq!(CancelAt::from_at_period_end(when.at_period_end()), when);
        }
        assert!(CancelAt::PeriodEnd.at_period_end());
    }
}
