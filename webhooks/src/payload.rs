//! Webhook bodies. A lifecycle event's body is the Event object `GET /api/v1/events`
//! returns for it (the same [`EventView`], without `delivery`), serialized compactly; a dashboard test event's
//! body is its stored `test_payload`. Bodies are rendered at each attempt (the
//! `chain.confirmations` count grows between attempts; everything else is fixed by the log).

use std::collections::HashMap;

use chainsub_store::events::EventRow;

use crate::error::Result;
use chainsub_store::outbox::Claimed;
use chainsub_views::{EventView, WriteJson};

/// Bodies keyed by outbox id. A row whose event no longer exists is absent.
pub async fn bodies(
    client: &impl deadpool_postgres::GenericClient,
    rows_in: &[&Claimed],
) -> Result<HashMap<i64, Vec<u8>>> {
    let mut out = HashMap::with_capacity(rows_in.len());
    let mut wanted = Vec::new();
    for r in rows_in {
        match &r.test_payload {
            Some(p) => {
                out.insert(r.id, serde_json::to_vec(p).expect("JSON values serialize"));
            }
            None => wanted.push(r.event_public_id.clone()),
        }
    }
    if wanted.is_empty() {
        return Ok(out);
    }
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let rows = chainsub_store::events::by_ids(client, &wanted).await?;
    let events: HashMap<&str, &EventRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    for r in rows_in {
        if r.test_payload.is_none()
            && let Some(ev) = events.get(r.event_public_id.as_str())
        {
            // The view's direct writer: serde's bytes (views' json tests), less CPU per body.
            let mut body = Vec::with_capacity(1536);
            EventView::webhook(ev).write_json(&mut body);
            out.insert(r.id, body);
        }
    }
    Ok(out)
}
