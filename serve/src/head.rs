//! The first request head of a connection, read and checked before hyper takes the stream:
//! hyper answers a head it cannot parse with a bare `400` (no body), where every other 4xx of
//! ours carries the JSON error body. [`read_first`] reads up to the head's blank line and
//! parses it with `httparse` (hyper's own parser, same header bound); a malformed head gets
//! [`Refused::response`], and a good one is handed to hyper with the bytes already read in
//! front of the rest of the stream ([`Prefixed`]). Later requests on a kept-alive
//! connection are hyper's alone.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// Longest first request head accepted (hyper's own buffer bound is larger): past it, 431.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// Header lines a head may have (hyper's bound).
const MAX_HEADERS: usize = 100;

/// Why a first head is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not HTTP/1.x as `httparse` reads it (what hyper answers with an empty 400).
    Malformed(String),
    /// Longer than [`MAX_HEAD`] or more than 100 header lines.
    TooLarge,
}

impl Refused {
    /// The whole answer, written before the connection is closed: the API's error shape
    /// with a request id, as the `X-Request-Id` header too.
    pub(crate) fn response(&self) -> Vec<u8> {
        let (status, code, message) = match self {
            Self::Malformed(why) => (
                "400 Bad Request",
                "malformed_request",
                format!("the request is not valid HTTP/1.1: {why}"),
            ),
            Self::TooLarge => (
                "431 Request Header Fields Too Large",
                "request_header_too_large",
                format!(
                    "the request line and headers take at most {} KiB and {MAX_HEADERS} lines",
                    MAX_HEAD / 1024
                ),
            ),
        };
        // A JSON string's text: the parser's reasons are plain words, kept so.
        let message: String = message
            .chars()
            .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
            .collect();
        let bytes: [u8; 12] = rand::random();
        let rid: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let body = format!(
            r#"{{"error":{{"type":"invalid_request_error","code":"{code}","message":"{message}","param":null,"requestId":"req_{rid}"}}}}"#
        );
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nx-request-id: req_{rid}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

/// What [`read_first`] found.
#[derive(Debug)]
pub(crate) enum First {
    /// A whole head that parses (with whatever followed it in the same reads), or the bytes
    /// the client sent before closing (hyper then ends the connection as it would).
    Ready(Vec<u8>),
    Refused(Refused),
}

/// Reads from `stream` until the first request head is complete, refused, or the client
/// closes. The caller bounds the time it may take.
pub(crate) async fn read_first<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<First> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match httparse::Request::new(&mut headers).parse(&buf) {
            Ok(httparse::Status::Complete(_)) => return Ok(First::Ready(buf)),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Ok(First::Refused(Refused::TooLarge)),
            Err(e) => return Ok(First::Refused(Refused::Malformed(e.to_string()))),
        }
        if buf.len() >= MAX_HEAD {
            return Ok(First::Refused(Refused::TooLarge));
        }
        buf.reserve(4096);
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(First::Ready(buf));
        }
    }
}

/// A stream read from `prefix` first: the bytes [`read_first`] took, then the rest.
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn first(input: &[u8]) -> First {
        let mut s = input;
        read_first(&mut s).await.unwrap()
    }

    #[tokio::test]
    async fn a_good_head_is_handed_on_whole_and_read_back_first() {
        let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n";
        let First::Ready(buf) = first(req).await else {
            panic!("a good head")
        };
        let mut p = Prefixed::new(buf, &b"Host: y\r\n\r\n"[..]);
        let mut all = Vec::new();
        p.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, [&req[..], b"Host: y\r\n\r\n"].concat());
    }

    #[tokio::test]
    async fn a_malformed_or_oversized_head_is_refused() {
        assert!(matches!(
            first(b"HELLO\r\n\r\n").await,
            First::Refused(Refused::Malformed(_))
        ));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(
            first(big.as_bytes()).await,
            First::Refused(Refused::TooLarge)
        ));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X{i}: 1\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(matches!(
            first(many.as_bytes()).await,
            First::Refused(Refused::TooLarge)
        ));
        let body = String::from_utf8(Refused::TooLarge.response()).unwrap();
        assert!(body.starts_with("HTTP/1.1 431 ") && body.contains("\"request_header_too_large\""));
    }
}
