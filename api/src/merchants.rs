//! Merchants: one per wallet, created on first sign-in (or by `api admin create-key`).

use alloy::primitives::Address;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use crate::domain::random_hex;
use crate::error::{ApiError, Result};

/// The authenticated merchant every merchant-scoped query takes.
#[derive(Debug, Clone)]
pub struct Merchant {
    pub id: i64,
    pub public_id: String,
    pub wallet: Address,
    pub code: String,
}

/// Columns [`Merchant::from_row`] reads, from `merchants m`.
pub const COLUMNS: &str = "m.id AS merchant_id, m.public_id AS merchant_public_id, \
    m.wallet AS merchant_wallet, m.code AS merchant_code";

impl Merchant {
    /// From a row selected with [`COLUMNS`].
    pub fn from_row(row: &Row) -> Merchant {
        let wallet: Vec<u8> = row.get("merchant_wallet");
        Merchant {
            id: row.get("merchant_id"),
            public_id: row.get("merchant_public_id"),
            wallet: Address::from_slice(&wallet),
            code: row.get("merchant_code"),
        }
    }

    /// The wallet as stored (20 bytes).
    pub fn wallet_bytes(&self) -> Vec<u8> {
        self.wallet.as_slice().to_vec()
    }

    /// The public JSON form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.public_id,
            "object": "merchant",
            "wallet": self.wallet.to_checksum(None),
            "code": self.code,
        })
    }
}

/// 8 characters without look-alikes (no 0/o, 1/l/i): short enough for a URL, 31^8 ≈ 8.5e11.
fn new_code() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    (0..8)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The merchant of `wallet`, created if it does not exist yet (safe under concurrency).
pub async fn find_or_create(
    client: &impl tokio_postgres::GenericClient,
    wallet: Address,
) -> Result<Merchant> {
    let wallet_bytes = wallet.as_slice().to_vec();
    for _ in 0..5 {
        let inserted = client
            .query_opt(
                &format!(
                    "INSERT INTO merchants AS m (public_id, wallet, code) VALUES ($1, $2, $3) \
                     ON CONFLICT (wallet) DO NOTHING RETURNING {COLUMNS}"
                ),
                &[
                    &format!("mer_{}", random_hex(12)),
                    &wallet_bytes,
                    &new_code(),
                ],
            )
            .await;
        match inserted {
            Ok(Some(row)) => return Ok(Merchant::from_row(&row)),
            Ok(None) => {
                let row = client
                    .query_one(
                        &format!("SELECT {COLUMNS} FROM merchants m WHERE m.wallet = $1"),
                        &[&wallet_bytes],
                    )
                    .await?;
                return Ok(Merchant::from_row(&row));
            }
            // A code collision: draw another.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Internal(
        "could not allocate a merchant code".into(),
    ))
}
