//! Neighbour edge cases: static entries (no ARP from the side that has them), a peer that never
//! answers (requests retried, held frames dropped and counted, the RC QP fails with
//! RETRY_EXC_ERR instead of hanging), and a full hold queue.

mod roce_util;

use droce_dpdk::roce::NeighConfig;
use droce_transport::qp::{PathMtu, QpState, QpType};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr};
use droce_transport::{Gid, Psn, Qpn};
use roce_util::*;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

#[test]
fn static_entries_and_unresolvable_peer() {
    let wire = Wire::memif("roce-neigh", None);
    let (ipa, ipb) = (Ipv4Addr::new(10, 3, 0, 1), Ipv4Addr::new(10, 3, 0, 2));
    let mac_b = [0x02, 0, 0, 0, 0x3b, 0x02];
    let neigh = NeighConfig { retry_ns: 2_000_000, max_tries: 3, max_held: 8, ..NeighConfig::default() };
    let mut ca = wire.config(0);
    ca.ipv4 = vec![ipa];
    ca.neighbours = vec![(IpAddr::V4(ipb), mac_b)];
    ca.neigh = neigh;
    let mut cb = wire.config(1);
    cb.ipv4 = vec![ipb];
    cb.mac = Some(mac_b);
    cb.neigh = neigh;
    let mut a = wire.device(0, ca);
    let mut b = wire.device(1, cb);
    assert_eq!(a.neighbours(), vec![(IpAddr::V4(ipb), mac_b, true)]);
    let (mut ba, mut bb) = (Buf::new(1 << 16), Buf::new(1 << 16));
    let ra = resources(&mut a, &mut ba);
    let rb = resources(&mut b, &mut bb);
    let qa = create_qp(&mut a, &ra, QpType::Rc);
    let qb = create_qp(&mut b, &rb, QpType::Rc);
    let (na, nb) = (qpn(&a, qa), qpn(&b, qb));
    rc_up(&mut a, qa, 1, Gid::from_ipv4(ipb), nb, Psn::new(1), Psn::new(2), PathMtu::Mtu1024);
    rc_up(&mut b, qb, 1, Gid::from_ipv4(ipa), na, Psn::new(2), Psn::new(1), PathMtu::Mtu1024);
    b.device_mut().post_recv(qb, RecvWr::new(1).with_sge(rb.base, 4096, rb.mr.lkey)).unwrap();
    a.device_mut().post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(ra.base, 2000, ra.mr.lkey)).unwrap();
    assert_eq!(wait_wc(&mut a, &mut b, 0, ra.cq, T).status, WcStatus::Success);
    assert_eq!(wait_wc(&mut a, &mut b, 1, rb.cq, T).status, WcStatus::Success);
    assert_eq!(a.counters().neigh.arp_requests_tx, 0, "static entry: no ARP");
    assert_eq!(b.counters().neigh.arp_requests_tx, 1, "b resolves a (for the ACK)");
    assert_eq!(a.counters().neigh.arp_replies_tx, 1);
    // b's reply did not replace a's static entry
    assert_eq!(a.neighbours(), vec![(IpAddr::V4(ipb), mac_b, true)]);

    // a peer that does not exist
    let ghost = Ipv4Addr::new(10, 3, 0, 99);
    let qg = create_qp(&mut a, &ra, QpType::Rc);
    {
        use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
        use droce_transport::verbs::AccessFlags;
        let av = a.av(Gid::from_ipv4(ghost), 1);
        let d = a.device_mut();
        let (x, m) = init_attr(AccessFlags::ALL);
        d.modify_qp(qg, &x, m).unwrap();
        let (x, m) = rtr_attr(av, PathMtu::Mtu1024, Qpn::new(0x99), Psn::new(0), 16, 1);
        d.modify_qp(qg, &x, m).unwrap();
        // timeout 10 (4 ms), retry_cnt 2: the requester gives up after ~12 ms
        let (x, m) = rts_attr(Psn::new(0), 10, 2, 2, 16);
        d.modify_qp(qg, &x, m).unwrap();
    }
    for i in 0..4 {
        a.device_mut().post_send(qg, SendWr::new(100 + i, SendOpcode::Send).with_sge(ra.base, 3000, ra.mr.lkey)).unwrap();
    }
    let t0 = Instant::now();
    let wc = loop {
        a.poll();
        b.poll();
        if let Some(wc) = a.device_mut().poll_cq_one(ra.cq).unwrap() {
            break wc;
        }
        assert!(t0.elapsed() < T, "the QP to a ghost never failed");
    };
    assert_eq!((wc.wr_id, wc.status), (100, WcStatus::RetryExcErr));
    assert_eq!(a.device().qp_state(qg), Some(QpState::Err));
    // let the neighbour timers finish
    pump(&mut a, &mut b, Duration::from_millis(30));
    let c = a.counters();
    // one round is max_tries (3) requests; frames retransmitted after a round gave up start
    // another round (as Linux resolves again for new packets)
    assert!(c.neigh.arp_requests_tx >= 3, "{c:?}");
    assert!(c.neigh.queue_full > 0, "retransmissions overflowed the 8-frame hold queue: {c:?}");
    assert!(c.neigh.unresolved_drops > 0, "{c:?}");
    assert_eq!(b.counters().neigh.arp_requests_rx, c.neigh.arp_requests_tx, "b saw the broadcasts");
    assert_eq!(b.counters().neigh.arp_replies_tx, 0, "and answered none: not its address");
    // the healthy QP is unaffected
    b.device_mut().post_recv(qb, RecvWr::new(2).with_sge(rb.base, 4096, rb.mr.lkey)).unwrap();
    a.device_mut().post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(ra.base, 100, ra.mr.lkey)).unwrap();
    let mut ok = false;
    let t0 = Instant::now();
    while !ok && t0.elapsed() < T {
        a.poll();
        b.poll();
        while let Some(wc) = a.device_mut().poll_cq_one(ra.cq).unwrap() {
            if wc.wr_id == 2 {
                assert_eq!(wc.status, WcStatus::Success);
                ok = true;
            }
        }
    }
    assert!(ok, "healthy QP still works");
    drop((a, b));
    drop((ba, bb));
    wire.finish();
}
