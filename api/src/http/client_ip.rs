//! Who the client is, for per-IP rate limits: the TCP peer, unless the peer is one of the
//! operator's reverse proxies (`TRUSTED_PROXIES`, CIDRs), in which case the address that the
//! proxies recorded in `Forwarded` (RFC 7239) or `X-Forwarded-For` — read from the right,
//! skipping trusted hops. A header from anyone else is ignored: a client cannot pick its own
//! rate-limit bucket. IPv6 clients are limited per /64 (what one subscriber line gets), so
//! rotating addresses inside one's own prefix buys nothing.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use warp::Filter;
use warp::filters::BoxedFilter;

/// An address range such as `10.0.0.0/8` or `fd00::/8` (a bare address is a /32 or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not an address range such as 10.0.0.0/8 or fd00::/8");
        let (addr, len) = match s.trim().split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s.trim(), None),
        };
        let net: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max).ok_or_else(bad)?,
        };
        Ok(Self { net, len })
    }
}

impl Cidr {
    /// Whether `ip` is inside the range (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), self.len),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), self.len),
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = (usize::from(bits / 8), bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The one forwarding header the operator's proxies write (`FORWARDED_HEADER`): only it is
/// read, so a client cannot pick its bucket by sending the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (nginx, HAProxy, AWS ALB, most load balancers).
    #[default]
    #[value(name = "x-forwarded-for")]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=…`.
    #[value(name = "forwarded")]
    Forwarded,
}

/// The operator's proxies: which peers are trusted, and the header they write.
#[derive(Debug, Clone, Default)]
pub struct Proxies {
    pub trusted: Vec<Cidr>,
    pub header: ForwardedHeader,
}

/// What a request says about where it comes from.
#[derive(Debug, Clone, Default)]
pub struct ClientAddr {
    pub peer: Option<IpAddr>,
    pub forwarded: Option<String>,
    pub x_forwarded_for: Option<String>,
}

/// One hop of `Forwarded: for=…` or `X-Forwarded-For`: `1.2.3.4`, `1.2.3.4:5678`,
/// `"[2001:db8::1]:443"`, `2001:db8::1`; `None` for `unknown`, obfuscated ids or garbage.
fn parse_hop(s: &str) -> Option<IpAddr> {
    let s = s.trim().trim_matches('"');
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.parse().ok())
}

impl ClientAddr {
    /// The hops the proxies recorded in `header` (every line of it: the accept loop combines
    /// them), nearest last.
    fn hops(&self, header: ForwardedHeader) -> Vec<&str> {
        match header {
            ForwardedHeader::Forwarded => self
                .forwarded
                .as_deref()
                .map(|f| {
                    f.split(',')
                        .filter_map(|el| {
                            el.split(';').find_map(|pair| {
                                let (k, v) = pair.trim().split_once('=')?;
                                k.eq_ignore_ascii_case("for").then_some(v)
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            ForwardedHeader::XForwardedFor => self
                .x_forwarded_for
                .as_deref()
                .map(|x| x.split(',').collect())
                .unwrap_or_default(),
        }
    }

    /// The client's address given the operator's proxies: walked from the right through
    /// the configured header past the trusted hops.
    pub fn resolve(&self, proxies: &Proxies) -> Option<IpAddr> {
        let peer = canonical(self.peer?);
        let trusted = &proxies.trusted;
        let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
        if !is_trusted(peer) {
            return Some(peer);
        }
        let mut client = peer;
        for hop in self.hops(proxies.header).into_iter().rev() {
            // A hop we cannot read was not written by a proxy we trust: stop at the last
            // address one of them vouched for.
            let Some(ip) = parse_hop(hop).map(canonical) else {
                return Some(client);
            };
            client = ip;
            if !is_trusted(ip) {
                return Some(ip);
            }
        }
        Some(client)
    }
}

/// The per-IP limiter's key: the IPv4 address, or the /64 of an IPv6 address.
pub fn limit_key(ip: Option<IpAddr>) -> String {
    match ip.map(canonical) {
        None => "unknown".into(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let s = v6.segments();
            let net = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            format!("{net}/64")
        }
    }
}

/// Extracts [`ClientAddr`] (peer and forwarding headers, unparsed).
pub fn client_addr() -> BoxedFilter<(ClientAddr,)> {
    chainsub_serve::peer()
        .and(warp::header::optional::<String>("forwarded"))
        .and(warp::header::optional::<String>("x-forwarded-for"))
        .map(
            |remote: Option<SocketAddr>, forwarded, x_forwarded_for| ClientAddr {
                peer: remote.map(|r| r.ip()),
                forwarded,
                x_forwarded_for,
            },
        )
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    fn addr(peer: &str, xff: Option<&str>, fwd: Option<&str>) -> ClientAddr {
        ClientAddr {
            peer: Some(peer.parse().unwrap()),
            x_forwarded_for: xff.map(str::to_string),
            forwarded: fwd.map(str::to_string),
        }
    }

    #[test]
    fn cidrs_parse_and_match() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.200.1.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        let c: Cidr = "fd00::/8".parse().unwrap();
        assert!(c.contains("fd12::1".parse().unwrap()));
        assert!(!c.contains("fe80::1".parse().unwrap()));
        let c: Cidr = "192.168.1.7".parse().unwrap();
        assert!(c.contains("192.168.1.7".parse().unwrap()));
        assert!(!c.contains("192.168.1.8".parse().unwrap()));
        let c: Cidr = "172.16.0.0/12".parse().unwrap();
        assert!(c.contains("172.31.255.255".parse().unwrap()));
        assert!(!c.contains("172.32.0.0".parse().unwrap()));
        for bad in ["", "10.0.0.0/33", "fd00::/129", "x/8", "10.0.0.0/-1"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_proxies() {
        let xff = Proxies {
            trusted: cidrs(&["10.0.0.0/8"]),
            header: ForwardedHeader::XForwardedFor,
        };
        let rfc = Proxies {
            header: ForwardedHeader::Forwarded,
            ..xff.clone()
        };
        let trusted = &xff;
        // An untrusted peer cannot choose its bucket.
        let a = addr(
            "203.0.113.9",
            Some("198.51.100.1"),
            Some("for=198.51.100.2"),
        );
        assert_eq!(a.resolve(trusted), Some("203.0.113.9".parse().unwrap()));
        // A trusted proxy's header names the client; hops the client itself prepended are
        // ignored (read from the right, the first untrusted hop is the client).
        let a = addr("10.0.0.2", Some("1.1.1.1, 198.51.100.7, 10.0.0.5"), None);
        assert_eq!(a.resolve(trusted), Some("198.51.100.7".parse().unwrap()));
        // RFC 7239 with quoting, ports and IPv6.
        let a = addr(
            "10.0.0.2",
            None,
            Some("for=192.0.2.60;proto=http, for=\"[2001:db8:cafe::17]:4711\""),
        );
        assert_eq!(a.resolve(&rfc), Some("2001:db8:cafe::17".parse().unwrap()));
        // Issue 46, point 9: only the configured header counts. Forwarded used to win when
        // both were present, so a client behind an X-Forwarded-For proxy chose its bucket.
        let a = addr("10.0.0.2", Some("198.51.100.1"), Some("for=192.0.2.1"));
        assert_eq!(a.resolve(&xff), Some("198.51.100.1".parse().unwrap()));
        assert_eq!(a.resolve(&rfc), Some("192.0.2.1".parse().unwrap()));
        // Garbage or `unknown` stops the walk at the last vouched-for address.
        let a = addr("10.0.0.2", Some("garbage, 10.0.0.9"), None);
        assert_eq!(a.resolve(trusted), Some("10.0.0.9".parse().unwrap()));
        // A trusted proxy with no header is itself the client.
        let a = addr("10.0.0.2", None, None);
        assert_eq!(a.resolve(trusted), Some("10.0.0.2".parse().unwrap()));
        // No trusted proxies configured: headers never count.
        let a = addr("10.0.0.2", Some("198.51.100.1"), None);
        assert_eq!(
            a.resolve(&Proxies::default()),
            Some("10.0.0.2".parse().unwrap())
        );
    }

    #[test]
    fn ipv6_clients_share_a_key_per_64() {
        let k = |s: &str| limit_key(Some(s.parse().unwrap()));
        assert_eq!(k("2001:db8:1:2:aaaa::1"), k("2001:db8:1:2:ffff:1:2:3"));
        assert_ne!(k("2001:db8:1:2::1"), k("2001:db8:1:3::1"));
        assert_eq!(k("2001:db8:1:2::1"), "2001:db8:1:2::/64");
        assert_eq!(k("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(k("192.0.2.1"), "192.0.2.1");
        assert_eq!(limit_key(None), "unknown");
    }
}
