//! Who is calling: an API key, else the caller's subnet.
//!
//! An API key when the request has one; otherwise the caller's subnet, /24
//! for IPv4 and /64 for IPv6, so that one address rotating within its block
//! gains nothing, and the descriptor key says which tier matched.

use std::net::IpAddr;

/// Descriptor key used for API keys.
pub const API_KEY: &str = "api_key";
/// Descriptor key used for anonymous callers.
pub const SUBNET: &str = "subnet";

/// The `(descriptor key, value)` that identifies a request's caller.
///
/// `("api_key", key)` when `api_key` is present and non-empty, else
/// `("subnet", "a.b.c.0/24")` or `("subnet", "x:x:x:x::/64")`. An
/// IPv4-mapped IPv6 address counts as IPv4.
pub fn caller(api_key: Option<&str>, ip: IpAddr) -> (&'static str, String) {
    if let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) {
        return (API_KEY, key.to_owned());
    }
    (SUBNET, subnet(ip))
}

/// The /24 (IPv4) or /64 (IPv6) block of `ip`, in CIDR notation.
pub fn subnet(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => subnet(IpAddr::V4(v4)),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        IpAddr::V4(v4) => {
            let o = v4.octets();
            format!("{}.{}.{}.0/24", o[0], o[1], o[2])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_first_then_subnet() {
        let ip: IpAddr = "203.0.113.77".parse().unwrap();
        assert_eq!(caller(Some("k-1"), ip), ("api_key", "k-1".to_owned()));
        assert_eq!(
            caller(Some("  "), ip),
            ("subnet", "203.0.113.0/24".to_owned())
        );
        assert_eq!(
            caller(None, "2001:db8:1:2:3:4:5:6".parse().unwrap()).1,
            "2001:db8:1:2::/64"
        );
        assert_eq!(subnet("::ffff:10.1.2.3".parse().unwrap()), "10.1.2.0/24");
    }
}
