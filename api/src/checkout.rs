//! Signed checkout URLs and on-chain customer references.
//!
//! URL: `{BASE_URL}/checkout/{merchantCode}/{planSlug}?customer=<id>&expires=<unix>&sig=<hex>`
//! (`customer` and `expires` optional) where `sig` = HMAC-SHA256(CHECKOUT_SIGNING_SECRET, the
//! [signed text](signed_text) of the code, the slug and every other parameter), so neither the
//! plan, the customer id nor the expiry can be changed or added. `customerRef` (the bytes32 passed to
//! `subscribe`) = HMAC-SHA256(secret, "customer-ref:v1\n{merchant public id}\n{customer}"), or
//! zero bytes32 without a customer: it ties the subscription to the merchant's customer
//! without putting the raw id on chain.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub(crate) fn mac(secret: &str, msg: &str) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    m.update(msg.as_bytes());
    m.finalize().into_bytes().into()
}

/// What a link says besides its merchant and plan: every query parameter but `sig`, all
/// covered by the signature.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkTerms<'a> {
    /// The merchant's customer id (`customer=`); never empty.
    pub customer: Option<&'a str>,
    /// Unix seconds after which the link no longer opens (`expires=`).
    pub expires: Option<i64>,
}

/// The signed text. Links without an expiry keep the v1 text (links already handed out
/// keep working; an empty `customer=` is refused before any signature is checked, so the
/// v1 text's "no customer" and "empty customer" cannot be told apart by anyone); links with
/// one are v2, which names each parameter.
fn signed_text(code: &str, slug: &str, terms: LinkTerms<'_>) -> String {
    match terms.expires {
        None => format!(
            "checkout:v1\n{code}\n{slug}\n{}",
            terms.customer.unwrap_or("")
        ),
        Some(expires) => format!(
            "checkout:v2\n{code}\n{slug}\ncustomer={}{}\nexpires={expires}",
            u8::from(terms.customer.is_some()),
            terms.customer.unwrap_or(""),
        ),
    }
}

/// The `sig` parameter for a checkout URL.
pub fn sign(secret: &str, code: &str, slug: &str, terms: LinkTerms<'_>) -> String {
    hex::encode(mac(secret, &signed_text(code, slug, terms)))
}

/// Verifies a checkout URL's `sig` (constant time). For the checkout page.
pub fn verify(secret: &str, code: &str, slug: &str, terms: LinkTerms<'_>, sig: &str) -> bool {
    mac_matches(secret, &signed_text(code, slug, terms), sig)
}

/// Whether `sig_hex` is the HMAC of `msg` under `secret` (constant time): the check of every
/// link the service signs.
pub(crate) fn mac_matches(secret: &str, msg: &str, sig_hex: &str) -> bool {
    let Ok(given) = hex::decode(sig_hex) else {
        return false;
    };
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    m.update(msg.as_bytes());
    m.verify_slice(&given).is_ok()
}

/// The query string of a link with these terms: `customer`, `expires`, then `sig`.
pub fn query(secret: &str, code: &str, slug: &str, terms: LinkTerms<'_>) -> String {
    let sig = sign(secret, code, slug, terms);
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    if let Some(c) = terms.customer {
        q.append_pair("customer", c);
    }
    if let Some(e) = terms.expires {
        q.append_pair("expires", &e.to_string());
    }
    q.append_pair("sig", &sig);
    q.finish()
}

/// A signed checkout URL.
pub fn url(base: &str, secret: &str, code: &str, slug: &str, terms: LinkTerms<'_>) -> String {
    format!(
        "{base}/checkout/{code}/{slug}?{}",
        query(secret, code, slug, terms)
    )
}

/// The bytes32 `customerRef` for `subscribe` by `wallet` (zero without a customer): bound to
/// the merchant, the customer and the subscribing wallet, so a reference copied from a
/// public log into another wallet's subscription resolves to no customer.
pub fn wallet_customer_ref(
    secret: &str,
    merchant_public_id: &str,
    customer: Option<&str>,
    wallet: alloy::primitives::Address,
) -> [u8; 32] {
    match customer {
        None => [0u8; 32],
        Some(c) => mac(
            secret,
            &format!(
                "customer-ref:v2\n{merchant_public_id}\n{c}\n{}",
                wallet.to_checksum(None)
            ),
        ),
    }
}

/// The v1, wallet-independent reference a checkout row keeps (`checkouts.customer_ref`);
/// nothing resolves customers by it any more.
pub fn customer_ref(secret: &str, merchant_public_id: &str, customer: Option<&str>) -> [u8; 32] {
    match customer {
        None => [0u8; 32],
        Some(c) => mac(
            secret,
            &format!("customer-ref:v1\n{merchant_public_id}\n{c}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(customer: Option<&str>, expires: Option<i64>) -> LinkTerms<'_> {
        LinkTerms { customer, expires }
    }

    #[test]
    fn signature_binds_plan_customer_and_expiry() {
        for expires in [None, Some(1_900_000_000)] {
            let sig = sign("s", "abc", "pro", terms(Some("u1"), expires));
            assert!(verify("s", "abc", "pro", terms(Some("u1"), expires), &sig));
            assert!(!verify(
                "s",
                "abc",
                "basic",
                terms(Some("u1"), expires),
                &sig
            ));
            assert!(!verify("s", "abc", "pro", terms(Some("u2"), expires), &sig));
            assert!(!verify("s", "abc", "pro", terms(None, expires), &sig));
            assert!(!verify(
                "other",
                "abc",
                "pro",
                terms(Some("u1"), expires),
                &sig
            ));
        }
        // An expiry can be neither added, changed nor dropped.
        let sig = sign("s", "abc", "pro", terms(None, Some(1_900_000_000)));
        assert!(!verify(
            "s",
            "abc",
            "pro",
            terms(None, Some(1_900_000_001)),
            &sig
        ));
        assert!(!verify("s", "abc", "pro", terms(None, None), &sig));
        let open = sign("s", "abc", "pro", terms(None, None));
        assert!(!verify(
            "s",
            "abc",
            "pro",
            terms(None, Some(1_900_000_000)),
            &open
        ));
        // v2 names the customer: no customer and an empty one differ.
        assert!(!verify(
            "s",
            "abc",
            "pro",
            terms(Some(""), Some(1_900_000_000)),
            &sig
        ));
    }

    #[test]
    fn url_encodes_customer_and_carries_sig() {
        let u = url(
            "https://x.io",
            "s",
            "abc",
            "pro",
            terms(Some("a b&c"), None),
        );
        assert!(
            u.starts_with("https://x.io/checkout/abc/pro?customer=a+b%26c&sig="),
            "{u}"
        );
        assert_eq!(customer_ref("s", "mer_1", None), [0u8; 32]);
        let (a, b) = (
            alloy::primitives::Address::repeat_byte(1),
            alloy::primitives::Address::repeat_byte(2),
        );
        assert_eq!(wallet_customer_ref("s", "mer_1", None, a), [0u8; 32]);
        assert_ne!(
            wallet_customer_ref("s", "mer_1", Some("u"), a),
            wallet_customer_ref("s", "mer_1", Some("u"), b),
            "bound to the wallet"
        );
        assert_ne!(
            wallet_customer_ref("s", "mer_1", Some("u"), a),
            wallet_customer_ref("s", "mer_2", Some("u"), a)
        );
        assert_ne!(
            customer_ref("s", "mer_1", Some("u")),
            customer_ref("s", "mer_2", Some("u"))
        );
    }
}
