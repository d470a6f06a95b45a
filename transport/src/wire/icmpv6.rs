//! ICMPv6 Neighbor Solicitation and Advertisement (RFC 4861 4.3, 4.4) with the source /
//! target link-layer address options (4.6.1), for IPv6 neighbour resolution in the engine.
//!
//! The view covers the ICMPv6 message (after the IPv6 header); the checksum covers the IPv6
//! pseudo-header (RFC 8200 8.1), so the addresses of the IPv6 header are parameters.

use super::checksum;
use super::eth::EthernetAddress;
use super::{Error, Field, Result};
use std::net::Ipv6Addr;

/// IPv6 next-header value of ICMPv6.
pub const PROTOCOL_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation.
pub const TYPE_NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const TYPE_NEIGHBOR_ADVERT: u8 = 136;
/// The hop limit every ND message is sent with and must arrive with (RFC 4861 7.1.1/7.1.2:
/// proof that it came from the link, not through a router).
pub const ND_HOP_LIMIT: u8 = 255;

/// ND option types (RFC 4861 4.6).
const OPT_SOURCE_LLADDR: u8 = 1;
const OPT_TARGET_LLADDR: u8 = 2;
/// Length of an Ethernet link-layer address option (one 8-byte unit).
const LLADDR_OPT_LEN: usize = 8;

mod field {
    use super::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    /// Reserved in an NS; R, S, O flags and reserved bits in an NA.
    pub const FLAGS: Field = 4..8;
    pub const TARGET: Field = 8..24;
    pub const OPTIONS: usize = 24;
}

/// Length of an NS or NA without options.
pub const HEADER_LEN: usize = field::OPTIONS;

/// The flags of a Neighbor Advertisement (RFC 4861 4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NdFlags {
    pub router: bool,
    pub solicited: bool,
    pub override_: bool,
}

impl NdFlags {
    const ROUTER: u32 = 0x8000_0000;
    const SOLICITED: u32 = 0x4000_0000;
    const OVERRIDE: u32 = 0x2000_0000;

    fn from_word(w: u32) -> NdFlags {
        NdFlags { router: w & Self::ROUTER != 0, solicited: w & Self::SOLICITED != 0, override_: w & Self::OVERRIDE != 0 }
    }
    fn to_word(self) -> u32 {
        (self.router as u32 * Self::ROUTER) | (self.solicited as u32 * Self::SOLICITED) | (self.override_ as u32 * Self::OVERRIDE)
    }
}

/// A read/write view of an ICMPv6 NS or NA message.
#[derive(Debug, Clone)]
pub struct NdPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NdPacket<T> {
    pub const fn new_unchecked(buffer: T) -> NdPacket<T> {
        NdPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<NdPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// The buffer holds at least the fixed part (24 bytes); options are checked by
    /// [`NdPacket::lladdr_option`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    pub fn checksum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CHECKSUM];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The NA flags (meaningless in an NS, where the word is reserved).
    pub fn flags(&self) -> NdFlags {
        let b = &self.buffer.as_ref()[field::FLAGS];
        NdFlags::from_word(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn target_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::TARGET]);
        Ipv6Addr::from(a)
    }
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..]
    }
    /// The Ethernet address in the (last) option of type `kind` (1 source, 2 target), walking
    /// every option: an option of length 0 or running past the message makes it invalid
    /// (RFC 4861 7.1.1/7.1.2). A tail shorter than one option is ignored.
    pub fn lladdr_option(&self, kind: u8) -> Result<Option<EthernetAddress>> {
        let mut opts = self.options();
        let mut found = None;
        while opts.len() >= LLADDR_OPT_LEN {
            let len = opts[1] as usize * 8;
            if len == 0 || len > opts.len() {
                return Err(Error);
            }
            if opts[0] == kind {
                found = Some(EthernetAddress::from_bytes(&opts[2..8]));
            }
            opts = &opts[len..];
        }
        Ok(found)
    }
    /// Whether the checksum over the pseudo-header of `src` → `dst` and the message is right.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        icmpv6_checksum(src, dst, self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NdPacket<T> {
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v
    }
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v
    }
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes())
    }
    /// Writes the NA flags; the other 29 bits of the word (reserved) become 0.
    pub fn set_flags(&mut self, f: NdFlags) {
        self.buffer.as_mut()[field::FLAGS].copy_from_slice(&f.to_word().to_be_bytes())
    }
    pub fn set_target_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&a.octets())
    }
    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::OPTIONS..]
    }
    /// Computes and writes the checksum for a message from `src` to `dst`.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = icmpv6_checksum(src, dst, self.buffer.as_ref());
        self.set_checksum(c)
    }
}

/// The ICMPv6 checksum of `msg` from `src` to `dst` (RFC 8200 8.1 pseudo-header: addresses,
/// upper-layer length, next header 58). Over a message with a correct checksum field it is 0.
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let pseudo = checksum::sum(&src.octets())
        + checksum::sum(&dst.octets())
        + checksum::sum(&(msg.len() as u32).to_be_bytes())
        + PROTOCOL_ICMPV6 as u32;
    // a message is at most 64 KiB: its sum fits 32 bits with room to spare
    !checksum::fold(pseudo + checksum::sum(msg))
}

/// A Neighbor Solicitation or Advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdRepr {
    Solicit {
        target_addr: Ipv6Addr,
        /// The source link-layer address option (absent from a DAD probe).
        source_lladdr: Option<EthernetAddress>,
    },
    Advert {
        flags: NdFlags,
        target_addr: Ipv6Addr,
        /// The target link-layer address option.
        target_lladdr: Option<EthernetAddress>,
    },
}

impl NdRepr {
    /// Parses an NS or NA sent from `src` to `dst`: other ICMPv6 types, code ≠ 0, a wrong
    /// checksum and malformed options are errors (RFC 4861 7.1.1/7.1.2; the hop limit is the
    /// IPv6 header's and is checked with it).
    pub fn parse<T: AsRef<[u8]>>(p: &NdPacket<T>, src: Ipv6Addr, dst: Ipv6Addr) -> Result<NdRepr> {
        p.check_len()?;
        if p.code() != 0 || !p.verify_checksum(src, dst) {
            return Err(Error);
        }
        let target_addr = p.target_addr();
        match p.msg_type() {
            TYPE_NEIGHBOR_SOLICIT => Ok(NdRepr::Solicit { target_addr, source_lladdr: p.lladdr_option(OPT_SOURCE_LLADDR)? }),
            TYPE_NEIGHBOR_ADVERT => Ok(NdRepr::Advert { flags: p.flags(), target_addr, target_lladdr: p.lladdr_option(OPT_TARGET_LLADDR)? }),
            _ => Err(Error),
        }
    }

    pub fn target_addr(&self) -> Ipv6Addr {
        match *self {
            NdRepr::Solicit { target_addr, .. } | NdRepr::Advert { target_addr, .. } => target_addr,
        }
    }

    fn lladdr(&self) -> Option<(u8, EthernetAddress)> {
        match *self {
            NdRepr::Solicit { source_lladdr, .. } => source_lladdr.map(|a| (OPT_SOURCE_LLADDR, a)),
            NdRepr::Advert { target_lladdr, .. } => target_lladdr.map(|a| (OPT_TARGET_LLADDR, a)),
        }
    }

    /// Length of the message: 24 bytes, plus 8 with the link-layer address option.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + if self.lladdr().is_some() { LLADDR_OPT_LEN } else { 0 }
    }

    /// Writes the message and its checksum for `src` → `dst`. The view must be exactly
    /// [`NdRepr::buffer_len`] long (the checksum covers all of it); panics when shorter.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut NdPacket<T>, src: Ipv6Addr, dst: Ipv6Addr) {
        let (ty, flags) = match *self {
            NdRepr::Solicit { .. } => (TYPE_NEIGHBOR_SOLICIT, NdFlags::default()),
            NdRepr::Advert { flags, .. } => (TYPE_NEIGHBOR_ADVERT, flags),
        };
        p.set_msg_type(ty);
        p.set_code(0);
        p.set_flags(flags);
        p.set_target_addr(self.target_addr());
        if let Some((kind, a)) = self.lladdr() {
            let o = &mut p.options_mut()[..LLADDR_OPT_LEN];
            o[0] = kind;
            o[1] = 1;
            o[2..8].copy_from_slice(&a.0);
        }
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    // Captured from Linux 6.1 on a veth pair (02:00:00:00:5a:01 fd00:5::1 pinging
    // 02:00:00:00:5a:02 fd00:5::2), ICMPv6 part. NS fd00:5::1 -> ff02::1:ff00:2, checksum 0x238d.
    #[rustfmt::skip]
    const NS: [u8; 32] = [
        0x87, 0x00, 0x23, 0x8d, 0, 0, 0, 0,
        0xfd, 0x00, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
        0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x5a, 0x01,
    ];
    // The solicited NA fd00:5::2 -> fd00:5::1, flags S and O, checksum 0xc28a.
    #[rustfmt::skip]
    const NA: [u8; 32] = [
        0x88, 0x00, 0xc2, 0x8a, 0x60, 0, 0, 0,
        0xfd, 0x00, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
        0x02, 0x01, 0x02, 0x00, 0x00, 0x00, 0x5a, 0x02,
    ];

    #[test]
    fn linux_ns_parses_and_reemits() {
        let (src, dst) = (ip("fd00:5::1"), ip("ff02::1:ff00:2"));
        let p = NdPacket::new_checked(&NS[..]).unwrap();
        assert_eq!(p.checksum(), 0x238d);
        let r = NdRepr::parse(&p, src, dst).unwrap();
        assert_eq!(r, NdRepr::Solicit { target_addr: ip("fd00:5::2"), source_lladdr: Some(EthernetAddress([2, 0, 0, 0, 0x5a, 1])) });
        assert_eq!(r.buffer_len(), 32);
        let mut out = [0xeeu8; 32];
        r.emit(&mut NdPacket::new_unchecked(&mut out[..]), src, dst);
        assert_eq!(out, NS);
        // the pseudo-header counts: another destination fails the checksum
        assert!(NdRepr::parse(&p, src, ip("ff02::1:ff00:3")).is_err());
    }

    #[test]
    fn linux_na_parses_and_reemits() {
        let (src, dst) = (ip("fd00:5::2"), ip("fd00:5::1"));
        let r = NdRepr::parse(&NdPacket::new_checked(&NA[..]).unwrap(), src, dst).unwrap();
        let flags = NdFlags { router: false, solicited: true, override_: true };
        assert_eq!(r, NdRepr::Advert { flags, target_addr: src, target_lladdr: Some(EthernetAddress([2, 0, 0, 0, 0x5a, 2])) });
        let mut out = [0u8; 32];
        r.emit(&mut NdPacket::new_unchecked(&mut out[..]), src, dst);
        assert_eq!(out, NA);
    }

    #[test]
    fn checksum_by_hand() {
        // Echo request fe80::1 -> fe80::2, id 0 seq 0, no data: fe80+0001 + fe80+0002 + 0008
        // + 003a + 8000 = 0x27d45 -> 0x7d47, inverted 0x82b8.
        assert_eq!(icmpv6_checksum(ip("fe80::1"), ip("fe80::2"), &[0x80, 0, 0, 0, 0, 0, 0, 0]), 0x82b8);
    }

    #[test]
    fn without_option_round_trip() {
        let (src, dst) = (ip("::"), ip("ff02::1:ff00:2"));
        let r = NdRepr::Solicit { target_addr: ip("fd00:5::2"), source_lladdr: None };
        let mut out = vec![0u8; r.buffer_len()];
        assert_eq!(out.len(), 24);
        r.emit(&mut NdPacket::new_unchecked(&mut out[..]), src, dst);
        assert_eq!(NdRepr::parse(&NdPacket::new_checked(&out[..]).unwrap(), src, dst), Ok(r));
    }

    #[test]
    fn rejects_truncated_and_garbage() {
        let (src, dst) = (ip("fd00:5::1"), ip("ff02::1:ff00:2"));
        assert!(NdPacket::new_checked(&NS[..23]).is_err());
        // cut in the option: the tail shorter than an option is ignored, checksum then fails
        assert!(NdRepr::parse(&NdPacket::new_checked(&NS[..28]).unwrap(), src, dst).is_err());
        for (i, v) in [(0usize, 128u8), (1, 1), (25, 0), (25, 2), (5, 1)] {
            let mut b = NS;
            b[i] = v;
            // re-seal the checksum so that only the field under test is wrong
            NdPacket::new_unchecked(&mut b[..]).fill_checksum(src, dst);
            let r = NdRepr::parse(&NdPacket::new_unchecked(&b[..]), src, dst);
            if i == 5 {
                assert!(r.is_ok(), "reserved bits of an NS are ignored");
            } else {
                assert!(r.is_err(), "byte {i} = {v}");
            }
        }
        let mut b = NS;
        b[10] ^= 1;
        assert!(NdRepr::parse(&NdPacket::new_unchecked(&b[..]), src, dst).is_err(), "a flipped bit fails the checksum");
    }
}
