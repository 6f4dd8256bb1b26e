//! LISTEN on one channel over a connection of its own, reconnecting forever: the webhook
//! dispatcher's wake-up on new outbox rows, and the API's key cache's evictions.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use crate::pg::Database;

/// What a listener hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard<'a> {
    /// Subscribed (again): anything signalled before this may have been missed.
    Listening,
    /// One notification's payload.
    Notified(&'a str),
    /// The connection ended: everything signalled until the next [`Heard::Listening`] is
    /// missed.
    Lost,
}

/// LISTENs on `channel` and hands every change of state to `heard`, reconnecting `retry`
/// after each failure, until `stopping()` says so after one. `channel` is a constant
/// identifier (LISTEN takes no parameters).
pub async fn listen_forever(
    database_url: &str,
    channel: &'static str,
    retry: Duration,
    mut heard: impl FnMut(Heard<'_>),
    stopping: impl Fn() -> bool,
) {
    let db = match Database::from_url(database_url) {
        Ok(db) => db,
        Err(e) => {
            tracing::error!(error = %e, channel, "listener cannot connect");
            return;
        }
    };
    loop {
        match db.connect_raw().await {
            Ok((client, mut conn)) => {
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                let driver = tokio::spawn(async move {
                    let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                    while let Some(Ok(msg)) = messages.next().await {
                        if let AsyncMessage::Notification(n) = msg
                            && tx.send(n.payload().to_string()).is_err()
                        {
                            break;
                        }
                    }
                });
                match client.batch_execute(&format!("LISTEN {channel}")).await {
                    Ok(()) => {
                        heard(Heard::Listening);
                        while let Some(payload) = rx.recv().await {
                            heard(Heard::Notified(&payload));
                        }
                        heard(Heard::Lost);
                    }
                    Err(e) => tracing::warn!(error = %e, channel, "LISTEN failed"),
                }
                driver.abort();
            }
            Err(e) => tracing::warn!(error = %e, channel, "LISTEN connection failed"),
        }
        if stopping() {
            return;
        }
        tokio::time::sleep(retry).await;
    }
}
