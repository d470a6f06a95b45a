//! The responder driven by hand-made frames: ACK coalescing, NAK once per gap, opcode
//! sequence errors, RNR NAK timer encoding, duplicate handling and MSN.

use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{AccessFlags, AddressVector, CqHandle, MemoryRegion, RecvWr};
use droce_transport::wire::*;
use droce_transport::{Device, DeviceConfig, Gid, Instant, PKey, Psn, Qpn, Rkey, VecMemory};
use std::net::Ipv4Addr;

const BASE: u64 = 0x1000_0000;
const PEER_QPN: u32 = 0x77;
const EPSN: u32 = 0xfffffe; // wraps after two packets

struct R {
    dev: Device<VecMemory>,
    qp: QpHandle,
    qpn: Qpn,
    mr: MemoryRegion,
    cq: CqHandle,
    buf: Vec<u8>,
}

fn gid(i: u8) -> Gid {
    Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, i))
}

fn setup(min_rnr_timer: u8) -> R {
    let cfg = DeviceConfig { mac: [2, 0, 0, 0, 0, 1], gids: vec![gid(1)], ..DeviceConfig::default() };
    let mut dev = Device::new(cfg, VecMemory::new(BASE, 1 << 16));
    let pd = dev.alloc_pd();
    let mr = dev.reg_mr(pd, BASE, 1 << 16, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = dev
        .create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: false })
        .unwrap();
    let av = AddressVector { dgid: gid(2), dmac: [2, 0, 0, 0, 0, 2], ..Default::default() };
    let (a, m) = init_attr(AccessFlags::ALL);
    dev.modify_qp(qp, &a, m).unwrap();
    let (a, m) = rtr_attr(av, PathMtu::Mtu256, Qpn::new(PEER_QPN), Psn::new(EPSN), 4, min_rnr_timer);
    dev.modify_qp(qp, &a, m).unwrap();
    let (a, m) = rts_attr(Psn::new(0), 14, 7, 7, 4);
    dev.modify_qp(qp, &a, m).unwrap();
    let qpn = dev.query_qp(qp).unwrap().qp_num;
    let buf = vec![0u8; dev.max_frame_len()];
    R { dev, qp, qpn, mr, cq, buf }
}

impl R {
    fn rx(&mut self, now: u64, op: Opcode, psn: u32, ack_req: bool, reth: Option<RethRepr>, payload: &[u8]) {
        let eth = EthernetRepr { src_addr: EthernetAddress([2, 0, 0, 0, 0, 2]), dst_addr: EthernetAddress([2, 0, 0, 0, 0, 1]), ethertype: EtherType::Ipv4 };
        let ip = IpRepr::from_gids(gid(2), gid(1), 0, 64, 0).unwrap();
        let bth = BthRepr {
            opcode: op,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: self.qpn,
            ack_req,
            psn: Psn::new(psn),
        };
        let mut r = RoceRepr::new(eth, ip, UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT }, bth);
        r.ext.reth = reth;
        let mut f = vec![0u8; r.frame_len(payload.len())];
        r.emit(payload, &mut f);
        let sent = f.clone();
        self.dev.handle_rx(Instant(now), &mut f);
        // the frame is only scratch for the ICRC check: the caller gets it back unchanged
        assert_eq!(f, sent, "handle_rx changed the frame");
    }
    /// (opcode, psn, AETH syndrome, MSN) of every frame the device sends now.
    fn tx(&mut self, now: u64) -> Vec<(Opcode, u32, AethSyndrome, u32)> {
        let mut v = Vec::new();
        while let Some(n) = self.dev.poll_transmit(Instant(now), &mut self.buf) {
            let (r, _) = RoceRepr::parse(&self.buf[..n]).unwrap();
            let a = r.ext.aeth.unwrap();
            v.push((r.bth.opcode, r.bth.psn.value(), a.syndrome, a.msn.value()));
        }
        v
    }
}

const ACK: AethSyndrome = AethSyndrome::Ack { credits: 31 };

#[test]
fn ack_coalescing_timer_and_msn() {
    let mut r = setup(1);
    let reth = RethRepr { va: BASE, rkey: r.mr.rkey, len: 768 };
    // WRITE FIRST/MIDDLE without AckReq: no ACK yet, one after the coalescing delay.
    r.rx(0, Opcode::RcWriteFirst, EPSN, false, Some(reth), &[1; 256]);
    r.rx(0, Opcode::RcWriteMiddle, EPSN.wrapping_add(1) & 0xffffff, false, None, &[2; 256]);
    assert!(r.tx(0).is_empty());
    let t = r.dev.poll_timeout().expect("coalescing timer");
    assert!(t.0 > 0 && t.0 <= 100_000);
    r.dev.handle_timeout(t);
    assert_eq!(r.tx(t.0), vec![(Opcode::RcAcknowledge, 0xffffff, ACK, 0)], "coalesced ACK of the MIDDLE, MSN still 0");
    // LAST with AckReq: ACK at once with MSN 1 (PSN wrapped to 0).
    r.rx(t.0, Opcode::RcWriteLast, 0, true, None, &[3; 256]);
    assert_eq!(r.tx(t.0), vec![(Opcode::RcAcknowledge, 0, ACK, 1)]);
    assert_eq!(r.dev.memory().slice(BASE + 512, 256), &[3; 256][..]);
    // Duplicate of the LAST: re-acknowledged with the last PSN (C9-104), not re-executed.
    r.dev.memory_mut().slice_mut(BASE + 512, 256).fill(0);
    r.rx(t.0, Opcode::RcWriteLast, 0, true, None, &[3; 256]);
    assert_eq!(r.tx(t.0), vec![(Opcode::RcAcknowledge, 0, ACK, 1)]);
    assert_eq!(r.dev.memory().slice(BASE + 512, 256), &[0; 256][..]);
    assert_eq!(r.dev.counters().duplicate_request, 1);
}

#[test]
fn sequence_nak_once_per_gap() {
    let mut r = setup(1);
    let reth = RethRepr { va: BASE, rkey: r.mr.rkey, len: 8 };
    for k in 1..5u32 {
        r.rx(0, Opcode::RcWriteOnly, (EPSN + k) & 0xffffff, true, Some(reth), &[9; 8]);
    }
    let nak = AethSyndrome::Nak(NakCode::PsnSequenceError);
    assert_eq!(r.tx(0), vec![(Opcode::RcAcknowledge, EPSN, nak, 0)]);
    assert_eq!(r.dev.counters().out_of_seq_request, 4);
    // The expected packet closes the gap; the next gap gets its own NAK.
    r.rx(0, Opcode::RcWriteOnly, EPSN, true, Some(reth), &[9; 8]);
    r.rx(0, Opcode::RcWriteOnly, (EPSN + 2) & 0xffffff, true, Some(reth), &[9; 8]);
    assert_eq!(r.tx(0), vec![(Opcode::RcAcknowledge, EPSN, ACK, 1), (Opcode::RcAcknowledge, 0xffffff, nak, 1)]);
    assert_eq!(r.dev.qp_state(r.qp), Some(QpState::Rts), "sequence errors do not break the QP");
}

#[test]
fn opcode_sequence_error_is_invalid_request() {
    let mut r = setup(1);
    // SEND MIDDLE without a FIRST.
    r.dev.post_recv(r.qp, RecvWr::new(1).with_sge(BASE, 1024, r.mr.lkey)).unwrap();
    r.rx(0, Opcode::RcSendMiddle, EPSN, true, None, &[0; 256]);
    assert_eq!(r.tx(0), vec![(Opcode::RcAcknowledge, EPSN, AethSyndrome::Nak(NakCode::InvalidRequest), 0)]);
    assert_eq!(r.dev.qp_state(r.qp), Some(QpState::Err));
    let wc = r.dev.poll_cq_one(r.cq).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WrFlushErr));
}

#[test]
fn middle_packet_must_be_full_mtu() {
    let mut r = setup(1);
    r.dev.post_recv(r.qp, RecvWr::new(1).with_sge(BASE, 1024, r.mr.lkey)).unwrap();
    r.rx(0, Opcode::RcSendFirst, EPSN, false, None, &[0; 200]);
    assert_eq!(r.tx(0), vec![(Opcode::RcAcknowledge, EPSN, AethSyndrome::Nak(NakCode::InvalidRequest), 0)]);
}

#[test]
fn rnr_nak_carries_min_rnr_timer() {
    let mut r = setup(18);
    r.rx(0, Opcode::RcSendOnly, EPSN, true, None, b"no receive posted");
    assert_eq!(r.tx(0), vec![(Opcode::RcAcknowledge, EPSN, AethSyndrome::RnrNak { timer: 18 }, 0)]);
    // Later packets of the same gap are dropped silently (the RNR NAK covers them).
    r.rx(0, Opcode::RcSendOnly, (EPSN + 1) & 0xffffff, true, None, b"x");
    assert!(r.tx(0).is_empty());
    // Once a receive is posted the retry succeeds.
    r.dev.post_recv(r.qp, RecvWr::new(4).with_sge(BASE, 64, r.mr.lkey)).unwrap();
    r.rx(0, Opcode::RcSendOnly, EPSN, true, None, b"no receive posted");
    assert_eq!(r.tx(0), vec![(Opcode::RcAcknowledge, EPSN, ACK, 1)]);
    let wc = r.dev.poll_cq_one(r.cq).unwrap().unwrap();
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (4, WcStatus::Success, 17));
    assert_eq!(r.dev.counters().send_rnr_err, 1);
}

#[test]
fn zero_length_write_skips_rkey_check() {
    let mut r = setup(1);
    let reth = RethRepr { va: 0xdead_beef, rkey: Rkey(0x1234), len: 0 };
    r.rx(0, Opcode::RcWriteOnly, EPSN, true, Some(reth), &[]);
    assert_eq!(r.tx(0), vec![(Opcode::RcAcknowledge, EPSN, ACK, 1)]);
}

#[test]
fn unknown_qpn_and_foreign_source_are_dropped() {
    let mut r = setup(1);
    let q = r.qpn;
    r.qpn = Qpn::new(0x4242);
    r.rx(0, Opcode::RcSendOnly, EPSN, true, None, b"x");
    assert_eq!(r.dev.counters().rcvd_bad_qpn, 1);
    r.qpn = q;
    assert!(r.tx(0).is_empty());
}

/// The receive path remembers the QP the last frame went to: a frame for a destroyed QP
/// must not reach the QP created into its slot, even one that is ready to receive from the
/// same peer, and the new QP is reached by its own number.
#[test]
fn frame_for_a_destroyed_qp_does_not_reach_its_successor() {
    let mut r = setup(1);
    let reth = RethRepr { va: BASE, rkey: r.mr.rkey, len: 8 };
    r.rx(0, Opcode::RcWriteOnly, EPSN, true, Some(reth), &[1; 8]);
    assert_eq!(r.dev.memory().slice(BASE, 8), &[1; 8][..]);
    let old = r.qpn;
    r.dev.destroy_qp(r.qp).unwrap();
    let qp = r
        .dev
        .create_qp(QpInitAttr { qp_type: QpType::Rc, pd: r.mr.pd, send_cq: r.cq, recv_cq: r.cq, srq: None, cap: QpCap::default(), sq_sig_all: false })
        .unwrap();
    assert_eq!(qp, r.qp, "the new QP takes the destroyed one's slot");
    let av = AddressVector { dgid: gid(2), dmac: [2, 0, 0, 0, 0, 2], ..Default::default() };
    let (a, m) = init_attr(AccessFlags::ALL);
    r.dev.modify_qp(qp, &a, m).unwrap();
    let (a, m) = rtr_attr(av, PathMtu::Mtu256, Qpn::new(PEER_QPN), Psn::new(EPSN), 4, 1);
    r.dev.modify_qp(qp, &a, m).unwrap();
    let new = r.dev.query_qp(qp).unwrap().qp_num;
    assert_ne!(new, old);
    let bad = r.dev.counters().rcvd_bad_qpn;
    r.rx(0, Opcode::RcWriteOnly, EPSN, true, Some(reth), &[2; 8]);
    assert_eq!(r.dev.counters().rcvd_bad_qpn, bad + 1, "the old number names no QP");
    assert_eq!(r.dev.memory().slice(BASE, 8), &[1; 8][..], "nothing written");
    r.qpn = new;
    r.rx(0, Opcode::RcWriteOnly, EPSN, true, Some(reth), &[3; 8]);
    assert_eq!(r.dev.memory().slice(BASE, 8), &[3; 8][..], "the new number reaches the new QP");
}
