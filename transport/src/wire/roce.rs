//! A whole RoCEv2 frame: [`RoceRepr`] (all headers as plain data) and the ICRC trailer.

use super::aeth::{AethPacket, AethRepr};
use super::atomic_ack_eth::{AtomicAckEthPacket, AtomicAckEthRepr};
use super::atomic_eth::{AtomicEthPacket, AtomicEthRepr};
use super::bth::{BthPacket, BthRepr};
use super::deth::{DethPacket, DethRepr};
use super::eth::{self, EtherType, EthernetFrame, EthernetRepr};
use super::icrc::{self, ICRC_LEN};
use super::ipv4::{self, Ipv4Packet, Ipv4Repr};
use super::ipv6::{self, Ipv6Packet, Ipv6Repr};
use super::opcode::{ExtHeader, ExtHeaders, OpInfo};
use super::reth::{RethPacket, RethRepr};
use super::udp::{self, UdpPacket, UdpRepr, ROCE_V2_PORT};
use super::{ieth, immdt, Error, Result};
use crate::types::{Gid, Rkey};
use core::ops::Range;
use std::net::IpAddr;

/// Length of the reserved block after the BTH of a CNP (RoCEv2 annex A17.9.3).
pub const CNP_RESERVED_LEN: usize = 16;

/// The IP header of a RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    Ipv4(Ipv4Repr),
    Ipv6(Ipv6Repr),
}

impl IpRepr {
    /// The IP header RoCEv2 uses between two GIDs: IPv4 (DF set, identification 0) when both
    /// are IPv4-mapped, IPv6 when neither is. `traffic_class` is the IPv6 traffic class or the
    /// IPv4 TOS byte (DSCP << 2 | ECN). Mixing the two kinds is an error.
    pub fn from_gids(
        src: Gid,
        dst: Gid,
        traffic_class: u8,
        hop_limit: u8,
        flow_label: u32,
    ) -> Result<IpRepr> {
        match (src.to_ipv4(), dst.to_ipv4()) {
            (Some(s), Some(d)) => Ok(IpRepr::Ipv4(Ipv4Repr {
                src_addr: s,
                dst_addr: d,
                next_header: ipv4::PROTOCOL_UDP,
                payload_len: 0,
                dscp: traffic_class >> 2,
                ecn: traffic_class & 0x03,
                ident: 0,
                dont_frag: true,
                hop_limit,
            })),
            (None, None) => Ok(IpRepr::Ipv6(Ipv6Repr {
                src_addr: src.to_ipv6(),
                dst_addr: dst.to_ipv6(),
                next_header: ipv4::PROTOCOL_UDP,
                payload_len: 0,
                traffic_class,
                flow_label: flow_label & 0x000f_ffff,
                hop_limit,
            })),
            _ => Err(Error),
        }
    }
    pub fn src_addr(&self) -> IpAddr {
        match self {
            IpRepr::Ipv4(r) => IpAddr::V4(r.src_addr),
            IpRepr::Ipv6(r) => IpAddr::V6(r.src_addr),
        }
    }
    pub fn dst_addr(&self) -> IpAddr {
        match self {
            IpRepr::Ipv4(r) => IpAddr::V4(r.dst_addr),
            IpRepr::Ipv6(r) => IpAddr::V6(r.dst_addr),
        }
    }
    /// Source GID (IPv4-mapped for IPv4).
    pub fn src_gid(&self) -> Gid {
        match self {
            IpRepr::Ipv4(r) => Gid::from_ipv4(r.src_addr),
            IpRepr::Ipv6(r) => Gid::from_ipv6(r.src_addr),
        }
    }
    /// Destination GID (IPv4-mapped for IPv4).
    pub fn dst_gid(&self) -> Gid {
        match self {
            IpRepr::Ipv4(r) => Gid::from_ipv4(r.dst_addr),
            IpRepr::Ipv6(r) => Gid::from_ipv6(r.dst_addr),
        }
    }
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::Ipv4(_) => ipv4::HEADER_LEN,
            IpRepr::Ipv6(_) => ipv6::HEADER_LEN,
        }
    }
    pub const fn payload_len(&self) -> usize {
        match self {
            IpRepr::Ipv4(r) => r.payload_len,
            IpRepr::Ipv6(r) => r.payload_len,
        }
    }
    pub fn set_payload_len(&mut self, n: usize) {
        match self {
            IpRepr::Ipv4(r) => r.payload_len = n,
            IpRepr::Ipv6(r) => r.payload_len = n,
        }
    }
    /// IPv4 TOS byte or IPv6 traffic class; the low two bits are the ECN field.
    pub const fn traffic_class(&self) -> u8 {
        match self {
            IpRepr::Ipv4(r) => (r.dscp << 2) | (r.ecn & 3),
            IpRepr::Ipv6(r) => r.traffic_class,
        }
    }
    pub const fn ethertype(&self) -> EtherType {
        match self {
            IpRepr::Ipv4(_) => EtherType::Ipv4,
            IpRepr::Ipv6(_) => EtherType::Ipv6,
        }
    }
}

/// The headers of a whole RoCEv2 frame.
///
/// Which extension headers a frame has is fixed by `bth.opcode` ([`super::Opcode::info`]);
/// `parse` fills exactly those options, and `emit_headers` writes exactly those headers (a
/// missing option is written as zeros, a superfluous one is ignored; [`RoceRepr::check`] tells
/// the two apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceRepr {
    pub eth: EthernetRepr,
    pub ip: IpRepr,
    pub udp: UdpRepr,
    pub bth: BthRepr,
    /// The extension headers after the BTH (parse fills those the opcode carries).
    pub ext: ExtReprs,
}

/// Bytes of pad that follow `payload_len` payload bytes (IBA 9.2.3: packets are a multiple
/// of 4 bytes).
pub const fn pad_len(payload_len: usize) -> usize {
    (4 - payload_len % 4) % 4
}

impl RoceRepr {
    /// A record with the given outer headers and BTH and no extension headers.
    pub const fn new(eth: EthernetRepr, ip: IpRepr, udp: UdpRepr, bth: BthRepr) -> RoceRepr {
        RoceRepr {
            eth,
            ip,
            udp,
            bth,
            ext: ExtReprs { reth: None, aeth: None, deth: None, atomic: None, atomic_ack: None, immdt: None, ieth: None },
        }
    }

    /// Parses a whole Ethernet frame. Returns the record and the range of the payload bytes
    /// in `frame` (pad excluded).
    ///
    /// Checks: Ethernet II with IPv4 (no options, not a fragment) or IPv6 (no extension
    /// headers) carrying UDP to port 4791; consistent IP and UDP lengths; a supported opcode;
    /// room for the opcode's extension headers, the pad and the ICRC; a transport length that
    /// is a multiple of 4 (IBA C9-...: pad makes it so); no payload on opcodes that carry none;
    /// valid AETH syndrome; and the ICRC. Bytes after the IP packet (Ethernet padding of short
    /// frames) are ignored. The IPv4 header checksum and the UDP checksum are not checked:
    /// both are fields the ICRC treats as variant.
    pub fn parse(frame: &[u8]) -> Result<(RoceRepr, Range<usize>)> {
        Self::parse_inner(frame, true)
    }

    /// [`RoceRepr::parse`] with `frame` as scratch for the ICRC check
    /// ([`icrc::verify_in_place`]: one CRC pass, no copy); `frame` is unchanged on return.
    /// The receive path's parser.
    pub fn parse_in_place(frame: &mut [u8]) -> Result<(RoceRepr, Range<usize>)> {
        let (r, range) = Self::parse_inner(frame, false)?;
        let l3 = eth::HEADER_LEN;
        let ip_end = l3 + r.ip.header_len() + r.ip.payload_len();
        if icrc::verify_in_place(&mut frame[l3..ip_end]) {
            Ok((r, range))
        } else {
            Err(Error)
        }
    }

    /// Like [`RoceRepr::parse`] but without the ICRC check: for diagnostic tools that want to
    /// show a corrupted frame's fields. Never use it on the receive path.
    pub fn parse_without_icrc(frame: &[u8]) -> Result<(RoceRepr, Range<usize>)> {
        Self::parse_inner(frame, false)
    }

    /// Header prediction for the receive path, as TCP stacks do it: the frame a bulk transfer
    /// is made of (IPv4 without options and not a fragment, UDP to 4791, an opcode with no
    /// extension header or only a RETH: SEND/WRITE First/Middle/Last/Only, READ request,
    /// plain READ response Middle) is read at fixed offsets behind one length check, instead of
    /// header by header. `None` for every other frame and on any doubt: the caller then runs
    /// [`RoceRepr::parse_without_icrc`], which decides and gives the error. A record it
    /// returns is exactly the one `parse_without_icrc` returns for the same bytes (no ICRC
    /// check either): `tests/rx_predicted.rs` and the fuzz target `rx_predicted` compare the
    /// two on captured, simulated, mutated and arbitrary frames.
    #[inline]
    pub fn parse_predicted(frame: &[u8]) -> Option<(RoceRepr, Range<usize>)> {
        const L3: usize = eth::HEADER_LEN;
        const L4: usize = L3 + ipv4::HEADER_LEN;
        const TP: usize = L4 + udp::HEADER_LEN;
        const FIXED: usize = TP + super::bth::HEADER_LEN;
        // Ethernet, IPv4, UDP and BTH as one fixed-size view: no bounds checks below.
        let h: &[u8; FIXED] = frame.get(..FIXED)?.try_into().ok()?;
        let be16 = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        // IPv4 (0x0800), version 4 with a 20-byte header, protocol UDP; no reserved flag, no
        // more-fragments flag, fragment offset 0 (DF either way).
        if be16(12) != 0x0800 || h[L3] != 0x45 || h[L3 + 9] != ipv4::PROTOCOL_UDP || be16(L3 + 6) & 0xbfff != 0 {
            return None;
        }
        let total = be16(L3 + 2) as usize;
        let ip_end = L3 + total;
        // The whole IP packet in the frame, with room for a BTH and the ICRC; the UDP length
        // is the IP payload's, to port 4791.
        if ip_end > frame.len() || ip_end < FIXED + ICRC_LEN || be16(L4 + 4) as usize != total - ipv4::HEADER_LEN || be16(L4 + 2) != ROCE_V2_PORT {
            return None;
        }
        let bth = BthRepr::parse(&BthPacket::new_unchecked(&h[TP..])).ok()?;
        let info = bth.opcode.info();
        let reth = info.headers == ExtHeaders::RETH;
        if !reth && info.headers != ExtHeaders::NONE {
            return None;
        }
        let ext_len = if reth { super::reth::HEADER_LEN } else { 0 };
        let hdr_end = FIXED + ext_len;
        let icrc_at = ip_end - ICRC_LEN;
        if icrc_at < hdr_end || (ip_end - TP) & 3 != 0 {
            return None;
        }
        let payload_end = icrc_at.checked_sub(bth.pad_count as usize)?;
        if payload_end < hdr_end || (!info.has_payload() && icrc_at != hdr_end) {
            return None;
        }
        let ef = EthernetFrame::new_unchecked(&h[..L3]);
        let eth = EthernetRepr { src_addr: ef.src_addr(), dst_addr: ef.dst_addr(), ethertype: EtherType::Ipv4 };
        let ip = Ipv4Packet::new_unchecked(&h[L3..L4]);
        let ip = IpRepr::Ipv4(Ipv4Repr {
            src_addr: ip.src_addr(),
            dst_addr: ip.dst_addr(),
            next_header: ipv4::PROTOCOL_UDP,
            payload_len: total - ipv4::HEADER_LEN,
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            ident: ip.ident(),
            dont_frag: ip.dont_frag(),
            hop_limit: ip.hop_limit(),
        });
        let udp = UdpRepr { src_port: be16(L4), dst_port: ROCE_V2_PORT };
        let mut r = RoceRepr::new(eth, ip, udp, bth);
        if reth {
            r.ext.reth = Some(RethRepr::parse(&RethPacket::new_unchecked(&frame[FIXED..hdr_end])).ok()?);
        }
        Some((r, hdr_end..payload_end))
    }

    fn parse_inner(frame: &[u8], verify_icrc: bool) -> Result<(RoceRepr, Range<usize>)> {
        let ef = EthernetFrame::new_checked(frame)?;
        let eth = EthernetRepr::parse(&ef)?;
        let l3 = eth::HEADER_LEN;
        let (ip, ip_end) = match eth.ethertype {
            EtherType::Ipv4 => {
                let p = Ipv4Packet::new_checked(&frame[l3..])?;
                let r = Ipv4Repr::parse(&p)?;
                (IpRepr::Ipv4(r), l3 + ipv4::HEADER_LEN + r.payload_len)
            }
            EtherType::Ipv6 => {
                let p = Ipv6Packet::new_checked(&frame[l3..])?;
                let r = Ipv6Repr::parse(&p)?;
                (IpRepr::Ipv6(r), l3 + ipv6::HEADER_LEN + r.payload_len)
            }
            _ => return Err(Error),
        };
        let next_header = match ip {
            IpRepr::Ipv4(r) => r.next_header,
            IpRepr::Ipv6(r) => r.next_header,
        };
        if next_header != ipv4::PROTOCOL_UDP {
            return Err(Error);
        }
        let l4 = l3 + ip.header_len();
        let up = UdpPacket::new_checked(&frame[l4..ip_end])?;
        if up.len() as usize != ip_end - l4 {
            return Err(Error);
        }
        let udp = UdpRepr::parse(&up)?;
        if udp.dst_port != ROCE_V2_PORT {
            return Err(Error);
        }
        let tp = l4 + udp::HEADER_LEN;
        let bp = BthPacket::new_checked(&frame[tp..ip_end])?;
        let bth = BthRepr::parse(&bp)?;
        let info = bth.opcode.info();
        let hdr_end = tp + info.header_len();
        let icrc_at = ip_end.checked_sub(ICRC_LEN).ok_or(Error)?;
        if icrc_at < hdr_end || (ip_end - tp) & 3 != 0 {
            return Err(Error);
        }
        let pad = bth.pad_count as usize;
        let payload_end = icrc_at.checked_sub(pad).ok_or(Error)?;
        if payload_end < hdr_end || (!info.has_payload() && icrc_at != hdr_end) {
            return Err(Error);
        }
        if verify_icrc && !icrc::verify(&frame[l3..ip_end]) {
            return Err(Error);
        }
        let ext = |h: ExtHeader| info.offset(h).map(|o| &frame[tp + o..hdr_end]);
        let mut r = RoceRepr::new(eth, ip, udp, bth);
        if let Some(b) = ext(ExtHeader::Reth) {
            r.ext.reth = Some(RethRepr::parse(&RethPacket::new_checked(b)?)?);
        }
        if let Some(b) = ext(ExtHeader::Aeth) {
            r.ext.aeth = Some(AethRepr::parse(&AethPacket::new_checked(b)?)?);
        }
        if let Some(b) = ext(ExtHeader::Deth) {
            r.ext.deth = Some(DethRepr::parse(&DethPacket::new_checked(b)?)?);
        }
        if let Some(b) = ext(ExtHeader::AtomicEth) {
            r.ext.atomic = Some(AtomicEthRepr::parse(&AtomicEthPacket::new_checked(b)?)?);
        }
        if let Some(b) = ext(ExtHeader::AtomicAckEth) {
            r.ext.atomic_ack = Some(AtomicAckEthRepr::parse(&AtomicAckEthPacket::new_checked(
                b,
            )?)?);
        }
        if let Some(b) = ext(ExtHeader::ImmDt) {
            r.ext.immdt = Some(immdt::parse(b)?);
        }
        if let Some(b) = ext(ExtHeader::Ieth) {
            r.ext.ieth = Some(ieth::parse(b)?);
        }
        Ok((r, hdr_end..payload_end))
    }

    /// Checks that exactly the extension headers the opcode calls for are present.
    pub fn check(&self) -> Result<()> {
        let i = self.bth.opcode.info();
        let ok = i.has_reth() == self.ext.reth.is_some()
            && i.has_aeth() == self.ext.aeth.is_some()
            && i.has_deth() == self.ext.deth.is_some()
            && i.has_atomic_eth() == self.ext.atomic.is_some()
            && i.has_atomic_ack_eth() == self.ext.atomic_ack.is_some()
            && i.has_immdt() == self.ext.immdt.is_some()
            && i.has_ieth() == self.ext.ieth.is_some();
        if ok {
            Ok(())
        } else {
            Err(Error)
        }
    }

    /// Length of all headers: Ethernet, IP, UDP, BTH and extension headers.
    pub fn header_len(&self) -> usize {
        eth::HEADER_LEN
            + self.ip.header_len()
            + udp::HEADER_LEN
            + self.bth.opcode.info().header_len()
    }

    /// Length of the whole frame for `payload_len` bytes of payload: headers, payload, pad and
    /// the 4-byte ICRC.
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + pad_len(payload_len) + ICRC_LEN
    }

    /// Writes all headers for `payload_len` bytes of payload to the start of `buf` and returns
    /// their length. Fills in the IP total/payload length, the IPv4 header checksum, the UDP
    /// length, UDP checksum 0 (as rxe), the ethertype and IP protocol, and the BTH pad count.
    /// The caller then copies the payload to `buf[hdr..hdr + payload_len]` and calls
    /// [`finish_frame`].
    ///
    /// Panics when `buf` is shorter than [`RoceRepr::frame_len`] or the frame would exceed the
    /// 16-bit IP length field.
    pub fn emit_headers(&self, payload_len: usize, buf: &mut [u8]) -> usize {
        let frame_len = self.frame_len(payload_len);
        assert!(
            buf.len() >= frame_len,
            "RoceRepr::emit_headers: buffer too short"
        );
        let tp = eth::HEADER_LEN + self.ip.header_len() + udp::HEADER_LEN;
        assert!(
            frame_len - eth::HEADER_LEN <= u16::MAX as usize,
            "RoceRepr::emit_headers: frame too long"
        );
        emit_outer(&self.eth, &self.ip, &self.udp, frame_len - tp, buf);
        tp + emit_transport(&self.bth, &self.ext, payload_len, &mut buf[tp..])
    }

    /// Emits a whole frame with `payload` into `buf` and returns its length.
    /// Panics like [`RoceRepr::emit_headers`].
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> usize {
        let h = self.emit_headers(payload.len(), buf);
        buf[h..h + payload.len()].copy_from_slice(payload);
        finish_frame(buf, payload.len())
    }
}

/// The extension headers of a frame, for [`emit_transport`]: those its opcode carries are
/// written (the others are ignored, as in [`RoceRepr::emit_headers`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ExtReprs {
    pub reth: Option<RethRepr>,
    pub aeth: Option<AethRepr>,
    pub deth: Option<DethRepr>,
    pub atomic: Option<AtomicEthRepr>,
    pub atomic_ack: Option<AtomicAckEthRepr>,
    pub immdt: Option<u32>,
    pub ieth: Option<Rkey>,
}

/// Ethernet, IP (lengths, protocol, IPv4 checksum) and UDP headers for `udp_payload` bytes
/// after the UDP header; returns the offset of the BTH.
fn emit_outer(eth: &EthernetRepr, ip: &IpRepr, udp_repr: &UdpRepr, udp_payload: usize, buf: &mut [u8]) -> usize {
    let l3 = eth::HEADER_LEN;
    let l4 = l3 + ip.header_len();
    let tp = l4 + udp::HEADER_LEN;
    let eth = EthernetRepr {
        ethertype: ip.ethertype(),
        ..*eth
    };
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..l3]));
    match *ip {
        IpRepr::Ipv4(r) => Ipv4Repr {
            next_header: ipv4::PROTOCOL_UDP,
            payload_len: udp::HEADER_LEN + udp_payload,
            ..r
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut buf[l3..l4])),
        IpRepr::Ipv6(r) => Ipv6Repr {
            next_header: ipv4::PROTOCOL_UDP,
            payload_len: udp::HEADER_LEN + udp_payload,
            ..r
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut buf[l3..l4])),
    }
    udp_repr.emit(&mut UdpPacket::new_unchecked(&mut buf[l4..tp]), udp_payload);
    tp
}

/// Writes the BTH (with the pad count for `payload_len`) and the extension headers that
/// `bth.opcode` carries to the start of `buf`; returns their length. The part of
/// [`RoceRepr::emit_headers`] after the UDP header.
pub fn emit_transport(bth: &BthRepr, ext: &ExtReprs, payload_len: usize, buf: &mut [u8]) -> usize {
    let info = bth.opcode.info();
    let bth = BthRepr {
        pad_count: pad_len(payload_len) as u8,
        ..*bth
    };
    bth.emit(&mut BthPacket::new_unchecked(&mut buf[..]));
    let hdr_end = info.header_len();
    buf[super::bth::HEADER_LEN..hdr_end].fill(0);
    fn slot(buf: &mut [u8], info: OpInfo, h: ExtHeader) -> Option<&mut [u8]> {
        info.offset(h).map(move |o| &mut buf[o..o + h.len()])
    }
    if let (Some(b), Some(r)) = (slot(buf, info, ExtHeader::Reth), ext.reth) {
        r.emit(&mut RethPacket::new_unchecked(b));
    }
    if let (Some(b), Some(r)) = (slot(buf, info, ExtHeader::Aeth), ext.aeth) {
        r.emit(&mut AethPacket::new_unchecked(b));
    }
    if let (Some(b), Some(r)) = (slot(buf, info, ExtHeader::Deth), ext.deth) {
        r.emit(&mut DethPacket::new_unchecked(b));
    }
    if let (Some(b), Some(r)) = (slot(buf, info, ExtHeader::AtomicEth), ext.atomic) {
        r.emit(&mut AtomicEthPacket::new_unchecked(b));
    }
    if let (Some(b), Some(r)) = (slot(buf, info, ExtHeader::AtomicAckEth), ext.atomic_ack) {
        r.emit(&mut AtomicAckEthPacket::new_unchecked(b));
    }
    if let (Some(b), Some(v)) = (slot(buf, info, ExtHeader::ImmDt), ext.immdt) {
        immdt::emit(v, b);
    }
    if let (Some(b), Some(v)) = (slot(buf, info, ExtHeader::Ieth), ext.ieth) {
        ieth::emit(v, b);
    }
    hdr_end
}

/// The Ethernet, IP and UDP headers of a stream of frames on one path (a QP's address
/// vector and UDP source port), emitted once by the same code as [`RoceRepr::emit_headers`]:
/// per frame, [`HeaderTemplate::emit`] copies them and patches what changes, the IP and UDP
/// lengths, the IPv4 identification and the IPv4 header checksum (updated from a sum kept
/// with those fields zero, RFC 1071), instead of building and checksumming the headers
/// field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderTemplate {
    bytes: [u8; eth::HEADER_LEN + ipv6::HEADER_LEN + udp::HEADER_LEN],
    ipv4: bool,
    /// IPv4: ones' complement sum of the header words other than total length,
    /// identification and checksum (those are zero in `bytes`).
    sum: u32,
}

impl HeaderTemplate {
    /// The headers of `eth`, `ip` (its identification and lengths are ignored) and `udp`.
    pub fn new(eth: &EthernetRepr, ip: &IpRepr, udp: &UdpRepr) -> HeaderTemplate {
        let mut bytes = [0u8; eth::HEADER_LEN + ipv6::HEADER_LEN + udp::HEADER_LEN];
        let ip = match *ip {
            IpRepr::Ipv4(r) => IpRepr::Ipv4(Ipv4Repr { ident: 0, ..r }),
            v6 => v6,
        };
        emit_outer(eth, &ip, udp, 0, &mut bytes);
        let ipv4 = matches!(ip, IpRepr::Ipv4(_));
        let mut sum = 0;
        if ipv4 {
            let h = &mut bytes[eth::HEADER_LEN..eth::HEADER_LEN + ipv4::HEADER_LEN];
            h[2..4].fill(0); // total length
            h[10..12].fill(0); // checksum
            sum = h.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        }
        HeaderTemplate { bytes, ipv4, sum }
    }

    /// Offset of the BTH in the frames this template starts.
    pub fn len(&self) -> usize {
        eth::HEADER_LEN + if self.ipv4 { ipv4::HEADER_LEN } else { ipv6::HEADER_LEN } + udp::HEADER_LEN
    }

    /// Whether the IP header is IPv4 (it then takes an identification per frame).
    pub fn is_ipv4(&self) -> bool {
        self.ipv4
    }

    /// Writes the headers for a frame whose transport part (BTH to ICRC included) is
    /// `transport_len` bytes, with IPv4 identification `ident` (ignored for IPv6); returns
    /// the offset of the BTH. Panics when `buf` is shorter than [`len`](Self::len).
    pub fn emit(&self, ident: u16, transport_len: usize, buf: &mut [u8]) -> usize {
        let n = self.len();
        buf[..n].copy_from_slice(&self.bytes[..n]);
        let l3 = eth::HEADER_LEN;
        let udp_len = (udp::HEADER_LEN + transport_len) as u16;
        if self.ipv4 {
            let total = (ipv4::HEADER_LEN as u16).wrapping_add(udp_len);
            let mut sum = self.sum + total as u32 + ident as u32;
            sum = (sum & 0xffff) + (sum >> 16);
            sum = (sum & 0xffff) + (sum >> 16);
            let h = &mut buf[l3..l3 + ipv4::HEADER_LEN];
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&ident.to_be_bytes());
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        } else {
            buf[l3 + 4..l3 + 6].copy_from_slice(&udp_len.to_be_bytes());
        }
        buf[n - udp::HEADER_LEN + 4..n - udp::HEADER_LEN + 6].copy_from_slice(&udp_len.to_be_bytes());
        n
    }
}

/// Completes a frame whose headers [`RoceRepr::emit_headers`] wrote and whose payload the
/// caller copied: writes the zero pad and the ICRC, and returns the frame length.
///
/// Panics when `buf` does not start with headers written by `emit_headers` for `payload_len`.
pub fn finish_frame(buf: &mut [u8], payload_len: usize) -> usize {
    let l3 = eth::HEADER_LEN;
    let ip_end = match EthernetFrame::new_unchecked(&buf[..]).ethertype() {
        EtherType::Ipv4 => l3 + Ipv4Packet::new_unchecked(&buf[l3..]).total_len() as usize,
        EtherType::Ipv6 => {
            l3 + ipv6::HEADER_LEN + Ipv6Packet::new_unchecked(&buf[l3..]).payload_len() as usize
        }
        _ => panic!("finish_frame: not a RoCEv2 frame"),
    };
    let pad = pad_len(payload_len);
    let icrc_at = ip_end - ICRC_LEN;
    buf[icrc_at - pad..icrc_at].fill(0);
    let crc = icrc::compute_in_place(&mut buf[l3..icrc_at]).expect("finish_frame: headers not emitted");
    buf[icrc_at..ip_end].copy_from_slice(&crc.to_le_bytes());
    ip_end
}

#[cfg(test)]
mod tests;
