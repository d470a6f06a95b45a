//! The address formats droce gives UCX: device address (the GID), droce_ud interface address
//! (the UD QPN), droce_rc endpoint address (QPN, path MTU, initial PSN).

use droce_transport::qp::PathMtu;
use droce_transport::Gid;

pub const DEV_ADDR_LEN: usize = 16;
pub const UD_IFACE_ADDR_LEN: usize = 4;
pub const RC_EP_ADDR_LEN: usize = 8;

/// An RC endpoint address: the QPN (24 bits, little endian) with the path MTU this end allows
/// in its high byte (the IB MTU code, 1 = 256 ... 5 = 4096), then the initial PSN (little
/// endian). Each end connects at the smaller of the two path MTUs, so a rank whose port runs
/// at 1024 (a 1500-byte Ethernet MTU) and one at 4096 (a memif port's default) still agree.
pub fn encode_rc_ep_addr(qpn: u32, psn: u32, mtu: PathMtu) -> [u8; RC_EP_ADDR_LEN] {
    let mut a = [0u8; RC_EP_ADDR_LEN];
    a[..4].copy_from_slice(&((qpn & 0x00ff_ffff) | (mtu as u32) << 24).to_le_bytes());
    a[4..].copy_from_slice(&psn.to_le_bytes());
    a
}

/// (QPN, PSN, path MTU) of an RC endpoint address. A high byte that is no MTU code (0 from
/// a build that did not send one) means 1024, the path MTU every RoCE port supports.
pub fn decode_rc_ep_addr(a: &[u8; RC_EP_ADDR_LEN]) -> (u32, u32, PathMtu) {
    let w = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
    let psn = u32::from_le_bytes([a[4], a[5], a[6], a[7]]);
    let mtu = match w >> 24 {
        1 => PathMtu::Mtu256,
        2 => PathMtu::Mtu512,
        4 => PathMtu::Mtu2048,
        5 => PathMtu::Mtu4096,
        _ => PathMtu::Mtu1024,
    };
    (w & 0x00ff_ffff, psn, mtu)
}
/// The GID (device address) of a host address: IPv4-mapped or IPv6.
pub(super) fn gid_of(ip: std::net::IpAddr) -> [u8; 16] {
    match ip {
        std::net::IpAddr::V4(a) => Gid::from_ipv4(a).0,
        std::net::IpAddr::V6(a) => Gid::from_ipv6(a).0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_ep_addr_carries_the_path_mtu() {
        for mtu in [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048, PathMtu::Mtu4096] {
            let a = encode_rc_ep_addr(0x00ab_cdef, 0x0012_3456, mtu);
            assert_eq!(decode_rc_ep_addr(&a), (0x00ab_cdef, 0x0012_3456, mtu));
        }
        // QPN bits above 24 never leak into the MTU byte
        let a = encode_rc_ep_addr(0xffff_ffff, 7, PathMtu::Mtu512);
        assert_eq!(decode_rc_ep_addr(&a), (0x00ff_ffff, 7, PathMtu::Mtu512));
        // an address without an MTU code (high byte 0) connects at 1024
        let mut old = [0u8; RC_EP_ADDR_LEN];
        old[..4].copy_from_slice(&0x0000_0011u32.to_le_bytes());
        assert_eq!(decode_rc_ep_addr(&old), (0x11, 0, PathMtu::Mtu1024));
        // the smaller end wins
        let (_, _, peer) = decode_rc_ep_addr(&encode_rc_ep_addr(1, 1, PathMtu::Mtu1024));
        assert_eq!(PathMtu::Mtu4096.min(peer), PathMtu::Mtu1024);
    }
}
