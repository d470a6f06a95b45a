//! Endpoint addresses: `struct sockaddr_in` / `sockaddr_in6` bytes <-> [`EpAddr`], node/service
//! resolution, and the loopback aliases of the host's default wire.
//!
//! A MSG endpoint is named by IP and port (the rdma_cm port space). A DGRAM endpoint also
//! needs its UD QP number: it travels inside the standard sockaddr, in `sin_zero` (IPv4:
//! `'D' 'Q'` then the 24-bit QPN big-endian) or in `sin6_flowinfo`/`sin6_scope_id` (IPv6:
//! QPN, marker). The lengths stay those of the plain sockaddrs, so applications treat them as
//! the opaque names `fi_getname` promises.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

pub const SOCKADDR_IN_LEN: usize = 16;
pub const SOCKADDR_IN6_LEN: usize = 28;
const AF_INET: u16 = libc::AF_INET as u16;
const AF_INET6: u16 = libc::AF_INET6 as u16;
const V6_QPN_MARK: u32 = 0x44_51_00_00;

/// An endpoint address: a socket address and, for UD endpoints, the QP number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpAddr {
    pub sa: SocketAddr,
    pub qpn: Option<u32>,
}

impl EpAddr {
    pub fn new(sa: SocketAddr) -> Self {
        EpAddr { sa, qpn: None }
    }
    pub fn with_qpn(sa: SocketAddr, qpn: u32) -> Self {
        EpAddr { sa, qpn: Some(qpn & 0xff_ffff) }
    }

    /// The sockaddr bytes (`sockaddr_in` for IPv4, `sockaddr_in6` for IPv6); `v6` forces
    /// the IPv6 form (IPv4-mapped) for FI_SOCKADDR_IN6 endpoints.
    pub fn to_bytes(&self, v6: bool) -> Vec<u8> {
        match (self.sa, v6) {
            (SocketAddr::V4(a), false) => {
                let mut b = vec![0u8; SOCKADDR_IN_LEN];
                b[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
                b[2..4].copy_from_slice(&a.port().to_be_bytes());
                b[4..8].copy_from_slice(&a.ip().octets());
                if let Some(q) = self.qpn {
                    b[8] = b'D';
                    b[9] = b'Q';
                    b[10..13].copy_from_slice(&q.to_be_bytes()[1..4]);
                }
                b
            }
            (sa, _) => {
                let ip = match sa.ip() {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                let mut b = vec![0u8; SOCKADDR_IN6_LEN];
                b[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
                b[2..4].copy_from_slice(&sa.port().to_be_bytes());
                if let Some(q) = self.qpn {
                    b[4..8].copy_from_slice(&q.to_ne_bytes());
                    b[24..28].copy_from_slice(&V6_QPN_MARK.to_ne_bytes());
                }
                b[8..24].copy_from_slice(&ip.octets());
                b
            }
        }
    }

    /// Parses `sockaddr_in` / `sockaddr_in6` bytes (IPv4-mapped IPv6 becomes IPv4).
    pub fn from_bytes(b: &[u8]) -> Option<EpAddr> {
        if b.len() < 2 {
            return None;
        }
        let fam = u16::from_ne_bytes([b[0], b[1]]);
        if fam == AF_INET && b.len() >= SOCKADDR_IN_LEN {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            let qpn = (b[8] == b'D' && b[9] == b'Q').then(|| u32::from_be_bytes([0, b[10], b[11], b[12]]));
            Some(EpAddr { sa: SocketAddr::V4(SocketAddrV4::new(ip, port)), qpn })
        } else if fam == AF_INET6 && b.len() >= SOCKADDR_IN6_LEN {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            let ip6 = Ipv6Addr::from(o);
            let flow = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
            let mark = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
            let qpn = (mark == V6_QPN_MARK).then_some(flow & 0xff_ffff);
            let sa = match ip6.to_ipv4_mapped() {
                Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
                None => SocketAddr::V6(SocketAddrV6::new(ip6, port, 0, 0)),
            };
            Some(EpAddr { sa, qpn })
        } else {
            None
        }
    }

    /// `fi_av_straddr` / log form: `fi_sockaddr_in://10.77.0.1:4791` (+ `/qpn`).
    pub fn to_string_uri(&self, v6: bool) -> String {
        let scheme = if v6 || self.sa.is_ipv6() { "fi_sockaddr_in6" } else { "fi_sockaddr_in" };
        // an IPv4 address in IN6 form is IPv4-mapped, as libfabric prints it: [::ffff:a.b.c.d]
        let sa = match self.sa {
            SocketAddr::V4(a) if v6 => format!("[::ffff:{}]:{}", a.ip(), a.port()),
            a => a.to_string(),
        };
        match self.qpn {
            Some(q) => format!("{scheme}://{sa}/qpn{q:#x}"),
            None => format!("{scheme}://{sa}"),
        }
    }
}

/// This process's RoCE address and the other end of a point-to-point default wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    pub ip: IpAddr,
    pub peer: Option<IpAddr>,
}

impl Local {
    /// As a source, loopback and unspecified mean this process's address.
    pub fn resolve_src(&self, ip: IpAddr) -> IpAddr {
        if ip.is_loopback() || ip.is_unspecified() {
            self.ip
        } else {
            ip
        }
    }
    /// As a destination, loopback means the peer of the default wire (else ourselves).
    pub fn resolve_dst(&self, ip: IpAddr) -> IpAddr {
        if ip.is_loopback() {
            self.peer.unwrap_or(self.ip)
        } else {
            ip
        }
    }
    /// Whether `ip` (after resolve_src) is one of ours.
    pub fn is_local(&self, ip: IpAddr) -> bool {
        same_ip(self.resolve_src(ip), self.ip)
    }
}

/// Equal addresses, IPv4-mapped IPv6 matching its IPv4 form.
pub fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canon(a) == canon(b)
}

pub fn canon(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(a),
        a => a,
    }
}

/// `node` as an address: an IP literal, `localhost`, or a name the system resolver knows.
pub fn resolve_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(canon(ip));
    }
    if node.eq_ignore_ascii_case("localhost") {
        return Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    use std::net::ToSocketAddrs;
    (node, 0).to_socket_addrs().ok()?.next().map(|s| canon(s.ip()))
}

/// `service` as a port number (numeric only: there is no service database for RoCE).
pub fn parse_service(service: &str) -> Option<u16> {
    service.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_in_round_trip_with_and_without_qpn() {
        let a = EpAddr::new("10.77.0.1:47592".parse().unwrap());
        let b = a.to_bytes(false);
        assert_eq!(b.len(), 16);
        assert_eq!(&b[2..8], &[0xb9, 0xe8, 10, 77, 0, 1]);
        assert_eq!(EpAddr::from_bytes(&b), Some(a));
        let q = EpAddr::with_qpn("10.77.0.2:0".parse().unwrap(), 0x12_3456);
        let b = q.to_bytes(false);
        assert_eq!(&b[8..13], &[b'D', b'Q', 0x12, 0x34, 0x56]);
        assert_eq!(EpAddr::from_bytes(&b), Some(q));
    }

    #[test]
    fn sockaddr_in6_mapped_and_native() {
        let q = EpAddr::with_qpn("10.77.0.2:7".parse().unwrap(), 0x11);
        let b = q.to_bytes(true);
        assert_eq!(b.len(), 28);
        assert_eq!(EpAddr::from_bytes(&b), Some(q));
        let n = EpAddr::new("[fd00::5]:99".parse().unwrap());
        let b = n.to_bytes(false);
        assert_eq!(b.len(), 28);
        assert_eq!(EpAddr::from_bytes(&b), Some(n));
        assert_eq!(EpAddr::from_bytes(&b[..20]), None);
        assert_eq!(EpAddr::from_bytes(&[0u8; 16]), None);
    }

    #[test]
    fn loopback_aliases() {
        let l = Local { ip: "10.77.0.1".parse().unwrap(), peer: Some("10.77.0.2".parse().unwrap()) };
        assert_eq!(l.resolve_src("127.0.0.1".parse().unwrap()), l.ip);
        assert_eq!(l.resolve_src("0.0.0.0".parse().unwrap()), l.ip);
        assert_eq!(l.resolve_dst("127.0.0.1".parse().unwrap()), l.peer.unwrap());
        assert_eq!(l.resolve_dst("::1".parse().unwrap()), l.peer.unwrap());
        assert_eq!(l.resolve_dst("10.9.9.9".parse().unwrap()), "10.9.9.9".parse::<IpAddr>().unwrap());
        let solo = Local { ip: "10.78.0.3".parse().unwrap(), peer: None };
        assert_eq!(solo.resolve_dst("127.0.0.1".parse().unwrap()), solo.ip);
        assert!(l.is_local("::ffff:10.77.0.1".parse().unwrap()));
        assert!(!l.is_local("10.77.0.2".parse().unwrap()));
    }

    #[test]
    fn node_and_service() {
        assert_eq!(resolve_node("10.1.2.3"), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(resolve_node("::ffff:10.1.2.3"), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(resolve_node("localhost"), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(parse_service("47592"), Some(47592));
        assert_eq!(parse_service("http"), None);
    }
}
