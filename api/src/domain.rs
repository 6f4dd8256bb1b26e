//! Newtypes parsed once at the boundary: the rest of the code cannot hold an invalid one.

use serde_json::Value;

use crate::http::error::ApiError;

pub use chainsub_core::{Amount, MAX_AMOUNT_BASE_UNITS, Slug, format_units};

/// Text a merchant supplies (plan names, customer ids): trimmed length bounds and no control
/// characters.
pub fn text(param: &str, v: Option<&Value>, max: usize) -> Result<String, ApiError> {
    let v = v.ok_or_else(|| ApiError::missing(param))?;
    let s = v
        .as_str()
        .ok_or_else(|| ApiError::invalid(param, format!("`{param}` must be a string")))?;
    if s.trim().is_empty() {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must not be empty"),
        ));
    }
    if s.chars().count() > max {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must be at most {max} characters"),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must not contain control characters"),
        ));
    }
    Ok(s.to_string())
}

/// Random lowercase hex of `bytes` random bytes (for public ids).
pub fn random_hex(bytes: usize) -> String {
    let v: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    hex::encode(v)
}
