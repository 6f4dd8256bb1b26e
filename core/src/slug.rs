//! Plan slugs: the part of a checkout URL that names the plan.

use std::fmt;

/// A plan slug: 1-64 of `a-z 0-9 -`, not starting or ending with `-`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Slug(String);

impl Slug {
    /// Why [`Slug::parse`] refused a value; completes "`slug` …".
    pub const RULE: &'static str =
        "must be 1-64 characters of a-z, 0-9 and '-', not starting or ending with '-'";

    /// Parses an explicit slug.
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(Self::RULE)
        }
    }

    /// A slug derived from a name ("Pro Monthly!" -> "pro-monthly"); "plan" if nothing is left.
    pub fn from_name(name: &str) -> Self {
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
        Self(if out.is_empty() {
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

impl fmt::Display for Slug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
