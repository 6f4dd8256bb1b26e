//! SSRF guard. A webhook URL is the merchant's input, so the server must not become a proxy
//! into its own network: the host is resolved, every address is classified, and delivery
//! connects only to the addresses that passed (reqwest `resolve_to_addrs` pins them, so a
//! second DNS answer cannot swap in an internal address between check and connect).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::Url;

/// Which non-public destinations configuration allows. Cloud metadata, multicast,
/// unspecified, broadcast and reserved addresses are never allowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Loopback (127/8, ::1): local development and tests.
    pub allow_loopback: bool,
    /// RFC 1918, CGNAT, unique-local and link-local: a private deployment's own network.
    pub allow_private: bool,
}

/// What kind of address an IP is, for the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// A public internet address: always allowed.
    Public,
    /// Loopback (127/8, ::1).
    Loopback,
    /// RFC 1918, CGNAT, unique-local and other private ranges.
    Private,
    /// Link-local (169.254/16, fe80::/10).
    LinkLocal,
    /// A cloud metadata service address: never allowed.
    Metadata,
    /// Unspecified, multicast, broadcast, documentation or reserved: never allowed.
    Forbidden,
}

/// Why a URL may not be delivered to.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Blocked {
    /// The URL has no host to resolve.
    #[error("webhook URL has no host")]
    NoHost,
    /// The same words as [`Blocked::Address`]: whoever sets a URL must not learn whether a
    /// name exists in our internal DNS (an oracle) — only that it is not deliverable.
    #[error("{0} does not resolve to a public address")]
    Unresolvable(String),
    /// What the address was is for our logs (`Debug`), never the message (`Display`), which
    /// merchants see in the dashboard.
    #[error("{host} does not resolve to a public address")]
    Address {
        /// The URL's host.
        host: String,
        /// The first address it resolved to that the policy refuses.
        addr: IpAddr,
        /// What kind of address that is.
        class: AddressClass,
    },
}

/// Classifies one address. IPv4-mapped/compatible and NAT64 IPv6 addresses are judged by
/// the IPv4 address inside them, since that is where the packets go.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        // AWS/GCP/Azure metadata, and Alibaba's.
        return AddressClass::Metadata;
    }
    match (a, b) {
        (127, _) => AddressClass::Loopback,
        (10, _) | (192, 168) => AddressClass::Private,
        (172, 16..=31) => AddressClass::Private,
        (100, 64..=127) => AddressClass::Private, // CGNAT
        (169, 254) => AddressClass::LinkLocal,
        (0, _) => AddressClass::Forbidden, // "this network", incl. 0.0.0.0
        (224..=255, _) => AddressClass::Forbidden, // multicast, reserved, broadcast
        (198, 18..=19) => AddressClass::Forbidden, // benchmarking
        (192, 0) if c == 0 || c == 2 => AddressClass::Forbidden, // IETF, TEST-NET-1
        (198, 51) if c == 100 => AddressClass::Forbidden, // TEST-NET-2
        (203, 0) if c == 113 => AddressClass::Forbidden, // TEST-NET-3
        _ => AddressClass::Public,
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    let seg = ip.segments();
    if ip == Ipv6Addr::LOCALHOST {
        AddressClass::Loopback
    } else if ip == Ipv6Addr::UNSPECIFIED || seg[0] & 0xff00 == 0xff00 {
        AddressClass::Forbidden // unspecified, multicast
    } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        AddressClass::Metadata // AWS IMDS over IPv6
    } else if seg[0] & 0xfe00 == 0xfc00 || seg[0] & 0xffc0 == 0xfec0 {
        AddressClass::Private // unique local, deprecated site-local
    } else if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1 {
        // RFC 8215's local-use NAT64 prefix 64:ff9b:1::/48: translated to IPv4 inside the
        // operator's own network, embedded at a prefix length we cannot know — private.
        AddressClass::Private
    } else if seg[0] & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if seg[0] == 0x2001 && seg[1] == 0x0db8 || seg[0] == 0x0100 && seg[1..4] == [0; 3] {
        AddressClass::Forbidden // documentation, discard-only
    } else {
        AddressClass::Public
    }
}

/// The IPv4 address an IPv6 address stands for: mapped (::ffff:a.b.c.d), compatible
/// (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:ab:cd::).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let tail = || {
        Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        )
    };
    if seg[..5] == [0; 5] && seg[5] == 0xffff {
        return Some(tail());
    }
    if seg[..6] == [0; 6] && ip != Ipv6Addr::LOCALHOST && ip != Ipv6Addr::UNSPECIFIED {
        return Some(tail());
    }
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0; 4] {
        return Some(tail());
    }
    if seg[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        ));
    }
    None
}

/// How long a webhook host's DNS lookup may take.
pub const DNS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl AddressPolicy {
    /// Whether this policy lets a delivery connect to `ip`.
    pub fn allows(&self, ip: IpAddr) -> Result<(), AddressClass> {
        match classify(ip) {
            AddressClass::Public => Ok(()),
            AddressClass::Loopback if self.allow_loopback || self.allow_private => Ok(()),
            AddressClass::Private | AddressClass::LinkLocal if self.allow_private => Ok(()),
            class => Err(class),
        }
    }

    /// Resolves the URL's host and checks every address it resolves to. Any forbidden
    /// address fails the whole URL (a mixed answer is a rebinding attempt or a
    /// misconfiguration either way). Returns the checked addresses to pin the connection to.
    pub async fn resolve(&self, url: &Url) -> Result<Vec<SocketAddr>, Blocked> {
        let host = url.host_str().ok_or(Blocked::NoHost)?;
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs: Vec<SocketAddr> = match url.host() {
            Some(url::Host::Ipv4(ip)) => vec![SocketAddr::new(ip.into(), port)],
            Some(url::Host::Ipv6(ip)) => vec![SocketAddr::new(ip.into(), port)],
            // Bounded: a resolver that never answers must not hold a dispatcher's slot.
            Some(url::Host::Domain(d)) => {
                tokio::time::timeout(DNS_TIMEOUT, tokio::net::lookup_host((d, port)))
                    .await
                    .map_err(|_| Blocked::Unresolvable(d.to_string()))?
                    .map_err(|_| Blocked::Unresolvable(d.to_string()))?
                    .collect()
            }
            None => return Err(Blocked::NoHost),
        };
        if addrs.is_empty() {
            return Err(Blocked::Unresolvable(host.to_string()));
        }
        for a in &addrs {
            if let Err(class) = self.allows(a.ip()) {
                return Err(Blocked::Address {
                    host: host.to_string(),
                    addr: a.ip(),
                    class,
                });
            }
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn public_addresses_pass_and_internal_ones_are_classified() {
        let cases = [
            ("8.8.8.8", AddressClass::Public),
            ("2606:4700:4700::1111", AddressClass::Public),
            ("127.0.0.1", AddressClass::Loopback),
            ("127.9.9.9", AddressClass::Loopback),
            ("::1", AddressClass::Loopback),
            ("10.1.2.3", AddressClass::Private),
            ("172.16.0.1", AddressClass::Private),
            ("172.31.255.255", AddressClass::Private),
            ("192.168.1.1", AddressClass::Private),
            ("100.64.0.1", AddressClass::Private),
            ("fd12::1", AddressClass::Private),
            ("169.254.1.1", AddressClass::LinkLocal),
            ("fe80::1", AddressClass::LinkLocal),
            ("169.254.169.254", AddressClass::Metadata),
            ("fd00:ec2::254", AddressClass::Metadata),
            ("0.0.0.0", AddressClass::Forbidden),
            ("::", AddressClass::Forbidden),
            ("224.0.0.1", AddressClass::Forbidden),
            ("255.255.255.255", AddressClass::Forbidden),
            ("ff02::1", AddressClass::Forbidden),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("::ffff:169.254.169.254", AddressClass::Metadata),
            ("::ffff:10.0.0.1", AddressClass::Private),
            ("64:ff9b::a00:1", AddressClass::Private),
            // Issue 46, point 18: RFC 8215's local-use prefix is private whatever it embeds.
            ("64:ff9b:1::808:808", AddressClass::Private),
            ("64:ff9b:1:a00:1::", AddressClass::Private),
            ("2002:c0a8:0101::1", AddressClass::Private),
            ("172.32.0.1", AddressClass::Public),
            ("100.128.0.1", AddressClass::Public),
        ];
        for (s, want) in cases {
            assert_eq!(classify(ip(s)), want, "{s}");
        }
    }

    #[test]
    fn policy_flags_open_only_their_own_classes() {
        let strict = AddressPolicy::default();
        let loopback = AddressPolicy {
            allow_loopback: true,
            allow_private: false,
        };
        let private = AddressPolicy {
            allow_loopback: false,
            allow_private: true,
        };
        assert!(strict.allows(ip("127.0.0.1")).is_err());
        assert!(loopback.allows(ip("127.0.0.1")).is_ok());
        assert!(loopback.allows(ip("10.0.0.1")).is_err());
        assert!(private.allows(ip("10.0.0.1")).is_ok());
        for p in [strict, loopback, private] {
            assert!(p.allows(ip("169.254.169.254")).is_err());
            assert!(p.allows(ip("0.0.0.0")).is_err());
            assert!(p.allows(ip("93.184.215.14")).is_ok());
        }
    }

    #[tokio::test]
    async fn hostname_resolving_to_loopback_is_refused_unless_allowed() {
        let url = Url::parse("http://localhost:9/hook").unwrap();
        let err = AddressPolicy::default().resolve(&url).await.unwrap_err();
        assert!(
            matches!(
                err,
                Blocked::Address {
                    class: AddressClass::Loopback,
                    ..
                }
            ),
            "{err}"
        );
        let allowed = AddressPolicy {
            allow_loopback: true,
            allow_private: false,
        };
        let addrs = allowed.resolve(&url).await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 9));
    }

    /// Issue 46, point 18: the message never names the address a host resolved to, and an
    /// internal name reads the same as one that does not exist.
    #[tokio::test]
    async fn refusals_do_not_reveal_what_a_name_resolves_to() {
        let internal = AddressPolicy::default()
            .resolve(&Url::parse("http://localhost:9/hook").unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            !internal.contains("127.0.0.1") && !internal.contains("::1"),
            "{internal}"
        );
        assert!(!internal.contains("Loopback"), "{internal}");
        let missing = AddressPolicy::default()
            .resolve(&Url::parse("http://no-such-host.invalid/hook").unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            internal.replace("localhost", "HOST"),
            missing.replace("no-such-host.invalid", "HOST")
        );
    }

    #[tokio::test]
    async fn ip_literal_urls_are_checked_without_dns() {
        let url = Url::parse("https://[::ffff:10.0.0.1]/").unwrap();
        assert!(AddressPolicy::default().resolve(&url).await.is_err());
        let url = Url::parse("https://8.8.8.8/").unwrap();
        assert_eq!(
            AddressPolicy::default().resolve(&url).await.unwrap(),
            vec!["8.8.8.8:443".parse().unwrap()]
        );
    }
}
