//! Domain newtypes: PSN, QPN, MSN (24-bit), P_Key, Q_Key, R_Key, L_Key and GIDs.
//!
//! A bare `u32` PSN compared with `<` is a bug waiting to happen: PSNs live on a 24-bit
//! circle (IBA 9.7.1), so ordering is only meaningful inside a window of half the circle,
//! exactly like TCP sequence numbers (smoltcp `TcpSeqNumber`).

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Mask of the 24-bit PSN, QPN and MSN fields.
pub const MASK_24: u32 = 0x00ff_ffff;
/// Half the 24-bit circle: a PSN `a` is ahead of `b` when `(a - b) mod 2^24` is in `1..2^23`.
const HALF_24: u32 = 0x0080_0000;

/// Packet Sequence Number: 24 bits, wrapping (IBA 9.7.1).
///
/// `PartialOrd` is the window comparison: `a > b` when `a` is less than 2^23 ahead of `b`
/// on the circle (PSNs exactly 2^23 apart are incomparable). It is not transitive over the
/// whole circle; only compare PSNs known to lie within half a circle of each other (always
/// true inside a QP window).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    pub const ZERO: Psn = Psn(0);
    /// Largest PSN; the next one is zero.
    pub const MAX: Psn = Psn(MASK_24);

    /// Builds a PSN from the low 24 bits of `v` (the high byte is dropped).
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK_24)
    }
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
    /// `self + n` modulo 2^24.
    #[inline]
    pub const fn wrapping_add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK_24)
    }
    /// `self - n` modulo 2^24.
    #[inline]
    pub const fn wrapping_sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK_24)
    }
    /// The next PSN.
    #[inline]
    pub const fn next(self) -> Psn {
        self.wrapping_add(1)
    }
    /// Signed distance from `other` to `self` on the circle, in `-2^23 ..= 2^23 - 1`:
    /// positive when `self` is ahead of `other`.
    #[inline]
    pub const fn distance(self, other: Psn) -> i32 {
        // Sign-extend the 24-bit difference.
        (((self.0.wrapping_sub(other.0)) << 8) as i32) >> 8
    }
    /// Forward distance from `other` to `self` modulo 2^24 (how many increments of `other`
    /// reach `self`).
    #[inline]
    pub const fn forward_distance(self, other: Psn) -> u32 {
        self.0.wrapping_sub(other.0) & MASK_24
    }
    /// True when `self` is ahead of `other` (strictly, within half the circle).
    #[inline]
    pub const fn is_after(self, other: Psn) -> bool {
        let d = self.forward_distance(other);
        d != 0 && d < HALF_24
    }
    /// True when `self` is behind `other` (strictly, within half the circle).
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        other.is_after(self)
    }
    /// True when `self` lies in the half-open window `[start, start + len)`.
    #[inline]
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        self.forward_distance(start) < len
    }
}

impl PartialOrd for Psn {
    /// Window order: `Greater` when `self` is less than half a circle ahead of `other`,
    /// `Less` when behind, and `None` for two PSNs exactly half a circle (2^23) apart, which
    /// are neither (so that `a < b` and `b < a` are never both true).
    fn partial_cmp(&self, other: &Psn) -> Option<core::cmp::Ordering> {
        use core::cmp::Ordering::*;
        match self.forward_distance(*other) {
            0 => Some(Equal),
            d if d < HALF_24 => Some(Greater),
            HALF_24 => None,
            _ => Some(Less),
        }
    }
}

impl Add<u32> for Psn {
    type Output = Psn;
    fn add(self, n: u32) -> Psn {
        self.wrapping_add(n)
    }
}
impl AddAssign<u32> for Psn {
    fn add_assign(&mut self, n: u32) {
        *self = self.wrapping_add(n)
    }
}
impl Sub<u32> for Psn {
    type Output = Psn;
    fn sub(self, n: u32) -> Psn {
        self.wrapping_sub(n)
    }
}
/// `a - b` is the signed circle distance (see [`Psn::distance`]).
impl Sub<Psn> for Psn {
    type Output = i32;
    fn sub(self, other: Psn) -> i32 {
        self.distance(other)
    }
}

/// Message Sequence Number carried in the AETH: 24 bits, wrapping (IBA 9.7.5.1.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Msn(u32);

impl Msn {
    pub const ZERO: Msn = Msn(0);
    #[inline]
    pub const fn new(v: u32) -> Msn {
        Msn(v & MASK_24)
    }
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
    #[inline]
    pub const fn wrapping_add(self, n: u32) -> Msn {
        Msn(self.0.wrapping_add(n) & MASK_24)
    }
    #[inline]
    pub const fn next(self) -> Msn {
        self.wrapping_add(1)
    }
    /// Signed distance from `other` to `self`, as for [`Psn::distance`].
    #[inline]
    pub const fn distance(self, other: Msn) -> i32 {
        (((self.0.wrapping_sub(other.0)) << 8) as i32) >> 8
    }
}

impl Add<u32> for Msn {
    type Output = Msn;
    fn add(self, n: u32) -> Msn {
        self.wrapping_add(n)
    }
}

/// Queue Pair Number: 24 bits (IBA 9.2 DestQP / 9.3 DETH SrcQP).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Qpn(u32);

impl Qpn {
    /// QP0, the subnet management QP (not used on RoCE).
    pub const SMI: Qpn = Qpn(0);
    /// QP1, the general services interface QP that carries CM MADs.
    pub const GSI: Qpn = Qpn(1);
    /// The multicast QPN (IBA 10.5.2.2).
    pub const MULTICAST: Qpn = Qpn(MASK_24);

    #[inline]
    pub const fn new(v: u32) -> Qpn {
        Qpn(v & MASK_24)
    }
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
}

/// Partition key (IBA 10.9). Bit 15 is the membership bit (1 = full member).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PKey(pub u16);

impl PKey {
    /// The default partition key, full membership (what rxe and every vector frame use).
    pub const DEFAULT: PKey = PKey(0xffff);
    /// The invalid partition key.
    pub const INVALID: PKey = PKey(0x0000);

    #[inline]
    pub const fn value(self) -> u16 {
        self.0
    }
    /// The 15-bit partition number without the membership bit.
    #[inline]
    pub const fn base(self) -> u16 {
        self.0 & 0x7fff
    }
    #[inline]
    pub const fn is_full_member(self) -> bool {
        self.0 & 0x8000 != 0
    }
    /// IBA 10.9.3 P_Key matching: same base, not both limited members, base not invalid.
    pub const fn matches(self, other: PKey) -> bool {
        self.base() == other.base()
            && self.base() != 0
            && (self.is_full_member() || other.is_full_member())
    }
}

impl Default for PKey {
    fn default() -> PKey {
        PKey::DEFAULT
    }
}

/// Queue key for UD (IBA 10.2.5). Keys with bit 31 set are "controlled" (C10-15).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QKey(pub u32);

impl QKey {
    /// The well-known Q_Key of QP1 (GSI), IBA 13.4.6.4.
    pub const GSI: QKey = QKey(0x8001_0000);

    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
    /// A controlled Q_Key may not be used from a work request (the QP's own is used instead).
    #[inline]
    pub const fn is_controlled(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
}

/// Remote key of a memory region or window.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Rkey(pub u32);

impl Rkey {
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
}

/// Local key of a memory region.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Lkey(pub u32);

impl Lkey {
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
}

macro_rules! hex_fmt {
    ($t:ident, $name:literal, $w:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!("0x{:0", $w, "x}"), self.0)
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($name, "(0x{:0", $w, "x})"), self.0)
            }
        }
        impl fmt::LowerHex for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

// ibv_rc_pingpong prints QPN and PSN as %06x; rkeys as %08x.
hex_fmt!(Psn, "Psn", "6");
hex_fmt!(Msn, "Msn", "6");
hex_fmt!(Qpn, "Qpn", "6");
hex_fmt!(PKey, "PKey", "4");
hex_fmt!(QKey, "QKey", "8");
hex_fmt!(Rkey, "Rkey", "8");
hex_fmt!(Lkey, "Lkey", "8");

/// A 128-bit Global Identifier. On RoCEv2 it is the IPv6 address of the port, or the
/// IPv4-mapped address `::ffff:a.b.c.d` for IPv4 (IBA annex A17.4.5.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub const ZERO: Gid = Gid([0; 16]);

    /// The IPv4-mapped GID `::ffff:a.b.c.d`.
    pub const fn from_ipv4(a: Ipv4Addr) -> Gid {
        let o = a.octets();
        Gid([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, o[0], o[1], o[2], o[3],
        ])
    }
    pub const fn from_ipv6(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
    /// The IPv4 address when this is an IPv4-mapped GID.
    pub const fn to_ipv4(&self) -> Option<Ipv4Addr> {
        let b = &self.0;
        if self.is_ipv4_mapped() {
            Some(Ipv4Addr::new(b[12], b[13], b[14], b[15]))
        } else {
            None
        }
    }
    pub fn to_ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }
    pub const fn is_ipv4_mapped(&self) -> bool {
        let b = &self.0;
        b[0] == 0
            && b[1] == 0
            && b[2] == 0
            && b[3] == 0
            && b[4] == 0
            && b[5] == 0
            && b[6] == 0
            && b[7] == 0
            && b[8] == 0
            && b[9] == 0
            && b[10] == 0xff
            && b[11] == 0xff
    }
    pub const fn octets(&self) -> [u8; 16] {
        self.0
    }
    /// The raw form perftest prints (`00:00:...:ff:ff:c0:a8:4d:0a`, hex bytes).
    pub fn to_raw_string(&self) -> String {
        let mut s = String::with_capacity(47);
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                s.push(':');
            }
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(a: Ipv4Addr) -> Gid {
        Gid::from_ipv4(a)
    }
}
impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid::from_ipv6(a)
    }
}
impl From<Gid> for Ipv6Addr {
    fn from(g: Gid) -> Ipv6Addr {
        g.to_ipv6()
    }
}

/// Displays like `inet_ntop(AF_INET6)`, as ibv_rc_pingpong prints GIDs: `::ffff:192.168.77.10`.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_ipv6(), f)
    }
}
impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", self.to_ipv6())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps_at_24_bits() {
        assert_eq!(Psn::new(0x0100_0005), Psn::new(5));
        assert_eq!(Psn::MAX + 1, Psn::ZERO);
        assert_eq!(Psn::ZERO - 1, Psn::MAX);
        assert_eq!(Psn::new(0xfffffe) + 5, Psn::new(3));
        let mut p = Psn::MAX;
        p += 2;
        assert_eq!(p, Psn::new(1));
    }

    #[test]
    fn psn_window_comparison() {
        let a = Psn::new(0xfffff0);
        let b = Psn::new(0x000010);
        assert!(b > a);
        assert!(a < b);
        assert!(b.is_after(a) && a.is_before(b));
        assert_eq!(b - a, 0x20);
        assert_eq!(a - b, -0x20);
        assert_eq!(a.distance(a), 0);
        // Exactly half a circle apart: neither is ahead.
        let c = Psn::new(0x800000);
        assert_eq!(Psn::ZERO.partial_cmp(&c), None);
        assert_eq!(c.partial_cmp(&Psn::ZERO), None);
        assert!(!c.is_after(Psn::ZERO) && !c.is_before(Psn::ZERO));
        assert_eq!(c.distance(Psn::ZERO), -0x800000);
        assert_eq!(Psn::new(0x7fffff).distance(Psn::ZERO), 0x7fffff);
        assert!(Psn::new(2).in_window(Psn::MAX, 4));
        assert!(!Psn::new(3).in_window(Psn::MAX, 4));
        assert_eq!(Psn::new(2).forward_distance(Psn::MAX), 3);
    }

    #[test]
    fn qpn_msn_mask() {
        assert_eq!(Qpn::new(0xabcdef12).value(), 0xcdef12);
        assert_eq!(Msn::new(0xffffff).next(), Msn::ZERO);
        assert_eq!(Msn::new(1).distance(Msn::new(0xffffff)), 2);
    }

    #[test]
    fn formats_like_rdma_core() {
        assert_eq!(Qpn::new(0x13).to_string(), "0x000013");
        assert_eq!(Psn::new(0x735b2c).to_string(), "0x735b2c");
        assert_eq!(format!("{:?}", Psn::new(0x735b2c)), "Psn(0x735b2c)");
        assert_eq!(QKey(0x11111111).to_string(), "0x11111111");
        assert_eq!(PKey::DEFAULT.to_string(), "0xffff");
        let g = Gid::from_ipv4(Ipv4Addr::new(192, 168, 77, 10));
        assert_eq!(g.to_string(), "::ffff:192.168.77.10");
        assert_eq!(g.to_ipv4(), Some(Ipv4Addr::new(192, 168, 77, 10)));
        assert_eq!(
            g.to_raw_string(),
            "00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:4d:0a"
        );
        let v6 = Gid::from("fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v6.to_ipv4(), None);
        assert_eq!(v6.to_string(), "fe80::1");
    }

    #[test]
    fn pkey_matching() {
        assert!(PKey::DEFAULT.matches(PKey(0x7fff)));
        assert!(!PKey(0x7fff).matches(PKey(0x7fff)));
        assert!(!PKey(0x8000).matches(PKey(0x8000)));
        assert!(!PKey(0x8001).matches(PKey(0x8002)));
        assert!(QKey::GSI.is_controlled());
    }
}
