//! IB CM over QP1 under loss: with 20% of the frames dropped on both directions of one device
//! (RX and TX) and short CM timeouts, connections still come up by CM retransmissions (REQ,
//! REP, RTU, DREQ/DREP resent), carry an RC SEND, and disconnect; then the peer's GSI agent
//! goes away and a connect ends in `TimedOut` after the configured retries.

mod roce_util;

use droce_dpdk::roce::cm::{to_init, CmAgent, CmAgentConfig, CmAgentEvent, ConnectParams};
use droce_dpdk::roce::{FaultConfig, RoceDevice};
use droce_transport::cm::CmConfig;
use droce_transport::qp::{QpState, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr, Sge};
use roce_util::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn step(a: &mut RoceDevice, ca: &mut Option<CmAgent>, b: &mut RoceDevice, cb: &mut CmAgent) {
    a.poll();
    if let Some(c) = ca {
        c.poll(a);
    }
    b.poll();
    cb.poll(b);
}

fn cfg(seed: u64) -> CmAgentConfig {
    CmAgentConfig {
        // packet life time 2^10 × 4.096 µs ≈ 4 ms, CM response 2^15 × 4.096 µs ≈ 134 ms
        cm: CmConfig { packet_life_time: 10, time_wait: droce_transport::Duration::from_millis(50) },
        seed,
        cm_response_timeout: Some(15),
        max_cm_retries: Some(15),
        min_rnr_timer: 1,
    }
}

#[test]
fn cm_under_loss_and_peer_gone() {
    let wire = Wire::memif("roce-cm-faults", None);
    let ipa = Ipv4Addr::new(10, 0, 8, 1);
    let ipb = Ipv4Addr::new(10, 0, 8, 2);
    let mut c0 = wire.config(0);
    c0.ipv4 = vec![ipa];
    c0.seed = 21;
    c0.faults = Some("both:drop=0.2;seed=5".parse::<FaultConfig>().unwrap());
    let mut c1 = wire.config(1);
    c1.ipv4 = vec![ipb];
    c1.seed = 22;
    let mut a = wire.device(0, c0);
    let mut b = wire.device(1, c1);
    let (mut ba, mut bb) = (Buf::new(1 << 16), Buf::new(1 << 16));
    let ra = resources(&mut a, &mut ba);
    let rb = resources(&mut b, &mut bb);
    let mut ca = Some(CmAgent::new(&mut a, cfg(1)).unwrap());
    let mut cb = CmAgent::new(&mut b, cfg(2)).unwrap();
    ca.as_mut().unwrap().listen(7174);

    for round in 0..5u8 {
        let qa = create_qp(&mut a, &ra, QpType::Rc);
        let qb = create_qp(&mut b, &rb, QpType::Rc);
        to_init(&mut a, qa).unwrap();
        a.device_mut().post_recv(qa, RecvWr::new(1).with_sge(ra.base + 0x8000, 256, ra.mr.lkey)).unwrap();
        let cid = cb.connect(&mut b, SocketAddr::new(ipa.into(), 7174), qb, &ConnectParams::rping()).unwrap();
        let (mut sid, mut est) = (None, [false, false]);
        let t0 = Instant::now();
        while !(est[0] && est[1]) {
            step(&mut a, &mut ca, &mut b, &mut cb);
            let cma = ca.as_mut().unwrap();
            while let Some(e) = cma.poll_event() {
                match e {
                    CmAgentEvent::ConnectRequest { id, .. } => {
                        assert!(sid.is_none(), "one ConnectRequest per REQ, duplicates absorbed");
                        sid = Some(id);
                        cma.accept(&mut a, id, qa, &ConnectParams::rping()).unwrap();
                    }
                    CmAgentEvent::Established { id, .. } => {
                        assert_eq!(Some(id), sid);
                        est[0] = true;
                    }
                    e => panic!("round {round}: a: unexpected {e:?}"),
                }
            }
            while let Some(e) = cb.poll_event() {
                match e {
                    CmAgentEvent::Established { id, .. } => {
                        assert_eq!(id, cid);
                        est[1] = true;
                    }
                    e => panic!("round {round}: b: unexpected {e:?}"),
                }
            }
            assert!(t0.elapsed() < T, "round {round}: not established under loss: {est:?}");
        }
        // one SEND b → a over the lossy link (RC retransmits)
        b.write_mem(rb.base, &pattern(round, 64)).unwrap();
        let mut wr = SendWr::new(7, SendOpcode::Send);
        wr.sg_list.push(Sge { addr: rb.base, length: 64, lkey: rb.mr.lkey });
        b.device_mut().post_send(qb, wr).unwrap();
        let t0 = Instant::now();
        let wc = loop {
            step(&mut a, &mut ca, &mut b, &mut cb);
            if let Some(wc) = a.device_mut().poll_cq_one(ra.cq).unwrap() {
                break wc;
            }
            assert!(t0.elapsed() < T, "round {round}: SEND not received");
        };
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
        assert_eq!(read(&a, ra.base + 0x8000, 64), pattern(round, 64));
        // disconnect from alternating sides
        if round % 2 == 0 {
            cb.disconnect(&mut b, cid).unwrap();
        } else {
            ca.as_mut().unwrap().disconnect(&mut a, sid.unwrap()).unwrap();
        }
        let mut disc = [false, false];
        let t0 = Instant::now();
        while !(disc[0] && disc[1]) {
            step(&mut a, &mut ca, &mut b, &mut cb);
            if let Some(e) = ca.as_mut().unwrap().poll_event() {
                assert_eq!(e, CmAgentEvent::Disconnected { id: sid.unwrap() }, "round {round}");
                disc[0] = true;
            }
            if let Some(e) = cb.poll_event() {
                assert_eq!(e, CmAgentEvent::Disconnected { id: cid }, "round {round}");
                disc[1] = true;
            }
            assert!(t0.elapsed() < T, "round {round}: not disconnected: {disc:?}");
        }
        for (d, cq) in [(&mut a, ra.cq), (&mut b, rb.cq)] {
            while d.device_mut().poll_cq_one(cq).unwrap().is_some() {}
        }
    }
    let s = a.stats();
    let dropped = s.faults_rx.dropped + s.faults_tx.dropped;
    let (ma, mb) = (*ca.as_ref().unwrap().counters(), *cb.counters());
    eprintln!("faults dropped {dropped}; a {ma:?}; b {mb:?}");
    assert!(dropped > 0, "faults injected");
    // 5 rounds × (REQ, RTU, DREQ or DREP) from b without loss would be 15 MADs.
    assert!(mb.mads_tx > 15 || ma.mads_tx > 15, "CM retransmissions happened: a {ma:?} b {mb:?}");

    // Peer gone: a's GSI agent is closed (no QP1: the REQs are dropped by a's transport).
    ca.take().unwrap().close(&mut a);
    let mut c = cfg(3);
    c.max_cm_retries = Some(3);
    cb.close(&mut b);
    let mut cb = CmAgent::new(&mut b, c).unwrap();
    let qb = create_qp(&mut b, &rb, QpType::Rc);
    let cid = cb.connect(&mut b, SocketAddr::new(ipa.into(), 7174), qb, &ConnectParams::rping()).unwrap();
    let t0 = Instant::now();
    let e = loop {
        step(&mut a, &mut None, &mut b, &mut cb);
        if let Some(e) = cb.poll_event() {
            break e;
        }
        assert!(t0.elapsed() < T, "no timeout event");
    };
    let took = t0.elapsed();
    assert_eq!(e, CmAgentEvent::TimedOut { id: cid });
    assert_eq!(b.device().qp_state(qb), Some(QpState::Err));
    // 4 REQs, each waiting 2 × 4 ms + 134 ms
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(5), "timed out after {took:?}");
    assert_eq!(cb.counters().mads_tx, 4, "REQ + 3 retries");
    cb.close(&mut b);
    drop((a, b));
    drop((ba, bb));
    wire.finish();
}
