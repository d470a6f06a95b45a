//! Neighbour resolution between two ports on the simulated link: ARP and ND (global and
//! link-local addresses) through loss, duplication and reordering, then bit flips.

use droce_transport::neigh::NeighConfig;
use droce_transport::sim::{LinkConfig, NeighPair};
use droce_transport::time::Duration;
use droce_transport::wire::ipv6::link_local_from_mac;
use droce_transport::wire::{EthernetFrame, Ipv4Packet, Ipv6Packet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const CFG: NeighConfig = NeighConfig { retry_ns: 1_000_000, max_tries: 12, ttl_ns: 60_000_000_000, max_held: 64, max_pending: 8 };

fn lossy(loss: f64, bit_flip: f64) -> LinkConfig {
    LinkConfig { loss, duplicate: 0.05, reorder: 0.1, reorder_window: Duration(50_000), bit_flip, delay: Duration(5_000) }
}

fn b_addrs(p: &NeighPair) -> [IpAddr; 3] {
    [IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), IpAddr::V6("fd00::2".parse().unwrap()), IpAddr::V6(link_local_from_mac(p.mac_b))]
}

/// The IP destination and tag of a data frame.
fn dst_and_tag(f: &[u8]) -> (IpAddr, u32) {
    let tag = u32::from_be_bytes(f[f.len() - 4..].try_into().unwrap());
    match f[12..14] {
        [0x08, 0x00] => (IpAddr::V4(Ipv4Packet::new_checked(&f[14..]).unwrap().dst_addr()), tag),
        _ => (IpAddr::V6(Ipv6Packet::new_checked(&f[14..]).unwrap().dst_addr()), tag),
    }
}

#[test]
fn arp_and_nd_resolve_through_loss() {
    let mut retried = 0;
    for seed in 0..20u64 {
        let mut p = NeighPair::new(CFG, lossy(0.3, 0.0), seed);
        let dsts = b_addrs(&p);
        // a burst to each of b's addresses before anything resolved, and b answering a
        for tag in 0..30u32 {
            p.send(true, dsts[tag as usize % 3], tag);
        }
        assert!(p.run_idle(100_000), "seed {seed}: idle");
        for tag in 100..110u32 {
            p.send(false, IpAddr::V6("fd00::1".parse().unwrap()), tag);
            p.send(false, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), tag);
        }
        assert!(p.run_idle(100_000), "seed {seed}: idle");
        assert_eq!(p.data_dropped, 0, "seed {seed}: every destination resolved");
        assert_eq!(p.a.held_frames() + p.b.held_frames(), 0);
        assert_eq!(p.rx_errors, 0, "seed {seed}: no bit flips, no bad frames");
        // what the link delivered is exactly what it was given, to the right MAC
        assert_eq!((p.received_a.len() + p.received_b.len()) as u64, p.data_copies, "seed {seed}");
        for f in &p.received_b {
            assert_eq!(EthernetFrame::new_checked(&f[..]).unwrap().dst_addr().0, p.mac_b);
            let (ip, tag) = dst_and_tag(f);
            assert_eq!(ip, dsts[tag as usize % 3]);
        }
        for f in &p.received_a {
            assert_eq!(EthernetFrame::new_checked(&f[..]).unwrap().dst_addr().0, p.mac_a);
        }
        let learned = p.a.entries();
        for ip in dsts {
            assert!(learned.contains(&(ip, p.mac_b, false)), "seed {seed}: a learned {ip}");
        }
        let (ca, cb) = (*p.a.counters(), *p.b.counters());
        assert!(ca.arp_requests_tx >= 1 && ca.nd_solicits_tx >= 2 && cb.arp_replies_tx >= 1 && cb.nd_adverts_tx >= 2);
        if ca.arp_requests_tx + ca.nd_solicits_tx > 3 {
            retried += 1;
        }
    }
    assert!(retried > 0, "30% loss made some seed retry");
}

#[test]
fn unreachable_destination_gives_up_and_counts() {
    let mut p = NeighPair::new(CFG, LinkConfig::PERFECT, 1);
    let ghost = IpAddr::V6("fd00::99".parse::<Ipv6Addr>().unwrap());
    for tag in 0..70 {
        p.send(true, ghost, tag);
    }
    assert!(p.run_idle(10_000));
    assert_eq!(p.data_dropped, 70, "64 held then given up, 6 over the hold limit");
    let c = p.a.counters();
    assert_eq!((c.nd_solicits_tx, c.unresolved_drops, c.queue_full), (12, 64, 6));
    assert!(p.now.as_nanos() >= 12 * CFG.retry_ns);
}

#[test]
fn bit_flips_never_break_the_tables() {
    let mut bad_frames = 0;
    for seed in 0..20u64 {
        let mut p = NeighPair::new(CFG, lossy(0.1, 0.3), seed);
        let dsts = b_addrs(&p);
        for tag in 0..60u32 {
            p.send(true, dsts[tag as usize % 3], tag);
            p.send(false, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), tag);
        }
        assert!(p.run_idle(100_000), "seed {seed}: idle");
        assert_eq!(p.a.held_frames() + p.b.held_frames(), 0, "seed {seed}: nothing stuck");
        bad_frames += p.rx_errors;
    }
    assert!(bad_frames > 0, "flipped ND frames were seen and refused");
}
