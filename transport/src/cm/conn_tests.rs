//! The connection state machine on records: two ends wired back to back, with losses,
//! duplicates, MRA, REJ and timeouts. Linux-exact bytes are checked in `tests/cm_golden.rs`.

use super::*;
use crate::cm::rdma_cm::{self, CmaAddrs, CmaHeaderRepr, PortSpace};
use crate::cm::{mra, req};
use crate::types::{Gid, PKey, QKey};

const T0: Instant = Instant::from_nanos(1_000_000_000);

fn path() -> PathRepr {
    PathRepr {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: Gid::from_ipv4(core::net::Ipv4Addr::new(10, 0, 0, 1)),
        remote_gid: Gid::from_ipv4(core::net::Ipv4Addr::new(10, 0, 0, 2)),
        flow_label: rdma_cm::roce_flow_label(40000, 7174),
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 19,
    }
}

fn req() -> ReqRepr {
    let mut private_data = [0u8; req::PRIVATE_DATA_LEN];
    CmaHeaderRepr {
        src_port: 40000,
        addrs: CmaAddrs::V4 {
            src: core::net::Ipv4Addr::new(10, 0, 0, 1),
            dst: core::net::Ipv4Addr::new(10, 0, 0, 2),
        },
    }
    .emit(&mut private_data);
    ReqRepr {
        local_comm_id: 0x1111,
        service_id: rdma_cm::service_id(PortSpace::TCP, 7174),
        local_ca_guid: 0xa,
        local_qkey: QKey(0),
        local_qpn: Qpn::new(0x31),
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 4,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: req::transport_service_type::RC,
        end_to_end_flow_control: false,
        starting_psn: Psn::new(0xaaaaaa),
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: PKey(0xffff),
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 6,
        max_cm_retries: 2,
        srq: false,
        extended_transport_type: 0,
        primary_path: path(),
        alternate_path: None,
        sap_supported: false,
        private_data,
    }
}

fn rep_for(r: &ReqRepr) -> RepRepr {
    RepRepr::accepting(r, 0x2222, Qpn::new(0x21), Psn::new(0xbbbbbb), 0xb)
}

/// Moves every queued MAD from `from` to `to`, returning how many went.
fn deliver(now: Instant, from: &mut Connection, to: &mut Connection) -> usize {
    let mut n = 0;
    while let Some(m) = from.poll_transmit() {
        // Through the bytes, as on the wire.
        let mut b = [0u8; crate::cm::MAD_SIZE];
        m.emit(&mut b);
        let m = CmMad::parse(&b).unwrap();
        let _ = to.handle_mad(now, &m);
        n += 1;
    }
    n
}

fn drain(c: &mut Connection) -> Vec<CmMad> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

fn events(c: &mut Connection) -> Vec<CmEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// Active connects, passive accepts the REQ it got.
fn pair() -> (Connection, Connection) {
    let mut a = Connection::connect(T0, CmConfig::default(), 7, req());
    let out = drain(&mut a);
    assert_eq!(out.len(), 1);
    let CmMessage::Req(r) = &out[0].message else {
        panic!()
    };
    let p = Connection::accept(
        T0,
        CmConfig::default(),
        out[0].header.transaction_id,
        r,
        rep_for(r),
    );
    (a, p)
}

#[test]
fn three_way_handshake_and_disconnect() {
    let (mut a, mut p) = pair();
    assert_eq!(a.state(), CmState::ReqSent);
    assert_eq!(p.state(), CmState::RepSent);
    assert_eq!(a.params(), None, "the active side learns them from the REP");
    let early = *p
        .params()
        .expect("the passive side knows them before sending the REP");
    assert_eq!(deliver(T0, &mut p, &mut a), 1, "REP");
    assert_eq!(deliver(T0, &mut a, &mut p), 1, "RTU");
    assert_eq!(
        (a.state(), p.state()),
        (CmState::Established, CmState::Established)
    );
    let [CmEvent::Established(pa)] = events(&mut a)[..] else {
        panic!()
    };
    let [CmEvent::Established(pp)] = events(&mut p)[..] else {
        panic!()
    };
    assert_eq!(pp, early);
    assert_eq!(a.params(), Some(&pa));
    // Each side sends with the PSN the other expects (Linux cm.c direction).
    assert_eq!(
        (pa.remote_qpn, pp.remote_qpn),
        (Qpn::new(0x21), Qpn::new(0x31))
    );
    assert_eq!(
        (pa.sq_psn, pa.rq_psn),
        (Psn::new(0xbbbbbb), Psn::new(0xaaaaaa))
    );
    assert_eq!((pp.sq_psn, pp.rq_psn), (pa.rq_psn, pa.sq_psn));
    assert_eq!((pa.path_mtu, pa.retry_count, pp.retry_count), (3, 7, 7));
    assert_eq!((pa.rnr_retry_count, pp.rnr_retry_count), (6, 6));
    // READ credits: what one side may issue is what the other accepts.
    assert_eq!((pa.initiator_depth, pp.responder_resources), (4, 4));
    assert_eq!((pa.responder_resources, pp.initiator_depth), (1, 1));
    assert_eq!(pa.path.remote_gid, pp.path.local_gid);
    assert_eq!(pa.path.local_gid, pp.path.remote_gid);
    assert_eq!((pa.remote_ca_guid, pp.remote_ca_guid), (0xb, 0xa));
    assert_eq!((a.poll_timeout(), p.poll_timeout()), (None, None));

    assert!(a.disconnect(T0));
    assert!(!a.disconnect(T0), "only once");
    assert_eq!(a.state(), CmState::DreqSent);
    assert_eq!(deliver(T0, &mut a, &mut p), 1, "DREQ");
    assert_eq!(p.state(), CmState::TimeWait);
    assert_eq!(events(&mut p), [CmEvent::Disconnected]);
    assert_eq!(deliver(T0, &mut p, &mut a), 1, "DREP");
    assert_eq!(a.state(), CmState::TimeWait);
    assert_eq!(events(&mut a), [CmEvent::Disconnected]);

    // TimeWait ends on its timer, not before.
    let end = a.poll_timeout().unwrap();
    assert_eq!(end, T0 + CmConfig::default().time_wait);
    a.handle_timeout(Instant::from_nanos(end.as_nanos() - 1));
    assert_eq!(a.state(), CmState::TimeWait);
    a.handle_timeout(end);
    assert_eq!(
        (a.state(), events(&mut a)),
        (CmState::Closed, vec![CmEvent::TimeWaitExit])
    );
}

#[test]
fn all_mads_share_the_transaction_id() {
    let (mut a, mut p) = pair();
    let rep = drain(&mut p);
    a.handle_mad(T0, &rep[0]).unwrap();
    let rtu = drain(&mut a);
    p.handle_mad(T0, &rtu[0]).unwrap();
    a.disconnect(T0);
    let dreq = drain(&mut a);
    p.handle_mad(T0, &dreq[0]).unwrap();
    let drep = drain(&mut p);
    for m in rep.iter().chain(&rtu).chain(&dreq).chain(&drep) {
        assert_eq!(m.header.transaction_id, 7);
    }
    let CmMessage::Dreq(d) = &dreq[0].message else {
        panic!()
    };
    assert_eq!(d.remote_qpn, Qpn::new(0x21), "DREQ names the peer's QPN");
}

#[test]
fn lost_req_is_resent_then_gives_up() {
    let mut a = Connection::connect(T0, CmConfig::default(), 1, req());
    drain(&mut a); // lost
                   // 2 × 4.096 µs × 2^18 + 4.096 µs × 2^20 ≈ 6.4 s.
    let wait = timeout_exp(18) + timeout_exp(18) + timeout_exp(20);
    assert_eq!(a.poll_timeout(), Some(T0 + wait));
    a.handle_timeout(T0 + Duration::from_millis(1000));
    assert!(drain(&mut a).is_empty(), "not yet");
    for _ in 0..2 {
        let now = a.poll_timeout().unwrap();
        a.handle_timeout(now);
        let out = drain(&mut a);
        assert!(matches!(
            out[..],
            [CmMad {
                message: CmMessage::Req(_),
                ..
            }]
        ));
    }
    let now = a.poll_timeout().unwrap();
    a.handle_timeout(now);
    assert!(drain(&mut a).is_empty());
    assert_eq!(
        (a.state(), events(&mut a)),
        (CmState::Closed, vec![CmEvent::TimedOut])
    );
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn lost_rtu_the_duplicate_rep_brings_it_back() {
    let (mut a, mut p) = pair();
    deliver(T0, &mut p, &mut a);
    drain(&mut a); // RTU lost
    let t = p.poll_timeout().unwrap();
    p.handle_timeout(t);
    assert_eq!(deliver(t, &mut p, &mut a), 1, "REP resent");
    assert_eq!(deliver(t, &mut a, &mut p), 1, "RTU resent");
    assert_eq!(p.state(), CmState::Established);
    assert_eq!(events(&mut a).len(), 1, "established once");
}

#[test]
fn passive_gives_up_with_rej_timeout() {
    let (mut a, mut p) = pair();
    drain(&mut p); // REP lost, and so are its copies
    for _ in 0..2 {
        let t = p.poll_timeout().unwrap();
        p.handle_timeout(t);
        assert_eq!(drain(&mut p).len(), 1);
    }
    let t = p.poll_timeout().unwrap();
    p.handle_timeout(t);
    assert_eq!(
        (p.state(), events(&mut p)),
        (CmState::Closed, vec![CmEvent::TimedOut])
    );
    let out = drain(&mut p);
    let CmMessage::Rej(r) = &out[0].message else {
        panic!("REJ expected")
    };
    assert_eq!(
        (r.reason, r.message_rejected),
        (RejectReason::TIMEOUT, MessageKind::REP)
    );
    a.handle_mad(t, &out[0]).unwrap();
    assert_eq!(a.state(), CmState::Closed);
    assert!(matches!(
        events(&mut a)[..],
        [CmEvent::Rejected {
            reason: RejectReason::TIMEOUT,
            ..
        }]
    ));
}

#[test]
fn duplicate_req_gets_the_rep_again() {
    let (mut a, mut p) = pair();
    drain(&mut p);
    let dup = CmMad::new(7, CmMessage::Req(req()));
    p.handle_mad(T0, &dup).unwrap();
    assert!(matches!(
        drain(&mut p)[..],
        [CmMad {
            message: CmMessage::Rep(_),
            ..
        }]
    ));
    assert_eq!(a.state(), CmState::ReqSent);
    assert_eq!(
        a.handle_mad(T0, &dup),
        Err(Ignored::NotOurs),
        "the active side has no REQ peer"
    );
}

#[test]
fn mra_extends_the_wait() {
    let mut a = Connection::connect(T0, CmConfig::default(), 1, req());
    drain(&mut a);
    let mra = CmMad::new(
        1,
        CmMessage::Mra(mra::MraRepr {
            local_comm_id: 0x2222,
            remote_comm_id: 0x1111,
            message_mraed: MessageKind::REQ,
            service_timeout: 24,
            private_data: [0; mra::PRIVATE_DATA_LEN],
        }),
    );
    let t = T0 + Duration::from_millis(10);
    a.handle_mad(t, &mra).unwrap();
    let want = t + timeout_exp(18) + timeout_exp(18) + timeout_exp(24);
    assert_eq!(a.poll_timeout(), Some(want));
    a.handle_timeout(T0 + Duration::from_millis(7000));
    assert!(drain(&mut a).is_empty(), "the old deadline no longer fires");
    assert_eq!(a.state(), CmState::ReqSent);
}

#[test]
fn rejected_req() {
    let r = req();
    let mut a = Connection::connect(T0, CmConfig::default(), 1, r.clone());
    drain(&mut a);
    let rej = RejRepr::rejecting_req(&r, 0, RejectReason::CONSUMER_DEFINED, b"go away");
    assert_eq!(rej.remote_comm_id, r.local_comm_id);
    a.handle_mad(T0, &CmMad::new(1, CmMessage::Rej(rej)))
        .unwrap();
    let ev = events(&mut a);
    let [CmEvent::Rejected {
        reason,
        private_data,
    }] = &ev[..]
    else {
        panic!()
    };
    assert_eq!(*reason, RejectReason::CONSUMER_DEFINED);
    assert_eq!(&private_data[..7], b"go away");
    assert_eq!((a.state(), a.poll_timeout()), (CmState::Closed, None));
}

#[test]
fn simultaneous_disconnect() {
    let (mut a, mut p) = pair();
    deliver(T0, &mut p, &mut a);
    deliver(T0, &mut a, &mut p);
    events(&mut a);
    events(&mut p);
    assert!(a.disconnect(T0) && p.disconnect(T0));
    let da = drain(&mut a);
    let dp = drain(&mut p);
    a.handle_mad(T0, &dp[0]).unwrap();
    p.handle_mad(T0, &da[0]).unwrap();
    assert_eq!(
        (a.state(), p.state()),
        (CmState::TimeWait, CmState::TimeWait)
    );
    // Each answered the other's DREQ; the DREPs find them in TimeWait and change nothing.
    deliver(T0, &mut a, &mut p);
    deliver(T0, &mut p, &mut a);
    assert_eq!(events(&mut a), [CmEvent::Disconnected]);
    assert_eq!(events(&mut p), [CmEvent::Disconnected]);
}

#[test]
fn lost_drep_dreq_resent_and_answered_from_time_wait() {
    let (mut a, mut p) = pair();
    deliver(T0, &mut p, &mut a);
    deliver(T0, &mut a, &mut p);
    a.disconnect(T0);
    deliver(T0, &mut a, &mut p);
    drain(&mut p); // DREP lost
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    assert_eq!(deliver(t, &mut a, &mut p), 1, "DREQ resent");
    assert_eq!(deliver(t, &mut p, &mut a), 1, "DREP replayed from TimeWait");
    assert_eq!(a.state(), CmState::TimeWait);
}

#[test]
fn unanswered_dreq_ends_in_time_wait() {
    let (mut a, mut p) = pair();
    deliver(T0, &mut p, &mut a);
    deliver(T0, &mut a, &mut p);
    events(&mut a);
    a.disconnect(T0);
    for _ in 0..3 {
        let t = a.poll_timeout().unwrap();
        a.handle_timeout(t);
    }
    assert_eq!(a.state(), CmState::TimeWait);
    assert_eq!(events(&mut a), [CmEvent::Disconnected]);
    assert_eq!(drain(&mut a).len(), 3, "DREQ and two retries");
}

#[test]
fn data_before_rtu_and_dreq_before_rtu() {
    let (mut a, mut p) = pair();
    deliver(T0, &mut p, &mut a);
    drain(&mut a); // RTU lost
    p.notify_comm_established();
    assert_eq!(p.state(), CmState::Established);
    assert_eq!(p.poll_timeout(), None, "no REP resend once established");

    let (mut a2, mut p2) = pair();
    deliver(T0, &mut p2, &mut a2);
    drain(&mut a2); // RTU lost
    events(&mut a2);
    a2.disconnect(T0);
    deliver(T0, &mut a2, &mut p2);
    assert!(matches!(
        events(&mut p2)[..],
        [CmEvent::Established(_), CmEvent::Disconnected]
    ));
    assert_eq!(p2.state(), CmState::TimeWait);
    let _ = a;
}

#[test]
fn foreign_and_unexpected_mads_are_ignored() {
    let (mut a, mut p) = pair();
    let stray = CmMad::new(
        7,
        CmMessage::Rtu(rtu::RtuRepr {
            local_comm_id: 9,
            remote_comm_id: 0x9999,
            private_data: [0; 224],
        }),
    );
    assert_eq!(p.handle_mad(T0, &stray), Err(Ignored::NotOurs));
    let early_drep = CmMad::new(
        7,
        CmMessage::Drep(drep::DrepRepr {
            local_comm_id: 0x2222,
            remote_comm_id: 0x1111,
            private_data: [0; 224],
        }),
    );
    assert_eq!(
        a.handle_mad(T0, &early_drep),
        Err(Ignored::UnexpectedInState(CmState::ReqSent))
    );
    assert_eq!(a.state(), CmState::ReqSent);
    deliver(T0, &mut p, &mut a);
    assert!(a.poll_transmit().is_some());
}

#[test]
fn timeout_encoding() {
    assert_eq!(timeout_exp(0), Duration::from_nanos(4096));
    assert_eq!(timeout_exp(20), Duration::from_nanos(4096 << 20));
    assert_eq!(timeout_exp(200), timeout_exp(31));
}

#[test]
fn random_mads_never_panic_and_keep_state_sane() {
    // Deterministic xorshift; MADs come from parsing random bytes with a CM header, so every
    // message kind shows up with random IDs, plus some aimed at the connection's IDs.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..200 {
        let (mut a, mut p) = pair();
        let mut now = T0;
        for _ in 0..50 {
            let mut b = [0u8; crate::cm::MAD_SIZE];
            for chunk in b.chunks_mut(8) {
                chunk.copy_from_slice(&rnd().to_be_bytes()[..chunk.len()]);
            }
            b[..4].copy_from_slice(&[1, 7, 2, 3]);
            b[16..18].copy_from_slice(&[0, 0x10 + (rnd() % 11) as u8]);
            if rnd() % 2 == 0 {
                // Address it to one of the two ends: remote comm ID at CM byte 4.
                let id: u32 = if rnd() % 2 == 0 { 0x1111 } else { 0x2222 };
                b[28..32].copy_from_slice(&id.to_be_bytes());
            }
            let Ok(m) = CmMad::parse(&b) else { continue };
            now = now + Duration::from_millis(rnd() % 3000);
            let target = if round % 2 == 0 { &mut a } else { &mut p };
            let _ = target.handle_mad(now, &m);
            target.handle_timeout(now);
            drain(target);
            events(target);
            if target.state() == CmState::Established {
                assert!(target.params().is_some());
            }
            if target.state() == CmState::Closed {
                assert_eq!(target.poll_timeout(), None);
            }
        }
    }
}

#[test]
fn drep_echoes_the_dreq_tid_and_passive_dreq_uses_its_own() {
    let (mut a, mut p) = pair();
    deliver(T0, &mut p, &mut a);
    deliver(T0, &mut a, &mut p);
    p.set_dreq_transaction_id(0x5555_0000_0000_0009);
    assert!(p.disconnect(T0));
    let dreq = drain(&mut p);
    assert_eq!(dreq[0].header.transaction_id, 0x5555_0000_0000_0009);
    a.handle_mad(T0, &dreq[0]).unwrap();
    let drep = drain(&mut a);
    assert!(matches!(drep[0].message, CmMessage::Drep(_)));
    assert_eq!(
        drep[0].header.transaction_id, 0x5555_0000_0000_0009,
        "DREP echoes the DREQ's TID"
    );
    // A repeated DREQ is answered again, same TID.
    a.handle_mad(T0, &dreq[0]).unwrap();
    assert_eq!(
        drain(&mut a)[0].header.transaction_id,
        0x5555_0000_0000_0009
    );
}
