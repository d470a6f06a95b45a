//! The ICRC state after a frame's headers, from the previous frame's of the same stream.
//!
//! The frames a QP sends on one path share every header byte except a few fields: the IP
//! total (or payload) length, the IPv4 identification, the UDP length and the transport
//! headers (BTH opcode, flags, PSN, AckReq; the extension headers). CRC-32 is linear: for two
//! messages of one length, `crc(s, a) ^ crc(s, b) = crc0(a ^ b)`, where `crc0` is the CRC
//! register started at zero without the final inversion. A byte `x` at distance `d` from
//! the end of the message contributes `crc0(x, then d zero bytes)`, one lookup in a table per
//! distance. So the ICRC state after a frame's headers is the previous frame's state xor one
//! lookup per header byte that changed, and only the known variable fields are compared
//! (64 bits at a time): no copy of the header, no pass over the constant bytes.
//!
//! The fields a router may rewrite (masked to ones in the ICRC, `icrc.rs`) never count as a
//! change. [`HeaderCrc`] keeps the last state; its owner drops it whenever the constant
//! part (addresses, ports, traffic class: a header template) changes.

use super::{icrc, ipv4, ipv6, udp, Result};

/// Longest transport header (BTH and extension headers) whose ICRC is updated by delta:
/// BTH 12 + AtomicETH 28 (or RETH 16 + ImmDt 4). Longer ones are computed whole.
const MAX_TRANSPORT: usize = 40;

/// Longest header run (IP header to the end of the extension headers) covered.
const MAX_HEADERS: usize = ipv6::HEADER_LEN + udp::HEADER_LEN + MAX_TRANSPORT;

/// CRC-32 (reflected, polynomial 0xEDB88320) byte table.
const fn byte_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut b = 0;
    while b < 256 {
        let mut s = b as u32;
        let mut k = 0;
        while k < 8 {
            s = if s & 1 != 0 { (s >> 1) ^ 0xEDB8_8320 } else { s >> 1 };
            k += 1;
        }
        t[b] = s;
        b += 1;
    }
    t
}

/// `SHIFT[d][x]`: the zero-started CRC register after byte `x` followed by `d` zero bytes.
static SHIFT: [[u32; 256]; MAX_HEADERS] = shift_tables();

const fn shift_tables() -> [[u32; 256]; MAX_HEADERS] {
    let t0 = byte_table();
    let mut t = [[0u32; 256]; MAX_HEADERS];
    t[0] = t0;
    let mut d = 1;
    while d < MAX_HEADERS {
        let mut b = 0;
        while b < 256 {
            let s = t[d - 1][b];
            t[d][b] = (s >> 8) ^ t0[(s & 0xff) as usize];
            b += 1;
        }
        d += 1;
    }
    t
}

/// Bytes of the first 8 of the IP header that the ICRC sees as they are (the others are
/// masked or constant): IPv4 all but the TOS; IPv6 the payload length and next header.
const IPV4_SEEN: u64 = !0x0000_0000_0000_ff00;
const IPV6_SEEN: u64 = 0x00ff_ffff_0000_0000;
/// UDP: all but the checksum (bytes 6 and 7).
const UDP_SEEN: u64 = 0x0000_ffff_ffff_ffff;
/// BTH bytes 0-7: all but byte 4 (the reserved byte the ICRC masks).
const BTH_SEEN: u64 = !0x0000_00ff_0000_0000;

/// The ICRC state after the last headers of one stream of frames, and the variable bytes it
/// covered. `Default` holds nothing: the next [`update`](Self::update) computes in full.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderCrc {
    /// Length of the header run the state covers; 0 when there is none.
    len: usize,
    ip_len: usize,
    crc: u32,
    ip: u64,
    udp: u64,
    /// The transport headers, 8 bytes a word (the last one zero-filled).
    transport: [u64; MAX_TRANSPORT / 8],
}

/// Little-endian 8 bytes at `b[at..]` (in bounds: the caller checked the lengths).
#[inline]
fn load(b: &[u8], at: usize) -> u64 {
    let w = &b[at..at + 8];
    u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])
}

/// Bytes `at..at + 8` of `t` (at least 8 bytes long), zero-filled past its end: the last,
/// partial word is read ending at the end of `t` and shifted down, never copied.
#[inline]
fn chunk(t: &[u8], at: usize) -> u64 {
    match (at + 8).checked_sub(t.len()) {
        None | Some(0) => load(t, at),
        Some(over) => load(t, t.len() - 8) >> (8 * over),
    }
}

/// Adds to `crc` the contribution of the changed bytes `x` (byte `i` of `x` at position
/// `at + i` of a run of `len` bytes).
#[inline]
fn fold(mut crc: u32, mut x: u64, at: usize, len: usize) -> u32 {
    while x != 0 {
        let i = (x.trailing_zeros() / 8) as usize;
        crc ^= SHIFT[len - 1 - at - i][((x >> (i * 8)) & 0xff) as usize];
        x &= !(0xff << (i * 8));
    }
    crc
}

impl HeaderCrc {
    /// The ICRC state after `headers` (the IP header to the end of the extension headers,
    /// as [`icrc::compute_in_place`] takes them, and its result): by delta from the last
    /// call when the layout is the same, else computed in full. Every byte other than the
    /// IP and UDP lengths, the IPv4 identification and the transport headers must be those
    /// of the last call (the caller starts a new `HeaderCrc` when they change); the fields
    /// the ICRC masks may differ.
    pub fn update(&mut self, headers: &mut [u8]) -> Result<u32> {
        let len = headers.len();
        let ip_len = match headers.first() {
            Some(0x45) => ipv4::HEADER_LEN,
            Some(b) if b >> 4 == 6 => ipv6::HEADER_LEN,
            _ => 0,
        };
        let t_at = ip_len + udp::HEADER_LEN;
        if ip_len == 0 || len > MAX_HEADERS || len < t_at + super::bth::HEADER_LEN {
            self.len = 0;
            return icrc::compute_in_place(headers);
        }
        let seen = if ip_len == ipv4::HEADER_LEN { IPV4_SEEN } else { IPV6_SEEN };
        let ip = load(headers, 0) & seen;
        let udp = load(headers, ip_len) & UDP_SEEN;
        let t = &headers[t_at..];
        let words = t.len().div_ceil(8);
        if self.len != len || self.ip_len != ip_len {
            let crc = icrc::compute_in_place(headers)?;
            let t = &headers[t_at..];
            for (k, w) in self.transport[..words].iter_mut().enumerate() {
                *w = chunk(t, k * 8);
            }
            *self = HeaderCrc { len, ip_len, crc, ip, udp, transport: self.transport };
            return Ok(crc);
        }
        let mut crc = self.crc;
        crc = fold(crc, ip ^ self.ip, 0, len);
        crc = fold(crc, udp ^ self.udp, ip_len, len);
        for (k, old) in self.transport[..words].iter_mut().enumerate() {
            let new = chunk(t, k * 8);
            let x = if k == 0 { (new ^ *old) & BTH_SEEN } else { new ^ *old };
            crc = fold(crc, x, t_at + k * 8, len);
            *old = new;
        }
        self.ip = ip;
        self.udp = udp;
        self.crc = crc;
        Ok(crc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Psn, Qpn};
    use crate::wire::{
        icrc, BthRepr, EtherType, EthernetAddress, EthernetRepr, ExtReprs, HeaderTemplate, IpRepr, Ipv4Repr, Ipv6Repr, Opcode,
        RethRepr, UdpRepr,
    };

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn template(v6: bool, tc: u8) -> HeaderTemplate {
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: if v6 { EtherType::Ipv6 } else { EtherType::Ipv4 },
        };
        let ip = if v6 {
            IpRepr::Ipv6(Ipv6Repr {
                src_addr: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1].into(),
                dst_addr: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2].into(),
                next_header: 17,
                payload_len: 0,
                traffic_class: tc,
                flow_label: 0x12345,
                hop_limit: 64,
            })
        } else {
            IpRepr::Ipv4(Ipv4Repr {
                src_addr: [10, 0, 0, 1].into(),
                dst_addr: [10, 0, 0, 2].into(),
                next_header: 17,
                payload_len: 0,
                dscp: tc >> 2,
                ecn: tc & 3,
                ident: 0,
                dont_frag: true,
                hop_limit: 64,
            })
        };
        HeaderTemplate::new(&eth, &ip, &UdpRepr { src_port: 0xc123, dst_port: 4791 })
    }

    /// One header run as the transmit path writes it: template, then BTH and extensions.
    fn headers(tpl: &HeaderTemplate, rng: &mut Rng, psn: u32, buf: &mut [u8]) -> usize {
        let ops = [
            Opcode::RcWriteMiddle,
            Opcode::RcWriteMiddle,
            Opcode::RcWriteMiddle,
            Opcode::RcWriteFirst,
            Opcode::RcWriteLast,
            Opcode::RcSendMiddle,
            Opcode::RcSendLast,
            Opcode::RcReadResponseMiddle,
            Opcode::RcWriteLastImm,
            Opcode::RcWriteOnlyImm,
            Opcode::RcSendLastInv,
        ];
        let r = rng.next();
        let opcode = ops[(r % ops.len() as u64) as usize];
        let plen = if r >> 60 == 0 { (r >> 20) as usize % 4097 } else { 1024 };
        let bth = BthRepr {
            opcode,
            solicited: r >> 40 & 1 == 1,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: crate::types::PKey(0xffff),
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(0x11),
            ack_req: r >> 41 & 1 == 1,
            psn: Psn::new(psn),
        };
        let ext = ExtReprs {
            reth: Some(RethRepr { va: rng.next(), rkey: crate::types::Rkey(rng.next() as u32), len: rng.next() as u32 }),
            immdt: Some(rng.next() as u32),
            ieth: Some(crate::types::Rkey(rng.next() as u32)),
            ..Default::default()
        };
        let transport_len = opcode.info().header_len() + plen + crate::wire::pad_len(plen) + icrc::ICRC_LEN;
        let tp = tpl.emit((r >> 44) as u16, transport_len, buf);
        tp + crate::wire::emit_transport(&bth, &ext, plen, &mut buf[tp..])
    }

    #[test]
    fn delta_matches_full_compute_over_header_streams() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut deltas = 0;
        for (v6, tc) in [(false, 0), (false, 0x2e << 2 | 2), (true, 0), (true, 0xb9)] {
            let tpl = template(v6, tc);
            let mut hc = HeaderCrc::default();
            let mut psn = 0xff_fff0u32;
            for _ in 0..5000 {
                let mut buf = [0u8; 128];
                let h = headers(&tpl, &mut rng, psn, &mut buf);
                // mostly the next PSN, sometimes a jump back (a retransmission)
                psn = if rng.next() % 16 == 0 { psn.wrapping_sub(7) & 0xff_ffff } else { (psn + 1) & 0xff_ffff };
                let run = &mut buf[crate::wire::eth::HEADER_LEN..h];
                let before = run.to_vec();
                let want = icrc::compute_in_place(run).unwrap();
                let cached = hc.len == run.len();
                assert_eq!(hc.update(run).unwrap(), want, "v6 {v6} tc {tc:#x} headers {before:02x?}");
                assert_eq!(run, &before[..], "the headers are left as they were");
                deltas += cached as u32;
            }
        }
        assert!(deltas > 5_000, "the delta path ran ({deltas} of 20000)");
    }

    #[test]
    fn masked_fields_do_not_count_as_changes() {
        let tpl = template(false, 0);
        let mut rng = Rng(7);
        let mut buf = [0u8; 128];
        let h = headers(&tpl, &mut rng, 5, &mut buf);
        let l3 = crate::wire::eth::HEADER_LEN;
        let mut hc = HeaderCrc::default();
        let first = hc.update(&mut buf[l3..h]).unwrap();
        // TOS, TTL, IP checksum, UDP checksum, BTH byte 4: what a router may rewrite
        for at in [1, 8, 10, 11, 26, 27, 32] {
            buf[l3 + at] ^= 0x5a;
        }
        assert_eq!(hc.update(&mut buf[l3..h]).unwrap(), first);
        // and a PSN change does count
        buf[h - 1] ^= 1;
        let want = icrc::compute_in_place(&mut buf[l3..h]).unwrap();
        assert_ne!(want, first);
        assert_eq!(hc.update(&mut buf[l3..h]).unwrap(), want);
    }

    #[test]
    fn shift_table_is_a_crc_of_one_byte_and_zeros() {
        for d in [0usize, 1, 13, MAX_HEADERS - 1] {
            for x in [1u8, 0x80, 0xff] {
                let mut msg = vec![0u8; d + 1];
                msg[0] = x;
                // crc(s, m) ^ crc(s, zeros) over one length is the zero-started register of m
                let raw = icrc::crc32_update(0, &msg) ^ icrc::crc32_update(0, &vec![0u8; d + 1]);
                assert_eq!(SHIFT[d][x as usize], raw, "d {d} x {x:#x}");
            }
        }
    }
}
