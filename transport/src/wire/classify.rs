//! What a received Ethernet frame is, from the eth / IPv4 / IPv6 / UDP views: the one RX
//! demultiplexing decision of the engine, run per frame at line rate (no allocation, only
//! the header fields the decision needs, no checksum).

use super::eth::{self, EtherType, EthernetFrame};
use super::icmpv6::PROTOCOL_ICMPV6;
use super::ipv4::{self, Ipv4Packet, PROTOCOL_UDP};
use super::ipv6::{self, Ipv6Packet};
use super::udp::{self, UdpPacket, ROCE_V2_PORT};
use std::net::IpAddr;

/// The class of a frame, with what the receive path needs to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Shorter than its headers say (or than an Ethernet / IP header).
    Truncated,
    /// ARP (the ARP packet is not checked).
    Arp,
    /// ICMPv6 (an ND message or another): `len` is the frame length without Ethernet padding.
    Icmpv6 { len: usize },
    /// UDP to port 4791 over IPv4 (`ipv6` false; the header checksum is not checked) or IPv6.
    /// `udp`: offset of the UDP header; `len`: the frame length without Ethernet padding.
    RoceV2 { ipv6: bool, udp: usize, len: usize },
    /// Anything else: another ethertype or protocol, a malformed IP header.
    Other,
}

impl FrameKind {
    /// Offset of the BTH of a RoCEv2 frame.
    pub fn bth_offset(&self) -> Option<usize> {
        match *self {
            FrameKind::RoceV2 { udp, .. } => Some(udp + udp::HEADER_LEN),
            _ => None,
        }
    }

    /// Whether a frame of this kind is one the engine deals with (ARP, ICMPv6, RoCEv2).
    pub fn is_engine_frame(&self) -> bool {
        matches!(self, FrameKind::Arp | FrameKind::Icmpv6 { .. } | FrameKind::RoceV2 { .. })
    }
}

/// Classifies an Ethernet frame (without FCS, possibly padded).
#[inline]
pub fn classify(frame: &[u8]) -> FrameKind {
    if frame.len() < eth::HEADER_LEN {
        return FrameKind::Truncated;
    }
    let l3 = &frame[eth::HEADER_LEN..];
    match EthernetFrame::new_unchecked(frame).ethertype() {
        EtherType::Arp => FrameKind::Arp,
        EtherType::Ipv4 => classify_ipv4(l3),
        EtherType::Ipv6 => classify_ipv6(l3),
        _ => FrameKind::Other,
    }
}

#[inline]
fn classify_ipv4(l3: &[u8]) -> FrameKind {
    if l3.len() < ipv4::HEADER_LEN {
        return FrameKind::Truncated;
    }
    // Only fixed-header fields are read until the lengths are known to be consistent; the
    // views are cut to their header length so that the compiler drops the bounds checks.
    let ip = Ipv4Packet::new_unchecked(&l3[..ipv4::HEADER_LEN]);
    let (hl, total) = (ip.header_len() as usize, ip.total_len() as usize);
    if ip.version() != 4 || hl < ipv4::HEADER_LEN || total < hl + udp::HEADER_LEN {
        return FrameKind::Other;
    }
    if total > l3.len() {
        return FrameKind::Truncated;
    }
    if ip.next_header() != PROTOCOL_UDP || UdpPacket::new_unchecked(&l3[hl..hl + udp::HEADER_LEN]).dst_port() != ROCE_V2_PORT {
        return FrameKind::Other;
    }
    FrameKind::RoceV2 { ipv6: false, udp: eth::HEADER_LEN + hl, len: eth::HEADER_LEN + total }
}

#[inline]
fn classify_ipv6(l3: &[u8]) -> FrameKind {
    if l3.len() < ipv6::HEADER_LEN {
        return FrameKind::Truncated;
    }
    let ip = Ipv6Packet::new_unchecked(&l3[..ipv6::HEADER_LEN]);
    let plen = ip.payload_len() as usize;
    if ipv6::HEADER_LEN + plen > l3.len() {
        return FrameKind::Truncated;
    }
    let len = eth::HEADER_LEN + ipv6::HEADER_LEN + plen;
    match ip.next_header() {
        PROTOCOL_ICMPV6 => FrameKind::Icmpv6 { len },
        PROTOCOL_UDP if plen >= udp::HEADER_LEN && UdpPacket::new_unchecked(&l3[ipv6::HEADER_LEN..ipv6::HEADER_LEN + udp::HEADER_LEN]).dst_port() == ROCE_V2_PORT => {
            FrameKind::RoceV2 { ipv6: true, udp: eth::HEADER_LEN + ipv6::HEADER_LEN, len }
        }
        _ => FrameKind::Other,
    }
}

/// The IP destination of an Ethernet frame carrying IPv4 or IPv6 (only the address is read:
/// for frames the transport built).
pub fn ip_dst(frame: &[u8]) -> Option<IpAddr> {
    let l3 = frame.get(eth::HEADER_LEN..)?;
    match EthernetFrame::new_checked(frame).ok()?.ethertype() {
        EtherType::Ipv4 if l3.len() >= ipv4::HEADER_LEN => Some(IpAddr::V4(Ipv4Packet::new_unchecked(l3).dst_addr())),
        EtherType::Ipv6 if l3.len() >= ipv6::HEADER_LEN => Some(IpAddr::V6(Ipv6Packet::new_unchecked(l3).dst_addr())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// Ethernet + IPv4 (no options) + UDP to `dport` with `payload` bytes, `pad` bytes after.
    fn v4(dport: u16, proto: u8, payload: usize, pad: usize) -> Vec<u8> {
        let total = 20 + 8 + payload;
        let mut f = vec![0u8; 14 + total + pad];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        f[23] = proto;
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    fn v6(nh: u8, dport: u16, plen: usize, pad: usize) -> Vec<u8> {
        let mut f = vec![0u8; 54 + plen + pad];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&(plen as u16).to_be_bytes());
        f[20] = nh;
        if plen >= 4 {
            f[56..58].copy_from_slice(&dport.to_be_bytes());
        }
        f
    }

    #[test]
    fn roce_over_ipv4_and_ipv6() {
        let f = v4(4791, 17, 40, 6);
        let k = classify(&f);
        assert_eq!(k, FrameKind::RoceV2 { ipv6: false, udp: 34, len: 82 });
        assert_eq!(k.bth_offset(), Some(42));
        assert_eq!(classify(&v6(17, 4791, 48, 0)), FrameKind::RoceV2 { ipv6: true, udp: 54, len: 102 });
        // options move the UDP header
        let mut f = v4(0, 17, 40, 0);
        f[14] = 0x46;
        f[40..42].copy_from_slice(&4791u16.to_be_bytes());
        assert_eq!(classify(&f), FrameKind::RoceV2 { ipv6: false, udp: 38, len: 82 });
    }

    #[test]
    fn arp_icmpv6_and_others() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(classify(&f), FrameKind::Arp);
        assert_eq!(classify(&v6(58, 0, 32, 0)), FrameKind::Icmpv6 { len: 86 });
        assert_eq!(classify(&v4(4792, 17, 40, 0)), FrameKind::Other, "another UDP port");
        assert_eq!(classify(&v4(4791, 6, 40, 0)), FrameKind::Other, "TCP");
        assert_eq!(classify(&v6(17, 53, 16, 0)), FrameKind::Other);
        assert_eq!(classify(&v6(17, 4791, 4, 0)), FrameKind::Other, "UDP length below its header");
        f[12..14].copy_from_slice(&[0x88, 0xcc]);
        assert_eq!(classify(&f), FrameKind::Other, "LLDP");
        let mut f = v4(4791, 17, 40, 0);
        f[14] = 0x65;
        assert_eq!(classify(&f), FrameKind::Other, "version 6 in an IPv4 frame");
        f[14] = 0x44;
        assert_eq!(classify(&f), FrameKind::Other, "header length 16");
        let mut f = v4(4791, 17, 40, 0);
        f[16..18].copy_from_slice(&27u16.to_be_bytes());
        assert_eq!(classify(&f), FrameKind::Other, "total length shorter than IP + UDP");
    }

    #[test]
    fn truncated() {
        assert_eq!(classify(&[0u8; 13]), FrameKind::Truncated);
        let f = v4(4791, 17, 40, 0);
        assert_eq!(classify(&f[..33]), FrameKind::Truncated);
        assert_eq!(classify(&f[..f.len() - 1]), FrameKind::Truncated, "shorter than total length");
        let f = v6(17, 4791, 48, 0);
        assert_eq!(classify(&f[..53]), FrameKind::Truncated);
        assert_eq!(classify(&f[..f.len() - 1]), FrameKind::Truncated, "shorter than payload length");
    }

    #[test]
    fn every_prefix_and_byte_flip_is_classified_without_panic() {
        for base in [v4(4791, 17, 40, 6), v6(17, 4791, 48, 0), v6(58, 0, 32, 0)] {
            for n in 0..=base.len() {
                let k = classify(&base[..n]);
                if let FrameKind::RoceV2 { len, .. } | FrameKind::Icmpv6 { len } = k {
                    assert!(len <= n);
                }
            }
            for i in 0..base.len() {
                let mut f = base.clone();
                f[i] ^= 0xff;
                if let FrameKind::RoceV2 { len, udp, .. } = classify(&f) {
                    assert!(udp + 8 <= len && len <= f.len());
                }
            }
        }
    }

    #[test]
    fn ip_destination() {
        let mut f = v4(4791, 17, 8, 0);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(ip_dst(&f), Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))));
        let mut f = v6(17, 4791, 8, 0);
        f[38..54].copy_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(ip_dst(&f), Some("fd00::2".parse().unwrap()));
        assert_eq!(ip_dst(&f[..53]), None);
        assert_eq!(ip_dst(&[0u8; 60]), None, "ethertype 0");
    }
}
