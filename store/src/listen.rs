//! LISTEN on one channel over a connection of its own, reconnecting forever: the webhook
//! dispatcher's wake-up on new outbox rows, and the API's key cache's evictions.
//!
//! A connection can die without closing (a NAT or firewall forgetting it, a failover without
//! a reset): nothing would arrive and nothing would say so. So the listener probes its own
//! channel: it NOTIFYs a token of its own on its session at once and then every `probe`
//! interval, and expects it back, from its own backend, before the next probe. Only the first
//! probe's return says [`Heard::Listening`]; a probe that does not come back (no answer, or a
//! server or pooler that accepts LISTEN but does not deliver to this session) ends the session
//! as [`Heard::Lost`]. Payloads starting with [`PROBE_PREFIX`] are the probes (every
//! listener's) and are never handed on.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use crate::pg::Database;

/// What a listener hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard<'a> {
    /// Subscribed (again), and the session's first probe came back: anything signalled
    /// before this may have been missed.
    Listening,
    /// One notification's payload.
    Notified(&'a str),
    /// The session ended or stopped answering its probe: everything signalled until the next
    /// [`Heard::Listening`] is missed.
    Lost,
}

/// The payload prefix reserved for the listeners' own probes.
pub const PROBE_PREFIX: &str = "listen-probe:";

/// How often a listener reconnects and probes.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Wait after a failure before connecting again.
    pub retry: Duration,
    /// A probe goes out this often and must be back before the next one.
    pub probe: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            retry: Duration::from_secs(1),
            probe: Duration::from_secs(5),
        }
    }
}

/// LISTENs on `channel` and hands every change of state to `heard`, reconnecting after each
/// failure, until `stopping()` says so after one. `channel` is a constant identifier (LISTEN
/// takes no parameters).
pub async fn listen_forever(
    database_url: &str,
    channel: &'static str,
    timing: Timing,
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
                let (tx, mut rx) = mpsc::unbounded_channel::<(i32, String)>();
                let driver = tokio::spawn(async move {
                    let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                    while let Some(Ok(msg)) = messages.next().await {
                        if let AsyncMessage::Notification(n) = msg
                            && tx.send((n.process_id(), n.payload().to_string())).is_err()
                        {
                            break;
                        }
                    }
                });
                match subscribe(&client, channel).await {
                    Ok(pid) => {
                        let why =
                            session(&client, pid, &mut rx, channel, timing.probe, &mut heard).await;
                        tracing::warn!(channel, why, "LISTEN session lost");
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
        tokio::time::sleep(timing.retry).await;
    }
}

/// LISTENs on `channel`; returns the session's backend pid (its own notifications carry it).
async fn subscribe(
    client: &tokio_postgres::Client,
    channel: &'static str,
) -> Result<i32, tokio_postgres::Error> {
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    Ok(client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0))
}

/// Hands on notifications and probes the session (backend `own_pid`) until it ends; returns
/// why it did.
async fn session(
    client: &tokio_postgres::Client,
    own_pid: i32,
    rx: &mut mpsc::UnboundedReceiver<(i32, String)>,
    channel: &'static str,
    every: Duration,
    heard: &mut impl FnMut(Heard<'_>),
) -> &'static str {
    // The first tick is at once: the first probe goes out with the session.
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outstanding: Option<String> = None;
    let mut listening = false;
    loop {
        tokio::select! {
            // What arrived is read before a tick is taken: a probe that came back in time is
            // never declared lost because the next tick was ready too.
            biased;
            payload = rx.recv() => match payload {
                None => return "the connection ended",
                Some((pid, p)) if p.starts_with(PROBE_PREFIX) => {
                    if pid == own_pid && outstanding.as_deref() == Some(p.as_str()) {
                        outstanding = None;
                        if !listening {
                            listening = true;
                            heard(Heard::Listening);
                        }
                    }
                }
                Some((_, p)) => heard(Heard::Notified(&p)),
            },
            _ = ticks.tick() => {
                if outstanding.is_some() {
                    return "the probe did not come back";
                }
                let token = format!("{PROBE_PREFIX}{:016x}", rand::random::<u64>());
                // The token is ours (hex), the channel a constant: nothing to quote.
                let sent = tokio::time::timeout(
                    every,
                    client.batch_execute(&format!("NOTIFY {channel}, '{token}'")),
                )
                .await;
                if !matches!(sent, Ok(Ok(()))) {
                    return "the probe could not be sent";
                }
                outstanding = Some(token);
            }
        }
    }
}
