//! The HTTP foundation every route stands on, importing nothing above it: the one error type
//! ([`error`]), the one reply type ([`reply`]), the extractors and request checks
//! ([`extract`]), rate limits ([`ratelimit`]) and the client address behind trusted proxies
//! ([`client_ip`]). Within it, imports point one way: `error` <- `reply` <- `extract`, and
//! `client_ip` <- `ratelimit` <- `error`.

pub mod client_ip;
pub mod codes;
pub mod error;
pub mod extract;
pub mod input;
pub mod ratelimit;
pub mod reply;
