//! The accept loop against real sockets: caps, timers and the peer address.

use super::*;
use std::net::Ipv4Addr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A server whose `/` answers `peer=<ip>` and whose `POST /echo` answers the body's length,
/// or 408 when the body timed out.
async fn start(limits: HttpLimits, exempt: Exempt) -> (SocketAddr, Gate, oneshot::Sender<()>) {
    let root = warp::path::end()
        .and(warp::get())
        .and(peer())
        .map(|p: Option<SocketAddr>| {
            format!("peer={}", p.map(|p| p.ip().to_string()).unwrap_or_default())
        });
    let echo = warp::path("echo")
        .and(warp::post())
        .and(warp::body::stream())
        .then(count_body);
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let gate = Gate::new("test", limits, exempt);
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(
        warp::service(root.or(echo)),
        listener,
        gate.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    (addr, gate, stop)
}

/// The body's length, or 408 when it timed out (as the API answers).
async fn count_body<S, B>(mut body: S) -> warp::http::Response<String>
where
    S: futures::Stream<Item = Result<B, warp::Error>> + Unpin,
    B: warp::Buf,
{
    use futures::StreamExt as _;
    let mut n = 0;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => n += c.remaining(),
            Err(e) => {
                let status = if is_body_timeout(&e) { 408 } else { 400 };
                return warp::http::Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap();
            }
        }
    }
    warp::http::Response::new(format!("len={n}"))
}

fn limits(max: usize, per_client: usize) -> HttpLimits {
    HttpLimits {
        max_connections: max,
        max_connections_per_client: per_client,
        idle_timeout_secs: 1,
        body_timeout_secs: 1,
    }
}

use chainsub_tests::net::{connect_from, read_until_closed as read_to_close};

async fn get(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
        .await
        .expect("no answer")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

#[tokio::test]
async fn idle_and_half_sent_connections_are_closed_while_fresh_requests_are_answered() {
    let (addr, gate, _stop) = start(limits(1000, 1000), Arc::new(|_| false)).await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(connect_from(CLIENT, addr).await);
    }
    let mut half = Vec::new();
    for _ in 0..20 {
        let mut s = connect_from(CLIENT, addr).await;
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nx-slow: ")
            .await
            .unwrap();
        half.push(s);
    }
    // A keep-alive connection that was answered once, then went quiet.
    let mut kept = connect_from(CLIENT, addr).await;
    assert!(get(&mut kept).await.contains("peer=127.0.0.2"));

    // Meanwhile a fresh client is served.
    let mut fresh = connect_from(OTHER, addr).await;
    let answer = get(&mut fresh).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("peer=127.0.0.3"), "{answer}");
    drop(fresh);

    for s in idle.iter_mut().chain(half.iter_mut()) {
        let rest = read_to_close(s).await;
        // hyper answers a head that timed out half-way with 408, an idle one with nothing.
        assert!(
            rest.is_empty() || rest.starts_with("HTTP/1.1 408"),
            "{rest}"
        );
    }
    assert_eq!(read_to_close(&mut kept).await, "");
    // Every connection is given back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while gate.open() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} still open",
            gate.open()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_client_past_its_share_is_refused_at_once_and_others_are_not() {
    let exempt_other: Exempt = Arc::new(|ip| ip == IpAddr::V4(OTHER));
    let (addr, gate, _stop) = start(limits(12, 5), exempt_other).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(connect_from(CLIENT, addr).await);
    }
    // The accept loop counts a connection when it accepts it: wait until it has.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while gate.open() < 5 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut sixth = connect_from(CLIENT, addr).await;
    let refused = read_to_close(&mut sixth).await;
    assert!(
        refused.starts_with("HTTP/1.1 429 Too Many Requests"),
        "{refused}"
    );
    assert!(
        refused.contains(r#""code":"too_many_connections""#),
        "{refused}"
    );
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 1"),
        "{refused}"
    );

    // An exempt peer (a trusted proxy) is not capped per client, only in total.
    #[expect(
        clippy::collection_is_never_read,
        reason = "it holds the connections open"
    )]
    let mut proxied = Vec::new();
    for _ in 0..7 {
        let mut s = connect_from(OTHER, addr).await;
        assert!(get(&mut s).await.starts_with("HTTP/1.1 200"));
        proxied.push(s);
    }
    // Past the total, the connection idle longest (one of `held`) makes room.
    let mut past_total = connect_from(OTHER, addr).await;
    assert!(get(&mut past_total).await.starts_with("HTTP/1.1 200"));

    // Closing connections makes room again.
    drop(held);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut s = connect_from(CLIENT, addr).await;
        let answer = get(&mut s).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_body_that_stops_arriving_times_out_and_the_connection_closes() {
    let (addr, _gate, _stop) = start(limits(100, 100), Arc::new(|_| false)).await;
    let mut whole = connect_from(CLIENT, addr).await;
    whole
        .write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = whole.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("len=5"));

    let mut slow = connect_from(CLIENT, addr).await;
    slow.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nhello")
        .await
        .unwrap();
    let answer = read_to_close(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[test]
fn clients_are_ipv4_addresses_and_ipv6_slash_64s() {
    let k = |s: &str| client_key(s.parse().unwrap()).to_string();
    assert_eq!(k("192.0.2.7"), "192.0.2.7");
    assert_eq!(k("::ffff:192.0.2.7"), "192.0.2.7");
    assert_eq!(k("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::");
    assert_eq!(k("2001:db8:1:2:ffff::1"), k("2001:db8:1:2::9"));
}

/// A flood from many addresses fills the total cap with connections that send nothing, and
/// a fresh client used to get 503 until the idle timeout freed slots. When the listener is
/// full, the connection idle longest (no request in flight) is now closed to make room; a
/// connection with a request in flight never is, and with none idle the answer is still 503.
#[tokio::test]
async fn when_full_the_longest_idle_connection_makes_room_and_busy_ones_never_do() {
    let mut l = limits(3, 100);
    l.idle_timeout_secs = 60;
    l.body_timeout_secs = 60;
    let (addr, gate, _stop) = start(l, Arc::new(|_| false)).await;
    let wait_open = |n: usize| {
        let gate = gate.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while gate.open() < n {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{} open",
                    gate.open()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // A request in flight: its body is still arriving.
    let mut busy = connect_from(CLIENT, addr).await;
    busy.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhello")
        .await
        .unwrap();
    wait_in_flight(&gate, 1).await;
    let mut older = connect_from(CLIENT, addr).await;
    wait_open(2).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut newer = connect_from(CLIENT, addr).await;
    wait_open(3).await;

    // Full: a fresh client is answered, and the connection idle longest made room.
    let mut fresh = connect_from(OTHER, addr).await;
    let answer = get(&mut fresh).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        read_to_close(&mut older).await,
        "",
        "the longest idle is closed"
    );
    // Again: now `newer` is the longest idle (`fresh` was active since).
    let mut fresh2 = connect_from(OTHER, addr).await;
    assert!(get(&mut fresh2).await.starts_with("HTTP/1.1 200"));
    assert_eq!(read_to_close(&mut newer).await, "");

    // The request in flight was never a candidate: it completes.
    busy.write_all(b"world").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = busy.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("len=10"));

    // With a request in flight on every connection, nothing makes room: 503 at once.
    let mut l = limits(2, 100);
    l.body_timeout_secs = 60;
    let (addr, gate, _stop) = start(l, Arc::new(|_| false)).await;
    #[expect(
        clippy::collection_is_never_read,
        reason = "it holds the connections open"
    )]
    let mut pending = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from(CLIENT, addr).await;
        s.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nhello")
            .await
            .unwrap();
        pending.push(s);
    }
    // Both heads are read (their handlers wait for the bodies) before the third comes.
    wait_in_flight(&gate, 2).await;
    let mut third = connect_from(OTHER, addr).await;
    let refused = read_to_close(&mut third).await;
    assert!(
        refused.starts_with("HTTP/1.1 503 Service Unavailable"),
        "{refused}"
    );
}

/// Waits until `n` connections have a request in flight.
async fn wait_in_flight(gate: &Gate, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while gate.in_flight() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} in flight",
            gate.in_flight()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
