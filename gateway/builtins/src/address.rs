//! Which IP addresses `web_fetch` may connect to: public ones only, unless
//! private addresses are allowed in the configuration.
//!
//! The check runs where the address is known for sure: on the IP literal of
//! a URL, and in the HTTP client's DNS resolver on every resolved address
//! (so a name resolving to 127.0.0.1, or a redirect to one, is refused
//! before any connection is made).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// `true` for an address on the public internet: not loopback, private,
/// link-local, shared (CGNAT), unspecified, multicast, broadcast,
/// documentation, benchmarking or reserved, also when embedded in an IPv6
/// address (IPv4-mapped, IPv4-compatible, NAT64, 6to4).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                   // "this network", 0.0.0.0/8
        || a == 10                             // private
        || a == 127                            // loopback
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254)              // link-local (cloud metadata)
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0)      // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)      // documentation
        || (a == 192 && b == 168)              // private
        || (a == 198 && (b == 18 || b == 19))  // benchmarking
        || (a == 198 && b == 51 && c == 100)   // documentation
        || (a == 203 && b == 0 && c == 113)    // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96).
    if (s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_unspecified() && !ip.is_loopback())
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        let [.., hi, lo] = s;
        return is_public_v4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    }
    // 6to4 (2002:a.b.c.d::/48).
    if s[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8)) // documentation
}

/// Decides which addresses may be connected to.
#[derive(Clone)]
pub struct AddressPolicy {
    allow: Arc<dyn Fn(IpAddr) -> bool + Send + Sync>,
    describe: &'static str,
}

impl fmt::Debug for AddressPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe)
    }
}

impl AddressPolicy {
    /// Public addresses only, or everything when `allow_private`.
    pub fn new(allow_private: bool) -> AddressPolicy {
        if allow_private {
            AddressPolicy {
                allow: Arc::new(|_| true),
                describe: "any address",
            }
        } else {
            AddressPolicy {
                allow: Arc::new(is_public),
                describe: "public addresses only",
            }
        }
    }

    /// A policy of one's own (tests).
    pub fn custom(allow: impl Fn(IpAddr) -> bool + Send + Sync + 'static) -> AddressPolicy {
        AddressPolicy {
            allow: Arc::new(allow),
            describe: "custom",
        }
    }

    pub fn allows(&self, ip: IpAddr) -> bool {
        (self.allow)(ip)
    }
}

/// A connection the policy refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} a private, loopback, link-local or otherwise non-public address; web_fetch refuses those (set `builtins.web_fetch.allow_private` to allow them)",
    self.subject()
)]
pub struct Refusal {
    /// The host as the URL gives it (a name or an address).
    pub host: String,
    pub ip: IpAddr,
}

impl Refusal {
    fn subject(&self) -> String {
        let literal = self
            .host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok();
        if literal {
            format!("{} is", self.ip)
        } else {
            format!("{} resolves to {},", self.host, self.ip)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let private = [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.5",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2001:db8::1",
        ];
        for ip in private {
            assert!(!is_public(ip.parse().unwrap()), "{ip} should be private");
        }
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "93.184.216.34",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::",
        ];
        for ip in public {
            assert!(is_public(ip.parse().unwrap()), "{ip} should be public");
        }
    }
}
