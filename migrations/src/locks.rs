//! Every Postgres advisory lock Chainsub takes, in one place. These are contracts between
//! processes (indexer, api, dispatcher, keeper, migrate): changing a key is a breaking change.
//!
//! All are session-level `pg_advisory_lock(bigint)` keys in a Chainsub-only range
//! (0x6368_6e73 = "chns" in the high 32 bits), so they cannot collide with another
//! application's locks on a shared server.

const BASE: i64 = 0x6368_6e73_0000_0000;

/// Held while migrations are applied; every binary takes it at start.
pub const MIGRATIONS: i64 = BASE | 1;

/// The single-writer lock of the indexer for one chain: `INDEXER_WRITER_BASE + chain_id`.
/// The holder is the only process that writes chain-owned tables; a second indexer blocks on
/// it as a hot standby and takes over when the holder's session ends.
pub const INDEXER_WRITER_BASE: i64 = BASE | 0x1000_0000;

/// The indexer writer lock key for `chain_id`.
pub fn indexer_writer(chain_id: i64) -> i64 {
    INDEXER_WRITER_BASE | (chain_id & 0x0fff_ffff)
}

/// Held by the keeper for one chain, so two keepers never send for the same period.
pub const KEEPER_BASE: i64 = BASE | 0x2000_0000;

/// The keeper lock key for `chain_id`.
pub fn keeper(chain_id: i64) -> i64 {
    KEEPER_BASE | (chain_id & 0x0fff_ffff)
}

/// Held (transaction-scoped) by an `api` process from reading its relayer key's nonce until
/// the node acknowledged the send, so several API replicas sharing one key never sign two
/// transactions with the same nonce.
pub const RELAYER_BASE: i64 = BASE | 0x3000_0000;

/// The relayer send lock for the key with address `relayer` (its low 28 bits: a collision
/// between two keys only serializes their sends).
pub fn relayer(relayer: [u8; 20]) -> i64 {
    let low = u32::from_be_bytes([relayer[16], relayer[17], relayer[18], relayer[19]]);
    RELAYER_BASE | (i64::from(low) & 0x0fff_ffff)
}
