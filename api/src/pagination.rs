//! Cursor pagination of DESIGN §4: `limit` (default 20, max 100), `startingAfter` /
//! `endingBefore` (object ids), newest first; `{object:"list", data, hasMore}`.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::routes::param;

/// Default page size.
pub const DEFAULT_LIMIT: i64 = 20;
/// Largest page size.
pub const MAX_LIMIT: i64 = 100;

/// Which way a page goes from its cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    /// Older than this id (the next page).
    After(String),
    /// Newer than this id (the previous page).
    Before(String),
}

/// A parsed page request.
#[derive(Debug, Clone)]
pub struct Page {
    pub limit: i64,
    pub cursor: Option<Cursor>,
}

impl Page {
    /// Reads `limit`, `startingAfter`, `endingBefore`.
    pub fn parse(pairs: &[(String, String)]) -> Result<Page, ApiError> {
        let limit = match param(pairs, "limit") {
            None => DEFAULT_LIMIT,
            Some(s) => s
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n) && !s.starts_with('+'))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "limit",
                        format!("`limit` must be an integer from 1 to {MAX_LIMIT}"),
                    )
                })?,
        };
        let after = param(pairs, "startingAfter");
        let before = param(pairs, "endingBefore");
        let cursor = match (after, before) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "endingBefore",
                    "give `startingAfter` or `endingBefore`, not both",
                ));
            }
            (Some(a), None) => Some(Cursor::After(a.to_string())),
            (None, Some(b)) => Some(Cursor::Before(b.to_string())),
            (None, None) => None,
        };
        Ok(Page { limit, cursor })
    }

    /// SQL fragments for a descending key `col` given the cursor's key: the comparison,
    /// the ORDER BY, and whether rows come back reversed.
    pub fn sql(&self, col: &str, key: Option<i64>, placeholder: usize) -> (String, String, bool) {
        match (&self.cursor, key) {
            (Some(Cursor::After(_)), Some(_)) => (
                format!(" AND {col} < ${placeholder}"),
                format!(" ORDER BY {col} DESC"),
                false,
            ),
            (Some(Cursor::Before(_)), Some(_)) => (
                format!(" AND {col} > ${placeholder}"),
                format!(" ORDER BY {col} ASC"),
                true,
            ),
            _ => (String::new(), format!(" ORDER BY {col} DESC"), false),
        }
    }

    /// Builds the list from `limit + 1` fetched rows.
    pub fn finish(&self, mut data: Vec<Value>, reversed: bool) -> Value {
        let has_more = data.len() as i64 > self.limit;
        data.truncate(self.limit as usize);
        if reversed {
            data.reverse();
        }
        json!({ "object": "list", "data": data, "hasMore": has_more })
    }
}
