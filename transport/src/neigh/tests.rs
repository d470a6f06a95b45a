//! One test per rule of neighbour resolution, on frames in and frames out.

use super::*;

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0x5a, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0x5a, 2];
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn cfg() -> NeighConfig {
    NeighConfig { retry_ns: 10, max_tries: 3, ttl_ns: 1000, max_held: 2, max_pending: 2 }
}

/// Port A: 10.0.0.1 and fd00:5::1.
fn port_a() -> Neighbours<u32> {
    Neighbours::new(cfg(), MAC_A, &[IP_A], &[v6("fd00:5::1")])
}

fn sent(n: &mut Neighbours<u32>) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let mut buf = [0u8; MAX_CONTROL_FRAME];
    while let Some(len) = n.poll_transmit(&mut buf) {
        v.push(buf[..len].to_vec());
        assert!(v.len() < 100);
    }
    v
}

fn arp_of(frame: &[u8]) -> ArpRepr {
    assert_eq!(&frame[12..14], &[0x08, 0x06]);
    ArpRepr::parse(&ArpPacket::new_checked(&frame[14..]).unwrap()).unwrap()
}

fn arp(op: ArpOperation, smac: [u8; 6], sip: Ipv4Addr, tip: Ipv4Addr) -> Vec<u8> {
    let r = ArpRepr {
        operation: op,
        source_hardware_addr: EthernetAddress(smac),
        source_protocol_addr: sip,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: tip,
    };
    let mut b = vec![0u8; 28];
    r.emit(&mut ArpPacket::new_unchecked(&mut b[..]));
    b
}

/// The IPv6 packet of an ND frame (from the IPv6 header on).
fn nd_packet(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, repr: NdRepr) -> Vec<u8> {
    let mut b = vec![0u8; 40 + repr.buffer_len()];
    let ip = Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: repr.buffer_len(), traffic_class: 0, flow_label: 0, hop_limit };
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
    repr.emit(&mut NdPacket::new_unchecked(&mut b[40..]), src, dst);
    b
}

fn nd_of(frame: &[u8]) -> (Ipv6Repr, NdRepr) {
    let ip = Ipv6Repr::parse(&Ipv6Packet::new_checked(&frame[14..]).unwrap()).unwrap();
    let nd = NdRepr::parse(&NdPacket::new_checked(&frame[54..]).unwrap(), ip.src_addr, ip.dst_addr).unwrap();
    (ip, nd)
}

// Linux 6.1 on a veth pair: 02:00:00:00:5a:01 (fd00:5::1) resolving 02:00:00:00:5a:02
// (fd00:5::2), the whole NS and NA frames.
#[rustfmt::skip]
const LINUX_NS: [u8; 86] = [
    0x33, 0x33, 0xff, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x5a, 0x01, 0x86, 0xdd, 0x60, 0x00,
    0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfd, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x01, 0xff, 0x00, 0x00, 0x02, 0x87, 0x00, 0x23, 0x8d, 0x00, 0x00, 0x00, 0x00, 0xfd, 0x00,
    0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x01, 0x01,
    0x02, 0x00, 0x00, 0x00, 0x5a, 0x01,
];
#[rustfmt::skip]
const LINUX_NA: [u8; 86] = [
    0x02, 0x00, 0x00, 0x00, 0x5a, 0x01, 0x02, 0x00, 0x00, 0x00, 0x5a, 0x02, 0x86, 0xdd, 0x60, 0x00,
    0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfd, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xfd, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0x00, 0xc2, 0x8a, 0x60, 0x00, 0x00, 0x00, 0xfd, 0x00,
    0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x01,
    0x02, 0x00, 0x00, 0x00, 0x5a, 0x02,
];

#[test]
fn solicitation_and_advert_are_byte_for_byte_linux() {
    let mut a = port_a();
    assert_eq!(a.route(Instant(0), IpAddr::V6(v6("fd00:5::2")), 1), Route::Held);
    assert_eq!(sent(&mut a), vec![LINUX_NS.to_vec()]);
    let mut b: Neighbours<u32> = Neighbours::new(cfg(), MAC_B, &[], &[v6("fd00:5::2")]);
    let r = b.handle_nd(Instant(0), MAC_A, &LINUX_NS[14..]).unwrap();
    assert_eq!(r, Some(Released { mac: MAC_A, frames: vec![] }), "b learns a from the NS");
    assert_eq!(sent(&mut b), vec![LINUX_NA.to_vec()]);
    let r = a.handle_nd(Instant(1), MAC_B, &LINUX_NA[14..]).unwrap();
    assert_eq!(r, Some(Released { mac: MAC_B, frames: vec![1] }));
    assert_eq!(a.route(Instant(2), IpAddr::V6(v6("fd00:5::2")), 2), Route::Send(MAC_B, 2));
    let c = a.counters();
    assert_eq!((c.nd_solicits_tx, c.nd_adverts_rx, b.counters().nd_solicits_rx, b.counters().nd_adverts_tx), (1, 1, 1, 1));
}

#[test]
fn arp_request_for_us_is_answered_and_its_sender_learned() {
    let mut a = port_a();
    let r = a.handle_arp(Instant(0), &arp(ArpOperation::Request, MAC_B, IP_B, IP_A)).unwrap();
    assert_eq!(r, Some(Released { mac: MAC_B, frames: vec![] }));
    let out = sent(&mut a);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].len(), ETH_MIN_FRAME, "padded like Linux");
    assert_eq!(&out[0][0..12], &[MAC_B, MAC_A].concat()[..]);
    let reply = arp_of(&out[0]);
    assert_eq!(reply.operation, ArpOperation::Reply);
    assert_eq!((reply.source_hardware_addr.0, reply.source_protocol_addr), (MAC_A, IP_A));
    assert_eq!((reply.target_hardware_addr.0, reply.target_protocol_addr), (MAC_B, IP_B));
    assert_eq!(a.lookup(IpAddr::V4(IP_B), Instant(1)), Some(MAC_B));
    assert_eq!((a.counters().arp_requests_rx, a.counters().arp_replies_tx), (1, 1));
}

#[test]
fn arp_not_for_us_only_updates_known_senders() {
    let mut a = port_a();
    let other = Ipv4Addr::new(10, 0, 0, 9);
    assert_eq!(a.handle_arp(Instant(0), &arp(ArpOperation::Request, MAC_B, IP_B, other)).unwrap(), None);
    assert!(sent(&mut a).is_empty(), "not ours: no reply");
    assert!(a.entries().is_empty(), "an unknown sender is not added");
    a.handle_arp(Instant(0), &arp(ArpOperation::Request, MAC_B, IP_B, IP_A)).unwrap();
    sent(&mut a);
    let moved = [2, 0, 0, 0, 0, 0x77];
    assert!(a.handle_arp(Instant(5), &arp(ArpOperation::Request, moved, IP_B, other)).unwrap().is_some());
    assert_eq!(a.lookup(IpAddr::V4(IP_B), Instant(6)), Some(moved), "a known sender is updated");
}

#[test]
fn arp_probe_is_answered_but_not_learned() {
    let mut a = port_a();
    let r = a.handle_arp(Instant(0), &arp(ArpOperation::Request, MAC_B, Ipv4Addr::UNSPECIFIED, IP_A)).unwrap();
    assert_eq!(r, None);
    assert!(a.entries().is_empty());
    assert_eq!(sent(&mut a).len(), 1);
}

#[test]
fn malformed_arp_and_nd_are_errors() {
    let mut a = port_a();
    assert!(a.handle_arp(Instant(0), &arp(ArpOperation::Unknown(7), MAC_B, IP_B, IP_A)).is_err());
    assert!(a.handle_arp(Instant(0), &[0u8; 27]).is_err());
    assert!(a.handle_nd(Instant(0), MAC_B, &LINUX_NS[14..60]).is_err(), "truncated");
    let mut hop = LINUX_NS;
    hop[21] = 64;
    assert!(a.handle_nd(Instant(0), MAC_B, &hop[14..]).is_err(), "routed (hop limit 64)");
    let mut bad = LINUX_NS;
    bad[70] ^= 1;
    assert!(a.handle_nd(Instant(0), MAC_B, &bad[14..]).is_err(), "checksum");
    let echo = {
        let mut b = nd_packet(v6("fd00:5::2"), v6("fd00:5::1"), 255, NdRepr::Solicit { target_addr: v6("fd00:5::1"), source_lladdr: None });
        b[40] = 128;
        b
    };
    assert!(a.handle_nd(Instant(0), MAC_B, &echo).is_err(), "echo request");
    assert_eq!(a.counters(), &NeighCounters::default(), "nothing counted as ARP / ND");
    assert!(sent(&mut a).is_empty());
}

#[test]
fn solicitation_rules() {
    let mut a = port_a();
    let b6 = v6("fd00:5::2");
    // not for one of our addresses: counted, ignored
    let ns = nd_packet(b6, v6("ff02::1:ff00:9"), 255, NdRepr::Solicit { target_addr: v6("fd00:5::9"), source_lladdr: Some(EthernetAddress(MAC_B)) });
    assert_eq!(a.handle_nd(Instant(0), MAC_B, &ns).unwrap(), None);
    // duplicate address detection (source ::): no answer, nothing learned
    let dad = nd_packet(Ipv6Addr::UNSPECIFIED, v6("ff02::1:ff00:1"), 255, NdRepr::Solicit { target_addr: v6("fd00:5::1"), source_lladdr: None });
    assert_eq!(a.handle_nd(Instant(0), MAC_B, &dad).unwrap(), None);
    assert!(sent(&mut a).is_empty() && a.entries().is_empty());
    assert_eq!(a.counters().nd_solicits_rx, 2);
    // for our link-local address, without the option: learned from the Ethernet source,
    // answered from the link-local address
    let ll = link_local_from_mac(MAC_A);
    let ns = nd_packet(b6, solicited_node(ll).0, 255, NdRepr::Solicit { target_addr: ll, source_lladdr: None });
    assert!(a.handle_nd(Instant(0), MAC_B, &ns).unwrap().is_some());
    assert_eq!(a.lookup(IpAddr::V6(b6), Instant(0)), Some(MAC_B));
    let out = sent(&mut a);
    let (ip, nd) = nd_of(&out[0]);
    assert_eq!((ip.src_addr, ip.dst_addr, ip.hop_limit), (ll, b6, 255));
    let flags = NdFlags { router: false, solicited: true, override_: true };
    assert_eq!(nd, NdRepr::Advert { flags, target_addr: ll, target_lladdr: Some(EthernetAddress(MAC_A)) });
}

#[test]
fn unsolicited_advert_for_a_stranger_is_not_learned() {
    let mut a = port_a();
    let na = NdRepr::Advert { flags: NdFlags::default(), target_addr: v6("fd00:5::7"), target_lladdr: None };
    assert_eq!(a.handle_nd(Instant(0), MAC_B, &nd_packet(v6("fd00:5::7"), v6("ff02::1"), 255, na)).unwrap(), None);
    assert!(a.entries().is_empty());
    assert_eq!(a.counters().nd_adverts_rx, 1);
}

#[test]
fn solicitation_source_follows_the_target_scope() {
    let mut a = port_a();
    let peer_ll = link_local_from_mac(MAC_B);
    a.route(Instant(0), IpAddr::V6(peer_ll), 1);
    a.route(Instant(0), IpAddr::V6(v6("fd00:5::2")), 2);
    let out = sent(&mut a);
    let srcs: Vec<_> = out.iter().map(|f| nd_of(f).0.src_addr).collect();
    assert_eq!(srcs, vec![link_local_from_mac(MAC_A), v6("fd00:5::1")]);
    assert_eq!(&out[0][0..6], &[0x33, 0x33, 0xff, 0x00, 0x5a, 0x02], "solicited-node group MAC");
}

#[test]
fn route_holds_bounded_and_asks_once() {
    let mut a = port_a();
    let (b, c, d) = (IpAddr::V4(IP_B), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 4)));
    assert_eq!(a.route(Instant(0), b, 1), Route::Held);
    assert_eq!(a.route(Instant(0), b, 2), Route::Held);
    assert_eq!(a.route(Instant(0), b, 3), Route::Dropped(3), "max_held 2");
    assert_eq!(a.route(Instant(0), c, 4), Route::Held);
    assert_eq!(a.route(Instant(0), d, 5), Route::Dropped(5), "max_pending 2");
    assert_eq!(a.counters().queue_full, 2);
    assert_eq!(a.held_frames(), 3);
    let out = sent(&mut a);
    assert_eq!(out.len(), 2, "one request per destination");
    assert_eq!(&out[0][0..6], &[0xff; 6]);
    assert_eq!(arp_of(&out[0]).target_protocol_addr, IP_B);
    assert_eq!(arp_of(&out[0]).source_protocol_addr, IP_A);
    // the reply releases b's frames in order
    let r = a.handle_arp(Instant(1), &arp(ArpOperation::Reply, MAC_B, IP_B, IP_A)).unwrap();
    assert_eq!(r, Some(Released { mac: MAC_B, frames: vec![1, 2] }));
    assert_eq!(a.route(Instant(2), b, 6), Route::Send(MAC_B, 6));
    assert_eq!(a.counters().arp_replies_rx, 1);
}

#[test]
fn resolve_asks_once_retries_and_learns_without_a_frame() {
    let mut a = port_a();
    let b = IpAddr::V4(IP_B);
    assert_eq!(a.resolve(b, Instant(0)), None);
    assert_eq!(a.resolve(b, Instant(1)), None, "pending: no second request");
    let out = sent(&mut a);
    assert_eq!(out.len(), 1);
    assert_eq!(arp_of(&out[0]).target_protocol_addr, IP_B);
    // the request was lost: the retry timer asks again, as for a held frame
    assert!(a.handle_timeout(Instant(10)).is_empty());
    assert_eq!(sent(&mut a).len(), 1, "one retry");
    let r = a.handle_arp(Instant(11), &arp(ArpOperation::Reply, MAC_B, IP_B, IP_A)).unwrap();
    assert_eq!(r, Some(Released { mac: MAC_B, frames: vec![] }));
    assert_eq!(a.resolve(b, Instant(12)), Some(MAC_B));
    assert!(sent(&mut a).is_empty(), "known: nothing asked");
    assert_eq!(a.held_frames(), 0);
    // frames routed while a resolve is pending are held behind it and released with it
    let c = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));
    assert_eq!(a.resolve(c, Instant(20)), None);
    assert_eq!(a.route(Instant(20), c, 7), Route::Held);
    assert_eq!(sent(&mut a).len(), 1, "the frame does not ask again");
    // a resolve that gives up drops nothing it did not hold, and may start again
    assert_eq!(a.handle_timeout(Instant(30)), Vec::<u32>::new());
    assert_eq!(a.handle_timeout(Instant(40)), Vec::<u32>::new());
    assert_eq!(a.handle_timeout(Instant(50)), vec![7]);
    assert_eq!(a.resolve(c, Instant(60)), None);
    assert_eq!(sent(&mut a).len(), 3, "two retries, then a fresh request");
}

#[test]
fn retries_then_drops_counted() {
    let mut a = port_a();
    a.route(Instant(0), IpAddr::V4(IP_B), 1);
    assert_eq!(sent(&mut a).len(), 1);
    assert_eq!(a.poll_timeout(), Some(Instant(10)));
    assert!(a.handle_timeout(Instant(9)).is_empty());
    assert!(sent(&mut a).is_empty(), "not due yet");
    assert!(a.handle_timeout(Instant(10)).is_empty());
    assert!(a.handle_timeout(Instant(20)).is_empty());
    assert_eq!(sent(&mut a).len(), 2, "two retries");
    assert_eq!(a.handle_timeout(Instant(30)), vec![1], "given up after max_tries requests");
    assert!(sent(&mut a).is_empty());
    assert_eq!((a.counters().arp_requests_tx, a.counters().unresolved_drops), (3, 1));
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn static_entries_need_no_request_and_are_not_relearned() {
    let mut a = port_a();
    a.add_static(IpAddr::V4(IP_B), MAC_B);
    assert_eq!(a.route(Instant(u64::MAX), IpAddr::V4(IP_B), 1), Route::Send(MAC_B, 1));
    a.handle_arp(Instant(0), &arp(ArpOperation::Request, [9; 6], IP_B, IP_A)).unwrap();
    assert_eq!(a.entries(), vec![(IpAddr::V4(IP_B), MAC_B, true)]);
}

#[test]
fn learned_entries_expire() {
    let mut a = port_a();
    a.handle_arp(Instant(0), &arp(ArpOperation::Request, MAC_B, IP_B, IP_A)).unwrap();
    sent(&mut a);
    assert_eq!(a.route(Instant(999), IpAddr::V4(IP_B), 1), Route::Send(MAC_B, 1));
    assert_eq!(a.route(Instant(1000), IpAddr::V4(IP_B), 2), Route::Held, "ttl 1000 passed: resolve again");
    assert_eq!(sent(&mut a).len(), 1);
}

#[test]
fn without_ipv4_address_nothing_is_asked() {
    let mut a: Neighbours<u32> = Neighbours::new(cfg(), MAC_A, &[], &[]);
    assert_eq!(a.route(Instant(0), IpAddr::V4(IP_B), 1), Route::Held);
    assert!(!a.has_transmit());
    assert_eq!(a.counters().arp_requests_tx, 0);
    assert_eq!(a.own_ipv6(), &[link_local_from_mac(MAC_A)]);
}

#[test]
fn a_small_buffer_keeps_the_frame_queued() {
    let mut a = port_a();
    a.route(Instant(0), IpAddr::V6(v6("fd00:5::2")), 1);
    let mut small = [0u8; 60];
    assert_eq!(a.poll_transmit(&mut small), None);
    assert!(a.has_transmit());
    assert_eq!(sent(&mut a).len(), 1);
}
