//! IPv6 RoCEv2 GIDs and neighbour discovery: two devices with IPv4 and IPv6 addresses, GID
//! table order like rxe (fe80:: link-local, IPv4-mapped, IPv6), RC over the global IPv6 GIDs
//! and over the link-local GIDs resolved by NS/NA from an empty table, UD over IPv6, and the
//! ND frames in the pcap (checked by tshark when installed).

mod roce_util;

use droce_dpdk::roce::neigh::link_local_from_mac;
use droce_transport::qp::{PathMtu, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr, UdDest};
use droce_transport::{Gid, Psn, QKey};
use roce_util::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

#[test]
fn ipv6_gids_nd_rc_ud() {
    let wire = Wire::memif("roce-ipv6", None);
    let (v6a, v6b): (Ipv6Addr, Ipv6Addr) = ("fd00:77::1".parse().unwrap(), "fd00:77::2".parse().unwrap());
    let pcap = wire.tmp.0.join("b6.pcap");
    let mut ca = wire.config(0);
    ca.ipv4 = vec![Ipv4Addr::new(10, 6, 0, 1)];
    ca.ipv6 = vec![v6a];
    ca.mac = Some([0x02, 0x11, 0x22, 0x33, 0x44, 0x01]);
    let mut cb = wire.config(1);
    cb.ipv6 = vec![v6b];
    cb.mac = Some([0x02, 0x11, 0x22, 0x33, 0x44, 0x02]);
    cb.pcap = Some(pcap.clone());
    let mut a = wire.device(0, ca);
    let mut b = wire.device(1, cb);
    let lla = link_local_from_mac(a.mac());
    let llb = link_local_from_mac(b.mac());
    assert_eq!(lla, "fe80::11:22ff:fe33:4401".parse::<Ipv6Addr>().unwrap());
    assert_eq!(a.gids(), &[Gid::from_ipv6(lla), Gid::from_ipv4(Ipv4Addr::new(10, 6, 0, 1)), Gid::from_ipv6(v6a)]);
    assert_eq!(b.gids(), &[Gid::from_ipv6(llb), Gid::from_ipv6(v6b)]);
    assert_eq!(a.gid_index(&Gid::from_ipv6(v6a)), Some(2));

    let (mut ba, mut bb) = (Buf::new(1 << 20), Buf::new(1 << 20));
    let ra = resources(&mut a, &mut ba);
    let rb = resources(&mut b, &mut bb);
    // one RC pair over the global GIDs, one over the link-local GIDs
    for (k, (sa, sb, ga, gb)) in [(2u8, 1u8, v6a, v6b), (0, 0, lla, llb)].into_iter().enumerate() {
        let qa = create_qp(&mut a, &ra, QpType::Rc);
        let qb = create_qp(&mut b, &rb, QpType::Rc);
        let (na, nb) = (qpn(&a, qa), qpn(&b, qb));
        rc_up(&mut a, qa, sa, Gid::from_ipv6(gb), nb, Psn::new(7), Psn::new(9), PathMtu::Mtu1024);
        rc_up(&mut b, qb, sb, Gid::from_ipv6(ga), na, Psn::new(9), Psn::new(7), PathMtu::Mtu1024);
        let data = pattern(k as u8, 5000);
        a.write_mem(ra.base, &data).unwrap();
        b.device_mut().post_recv(qb, RecvWr::new(1).with_sge(rb.base + 0x10000, 8192, rb.mr.lkey)).unwrap();
        a.device_mut().post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(ra.base, 5000, ra.mr.lkey)).unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Send), "pair {k}");
        let r = wait_wc(&mut a, &mut b, 1, rb.cq, T);
        assert_eq!((r.status, r.byte_len), (WcStatus::Success, 5000), "pair {k}");
        assert_eq!(read(&b, rb.base + 0x10000, 5000), data);
        // READ from b over the same path
        a.device_mut()
            .post_send(
                qa,
                SendWr::new(3, SendOpcode::Read).with_sge(ra.base + 0x20000, 5000, ra.mr.lkey).with_remote(rb.base + 0x10000, rb.mr.rkey),
            )
            .unwrap();
        let w = wait_wc(&mut a, &mut b, 0, ra.cq, T);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaRead), "pair {k}");
        assert_eq!(read(&a, ra.base + 0x20000, 5000), data);
    }
    // ND: a solicited both of b's addresses, b answered and learned a's from the NS
    let ca = a.counters().clone();
    let cb = b.counters().clone();
    assert_eq!((ca.neigh.nd_solicits_tx, ca.neigh.nd_adverts_rx), (2, 2), "{ca:?}");
    assert_eq!((cb.neigh.nd_solicits_rx, cb.neigh.nd_adverts_tx), (2, 2), "{cb:?}");
    assert_eq!(cb.neigh.nd_solicits_tx, 0);
    assert_eq!(ca.neigh.arp_requests_tx, 0);
    let na: Vec<_> = a.neighbours().into_iter().map(|(ip, m, _)| (ip, m)).collect();
    assert!(na.contains(&(IpAddr::V6(v6b), b.mac())) && na.contains(&(IpAddr::V6(llb), b.mac())), "{na:?}");
    let nb: Vec<_> = b.neighbours().into_iter().map(|(ip, m, _)| (ip, m)).collect();
    assert!(nb.contains(&(IpAddr::V6(v6a), a.mac())) && nb.contains(&(IpAddr::V6(lla), a.mac())), "{nb:?}");

    // UD over IPv6 (b → a, b already knows a)
    let qkey = QKey(0x77);
    let ua = create_qp(&mut a, &ra, QpType::Ud);
    let ub = create_qp(&mut b, &rb, QpType::Ud);
    ud_up(&mut a, ua, qkey);
    ud_up(&mut b, ub, qkey);
    b.write_mem(rb.base + 0x30000, &pattern(5, 900)).unwrap();
    a.device_mut().post_recv(ua, RecvWr::new(4).with_sge(ra.base + 0x30000, 940, ra.mr.lkey)).unwrap();
    let dest = UdDest { av: b.av(Gid::from_ipv6(v6a), 1), remote_qpn: qpn(&a, ua), remote_qkey: qkey };
    b.device_mut().post_send(ub, SendWr::new(5, SendOpcode::Send).with_sge(rb.base + 0x30000, 900, rb.mr.lkey).with_ud(dest)).unwrap();
    let r = wait_wc(&mut a, &mut b, 0, ra.cq, T);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 940));
    assert_eq!(read(&a, ra.base + 0x30000 + 40, 900), pattern(5, 900));
    assert_eq!(b.counters().neigh.nd_solicits_tx, 0, "b learned a's addresses from the solicitations");

    drop((a, b));
    let bytes = std::fs::read(&pcap).unwrap();
    let frames = droce_transport::pcap::read(&bytes).unwrap();
    let nd = frames.iter().filter(|f| f.data[12..14] == [0x86, 0xdd] && f.data[20] == 58).count();
    assert_eq!(nd, 4, "2 NS in, 2 NA out");
    for f in frames.iter().filter(|f| f.data[20] == 17) {
        droce_transport::wire::RoceRepr::parse(f.data).expect("IPv6 RoCEv2 frame with a good ICRC");
    }
    if tshark_count(&pcap).is_some() {
        let out = std::process::Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(["-Y", "icmpv6", "-T", "fields", "-e", "icmpv6.type", "-e", "icmpv6.checksum.status"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for l in &lines {
            let mut it = l.split_whitespace();
            let ty = it.next().unwrap();
            assert!(ty == "135" || ty == "136", "{l}");
            assert_eq!(it.next(), Some("1"), "tshark finds the ICMPv6 checksum good: {l}");
        }
    }
    drop((ba, bb));
    wire.finish();
}
