//! Newtypes parsed once at the boundary: the rest of the code cannot hold an invalid one.

use serde_json::Value;

use crate::error::ApiError;

/// A positive USDC amount in base units (6 decimals), parsed from a decimal string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(u128);

/// The largest accepted amount: one trillion USDC (keeps every amount far inside uint256
/// and NUMERIC(78,0), and catches fat-fingered values).
pub const MAX_AMOUNT_BASE_UNITS: u128 = 1_000_000_000_000 * 1_000_000;

impl Amount {
    /// Parses `"9.99"`: ASCII digits, an optional `.` followed by 1 to 6 digits; no sign,
    /// exponent, whitespace, leading `+`, leading zeros (`"007"`) or bare dots (`".5"`, `"5."`).
    pub fn parse(s: &str) -> Result<Amount, String> {
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (s, None),
        };
        if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
            return Err("must be a decimal string such as \"9.99\"".into());
        }
        if int.len() > 1 && int.starts_with('0') {
            return Err("must not have leading zeros".into());
        }
        let frac = frac.unwrap_or("");
        if s.contains('.') && frac.is_empty() {
            return Err("must have digits after the decimal point".into());
        }
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err("must be a decimal string such as \"9.99\"".into());
        }
        if frac.len() > 6 {
            return Err("USDC has at most 6 decimals".into());
        }
        if int.len() > 13 {
            return Err("is too large".into());
        }
        let int_units: u128 = int.parse::<u128>().map_err(|_| "is too large")? * 1_000_000;
        let frac_units: u128 = if frac.is_empty() {
            0
        } else {
            format!("{frac:0<6}").parse().map_err(|_| "is invalid")?
        };
        let units = int_units + frac_units;
        if units == 0 {
            return Err("must be greater than 0".into());
        }
        if units > MAX_AMOUNT_BASE_UNITS {
            return Err("is too large".into());
        }
        Ok(Amount(units))
    }

    /// Base units (what goes on chain).
    pub fn base_units(self) -> u128 {
        self.0
    }
}

/// Renders base units as a decimal string with at least two decimals: 9990000 -> "9.99",
/// 10000000 -> "10.00", 1 -> "0.000001".
pub fn format_units(units: u128) -> String {
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

/// A plan slug: 1-64 of `a-z 0-9 -`, not starting or ending with `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slug(String);

impl Slug {
    /// Parses an explicit slug.
    pub fn parse(s: &str) -> Result<Slug, String> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if ok {
            Ok(Slug(s.to_string()))
        } else {
            Err(
                "must be 1-64 characters of a-z, 0-9 and '-', not starting or ending with '-'"
                    .into(),
            )
        }
    }

    /// A slug derived from a name ("Pro Monthly!" -> "pro-monthly"); "plan" if nothing is left.
    pub fn from_name(name: &str) -> Slug {
        let mut out = String::new();
        for c in name.chars().flat_map(char::to_lowercase) {
            if c.is_ascii_alphanumeric() {
                out.push(c);
            } else if !out.is_empty() && !out.ends_with('-') {
                out.push('-');
            }
            if out.len() >= 48 {
                break;
            }
        }
        let out = out.trim_end_matches('-');
        Slug(if out.is_empty() {
            "plan".into()
        } else {
            out.into()
        })
    }

    /// The slug text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Text a merchant supplies (plan names, customer ids): trimmed length bounds and no control
/// characters.
pub fn text(param: &str, v: Option<&Value>, max: usize) -> Result<String, ApiError> {
    let v = v.ok_or_else(|| ApiError::missing(param))?;
    let s = v
        .as_str()
        .ok_or_else(|| ApiError::invalid(param, format!("`{param}` must be a string")))?;
    if s.trim().is_empty() {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must not be empty"),
        ));
    }
    if s.chars().count() > max {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must be at most {max} characters"),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must not contain control characters"),
        ));
    }
    Ok(s.to_string())
}

/// Random lowercase hex of `bytes` random bytes (for public ids).
pub fn random_hex(bytes: usize) -> String {
    let v: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    hex::encode(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_parse_to_base_units() {
        assert_eq!(Amount::parse("9.99").unwrap().base_units(), 9_990_000);
        assert_eq!(Amount::parse("10").unwrap().base_units(), 10_000_000);
        assert_eq!(Amount::parse("0.000001").unwrap().base_units(), 1);
        assert_eq!(Amount::parse("0.5").unwrap().base_units(), 500_000);
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
    }

    #[test]
    fn units_format_with_two_to_six_decimals() {
        assert_eq!(format_units(9_990_000), "9.99");
        assert_eq!(format_units(10_000_000), "10.00");
        assert_eq!(format_units(1), "0.000001");
        assert_eq!(format_units(1_234_500), "1.2345");
    }

    #[test]
    fn slugs_are_validated_and_derived() {
        assert!(Slug::parse("pro-monthly").is_ok());
        for bad in ["", "-a", "a-", "A", "a b", "ä", &"a".repeat(65)] {
            assert!(Slug::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Slug::from_name("Pro Monthly!").as_str(), "pro-monthly");
        assert_eq!(Slug::from_name("!!!").as_str(), "plan");
    }
}
