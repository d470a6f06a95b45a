//! The address formats droce gives UCX: device address (the GID), droce_ud interface address
//! (the UD QPN), droce_rc endpoint address (QPN, path MTU, initial PSN, extensions offered).

use droce_transport::qp::PathMtu;
use droce_transport::Gid;

pub const DEV_ADDR_LEN: usize = 16;
pub const UD_IFACE_ADDR_LEN: usize = 4;
pub const RC_EP_ADDR_LEN: usize = 8;

/// An RC endpoint address: the QPN (24 bits, little endian) with the path MTU this end allows
/// in its high byte (the IB MTU code, 1 = 256 ... 5 = 4096), then the initial PSN (24 bits,
/// little endian) with the transport extensions this end offers in its high byte
/// ([`RcEpAddr::SELECTIVE_REPEAT`]). Each end connects at the smaller of the two path MTUs, so
/// a rank whose port runs at 1024 (a 1500-byte Ethernet MTU) and one at 4096 (a memif port's
/// default) still agree; an extension is used only when both ends offer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcEpAddr {
    pub qpn: u32,
    pub psn: u32,
    pub mtu: PathMtu,
    /// This end offers selective repeat (`QpAttr::selective_repeat`, docs/selective-repeat.md).
    pub selective_repeat: bool,
}

impl RcEpAddr {
    /// Bit of the extensions byte (the PSN word's high byte). A build from before the byte
    /// sent zero there (its PSNs are 24-bit) and reads the PSN through `Psn::new`, which drops
    /// the byte: old and new ends connect, with no extension.
    pub const SELECTIVE_REPEAT: u8 = 1 << 0;

    pub fn encode(&self) -> [u8; RC_EP_ADDR_LEN] {
        let ext = if self.selective_repeat { Self::SELECTIVE_REPEAT } else { 0 };
        let mut a = [0u8; RC_EP_ADDR_LEN];
        a[..4].copy_from_slice(&((self.qpn & 0x00ff_ffff) | (self.mtu as u32) << 24).to_le_bytes());
        a[4..].copy_from_slice(&((self.psn & 0x00ff_ffff) | (ext as u32) << 24).to_le_bytes());
        a
    }

    /// A high byte of the QPN word that is no MTU code (0 from a build that did not send one)
    /// means 1024, the path MTU every RoCE port supports; unknown extension bits are ignored.
    pub fn decode(a: &[u8; RC_EP_ADDR_LEN]) -> RcEpAddr {
        let w = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
        let p = u32::from_le_bytes([a[4], a[5], a[6], a[7]]);
        let mtu = match w >> 24 {
            1 => PathMtu::Mtu256,
            2 => PathMtu::Mtu512,
            4 => PathMtu::Mtu2048,
            5 => PathMtu::Mtu4096,
            _ => PathMtu::Mtu1024,
        };
        RcEpAddr { qpn: w & 0x00ff_ffff, psn: p & 0x00ff_ffff, mtu, selective_repeat: (p >> 24) as u8 & Self::SELECTIVE_REPEAT != 0 }
    }
}

/// Whether a QP connected to `peer` runs selective repeat: both ends offer it.
pub fn use_selective_repeat(mine: bool, peer: &RcEpAddr) -> bool {
    mine && peer.selective_repeat
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

    fn addr(qpn: u32, psn: u32, mtu: PathMtu, selective_repeat: bool) -> RcEpAddr {
        RcEpAddr { qpn, psn, mtu, selective_repeat }
    }

    #[test]
    fn rc_ep_addr_carries_the_path_mtu() {
        for mtu in [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048, PathMtu::Mtu4096] {
            for sr in [false, true] {
                let a = addr(0x00ab_cdef, 0x0012_3456, mtu, sr);
                assert_eq!(RcEpAddr::decode(&a.encode()), a);
            }
        }
        // QPN bits above 24 never leak into the MTU byte, PSN bits never into the extensions
        let a = addr(0xffff_ffff, 0xffff_ffff, PathMtu::Mtu512, false).encode();
        assert_eq!(RcEpAddr::decode(&a), addr(0x00ff_ffff, 0x00ff_ffff, PathMtu::Mtu512, false));
        // an address without an MTU code (high byte 0) connects at 1024
        let mut old = [0u8; RC_EP_ADDR_LEN];
        old[..4].copy_from_slice(&0x0000_0011u32.to_le_bytes());
        assert_eq!(RcEpAddr::decode(&old), addr(0x11, 0, PathMtu::Mtu1024, false));
        // the smaller end wins
        let peer = RcEpAddr::decode(&addr(1, 1, PathMtu::Mtu1024, true).encode()).mtu;
        assert_eq!(PathMtu::Mtu4096.min(peer), PathMtu::Mtu1024);
    }

    #[test]
    fn rc_ep_addr_carries_the_selective_repeat_offer_in_the_psn_high_byte() {
        let with = addr(0x12, 0x00ab_cdef, PathMtu::Mtu4096, true).encode();
        let without = addr(0x12, 0x00ab_cdef, PathMtu::Mtu4096, false).encode();
        // the same 8 bytes but the PSN word's high byte
        assert_eq!(with[..7], without[..7]);
        assert_eq!((with[7], without[7]), (RcEpAddr::SELECTIVE_REPEAT, 0));
        assert!(RcEpAddr::decode(&with).selective_repeat);
        assert!(!RcEpAddr::decode(&without).selective_repeat);
        // what a build from before the byte sent: 24-bit PSN, zero high byte: no offer
        let mut old = [0u8; RC_EP_ADDR_LEN];
        old[..4].copy_from_slice(&(0x0000_0012u32 | 5 << 24).to_le_bytes());
        old[4..].copy_from_slice(&0x00ab_cdefu32.to_le_bytes());
        assert_eq!(RcEpAddr::decode(&old), addr(0x12, 0x00ab_cdef, PathMtu::Mtu4096, false));
        // what such a build reads from ours: the PSN goes through Psn::new, which keeps 24 bits
        let psn_word = u32::from_le_bytes([with[4], with[5], with[6], with[7]]);
        assert_eq!(droce_transport::Psn::new(psn_word).value(), 0x00ab_cdef);
        // unknown extension bits are no offer
        let mut other = without;
        other[7] = 0xfe;
        assert!(!RcEpAddr::decode(&other).selective_repeat);
        assert_eq!(RcEpAddr::decode(&other).psn, 0x00ab_cdef);
    }

    #[test]
    fn selective_repeat_only_when_both_ends_offer_it() {
        for (mine, theirs) in [(false, false), (false, true), (true, false), (true, true)] {
            let peer = RcEpAddr::decode(&addr(7, 9, PathMtu::Mtu1024, theirs).encode());
            assert_eq!(use_selective_repeat(mine, &peer), mine && theirs);
        }
    }
}
