//! `GET /api/v1/ledger`: the reconciliation export. The merchant's ledger entries for a block
//! range (default: from block 0 to the highest block with `CONFIRMATIONS` confirmations) and
//! optionally a time window, as NDJSON (default) or CSV (`format=csv`, or `Accept:
//! text/csv`), streamed in constant memory and closed by one `total` record per kind. A body
//! without its `total` records was cut short (a failure after the first byte cannot change
//! the status any more). `indexer verify-export` re-checks such a file against the chain.

use chainsub_store::export::Range;
use serde::Deserialize;
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::api_key::{Admitted, Scope, authed};
use crate::ctx::Ctx;
use crate::http::error::Result;
use crate::http::input::{self, Block, Time, query_of};
use crate::http::reply::Resp;
use crate::ledger_export::{self, Format, Slot};

/// The ledger export router.
pub fn routes(ctx: Ctx) -> BoxedFilter<(Resp,)> {
    warp::path!("api" / "v1" / "ledger")
        .and(warp::get())
        .and(authed(&ctx))
        .and(query_of())
        .and(warp::header::optional::<String>("accept"))
        .then(|a: Admitted, q, accept| a.serve((q, accept), export))
        .boxed()
}

/// The query of `GET /api/v1/ledger`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExportQuery {
    #[serde(default, deserialize_with = "input::param")]
    from_block: Option<Block>,
    #[serde(default, deserialize_with = "input::param")]
    to_block: Option<Block>,
    #[serde(default, deserialize_with = "input::param")]
    from: Option<Time>,
    #[serde(default, deserialize_with = "input::param")]
    to: Option<Time>,
    #[serde(default)]
    format: Option<String>,
}

async fn export(s: Scope, (q, accept): (ExportQuery, Option<String>)) -> Result<Resp> {
    let format = Format::choose(q.format.as_deref(), accept.as_deref())?;
    let slot = Slot::claim(&s.ctx, &s.merchant)?;
    let mut read = s.ctx.read_conn().await?;
    let to_block = match q.to_block {
        Some(Block(b)) => b,
        None => ledger_export::confirmed_height(&s.ctx, read.height),
    };
    if to_block > read.height.unwrap_or(-1) {
        // Blocks past what this database has indexed: the primary's, if it has them.
        drop(read);
        read = s.ctx.read_conn_at_least(to_block).await?;
    }
    // An empty range (toBlock below fromBlock, `to` not after `from`) exports nothing but
    // its totals, as the events list answers an empty page: the request is well-formed.
    let range = Range {
        from_block: q.from_block.map_or(0, |b| b.0),
        to_block,
        from_time: q.from.map(|t| t.0),
        to_time: q.to.map(|t| t.0),
    };
    let (pool, height) = (read.pool.clone(), read.height);
    drop(read);
    Ok(ledger_export::stream(&s.ctx, pool, s.merchant, range, format, slot).indexed_at(height))
}
