//! Server-rendered pages: the customer checkout page, the customer self-service page
//! (`/account`), the merchant dashboard (`/dashboard`, `/dashboard/developers`), plus the static JS/CSS
//! they load from `/assets/` (no CDN). The routes live in `routes/pages.rs`; this module
//! holds what they render and compute.

pub mod account;
pub mod account_view;
pub mod assets;
pub mod checkout;
pub mod checkout_tx;
pub mod checkout_view;
pub mod dashboard;
pub mod html;
pub mod network;
pub mod overview;
pub mod plans;
pub mod subscriptions;

/// Page settings (flattened into [`crate::Config`]).
#[derive(Clone, Debug, clap::Args)]
pub struct PagesConfig {
    /// Block explorer link for a transaction on the checkout page; `{hash}` is replaced by the
    /// transaction hash (e.g. `https://etherscan.io/tx/{hash}`). Unset: no link is shown.
    #[arg(long, env = "EXPLORER_TX_URL", value_parser = parse_explorer_template)]
    pub explorer_tx_url: Option<String>,
    /// How many billing periods the checkout page's USDC `approve` covers, so renewals can be
    /// pulled without asking the customer again every month.
    #[arg(long, env = "CHECKOUT_ALLOWANCE_PERIODS", default_value_t = 12,
          value_parser = clap::value_parser!(u32).range(1..=120))]
    pub checkout_allowance_periods: u32,
    /// The network's name on the pages (`Base`, …); unset: the name of a well-known chain id,
    /// else `Chain <id>`.
    #[arg(long, env = "CHAIN_NAME")]
    pub chain_name: Option<String>,
}

impl Default for PagesConfig {
    fn default() -> Self {
        Self {
            explorer_tx_url: None,
            checkout_allowance_periods: 12,
            chain_name: None,
        }
    }
}

/// An explorer template must be an http(s) URL containing `{hash}`: anything else would let
/// configuration put a `javascript:` link on the checkout page.
pub fn parse_explorer_template(s: &str) -> Result<String, String> {
    let probe = s.replace("{hash}", "0x00");
    let url = url::Url::parse(&probe).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http(s) URL".into());
    }
    if !s.contains("{hash}") {
        return Err("must contain `{hash}`".into());
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explorer_template_needs_http_and_hash_placeholder() {
        assert!(parse_explorer_template("https://etherscan.io/tx/{hash}").is_ok());
        assert!(parse_explorer_template("https://etherscan.io/tx/").is_err());
        assert!(parse_explorer_template("javascript:alert('{hash}')").is_err());
        assert!(parse_explorer_template("{hash}").is_err());
    }
}
