//! Raw TCP clients for tests of the listeners themselves (caps, timeouts): a connection
//! from a chosen loopback address, and everything a server sends until it closes.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpSocket, TcpStream};

use crate::wait::PATIENCE;

/// A connection to `to` from `from` (every 127.0.0.0/8 address is this host, so each one
/// is a distinct client to a server's per-client accounting).
pub async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind((from, 0).into())
        .expect("bind a loopback address");
    socket.connect(to).await.expect("connect")
}

/// Everything the server sends until it closes the connection (a reset counts as closed);
/// panics if it is still open after [`PATIENCE`].
pub async fn read_until_closed(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "stuck: the server never closed the connection"
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// A listener's idle-connection check: a connection that sends nothing is closed (after the
/// listener's idle timeout), while another client's `GET path` is answered 200.
pub async fn assert_idle_closed_while_answering(addr: SocketAddr, path: &str) {
    use tokio::io::AsyncWriteExt as _;
    let mut idle = connect_from([127, 0, 0, 2].into(), addr).await;
    let mut asking = connect_from([127, 0, 0, 3].into(), addr).await;
    asking
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
    let answer = read_until_closed(&mut asking).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        read_until_closed(&mut idle).await,
        "",
        "the idle connection got an answer"
    );
}
