//! Tests of the RoCEv2 frame builder and parser: frames Linux rxe sent, parsed and rebuilt byte
//! for byte (also through the header template), and malformed frames rejected.

use super::super::aeth::AethSyndrome;
use super::super::eth::EthernetAddress;
use super::super::opcode::Opcode;
use super::*;
use crate::types::{Msn, PKey, Psn, QKey, Qpn};
use std::net::Ipv4Addr;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// A1_rc_pingpong_64.pcap frames 1 (SEND Only, 64 bytes of 0x7b) and 2 (ACK).
const A1_F1: &str = "52540077001052540077001108004500006c504940004011ced1c0a84d0bc0a84d0ac29912b7005800000400ffff0000\
001380735b2c7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b\
7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7bd69045a8";
const A1_F2: &str =
    "525400770011525400770010080045000030d204400040114d52c0a84d0ac0a84d0bc29912b7\
001c00001100ffff0000002300735b2c1f000001974c20b8";

fn bth(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: Qpn::new(dest_qp),
        ack_req: false,
        psn: Psn::new(psn),
    }
}

#[test]
fn golden_send_only() {
    let f = hex(A1_F1);
    let (r, pl) = RoceRepr::parse(&f).unwrap();
    assert_eq!(r.bth.opcode, Opcode::RcSendOnly);
    assert_eq!(r.bth.dest_qp, Qpn::new(0x13));
    assert_eq!(r.bth.psn, Psn::new(0x735b2c));
    assert!(r.bth.ack_req);
    assert_eq!(r.udp.src_port, 49817);
    assert_eq!(r.ip.src_gid().to_string(), "::ffff:192.168.77.11");
    assert_eq!(pl, 54..118);
    assert!(f[pl.clone()].iter().all(|&b| b == 0x7b));
    assert!(r.check().is_ok());
    assert_eq!(r.header_len(), 54);
    assert_eq!(r.frame_len(64), f.len());
    let mut out = vec![0u8; f.len()];
    assert_eq!(r.emit(&f[pl], &mut out), f.len());
    assert_eq!(out, f);
}

/// rxe's frames rebuilt through a header template (the path the device sends on) come
/// out byte for byte, IPv4 identification and checksum included.
#[test]
fn template_rebuilds_rxe_frames() {
    for f in [hex(A1_F1), hex(A1_F2)] {
        let (r, pl) = RoceRepr::parse(&f).unwrap();
        let IpRepr::Ipv4(v4) = r.ip else { panic!("IPv4 vector") };
        let t = HeaderTemplate::new(&r.eth, &r.ip, &r.udp);
        assert_eq!((t.len(), t.is_ipv4()), (42, true));
        let mut out = vec![0u8; f.len()];
        let plen = pl.len();
        let tlen = r.bth.opcode.info().header_len() + plen + pad_len(plen) + ICRC_LEN;
        let tp = t.emit(v4.ident, tlen, &mut out);
        let h = tp + emit_transport(&r.bth, &r.ext, plen, &mut out[tp..]);
        out[h..h + plen].copy_from_slice(&f[pl]);
        assert_eq!(finish_frame(&mut out, plen), f.len());
        assert_eq!(out, f);
    }
}

/// A template's headers equal `emit_headers`' for every length and identification tried
/// (the checksum update carries), over IPv4 with DSCP/TTL set and over IPv6.
#[test]
fn template_matches_emit_headers() {
    let eth = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        ethertype: EtherType::Ipv4,
    };
    let v4 = IpRepr::from_gids(
        Gid::from_ipv4(Ipv4Addr::new(192, 168, 255, 254)),
        Gid::from_ipv4(Ipv4Addr::new(10, 255, 0, 1)),
        0xb8,
        255,
        0,
    )
    .unwrap();
    let v6 = IpRepr::from_gids(
        Gid::from_ipv6("fe80::1".parse().unwrap()),
        Gid::from_ipv6("2001:db8::ffff:2".parse().unwrap()),
        0x28,
        17,
        0x12345,
    )
    .unwrap();
    let udp = UdpRepr { src_port: 0xfffe, dst_port: ROCE_V2_PORT };
    for ip in [v4, v6] {
        let t = HeaderTemplate::new(&eth, &ip, &udp);
        for (plen, ident) in [(0usize, 0u16), (1, 1), (64, 0xffff), (1023, 0x8000), (4096, 0xfffe), (9000, 0x1234)] {
            for op in [Opcode::RcSendOnly, Opcode::RcWriteFirst, Opcode::RcAcknowledge] {
                let plen = if op == Opcode::RcAcknowledge { 0 } else { plen };
                let ip = match ip {
                    IpRepr::Ipv4(r) => IpRepr::Ipv4(Ipv4Repr { ident, ..r }),
                    v6 => v6,
                };
                let r = RoceRepr::new(eth, ip, udp, bth(op, 0xabcdef, 0x123456));
                let n = r.frame_len(plen);
                let (mut want, mut got) = (vec![0u8; n], vec![0u8; n]);
                let h = r.emit_headers(plen, &mut want);
                let tp = t.emit(ident, n - t.len(), &mut got);
                got[tp..h].copy_from_slice(&want[tp..h]);
                assert_eq!(got[..h], want[..h], "{op:?} {plen} B ident {ident:#x}");
            }
        }
    }
}

#[test]
fn golden_ack() {
    let f = hex(A1_F2);
    let (r, pl) = RoceRepr::parse(&f).unwrap();
    assert_eq!(r.bth.opcode, Opcode::RcAcknowledge);
    assert_eq!(
        r.ext.aeth,
        Some(AethRepr {
            syndrome: AethSyndrome::Ack { credits: 31 },
            msn: Msn::new(1)
        })
    );
    assert!(pl.is_empty());
    let mut out = vec![0u8; f.len()];
    assert_eq!(r.emit(&[], &mut out), f.len());
    assert_eq!(out, f);
    // Ethernet padding after the IP packet is ignored.
    let mut padded = f.clone();
    padded.extend_from_slice(&[0, 0]);
    assert_eq!(RoceRepr::parse(&padded).unwrap().0, r);
    // Truncation anywhere fails.
    for n in 0..f.len() {
        assert!(RoceRepr::parse(&f[..n]).is_err(), "len {n}");
    }
}

fn ud_repr() -> RoceRepr {
    let ip = IpRepr::from_gids(
        Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)),
        Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2)),
        0,
        64,
        0,
    )
    .unwrap();
    let mut r = RoceRepr::new(
        EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::Ipv4,
        },
        ip,
        UdpRepr {
            src_port: 0xc001,
            dst_port: ROCE_V2_PORT,
        },
        bth(Opcode::UdSendOnlyImm, 0x11, 7),
    );
    r.ext.deth = Some(DethRepr {
        qkey: QKey(0x11111111),
        src_qp: Qpn::new(0x22),
    });
    r.ext.immdt = Some(0x1234_5678);
    r
}

#[test]
fn roundtrip_with_pad() {
    let r = ud_repr();
    for n in 0..9usize {
        let payload: Vec<u8> = (0..n as u8).collect();
        let mut buf = vec![0xeeu8; r.frame_len(n) + 5];
        let len = r.emit(&payload, &mut buf);
        assert_eq!(len, r.frame_len(n));
        assert_eq!(len % 4, (14 + 20 + 8) % 4);
        let (p, pl) = RoceRepr::parse(&buf[..len]).unwrap();
        assert_eq!(&buf[pl.clone()], &payload[..]);
        let mut expect = r;
        expect.bth.pad_count = pad_len(n) as u8;
        if let IpRepr::Ipv4(ref mut i) = expect.ip {
            i.payload_len = len - 14 - 20;
        }
        assert_eq!(p, expect);
        assert!(buf[pl.end..len - 4].iter().all(|&b| b == 0), "pad is zero");
    }
}

#[test]
fn cnp_and_missing_headers() {
    let mut r = ud_repr();
    r.bth = bth(Opcode::Cnp, 0x11, 0);
    r.bth.becn = true;
    assert!(r.check().is_err()); // the DETH and ImmDt are superfluous
    r.ext.deth = None;
    r.ext.immdt = None;
    assert!(r.check().is_ok());
    let mut buf = [0u8; 128];
    let len = r.emit(&[], &mut buf);
    assert_eq!(len, 14 + 20 + 8 + 12 + 16 + 4);
    let (p, pl) = RoceRepr::parse(&buf[..len]).unwrap();
    assert!(pl.is_empty());
    assert_eq!(p.bth, r.bth);
    // A payload on an opcode without one is rejected, even with a good ICRC.
    let mut w = r;
    w.bth = bth(Opcode::RcSendOnly, 1, 1);
    let len = w.emit(&[0x1f, 0, 0, 9, 1, 2, 3, 4], &mut buf);
    assert!(RoceRepr::parse(&buf[..len]).is_ok());
    buf[14 + 20 + 8] = Opcode::RcAcknowledge as u8;
    let c = icrc::compute(&buf[14..len - 4]).unwrap();
    buf[len - 4..len].copy_from_slice(&c.to_le_bytes());
    assert!(RoceRepr::parse(&buf[..len]).is_err());
    // The same bytes without the extra 4 are a good ACK.
    let (hdr, len) = (14 + 20 + 8, len - 4);
    buf[hdr - 8 + 4..hdr - 8 + 6].copy_from_slice(&((len - hdr + 8) as u16).to_be_bytes());
    if let IpRepr::Ipv4(_) = w.ip {
        let mut ip = Ipv4Packet::new_unchecked(&mut buf[14..34]);
        ip.set_total_len((len - 14) as u16);
        ip.fill_checksum();
    }
    let c = icrc::compute(&buf[14..len - 4]).unwrap();
    buf[len - 4..len].copy_from_slice(&c.to_le_bytes());
    let (ack, _) = RoceRepr::parse(&buf[..len]).unwrap();
    assert_eq!(ack.ext.aeth.unwrap().msn, Msn::new(9));
}

/// Recomputes the ICRC so that a test edit is rejected for its own sake, not the CRC's.
fn reseal(f: &mut [u8]) {
    let n = f.len();
    let c = icrc::compute(&f[14..n - 4]).unwrap();
    f[n - 4..].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn rejects_inconsistent_lengths_and_flags() {
    let good = hex(A1_F1);
    // A pad count on an opcode without payload.
    let mut f = hex(A1_F2);
    f[43] |= 0x10;
    reseal(&mut f);
    assert!(RoceRepr::parse(&f).is_err());
    // A pad count on a payload-carrying packet is fine: it shortens the payload.
    let mut f = good.clone();
    f[43] |= 0x30;
    reseal(&mut f);
    assert_eq!(RoceRepr::parse(&f).unwrap().1, 54..115);
    // Transport length not a multiple of 4 (one byte more, lengths adjusted).
    let mut f = good.clone();
    f.insert(100, 0x7b);
    f[17] += 1; // IP total length
    f[39] += 1; // UDP length
    reseal(&mut f);
    assert!(RoceRepr::parse(&f).is_err());
    // UDP length disagreeing with the IP length.
    let mut f = good.clone();
    f[39] -= 4;
    reseal(&mut f);
    assert!(RoceRepr::parse(&f).is_err());
    // IPv4 fragments, IP options, a non-UDP protocol.
    for (i, v) in [(20usize, 0x20u8), (14, 0x46), (23, 6)] {
        let mut f = good.clone();
        if i == 20 {
            f[i] |= v;
        } else {
            f[i] = v;
        }
        reseal(&mut f);
        assert!(RoceRepr::parse(&f).is_err(), "byte {i}");
    }
    // A reserved AETH syndrome.
    let mut f = hex(A1_F2);
    f[54] = 0x40;
    reseal(&mut f);
    assert!(RoceRepr::parse(&f).is_err());
    assert!(RoceRepr::parse_without_icrc(&f).is_err());
    // parse_without_icrc shows a frame with a bad ICRC; parse does not.
    let mut f = good.clone();
    f[60] ^= 1;
    assert!(RoceRepr::parse(&f).is_err());
    assert!(RoceRepr::parse_without_icrc(&f).is_ok());
}

#[test]
fn rejects_non_roce() {
    let mut f = hex(A1_F2);
    f[14 + 20 + 3] = 0xb8; // UDP dst 4792
    assert!(RoceRepr::parse(&f).is_err());
    let mut g = hex(A1_F2);
    g[12] = 0x08;
    g[13] = 0x06; // ARP
    assert!(RoceRepr::parse(&g).is_err());
}
