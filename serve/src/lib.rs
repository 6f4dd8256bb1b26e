//! HTTP serving for every listener of ours — the API, its metrics listener, the indexer's
//! and the keeper's operations endpoints: a warp service behind an accept loop that no
//! client can exhaust.
//!
//! - At most [`HttpLimits::max_connections`] open connections in all, and
//!   [`HttpLimits::max_connections_per_client`] from one client (an IPv4 address or an
//!   IPv6 /64; peers the operator trusts, such as its proxies, are not counted per client).
//!   A connection past either cap is answered at once — `503` past the total, `429` past
//!   the client's share, both with `Retry-After` and a JSON error — and closed, so a flood
//!   never reaches the process's open-files limit. When the total is reached, the
//!   connection idle longest (no request in flight: a quiet keep-alive, or a head not yet
//!   complete) is closed to make room first, so a flood of silent connections from many
//!   addresses cannot lock fresh clients out until the idle timer frees slots; `503` only
//!   when every connection has a request in flight.
//! - A connection that has not sent a complete request head within
//!   [`HttpLimits::idle_timeout_secs`] of opening, or of its previous response, is closed:
//!   idle keep-alive connections and half-sent heads alike (hyper's header-read timer).
//! - A request body not received in full within [`HttpLimits::body_timeout_secs`] of its
//!   head fails to read with [`BodyTimedOut`] (the API answers `408`), and the connection
//!   closes after the answer.
//!
//! Handlers read the peer's address with [`peer`] (the accept loop puts it on each
//! request). The gauge `http_connections_open{listener}` and the counters
//! `http_connections_refused_total{listener,reason}`, `http_connections_evicted_total{listener}`
//! and `http_connections_timed_out_total{listener}` show the caps and timers at work.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

mod head;

use http_body::{Body, Frame, SizeHint};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use tower_service::Service;
use warp::Filter as _;
use warp::http::Request;

/// The limits of one listener (flags and environment, shared by the three services).
#[derive(Debug, Clone, clap::Args)]
pub struct HttpLimits {
    /// Open connections a listener holds at most; a connection past it is answered 503 and
    /// closed. Keep it below the process's open-files limit (`ulimit -n`, systemd's
    /// `LimitNOFILE`) minus the database pool.
    #[arg(
        long = "http-max-connections",
        env = "HTTP_MAX_CONNECTIONS",
        default_value_t = 1000
    )]
    pub max_connections: usize,
    /// Open connections one client address (IPv4, or IPv6 /64) holds at most; past it 429.
    /// Peers in `TRUSTED_PROXIES` are not capped per client.
    #[arg(
        long = "http-max-connections-per-client",
        env = "HTTP_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 128
    )]
    pub max_connections_per_client: usize,
    /// A connection that sends no complete request head for this long (idle keep-alive,
    /// or a head still arriving) is closed.
    #[arg(
        long = "http-idle-timeout-secs",
        env = "HTTP_IDLE_TIMEOUT_SECS",
        default_value_t = 30
    )]
    pub idle_timeout_secs: u64,
    /// A request body must arrive in full within this long of its head.
    #[arg(
        long = "http-body-timeout-secs",
        env = "HTTP_BODY_TIMEOUT_SECS",
        default_value_t = 30
    )]
    pub body_timeout_secs: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 1000,
            max_connections_per_client: 128,
            idle_timeout_secs: 30,
            body_timeout_secs: 30,
        }
    }
}

/// The peer address of a request's connection (put on every request by [`serve`]).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// The peer's address: `None` only for a request that did not come through [`serve`].
pub fn peer() -> impl warp::Filter<Extract = (Option<SocketAddr>,), Error = Infallible> + Clone {
    warp::ext::optional::<Peer>().map(|p: Option<Peer>| p.map(|Peer(addr)| addr))
}

/// Which peers are exempt from the per-client cap (the operator's proxies).
pub type Exempt = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// The connection accounting of one listener, shared by every request loop serving it.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    limits: HttpLimits,
    listener: &'static str,
    exempt: Exempt,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
    /// Every admitted connection not asked to close, by id.
    conns: HashMap<u64, Arc<Track>>,
    next_id: u64,
    /// Connections asked to close to make room that have not closed yet (counted in
    /// `total` until they have).
    evicting: usize,
}

/// What the gate knows of one connection: whether a request is in flight, since when it
/// has been idle, and the signal that asks it to close.
struct Track {
    /// Requests in flight (from their head until their response body is written).
    busy: AtomicUsize,
    /// When it last became idle (accepted, or a response finished).
    idle_since: Mutex<std::time::Instant>,
    evict: tokio::sync::Notify,
    evicted: AtomicBool,
}

/// A request in flight on its connection, from its head until its response body is dropped.
struct Busy(Arc<Track>);

impl Busy {
    fn new(track: Arc<Track>) -> Self {
        track.busy.fetch_add(1, Ordering::SeqCst);
        Self(track)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The listener holds `max_connections`.
    Full,
    /// This client holds `max_connections_per_client`.
    ClientFull,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::ClientFull => "client_full",
        }
    }

    /// The whole answer, written before the connection is closed.
    fn response(self) -> Vec<u8> {
        let (status, ty, message) = match self {
            Self::Full => (
                "503 Service Unavailable",
                "api_error",
                "the server holds as many connections as it takes; retry later",
            ),
            Self::ClientFull => (
                "429 Too Many Requests",
                "rate_limit_error",
                "this client holds as many connections as one client may; reuse them",
            ),
        };
        let body = format!(
            r#"{{"error":{{"type":"{ty}","code":"too_many_connections","message":"{message}","param":null}}}}"#
        );
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

/// A connection counted against its listener's caps until dropped.
struct Admitted {
    gate: Gate,
    client: Option<IpAddr>,
    id: u64,
    track: Arc<Track>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self
            .gate
            .inner
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        open.total -= 1;
        if self.track.evicted.load(Ordering::SeqCst) {
            open.evicting -= 1;
        } else {
            open.conns.remove(&self.id);
        }
        if let Some(client) = self.client
            && let Some(n) = open.per_client.get_mut(&client)
        {
            *n -= 1;
            if *n == 0 {
                open.per_client.remove(&client);
            }
        }
        metrics::gauge!("http_connections_open", "listener" => self.gate.inner.listener)
            .set(open.total as f64);
    }
}

impl Gate {
    /// A gate for the listener named `listener` (the metrics' label).
    pub fn new(listener: &'static str, limits: HttpLimits, exempt: Exempt) -> Self {
        // The listener's series, on every scrape from the start: a refusal or an eviction
        // may never happen, and an alert on their increase reads them.
        for name in [
            "http_connections_evicted_total",
            "http_connections_timed_out_total",
        ] {
            metrics::counter!(name, "listener" => listener).increment(0);
        }
        for refusal in [Refusal::Full, Refusal::ClientFull] {
            metrics::counter!("http_connections_refused_total", "listener" => listener, "reason" => refusal.label())
                .increment(0);
        }
        metrics::gauge!("http_connections_open", "listener" => listener).increment(0.0);
        Self {
            inner: Arc::new(GateInner {
                limits,
                listener,
                exempt,
                open: Mutex::new(Open::default()),
            }),
        }
    }

    /// A gate exempting no peer.
    pub fn plain(listener: &'static str, limits: HttpLimits) -> Self {
        Self::new(listener, limits, Arc::new(|_| false))
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.inner
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .total
    }

    /// Connections with a request in flight now.
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        let open = self.inner.open.lock().unwrap_or_else(|e| e.into_inner());
        open.conns
            .values()
            .filter(|t| t.busy.load(Ordering::SeqCst) > 0)
            .count()
    }

    fn admit(&self, peer: IpAddr) -> Result<Admitted, Refusal> {
        let limits = &self.inner.limits;
        let client = (!(self.inner.exempt)(peer)).then(|| client_key(peer));
        let mut open = self.inner.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = client
            && open.per_client.get(&client).copied().unwrap_or(0)
                >= limits.max_connections_per_client
        {
            return Err(Refusal::ClientFull);
        }
        if open.total - open.evicting >= limits.max_connections {
            // Full: the connection idle longest makes room, if any is idle.
            let idlest = open
                .conns
                .iter()
                .filter(|(_, t)| t.busy.load(Ordering::SeqCst) == 0)
                .min_by_key(|(_, t)| *t.idle_since.lock().unwrap_or_else(|e| e.into_inner()))
                .map(|(id, _)| *id);
            let Some(id) = idlest else {
                return Err(Refusal::Full);
            };
            if let Some(track) = open.conns.remove(&id) {
                track.evicted.store(true, Ordering::SeqCst);
                track.evict.notify_one();
                open.evicting += 1;
                metrics::counter!("http_connections_evicted_total", "listener" => self.inner.listener)
                    .increment(1);
            }
        }
        if let Some(client) = client {
            *open.per_client.entry(client).or_insert(0) += 1;
        }
        open.total += 1;
        let id = open.next_id;
        open.next_id += 1;
        let track = Arc::new(Track {
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(std::time::Instant::now()),
            evict: tokio::sync::Notify::new(),
            evicted: AtomicBool::new(false),
        });
        open.conns.insert(id, track.clone());
        metrics::gauge!("http_connections_open", "listener" => self.inner.listener)
            .set(open.total as f64);
        Ok(Admitted {
            gate: self.clone(),
            client,
            id,
            track,
        })
    }
}

/// One client for the per-client cap: an IPv4 address (IPv4-mapped IPv6 included), or the
/// /64 of an IPv6 address (one host's usual allocation).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// A request body's read failed because it did not arrive within the body timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

/// Whether an error (a warp body error, say) was caused by [`BodyTimedOut`].
pub fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// A response body that keeps its request counted as in flight until it is written.
struct BusyBody<B> {
    inner: B,
    _busy: Busy,
}

impl<B: Body + Unpin> Body for BusyBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that fails with [`BodyTimedOut`] once its deadline passes.
pub struct TimedBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `service` (`warp::service(filter)`) on `listener` within `gate`'s limits until
/// `shutdown` resolves, then lets open requests finish and returns.
pub async fn serve<S>(
    service: S,
    listener: tokio::net::TcpListener,
    gate: Gate,
    shutdown: impl Future<Output = ()>,
) where
    S: Service<Request<TimedBody>, Response = warp::reply::Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let limits = gate.inner.limits.clone();
    let idle = Duration::from_secs(limits.idle_timeout_secs.max(1));
    let body_timeout = Duration::from_secs(limits.body_timeout_secs.max(1));
    let listener_name = gate.inner.listener;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // Tells connections still reading their first request head to close at shutdown (they
    // hold no request, and hyper does not watch them yet).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, addr) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                accept_error(e).await;
                continue;
            }
        };
        let admitted = match gate.admit(addr.ip()) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                metrics::counter!("http_connections_refused_total", "listener" => listener_name, "reason" => refusal.label())
                    .increment(1);
                // A fresh socket's send buffer takes the whole answer without waiting; a
                // client that cannot take even that gets the close alone.
                let _ = stream.try_write(&refusal.response());
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let track = admitted.track.clone();
        let on_request = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            // In flight from here until its response body is written (or dropped).
            let busy = Busy::new(track.clone());
            req.extensions_mut().insert(Peer(addr));
            combine_list_lines(req.headers_mut());
            let req = req.map(|inner| TimedBody {
                inner,
                deadline: Box::pin(tokio::time::sleep(body_timeout)),
            });
            let answer = service.clone().call(req);
            async move {
                let resp = answer.await?;
                Ok::<_, Infallible>(resp.map(|inner| BusyBody { inner, _busy: busy }))
            }
        });
        let watcher = graceful.watcher();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let track = admitted.track.clone();
            let _admitted = admitted;
            let mut stream = stream;
            // The first request head, read and checked here: a malformed one gets the JSON
            // error body (hyper's own answer has none).
            let first = tokio::select! {
                read = tokio::time::timeout(idle, head::read_first(&mut stream)) => read,
                () = track.evict.notified() => return,
                _ = stop.changed() => return,
            };
            let prefix = match first {
                Ok(Ok(head::First::Ready(prefix))) => prefix,
                Ok(Ok(head::First::Refused(refused))) => {
                    tracing::debug!(peer = %addr, ?refused, "request head refused");
                    refuse(stream, &refused.response()).await;
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer = %addr, error = %e, "connection ended before a request");
                    return;
                }
                Err(_) => {
                    metrics::counter!("http_connections_timed_out_total", "listener" => listener_name)
                        .increment(1);
                    tracing::debug!(peer = %addr, "connection closed: no request within the idle timeout");
                    return;
                }
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(idle);
            let io = TokioIo::new(head::Prefixed::new(prefix, stream));
            let conn = watcher.watch(http.serve_connection(io, on_request));
            let mut conn = std::pin::pin!(conn);
            let ended = loop {
                tokio::select! {
                    ended = &mut conn => break ended,
                    () = track.evict.notified() => {
                        // Asked to make room. A request that arrived meanwhile is served
                        // first (the gate counts this connection as leaving until it does).
                        if track.busy.load(Ordering::SeqCst) == 0 {
                            tracing::debug!(peer = %addr, "connection closed to make room for a new one");
                            return;
                        }
                    }
                }
            };
            if let Err(e) = ended {
                if e.is_timeout() {
                    metrics::counter!("http_connections_timed_out_total", "listener" => listener_name)
                        .increment(1);
                    tracing::debug!(peer = %addr, "connection closed: no request within the idle timeout");
                } else {
                    tracing::debug!(peer = %addr, error = %e, "connection ended with an error");
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(());
    graceful.shutdown().await;
}

/// Writes `answer` and closes, reading (and dropping) what the client still sends for a
/// moment first, so that the close does not reset the connection before the client has read
/// the answer.
async fn refuse(mut stream: tokio::net::TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let write = async {
        stream.write_all(answer).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 8192];
        let mut left: usize = 1 << 20;
        while left > 0 {
            let n = stream.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), write).await;
}

/// The forwarding headers, list-valued: a proxy may append its hop as a header line of its
/// own rather than to the last line. Their lines are combined into one, in order (RFC 9110
/// §5.3), so whoever reads the header reads every hop, nearest last.
const LIST_HEADERS: [&str; 2] = ["x-forwarded-for", "forwarded"];

fn combine_list_lines(headers: &mut warp::http::HeaderMap) {
    for name in LIST_HEADERS {
        let mut lines = headers.get_all(name).iter();
        let (Some(first), Some(_)) = (lines.next(), lines.next()) else {
            continue;
        };
        let mut joined = first.as_bytes().to_vec();
        for line in headers.get_all(name).iter().skip(1) {
            joined.extend_from_slice(b", ");
            joined.extend_from_slice(line.as_bytes());
        }
        if let Ok(value) = warp::http::HeaderValue::from_bytes(&joined) {
            headers.insert(name, value);
        }
    }
}

/// Accept errors: a connection that died before it was accepted is nothing; anything else
/// (the open-files limit reached, say) is logged and retried after a pause, as hyper did.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Raises the process's open-files limit to its hard limit (systemd starts services at
/// 1,024 soft), then warns if `max_connections` and `other_files` still do not fit under it.
/// Returns the limit in force.
pub fn raise_open_files_limit(limits: &HttpLimits, other_files: usize) -> Option<u64> {
    let soft = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the open-files limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?.0
        }
    };
    let wanted = (limits.max_connections + other_files) as u64;
    if wanted > soft {
        tracing::warn!(
            max_connections = limits.max_connections,
            open_files_limit = soft,
            "HTTP_MAX_CONNECTIONS and the service's other files exceed the open-files limit: raise it (LimitNOFILE=) or lower the cap"
        );
    }
    Some(soft)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod header_tests {
    use super::*;

    #[test]
    fn forwarding_header_lines_are_combined_in_order() {
        let mut h = warp::http::HeaderMap::new();
        h.append("x-forwarded-for", "203.0.113.1".parse().unwrap());
        h.append("x-forwarded-for", "198.51.100.7, 10.0.0.5".parse().unwrap());
        h.append("forwarded", "for=192.0.2.1".parse().unwrap());
        combine_list_lines(&mut h);
        let all: Vec<_> = h.get_all("x-forwarded-for").iter().collect();
        assert_eq!(all, ["203.0.113.1, 198.51.100.7, 10.0.0.5"]);
        assert_eq!(h.get("forwarded").unwrap(), "for=192.0.2.1");
    }
}
