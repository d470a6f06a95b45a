//! IPv6 fixed header (RFC 8200). Extension headers are not supported: RoCEv2 senders use none.

use super::{Error, Field, Result};
use std::net::Ipv6Addr;

mod field {
    use super::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Ipv6Packet<T> {
        Ipv6Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks that the buffer holds the header and `payload_len` bytes after it.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + self.payload_len() as usize {
            return Err(Error);
        }
        Ok(())
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn word0(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }
    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, the traffic class and the 20-bit flow label.
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = 6u32 << 28 | (traffic_class as u32) << 20 | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes())
    }
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v
    }
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v
    }
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets())
    }
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets())
    }
}

/// The plain form of an IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    pub src_addr: Ipv6Addr,
    pub dst_addr: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: usize,
    pub traffic_class: u8,
    /// 20 bits.
    pub flow_label: u32,
    pub hop_limit: u8,
}

impl Ipv6Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(Error);
        }
        Ok(Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len() as usize,
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Panics on a buffer shorter than 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
    }
}

/// The link-local address Linux derives from a MAC (modified EUI-64, RFC 4291 appendix A).
pub fn link_local_from_mac(mac: [u8; 6]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8] = mac[0] ^ 0x02;
    o[9] = mac[1];
    o[10] = mac[2];
    o[11] = 0xff;
    o[12] = 0xfe;
    o[13] = mac[3];
    o[14] = mac[4];
    o[15] = mac[5];
    Ipv6Addr::from(o)
}

/// The solicited-node multicast address of `a` (RFC 4291 2.7.1) and its MAC (RFC 2464 7).
pub fn solicited_node(a: Ipv6Addr) -> (Ipv6Addr, [u8; 6]) {
    let o = a.octets();
    let ip = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | o[13] as u16, u16::from_be_bytes([o[14], o[15]]));
    (ip, multicast_mac(ip))
}

/// The Ethernet address of an IPv6 multicast group: 33:33 + the low 32 bits (RFC 2464 7).
pub fn multicast_mac(ip: Ipv6Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const BYTES: [u8; 44] = [
        0x6a, 0x2b, 0xcd, 0xef, 0x00, 0x04, 0x11, 0x40,
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
        1, 2, 3, 4,
    ];

    #[test]
    fn parse_emit() {
        let p = Ipv6Packet::new_checked(&BYTES[..]).unwrap();
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.traffic_class, 0xa2);
        assert_eq!(r.flow_label, 0xbcdef);
        assert_eq!((r.payload_len, r.next_header, r.hop_limit), (4, 17, 64));
        assert_eq!(r.src_addr, "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        let mut out = [0u8; 44];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        out[40..].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(out, BYTES);
        assert!(Ipv6Packet::new_checked(&BYTES[..43]).is_err());
        let mut bad = BYTES;
        bad[0] = 0x4a;
        assert!(Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&bad[..])).is_err());
    }

    #[test]
    fn addresses_like_linux() {
        // Linux: 02:00:00:00:00:01 -> fe80::ff:fe00:1
        assert_eq!(link_local_from_mac([0x02, 0, 0, 0, 0, 1]), "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(link_local_from_mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]), "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap());
        let (g, m) = solicited_node("fd00::1:2:3456".parse().unwrap());
        assert_eq!(g, "ff02::1:ff02:3456".parse::<Ipv6Addr>().unwrap());
        assert_eq!(m, [0x33, 0x33, 0xff, 0x02, 0x34, 0x56]);
    }
}
