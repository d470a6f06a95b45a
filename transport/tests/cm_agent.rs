//! The GSI agent (`cm::agent`) on the simulated two-node network: connection setup, reject,
//! disconnect, REQ loss and CM timeouts, SIDR, all on the virtual clock, so every run is the
//! same run.

use droce_transport::cm::agent::{CmAgent, CmAgentConfig, CmAgentError, CmAgentEvent, ConnectParams, SidrEvent, MAD_BUFFER_LEN, SIDR_TIMEOUT, SIDR_TRIES, SIDR_RETRY};
use droce_transport::cm::rej::RejectReason;
use droce_transport::cm::sidr::rep::SidrStatus;
use droce_transport::cm::{CmConfig, CmMad, CmMessage, GSI_QPN};
use droce_transport::qp::{QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::sim::{LinkConfig, Node, Pair, MEM_BASE};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr, Sge};
use droce_transport::status::WcStatus;
use droce_transport::wire::RoceRepr;
use droce_transport::{Duration, Instant, QKey, Qpn};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const MEM: usize = 1 << 20;
/// The agents' MAD slots sit at the end of each node's memory; data buffers at the start.
const MAD_VA: u64 = MEM_BASE + (MEM - MAD_BUFFER_LEN) as u64;
const PORT: u16 = 7471;
/// Bounds every loop: far more rounds than any exchange here needs.
const MAX_ROUNDS: usize = 200_000;

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

/// Short CM timers: packet life time 2^10 × 4.096 µs ≈ 4 ms, CM response 2^15 × 4.096 µs
/// ≈ 134 ms, 3 retries.
fn cfg(seed: u64) -> CmAgentConfig {
    CmAgentConfig {
        cm: CmConfig { packet_life_time: 10, time_wait: Duration::from_millis(50) },
        seed,
        cm_response_timeout: Some(15),
        max_cm_retries: Some(3),
        min_rnr_timer: 1,
    }
}

struct Net {
    p: Pair,
    a: CmAgent,
    b: CmAgent,
    /// Every event of a and b, in order, with the time it was seen.
    log: Vec<(Instant, bool, CmAgentEvent)>,
}

impl Net {
    fn new(link: LinkConfig, seed: u64) -> Net {
        Net::with_retries(link, seed, 3)
    }

    fn with_retries(link: LinkConfig, seed: u64, retries: u8) -> Net {
        let mut p = Pair::new(link, seed, MEM);
        let c = |s| CmAgentConfig { max_cm_retries: Some(retries), ..cfg(s) };
        let a = CmAgent::new(&mut p.a.dev, c(seed ^ 1), MAD_VA).expect("agent a");
        let b = CmAgent::new(&mut p.b.dev, c(seed ^ 2), MAD_VA).expect("agent b");
        Net { p, a, b, log: Vec::new() }
    }

    /// Both agents take in what arrived and run their due timers at `now`.
    fn poll_agents(&mut self) -> bool {
        let now = self.p.now;
        let busy = self.a.poll(&mut self.p.a.dev, now);
        busy | self.b.poll(&mut self.p.b.dev, now)
    }

    /// The network moves frames and device timers, or the clock jumps to the next deadline
    /// (the agents' included); false when all is idle.
    fn step_net(&mut self) -> bool {
        let timer = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
        self.p.step_with_timer(timer)
    }

    fn round(&mut self) -> bool {
        self.poll_agents() | self.step_net()
    }

    /// Rounds until an event of side a (`on_a`) or b comes out; panics after MAX_ROUNDS or
    /// when everything is idle first. The user sees events before the clock moves on, as a
    /// real one would react before the CM's next timer.
    fn event(&mut self, on_a: bool) -> CmAgentEvent {
        for _ in 0..MAX_ROUNDS {
            let busy = self.poll_agents();
            let e = if on_a { self.a.poll_event() } else { self.b.poll_event() };
            if let Some(e) = e {
                self.log.push((self.p.now, on_a, e.clone()));
                return e;
            }
            assert!(busy | self.step_net(), "idle with no event on {}", if on_a { "a" } else { "b" });
        }
        panic!("no event on {} after {MAX_ROUNDS} rounds", if on_a { "a" } else { "b" });
    }

    fn sidr_event(&mut self) -> SidrEvent {
        for _ in 0..MAX_ROUNDS {
            let busy = self.poll_agents();
            if let Some(e) = self.a.poll_sidr_event() {
                return e;
            }
            assert!(busy | self.step_net(), "idle with no SIDR event");
        }
        panic!("no SIDR event after {MAX_ROUNDS} rounds");
    }

    fn run_idle(&mut self) {
        for _ in 0..MAX_ROUNDS {
            if !self.round() {
                return;
            }
        }
        panic!("not idle after {MAX_ROUNDS} rounds");
    }
}

fn rc_qp(n: &mut Node) -> QpHandle {
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, ..QpCap::default() };
    n.dev.create_qp(QpInitAttr { qp_type: QpType::Rc, pd: n.pd, send_cq: n.cq, recv_cq: n.cq, srq: None, cap, sq_sig_all: true }).expect("create_qp")
}

fn private(tag: u8) -> ConnectParams {
    ConnectParams { private_data: vec![tag; 8], ..ConnectParams::rping() }
}

/// a connects to b's PORT, b accepts: both QPs in RTS, facing each other.
fn establish(n: &mut Net) -> (QpHandle, QpHandle, droce_transport::cm::ConnId, droce_transport::cm::ConnId) {
    n.b.listen(PORT);
    let qa = rc_qp(&mut n.p.a);
    let qb = rc_qp(&mut n.p.b);
    let now = n.p.now;
    let ca = n.a.connect(&mut n.p.a.dev, now, SocketAddr::new(ip(2), PORT), qa, &private(0xa1)).expect("connect");
    assert_eq!(n.p.a.dev.qp_state(qa), Some(QpState::Init), "connect moves the QP to INIT");
    let cb = match n.event(false) {
        CmAgentEvent::ConnectRequest { id, src, dst, private_data, responder_resources, initiator_depth, peer_qpn } => {
            assert_eq!(src.ip(), ip(1));
            assert!(src.port() >= 0x8000, "rdma_cm source port");
            assert_eq!(dst, SocketAddr::new(ip(2), PORT));
            assert_eq!(&private_data[..8], &[0xa1; 8]);
            assert_eq!((responder_resources, initiator_depth), (1, 1));
            assert_eq!(peer_qpn, n.p.a.dev.query_qp(qa).unwrap().qp_num);
            id
        }
        e => panic!("want a connect request, got {e:?}"),
    };
    let now = n.p.now;
    n.b.accept(&mut n.p.b.dev, now, cb, qb, &private(0xb2)).expect("accept");
    assert_eq!(n.p.b.dev.qp_state(qb), Some(QpState::Rts), "accept programs the QP before the REP leaves");
    match n.event(true) {
        CmAgentEvent::Established { id, params, private_data } => {
            assert_eq!(id, ca);
            assert_eq!(params.remote_qpn, n.p.b.dev.query_qp(qb).unwrap().qp_num);
            assert_eq!(&private_data[..8], &[0xb2; 8], "the REP's private data");
        }
        e => panic!("want Established on a, got {e:?}"),
    }
    match n.event(false) {
        CmAgentEvent::Established { id, .. } => assert_eq!(id, cb),
        e => panic!("want Established on b, got {e:?}"),
    }
    for (dev, q) in [(&n.p.a.dev, qa), (&n.p.b.dev, qb)] {
        assert_eq!(dev.qp_state(q), Some(QpState::Rts));
    }
    (qa, qb, ca, cb)
}

#[test]
fn connect_accept_carries_data() {
    let mut n = Net::new(LinkConfig::PERFECT, 1);
    let (qa, qb, ca, cb) = establish(&mut n);
    assert_eq!(n.a.params(ca).map(|p| p.remote_qpn), Some(n.p.b.dev.query_qp(qb).unwrap().qp_num));
    assert!(n.a.has_connection(ca) && n.b.has_connection(cb));
    // The PSNs and AVs the CM programmed carry an RC SEND.
    let lkey_b = n.p.b.mr.lkey;
    n.p.b.dev.post_recv(qb, RecvWr::new(7).with_sge(MEM_BASE, 64, lkey_b)).unwrap();
    n.p.a.dev.memory_mut().slice_mut(MEM_BASE, 5).copy_from_slice(b"hello");
    let mut wr = SendWr::new(9, SendOpcode::Send);
    wr.sg_list.push(Sge { addr: MEM_BASE, length: 5, lkey: n.p.a.mr.lkey });
    n.p.a.dev.post_send(qa, wr).unwrap();
    let mut got = (None, None);
    for _ in 0..MAX_ROUNDS {
        if got.0.is_none() {
            got.0 = n.p.a.poll();
        }
        if got.1.is_none() {
            got.1 = n.p.b.poll();
        }
        if got.0.is_some() && got.1.is_some() {
            break;
        }
        assert!(n.round(), "idle before the SEND completed");
    }
    let (sa, rb) = (got.0.unwrap(), got.1.unwrap());
    assert_eq!((sa.wr_id, sa.status), (9, WcStatus::Success));
    assert_eq!((rb.wr_id, rb.status, rb.byte_len), (7, WcStatus::Success, 5));
    assert_eq!(n.p.b.dev.memory().slice(MEM_BASE, 5), b"hello");
    assert_eq!(n.a.counters().bad_mads + n.b.counters().bad_mads, 0);
    assert_eq!(n.a.counters().tx_dropped + n.b.counters().tx_dropped, 0);
    assert_eq!((n.a.counters().mads_tx, n.b.counters().mads_rx), (2, 2), "REQ, RTU");
    assert_eq!((n.b.counters().mads_tx, n.a.counters().mads_rx), (1, 1), "REP");
}

#[test]
fn same_seed_same_run() {
    let run = |seed| {
        let mut n = Net::new(LinkConfig::LOSSY, seed);
        let (qa, qb, ..) = establish(&mut n);
        let psns = (n.p.a.dev.query_qp(qa).unwrap().attr.sq_psn, n.p.b.dev.query_qp(qb).unwrap().attr.sq_psn);
        (n.log, psns, n.p.now)
    };
    let one = run(5);
    assert_eq!(one, run(5));
    assert_ne!(one.1, run(6).1, "the seed picks the starting PSNs");
}

#[test]
fn reject_and_unknown_service() {
    let mut n = Net::new(LinkConfig::PERFECT, 2);
    n.b.listen(PORT);
    let qa = rc_qp(&mut n.p.a);
    let now = n.p.now;
    let ca = n.a.connect(&mut n.p.a.dev, now, SocketAddr::new(ip(2), PORT), qa, &ConnectParams::rping()).unwrap();
    let CmAgentEvent::ConnectRequest { id, .. } = n.event(false) else { panic!("want a request") };
    n.b.reject(id, b"busy").unwrap();
    assert_eq!(n.b.reject(id, b"again"), Err(CmAgentError::InvalidConn), "the request is gone");
    match n.event(true) {
        CmAgentEvent::Rejected { id, reason, private_data } => {
            assert_eq!((id, reason), (ca, RejectReason::CONSUMER_DEFINED));
            assert_eq!(&private_data[..4], b"busy");
        }
        e => panic!("want Rejected, got {e:?}"),
    }
    assert_eq!(n.p.a.dev.qp_state(qa), Some(QpState::Err));
    assert!(!n.a.has_connection(ca));

    // Nobody listens on PORT + 1: b's endpoint answers with REJ (invalid service ID).
    let qa = rc_qp(&mut n.p.a);
    let now = n.p.now;
    let ca = n.a.connect(&mut n.p.a.dev, now, SocketAddr::new(ip(2), PORT + 1), qa, &ConnectParams::rping()).unwrap();
    match n.event(true) {
        CmAgentEvent::Rejected { id, reason, .. } => assert_eq!((id, reason), (ca, RejectReason::INVALID_SERVICE_ID)),
        e => panic!("want Rejected, got {e:?}"),
    }
    assert_eq!(n.b.endpoint().counters().rejected_no_listener, 1);
    assert_eq!(n.b.poll_event(), None, "no request reached b's user");
}

#[test]
fn failed_accept_rejects() {
    let mut n = Net::new(LinkConfig::PERFECT, 3);
    n.b.listen(PORT);
    let qa = rc_qp(&mut n.p.a);
    let now = n.p.now;
    let ca = n.a.connect(&mut n.p.a.dev, now, SocketAddr::new(ip(2), PORT), qa, &ConnectParams::rping()).unwrap();
    let CmAgentEvent::ConnectRequest { id, .. } = n.event(false) else { panic!("want a request") };
    // A QP past INIT cannot be connected.
    let qb = rc_qp(&mut n.p.b);
    droce_transport::cm::agent::to_init(&mut n.p.b.dev, qb).unwrap();
    let err = droce_transport::qp::QpAttr { qp_state: QpState::Err, ..Default::default() };
    n.p.b.dev.modify_qp(qb, &err, droce_transport::qp::QpAttrMask::STATE).unwrap();
    let now = n.p.now;
    assert!(matches!(n.b.accept(&mut n.p.b.dev, now, id, qb, &ConnectParams::rping()), Err(CmAgentError::Qp(_))));
    assert_eq!(n.b.counters().qp_errors, 1);
    match n.event(true) {
        CmAgentEvent::Rejected { id, reason, .. } => assert_eq!((id, reason), (ca, RejectReason::CONSUMER_DEFINED)),
        e => panic!("want Rejected, got {e:?}"),
    }
}

#[test]
fn disconnect_both_sides() {
    let mut n = Net::new(LinkConfig::PERFECT, 4);
    let (qa, qb, ca, cb) = establish(&mut n);
    let now = n.p.now;
    n.a.disconnect(&mut n.p.a.dev, now, ca).unwrap();
    assert_eq!(n.p.a.dev.qp_state(qa), Some(QpState::Err), "QP to ERROR before the DREQ");
    assert_eq!(n.event(false), CmAgentEvent::Disconnected { id: cb });
    assert_eq!(n.p.b.dev.qp_state(qb), Some(QpState::Err));
    assert_eq!(n.event(true), CmAgentEvent::Disconnected { id: ca }, "the DREP");
    assert_eq!(n.a.disconnect(&mut n.p.a.dev, now, ca), Err(CmAgentError::InvalidConn));
    // TimeWait ends and the agents go quiet.
    n.run_idle();
    assert_eq!(n.a.poll_timeout(), None);
    assert_eq!(n.b.poll_timeout(), None);
    assert_eq!(n.a.endpoint().handles().count() + n.b.endpoint().handles().count(), 0);
}

#[test]
fn connections_under_loss() {
    // 20 % of the frames lost each way: every MAD exchange needs the CM's retransmissions.
    let mut n = Net::with_retries(LinkConfig { loss: 0.2, ..LinkConfig::PERFECT }, 9, 15);
    for round in 0..5 {
        let (qa, qb, ca, cb) = establish(&mut n);
        let now = n.p.now;
        n.b.disconnect(&mut n.p.b.dev, now, cb).unwrap();
        assert_eq!(n.event(true), CmAgentEvent::Disconnected { id: ca }, "round {round}");
        assert_eq!(n.event(false), CmAgentEvent::Disconnected { id: cb }, "round {round}");
        assert_eq!((n.p.a.dev.qp_state(qa), n.p.b.dev.qp_state(qb)), (Some(QpState::Err), Some(QpState::Err)));
    }
    assert!(n.p.stats.dropped > 0);
    // 5 rounds × (REQ, RTU, DREP) from a without loss would be 15 MADs.
    assert!(n.a.counters().mads_tx > 15, "CM retransmissions happened: {:?}", n.a.counters());
}

/// The CM MAD in a frame to QP1, if it is one.
fn cm_mad(frame: &[u8]) -> Option<CmMad> {
    let mut f = frame.to_vec();
    let (repr, range) = RoceRepr::parse_in_place(&mut f).ok()?;
    (repr.bth.dest_qp == Qpn::new(GSI_QPN)).then(|| CmMad::parse(&f[range]).ok()).flatten()
}

#[test]
fn lost_req_is_retransmitted() {
    let mut n = Net::new(LinkConfig::PERFECT, 5);
    let mut dropped = false;
    n.p.filter = Some(Box::new(move |to_b, f| {
        let first_req = to_b && !dropped && cm_mad(f).is_some_and(|m| matches!(m.message, CmMessage::Req(_)));
        dropped |= first_req;
        first_req
    }));
    let t0 = n.p.now;
    establish(&mut n);
    assert_eq!(n.p.stats.dropped, 1);
    let took = n.p.now - t0;
    // The REQ waits for its CM response timeout (≈ 134 ms + 2 × 4 ms) before it is sent again.
    assert!(took >= Duration::from_millis(134) && took < Duration::from_millis(300), "established after {took:?}");
    assert_eq!(n.a.counters().mads_tx, 3, "REQ twice, RTU");
}

#[test]
fn unanswered_req_times_out() {
    let mut n = Net::new(LinkConfig::PERFECT, 6);
    n.p.link_up = false;
    let qa = rc_qp(&mut n.p.a);
    let t0 = n.p.now;
    let ca = n.a.connect(&mut n.p.a.dev, t0, SocketAddr::new(ip(2), PORT), qa, &ConnectParams::rping()).unwrap();
    assert_eq!(n.event(true), CmAgentEvent::TimedOut { id: ca });
    assert_eq!(n.p.a.dev.qp_state(qa), Some(QpState::Err));
    assert_eq!(n.a.counters().mads_tx, 4, "REQ + 3 retries");
    // 4 REQs, each waiting 2 × 4 ms + 134 ms.
    let took = n.p.now - t0;
    assert!(took >= Duration::from_millis(500) && took < Duration::from_millis(1000), "timed out after {took:?}");
}

#[test]
fn sidr_resolves_and_fails() {
    let mut n = Net::new(LinkConfig::PERFECT, 7);
    let svc = n.b.sidr_register(PORT, Qpn::new(0x42), QKey(0x1234_5678));
    let now = n.p.now;
    let id = n.a.sidr_resolve(&mut n.p.a.dev, now, SocketAddr::new(ip(2), PORT)).unwrap();
    assert_eq!(n.sidr_event(), SidrEvent::Resolved { id, qpn: Qpn::new(0x42), qkey: QKey(0x1234_5678) });

    n.b.sidr_unregister(svc);
    let now = n.p.now;
    let id = n.a.sidr_resolve(&mut n.p.a.dev, now, SocketAddr::new(ip(2), PORT)).unwrap();
    assert_eq!(n.sidr_event(), SidrEvent::Failed { id, status: SidrStatus::NO_QP.0 });

    let v6 = SocketAddr::new("fd00::2".parse().unwrap(), PORT);
    assert_eq!(n.a.sidr_resolve(&mut n.p.a.dev, now, v6), Err(CmAgentError::NoLocalAddress), "a has no IPv6 GID");

    n.p.link_up = false;
    let t0 = n.p.now;
    let id = n.a.sidr_resolve(&mut n.p.a.dev, t0, SocketAddr::new(ip(2), PORT)).unwrap();
    let tx0 = n.a.counters().mads_tx;
    assert_eq!(n.sidr_event(), SidrEvent::Failed { id, status: SIDR_TIMEOUT });
    assert_eq!(n.a.counters().mads_tx - tx0, u64::from(SIDR_TRIES) - 1, "retransmissions");
    assert_eq!(n.p.now - t0, Duration(SIDR_RETRY.0 * u64::from(SIDR_TRIES)));
    assert_eq!(n.a.poll_timeout(), None);
}

#[test]
fn one_qp1_per_device_and_close_frees_it() {
    let mut p = Pair::new(LinkConfig::PERFECT, 8, MEM);
    let a = CmAgent::new(&mut p.a.dev, cfg(8), MAD_VA).expect("agent a");
    let mut b = CmAgent::new(&mut p.b.dev, cfg(9), MAD_VA).expect("agent b");
    assert!(matches!(CmAgent::new(&mut p.a.dev, cfg(10), MAD_VA), Err(CmAgentError::Setup(_))));
    assert!(a.close(&mut p.a.dev), "the MAD slots are released");
    // QP1 is free again, and nothing of the failed attempt is left in the way.
    let mut a = CmAgent::new(&mut p.a.dev, cfg(11), MAD_VA).expect("QP1 again");
    b.sidr_register(PORT, Qpn::new(0x42), QKey(1));
    let id = a.sidr_resolve(&mut p.a.dev, p.now, SocketAddr::new(ip(2), PORT)).unwrap();
    let mut got = None;
    for _ in 0..MAX_ROUNDS {
        let now = p.now;
        a.poll(&mut p.a.dev, now);
        b.poll(&mut p.b.dev, now);
        got = a.poll_sidr_event();
        if got.is_some() || !p.step_with_timer(a.poll_timeout()) {
            break;
        }
    }
    assert_eq!(got, Some(SidrEvent::Resolved { id, qpn: Qpn::new(0x42), qkey: QKey(1) }));
}

/// `ConnectParams::selective_repeat`: the QPs of both sides get the attribute when both offer
/// it and the active side's private data leaves the 4 trailer bytes free (at most 52 of the
/// 56 a REQ carries); otherwise neither does. Each consumer gets the other's data exactly as
/// sent, the trailer zeroed.
#[test]
fn selective_repeat_when_both_offer_it_through_private_data() {
    for (offer_a, offer_b, len_a, want) in [
        (true, true, 8, true),
        (true, true, 52, true),
        (true, true, 53, false),
        (true, false, 8, false),
        (false, true, 8, false),
        (false, false, 8, false),
    ] {
        let mut n = Net::new(LinkConfig::PERFECT, 11);
        n.b.listen(PORT);
        let qa = rc_qp(&mut n.p.a);
        let qb = rc_qp(&mut n.p.b);
        let now = n.p.now;
        let pa = ConnectParams { private_data: vec![0xa1; len_a], selective_repeat: offer_a, ..ConnectParams::rping() };
        let ca = n.a.connect(&mut n.p.a.dev, now, SocketAddr::new(ip(2), PORT), qa, &pa).expect("connect");
        let cb = match n.event(false) {
            CmAgentEvent::ConnectRequest { id, private_data, .. } => {
                assert_eq!(&private_data[..len_a], &vec![0xa1; len_a][..]);
                assert!(private_data[len_a..].iter().all(|&b| b == 0), "no trailer reaches the consumer: {private_data:?}");
                id
            }
            e => panic!("want a connect request, got {e:?}"),
        };
        let pb = ConnectParams { private_data: vec![0xb2; 8], selective_repeat: offer_b, ..ConnectParams::rping() };
        let now = n.p.now;
        n.b.accept(&mut n.p.b.dev, now, cb, qb, &pb).expect("accept");
        match n.event(true) {
            CmAgentEvent::Established { id, private_data, .. } => {
                assert_eq!(id, ca);
                assert_eq!(&private_data[..8], &[0xb2; 8]);
                assert!(private_data[8..].iter().all(|&b| b == 0), "no trailer reaches the consumer");
            }
            e => panic!("want Established on a, got {e:?}"),
        }
        assert!(matches!(n.event(false), CmAgentEvent::Established { .. }));
        let sr_a = n.p.a.dev.query_qp(qa).unwrap().attr.selective_repeat;
        let sr_b = n.p.b.dev.query_qp(qb).unwrap().attr.selective_repeat;
        assert_eq!((sr_a, sr_b), (want, want), "offers a {offer_a}, b {offer_b}, {len_a} bytes of data");
    }
}
