//! One router per resource, each exporting `routes(ctx) -> BoxedFilter<(Resp,)>`; `app.rs`
//! composes them. Shared helpers for method fallbacks, queries and request metadata live here.

pub mod auth;
pub mod checkouts;
pub mod events;
pub mod health;
pub mod keys;
pub mod openapi;
pub mod pages;
pub mod plans;
pub mod subscriptions;
pub mod webhooks;

use std::net::{IpAddr, SocketAddr};

use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::Method;

use crate::error::ApiError;
use crate::reply::Resp;

/// The last alternative of every path: 405 with `Allow` when the method is not one of
/// `allow` (comma-separated, e.g. "GET, POST"); otherwise steps aside (a handler for the
/// method already answered or rejected).
pub fn method_fallback(allow: &'static str) -> BoxedFilter<(Resp,)> {
    warp::method()
        .and_then(move |m: Method| async move {
            // HEAD is not served (405 lists what is); GET routes answer GET only.
            let allowed = allow.split(", ").any(|a| a == m.as_str());
            if allowed {
                Err(warp::reject::not_found())
            } else {
                Err(warp::reject::custom(ApiError::MethodNotAllowed { allow }))
            }
        })
        .boxed()
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
    pub ip: Option<IpAddr>,
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
            .field("ip", &self.ip)
            .field("idempotency_key", &self.idempotency_key)
            .finish_non_exhaustive()
    }
}

impl Caller {
    /// Key for per-IP limits.
    pub fn ip_key(&self) -> String {
        self.ip
            .map(|i| i.to_string())
            .unwrap_or_else(|| "unknown".into())
    }
}

/// Extracts [`Caller`].
pub fn caller() -> BoxedFilter<(Caller,)> {
    warp::header::optional::<String>("authorization")
        .and(warp::addr::remote())
        .and(warp::header::optional::<String>("idempotency-key"))
        .and(warp::header::optional::<String>("content-type"))
        .map(
            |authorization, remote: Option<SocketAddr>, idempotency_key, content_type| Caller {
                authorization,
                ip: remote.map(|r| r.ip()),
                idempotency_key,
                content_type,
            },
        )
        .boxed()
}

/// Rejects unknown query parameters and duplicates, naming them in `param`.
pub fn check_params(pairs: &[(String, String)], known: &[&str]) -> Result<(), ApiError> {
    for (i, (k, _)) in pairs.iter().enumerate() {
        if !known.contains(&k.as_str()) {
            return Err(ApiError::Invalid {
                code: "parameter_unknown",
                message: format!("unknown query parameter `{k}`"),
                param: Some(k.clone()),
            });
        }
        if pairs[..i].iter().any(|(p, _)| p == k) {
            return Err(ApiError::invalid(
                k,
                format!("`{k}` is given more than once"),
            ));
        }
    }
    Ok(())
}

/// The value of query parameter `name`.
pub fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Positional SQL parameters built alongside a dynamic WHERE clause.
#[derive(Default)]
pub struct SqlParams(Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>);

impl SqlParams {
    /// Adds a value and returns its placeholder (`$n`).
    pub fn push<T: tokio_postgres::types::ToSql + Sync + Send + 'static>(
        &mut self,
        v: T,
    ) -> String {
        self.0.push(Box::new(v));
        format!("${}", self.0.len())
    }

    /// The placeholder the next value will get.
    pub fn next_index(&self) -> usize {
        self.0.len() + 1
    }

    /// References for `query`.
    pub fn refs(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        self.0
            .iter()
            .map(|b| b.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_debug_hides_the_authorization_header() {
        let c = Caller {
            authorization: Some("Bearer sk_live_secretsecret".into()),
            ip: None,
            idempotency_key: None,
            content_type: None,
        };
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("secret"), "{dbg}");
    }

    #[test]
    fn unknown_and_repeated_query_parameters_name_the_parameter() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = check_params(&q(&[("limit", "1"), ("x", "2")]), &["limit"]).unwrap_err();
        assert!(matches!(e, ApiError::Invalid { param: Some(ref p), .. } if p == "x"));
        let e = check_params(&q(&[("limit", "1"), ("limit", "2")]), &["limit"]).unwrap_err();
        assert!(matches!(e, ApiError::Invalid { param: Some(ref p), .. } if p == "limit"));
        assert!(check_params(&q(&[("limit", "1")]), &["limit"]).is_ok());
    }
}
