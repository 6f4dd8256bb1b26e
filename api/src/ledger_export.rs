//! The ledger export's stream: the merchant's entries of a range read a page at a time and
//! written as NDJSON or CSV in chunks, closed by one `total` record per kind, with bounds on
//! how long a client may take. `GET /api/v1/ledger` ([`crate::routes::ledger`]) parses the
//! request and hands it here.

use bytes::Bytes;
use chainsub_store::export::{self as store, PageAfter, Range};
use chainsub_views::{ExportEntryView, ExportTotals, csv_header};
use futures::SinkExt;

use crate::ctx::Ctx;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};
use crate::http::reply::{Resp, StreamBody, StreamChunk};
use crate::merchants::Merchant;

/// A chunk is sent once this many bytes are written.
const CHUNK: usize = 64 * 1024;
/// Chunks waiting for a slow client, at most.
const DEPTH: usize = 4;

/// The export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Ndjson,
    Csv,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Self::Ndjson => "application/x-ndjson",
            Self::Csv => "text/csv; charset=utf-8",
        }
    }

    /// `format=` wins; otherwise CSV when the client accepts `text/csv` and not NDJSON.
    pub fn choose(format: Option<&str>, accept: Option<&str>) -> Result<Self> {
        match format {
            Some("ndjson") => Ok(Self::Ndjson),
            Some("csv") => Ok(Self::Csv),
            Some(_) => Err(ApiError::invalid(
                "format",
                "`format` must be one of ndjson, csv",
            )),
            None => {
                let accept = accept.unwrap_or("").to_ascii_lowercase();
                if accept.contains("text/csv") && !accept.contains("ndjson") {
                    Ok(Self::Csv)
                } else {
                    Ok(Self::Ndjson)
                }
            }
        }
    }
}

/// What an export holds while it streams: its merchant's one slot and one of the process's
/// export permits (each export holds a database connection while it streams).
pub struct Slot {
    _mine: ExportOf,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Slot {
    /// The slot, or 429: one export per merchant at a time (a slow reader holds its own slot,
    /// never a second), a few at a time per process.
    pub fn claim(ctx: &Ctx, merchant: &Merchant) -> Result<Self> {
        let mine = ExportOf::claim(ctx, merchant.id()).ok_or_else(|| ApiError::Quota {
            code: Code::ExportInProgress,
            message: "one ledger export per merchant runs at a time; retry when it has ended"
                .into(),
            retry_after_secs: 5,
        })?;
        let permit = ctx
            .exports
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::Quota {
                code: Code::ExportsBusy,
                message: format!(
                    "at most {} ledger exports run at once; retry shortly",
                    ctx.cfg.ledger_exports_max
                ),
                retry_after_secs: 5,
            })?;
        Ok(Self {
            _mine: mine,
            _permit: permit,
        })
    }
}

/// The highest block that can no longer be reorganized away (by `CONFIRMATIONS`) with the
/// index at `indexed`: -1 (nothing) before the indexer has gone that far.
pub fn confirmed_height(ctx: &Ctx, indexed: Option<i64>) -> i64 {
    (indexed.unwrap_or(-1) - ctx.cfg.confirmations.max(1) as i64 + 1).max(-1)
}

/// The export's response: its body is written by a task that holds `slot` until the export
/// ends, however it ends (totals written, client gone, stalled, out of time, failed). Its pages
/// are read from `pool` (the database `crate::reads` chose).
pub fn stream(
    ctx: &Ctx,
    pool: crate::db::Pool,
    merchant: Merchant,
    range: Range,
    format: Format,
    slot: Slot,
) -> Resp {
    let stall = std::time::Duration::from_secs(ctx.cfg.ledger_export_stall_secs.max(1));
    let deadline = tokio::time::Instant::now()
        + std::time::Duration::from_secs(ctx.cfg.ledger_export_max_secs.max(1));
    let page_rows = ctx.cfg.ledger_export_page_rows;
    let chain_id = ctx.cfg.chain_id;
    let (mut tx, body) = StreamBody::channel(DEPTH);
    let contract = ctx.cfg.contract_address;
    let bounds = Bounds { stall, deadline };
    tokio::spawn(async move {
        let _slot = slot;
        let wallet = merchant.wallet();
        let mut out = String::with_capacity(CHUNK + 4096);
        if format == Format::Csv {
            csv_header(&mut out);
        }
        let mut totals = ExportTotals::default();
        let result: std::result::Result<(), Cut> = async {
            let mut after = Some(PageAfter::default());
            while let Some(from) = after {
                // A connection per page, given back before the page goes to the client.
                let (rows, next) = {
                    let conn = pool.get().await.map_err(Cut::failed)?;
                    store::ledger_page(&conn, &merchant, chain_id, range, from, page_rows)
                        .await
                        .map_err(Cut::failed)?
                };
                for row in &rows {
                    totals.add(row);
                    let view = ExportEntryView::new(row, wallet);
                    write(format, &view, |o| view.csv(o), &mut out);
                    if out.len() >= CHUNK {
                        send(&mut tx, &mut out, bounds).await?;
                    }
                }
                after = next;
            }
            for t in totals.views(chain_id, contract, wallet, &range) {
                write(format, &t, |o| t.csv(o), &mut out);
            }
            send(&mut tx, &mut out, bounds).await
        }
        .await;
        match result {
            Ok(()) => {}
            Err(Cut::Failed(e)) => {
                tracing::error!(error = %e, "ledger export failed after its first byte");
                metrics::counter!("api_ledger_export_failures_total").increment(1);
                let _ = tx.send(Err(std::io::Error::other(e))).await;
            }
            Err(cut) => {
                tracing::info!(reason = cut.reason(), "ledger export cut short");
                metrics::counter!("api_ledger_exports_cut_total", "reason" => cut.reason())
                    .increment(1);
            }
        }
    });
    Resp::stream(format.content_type(), body)
}

/// A merchant's running export, released when dropped.
struct ExportOf {
    running: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<i64>>>,
    merchant: i64,
}

impl ExportOf {
    /// The merchant's slot, unless an export of theirs is running in this process.
    fn claim(ctx: &Ctx, merchant: i64) -> Option<Self> {
        let running = ctx.exports_running.clone();
        let fresh = running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(merchant);
        fresh.then_some(Self { running, merchant })
    }
}

impl Drop for ExportOf {
    fn drop(&mut self) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.merchant);
    }
}

/// Appends one record: a JSON line, or a CSV row.
fn write(
    format: Format,
    view: &impl serde::Serialize,
    csv: impl FnOnce(&mut String),
    out: &mut String,
) {
    match format {
        Format::Csv => csv(out),
        Format::Ndjson => {
            // A view of ours always serializes; the fallback keeps the line count right.
            out.push_str(&serde_json::to_string(view).unwrap_or_else(|_| "{}".into()));
            out.push('\n');
        }
    }
}

/// How long an export may wait for its client: `stall` for each chunk, and in all until
/// `deadline`.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    stall: std::time::Duration,
    deadline: tokio::time::Instant,
}

/// Why an export ended before its totals.
#[derive(Debug)]
enum Cut {
    /// The client closed the connection.
    ClientGone,
    /// The client took nothing for `LEDGER_EXPORT_STALL_SECS`.
    Stalled,
    /// `LEDGER_EXPORT_MAX_SECS` was up.
    MaxDuration,
    /// The database failed (logged and counted as a failure).
    Failed(String),
}

impl Cut {
    fn failed(e: impl std::fmt::Display) -> Self {
        Self::Failed(e.to_string())
    }

    /// The `reason` label of `api_ledger_exports_cut_total`.
    fn reason(&self) -> &'static str {
        match self {
            Self::ClientGone => "client_gone",
            Self::Stalled => "stalled",
            Self::MaxDuration => "max_duration",
            Self::Failed(_) => "failed",
        }
    }
}

/// Sends what is written so far; `Err` when the client went away, took nothing for `stall`,
/// or the export's maximum duration is up (a reader must not hold an export slot forever,
/// however slowly it reads).
async fn send(
    tx: &mut futures::channel::mpsc::Sender<StreamChunk>,
    out: &mut String,
    bounds: Bounds,
) -> std::result::Result<(), Cut> {
    let chunk = Bytes::from(std::mem::take(out).into_bytes());
    *out = String::with_capacity(CHUNK + 4096);
    let left = bounds
        .deadline
        .saturating_duration_since(tokio::time::Instant::now());
    let cut = match tokio::time::timeout(bounds.stall.min(left), tx.send(Ok(chunk))).await {
        Ok(Ok(())) if tokio::time::Instant::now() < bounds.deadline => return Ok(()),
        Ok(Err(_)) => return Err(Cut::ClientGone),
        Err(_) if left > bounds.stall => Cut::Stalled,
        Ok(Ok(())) | Err(_) => Cut::MaxDuration,
    };
    tx.close_channel();
    Err(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_comes_from_the_parameter_then_the_accept_header() {
        assert_eq!(Format::choose(None, None).unwrap(), Format::Ndjson);
        assert_eq!(Format::choose(None, Some("text/csv")).unwrap(), Format::Csv);
        assert_eq!(
            Format::choose(None, Some("application/x-ndjson, text/csv")).unwrap(),
            Format::Ndjson
        );
        assert_eq!(
            Format::choose(Some("ndjson"), Some("text/csv")).unwrap(),
            Format::Ndjson
        );
        assert!(Format::choose(Some("xml"), None).is_err());
    }
}
