//! Extractors and request checks every route shares: query pairs, the caller (client
//! address, credentials), and the guard that refuses control characters anywhere in a
//! request's text.

use warp::Filter;
use warp::filters::BoxedFilter;
use warp::path::FullPath;

use super::client_ip::{ClientAddr, client_addr};
use super::error::ApiError;

use crate::http::codes::Code;

/// Longest query value any route accepts (ids, cursors, times and filters are far shorter;
/// a route may set a tighter bound for its own parameters).
pub const MAX_QUERY_VALUE: usize = 1024;

/// Refuses, before any route sees it, a request whose decoded path segments or query (names
/// and values) hold control characters (NUL included), or whose query value is longer than
/// [`MAX_QUERY_VALUE`]. Such text is never a valid id, cursor or filter, and Postgres refuses
/// NUL in a text parameter: without this, one request value can turn into a 500.
pub fn request_text_guard() -> BoxedFilter<()> {
    warp::path::full()
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and_then(|path: FullPath, query: String| async move {
            check_request_text(path.as_str(), &query).map_err(warp::reject::custom)
        })
        .untuple_one()
        .boxed()
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// The check behind [`request_text_guard`], on the raw (percent-encoded) path and query.
pub fn check_request_text(path: &str, query: &str) -> Result<(), ApiError> {
    for segment in path.split('/') {
        if has_control(&percent_encoding::percent_decode_str(segment).decode_utf8_lossy()) {
            return Err(ApiError::invalid(
                "path",
                "the path must not contain control characters",
            ));
        }
    }
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if has_control(&k) {
            return Err(ApiError::Invalid {
                code: Code::ParameterUnknown,
                message: format!("unknown query parameter {:?}", k.as_ref()),
                param: Some(k.into_owned()),
            });
        }
        if has_control(&v) {
            return Err(ApiError::invalid(
                &k,
                format!("`{k}` must not contain control characters"),
            ));
        }
        if v.chars().count() > MAX_QUERY_VALUE {
            return Err(ApiError::invalid(
                &k,
                format!("`{k}` must be at most {MAX_QUERY_VALUE} characters"),
            ));
        }
    }
    Ok(())
}

/// The query string as decoded pairs (empty when there is none).
pub fn query_pairs() -> BoxedFilter<(Vec<(String, String)>,)> {
    warp::query::raw()
        .or(warp::any().map(String::new))
        .unify()
        .map(|q: String| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect::<Vec<_>>()
        })
        .boxed()
}

/// What a request says about who sends it. `Debug` never shows the Authorization header.
#[derive(Clone)]
pub struct Caller {
    pub authorization: Option<String>,
    pub client: ClientAddr,
    pub idempotency_key: Option<String>,
    pub content_type: Option<String>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("client", &self.client)
            .field("idempotency_key", &self.idempotency_key)
            .finish_non_exhaustive()
    }
}

/// Extracts [`Caller`].
pub fn caller() -> BoxedFilter<(Caller,)> {
    warp::header::optional::<String>("authorization")
        .and(client_addr())
        .and(warp::header::optional::<String>("idempotency-key"))
        .and(warp::header::optional::<String>("content-type"))
        .map(
            |authorization, client: ClientAddr, idempotency_key, content_type| Caller {
                authorization,
                client,
                idempotency_key,
                content_type,
            },
        )
        .boxed()
}

/// The value of query parameter `name`.
pub fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_debug_hides_the_authorization_header() {
        let c = Caller {
            authorization: Some("Bearer sk_live_secretsecret".into()),
            client: ClientAddr::default(),
            idempotency_key: None,
            content_type: None,
        };
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("secret"), "{dbg}");
    }

    #[test]
    fn control_characters_anywhere_in_path_or_query_are_a_400_naming_where() {
        for bad in ["%00", "%01", "%1F", "%7F", "%C2%85", "%0A", "%09", "a%00b"] {
            let e = check_request_text(
                "/api/v1/subscriptions",
                &format!("customerExternalId={bad}"),
            )
            .unwrap_err();
            assert!(
                matches!(e, ApiError::Invalid { param: Some(ref p), .. } if p == "customerExternalId"),
                "{bad}: {e:?}"
            );
            let e = check_request_text(&format!("/api/v1/events/evt_{bad}"), "").unwrap_err();
            assert!(matches!(e, ApiError::Invalid { param: Some(ref p), .. } if p == "path"));
            let e = check_request_text("/api/v1/events", &format!("x{bad}=1")).unwrap_err();
            assert!(matches!(
                e,
                ApiError::Invalid {
                    code: Code::ParameterUnknown,
                    ..
                }
            ));
        }
        let long = "a".repeat(MAX_QUERY_VALUE + 1);
        assert!(check_request_text("/api/v1/events", &format!("type={long}")).is_err());
        // Percent-encoded text that is not a control character passes, as do '+' and UTF-8.
        check_request_text(
            "/api/v1/subscriptions/sub_1",
            "customerExternalId=a+b%26c%C3%A9",
        )
        .unwrap();
        check_request_text("/checkout/abc/pro", "").unwrap();
    }
}
