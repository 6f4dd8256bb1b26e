//! Sign-In with Ethereum (EIP-4361): message parsing, checks against our config, and EIP-191
//! signature recovery with alloy. Nonces are single use (consumed in the statement that
//! checks them).

use std::str::FromStr;

use alloy::primitives::{Address, Signature};
use chrono::{DateTime, Duration, Utc};

use crate::config::Config;
use crate::http::codes::Code;
use crate::http::error::ApiError;

const HEADER_SUFFIX: &str = " wants you to sign in with your Ethereum account:";

/// A parsed EIP-4361 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiweMessage {
    pub domain: String,
    pub address: Address,
    pub statement: Option<String>,
    pub uri: String,
    pub version: String,
    pub chain_id: u64,
    pub nonce: String,
    pub issued_at: DateTime<Utc>,
    pub expiration_time: Option<DateTime<Utc>>,
    pub not_before: Option<DateTime<Utc>>,
    pub request_id: Option<String>,
    pub resources: Vec<String>,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::Invalid {
        code: Code::SiweMessageInvalid,
        message: msg.into(),
        param: Some("message".into()),
    }
}

fn rejected(msg: impl Into<String>) -> ApiError {
    ApiError::Unauthorized {
        code: Code::SiweRejected,
        message: msg.into(),
    }
}

fn parse_time(field: &str, v: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| bad(format!("`{field}` is not an RFC 3339 time")))
}

impl SiweMessage {
    /// Parses the text a wallet signed.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut lines = text.split('\n');
        let header = lines.next().unwrap_or_default();
        let domain = header
            .strip_suffix(HEADER_SUFFIX)
            .ok_or_else(|| bad("not an EIP-4361 message"))?;
        let domain = domain
            .split_once("://")
            .map_or(domain, |(_, d)| d)
            .to_string();
        let address = lines.next().unwrap_or_default();
        if address.len() != 42 {
            return Err(bad("the second line must be the 0x address"));
        }
        let address = Address::parse_checksummed(address, None)
            .or_else(|_| Address::from_str(address))
            .map_err(|_| bad("the second line must be the 0x address"))?;
        let rest: Vec<&str> = lines.collect();
        let uri_at = rest
            .iter()
            .position(|l| l.starts_with("URI: "))
            .ok_or_else(|| bad("missing `URI`"))?;
        let statement: Vec<&str> = rest[..uri_at]
            .iter()
            .copied()
            .filter(|l| !l.is_empty())
            .collect();
        let statement = (!statement.is_empty()).then(|| statement.join("\n"));
        let mut m = Self {
            domain,
            address,
            statement,
            uri: String::new(),
            version: String::new(),
            chain_id: 0,
            nonce: String::new(),
            issued_at: DateTime::<Utc>::MIN_UTC,
            expiration_time: None,
            not_before: None,
            request_id: None,
            resources: Vec::new(),
        };
        let (mut has_chain, mut has_issued) = (false, false);
        let mut in_resources = false;
        for line in &rest[uri_at..] {
            if in_resources && let Some(r) = line.strip_prefix("- ") {
                m.resources.push(r.to_string());
                continue;
            }
            let Some((k, v)) = line.split_once(": ") else {
                if *line == "Resources:" {
                    in_resources = true;
                    continue;
                }
                if line.is_empty() {
                    continue;
                }
                return Err(bad(format!("unexpected line `{line}`")));
            };
            match k {
                "URI" => m.uri = v.to_string(),
                "Version" => m.version = v.to_string(),
                "Chain ID" => {
                    m.chain_id = v.parse().map_err(|_| bad("`Chain ID` is not a number"))?;
                    has_chain = true;
                }
                "Nonce" => m.nonce = v.to_string(),
                "Issued At" => {
                    m.issued_at = parse_time("Issued At", v)?;
                    has_issued = true;
                }
                "Expiration Time" => m.expiration_time = Some(parse_time("Expiration Time", v)?),
                "Not Before" => m.not_before = Some(parse_time("Not Before", v)?),
                "Request ID" => m.request_id = Some(v.to_string()),
                _ => return Err(bad(format!("unknown field `{k}`"))),
            }
        }
        if m.version != "1" {
            return Err(bad("`Version` must be 1"));
        }
        if !has_chain || !has_issued || m.nonce.is_empty() || m.uri.is_empty() {
            return Err(bad(
                "`URI`, `Chain ID`, `Nonce` and `Issued At` are required",
            ));
        }
        if m.nonce.len() < 8 || !m.nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(bad("`Nonce` must be at least 8 alphanumeric characters"));
        }
        Ok(m)
    }

    /// Checks everything but the nonce and the signature against our deployment, at `now`.
    pub fn check(&self, cfg: &Config, now: DateTime<Utc>) -> Result<(), ApiError> {
        if self.domain != cfg.siwe_domain() {
            return Err(rejected(format!(
                "the message is for domain `{}`, this service is `{}`",
                self.domain,
                cfg.siwe_domain()
            )));
        }
        let uri = url::Url::parse(&self.uri).map_err(|_| bad("`URI` is not a URI"))?;
        if uri.origin() != cfg.base_url.origin() {
            return Err(rejected("the message `URI` is not this service's origin"));
        }
        if self.chain_id != cfg.chain_id.get() {
            return Err(rejected(format!(
                "the message is for chain {}, this service runs on chain {}",
                self.chain_id, cfg.chain_id
            )));
        }
        let skew = Duration::seconds(60);
        let max_age = Duration::seconds(cfg.siwe_nonce_ttl_secs as i64);
        if self.issued_at > now + skew {
            return Err(rejected("`Issued At` is in the future"));
        }
        if self.issued_at < now - max_age {
            return Err(rejected("`Issued At` is too old; request a new nonce"));
        }
        if self.expiration_time.is_some_and(|t| t <= now) {
            return Err(rejected("the message has expired"));
        }
        if self.not_before.is_some_and(|t| t > now + skew) {
            return Err(rejected("the message is not valid yet (`Not Before`)"));
        }
        Ok(())
    }

    /// The EIP-4361 text of this message (what a wallet signs).
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{}{HEADER_SUFFIX}\n{}\n\n",
            self.domain,
            self.address.to_checksum(None)
        );
        if let Some(st) = &self.statement {
            s.push_str(st);
            s.push('\n');
        }
        s.push('\n');
        s.push_str(&format!(
            "URI: {}\nVersion: {}\nChain ID: {}\nNonce: {}\nIssued At: {}",
            self.uri,
            self.version,
            self.chain_id,
            self.nonce,
            self.issued_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
        if let Some(t) = self.expiration_time {
            s.push_str(&format!(
                "\nExpiration Time: {}",
                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
        if let Some(t) = self.not_before {
            s.push_str(&format!(
                "\nNot Before: {}",
                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
        if let Some(r) = &self.request_id {
            s.push_str(&format!("\nRequest ID: {r}"));
        }
        if !self.resources.is_empty() {
            s.push_str("\nResources:");
            for r in &self.resources {
                s.push_str(&format!("\n- {r}"));
            }
        }
        s
    }
}

/// Recovers the EIP-191 (`personal_sign`) signer of `text` and requires it to be `address`.
pub fn verify_signature(text: &str, signature_hex: &str, address: Address) -> Result<(), ApiError> {
    let sig = Signature::from_str(signature_hex.trim()).map_err(|_| ApiError::Invalid {
        code: Code::SignatureInvalid,
        message: "`signature` must be a 65-byte hex signature".into(),
        param: Some("signature".into()),
    })?;
    let signer = sig
        .recover_address_from_msg(text.as_bytes())
        .map_err(|_| rejected("the signature does not recover to an address"))?;
    if signer != address {
        return Err(rejected(
            "the signature was not made by the message's address",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SiweMessage {
        SiweMessage {
            domain: "127.0.0.1:8080".into(),
            address: Address::repeat_byte(0x11),
            statement: Some("Sign in to Chainsub".into()),
            uri: "http://127.0.0.1:8080".into(),
            version: "1".into(),
            chain_id: 31337,
            nonce: "abcdefgh12".into(),
            issued_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            expiration_time: Some(DateTime::from_timestamp(1_700_000_600, 0).unwrap()),
            not_before: None,
            request_id: None,
            resources: vec!["https://example.com/a".into()],
        }
    }

    #[test]
    fn message_text_round_trips() {
        let m = sample();
        assert_eq!(SiweMessage::parse(&m.to_text()).unwrap(), m);
        let mut no_statement = sample();
        no_statement.statement = None;
        assert_eq!(
            SiweMessage::parse(&no_statement.to_text()).unwrap(),
            no_statement
        );
    }

    #[test]
    fn malformed_messages_are_rejected() {
        let text = sample().to_text();
        for bad in [
            text.replace("Version: 1", "Version: 2"),
            text.replace("Nonce: abcdefgh12", "Nonce: abc"),
            text.replace(HEADER_SUFFIX, " wants you to log in"),
            text.replace("Issued At: ", "Issued: "),
        ] {
            assert!(SiweMessage::parse(&bad).is_err(), "{bad}");
        }
    }
}
