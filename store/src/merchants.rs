//! Merchants, and the scope every merchant-data query takes.

use alloy::primitives::Address;
use chainsub_core::MerchantId;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use crate::{Error, Result};

/// An authenticated merchant: the proof, in the type system, that the caller acts for it.
///
/// Its fields are private and only this module builds one, from an API key, a dashboard
/// session, or a wallet that just signed in (SIWE). Every store function that reads or writes
/// a merchant's rows takes one, so a query for another merchant's rows cannot be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerchantScope {
    id: i64,
    public_id: MerchantId,
    wallet: Address,
    code: String,
}

impl MerchantScope {
    /// The row id (`merchants.id`).
    pub fn id(&self) -> i64 {
        self.id
    }
    /// The public id (`mer_…`).
    pub fn public_id(&self) -> &MerchantId {
        &self.public_id
    }
    /// The merchant's wallet.
    pub fn wallet(&self) -> Address {
        self.wallet
    }
    /// The wallet as stored (20 bytes).
    pub fn wallet_bytes(&self) -> &[u8] {
        self.wallet.as_slice()
    }
    /// The short code in checkout URLs.
    pub fn code(&self) -> &str {
        &self.code
    }
}

/// Columns [`from_row`] reads, from `merchants m`.
const COLUMNS: &str = "m.id AS merchant_id, m.public_id AS merchant_public_id, \
    m.wallet AS merchant_wallet, m.code AS merchant_code";

fn from_row(row: &Row) -> Result<MerchantScope> {
    let wallet: Vec<u8> = row.get("merchant_wallet");
    let public_id: String = row.get("merchant_public_id");
    Ok(MerchantScope {
        id: row.get("merchant_id"),
        public_id: MerchantId::parse(&public_id)
            .ok_or_else(|| Error::Inconsistent(format!("merchant id {public_id}")))?,
        wallet: Address::try_from(wallet.as_slice())
            .map_err(|_| Error::Inconsistent("merchant wallet is not 20 bytes".into()))?,
        code: row.get("merchant_code"),
    })
}

/// What an API-key lookup found besides the merchant.
#[derive(Debug, Clone)]
pub struct ApiKeyMatch {
    pub key_id: i64,
    /// The stored hash (compared again in constant time by the caller).
    pub key_hash: Vec<u8>,
    /// `last_used_at` is older than a minute (or unset): worth a write.
    pub stale: bool,
}

/// The NOTIFY channel migration 0027's trigger signals when one of a merchant's keys is
/// revoked, rotated or deleted; the payload is the merchant's row id ([`MerchantScope::id`]).
pub const KEYS_CHANNEL: &str = "chainsub_api_keys";

/// Whether migration 0027's triggers are in place and fire in ordinary sessions (a process
/// that caches key lookups relies on them to hear revocations).
pub async fn key_changes_signalled(client: &impl tokio_postgres::GenericClient) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT count(*) = 2 FROM pg_trigger \
             WHERE tgrelid = 'api_keys'::regclass AND NOT tgisinternal AND tgenabled IN ('O', 'A') \
               AND tgname IN ('api_key_notify', 'api_key_truncate_notify')",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

const BY_API_KEY: &str = "SELECT k.id AS key_id, k.key_hash, \
    k.last_used_at < now() - interval '60 seconds' OR k.last_used_at IS NULL AS stale, \
    m.id AS merchant_id, m.public_id AS merchant_public_id, m.wallet AS merchant_wallet, \
    m.code AS merchant_code \
    FROM api_keys k JOIN merchants m ON m.id = k.merchant_id \
    WHERE k.key_hash = $1 AND k.revoked_at IS NULL";

/// The hashes of every live API key (the API keeps them in memory, so a caller refused for
/// guessing keys still gets a valid key looked up).
pub async fn live_key_hashes(client: &impl GenericClient) -> Result<Vec<Vec<u8>>> {
    let rows = client
        .query(
            "SELECT key_hash FROM api_keys WHERE revoked_at IS NULL",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The merchant whose live API key hashes to `key_hash`: authentication by key.
pub async fn by_api_key_hash(
    client: &impl GenericClient,
    key_hash: &[u8],
) -> Result<Option<(MerchantScope, ApiKeyMatch)>> {
    // Prepared once per connection: this runs on every API-key request.
    let stmt = client.prepare_cached(BY_API_KEY).await?;
    let Some(row) = client.query_opt(&stmt, &[&key_hash]).await? else {
        return Ok(None);
    };
    let found = ApiKeyMatch {
        key_id: row.get("key_id"),
        key_hash: row.get("key_hash"),
        stale: row.get::<_, Option<bool>>("stale").unwrap_or(true),
    };
    Ok(Some((from_row(&row)?, found)))
}

/// Records that `scope`'s key `key_id` was used now (minute resolution, by the caller).
pub async fn touch_api_key(
    client: &impl tokio_postgres::GenericClient,
    scope: &MerchantScope,
    key_id: i64,
) -> Result<()> {
    client
        .execute(
            "UPDATE api_keys SET last_used_at = now() WHERE id = $1 AND merchant_id = $2",
            &[&key_id, &scope.id],
        )
        .await?;
    Ok(())
}

/// What a session lookup found besides the merchant.
#[derive(Debug, Clone)]
pub struct SessionMatch {
    pub session_id: i64,
    pub csrf_token: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

/// The merchant whose checkout code is `code` (public: it is in every link of theirs).
pub async fn by_code(
    client: &impl tokio_postgres::GenericClient,
    code: &str,
) -> Result<Option<MerchantScope>> {
    let sql = format!("SELECT {COLUMNS} FROM merchants m WHERE m.code = $1");
    client
        .query_opt(&sql, &[&code])
        .await?
        .as_ref()
        .map(from_row)
        .transpose()
}

/// The merchant of the live dashboard session whose cookie hashes to `session_hash`.
pub async fn by_session_hash(
    client: &impl GenericClient,
    session_hash: &[u8],
) -> Result<Option<(MerchantScope, SessionMatch)>> {
    // Every dashboard request asks it: prepared once per connection.
    let stmt = client
        .prepare_cached(
            "SELECT s.id AS session_id, s.csrf_token, s.expires_at, \
             m.id AS merchant_id, m.public_id AS merchant_public_id, \
             m.wallet AS merchant_wallet, m.code AS merchant_code \
             FROM dashboard_sessions s JOIN merchants m ON m.id = s.merchant_id \
             WHERE s.session_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > now()",
        )
        .await?;
    let row = client.query_opt(&stmt, &[&session_hash]).await?;
    let Some(row) = row else { return Ok(None) };
    let found = SessionMatch {
        session_id: row.get("session_id"),
        csrf_token: row.get("csrf_token"),
        expires_at: row.get("expires_at"),
    };
    Ok(Some((from_row(&row)?, found)))
}

/// 8 characters without look-alikes (no 0/o, 1/l/i): short enough for a URL, 31^8 ≈ 8.5e11.
fn new_code() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    (0..8)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Opens a dashboard session of `scope` (the cookie hashes to `session_hash`) for `ttl_secs`;
/// returns its id and expiry.
pub async fn create_session(
    client: &impl tokio_postgres::GenericClient,
    scope: &MerchantScope,
    session_hash: &[u8],
    csrf_token: &str,
    ttl_secs: u64,
) -> Result<(i64, chrono::DateTime<chrono::Utc>)> {
    let row = client
        .query_one(
            "INSERT INTO dashboard_sessions (session_hash, merchant_id, csrf_token, expires_at) \
             VALUES ($1, $2, $3, now() + make_interval(secs => $4)) RETURNING id, expires_at",
            &[&session_hash, &scope.id(), &csrf_token, &(ttl_secs as f64)],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Ends one of `scope`'s dashboard sessions (logout).
pub async fn revoke_session(
    client: &impl tokio_postgres::GenericClient,
    scope: &MerchantScope,
    session_id: i64,
) -> Result<()> {
    client
        .execute(
            "UPDATE dashboard_sessions SET revoked_at = now() WHERE id = $1 AND merchant_id = $2",
            &[&session_id, &scope.id()],
        )
        .await?;
    Ok(())
}

/// The merchant's live API key as the dashboard shows it (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStatus {
    pub prefix: String,
    pub last4: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_used_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The name the merchant shows its customers, if it set one (migration 0033). Not part of
/// [`MerchantScope`]: the API-key cache holds scopes, and a name changes without a key change.
pub async fn display_name(
    client: &impl GenericClient,
    scope: &MerchantScope,
) -> Result<Option<String>> {
    let row = client
        .query_one(
            "SELECT display_name FROM merchants WHERE id = $1",
            &[&scope.id()],
        )
        .await?;
    Ok(row.get(0))
}

/// Sets (or, with `None`, clears) the name the merchant shows its customers.
pub async fn set_display_name(
    client: &impl GenericClient,
    scope: &MerchantScope,
    name: Option<&str>,
) -> Result<()> {
    client
        .execute(
            "UPDATE merchants SET display_name = $2 WHERE id = $1",
            &[&scope.id(), &name],
        )
        .await?;
    Ok(())
}

/// The merchant's live key, if any.
pub async fn api_key_status(
    client: &impl tokio_postgres::GenericClient,
    scope: &MerchantScope,
) -> Result<Option<KeyStatus>> {
    let row = client
        .query_opt(
            "SELECT prefix, last4, created_at, last_used_at FROM api_keys \
             WHERE merchant_id = $1 AND revoked_at IS NULL",
            &[&scope.id()],
        )
        .await?;
    Ok(row.map(|r| KeyStatus {
        prefix: r.get(0),
        last4: r.get(1),
        created_at: r.get(2),
        last_used_at: r.get(3),
    }))
}

/// Makes the key with `key_hash` (shown as `prefix…last4`) the merchant's only live key:
/// the old one is revoked in the same transaction, so it fails from the moment the new one
/// exists. Returns whether there was an old one.
pub async fn replace_api_key(
    client: &mut tokio_postgres::Client,
    scope: &MerchantScope,
    key_hash: &[u8],
    prefix: &str,
    last4: &str,
) -> Result<bool> {
    let tx = client.transaction().await?;
    // Serializes concurrent rotations of one merchant (the one-live-key index would
    // otherwise fail the loser).
    tx.execute(
        "SELECT 1 FROM merchants WHERE id = $1 FOR UPDATE",
        &[&scope.id()],
    )
    .await?;
    let revoked = tx
        .execute(
            "UPDATE api_keys SET revoked_at = now() WHERE merchant_id = $1 AND revoked_at IS NULL",
            &[&scope.id()],
        )
        .await?;
    tx.execute(
        "INSERT INTO api_keys (merchant_id, key_hash, prefix, last4) VALUES ($1, $2, $3, $4)",
        &[&scope.id(), &key_hash, &prefix, &last4],
    )
    .await?;
    tx.commit().await?;
    Ok(revoked > 0)
}

/// Revokes the merchant's live key, if any. Returns whether one was revoked.
pub async fn revoke_api_key(
    client: &impl tokio_postgres::GenericClient,
    scope: &MerchantScope,
) -> Result<bool> {
    let n = client
        .execute(
            "UPDATE api_keys SET revoked_at = now() WHERE merchant_id = $1 AND revoked_at IS NULL",
            &[&scope.id()],
        )
        .await?;
    Ok(n > 0)
}

/// The merchant of `wallet`, created if it does not exist yet (safe under concurrency).
///
/// Only for a wallet that has just proved itself (a verified SIWE signature) or for the
/// operator's `api admin create-key`: holding the result means acting for that merchant.
pub async fn sign_in(
    client: &impl tokio_postgres::GenericClient,
    wallet: Address,
) -> Result<MerchantScope> {
    let wallet_bytes = wallet.as_slice();
    for _ in 0..5 {
        let inserted = client
            .query_opt(
                &format!(
                    "INSERT INTO merchants AS m (public_id, wallet, code) VALUES ($1, $2, $3) \
                     ON CONFLICT (wallet) DO NOTHING RETURNING {COLUMNS}"
                ),
                &[&MerchantId::random(12).as_str(), &wallet_bytes, &new_code()],
            )
            .await;
        match inserted {
            Ok(Some(row)) => return from_row(&row),
            Ok(None) => {
                let row = client
                    .query_one(
                        &format!("SELECT {COLUMNS} FROM merchants m WHERE m.wallet = $1"),
                        &[&wallet_bytes],
                    )
                    .await?;
                return from_row(&row);
            }
            // A code collision: draw another.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Inconsistent(
        "could not allocate a merchant code".into(),
    ))
}
