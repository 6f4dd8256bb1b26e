//! Newtypes parsed once at the boundary: the rest of the code cannot hold an invalid one.

pub use chainsub_core::{Amount, MAX_AMOUNT_BASE_UNITS, Slug, format_units};

/// Random lowercase hex of `bytes` random bytes (for public ids).
pub fn random_hex(bytes: usize) -> String {
    let v: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    hex::encode(v)
}
