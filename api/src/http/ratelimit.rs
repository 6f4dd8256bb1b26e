//! governor rate limits, keyed per API key (merchant) and per client IP. Quotas come from
//! the config. Headers follow draft-ietf-httpapi-ratelimit-headers (structured
//! `RateLimit-Policy: "<name>";q=<burst>;w=<secs>` and `RateLimit: "<name>";r=<left>;t=<secs>`).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::client_ip::{ClientAddr, Proxies, limit_key};

type Inner =
    RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock, StateInformationMiddleware>;

/// One keyed limiter with its quota (for the headers).
pub struct Limiter {
    name: &'static str,
    inner: Inner,
    burst: u32,
    per_sec: u32,
    window_secs: u64,
    /// Time for one request's token to come back.
    interval: Duration,
}

/// What a 429 tells the client.
#[derive(Debug, Clone)]
pub struct Limited {
    pub policy: &'static str,
    pub burst: u32,
    pub window_secs: u64,
    /// Seconds until a request would be allowed, rounded up (never 0).
    pub retry_after_secs: u64,
}

impl Limited {
    /// `Retry-After`, `RateLimit-Policy` and `RateLimit` headers.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            ("retry-after", self.retry_after_secs.to_string()),
            (
                "ratelimit-policy",
                format!(
                    "\"{}\";q={};w={}",
                    self.policy, self.burst, self.window_secs
                ),
            ),
            (
                "ratelimit",
                format!("\"{}\";r=0;t={}", self.policy, self.retry_after_secs),
            ),
        ]
    }
}

/// Headers for an allowed request.
#[derive(Debug, Clone)]
pub struct Allowed {
    pub policy: &'static str,
    pub burst: u32,
    pub window_secs: u64,
    pub remaining: u32,
}

impl Allowed {
    /// `RateLimit-Policy` and `RateLimit` headers.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "ratelimit-policy",
                format!(
                    "\"{}\";q={};w={}",
                    self.policy, self.burst, self.window_secs
                ),
            ),
            (
                "ratelimit",
                format!(
                    "\"{}\";r={};t={}",
                    self.policy,
                    self.remaining,
                    if self.remaining == 0 { 1 } else { 0 }
                ),
            ),
        ]
    }
}

impl Limiter {
    /// `per_sec` sustained, `burst` at once (both at least 1).
    pub fn new(name: &'static str, per_sec: u32, burst: u32) -> Self {
        let per_sec = NonZeroU32::new(per_sec.max(1)).expect("non-zero");
        let burst_nz = NonZeroU32::new(burst.max(1)).expect("non-zero");
        let quota = Quota::per_second(per_sec).allow_burst(burst_nz);
        Self {
            interval: quota.replenish_interval(),
            name,
            inner: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            burst: burst_nz.get(),
            per_sec: per_sec.get(),
            // Time for an empty bucket to refill completely.
            window_secs: (burst_nz.get() as u64)
                .div_ceil(per_sec.get() as u64)
                .max(1),
        }
    }

    /// Counts one request for `key`.
    pub fn check(&self, key: &str) -> Result<Allowed, Limited> {
        self.check_timed(key).map_err(|(limited, _)| limited)
    }

    /// [`Limiter::check`], with the exact wait of a refusal.
    fn check_timed(&self, key: &str) -> Result<Allowed, (Limited, Duration)> {
        match self.inner.check_key(&key.to_string()) {
            Ok(snapshot) => Ok(Allowed {
                policy: self.name,
                burst: self.burst,
                window_secs: self.window_secs,
                remaining: snapshot.remaining_burst_capacity(),
            }),
            Err(not_until) => {
                // The limiter's own clock: `DefaultClock::default()` builds a new quanta clock,
                // which calibrates with CPUID (a VM exit under a hypervisor) — ~20 % of the
                // API's CPU while a flood is being refused.
                let wait = not_until.wait_time_from(self.inner.clock().now());
                Err((self.limited(wait), wait))
            }
        }
    }

    fn limited(&self, wait: Duration) -> Limited {
        Limited {
            policy: self.name,
            burst: self.burst,
            window_secs: self.window_secs,
            retry_after_secs: ceil_secs(wait),
        }
    }

    /// Forgets keys whose buckets are full again (bounded memory).
    pub fn retain_recent(&self) {
        self.inner.retain_recent();
    }
}

/// How long a caller's refusal is remembered after it ran out (its further key attempts pass
/// one per token meanwhile); trimmed by the minute's tick, so at most two minutes.
const REFUSAL_LINGER: Duration = Duration::from_secs(60);

/// Callers refused for failed API-key attempts, and until when, so that their next attempts
/// can be turned away before the database lookup a key costs. Only failed key attempts put a
/// caller here (not its page or dashboard traffic, which share its per-IP bucket).
#[derive(Default)]
struct Refusals {
    until: Mutex<HashMap<String, Instant>>,
}

impl Refusals {
    fn refuse(&self, key: String, until: Instant) {
        self.until.lock().expect("refusals lock").insert(key, until);
    }

    /// The time left on `key`'s refusal at `now`, if any. When it has run out, one caller is
    /// let through and the refusal is pushed back by one token's `interval`, so that callers
    /// arriving together (at that moment, or long after) do not all reach the database
    /// before the first is counted. The entry stays until [`Refusals::retain`] drops it.
    fn left(&self, key: &str, now: Instant, interval: Duration) -> Option<Duration> {
        let mut until = self.until.lock().expect("refusals lock");
        let at = until.get_mut(key)?;
        if *at > now {
            return Some(*at - now);
        }
        *at = now + interval;
        None
    }

    /// Forgets callers whose refusal ran out [`REFUSAL_LINGER`] or more before `now`.
    fn retain(&self, now: Instant) {
        self.until
            .lock()
            .expect("refusals lock")
            .retain(|_, at| *at + REFUSAL_LINGER > now);
    }
}

fn ceil_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// How long a process may keep tokens it took from a key's shared budget: a token unused by
/// then is dropped (it was counted when taken), so a process never spends an old lease on a
/// burst of its own.
const LEASE_TTL: Duration = Duration::from_secs(1);

/// Tokens this process took from a key's shared budget and has not spent yet.
struct Lease {
    tokens: u32,
    until: Instant,
    /// What the shared budget had left at the take that leased them.
    shared_left: u32,
}

/// Tokens this process took from keys' shared budgets and has not spent yet.
#[derive(Default)]
struct Leases {
    by_key: Mutex<HashMap<String, Lease>>,
    /// One take from the database at a time per key: requests that find the lease empty
    /// together wait for one take and share it, instead of each taking a batch (which would
    /// spend the key's budget on tokens nobody uses and starve it).
    takes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Until when the budget is not asked after it could not be read (the database down or
    /// the pool exhausted): meanwhile the process's own limit stands alone, without each
    /// request waiting for a connection first.
    unreadable_until: Mutex<Option<Instant>>,
}

/// How long a take may wait for a pooled connection.
const TAKE_WAIT: Duration = Duration::from_millis(100);
/// How long the budget is left alone after it could not be read.
const TAKE_BACKOFF: Duration = Duration::from_secs(1);

impl Leases {
    /// Spends one of `key`'s leased tokens, if a live one is left, and answers how many
    /// requests the key has left as far as this process knows: its unspent lease plus what
    /// the shared budget had left at the take (other processes may have spent some since).
    fn spend(&self, key: &str, now: Instant) -> Option<u32> {
        let mut by_key = self.by_key.lock().expect("leases lock");
        match by_key.get_mut(key) {
            Some(lease) if lease.tokens > 0 && lease.until > now => {
                lease.tokens -= 1;
                Some(lease.tokens.saturating_add(lease.shared_left))
            }
            _ => None,
        }
    }

    /// Keeps `tokens` more of `key`'s budget until `LEASE_TTL` after `now`; the budget had
    /// `shared_left` after they were taken.
    fn keep(&self, key: &str, tokens: u32, shared_left: u32, now: Instant) {
        if tokens == 0 {
            return;
        }
        let mut by_key = self.by_key.lock().expect("leases lock");
        let lease = by_key.entry(key.to_string()).or_insert(Lease {
            tokens: 0,
            until: now,
            shared_left,
        });
        if lease.until <= now {
            lease.tokens = 0;
        }
        *lease = Lease {
            tokens: lease.tokens + tokens,
            until: now + LEASE_TTL,
            shared_left,
        };
    }

    /// The lock `key`'s takes from the database queue on.
    fn take_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.takes
            .lock()
            .expect("leases lock")
            .entry(key.to_string())
            .or_default()
            .clone()
    }

    fn retain(&self, now: Instant) {
        self.by_key
            .lock()
            .expect("leases lock")
            .retain(|_, lease| lease.tokens > 0 && lease.until > now);
        self.takes
            .lock()
            .expect("leases lock")
            .retain(|_, lock| Arc::strong_count(lock) > 1);
    }
}

/// The limiters of one server.
pub struct Limits {
    /// The in-process fast path of the per-key limit: what one process may accept on its own.
    /// Its shared part is [`Limits::check_key`].
    pub per_key: Limiter,
    pub per_ip: Limiter,
    /// `GET /api/v1/health`'s own per-client bucket.
    pub health: Limiter,
    proxies: Proxies,
    key_guessers: Refusals,
    leases: Leases,
}

impl Limits {
    /// Builds both limiters (`(per second, burst)` each) and a task that trims them every
    /// minute.
    pub fn new(
        per_key: (u32, u32),
        per_ip: (u32, u32),
        health: (u32, u32),
        proxies: Proxies,
    ) -> Arc<Self> {
        let limits = Arc::new(Self {
            per_key: Limiter::new("key", per_key.0, per_key.1),
            per_ip: Limiter::new("ip", per_ip.0, per_ip.1),
            health: Limiter::new("health", health.0, health.1),
            proxies,
            key_guessers: Refusals::default(),
            leases: Leases::default(),
        });
        let weak = Arc::downgrade(&limits);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                let Some(l) = weak.upgrade() else { break };
                l.per_key.retain_recent();
                l.per_ip.retain_recent();
                l.health.retain_recent();
                l.key_guessers.retain(Instant::now());
                l.leases.retain(Instant::now());
            }
        });
        limits
    }

    /// Counts a request against an API key's limit, which holds across every API process of
    /// the deployment: this process's own limiter first (a flood one process sees is refused
    /// without a database round trip), then a token of the key's budget in Postgres, taken
    /// a tenth of a second's worth at a time and kept for [`LEASE_TTL`]. Tokens taken and not
    /// spent are lost, never spent twice: across processes a key gets at most its rate plus
    /// one burst. When the budget cannot be read (the database is down, or no pooled connection
    /// within 100 ms), it is not asked for a second and the process's own
    /// limit stands alone. An allowed request's `remaining` is the smaller of this process's
    /// bucket and what the shared budget had left at the last take plus the unspent lease.
    pub async fn check_key(
        &self,
        pool: &deadpool_postgres::Pool,
        key: &str,
    ) -> Result<Allowed, Limited> {
        let allowed = self.per_key.check(key)?;
        let shared = |allowed: Allowed, left: u32| Allowed {
            remaining: allowed.remaining.min(left),
            ..allowed
        };
        if let Some(left) = self.leases.spend(key, Instant::now()) {
            return Ok(shared(allowed, left));
        }
        let lock = self.leases.take_lock(key);
        let _taking = lock.lock().await;
        // A take that finished while this request waited may have left tokens.
        if let Some(left) = self.leases.spend(key, Instant::now()) {
            return Ok(shared(allowed, left));
        }
        let l = &self.per_key;
        let want = l.per_sec.div_ceil(10).clamp(1, l.burst);
        let unreadable = *self.leases.unreadable_until.lock().expect("leases lock");
        let took = match unreadable {
            Some(until) if until > Instant::now() => Err("not read again yet".to_string()),
            _ => match tokio::time::timeout(TAKE_WAIT, pool.get()).await {
                Ok(Ok(conn)) => {
                    chainsub_store::key_budgets::take(&conn, key, want, l.interval, l.burst)
                        .await
                        .map_err(|e| e.to_string())
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no pooled connection within {TAKE_WAIT:?}")),
            },
        };
        if took.is_err() && unreadable.is_none_or(|u| u <= Instant::now()) {
            *self.leases.unreadable_until.lock().expect("leases lock") =
                Some(Instant::now() + TAKE_BACKOFF);
        }
        match took {
            Ok(t) if t.granted > 0 => {
                metrics::counter!("api_key_budget_takes_total", "result" => "granted").increment(1);
                let leased = t.granted - 1;
                self.leases.keep(key, leased, t.remaining, Instant::now());
                Ok(shared(allowed, leased.saturating_add(t.remaining)))
            }
            Ok(t) => {
                metrics::counter!("api_key_budget_takes_total", "result" => "refused").increment(1);
                Err(l.limited(t.wait))
            }
            Err(e) => {
                metrics::counter!("api_key_budget_takes_total", "result" => "error").increment(1);
                tracing::warn!(error = %e, "the shared key budget could not be read; the process's own limit stands");
                Ok(allowed)
            }
        }
    }

    /// Counts a request against its client's per-IP bucket (the client as resolved through
    /// the trusted proxies; IPv6 per /64).
    pub fn check_client(&self, client: &ClientAddr) -> Result<Allowed, Limited> {
        self.per_ip.check(&self.ip_key(client))
    }

    /// Counts a health check against its client's own health bucket.
    pub fn check_health(&self, client: &ClientAddr) -> Result<Allowed, Limited> {
        self.health.check(&self.ip_key(client))
    }

    /// The per-IP bucket of `client`: as resolved through the trusted proxies, IPv6 per /64.
    fn ip_key(&self, client: &ClientAddr) -> String {
        limit_key(client.resolve(&self.proxies))
    }

    /// Counts a failed API-key attempt against the client's per-IP bucket; when that refuses
    /// it, the client's further key attempts are refused by [`Limits::refused_key_guesser`]
    /// until the wait it was told has passed.
    pub fn check_failed_key(&self, client: &ClientAddr) -> Result<Allowed, Limited> {
        let key = self.ip_key(client);
        self.per_ip.check_timed(&key).map_err(|(limited, wait)| {
            self.key_guessers.refuse(key, Instant::now() + wait);
            limited
        })
    }

    /// Refuses, without counting, a client whose failed key attempts were refused and whose
    /// wait has not passed: called before an API key's database lookup, so a flood of guessed
    /// keys costs about one lookup per token the bucket gives back, not one per guess. A valid
    /// key that is not cached yet, sent meanwhile from the same IP, competes for those same
    /// one-per-token lookups.
    pub fn refused_key_guesser(&self, client: &ClientAddr) -> Result<(), Limited> {
        let key = self.ip_key(client);
        match self
            .key_guessers
            .left(&key, Instant::now(), self.per_ip.interval)
        {
            None => Ok(()),
            Some(wait) => Err(self.per_ip.limited(wait)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(ceil_secs(Duration::ZERO), 1);
    }

    #[test]
    fn a_lease_answers_its_tokens_left_plus_the_shared_budget_until_it_expires() {
        let leases = Leases::default();
        let now = Instant::now();
        assert_eq!(leases.spend("k", now), None, "nothing leased yet");
        leases.keep("k", 3, 7, now);
        assert_eq!(leases.spend("k", now), Some(2 + 7));
        assert_eq!(leases.spend("k", now), Some(1 + 7));
        // A later take replaces what the shared budget had left and adds its tokens.
        leases.keep("k", 2, 4, now);
        assert_eq!(leases.spend("k", now), Some(2 + 4));
        // Past its time a lease is worth nothing; a new take starts from its own tokens.
        let later = now + LEASE_TTL;
        assert_eq!(leases.spend("k", later), None);
        leases.keep("k", 1, 0, later);
        assert_eq!(leases.spend("k", later), Some(0));
        assert_eq!(leases.spend("k", later), None, "spent");
    }

    #[test]
    fn burst_is_allowed_then_limited_with_headers() {
        let l = Limiter::new("key", 1, 2);
        assert!(l.check("a").is_ok());
        assert!(l.check("a").is_ok());
        let Err(lim) = l.check("a") else {
            panic!("third request in a burst of 2 must be limited")
        };
        assert_eq!(lim.retry_after_secs, 1);
        assert!(l.check("b").is_ok(), "keys are independent");
    }

    #[test]
    fn a_refusal_holds_until_its_time_then_lets_one_caller_through_per_token() {
        let r = Refusals::default();
        let t0 = Instant::now();
        let token = Duration::from_millis(50);
        assert_eq!(r.left("a", t0, token), None, "never refused");
        r.refuse("a".into(), t0 + Duration::from_millis(30));
        assert_eq!(
            r.left("a", t0 + Duration::from_millis(10), token),
            Some(Duration::from_millis(20))
        );
        assert_eq!(r.left("b", t0, token), None, "keys are independent");
        // Its time has come (exactly): one caller passes, the next ones wait one more token.
        let t1 = t0 + Duration::from_millis(30);
        assert_eq!(r.left("a", t1, token), None);
        assert_eq!(r.left("a", t1, token), Some(token));
        // Long after: still one caller per token, however many arrive together.
        let t2 = t1 + token * 100;
        assert_eq!(r.left("a", t2, token), None);
        assert_eq!(r.left("a", t2, token), Some(token));
        assert_eq!(r.left("a", t2 + token, token), None);
        // The minute's trim keeps refusals that ran out less than REFUSAL_LINGER ago.
        r.refuse("old".into(), t0);
        r.refuse("recent".into(), t0 + REFUSAL_LINGER);
        r.refuse("future".into(), t0 + REFUSAL_LINGER * 3);
        r.retain(t0 + REFUSAL_LINGER + Duration::from_millis(1));
        let mut kept: Vec<String> = r.until.lock().unwrap().keys().cloned().collect();
        kept.sort();
        assert_eq!(kept, ["a", "future", "recent"]);
    }

    #[tokio::test]
    async fn only_failed_key_attempts_refuse_key_lookups() {
        let limits = Limits::new((1000, 1000), (1, 2), (1, 1), Proxies::default());
        let client = ClientAddr {
            peer: Some("192.0.2.1".parse().unwrap()),
            ..ClientAddr::default()
        };
        let refusals = || limits.key_guessers.until.lock().unwrap().len();
        // Page traffic empties the IP's bucket: nothing refuses its key lookups.
        for _ in 0..3 {
            let _ = limits.check_client(&client);
        }
        assert!(limits.check_client(&client).is_err());
        assert_eq!(refusals(), 0);
        // A failed key attempt refused by the bucket: remembered for the key lookups.
        assert!(limits.check_failed_key(&client).is_err());
        assert_eq!(refusals(), 1);
    }
}
