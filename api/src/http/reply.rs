//! `Resp`: the one reply type every route returns, so that the outer layer can stamp
//! `X-Request-Id` on every response and put the same id into every error body. Also the
//! request-body reader (size limit, JSON content type).

use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use warp::Filter;
use warp::http::{HeaderName, HeaderValue, StatusCode};
use warp::reject::Rejection;

use super::error::ApiError;

use crate::http::codes::Code;

pub use super::error::BODY_LIMIT;

/// What a response carries.
#[derive(Debug, Clone)]
pub enum RespBody {
    Json(Value),
    /// An error object; `requestId` is added when the response is finished.
    Error(Value),
    Raw {
        content_type: &'static str,
        bytes: Bytes,
    },
    /// A body produced while it is sent (the ledger export), from a bounded channel: the
    /// producer waits while the client reads slowly, so memory stays constant. An `Err`
    /// chunk aborts the response (the client sees a cut-off body, never a complete-looking
    /// one).
    Stream {
        content_type: &'static str,
        body: StreamBody,
    },
    Empty,
}

/// The receiving end of a streamed body. A `Resp` is `Clone` (replies are cheap values);
/// clones of a streaming one share the one receiver, and only the first to be sent gets it.
#[derive(Clone)]
pub struct StreamBody(
    std::sync::Arc<std::sync::Mutex<Option<futures::channel::mpsc::Receiver<StreamChunk>>>>,
);

/// One piece of a streamed body.
pub type StreamChunk = Result<Bytes, std::io::Error>;

impl StreamBody {
    /// A body and the sender that writes it; at most `depth` chunks wait in between.
    pub fn channel(depth: usize) -> (futures::channel::mpsc::Sender<StreamChunk>, Self) {
        let (tx, rx) = futures::channel::mpsc::channel(depth);
        (
            tx,
            Self(std::sync::Arc::new(std::sync::Mutex::new(Some(rx)))),
        )
    }

    fn take(&self) -> Option<futures::channel::mpsc::Receiver<StreamChunk>> {
        self.0.lock().ok().and_then(|mut r| r.take())
    }
}

impl std::fmt::Debug for StreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamBody")
    }
}

/// A response under construction.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: RespBody,
}

impl Resp {
    /// This answer with the key's `RateLimit-Policy` and `RateLimit` headers.
    pub fn with_rate(mut self, rate: &super::ratelimit::Allowed) -> Self {
        for (k, v) in rate.headers() {
            self = self.header(k, &v);
        }
        self
    }

    /// 200 with a JSON body.
    pub fn json(value: Value) -> Self {
        Self::with_status(StatusCode::OK, value)
    }

    /// 200 with a typed view, serialized here straight from the rows it borrows (no JSON tree).
    pub fn view(view: &impl serde::Serialize) -> Self {
        Self::view_sized(view, 16 * 1024)
    }

    /// [`Resp::view`] into a buffer of `capacity` bytes: a list page passes its rows times
    /// their usual size, so the page is written without growing (and copying) the buffer.
    pub fn view_sized(view: &impl serde::Serialize, capacity: usize) -> Self {
        let mut bytes = Vec::with_capacity(capacity);
        // sonic-rs writes what serde_json writes for the same `Serialize` calls (the test
        // below), escaping strings with SIMD instead of byte by byte.
        match sonic_rs::to_writer(&mut bytes, view) {
            Ok(()) => Self::raw("application/json", bytes),
            Err(e) => ApiError::Internal(format!("serializing a view: {e}")).into_resp(),
        }
    }

    /// A view written by its direct JSON writer (the same bytes as [`Resp::view_sized`];
    /// `chainsub_views::WriteJson`), into a buffer of `capacity` bytes.
    pub fn written(view: &impl chainsub_views::WriteJson, capacity: usize) -> Self {
        let mut bytes = Vec::with_capacity(capacity);
        view.write_json(&mut bytes);
        Self::raw("application/json", bytes)
    }

    /// A typed view with a status, kept as a JSON value (the idempotency store replays it).
    pub fn json_view(status: StatusCode, view: &impl serde::Serialize) -> Self {
        match serde_json::to_value(view) {
            Ok(value) => Self::with_status(status, value),
            Err(e) => ApiError::Internal(format!("serializing a view: {e}")).into_resp(),
        }
    }

    /// A JSON body with a status.
    pub fn with_status(status: StatusCode, value: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: RespBody::Json(value),
        }
    }

    /// An error response (see [`ApiError::into_resp`]).
    pub fn error(status: StatusCode, error: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: RespBody::Error(error),
        }
    }

    /// A non-JSON body.
    pub fn raw(content_type: &'static str, bytes: impl Into<Bytes>) -> Self {
        Self {
            status: StatusCode::OK,
            headers: Vec::new(),
            body: RespBody::Raw {
                content_type,
                bytes: bytes.into(),
            },
        }
    }

    /// 200 with a body written while it is sent (see [`RespBody::Stream`]).
    pub fn stream(content_type: &'static str, body: StreamBody) -> Self {
        Self {
            status: StatusCode::OK,
            headers: Vec::new(),
            body: RespBody::Stream { content_type, body },
        }
    }

    /// `Chainsub-Indexed-Block`: the indexer's last block as the read that made this response
    /// saw it when it began (`crate::reads`); none before anything is indexed.
    pub fn indexed_at(self, height: Option<i64>) -> Self {
        match height {
            Some(h) => self.header("chainsub-indexed-block", &h.to_string()),
            None => self,
        }
    }

    /// Adds a header; invalid values are dropped (they are all built by us).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            self.headers.push((n, v));
        }
        self
    }

    /// The JSON body as it will be sent (errors get `requestId`).
    pub fn json_body(&self, request_id: &str) -> Option<Value> {
        match &self.body {
            RespBody::Json(v) => Some(v.clone()),
            RespBody::Error(e) => {
                let mut e = e.clone();
                if let Some(o) = e.as_object_mut() {
                    o.insert("requestId".into(), Value::String(request_id.into()));
                }
                Some(serde_json::json!({ "error": e }))
            }
            _ => None,
        }
    }

    /// The final HTTP response.
    pub fn finish(self, request_id: &str) -> warp::reply::Response {
        if let RespBody::Stream { content_type, body } = &self.body {
            use warp::Reply;
            let rx = body.take().unwrap_or_else(|| {
                let (_, empty) = futures::channel::mpsc::channel(0);
                empty
            });
            let mut resp = warp::reply::stream(rx).into_response();
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static(content_type));
            return self.stamp(resp, request_id);
        }
        let (content_type, bytes): (Option<&str>, Bytes) = match &self.body {
            // Serialized in place: a list page is a large tree, and cloning it cost more
            // than the query that produced it.
            RespBody::Json(v) => (
                Some("application/json"),
                Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
            ),
            RespBody::Error(_) => (
                Some("application/json"),
                Bytes::from(
                    serde_json::to_vec(&self.json_body(request_id).unwrap_or(Value::Null))
                        .unwrap_or_default(),
                ),
            ),
            RespBody::Raw {
                content_type,
                bytes,
            } => (Some(content_type), bytes.clone()),
            RespBody::Empty | RespBody::Stream { .. } => (None, Bytes::new()),
        };
        let mut resp = warp::reply::Response::new(bytes.into());
        if let Some(ct) = content_type {
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static(ct));
        }
        self.stamp(resp, request_id)
    }

    /// Status, our headers, the request id and `no-store`.
    fn stamp(self, mut resp: warp::reply::Response, request_id: &str) -> warp::reply::Response {
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        for (k, v) in self.headers {
            h.append(k, v);
        }
        if let Ok(v) = HeaderValue::from_str(request_id) {
            h.insert("x-request-id", v);
        }
        h.insert("cache-control", HeaderValue::from_static("no-store"));
        resp
    }
}

impl From<ApiError> for Resp {
    fn from(e: ApiError) -> Self {
        e.into_resp()
    }
}

/// Turns a handler's result into a `Resp` (errors are answered here, not rejected, so a
/// failing handler never falls through to another route).
pub fn respond(r: Result<Resp, ApiError>) -> Resp {
    r.unwrap_or_else(ApiError::into_resp)
}

/// A handler's future, boxed once where the route calls it.
pub type Handled = std::pin::Pin<Box<dyn Future<Output = Resp> + Send>>;

/// [`respond`] to a handler's result, as a boxed future. Each resource router is a
/// `BoxedFilter`, and a request passes through several of them (the routers before its own
/// reject it): each boxes its filter chain's future, whose size is that of the largest
/// handler state in it (~2.9 KB) unless the handler is boxed itself. Unboxed, those copies
/// were ~3 % of the API's instructions on a subscriptions page (callgrind).
pub fn handle<F>(handler: F) -> Handled
where
    F: Future<Output = Result<Resp, ApiError>> + Send + 'static,
{
    Box::pin(async move { respond(handler.await) })
}

/// The raw request body, capped at [`BODY_LIMIT`] whether or not Content-Length is sent.
pub fn body_bytes() -> impl Filter<Extract = (Bytes,), Error = Rejection> + Clone {
    warp::header::optional::<u64>("content-length")
        .and(warp::body::stream())
        .and_then(|len: Option<u64>, stream| async move {
            if len.is_some_and(|l| l > BODY_LIMIT as u64) {
                return Err(warp::reject::custom(ApiError::PayloadTooLarge));
            }
            read_limited(stream).await.map_err(warp::reject::custom)
        })
}

async fn read_limited<S, B>(mut stream: S) -> Result<Bytes, ApiError>
where
    S: futures::Stream<Item = Result<B, warp::Error>> + Unpin,
    B: warp::Buf,
{
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let mut chunk = chunk.map_err(|e| {
            if chainsub_serve::is_body_timeout(&e) {
                return ApiError::RequestTimeout;
            }
            ApiError::Invalid {
                code: Code::BodyUnreadable,
                message: format!("could not read the request body: {e}"),
                param: None,
            }
        })?;
        if out.len() + chunk.remaining() > BODY_LIMIT {
            return Err(ApiError::PayloadTooLarge);
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            out.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    Ok(Bytes::from(out))
}

/// Parses a JSON object body; `content_type` must be JSON when a body is present. An empty
/// body is an empty object (so `POST /auth/keys` needs none).
pub fn parse_json_object(
    content_type: Option<&str>,
    body: &[u8],
) -> Result<serde_json::Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    let is_json = content_type.is_some_and(|ct| {
        let mime = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
    });
    if !is_json {
        return Err(ApiError::UnsupportedMediaType);
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::Invalid {
            code: Code::BodyInvalid,
            message: "the request body must be a JSON object".into(),
            param: None,
        }),
        Err(e) => Err(ApiError::Invalid {
            code: Code::BodyInvalid,
            message: format!("the request body is not valid JSON: {e}"),
            param: None,
        }),
    }
}

impl ApiError {
    /// Turns the error into a response (logging 5xx detail, which the body never carries).
    pub fn into_resp(self) -> Resp {
        match &self {
            Self::Internal(detail) => tracing::error!(error = %detail, "internal error"),
            Self::Unavailable(detail) => tracing::warn!(error = %detail, "unavailable"),
            _ => {}
        }
        let mut resp = Resp::error(self.status(), self.body());
        match &self {
            Self::MethodNotAllowed { allow } => resp = resp.header("allow", allow),
            Self::RateLimited(l) => {
                for (k, v) in l.headers() {
                    resp = resp.header(k, &v);
                }
            }
            Self::Quota {
                retry_after_secs, ..
            } => resp = resp.header("retry-after", &retry_after_secs.to_string()),
            Self::Dependency { code, message } => {
                tracing::warn!(
                    code = code.as_str(),
                    message,
                    "dependency refused the request"
                )
            }
            _ => {}
        }
        resp
    }
}

/// The single `recover`: every rejection becomes the JSON error shape.
pub async fn recover(rejection: Rejection) -> Result<Resp, Infallible> {
    let err = if let Some(e) = rejection.find::<ApiError>() {
        e.clone()
    } else if rejection.is_not_found() {
        ApiError::RouteNotFound
    } else if rejection.find::<warp::reject::PayloadTooLarge>().is_some() {
        ApiError::PayloadTooLarge
    } else if rejection.find::<warp::reject::LengthRequired>().is_some() {
        ApiError::LengthRequired
    } else if rejection
        .find::<warp::reject::UnsupportedMediaType>()
        .is_some()
    {
        ApiError::UnsupportedMediaType
    } else if let Some(e) = rejection.find::<warp::reject::InvalidHeader>() {
        ApiError::Invalid {
            code: Code::HeaderInvalid,
            message: e.to_string(),
            param: None,
        }
    } else if rejection.find::<warp::reject::MethodNotAllowed>().is_some() {
        // Every route declares its methods (routes::methods), so this is only reached for
        // paths that match nothing else; answer like an unknown path.
        ApiError::RouteNotFound
    } else {
        ApiError::Internal(format!("unhandled rejection: {rejection:?}"))
    };
    Ok(err.into_resp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Inner<'a> {
        id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        missing: Option<&'a str>,
        flag: bool,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        SubscriptionCharged,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Page<'a> {
        object: &'static str,
        data: Vec<Inner<'a>>,
        kind: Kind,
        block_number: u64,
        delta: i64,
        text: String,
        map: std::collections::BTreeMap<&'a str, u32>,
        raw: Value,
    }

    /// `Resp::view` writes with sonic-rs: byte for byte what serde_json writes for the
    /// shapes our views use (options, skipped fields, enums, nesting, escapes, numbers).
    #[test]
    fn views_are_written_exactly_as_serde_json_writes_them() {
        let text: String = "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} \
             del \u{7f} é 日本 🦀 </script> \u{2028}"
            .into();
        let page = Page {
            object: "list",
            data: vec![
                Inner {
                    id: "sub_f46b7cd0e944ade2dad87166a4dabf10",
                    skipped: None,
                    missing: None,
                    flag: true,
                },
                Inner {
                    id: &text,
                    skipped: Some(7),
                    missing: Some("0xCcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC"),
                    flag: false,
                },
            ],
            kind: Kind::SubscriptionCharged,
            block_number: u64::MAX,
            delta: i64::MIN,
            text: text.repeat(40),
            map: [("b", 2), ("a", 1)].into_iter().collect(),
            raw: serde_json::json!({"n": 1.5, "s": "x\u{1}y", "a": [null, true]}),
        };
        let resp = Resp::view_sized(&page, 8);
        let RespBody::Raw { bytes, .. } = &resp.body else {
            panic!("not a raw body: {:?}", resp.body)
        };
        assert_eq!(
            std::str::from_utf8(bytes).unwrap(),
            serde_json::to_string(&page).unwrap()
        );
    }
}
