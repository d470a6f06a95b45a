//! IPv4 header (RFC 791). Options are not supported: RoCEv2 senders never use them.

use super::{checksum, Error, Field, Result};
use std::net::Ipv4Addr;

/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks that the buffer holds the whole header and the whole packet (`total_len`), and
    /// that the header and total lengths are consistent. The buffer may be longer (Ethernet
    /// padding); use [`Ipv4Packet::total_len`] to find the end.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error);
        }
        let hl = self.header_len() as usize;
        let tl = self.total_len() as usize;
        if hl < HEADER_LEN || tl < hl || len < tl {
            return Err(Error);
        }
        Ok(())
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }
    pub fn total_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn ident(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::IDENT];
        u16::from_be_bytes([b[0], b[1]])
    }
    fn flg_off(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::FLG_OFF];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The reserved ("evil") flag bit.
    pub fn reserved_flag(&self) -> bool {
        self.flg_off() & 0x8000 != 0
    }
    pub fn dont_frag(&self) -> bool {
        self.flg_off() & 0x4000 != 0
    }
    pub fn more_frags(&self) -> bool {
        self.flg_off() & 0x2000 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.flg_off() & 0x1fff) << 3
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    pub fn checksum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// True when the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        let hl = self.header_len() as usize;
        checksum::fold(checksum::sum(&self.buffer.as_ref()[..hl])) == 0xffff
    }
    /// The bytes after the header, up to `total_len`.
    pub fn payload(&self) -> &[u8] {
        let hl = self.header_len() as usize;
        let tl = self.total_len() as usize;
        &self.buffer.as_ref()[hl..tl]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4).
    pub fn set_version_and_header_len(&mut self, header_len: u8) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) & 0x0f);
    }
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 0x03);
    }
    pub fn set_total_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes())
    }
    /// Sets the flags and the fragment offset (in bytes, a multiple of 8).
    pub fn set_flags_and_frag_offset(
        &mut self,
        reserved: bool,
        dont_frag: bool,
        more_frags: bool,
        off: u16,
    ) {
        let v = (reserved as u16) << 15
            | (dont_frag as u16) << 14
            | (more_frags as u16) << 13
            | ((off >> 3) & 0x1fff);
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v
    }
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes())
    }
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets())
    }
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets())
    }
    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len() as usize;
        let c = !checksum::fold(checksum::sum(&self.buffer.as_ref()[..hl]));
        self.set_checksum(c)
    }
}

/// The plain form of an IPv4 header without options, not a fragment.
///
/// The header checksum is not part of the record: `emit` computes it, and `parse` does not
/// check it (see [`Ipv4Packet::verify_checksum`]); on RoCEv2 the ICRC covers every field a
/// router may not change, and the checksum is one it does change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub src_addr: Ipv4Addr,
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload (17 for UDP).
    pub next_header: u8,
    /// Length of the payload after the 20-byte header.
    pub payload_len: usize,
    pub dscp: u8,
    pub ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub hop_limit: u8,
}

impl Ipv4Repr {
    /// Parses a header without options that is not a fragment.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        p.check_len()?;
        if p.version() != 4 || p.header_len() as usize != HEADER_LEN {
            return Err(Error);
        }
        if p.more_frags() || p.frag_offset() != 0 || p.reserved_flag() {
            return Err(Error);
        }
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.total_len() as usize - HEADER_LEN,
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            hop_limit: p.hop_limit(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header including its checksum. Panics on a buffer shorter than 20 bytes;
    /// the payload length must fit the 16-bit total length field (it is truncated otherwise).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) {
        p.set_version_and_header_len(HEADER_LEN as u8);
        p.set_dscp_ecn(self.dscp & 0x3f, self.ecn & 0x03);
        p.set_total_len((HEADER_LEN + self.payload_len) as u16);
        p.set_ident(self.ident);
        p.set_flags_and_frag_offset(false, self.dont_frag, false, 0);
        p.set_hop_limit(self.hop_limit);
        p.set_next_header(self.next_header);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Frame 1 of A1_rc_pingpong_64.pcap, IP header (checksum 0xced1).
    const BYTES: [u8; 20] = [
        0x45, 0x00, 0x00, 0x6c, 0x50, 0x49, 0x40, 0x00, 0x40, 0x11, 0xce, 0xd1, 0xc0, 0xa8, 0x4d,
        0x0b, 0xc0, 0xa8, 0x4d, 0x0a,
    ];

    fn golden() -> [u8; 20] {
        BYTES
    }

    #[test]
    fn parse_emit() {
        let mut buf = [0u8; 0x6c];
        buf[..20].copy_from_slice(&golden());
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.src_addr, Ipv4Addr::new(192, 168, 77, 11));
        assert_eq!(r.dst_addr, Ipv4Addr::new(192, 168, 77, 10));
        assert_eq!(r.payload_len, 0x6c - 20);
        assert!(r.dont_frag);
        assert_eq!((r.hop_limit, r.next_header, r.ident), (64, 17, 0x5049));
        let mut out = [0u8; 20];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, golden());
    }

    #[test]
    fn rejects_short_and_odd() {
        let mut buf = [0u8; 0x6c];
        buf[..20].copy_from_slice(&golden());
        assert!(Ipv4Packet::new_checked(&buf[..0x6b]).is_err());
        assert!(Ipv4Packet::new_checked(&buf[..19]).is_err());
        let mut b2 = buf;
        b2[0] = 0x46; // options
        assert!(Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&b2[..])).is_err());
        let mut b3 = buf;
        b3[6] = 0x20; // more fragments
        assert!(Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&b3[..])).is_err());
        let mut b4 = buf;
        b4[0] = 0x65;
        assert!(Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&b4[..])).is_err());
        let mut b5 = buf;
        b5[3] = 10; // total length shorter than the header
        assert!(Ipv4Packet::new_checked(&b5[..]).is_err());
    }
}
