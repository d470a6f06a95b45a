//! Two endpoints back to back, on records.

use super::*;
use crate::cm::rdma_cm::{self, PortSpace, RcConnect};
use crate::cm::{dreq, rej};
use crate::time::Duration;
use core::net::{Ipv4Addr, SocketAddr};

const T0: Instant = Instant::from_nanos(5_000_000_000);
const SID: u64 = rdma_cm::service_id(PortSpace::TCP, 7174);

fn gid(last: u8) -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, last))
}

fn req_to_server(port: u16) -> ReqRepr {
    RcConnect {
        local_comm_id: 0,
        local_ca_guid: 0xa,
        local_qpn: Qpn::new(0x31),
        starting_psn: Psn::new(0x111111),
        src: SocketAddr::from(([10, 0, 0, 1], 40000)),
        dst: SocketAddr::from(([10, 0, 0, 2], port)),
        local_gid: gid(1),
        remote_gid: gid(2),
        path_mtu: 3,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        private_data: b"hello",
    }
    .to_req()
    .unwrap()
}

/// Delivers everything `from` (at GID `from_gid`) has queued to `to` (at `to_gid`).
fn pump(
    now: Instant,
    from: &mut CmEndpoint,
    from_gid: Gid,
    to: &mut CmEndpoint,
    to_gid: Gid,
) -> usize {
    let mut n = 0;
    while let Some((dst, m)) = from.poll_transmit() {
        assert_eq!(dst, to_gid);
        to.handle_mad(now, from_gid, &m);
        n += 1;
    }
    n
}

fn events(e: &mut CmEndpoint) -> Vec<EndpointEvent> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

#[test]
fn connect_accept_disconnect_and_reap() {
    let (mut a, mut b) = (
        CmEndpoint::new(CmConfig::default(), 1),
        CmEndpoint::new(CmConfig::default(), 2),
    );
    b.listen(SID);
    let ha = a.connect(T0, gid(2), req_to_server(7174));
    assert_eq!(pump(T0, &mut a, gid(1), &mut b, gid(2)), 1);
    let ev = events(&mut b);
    let [EndpointEvent::Incoming(inc)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(inc.peer, gid(1));
    let h = rdma_cm::CmaHeaderRepr::parse(&inc.req.private_data).unwrap();
    assert_eq!(h.src_port, 40000);
    assert_eq!(&inc.req.private_data[36..41], b"hello");

    let hb = b.accept(T0, inc, Qpn::new(0x21), Psn::new(0x222222), 0xb);
    let params = *b.connection(hb).unwrap().params().unwrap();
    assert_eq!(
        (params.remote_qpn, params.sq_psn, params.rq_psn),
        (Qpn::new(0x31), Psn::new(0x111111), Psn::new(0x222222))
    );
    assert_eq!(pump(T0, &mut b, gid(2), &mut a, gid(1)), 1, "REP");
    let [EndpointEvent::Connection(h, CmEvent::Established(pa))] = events(&mut a)[..] else {
        panic!()
    };
    assert_eq!(
        (h, pa.remote_qpn, pa.sq_psn),
        (ha, Qpn::new(0x21), Psn::new(0x222222))
    );
    assert_eq!(pump(T0, &mut a, gid(1), &mut b, gid(2)), 1, "RTU");
    assert!(
        matches!(events(&mut b)[..], [EndpointEvent::Connection(h, CmEvent::Established(_))] if h == hb)
    );

    assert!(b.disconnect(T0, hb));
    pump(T0, &mut b, gid(2), &mut a, gid(1));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    assert!(matches!(
        events(&mut a)[..],
        [EndpointEvent::Connection(_, CmEvent::Disconnected)]
    ));
    assert!(matches!(
        events(&mut b)[..],
        [EndpointEvent::Connection(_, CmEvent::Disconnected)]
    ));
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    b.handle_timeout(t);
    assert!(matches!(
        events(&mut a)[..],
        [EndpointEvent::Connection(_, CmEvent::TimeWaitExit)]
    ));
    assert_eq!(
        (a.handles().count(), b.handles().count()),
        (0, 0),
        "closed connections are reaped"
    );
    assert_eq!((a.poll_timeout(), b.poll_timeout()), (None, None));
}

#[test]
fn no_listener_gets_rej_invalid_service_id() {
    let (mut a, mut b) = (
        CmEndpoint::new(CmConfig::default(), 1),
        CmEndpoint::new(CmConfig::default(), 2),
    );
    b.listen(SID);
    a.connect(T0, gid(2), req_to_server(9999));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    assert!(events(&mut b).is_empty());
    assert_eq!(b.counters().rejected_no_listener, 1);
    pump(T0, &mut b, gid(2), &mut a, gid(1));
    assert!(matches!(
        events(&mut a)[..],
        [EndpointEvent::Connection(
            _,
            CmEvent::Rejected {
                reason: RejectReason::INVALID_SERVICE_ID,
                ..
            }
        )]
    ));
    assert_eq!(a.handles().count(), 0);
}

#[test]
fn owner_rejects_with_private_data() {
    let (mut a, mut b) = (
        CmEndpoint::new(CmConfig::default(), 1),
        CmEndpoint::new(CmConfig::default(), 2),
    );
    b.listen(SID);
    a.connect(T0, gid(2), req_to_server(7174));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    let [EndpointEvent::Incoming(inc)] = &events(&mut b)[..] else {
        panic!()
    };
    b.reject(inc, RejectReason::CONSUMER_DEFINED, b"busy");
    pump(T0, &mut b, gid(2), &mut a, gid(1));
    let ev = events(&mut a);
    let [EndpointEvent::Connection(
        _,
        CmEvent::Rejected {
            reason,
            private_data,
        },
    )] = &ev[..]
    else {
        panic!()
    };
    assert_eq!(
        (*reason, &private_data[..4]),
        (RejectReason::CONSUMER_DEFINED, &b"busy"[..])
    );
}

#[test]
fn aborted_accept_sends_rej_instead_of_rep() {
    let (mut a, mut b) = (
        CmEndpoint::new(CmConfig::default(), 1),
        CmEndpoint::new(CmConfig::default(), 2),
    );
    b.listen(SID);
    a.connect(T0, gid(2), req_to_server(7174));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    let [EndpointEvent::Incoming(inc)] = &events(&mut b)[..] else {
        panic!()
    };
    let h = b.accept(T0, inc, Qpn::new(0x44), Psn::new(7), 0xb);
    assert!(b.abort_accept(h, inc, RejectReason::NO_RESOURCES, b"qp"));
    assert!(!b.abort_accept(h, inc, RejectReason::NO_RESOURCES, &[]), "already gone");
    assert_eq!(b.handles().count(), 0);
    let mut sent = Vec::new();
    while let Some((dst, m)) = b.poll_transmit() {
        assert_eq!(dst, gid(1));
        sent.push(m);
    }
    let [m] = &sent[..] else { panic!("{sent:?}") };
    let CmMessage::Rej(rej) = &m.message else { panic!("{m:?}") };
    assert_ne!(rej.local_comm_id, 0, "the REJ names the comm id the REP would have had");
    a.handle_mad(T0, gid(2), m);
    let ev = events(&mut a);
    let [EndpointEvent::Connection(_, CmEvent::Rejected { reason, private_data })] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!((*reason, &private_data[..2]), (RejectReason::NO_RESOURCES, &b"qp"[..]));
}

#[test]
fn req_retry_while_owner_decides_is_not_a_second_incoming() {
    let (mut a, mut b) = (
        CmEndpoint::new(CmConfig::default(), 1),
        CmEndpoint::new(CmConfig::default(), 2),
    );
    b.listen(SID);
    a.connect(T0, gid(2), req_to_server(7174));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    assert_eq!(events(&mut b).len(), 1);
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    assert_eq!(pump(t, &mut a, gid(1), &mut b, gid(2)), 1, "REQ resent");
    assert!(events(&mut b).is_empty());
    // The same REQ from another peer is another request.
    let mut c = CmEndpoint::new(CmConfig::default(), 1);
    c.connect(T0, gid(2), req_to_server(7174));
    pump(T0, &mut c, gid(3), &mut b, gid(2));
    assert_eq!(events(&mut b).len(), 1);
}

#[test]
fn dreq_for_unknown_connection_gets_drep() {
    let mut b = CmEndpoint::new(CmConfig::default(), 2);
    let d = dreq::DreqRepr {
        local_comm_id: 5,
        remote_comm_id: 6,
        remote_qpn: Qpn::new(1),
        private_data: [0; dreq::PRIVATE_DATA_LEN],
    };
    b.handle_mad(T0, gid(1), &CmMad::new(42, CmMessage::Dreq(d)));
    let (to, m) = b.poll_transmit().unwrap();
    assert_eq!((to, m.header.transaction_id), (gid(1), 42));
    let CmMessage::Drep(r) = m.message else {
        panic!()
    };
    assert_eq!((r.local_comm_id, r.remote_comm_id), (6, 5));
    // Anything else unknown is only counted.
    let stray = rej::RejRepr::rejecting_req(&req_to_server(1), 1, RejectReason::TIMEOUT, &[]);
    b.handle_mad(T0, gid(1), &CmMad::new(1, CmMessage::Rej(stray)));
    assert_eq!((b.counters().unmatched, b.poll_transmit()), (1, None));
}

#[test]
fn mads_from_the_wrong_peer_do_not_match() {
    let (mut a, mut b) = (
        CmEndpoint::new(CmConfig::default(), 1),
        CmEndpoint::new(CmConfig::default(), 2),
    );
    b.listen(SID);
    a.connect(T0, gid(2), req_to_server(7174));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    let [EndpointEvent::Incoming(inc)] = &events(&mut b)[..] else {
        panic!()
    };
    b.accept(T0, inc, Qpn::new(0x21), Psn::new(1), 0xb);
    let (_, rep) = b.poll_transmit().unwrap();
    a.handle_mad(T0, gid(9), &rep);
    assert_eq!(a.counters().unmatched, 1);
    assert!(events(&mut a).is_empty());
    a.handle_mad(T0, gid(2), &rep);
    assert_eq!(events(&mut a).len(), 1);
}

#[test]
fn ids_are_unique_and_reproducible() {
    let mut a = CmEndpoint::new(CmConfig::default(), 7);
    let mut tids = std::collections::BTreeSet::new();
    let mut cids = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let h = a.connect(T0, gid(2), req_to_server(7174));
        let c = a.connection(h).unwrap();
        assert!(tids.insert(c.transaction_id()));
        assert!(c.local_comm_id() != 0 && cids.insert(c.local_comm_id()));
    }
    let mut again = CmEndpoint::new(CmConfig::default(), 7);
    let h = again.connect(T0, gid(2), req_to_server(7174));
    let first = a.connection(ConnHandle(0)).unwrap();
    assert_eq!(
        again.connection(h).unwrap().local_comm_id(),
        first.local_comm_id()
    );
    assert_eq!(
        a.poll_timeout(),
        Some(
            T0 + (crate::cm::conn::timeout_exp(18)
                + crate::cm::conn::timeout_exp(18)
                + crate::cm::conn::timeout_exp(20))
        )
    );
    a.handle_timeout(T0 + Duration::from_millis(1));
    assert_eq!(
        std::iter::from_fn(|| a.poll_transmit()).count(),
        100,
        "only the first REQs"
    );
}

#[test]
fn passive_dreq_carries_the_servers_own_tid() {
    let (mut a, mut b) = (
        CmEndpoint::new(CmConfig::default(), 1),
        CmEndpoint::new(CmConfig::default(), 2),
    );
    b.listen(SID);
    let ha = a.connect(T0, gid(2), req_to_server(7174));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    let [EndpointEvent::Incoming(inc)] = &events(&mut b)[..] else {
        panic!()
    };
    let hb = b.accept(T0, inc, Qpn::new(0x21), Psn::new(1), 0xb);
    pump(T0, &mut b, gid(2), &mut a, gid(1));
    pump(T0, &mut a, gid(1), &mut b, gid(2));
    b.disconnect(T0, hb);
    let (_, dreq) = b.poll_transmit().unwrap();
    let req_tid = a.connection(ha).unwrap().transaction_id();
    assert_ne!(dreq.header.transaction_id, req_tid);
    // b never connected, so this is the first TID it formed: its hi_tid << 32 | 0.
    assert_eq!(dreq.header.transaction_id as u32, 0);
    a.handle_mad(T0, gid(2), &dreq);
    let (_, drep) = a.poll_transmit().unwrap();
    assert_eq!(drep.header.transaction_id, dreq.header.transaction_id);
}
