//! Which addresses are not public internet addresses: the one classification every outbound
//! path that a request or a model can aim (web_fetch, webhook targets, a session's notifyUrl)
//! checks before it connects.
//!
//! The standard library's `is_global` is not stable yet, so this follows IANA's special-purpose
//! registries with the stable methods where they exist. An IPv6 address that carries an IPv4
//! address the network will reach it by (IPv4-mapped, NAT64's well-known prefix, 6to4) is
//! classified by that IPv4 address; the other embedding forms (IPv4-compatible, SIIT's
//! IPv4-translated, Teredo) are not routed on the internet, so they are non-public whatever they
//! carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is not a public internet address.
pub fn is_non_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_non_public_v4(v4),
        IpAddr::V6(v6) => is_non_public_v6(v6),
    }
}

fn is_non_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_unspecified()
        || v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_broadcast()
        || v4.is_documentation()
        || v4.is_multicast()
        || a == 0 // "this network" 0/8
        || (a == 100 && (b & 0xc0) == 64) // shared address space (CGNAT) 100.64/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments 192.0.0/24
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast 192.88.99/24
        || (a == 198 && (b & 0xfe) == 18) // benchmarking 198.18/15
        || a >= 240 // reserved 240/4
}

fn is_non_public_v6(v6: Ipv6Addr) -> bool {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return is_non_public_v4(v4);
    }
    if let Some(v4) = embedded_v4_reached_through(v6) {
        return is_non_public_v4(v4);
    }
    let s = v6.segments();
    // Only 2000::/3 is allocated for global unicast: everything else (the unspecified and
    // loopback addresses, IPv4-compatible ::/96, SIIT's ::ffff:0:0:0/96, NAT64's local-use
    // 64:ff9b:1::/48, the discard-only 100::/64, unique local fc00::/7, link-local fe80::/10,
    // site-local fec0::/10, multicast ff00::/8) is special-purpose or reserved.
    if (s[0] & 0xe000) != 0x2000 {
        return true;
    }
    let ietf_assignments = s[1] < 0x0200; // 2001::/23, Teredo 2001::/32 included
    let documentation = s[1] == 0x0db8; // 2001:db8::/32
    (s[0] == 0x2001 && (ietf_assignments || documentation))
        || (s[0] == 0x3fff && (s[1] & 0xf000) == 0) // documentation 3fff::/20
}

/// The IPv4 address a NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address reaches.
fn embedded_v4_reached_through(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let o = v6.octets();
    let s = v6.segments();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::is_non_public;

    #[test]
    fn non_public_addresses_are_recognized() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.5",
            "169.254.1.1",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "198.18.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fd00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "100::1",
            "2001:db8::1",
            "2001::1",
            "3fff::1",
            "64:ff9b:1::1",
            // IPv4 embedded: mapped, compatible, SIIT's translated, NAT64, 6to4.
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::8.8.8.8",
            "::ffff:0:127.0.0.1",
            "::ffff:0:8.8.8.8",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2002:a00:1::1",
            "2002:c0a8:101::1",
        ] {
            assert!(is_non_public(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "93.184.216.34",
            "8.8.8.8",
            "1.1.1.1",
            "100.128.0.1",
            "192.0.1.1",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
        ] {
            assert!(!is_non_public(a.parse().unwrap()), "{a}");
        }
    }
}
