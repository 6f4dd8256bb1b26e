//! Keyset pagination: newest first, `limit + 1` rows fetched to tell whether there is more.

/// Which way a page goes from its cursor key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The first page, or older than the cursor (`startingAfter`): key descending.
    Older,
    /// Newer than the cursor (`endingBefore`): key ascending, reversed by the caller.
    Newer,
}

/// A page request on a descending `bigint` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Rows wanted (the store fetches one more).
    pub limit: i64,
    /// The cursor's key, if any, and the direction from it.
    pub key: Option<i64>,
    pub direction: Direction,
}

impl Page {
    /// Rows to fetch: one more than asked, to know `hasMore`.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// Trims the extra row and restores newest-first order; returns whether there is more.
    pub fn finish<T>(&self, rows: &mut Vec<T>) -> bool {
        let has_more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit.max(0) as usize);
        if self.direction == Direction::Newer {
            rows.reverse();
        }
        has_more
    }
}

/// The keyset tail of a list statement for each [`Direction`]: `[older, newer]`. Built once
/// per statement at start-up from constants (never from a request).
///
/// The first page and `startingAfter` share one statement, so the absent cursor is
/// `i64::MAX` rather than `($n IS NULL OR key < $n)`: under a generic plan (Postgres switches
/// to one after five executions) an `OR` is a filter, and every later page would read all
/// newer rows of the merchant; `key < COALESCE($n, max)` stays an index condition.
pub(crate) fn keyset(key: &str, cursor: usize, limit: usize) -> [String; 2] {
    let [older, newer] = keyset_bound(key, cursor);
    [
        format!("{older} ORDER BY {key} DESC LIMIT ${limit}"),
        format!("{newer} ORDER BY {key} ASC LIMIT ${limit}"),
    ]
}

/// The cursor conditions of [`keyset`] alone, `[older, newer]`: for a statement that asks
/// whether any row lies beyond the cursor without ordering or limiting them.
pub(crate) fn keyset_bound(key: &str, cursor: usize) -> [String; 2] {
    [
        format!(" AND {key} < COALESCE(${cursor}::bigint, 9223372036854775807)"),
        format!(" AND {key} > ${cursor}::bigint"),
    ]
}

/// A list filter on parameter `$n` (of SQL type `ty`) with condition `cond`. In the statement
/// whose *leading* filter it is, the condition is plain, so its index serves it under a
/// generic plan; in the others it is skipped when the parameter is NULL.
pub(crate) fn filter(lead: bool, n: usize, ty: &str, cond: &str) -> String {
    if lead {
        format!(" AND ${n}::{ty} IS NOT NULL AND {cond}")
    } else {
        format!(" AND (${n}::{ty} IS NULL OR {cond})")
    }
}

/// Runs one of the fixed list statements and returns the page's rows, typed by `typed`, and
/// whether there are more.
pub(crate) async fn fetch<T>(
    client: &impl deadpool_postgres::GenericClient,
    text: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    page: Page,
    typed: impl FnMut(tokio_postgres::Row) -> crate::Result<T>,
) -> crate::Result<(Vec<T>, bool)> {
    let stmt = client.prepare_cached(text).await?;
    let rows = client.query(&stmt, params).await?;
    typed_page(rows, page, typed)
}

/// The page of `rows` a list statement returned, typed by `typed`, and whether there are more.
pub(crate) fn typed_page<T>(
    mut rows: Vec<tokio_postgres::Row>,
    page: Page,
    mut typed: impl FnMut(tokio_postgres::Row) -> crate::Result<T>,
) -> crate::Result<(Vec<T>, bool)> {
    let more = page.finish(&mut rows);
    // Not `collect::<Result<Vec<_>>>()`: its iterator's size hint starts at 0, so the typed rows
    // (an event row is ~1 KB) were copied five times over as the vector grew (callgrind:
    // ~4 % of the API's instructions per events page).
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(typed(row)?);
    }
    Ok((out, more))
}

impl Direction {
    /// Index into a `[older, newer]` pair of statements.
    pub(crate) fn index(self) -> usize {
        match self {
            Self::Older => 0,
            Self::Newer => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_trims_and_reverses_newer_pages() {
        let p = Page {
            limit: 2,
            key: Some(5),
            direction: Direction::Newer,
        };
        let mut rows = vec![6, 7, 8];
        assert!(p.finish(&mut rows));
        assert_eq!(rows, vec![7, 6]);
        let p = Page {
            direction: Direction::Older,
            ..p
        };
        let mut rows = vec![4, 3];
        assert!(!p.finish(&mut rows));
        assert_eq!(rows, vec![4, 3]);
    }

    #[test]
    fn keyset_fragments_are_parameterised() {
        let [older, newer] = keyset("x.id", 7, 8);
        assert_eq!(
            older,
            " AND x.id < COALESCE($7::bigint, 9223372036854775807) ORDER BY x.id DESC LIMIT $8"
        );
        assert_eq!(newer, " AND x.id > $7::bigint ORDER BY x.id ASC LIMIT $8");
    }
}
