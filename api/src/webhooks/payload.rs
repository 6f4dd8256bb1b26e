//! Webhook bodies. A lifecycle event's body is the Event object `GET /api/v1/events`
//! returns for it (same renderer, same `id`), serialized compactly; a dashboard test event's
//! body is its stored `test_payload`. Bodies are rendered at each attempt (the
//! `chain.confirmations` count grows between attempts; everything else is fixed by the log).

use std::collections::HashMap;

use tokio_postgres::Client;

use super::store::Claimed;
use crate::error::Result;

/// Bodies keyed by outbox id. A row whose event no longer exists is absent.
pub async fn bodies(client: &Client, rows: &[&Claimed]) -> Result<HashMap<i64, Vec<u8>>> {
    let mut out = HashMap::with_capacity(rows.len());
    let mut wanted = Vec::new();
    for r in rows {
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
    let rendered = client
        .query(
            &format!(
                "{} WHERE ce.public_id = ANY($1)",
                crate::render::EVENT_SELECT
            ),
            &[&wanted],
        )
        .await?;
    let events: HashMap<String, serde_json::Value> = rendered
        .iter()
        .map(|row| (row.get("public_id"), crate::render::event_object(row)))
        .collect();
    for r in rows {
        if r.test_payload.is_none()
            && let Some(ev) = events.get(&r.event_public_id)
        {
            out.insert(r.id, serde_json::to_vec(ev).expect("JSON values serialize"));
        }
    }
    Ok(out)
}
