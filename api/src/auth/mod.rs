//! Authentication: API keys for the merchant's backend, SIWE sessions for the dashboard.

pub mod api_key;
pub mod key_cache;
pub mod session;
pub mod siwe;

use sha3::{Digest, Sha3_256};

/// SHA3-256, the at-rest form of keys and session ids.
pub fn sha3(data: &[u8]) -> [u8; 32] {
    Sha3_256::digest(data).into()
}

/// Constant-time equality (keys, CSRF tokens).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// `n` random bytes as lowercase hex.
pub fn random_token(n: usize) -> String {
    crate::domain::random_hex(n)
}
