//! Whether a source address can name one probe: an address of a local scope (a private
//! network, shared CGNAT space, link-local, unique-local, loopback or unspecified) is a
//! host's own interface behind NAT, which thousands of unrelated probes share
//! (`192.168.1.x`, `10.x`). Grouping by such addresses merges their histories, so a
//! map task whose rows are mostly keyed so fails the job ([`LOCAL_SOURCE_SHARE_LIMIT`])
//! unless `[input] allow_private_sources` says the data really is keyed so.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A map task fails when more than this share of its valid rows have a local source
/// (a majority: a few private sources in real data are kept).
pub const LOCAL_SOURCE_SHARE_LIMIT: f64 = 0.5;

/// The local scope an address belongs to, or `None` for an address that can name a
/// host on its own (a public one; also documentation, benchmarking and multicast
/// ranges, which are no shared interface address).
pub fn local_scope(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(a) => v4_scope(a),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => v4_scope(v4),
            None => v6_scope(a),
        },
    }
}

fn v4_scope(a: Ipv4Addr) -> Option<&'static str> {
    let [first, second, ..] = a.octets();
    if a.is_private() {
        Some("private (RFC 1918)")
    } else if first == 100 && (second & 0xc0) == 64 {
        Some("shared / CGNAT (RFC 6598)")
    } else if a.is_link_local() {
        Some("link-local")
    } else if a.is_loopback() {
        Some("loopback")
    } else if a.is_unspecified() {
        Some("unspecified")
    } else {
        None
    }
}

fn v6_scope(a: Ipv6Addr) -> Option<&'static str> {
    if a.is_unique_local() {
        Some("unique-local (RFC 4193)")
    } else if a.is_unicast_link_local() {
        Some("link-local")
    } else if a.is_loopback() {
        Some("loopback")
    } else if a.is_unspecified() {
        Some("unspecified")
    } else {
        None
    }
}

/// Counts a map task's valid rows by whether their source is local, and keeps the
/// first local source seen (for the error that names the problem).
#[derive(Debug, Default, Clone)]
pub struct LocalSources {
    pub rows: u64,
    pub local_rows: u64,
    pub example: Option<IpAddr>,
}

impl LocalSources {
    /// Whether the local rows are more than [`LOCAL_SOURCE_SHARE_LIMIT`] of the rows.
    pub fn too_many(&self) -> bool {
        self.rows > 0 && self.local_rows as f64 > self.rows as f64 * LOCAL_SOURCE_SHARE_LIMIT
    }

    /// What a user whose rows are mostly keyed by local addresses is told: the share,
    /// an example, why it is wrong, and the two ways out.
    pub fn explain(&self) -> String {
        let example = self
            .example
            .map(|a| {
                let scope = local_scope(a).unwrap_or("local");
                format!(" (e.g. {a}, {scope})")
            })
            .unwrap_or_default();
        format!(
            "{} of {} valid rows ({:.1} %) have a source address of a local scope{example}: \
             such an address is a probe's interface behind NAT, shared by unrelated probes, \
             and grouping by it merges their histories. Key the input by the public address \
             (RIPE Atlas's `from`, BigQuery's `synth_addr`: [input] columns.src_addr = \"from\"), \
             or set [input] allow_private_sources = true if the data really is keyed so",
            self.local_rows,
            self.rows,
            100.0 * self.local_rows as f64 / self.rows.max(1) as f64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(text: &str) -> Option<&'static str> {
        local_scope(text.parse().unwrap())
    }

    #[test]
    fn private_shared_link_local_unique_local_and_loopback_addresses_are_local() {
        for local in [
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.7",
            "100.64.0.1",
            "100.127.255.254",
            "169.254.3.4",
            "127.0.0.1",
            "0.0.0.0",
            "fd00::1",
            "fc12:3456::1",
            "fe80::1",
            "::1",
            "::",
            "::ffff:192.168.0.1",
        ] {
            assert!(scope(local).is_some(), "{local} is local");
        }
    }

    #[test]
    fn public_documentation_and_neighbouring_addresses_are_not_local() {
        for public in [
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "11.0.0.1",
            "192.0.2.1",
            "2001:db8::1",
            "2a00:1450:4001:80b::200e",
            "fec0::1",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(scope(public), None, "{public} is not local");
        }
    }

    #[test]
    fn a_majority_of_local_rows_is_too_many_and_half_is_not() {
        let count = |rows, local_rows| LocalSources {
            rows,
            local_rows,
            example: None,
        };
        assert!(!count(0, 0).too_many());
        assert!(!count(10, 5).too_many());
        assert!(count(10, 6).too_many());
        assert!(count(1, 1).too_many());
        let explained = LocalSources {
            example: Some("192.168.1.7".parse().unwrap()),
            ..count(4, 3)
        }
        .explain();
        assert!(
            explained.starts_with("3 of 4 valid rows (75.0 %)"),
            "{explained}"
        );
        assert!(explained.contains("192.168.1.7, private"), "{explained}");
        assert!(
            explained.contains("allow_private_sources = true"),
            "{explained}"
        );
        assert!(
            explained.contains("columns.src_addr = \"from\""),
            "{explained}"
        );
    }
}
