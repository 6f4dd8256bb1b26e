//! The node's JSON-RPC endpoint. A provider's URL usually carries its API key in the path or
//! the query (`https://mainnet.example/v3/KEY`, `…?apikey=KEY`), so [`RpcUrl`] shows itself as
//! `scheme://host:port/…` only, and its [`RpcUrl::provider`]'s errors never carry the URL:
//! an `RPC_URL` reaches neither a merchant's response nor a log line.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use alloy::providers::{DynProvider, Provider as _, ProviderBuilder};
use alloy::rpc::client::ClientBuilder;
use alloy::rpc::json_rpc::{RequestPacket, ResponsePacket};
use alloy::transports::http::{Http, reqwest};
use alloy::transports::{RpcError, TransportError, TransportErrorKind, TransportFut};

/// An RPC URL: connects to the whole URL, displays without its secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct RpcUrl {
    url: reqwest::Url,
    /// What is shown: `scheme://host[:port]`, plus `/…` when anything else was there.
    shown: Arc<str>,
}

impl RpcUrl {
    /// The whole URL, to connect with (never to show).
    pub fn expose(&self) -> &reqwest::Url {
        &self.url
    }

    /// `text` with every appearance of this URL, its path, query or credentials replaced,
    /// for an error that came from a client of this URL.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.replace(self.url.as_str(), &self.shown);
        let trimmed = self.url.as_str().trim_end_matches('/');
        if trimmed.len() > self.shown.len() {
            out = out.replace(trimmed, &self.shown);
        }
        let path = self.url.path();
        if path.len() > 1 {
            out = out.replace(path, "/…");
        }
        for secret in [
            reqwest::Url::query(&self.url),
            Some(self.url.username()),
            self.url.password(),
        ]
        .into_iter()
        .flatten()
        {
            if !secret.is_empty() {
                out = out.replace(secret, "…");
            }
        }
        out
    }

    /// A plain provider for this URL (no fillers: callers decide nonces, gas and fees)
    /// whose transport errors are [redacted](RpcUrl::redact).
    pub fn provider(&self) -> DynProvider {
        let http = Redacting {
            inner: Http::new(self.url.clone()),
            url: self.clone(),
        };
        let is_local = self
            .url
            .host_str()
            .is_some_and(|h| h == "localhost" || h == "127.0.0.1" || h == "::1" || h == "[::1]");
        let client = ClientBuilder::default().transport(http, is_local);
        ProviderBuilder::new()
            .disable_recommended_fillers()
            .connect_client(client)
            .erased()
    }
}

impl FromStr for RpcUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let url: reqwest::Url = s
            .parse()
            .map_err(|e| format!("not a URL ({e}); e.g. http://127.0.0.1:8545"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "the scheme must be http or https, not `{}`",
                url.scheme()
            ));
        }
        let Some(host) = url.host_str() else {
            return Err("the URL has no host".into());
        };
        let mut shown = format!("{}://{host}", url.scheme());
        if let Some(port) = url.port() {
            shown.push_str(&format!(":{port}"));
        }
        let hidden = url.path().len() > 1
            || reqwest::Url::query(&url).is_some()
            || !url.username().is_empty()
            || url.password().is_some();
        if hidden {
            shown.push_str("/…");
        }
        Ok(Self {
            url,
            shown: shown.into(),
        })
    }
}

impl fmt::Display for RpcUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for RpcUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RpcUrl({})", self.shown)
    }
}

/// The HTTP transport with its errors redacted (reqwest's name the URL they failed on).
#[derive(Clone)]
struct Redacting {
    inner: Http<reqwest::Client>,
    url: RpcUrl,
}

impl tower_service::Service<RequestPacket> for Redacting {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: RequestPacket) -> TransportFut<'static> {
        let fut = self.inner.call(req);
        let url = self.url.clone();
        Box::pin(async move {
            fut.await.map_err(|e| match e {
                RpcError::Transport(TransportErrorKind::Custom(inner)) => {
                    TransportErrorKind::custom_str(&url.redact(&inner.to_string()))
                }
                other => other,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_shows_scheme_host_and_port_only() {
        let u: RpcUrl = "https://user:pw@rpc.example:8443/v3/KEY123?apikey=Q9"
            .parse()
            .unwrap();
        assert_eq!(u.to_string(), "https://rpc.example:8443/…");
        assert_eq!(format!("{u:?}"), "RpcUrl(https://rpc.example:8443/…)");
        let plain: RpcUrl = "http://127.0.0.1:8545".parse().unwrap();
        assert_eq!(plain.to_string(), "http://127.0.0.1:8545");
        assert!("ws://x".parse::<RpcUrl>().is_err());
        assert!("nonsense".parse::<RpcUrl>().is_err());
    }

    #[test]
    fn redaction_removes_every_secret_part() {
        let u: RpcUrl = "https://user:pw@rpc.example/v3/KEY123?apikey=Q9"
            .parse()
            .unwrap();
        let text = "error sending request for url (https://user:pw@rpc.example/v3/KEY123?apikey=Q9): \
                    path /v3/KEY123, query apikey=Q9, user user";
        let out = u.redact(text);
        for secret in ["KEY123", "Q9", "pw@"] {
            assert!(!out.contains(secret), "{out}");
        }
        assert!(out.contains("https://rpc.example/…"), "{out}");
    }

    /// A provider's transport error (nothing listens on the port) names the host, never the
    /// key in the path or query.
    #[tokio::test]
    async fn a_providers_errors_carry_no_secret() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let u: RpcUrl = format!("http://127.0.0.1:{port}/v3/SECRETKEY?apikey=SECRET2")
            .parse()
            .unwrap();
        let e = u.provider().get_chain_id().await.unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!text.contains("SECRET"), "{text}");
    }
}
