//! Signed checkout URLs and on-chain customer references.
//!
//! URL: `{BASE_URL}/checkout/{merchantCode}/{planSlug}?customer=<id>&sig=<hex>` where `sig` =
//! HMAC-SHA256(CHECKOUT_SIGNING_SECRET, "checkout:v1\n{code}\n{slug}\n{customer}") so neither
//! the plan nor the customer id can be swapped. `customerRef` (the bytes32 passed to
//! `subscribe`) = HMAC-SHA256(secret, "customer-ref:v1\n{merchant public id}\n{customer}"), or
//! zero bytes32 without a customer: it ties the subscription to the merchant's customer
//! without putting the raw id on chain.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &str, msg: &str) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    m.update(msg.as_bytes());
    m.finalize().into_bytes().into()
}

fn signed_text(code: &str, slug: &str, customer: Option<&str>) -> String {
    format!("checkout:v1\n{code}\n{slug}\n{}", customer.unwrap_or(""))
}

/// The `sig` parameter for a checkout URL.
pub fn sign(secret: &str, code: &str, slug: &str, customer: Option<&str>) -> String {
    hex::encode(mac(secret, &signed_text(code, slug, customer)))
}

/// Verifies a checkout URL's `sig` (constant time). For the checkout page.
pub fn verify(secret: &str, code: &str, slug: &str, customer: Option<&str>, sig: &str) -> bool {
    let Ok(given) = hex::decode(sig) else {
        return false;
    };
    let mut m = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    m.update(signed_text(code, slug, customer).as_bytes());
    m.verify_slice(&given).is_ok()
}

/// The full checkout URL.
pub fn url(base: &str, secret: &str, code: &str, slug: &str, customer: Option<&str>) -> String {
    let sig = sign(secret, code, slug, customer);
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    if let Some(c) = customer {
        q.append_pair("customer", c);
    }
    q.append_pair("sig", &sig);
    format!("{base}/checkout/{code}/{slug}?{}", q.finish())
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

    #[test]
    fn signature_binds_plan_and_customer() {
        let sig = sign("s", "abc", "pro", Some("u1"));
        assert!(verify("s", "abc", "pro", Some("u1"), &sig));
        assert!(!verify("s", "abc", "basic", Some("u1"), &sig));
        assert!(!verify("s", "abc", "pro", Some("u2"), &sig));
        assert!(!verify("s", "abc", "pro", None, &sig));
        assert!(!verify("other", "abc", "pro", Some("u1"), &sig));
    }

    #[test]
    fn url_encodes_customer_and_carries_sig() {
        let u = url("https://x.io", "s", "abc", "pro", Some("a b&c"));
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
