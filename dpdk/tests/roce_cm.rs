//! IB CM over QP1 between two RoceDevices back to back over memif (manual progress):
//! listen/connect/accept with private data both ways → Established on both sides → RC SEND,
//! WRITE and READ over the connected QPs; disconnect from either side; a consumer reject with
//! private data (REJ 28); a failed accept (REJ 28 at once); a REQ to a service nobody listens
//! on (REJ 8). IPv4 and IPv6.

mod roce_util;

use droce_dpdk::roce::cm::{to_init, CmAgent, CmAgentConfig, CmAgentEvent, ConnId, ConnectParams};
use droce_dpdk::roce::RoceDevice;
use droce_transport::qp::{QpHandle, QpState, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr};
use roce_util::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

struct Node {
    dev: RoceDevice,
    cm: CmAgent,
}

fn step(a: &mut Node, b: &mut Node) {
    a.dev.poll();
    a.cm.poll(&mut a.dev);
    b.dev.poll();
    b.cm.poll(&mut b.dev);
}

/// Pump until `which` has an event; returns it.
fn event(a: &mut Node, b: &mut Node, which: usize) -> CmAgentEvent {
    let t0 = Instant::now();
    loop {
        step(a, b);
        let n = if which == 0 { &mut *a } else { &mut *b };
        if let Some(e) = n.cm.poll_event() {
            return e;
        }
        assert!(t0.elapsed() < T, "no CM event on node {which} within {T:?}");
    }
}

fn wait_wc_nodes(a: &mut Node, b: &mut Node, which: usize, cq: droce_transport::verbs::CqHandle) -> droce_transport::verbs::WorkCompletion {
    let t0 = Instant::now();
    loop {
        step(a, b);
        let n = if which == 0 { &mut *a } else { &mut *b };
        if let Some(wc) = n.dev.device_mut().poll_cq_one(cq).unwrap() {
            return wc;
        }
        assert!(t0.elapsed() < T, "no completion on node {which}");
    }
}

fn params(pd: &[u8]) -> ConnectParams {
    ConnectParams { private_data: pd.to_vec(), ..ConnectParams::rping() }
}

/// One connection: b connects to a:port, a accepts; data both ways; `who` disconnects.
#[allow(clippy::too_many_arguments)]
fn connect_and_use(a: &mut Node, b: &mut Node, ra: &Res, rb: &Res, ipa: IpAddr, ipb: IpAddr, round: u8, who_disconnects: usize) {
    let qa = create_qp(&mut a.dev, ra, QpType::Rc);
    let qb = create_qp(&mut b.dev, rb, QpType::Rc);
    // Receives posted before connecting, as rping does (INIT first, like rdma_create_qp).
    to_init(&mut a.dev, qa).unwrap();
    to_init(&mut b.dev, qb).unwrap();
    let (rbuf_a, rbuf_b) = (ra.base + 0x10000, rb.base + 0x10000);
    a.dev.device_mut().post_recv(qa, RecvWr::new(1).with_sge(rbuf_a, 4096, ra.mr.lkey)).unwrap();
    b.dev.device_mut().post_recv(qb, RecvWr::new(1).with_sge(rbuf_b, 4096, rb.mr.lkey)).unwrap();
    let cid = b.cm.connect(&mut b.dev, SocketAddr::new(ipa, 7174), qb, &params(b"hello from b")).unwrap();
    let (sid, src, dst) = match event(a, b, 0) {
        CmAgentEvent::ConnectRequest { id, src, dst, private_data, responder_resources, initiator_depth, peer_qpn } => {
            assert_eq!(&private_data[..12], b"hello from b");
            assert!(private_data[12..].iter().all(|&x| x == 0));
            assert_eq!((responder_resources, initiator_depth), (1, 1));
            assert_eq!(peer_qpn, qpn(&b.dev, qb));
            (id, src, dst)
        }
        e => panic!("want ConnectRequest, got {e:?}"),
    };
    assert_eq!(src.ip(), ipb);
    assert_eq!(dst, SocketAddr::new(ipa, 7174));
    a.cm.accept(&mut a.dev, sid, qa, &params(b"welcome")).unwrap();
    assert_eq!(a.dev.device().qp_state(qa), Some(QpState::Rts), "passive QP in RTS before the REP leaves");
    // Both sides report Established (b first: it gets the REP; a after the RTU).
    let mut est = [false, false];
    let t0 = Instant::now();
    while !(est[0] && est[1]) {
        step(a, b);
        for (i, n) in [&mut *a, &mut *b].into_iter().enumerate() {
            if let Some(e) = n.cm.poll_event() {
                match e {
                    CmAgentEvent::Established { id, params, private_data } => {
                        assert_eq!(id, if i == 0 { sid } else { cid });
                        assert_eq!(&private_data[..7], b"welcome", "the REP's private data on both sides");
                        assert!(private_data[7..].iter().all(|&x| x == 0));
                        assert_eq!(params.initiator_depth, 1);
                        est[i] = true;
                    }
                    e => panic!("node {i}: want Established, got {e:?}"),
                }
            }
        }
        assert!(t0.elapsed() < T, "not established: {est:?}");
    }
    assert_eq!(b.dev.device().qp_state(qb), Some(QpState::Rts));
    assert_eq!(b.cm.params(cid).unwrap().remote_qpn, qpn(&a.dev, qa));

    // SEND b → a
    let msg = pattern(round, 100);
    b.dev.write_mem(rb.base, &msg).unwrap();
    let mut wr = SendWr::new(10, SendOpcode::Send);
    wr.sg_list.push(droce_transport::verbs::Sge { addr: rb.base, length: 100, lkey: rb.mr.lkey });
    b.dev.device_mut().post_send(qb, wr).unwrap();
    let wc = wait_wc_nodes(a, b, 0, ra.cq);
    assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, 100));
    assert_eq!(read(&a.dev, rbuf_a, 100), msg);
    let wc = wait_wc_nodes(a, b, 1, rb.cq);
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Send));
    // WRITE a → b
    let data = pattern(round.wrapping_add(1), 3000);
    a.dev.write_mem(ra.base + 0x1000, &data).unwrap();
    let mut wr = SendWr::new(11, SendOpcode::Write);
    wr.sg_list.push(droce_transport::verbs::Sge { addr: ra.base + 0x1000, length: 3000, lkey: ra.mr.lkey });
    wr.remote_addr = rb.base + 0x20000;
    wr.rkey = rb.mr.rkey;
    a.dev.device_mut().post_send(qa, wr).unwrap();
    let wc = wait_wc_nodes(a, b, 0, ra.cq);
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(read(&b.dev, rb.base + 0x20000, 3000), data);
    // READ b ← a
    let mut wr = SendWr::new(12, SendOpcode::Read);
    wr.sg_list.push(droce_transport::verbs::Sge { addr: rb.base + 0x30000, length: 3000, lkey: rb.mr.lkey });
    wr.remote_addr = ra.base + 0x1000;
    wr.rkey = ra.mr.rkey;
    b.dev.device_mut().post_send(qb, wr).unwrap();
    let wc = wait_wc_nodes(a, b, 1, rb.cq);
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(read(&b.dev, rb.base + 0x30000, 3000), data);

    // A last SEND to the side that disconnects, which disconnects as soon as it has the
    // receive, its ACK still held (both devices hold ACKs): the ACK leaves inside
    // disconnect(), ahead of the DREQ, so the sender's SEND completes as sent, not flushed.
    let (first, id_first): (usize, ConnId) = if who_disconnects == 0 { (0, sid) } else { (1, cid) };
    {
        let (snd, rcv, q_snd, q_rcv, r_snd, r_rcv) =
            if first == 0 { (&mut *b, &mut *a, qb, qa, rb, ra) } else { (&mut *a, &mut *b, qa, qb, ra, rb) };
        rcv.dev.device_mut().post_recv(q_rcv, RecvWr::new(2).with_sge(r_rcv.base + 0x40000, 4096, r_rcv.mr.lkey)).unwrap();
        let mut wr = SendWr::new(13, SendOpcode::Send);
        wr.sg_list.push(droce_transport::verbs::Sge { addr: r_snd.base, length: 64, lkey: r_snd.mr.lkey });
        snd.dev.device_mut().post_send(q_snd, wr).unwrap();
    }
    let wc = wait_wc_nodes(a, b, first, if first == 0 { ra.cq } else { rb.cq });
    assert_eq!((wc.status, wc.opcode, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, 64));
    // Disconnect: both sides see Disconnected, both QPs end in ERROR.
    {
        let n = if first == 0 { &mut *a } else { &mut *b };
        let tx = n.dev.counters().tx_roce;
        n.cm.disconnect(&mut n.dev, id_first).unwrap();
        assert_eq!(n.dev.counters().tx_roce, tx + 1, "the held ACK leaves inside disconnect()");
        assert!(n.cm.disconnect(&mut n.dev, id_first).is_err(), "second disconnect refused");
    }
    let mut disc = [false, false];
    let t0 = Instant::now();
    while !(disc[0] && disc[1]) {
        step(a, b);
        for (i, n) in [&mut *a, &mut *b].into_iter().enumerate() {
            if let Some(e) = n.cm.poll_event() {
                match e {
                    CmAgentEvent::Disconnected { id } => {
                        assert_eq!(id, if i == 0 { sid } else { cid });
                        disc[i] = true;
                    }
                    e => panic!("node {i}: want Disconnected, got {e:?}"),
                }
            }
        }
        assert!(t0.elapsed() < T, "not disconnected: {disc:?}");
    }
    assert_eq!(a.dev.device().qp_state(qa), Some(QpState::Err));
    assert_eq!(b.dev.device().qp_state(qb), Some(QpState::Err));
    // the last SEND completed as sent; the rest are flushed receives posted and never used
    let mut last_send = None;
    for (n, cq) in [(&mut *a, ra.cq), (&mut *b, rb.cq)] {
        while let Some(wc) = n.dev.device_mut().poll_cq_one(cq).unwrap() {
            if wc.wr_id == 13 {
                last_send = Some((wc.status, wc.opcode));
            }
        }
    }
    assert_eq!(last_send, Some((WcStatus::Success, WcOpcode::Send)), "the last SEND before the DREQ");
}

#[test]
fn cm_connect_accept_reject_disconnect() {
    let wire = Wire::memif("roce-cm", None);
    let ipa = Ipv4Addr::new(10, 0, 7, 1);
    let ipb = Ipv4Addr::new(10, 0, 7, 2);
    let mut ca = wire.config(0);
    let ip6a: Ipv6Addr = "fd00:77::1".parse().unwrap();
    let ip6b: Ipv6Addr = "fd00:77::2".parse().unwrap();
    ca.ipv4 = vec![ipa];
    ca.ipv6 = vec![ip6a];
    ca.seed = 11;
    let mut cb = wire.config(1);
    cb.ipv4 = vec![ipb];
    cb.ipv6 = vec![ip6b];
    cb.seed = 12;
    let mut da = wire.device(0, ca);
    let mut db = wire.device(1, cb);
    // as the libraries run them: ACKs wait one poll (and must still precede a DREQ)
    da.set_hold_acks(true);
    db.set_hold_acks(true);
    let (mut ba, mut bb) = (Buf::new(1 << 20), Buf::new(1 << 20));
    let ra = resources(&mut da, &mut ba);
    let rb = resources(&mut db, &mut bb);
    let cma = CmAgent::new(&mut da, CmAgentConfig { seed: 1, ..Default::default() }).unwrap();
    let cmb = CmAgent::new(&mut db, CmAgentConfig { seed: 2, ..Default::default() }).unwrap();
    assert!(CmAgent::new(&mut da, CmAgentConfig::default()).is_err(), "one QP1 per device");
    let mut a = Node { dev: da, cm: cma };
    let mut b = Node { dev: db, cm: cmb };
    assert_eq!(a.cm.listen(7174), 0x0000_0000_0106_1c06);

    connect_and_use(&mut a, &mut b, &ra, &rb, ipa.into(), ipb.into(), 1, 1);
    connect_and_use(&mut a, &mut b, &ra, &rb, ipa.into(), ipb.into(), 2, 0);
    // over IPv6 (rdma_cm header with IP version 6, GRH source from the IPv6 header, ND)
    connect_and_use(&mut a, &mut b, &ra, &rb, ip6a.into(), ip6b.into(), 3, 1);

    // Consumer reject with private data: REJ 28.
    let qb = create_qp(&mut b.dev, &rb, QpType::Rc);
    let cid = b.cm.connect(&mut b.dev, SocketAddr::new(ipa.into(), 7174), qb, &params(b"let me in")).unwrap();
    let sid = match event(&mut a, &mut b, 0) {
        CmAgentEvent::ConnectRequest { id, .. } => id,
        e => panic!("{e:?}"),
    };
    a.cm.reject(sid, b"go away").unwrap();
    assert!(a.cm.reject(sid, b"twice").is_err());
    match event(&mut a, &mut b, 1) {
        CmAgentEvent::Rejected { id, reason, private_data } => {
            assert_eq!(id, cid);
            assert_eq!(reason.0, 28);
            assert_eq!(&private_data[..7], b"go away");
        }
        e => panic!("want Rejected, got {e:?}"),
    }
    assert_eq!(b.dev.device().qp_state(qb), Some(QpState::Err));

    // A failed accept (a QP that cannot be programmed) refuses with a REJ at once: the
    // active side does not wait out its REP timeout.
    let qb = create_qp(&mut b.dev, &rb, QpType::Rc);
    let cid = b.cm.connect(&mut b.dev, SocketAddr::new(ipa.into(), 7174), qb, &params(b"")).unwrap();
    let sid = match event(&mut a, &mut b, 0) {
        CmAgentEvent::ConnectRequest { id, .. } => id,
        e => panic!("{e:?}"),
    };
    let t0 = Instant::now();
    assert!(a.cm.accept(&mut a.dev, sid, QpHandle(0xdead), &params(b"")).is_err());
    assert!(a.cm.reject(sid, b"").is_err(), "the request is gone after the failed accept");
    match event(&mut a, &mut b, 1) {
        CmAgentEvent::Rejected { id, reason, .. } => {
            assert_eq!(id, cid);
            assert_eq!(reason.0, 28);
        }
        e => panic!("want Rejected, got {e:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "REJ took {:?}", t0.elapsed());
    assert_eq!(b.dev.device().qp_state(qb), Some(QpState::Err));
    assert_eq!(a.cm.counters().qp_errors, 1);

    // Unknown service: REJ 8 from the endpoint, no event on a.
    let qb = create_qp(&mut b.dev, &rb, QpType::Rc);
    let cid = b.cm.connect(&mut b.dev, SocketAddr::new(ipa.into(), 9999), qb, &params(b"")).unwrap();
    match event(&mut a, &mut b, 1) {
        CmAgentEvent::Rejected { id, reason, .. } => {
            assert_eq!(id, cid);
            assert_eq!(reason.0, 8, "invalid service ID");
        }
        e => panic!("want Rejected, got {e:?}"),
    }
    assert!(a.cm.poll_event().is_none());
    assert_eq!(a.cm.endpoint().counters().rejected_no_listener, 1);
    assert_eq!(a.cm.counters().bad_mads + b.cm.counters().bad_mads, 0);
    eprintln!("a: {:?}\nb: {:?}", a.cm.counters(), b.cm.counters());

    let Node { dev: mut da, cm: cma } = a;
    let Node { dev: mut db, cm: cmb } = b;
    cma.close(&mut da);
    cmb.close(&mut db);
    drop(da);
    drop(db);
    drop((ba, bb));
    wire.finish();
}
