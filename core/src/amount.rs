//! USDC amounts: base units (6 decimals) parsed from, and rendered as, decimal strings.

use std::fmt;

/// A positive USDC amount in base units, parsed from a decimal string such as `"9.99"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(u128);

/// The largest accepted amount: one trillion USDC (keeps every amount far inside uint256
/// and NUMERIC(78,0), and catches fat-fingered values).
pub const MAX_AMOUNT_BASE_UNITS: u128 = 1_000_000_000_000 * 1_000_000;

/// Why a decimal string is not an [`Amount`]; `Display` completes "`amount` …".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// Not ASCII digits with an optional `.` and fractional digits.
    #[error("must be a decimal string such as \"9.99\"")]
    NotDecimal,
    /// The integer part starts with a zero (`"007"`).
    #[error("must not have leading zeros")]
    LeadingZeros,
    /// A `.` with no digits after it (`"5."`).
    #[error("must have digits after the decimal point")]
    BareDot,
    /// More than 6 digits after the decimal point.
    #[error("USDC has at most 6 decimals")]
    TooPrecise,
    /// Above [`MAX_AMOUNT_BASE_UNITS`].
    #[error("is too large")]
    TooLarge,
    /// Zero base units.
    #[error("must be greater than 0")]
    Zero,
}

impl Amount {
    /// Parses `"9.99"`: ASCII digits, an optional `.` followed by 1 to 6 digits; no sign,
    /// exponent, whitespace, leading `+`, leading zeros (`"007"`) or bare dots (`".5"`, `"5."`).
    pub fn parse(s: &str) -> Result<Self, AmountError> {
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (s, None),
        };
        if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AmountError::NotDecimal);
        }
        if int.len() > 1 && int.starts_with('0') {
            return Err(AmountError::LeadingZeros);
        }
        let frac = frac.unwrap_or("");
        if s.contains('.') && frac.is_empty() {
            return Err(AmountError::BareDot);
        }
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AmountError::NotDecimal);
        }
        if frac.len() > 6 {
            return Err(AmountError::TooPrecise);
        }
        if int.len() > 13 {
            return Err(AmountError::TooLarge);
        }
        let int_units: u128 = int.parse::<u128>().map_err(|_| AmountError::TooLarge)? * 1_000_000;
        let frac_units: u128 = if frac.is_empty() {
            0
        } else {
            format!("{frac:0<6}")
                .parse()
                .map_err(|_| AmountError::NotDecimal)?
        };
        Self::from_base_units(int_units + frac_units)
    }

    /// From base units (a stored or on-chain value): positive and at most the maximum.
    pub fn from_base_units(units: u128) -> Result<Self, AmountError> {
        match units {
            0 => Err(AmountError::Zero),
            u if u > MAX_AMOUNT_BASE_UNITS => Err(AmountError::TooLarge),
            u => Ok(Self(u)),
        }
    }

    /// Base units (what goes on chain).
    pub fn base_units(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_units(self.0))
    }
}

/// Renders base units as a decimal string with at least two decimals: 9990000 -> "9.99",
/// 10000000 -> "10.00", 1 -> "0.000001".
pub fn format_units(units: u128) -> String {
    // Written directly (two amounts per listed event: `format!` with a padded u128 was ~8 %
    // of the API's instructions per events page).
    let mut frac = [b'0'; 6];
    let mut rest = (units % 1_000_000) as u32;
    for digit in frac.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let mut end = frac.len();
    while end > 2 && frac[end - 1] == b'0' {
        end -= 1;
    }
    let mut int = itoa::Buffer::new();
    let int = int.format(units / 1_000_000);
    let mut out = String::with_capacity(int.len() + 1 + end);
    out.push_str(int);
    out.push('.');
    out.push_str(std::str::from_utf8(&frac[..end]).expect("ASCII digits"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule as first written with `format!`: the direct writer must agree with it.
    fn format_units_by_format(units: u128) -> String {
        let int = units / 1_000_000;
        let frac = format!("{:06}", units % 1_000_000);
        let trimmed = frac.trim_end_matches('0');
        let frac = if trimmed.len() < 2 {
            &frac[..2]
        } else {
            trimmed
        };
        format!("{int}.{frac}")
    }

    proptest! {
        #[test]
        fn units_are_written_as_the_format_rule_writes_them(
            units in prop_oneof![any::<u128>(), 0..100_000_000u128, (0..1_000u128).prop_map(|n| n * 10_000)],
        ) {
            prop_assert_eq!(format_units(units), format_units_by_format(units));
        }
    }

    #[test]
    fn units_render_with_at_least_two_decimals() {
        for (units, text) in [
            (0, "0.00"),
            (1, "0.000001"),
            (10_000, "0.01"),
            (100_000, "0.10"),
            (9_990_000, "9.99"),
            (10_000_000, "10.00"),
            (12_345_678, "12.345678"),
            (u128::MAX, "340282366920938463463374607431768.211455"),
        ] {
            assert_eq!(format_units(units), text);
        }
    }

    #[test]
    fn amounts_parse_to_base_units() {
        assert_eq!(Amount::parse("9.99").unwrap().base_units(), 9_990_000);
        assert_eq!(Amount::parse("10").unwrap().base_units(), 10_000_000);
        assert_eq!(Amount::parse("0.000001").unwrap().base_units(), 1);
        assert_eq!(Amount::parse("0.5").unwrap().base_units(), 500_000);
        assert_eq!(Amount::parse("9.99").unwrap().to_string(), "9.99");
    }

    #[test]
    fn amount_tricks_are_rejected() {
        for bad in [
            "",
            "0",
            "0.0",
            "0.000000",
            "-1",
            "+1",
            "1e6",
            "1E2",
            " 1",
            "1 ",
            "1.",
            ".5",
            "01",
            "1.0000001",
            "1,00",
            "0x10",
            "NaN",
            "inf",
            "1.2.3",
            "１",
            "99999999999999",
        ] {
            assert!(Amount::parse(bad).is_err(), "{bad:?} must be rejected");
        }
        assert_eq!(
            Amount::from_base_units(MAX_AMOUNT_BASE_UNITS + 1),
            Err(AmountError::TooLarge)
        );
    }

    #[test]
    fn units_format_with_two_to_six_decimals() {
        assert_eq!(format_units(9_990_000), "9.99");
        assert_eq!(format_units(10_000_000), "10.00");
        assert_eq!(format_units(1), "0.000001");
        assert_eq!(format_units(1_234_500), "1.2345");
    }
}
