//! Cursor pagination of docs/design.md §4: `limit` (default 20, max 100), `startingAfter` /
//! `endingBefore` (object ids), newest first; `{object:"list", data, hasMore}`.

use serde::Deserialize;

use crate::http::error::ApiError;
use crate::http::input;

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

/// The paging parameters of a list's query, as given.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageQuery {
    #[serde(default, deserialize_with = "input::param")]
    pub limit: Option<Limit>,
    #[serde(default)]
    pub starting_after: Option<String>,
    #[serde(default)]
    pub ending_before: Option<String>,
}

impl Page {
    /// The page `limit`, `startingAfter` and `endingBefore` ask for (one cursor at most).
    pub fn new(
        limit: Option<Limit>,
        starting_after: Option<String>,
        ending_before: Option<String>,
    ) -> Result<Self, ApiError> {
        let cursor = match (starting_after, ending_before) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "endingBefore",
                    "give `startingAfter` or `endingBefore`, not both",
                ));
            }
            (Some(a), None) => Some(Cursor::After(a)),
            (None, Some(b)) => Some(Cursor::Before(b)),
            (None, None) => None,
        };
        Ok(Self {
            limit: limit.map_or(DEFAULT_LIMIT, |l| l.0),
            cursor,
        })
    }

    /// [`Page::new`] of a [`PageQuery`].
    pub fn of(q: PageQuery) -> Result<Self, ApiError> {
        Self::new(q.limit, q.starting_after, q.ending_before)
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
    Fut: Future<Output = Result<Option<i64>, ApiError>>,
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

/// A page size: 1 to [`MAX_LIMIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit(pub i64);

impl input::FromParam for Limit {
    fn from_text(s: &str) -> Result<Self, String> {
        let max = MAX_LIMIT;
        s.parse::<i64>()
            .ok()
            .filter(|n| (1..=max).contains(n) && !s.starts_with('+'))
            .map(Limit)
            .ok_or_else(|| format!("must be an integer from 1 to {max}"))
    }
}
