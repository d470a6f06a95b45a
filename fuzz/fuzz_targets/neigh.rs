//! The frame classifier, the ARP and ICMPv6 ND parsers and the neighbour table on arbitrary
//! bytes: no panic; a classified frame's lengths lie inside it; an ND message that parses
//! re-emits to one that parses the same; driven by a sequence of arbitrary frames, routes
//! and timer jumps, the table stays bounded and every frame it sends is an ARP or ND frame
//! that parses.
#![no_main]

use droce_transport::neigh::{NeighConfig, Neighbours, Route, MAX_CONTROL_FRAME};
use droce_transport::wire::icmpv6::NdPacket;
use droce_transport::wire::*;
use droce_transport::Instant;
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const CFG: NeighConfig = NeighConfig { retry_ns: 1000, max_tries: 3, ttl_ns: 100_000, max_held: 4, max_pending: 4 };

fn classifier(data: &[u8]) {
    match classify(data) {
        FrameKind::RoceV2 { udp, len, .. } => {
            assert!(udp + 8 <= len && len <= data.len());
            let _ = data[udp..len].len();
        }
        FrameKind::Icmpv6 { len } => assert!(54 <= len && len <= data.len()),
        _ => {}
    }
    let _ = classify::ip_dst(data);
}

fn nd(data: &[u8], src: Ipv6Addr, dst: Ipv6Addr) {
    let Ok(p) = NdPacket::new_checked(data) else { return };
    let _ = (p.msg_type(), p.code(), p.checksum(), p.flags(), p.target_addr(), p.lladdr_option(1), p.lladdr_option(2));
    if let Ok(r) = NdRepr::parse(&p, src, dst) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut NdPacket::new_unchecked(&mut out[..]), src, dst);
        assert_eq!(NdRepr::parse(&NdPacket::new_checked(&out[..]).unwrap(), src, dst), Ok(r));
    }
}

/// The IPv6 packet with its ICMPv6 checksum made right, so that mutated inputs reach the
/// ND rules behind it.
fn resealed(ip6: &[u8]) -> Option<Vec<u8>> {
    let p = Ipv6Packet::new_checked(ip6).ok()?;
    let (src, dst, plen) = (p.src_addr(), p.dst_addr(), p.payload_len() as usize);
    let mut v = ip6.to_vec();
    let msg = &mut v[40..40 + plen];
    if msg.len() < 4 {
        return None;
    }
    NdPacket::new_unchecked(msg).fill_checksum(src, dst);
    Some(v)
}

fn table(data: &[u8]) {
    let mut n: Neighbours<u32> = Neighbours::new(CFG, MAC, &[Ipv4Addr::new(10, 0, 0, 1)], &["fd00::1".parse().unwrap()]);
    let mut now = 0u64;
    let mut tag = 0u32;
    let mut buf = [0u8; MAX_CONTROL_FRAME];
    for step in data.split(|b| *b == 0xa5).take(64) {
        let Some((&op, rest)) = step.split_first() else { continue };
        let released = match op % 5 {
            0 => n.handle_arp(Instant(now), rest).ok().flatten(),
            1 => n.handle_nd(Instant(now), [2, 0, 0, 0, 0, 2], rest).ok().flatten(),
            2 => resealed(rest).and_then(|v| n.handle_nd(Instant(now), [2, 0, 0, 0, 0, 2], &v).ok().flatten()),
            3 => {
                let ip = match rest.len() {
                    0..=15 => IpAddr::V4(Ipv4Addr::new(10, 0, 0, rest.first().copied().unwrap_or(2))),
                    _ => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&rest[..16]).unwrap())),
                };
                tag += 1;
                if let Route::Send(_, t) | Route::Dropped(t) = n.route(Instant(now), ip, tag) {
                    assert_eq!(t, tag, "the frame given back is the one routed");
                }
                None
            }
            _ => {
                now = now.saturating_add(rest.iter().map(|b| *b as u64 * 97).sum::<u64>());
                let _ = n.handle_timeout(Instant(now));
                None
            }
        };
        if let Some(r) = released {
            assert!(r.frames.len() <= CFG.max_held);
        }
        assert!(n.held_frames() <= CFG.max_held * CFG.max_pending);
        while let Some(len) = n.poll_transmit(&mut buf) {
            let f = &buf[..len];
            match classify(f) {
                FrameKind::Arp => assert!(ArpRepr::parse(&ArpPacket::new_checked(&f[14..]).unwrap()).is_ok()),
                FrameKind::Icmpv6 { len } => {
                    let ip = Ipv6Packet::new_checked(&f[14..len]).unwrap();
                    let p = NdPacket::new_checked(ip.payload()).unwrap();
                    assert!(NdRepr::parse(&p, ip.src_addr(), ip.dst_addr()).is_ok());
                }
                k => panic!("sent a {k:?} frame"),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    classifier(data);
    if data.len() > 14 {
        let _ = ArpRepr::parse(&ArpPacket::new_unchecked(&data[14..])).ok();
    }
    nd(data, "fe80::1".parse().unwrap(), "ff02::1:ff00:1".parse().unwrap());
    table(data);
});
