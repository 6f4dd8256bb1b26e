//! The one API error type and the one place that turns errors (and warp rejections) into the
//! JSON error shape `{"error":{"type","code","message","param","requestId"}}` (docs/design.md §4).
//! 5xx bodies never carry internal detail; it goes to the log with the request id instead.

use serde_json::json;
use warp::http::StatusCode;

use super::ratelimit::Limited;

use crate::http::codes::Code;

/// Request bodies are capped at 64 KiB.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Result alias for this crate.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// Every way a request can fail.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed; `param` names the offending field.
    #[error("{message}")]
    Invalid {
        code: Code,
        message: String,
        param: Option<String>,
    },
    /// 401: missing, malformed, unknown or revoked credentials.
    #[error("{message}")]
    Unauthorized { code: Code, message: String },
    /// 403: authenticated but not allowed (e.g. CSRF token missing).
    #[error("{message}")]
    Forbidden { code: Code, message: String },
    /// 404: unknown object, or another merchant's (existence is never leaked).
    #[error("{message}")]
    NotFound {
        message: String,
        param: Option<String>,
    },
    /// 404 for a path no route serves.
    #[error("no such route")]
    RouteNotFound,
    /// 405 with the methods the path allows.
    #[error("method not allowed")]
    MethodNotAllowed { allow: String },
    /// 409.
    #[error("{message}")]
    Conflict {
        code: Code,
        message: String,
        param: Option<String>,
    },
    /// 411: a body without a length.
    #[error("length required")]
    LengthRequired,
    /// 408: the body did not arrive within `HTTP_BODY_TIMEOUT_SECS`.
    #[error("request body timed out")]
    RequestTimeout,
    /// 413.
    #[error("request body too large")]
    PayloadTooLarge,
    /// 415.
    #[error("content type must be application/json")]
    UnsupportedMediaType,
    /// 429; headers come from the limiter.
    #[error("rate limited")]
    RateLimited(Limited),
    /// 503: the database (or another dependency) is unreachable.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// 429 for a quota over a long window (not the per-second limiter): its own code and a
    /// `Retry-After`.
    #[error("{message}")]
    Quota {
        code: Code,
        message: String,
        retry_after_secs: u64,
    },
    /// 503 the merchant should be told about (e.g. the relayer cannot pay for gas).
    #[error("{message}")]
    Dependency { code: Code, message: String },
    /// 500: a bug or an unexpected dependency failure. The text is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

impl warp::reject::Reject for ApiError {}

impl ApiError {
    /// 400 naming a field.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::Invalid {
            code: Code::ParameterInvalid,
            message: message.into(),
            param: Some(param.to_string()),
        }
    }

    /// 400 for a missing field.
    pub fn missing(param: &str) -> Self {
        Self::Invalid {
            code: Code::ParameterMissing,
            message: format!("`{param}` is required"),
            param: Some(param.to_string()),
        }
    }

    /// 404 for an object.
    pub fn not_found(what: &str, param: Option<&str>) -> Self {
        Self::NotFound {
            message: format!("no such {what}"),
            param: param.map(str::to_string),
        }
    }

    /// 401 for a missing or bad API key.
    pub fn bad_key() -> Self {
        Self::Unauthorized {
            code: Code::InvalidApiKey,
            message: "missing, invalid or revoked API key (send `Authorization: Bearer sk_live_…`)"
                .into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Invalid { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::NotFound { .. } | Self::RouteNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::LengthRequired => StatusCode::LENGTH_REQUIRED,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RateLimited(_) | Self::Quota { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) | Self::Dependency { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error object without `requestId` (added when the response is finished).
    pub fn body(&self) -> serde_json::Value {
        let (ty, code, message, param): (&str, Code, String, Option<&str>) = match self {
            Self::Invalid {
                code,
                message,
                param,
            } => (
                "invalid_request_error",
                *code,
                message.clone(),
                param.as_deref(),
            ),
            Self::Unauthorized { code, message } => {
                ("authentication_error", *code, message.clone(), None)
            }
            Self::Forbidden { code, message } => ("permission_error", *code, message.clone(), None),
            Self::NotFound { message, param } => (
                "invalid_request_error",
                Code::ResourceMissing,
                message.clone(),
                param.as_deref(),
            ),
            Self::RouteNotFound => (
                "invalid_request_error",
                Code::RouteNotFound,
                "no route serves this path (see /api/v1/openapi.json)".into(),
                None,
            ),
            Self::MethodNotAllowed { allow } => (
                "invalid_request_error",
                Code::MethodNotAllowed,
                format!("this path allows {allow}"),
                None,
            ),
            Self::Conflict {
                code,
                message,
                param,
            } => (
                "invalid_request_error",
                *code,
                message.clone(),
                param.as_deref(),
            ),
            Self::LengthRequired => (
                "invalid_request_error",
                Code::LengthRequired,
                "a request body needs Content-Length or chunked encoding".into(),
                None,
            ),
            Self::RequestTimeout => (
                "invalid_request_error",
                Code::RequestTimeout,
                "the request body did not arrive in time (HTTP_BODY_TIMEOUT_SECS)".into(),
                None,
            ),
            Self::PayloadTooLarge => (
                "invalid_request_error",
                Code::PayloadTooLarge,
                format!("request bodies are limited to {BODY_LIMIT} bytes"),
                None,
            ),
            Self::UnsupportedMediaType => (
                "invalid_request_error",
                Code::UnsupportedMediaType,
                "request bodies must be JSON (Content-Type: application/json)".into(),
                None,
            ),
            Self::RateLimited(_) => (
                "rate_limit_error",
                Code::RateLimited,
                "too many requests; retry after the time in Retry-After".into(),
                None,
            ),
            Self::Unavailable(_) => (
                "api_error",
                Code::ServiceUnavailable,
                "the service is temporarily unavailable; retry later".into(),
                None,
            ),
            Self::Quota { code, message, .. } => ("rate_limit_error", *code, message.clone(), None),
            Self::Dependency { code, message } => ("api_error", *code, message.clone(), None),
            Self::Internal(_) => (
                "api_error",
                Code::InternalError,
                "an internal error occurred; quote the requestId when reporting it".into(),
                None,
            ),
        };
        json!({ "type": ty, "code": code.as_str(), "message": message, "param": param })
    }
}

impl From<Limited> for ApiError {
    fn from(l: Limited) -> Self {
        Self::RateLimited(l)
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(e: tokio_postgres::Error) -> Self {
        // A closed or broken connection is an outage (503); anything else (SQL errors,
        // conversions) is a bug (500).
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        let shutting_down = e
            .code()
            .is_some_and(|c| c.code().starts_with("08") || c.code().starts_with("57P"));
        if e.is_closed() || io || shutting_down {
            Self::Unavailable(e.to_string())
        } else {
            // The server's message and code, for the log (the body never carries it).
            Self::Internal(match e.as_db_error() {
                Some(db) => format!("db error: {db}"),
                None => e.to_string(),
            })
        }
    }
}

impl From<chainsub_store::Error> for ApiError {
    fn from(e: chainsub_store::Error) -> Self {
        match e {
            chainsub_store::Error::Db(e) => e.into(),
            chainsub_store::Error::Pool(e) => e.into(),
            e @ chainsub_store::Error::Inconsistent(_) => Self::Internal(e.to_string()),
        }
    }
}

impl From<chainsub_webhooks::Error> for ApiError {
    fn from(e: chainsub_webhooks::Error) -> Self {
        match e {
            chainsub_webhooks::Error::Db(e) => e.into(),
            chainsub_webhooks::Error::Pool(e) => e.into(),
            chainsub_webhooks::Error::Store(e) => e.into(),
        }
    }
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Self::Unavailable(e.to_string())
    }
}
