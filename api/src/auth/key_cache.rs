//! The API-key lookup, cached per process: a request with a known key takes one database
//! round trip (its own query) instead of two.
//!
//! Revocation stays immediate where the database can tell: migration 0027's trigger NOTIFYs
//! [`KEYS_CHANNEL`] with the merchant's id whenever one of its keys is revoked, rotated or
//! deleted, and every process LISTENs on it and drops that merchant's entries. The cache is
//! used only while that LISTEN is live: when its connection ends, everything cached is
//! dropped and lookups go to the database until it is back (notifications sent meanwhile are
//! lost, so nothing from before is trusted). A lookup that raced a notification is not cached
//! (a generation counter), and an entry lives at most `API_KEY_CACHE_SECS` whatever happens.
//! The process that revokes or rotates a key drops its own entries before it answers.
//!
//! Only keys that were found live are cached: a wrong key always reaches the database (and
//! the per-IP limit), so guessing fills nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chainsub_store::listen::{Heard, Timing, listen_forever};
use chainsub_store::merchants::KEYS_CHANNEL;

/// Entries at most (one per live key in use); a full cache starts over.
const MAX_ENTRIES: usize = 100_000;
/// `last_used_at` is written at most this often per key and process.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// A cached lookup.
#[derive(Debug, Clone)]
pub struct Hit<T> {
    /// What the lookup found (the API: the merchant's scope and the key's row id).
    pub found: T,
    /// `last_used_at` is due for a write (the caller writes it).
    pub touch: bool,
}

#[derive(Debug)]
struct Entry<T> {
    merchant_id: i64,
    found: T,
    cached_at: Instant,
    touched_at: Instant,
}

#[derive(Debug)]
struct Inner<T> {
    /// LISTEN is live: entries may be used and added.
    listening: bool,
    /// Moves on every notification and every change of `listening`.
    generation: u64,
    entries: HashMap<[u8; 32], Entry<T>>,
}

/// See the module docs. Keyed by the key's hash; `T` is what a lookup found.
#[derive(Debug)]
pub struct KeyCache<T> {
    ttl: Duration,
    inner: Mutex<Inner<T>>,
}

/// A point in the cache's history, taken before a database lookup: its result is cached only
/// if nothing was heard since.
#[derive(Debug, Clone, Copy)]
pub struct Generation(Option<u64>);

impl<T: Clone> KeyCache<T> {
    /// A cache whose entries live at most `ttl` (zero: no caching at all).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            inner: Mutex::new(Inner {
                listening: false,
                generation: 0,
                entries: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live lookup of `hash`, if cached.
    pub fn get(&self, hash: &[u8; 32]) -> Option<Hit<T>> {
        let mut inner = self.lock();
        if !inner.listening {
            return None;
        }
        let now = Instant::now();
        let Some(e) = inner.entries.get_mut(hash) else {
            metrics::counter!("api_key_cache_lookups_total", "result" => "miss").increment(1);
            return None;
        };
        if now.duration_since(e.cached_at) >= self.ttl {
            inner.entries.remove(hash);
            metrics::counter!("api_key_cache_lookups_total", "result" => "miss").increment(1);
            return None;
        }
        let touch = now.duration_since(e.touched_at) >= TOUCH_EVERY;
        if touch {
            e.touched_at = now;
        }
        metrics::counter!("api_key_cache_lookups_total", "result" => "hit").increment(1);
        Some(Hit {
            found: e.found.clone(),
            touch,
        })
    }

    /// Where the cache stands before a database lookup.
    pub fn generation(&self) -> Generation {
        let inner = self.lock();
        Generation((inner.listening && !self.ttl.is_zero()).then_some(inner.generation))
    }

    /// Caches what the database answered for `hash`, a key of the merchant with row id
    /// `merchant_id`, after `before` (its `last_used_at` is recent: written by the caller or
    /// found within the minute) — unless anything was heard since.
    pub fn insert(&self, before: Generation, hash: [u8; 32], merchant_id: i64, found: T) {
        let mut inner = self.lock();
        if before.0 != Some(inner.generation) || !inner.listening {
            return;
        }
        if inner.entries.len() >= MAX_ENTRIES {
            inner.entries.clear();
        }
        let now = Instant::now();
        inner.entries.insert(
            hash,
            Entry {
                merchant_id,
                found,
                cached_at: now,
                touched_at: now,
            },
        );
    }

    /// Drops the entries of the merchant with row id `merchant_id`.
    pub fn forget_merchant(&self, merchant_id: i64) {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.entries.retain(|_, e| e.merchant_id != merchant_id);
    }

    /// What the listener heard.
    fn heard(&self, heard: Heard<'_>) {
        match heard {
            // `*`: every key at once (TRUNCATE); anything unreadable is taken the same way.
            Heard::Notified(payload) => match payload.parse::<i64>() {
                Ok(id) => self.forget_merchant(id),
                Err(_) => {
                    let listening = self.lock().listening;
                    self.set_listening(listening)
                }
            },
            Heard::Listening => self.set_listening(true),
            Heard::Lost => self.set_listening(false),
        }
        let listening = self.lock().listening;
        metrics::gauge!("api_key_cache_listening").set(if listening { 1.0 } else { 0.0 });
    }

    /// Starts over: nothing cached before is trusted.
    fn set_listening(&self, listening: bool) {
        let mut inner = self.lock();
        inner.listening = listening;
        inner.generation += 1;
        inner.entries.clear();
    }

    /// Listens for key changes until the task is dropped (a no-op cache when `ttl` is zero).
    /// Not before the database signals them (migration 0027's trigger: a process started with
    /// `NO_MIGRATE` may run before it is applied): until then nothing is cached.
    pub async fn listen(self: std::sync::Arc<Self>, database_url: String)
    where
        T: Send + 'static,
    {
        metrics::gauge!("api_key_cache_listening").set(0.0);
        if self.ttl.is_zero() {
            return;
        }
        let mut said = false;
        while !signalled(&database_url).await {
            if !said {
                tracing::warn!(
                    "api_keys changes are not signalled (migration 0027 not applied): API keys \
                     are read from the database on every request until it is"
                );
                said = true;
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        listen_forever(
            &database_url,
            KEYS_CHANNEL,
            Timing::default(),
            |heard| self.heard(heard),
            || false,
        )
        .await
    }
}

/// Whether the database signals key changes (false when it cannot be asked).
async fn signalled(database_url: &str) -> bool {
    let Ok(db) = chainsub_store::pg::Database::from_url(database_url) else {
        return false;
    };
    match db.connect().await {
        Ok(client) => chainsub_store::merchants::key_changes_signalled(&client)
            .await
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// The hashes of every live API key, refreshed every few seconds: lets a valid key through
/// to its lookup when its caller's IP is refused for guessing (a shared address, or one
/// whose guesses someone else made), while guesses — in no snapshot — stay refused without a
/// database round trip. A key created since the last refresh is treated as before: looked
/// up unless its caller is refused.
#[derive(Default)]
pub struct LiveKeys {
    hashes: std::sync::RwLock<std::collections::HashSet<[u8; 32]>>,
}

/// How often [`LiveKeys`] reloads.
pub const LIVE_KEYS_EVERY: Duration = Duration::from_secs(5);

impl LiveKeys {
    /// Whether `hash` was a live key at the last refresh.
    pub fn contains(&self, hash: &[u8; 32]) -> bool {
        self.hashes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(hash)
    }

    /// Reloads from the database every [`LIVE_KEYS_EVERY`] until the task is dropped; a
    /// failed reload keeps the last snapshot.
    pub async fn refresh(self: std::sync::Arc<Self>, pool: deadpool_postgres::Pool) {
        loop {
            match pool.get().await {
                Ok(conn) => match chainsub_store::merchants::live_key_hashes(&conn).await {
                    Ok(rows) => {
                        let set = rows
                            .into_iter()
                            .filter_map(|h| <[u8; 32]>::try_from(h.as_slice()).ok())
                            .collect();
                        *self.hashes.write().unwrap_or_else(|e| e.into_inner()) = set;
                    }
                    Err(e) => tracing::warn!(error = %e, "live API keys: reload failed"),
                },
                Err(e) => tracing::warn!(error = %e, "live API keys: no connection"),
            }
            tokio::time::sleep(LIVE_KEYS_EVERY).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening(ttl: Duration) -> KeyCache<i64> {
        let c = KeyCache::new(ttl);
        c.heard(Heard::Listening);
        c
    }

    #[test]
    fn nothing_is_cached_or_served_unless_listening() {
        let c = KeyCache::<i64>::new(Duration::from_secs(30));
        let g = c.generation();
        c.insert(g, [1; 32], 1, 10);
        assert!(c.get(&[1; 32]).is_none(), "not listening yet");
        c.heard(Heard::Listening);
        let g = c.generation();
        c.insert(g, [1; 32], 1, 10);
        assert_eq!(c.get(&[1; 32]).unwrap().found, 10);
        c.heard(Heard::Lost);
        assert!(c.get(&[1; 32]).is_none(), "the connection ended");
        c.heard(Heard::Listening);
        assert!(
            c.get(&[1; 32]).is_none(),
            "what was cached before the loss is gone"
        );
    }

    #[test]
    fn a_notification_drops_the_merchants_entries_and_a_racing_lookup() {
        let c = listening(Duration::from_secs(30));
        let g = c.generation();
        c.insert(g, [1; 32], 1, 10);
        c.insert(g, [2; 32], 2, 20);
        let racing = c.generation();
        c.heard(Heard::Notified("1"));
        assert!(c.get(&[1; 32]).is_none());
        assert_eq!(
            c.get(&[2; 32]).unwrap().found,
            20,
            "another merchant's key stays"
        );
        c.insert(racing, [1; 32], 1, 10);
        assert!(
            c.get(&[1; 32]).is_none(),
            "a lookup that started before the notification is not cached"
        );
        c.heard(Heard::Notified("*"));
        assert!(c.get(&[2; 32]).is_none(), "`*` (TRUNCATE) drops everything");
        let g = c.generation();
        c.insert(g, [2; 32], 2, 20);
        c.heard(Heard::Notified("not a number"));
        assert!(c.get(&[2; 32]).is_none(), "so does an unreadable payload");
    }

    #[test]
    fn entries_expire_and_zero_disables() {
        let c = listening(Duration::from_millis(1));
        let g = c.generation();
        c.insert(g, [1; 32], 1, 10);
        std::thread::sleep(Duration::from_millis(5));
        assert!(c.get(&[1; 32]).is_none());
        let off = listening(Duration::ZERO);
        let g = off.generation();
        off.insert(g, [1; 32], 1, 10);
        assert!(off.get(&[1; 32]).is_none());
    }

    #[test]
    fn a_hit_asks_for_the_last_used_write_once_a_minute() {
        let c = listening(Duration::from_secs(300));
        let g = c.generation();
        c.insert(g, [1; 32], 1, 10);
        assert!(!c.get(&[1; 32]).unwrap().touch, "just written");
        c.lock().entries.get_mut(&[1; 32]).unwrap().touched_at -= TOUCH_EVERY;
        assert!(c.get(&[1; 32]).unwrap().touch);
        assert!(!c.get(&[1; 32]).unwrap().touch, "once");
    }
}
