//! Address parsing and the canonical text form.
//!
//! A probe's identity is the canonical text of its address: Rust's `Display` of
//! `Ipv4Addr`/`Ipv6Addr` (dotted quad; RFC 5952 lowercase, compressed IPv6), the same
//! text Python's `ipaddress` prints. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are
//! the IPv4 address they carry, so one host never has two spellings. The partition,
//! split and `src_id` hashes are taken over this text.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};

/// Parses an address strictly (no surrounding spaces, no zone id) and canonicalises
/// IPv4-mapped IPv6 to IPv4.
pub fn parse_addr(text: &str) -> Result<IpAddr> {
    if text.is_empty() {
        return Err(Error::Input("empty address".into()));
    }
    let addr: IpAddr = text
        .parse()
        .map_err(|_| Error::Input(format!("not an IP address: {text:?}")))?;
    Ok(canonical(addr))
}

/// IPv4-mapped IPv6 becomes IPv4; everything else is unchanged.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// 4 or 6.
pub fn ip_version(addr: &IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 6,
    }
}

/// Address bytes in network order (4 or 16).
pub fn addr_bytes(addr: &IpAddr, out: &mut Vec<u8>) {
    match addr {
        IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
    }
}

/// Address bytes in network order (4 or 16), as a new vector.
pub fn addr_octets(addr: &IpAddr) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    addr_bytes(addr, &mut out);
    out
}

/// The address held in 4 or 16 network-order bytes.
pub fn addr_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes)
            .ok()
            .map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        16 => <[u8; 16]>::try_from(bytes)
            .ok()
            .map(|b| IpAddr::V6(Ipv6Addr::from(b))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_canonicalises() {
        assert_eq!(parse_addr("192.0.2.1").unwrap().to_string(), "192.0.2.1");
        assert_eq!(
            parse_addr("2001:DB8:0:0::1").unwrap().to_string(),
            "2001:db8::1"
        );
        let mapped = parse_addr("::ffff:192.0.2.1").unwrap();
        assert_eq!(mapped, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(ip_version(&mapped), 4);
        // IPv4-compatible (deprecated) stays IPv6.
        assert_eq!(ip_version(&parse_addr("::192.0.2.1").unwrap()), 6);
    }

    #[test]
    fn rejects_bad_text() {
        for bad in [
            "",
            " 192.0.2.1",
            "192.0.2.1 ",
            "192.0.2",
            "256.0.0.1",
            "fe80::1%eth0",
            "x",
            "1.2.3.4/24",
        ] {
            let err = parse_addr(bad).unwrap_err().to_string();
            assert!(err.contains("address"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn bytes_round_trip() {
        for text in ["10.1.2.3", "2001:db8::42"] {
            let a = parse_addr(text).unwrap();
            let mut b = Vec::new();
            addr_bytes(&a, &mut b);
            assert_eq!(addr_from_bytes(&b), Some(a));
        }
        assert_eq!(addr_from_bytes(&[1, 2, 3]), None);
    }
}
