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

use super::client_ip::{Cidr, ClientAddr, limit_key};

type Inner =
    RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock, StateInformationMiddleware>;

/// One keyed limiter with its quota (for the headers).
pub struct Limiter {
    name: &'static str,
    inner: Inner,
    burst: u32,
    window_secs: u64,
    /// Keys refused by [`Limiter::check`], until when: [`Limiter::refused`] answers from it
    /// without counting, so a caller already over its limit can be turned away before the
    /// work its request would cost (a database lookup of an unknown API key).
    refused_until: Mutex<HashMap<String, Instant>>,
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
    pub fn new(name: &'static str, per_sec: u32, burst: u32) -> Limiter {
        let per_sec = NonZeroU32::new(per_sec.max(1)).expect("non-zero");
        let burst_nz = NonZeroU32::new(burst.max(1)).expect("non-zero");
        let quota = Quota::per_second(per_sec).allow_burst(burst_nz);
        Limiter {
            name,
            inner: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            burst: burst_nz.get(),
            // Time for an empty bucket to refill completely.
            window_secs: (burst_nz.get() as u64)
                .div_ceil(per_sec.get() as u64)
                .max(1),
            refused_until: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one request for `key`.
    pub fn check(&self, key: &str) -> Result<Allowed, Limited> {
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
                self.refused_until
                    .lock()
                    .expect("refused_until lock")
                    .insert(key.to_string(), Instant::now() + wait);
                Err(self.limited(wait))
            }
        }
    }

    /// Refuses `key` without counting a request when its last [`Limiter::check`] was refused
    /// and the wait it was told has not passed yet; otherwise `Ok` (the request then counts
    /// as usual where it fails).
    pub fn refused(&self, key: &str) -> Result<(), Limited> {
        let mut refused = self.refused_until.lock().expect("refused_until lock");
        let Some(until) = refused.get(key).copied() else {
            return Ok(());
        };
        let now = Instant::now();
        if until <= now {
            refused.remove(key);
            return Ok(());
        }
        Err(self.limited(until - now))
    }

    fn limited(&self, wait: Duration) -> Limited {
        Limited {
            policy: self.name,
            burst: self.burst,
            window_secs: self.window_secs,
            retry_after_secs: ceil_secs(wait),
        }
    }

    /// Forgets keys whose buckets are full again, and refusals that have passed (bounded
    /// memory).
    pub fn retain_recent(&self) {
        self.inner.retain_recent();
        let now = Instant::now();
        self.refused_until
            .lock()
            .expect("refused_until lock")
            .retain(|_, until| *until > now);
    }
}

fn ceil_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// The limiters of one server.
pub struct Limits {
    pub per_key: Limiter,
    pub per_ip: Limiter,
    trusted_proxies: Vec<Cidr>,
}

impl Limits {
    /// Builds both limiters (`(per second, burst)` each) and a task that trims them every
    /// minute.
    pub fn new(per_key: (u32, u32), per_ip: (u32, u32), trusted_proxies: Vec<Cidr>) -> Arc<Limits> {
        let limits = Arc::new(Limits {
            per_key: Limiter::new("key", per_key.0, per_key.1),
            per_ip: Limiter::new("ip", per_ip.0, per_ip.1),
            trusted_proxies,
        });
        let weak = Arc::downgrade(&limits);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                let Some(l) = weak.upgrade() else { break };
                l.per_key.retain_recent();
                l.per_ip.retain_recent();
            }
        });
        limits
    }

    /// Counts a request against its client's per-IP bucket (the client as resolved through
    /// the trusted proxies; IPv6 per /64).
    pub fn check_client(&self, client: &ClientAddr) -> Result<Allowed, Limited> {
        let key = limit_key(client.resolve(&self.trusted_proxies));
        self.per_ip.check(&key)
    }

    /// Refuses a client whose per-IP bucket refused it and is not ready again, without
    /// counting this request: for work done before a request can fail (an API key's database
    /// lookup), so a flood of guesses past the limit costs no database round trip.
    pub fn refused_client(&self, client: &ClientAddr) -> Result<(), Limited> {
        self.per_ip
            .refused(&limit_key(client.resolve(&self.trusted_proxies)))
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
    fn a_refused_key_stays_refused_without_counting_until_its_wait_passes() {
        let l = Limiter::new("ip", 2, 1);
        assert!(l.refused("a").is_ok(), "never checked: not refused");
        assert!(l.check("a").is_ok());
        assert!(l.refused("a").is_ok(), "allowed: not refused");
        let Err(lim) = l.check("a") else {
            panic!("second request in a burst of 1 must be limited")
        };
        let Err(again) = l.refused("a") else {
            panic!("refused until its wait passes")
        };
        assert_eq!((again.policy, again.retry_after_secs), (lim.policy, 1));
        assert!(l.refused("b").is_ok(), "keys are independent");
        // Two per second: one token back after half a second.
        std::thread::sleep(Duration::from_millis(600));
        assert!(l.refused("a").is_ok(), "the wait has passed");
        assert!(l.check("a").is_ok(), "and the bucket allows it again");
        l.retain_recent();
        assert!(l.refused_until.lock().unwrap().is_empty());
    }
}
