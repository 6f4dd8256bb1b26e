//! Cursor pagination of docs/design.md §4: `limit` (default 20, max 100), `startingAfter` /
//! `endingBefore` (object ids), newest first; `{object:"list", data, hasMore}`.

use crate::http::error::ApiError;
use crate::http::extract::param;

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

    /// The store's page for this request, given the cursor's key (looked up by the route).
    pub fn store_page(&self, key: Option<i64>) -> chainsub_store::Page {
        let direction = match self.cursor {
            Some(Cursor::Before(_)) => chainsub_store::Direction::Newer,
            _ => chainsub_store::Direction::Older,
        };
        chainsub_store::Page {
            limit: self.limit,
            key,
            direction,
        }
    }

    /// The parameter the cursor came in (`startingAfter` or `endingBefore`) and its id.
    pub fn cursor_param(&self) -> Option<(&'static str, &str)> {
        match &self.cursor {
            Some(Cursor::After(id)) => Some(("startingAfter", id)),
            Some(Cursor::Before(id)) => Some(("endingBefore", id)),
            None => None,
        }
    }
}

/// The key of the page's cursor: `None` without one; a 404 naming the parameter when
/// `parse` refuses the id or `lookup` (scoped to the merchant) does not find it.
pub async fn cursor_key<T, F, Fut>(
    page: &Page,
    what: &str,
    parse: fn(&str) -> Option<T>,
    lookup: F,
) -> Result<Option<i64>, ApiError>
where
    F: FnOnce(T) -> Fut,
    Fut: std::future::Future<Output = Result<Option<i64>, ApiError>>,
{
    let Some((name, id)) = page.cursor_param() else {
        return Ok(None);
    };
    let no_such = || ApiError::NotFound {
        message: format!("no such {what} `{id}`"),
        param: Some(name.into()),
    };
    let id = parse(id).ok_or_else(no_such)?;
    lookup(id).await?.ok_or_else(no_such).map(Some)
}
