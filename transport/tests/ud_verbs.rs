//! UD service, GSI QP, verbs objects: QP state machine through the device, CQ overflow,
//! SRQ limit event.

use droce_transport::device::{AsyncEvent, ModifyQpError, PostRecvError, PostSendError};
use droce_transport::qp::attr::InvalidAttr;
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType};
use droce_transport::sim::{ud_up, LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{AccessFlags, RecvWr, SendOpcode, SendWr, WcFlags};
use droce_transport::wire::RoceRepr;
use droce_transport::{Memory, QKey, Qpn};

const MEM: usize = 1 << 20;
const QK: QKey = QKey(0x1111_1111);

#[test]
fn ud_send_with_grh_and_imm() {
    let mut p = Pair::new(LinkConfig::PERFECT, 1, MEM);
    let (qa, qb) = p.ud_pair(QK);
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    let frames = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let f2 = frames.clone();
    p.filter = Some(Box::new(move |_, f| {
        f2.borrow_mut().push(f.to_vec());
        false
    }));
    let data: Vec<u8> = (0..1024u32).map(|i| (i ^ 0x5a) as u8).collect();
    p.a.dev.memory_mut().write(MEM_BASE, &data).unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(7).with_sge(MEM_BASE + 0x4000, 40 + 1024, lb)).unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(8).with_sge(MEM_BASE + 0x8000, 100, lb)).unwrap();
    let dest = p.ud_dest(true, qb, QK);
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 1024, la).with_ud(dest)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::SendImm).with_sge(MEM_BASE, 13, la).with_imm(0xabcdef).with_ud(dest)).unwrap();
    p.run_idle(10_000);
    let wa: Vec<_> = std::iter::from_fn(|| p.a.poll()).collect();
    assert_eq!(wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let wb: Vec<_> = std::iter::from_fn(|| p.b.poll()).collect();
    assert_eq!(wb.len(), 2);
    let na = p.a.dev.query_qp(qa).unwrap().qp_num;
    assert_eq!((wb[0].wr_id, wb[0].status, wb[0].opcode, wb[0].byte_len, wb[0].src_qp), (7, WcStatus::Success, WcOpcode::Recv, 1064, na));
    assert!(wb[0].wc_flags.contains(WcFlags::GRH));
    assert_eq!(p.b.dev.memory().slice(MEM_BASE + 0x4000 + 40, 1024), &data[..]);
    // GRH: for IPv4 the 20-byte IP header in the last 20 of the 40 bytes, like rxe.
    let f = &frames.borrow()[0];
    let grh = p.b.dev.memory().slice(MEM_BASE + 0x4000, 40);
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(&grh[20..], &f[14..34]);
    assert_eq!((wb[1].byte_len, wb[1].imm_data), (53, 0xabcdef));
    assert!(wb[1].wc_flags.contains(WcFlags::WITH_IMM) && wb[1].wc_flags.contains(WcFlags::GRH));
    // On the wire: DETH with the Q_Key and source QPN, AckReq 0, UDP sport from the QPN.
    let (r, _) = RoceRepr::parse(f).unwrap();
    let d = r.ext.deth.unwrap();
    assert_eq!((d.qkey, d.src_qp, r.bth.ack_req), (QK, na, false));
    assert_eq!(r.udp.src_port, droce_transport::qp::attr::default_udp_sport(na));
}

#[test]
fn ud_qkey_rules() {
    let mut p = Pair::new(LinkConfig::PERFECT, 2, MEM);
    let (qa, qb) = p.ud_pair(QK);
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    for i in 0..3 {
        p.b.dev.post_recv(qb, RecvWr::new(i).with_sge(MEM_BASE + 0x4000 + i * 0x1000, 256, lb)).unwrap();
    }
    // Wrong Q_Key: dropped and counted.
    let wrong = p.ud_dest(true, qb, QKey(0x2222));
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 10, la).with_ud(wrong)).unwrap();
    p.run_idle(10_000);
    assert!(p.b.poll().is_none());
    assert_eq!(p.b.dev.counters().qkey_violation, 1);
    // Controlled Q_Key (high bit) in the WR: the sending QP's own Q_Key is used (C10-15).
    let ctrl = p.ud_dest(true, qb, QKey(0x8000_0000));
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(MEM_BASE, 10, la).with_ud(ctrl)).unwrap();
    p.run_idle(10_000);
    assert_eq!(p.b.poll().unwrap().status, WcStatus::Success);
    // Longer than the path MTU is refused at post time.
    let d = p.ud_dest(true, qb, QK);
    assert_eq!(
        p.a.dev.post_send(qa, SendWr::new(3, SendOpcode::Send).with_sge(MEM_BASE, 1025, la).with_ud(d)),
        Err(PostSendError::MessageTooLong)
    );
    // RDMA opcodes are not UD operations.
    assert_eq!(
        p.a.dev.post_send(qa, SendWr::new(4, SendOpcode::Write).with_sge(MEM_BASE, 8, la).with_ud(d)),
        Err(PostSendError::InvalidOpcode)
    );
}

#[test]
fn ud_short_receive_buffer_is_length_error() {
    let mut p = Pair::new(LinkConfig::PERFECT, 3, MEM);
    let (qa, qb) = p.ud_pair(QK);
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    p.b.dev.post_recv(qb, RecvWr::new(9).with_sge(MEM_BASE, 45, lb)).unwrap();
    let d = p.ud_dest(true, qb, QK);
    p.a.dev.post_send(qa, SendWr::new(3, SendOpcode::Send).with_sge(MEM_BASE, 6, la).with_ud(d)).unwrap();
    p.run_idle(10_000);
    let wc = p.b.poll().unwrap();
    assert_eq!(wc.status, WcStatus::LocLenErr);
    assert_eq!(wc.byte_len, 40 + 6, "the message's length, GRH included (what did not fit is byte_len - 45)");
    // No receive posted: dropped silently (UD has no RNR).
    p.a.dev.post_send(qa, SendWr::new(4, SendOpcode::Send).with_sge(MEM_BASE, 6, la).with_ud(d)).unwrap();
    p.run_idle(10_000);
    assert!(p.b.poll().is_none());
    assert_eq!(p.b.dev.counters().ud_no_recv_wqe, 1);
}

#[test]
fn gsi_qp1_is_routed() {
    let mut p = Pair::new(LinkConfig::PERFECT, 4, MEM);
    let init = |n: &droce_transport::sim::Node| QpInitAttr {
        qp_type: QpType::Ud,
        pd: n.pd,
        send_cq: n.cq,
        recv_cq: n.cq,
        srq: None,
        cap: QpCap::default(),
        sq_sig_all: true,
    };
    let ia = init(&p.a);
    let ib = init(&p.b);
    let ga = p.a.dev.create_gsi_qp(ia).unwrap();
    let gb = p.b.dev.create_gsi_qp(ib).unwrap();
    assert!(p.b.dev.create_gsi_qp(ib).is_err(), "only one QP1");
    assert_eq!(p.b.dev.query_qp(gb).unwrap().qp_num, Qpn::GSI);
    ud_up(&mut p.a.dev, ga, QKey::GSI);
    ud_up(&mut p.b.dev, gb, QKey::GSI);
    let lb = p.b.mr.lkey;
    p.b.dev.post_recv(gb, RecvWr::new(1).with_sge(MEM_BASE, 40 + 256, lb)).unwrap();
    let d = p.ud_dest(true, gb, QKey::GSI);
    let la = p.a.mr.lkey;
    p.a.dev.post_send(ga, SendWr::new(5, SendOpcode::Send).with_sge(MEM_BASE, 256, la).with_ud(d)).unwrap();
    p.run_idle(10_000);
    let w = p.b.poll().unwrap();
    assert_eq!((w.status, w.src_qp, w.byte_len), (WcStatus::Success, Qpn::GSI, 296));
    assert_eq!(p.a.dev.query_qp(ga).unwrap().udp_sport, 55410, "rxe's QP1 source port (vector G)");
}

#[test]
fn qp_state_machine_through_device() {
    let mut p = Pair::new(LinkConfig::PERFECT, 5, MEM);
    let n = &mut p.a;
    let q = n
        .dev
        .create_qp(QpInitAttr { qp_type: QpType::Rc, pd: n.pd, send_cq: n.cq, recv_cq: n.cq, srq: None, cap: QpCap::default(), sq_sig_all: false })
        .unwrap();
    let lk = n.mr.lkey;
    // RESET: no posting, no skipping states.
    assert_eq!(n.dev.post_recv(q, RecvWr::new(1)), Err(PostRecvError::InvalidState));
    assert_eq!(n.dev.post_send(q, SendWr::new(1, SendOpcode::Send)), Err(PostSendError::InvalidState));
    let rts = QpAttr { qp_state: QpState::Rts, ..QpAttr::default() };
    assert_eq!(n.dev.modify_qp(q, &rts, M::STATE), Err(ModifyQpError::InvalidTransition));
    let init = QpAttr { qp_state: QpState::Init, qp_access_flags: AccessFlags::ALL, ..QpAttr::default() };
    assert_eq!(n.dev.modify_qp(q, &init, M::STATE | M::PKEY_INDEX | M::PORT), Err(ModifyQpError::InvalidAttrMask), "RC INIT needs ACCESS_FLAGS");
    assert_eq!(n.dev.modify_qp(q, &init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS | M::QKEY), Err(ModifyQpError::InvalidAttrMask), "QKEY not allowed for RC");
    let bad_pkey = QpAttr { pkey_index: 3, ..init };
    assert_eq!(
        n.dev.modify_qp(q, &bad_pkey, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        Err(ModifyQpError::InvalidAttr(InvalidAttr::PkeyIndex))
    );
    n.dev.modify_qp(q, &init, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS).unwrap();
    assert_eq!(n.dev.qp_state(q), Some(QpState::Init));
    // INIT: receives may be posted, sends not.
    n.dev.post_recv(q, RecvWr::new(11).with_sge(MEM_BASE, 8, lk)).unwrap();
    assert_eq!(n.dev.post_send(q, SendWr::new(1, SendOpcode::Send)), Err(PostSendError::InvalidState));
    let av = droce_transport::verbs::AddressVector { dgid: p.b.gid, ..Default::default() };
    let rtr = QpAttr { qp_state: QpState::Rtr, ah_attr: av, path_mtu: PathMtu::Mtu4096, dest_qp_num: Qpn::new(0x20), min_rnr_timer: 32, ..QpAttr::default() };
    let rtr_mask = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
    let n = &mut p.a;
    assert_eq!(n.dev.modify_qp(q, &rtr, rtr_mask), Err(ModifyQpError::InvalidAttr(InvalidAttr::MinRnrTimer)));
    let rtr = QpAttr { min_rnr_timer: 12, ..rtr };
    assert_eq!(n.dev.modify_qp(q, &rtr, rtr_mask), Err(ModifyQpError::InvalidAttr(InvalidAttr::PathMtu)), "4096 > port MTU 1024");
    let rtr = QpAttr { path_mtu: PathMtu::Mtu1024, ..rtr };
    n.dev.modify_qp(q, &rtr, rtr_mask).unwrap();
    let rts = QpAttr { qp_state: QpState::Rts, timeout: 14, retry_cnt: 8, rnr_retry: 7, ..QpAttr::default() };
    let rts_mask = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    assert_eq!(n.dev.modify_qp(q, &rts, rts_mask), Err(ModifyQpError::InvalidAttr(InvalidAttr::RetryCnt)));
    let rts = QpAttr { retry_cnt: 7, ..rts };
    n.dev.modify_qp(q, &rts, rts_mask).unwrap();
    let info = n.dev.query_qp(q).unwrap();
    assert_eq!((info.attr.qp_state, info.attr.timeout, info.attr.path_mtu), (QpState::Rts, 14, PathMtu::Mtu1024));
    // RTS -> SQD -> RTS, then ERR flushes the posted receive, RESET empties the QP.
    n.dev.modify_qp(q, &QpAttr { qp_state: QpState::Sqd, ..QpAttr::default() }, M::STATE).unwrap();
    n.dev.modify_qp(q, &QpAttr { qp_state: QpState::Rts, ..QpAttr::default() }, M::STATE).unwrap();
    assert_eq!(n.dev.modify_qp(q, &QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, M::STATE), Err(ModifyQpError::InvalidTransition));
    n.dev.modify_qp(q, &QpAttr { qp_state: QpState::Err, ..QpAttr::default() }, M::STATE).unwrap();
    let w = n.poll().unwrap();
    assert_eq!((w.wr_id, w.status, w.opcode), (11, WcStatus::WrFlushErr, WcOpcode::Recv));
    n.dev.modify_qp(q, &QpAttr { qp_state: QpState::Reset, ..QpAttr::default() }, M::STATE).unwrap();
    assert_eq!(n.dev.qp_state(q), Some(QpState::Reset));
    n.dev.destroy_qp(q).unwrap();
    assert!(n.dev.query_qp(q).is_err());
}

#[test]
fn cq_overflow_is_async_error_and_qp_error() {
    let mut p = Pair::new(LinkConfig::PERFECT, 6, MEM);
    let small = p.b.dev.create_cq(2).unwrap();
    let (pd, lb) = (p.b.pd, p.b.mr.lkey);
    let qb = p.b
        .dev
        .create_qp(QpInitAttr { qp_type: QpType::Ud, pd, send_cq: small, recv_cq: small, srq: None, cap: QpCap::default(), sq_sig_all: false })
        .unwrap();
    ud_up(&mut p.b.dev, qb, QK);
    let (qa, _) = p.ud_pair(QK);
    for i in 0..4 {
        p.b.dev.post_recv(qb, RecvWr::new(i).with_sge(MEM_BASE + i * 0x1000, 256, lb)).unwrap();
    }
    let d = p.ud_dest(true, qb, QK);
    let la = p.a.mr.lkey;
    for i in 0..3 {
        p.a.dev.post_send(qa, SendWr::new(i, SendOpcode::Send).with_sge(MEM_BASE, 8, la).with_ud(d)).unwrap();
    }
    p.run_idle(10_000);
    assert_eq!(p.b.dev.poll_event(), Some(AsyncEvent::CqError(small)));
    assert_eq!(p.b.dev.qp_state(qb), Some(QpState::Err));
    assert!(p.b.dev.cq(small).unwrap().is_overrun());
    assert_eq!(p.b.dev.counters().cq_overrun, 1);
}

#[test]
fn srq_limit_event_and_srq_delivery() {
    let mut p = Pair::new(LinkConfig::PERFECT, 7, MEM);
    let (pd, lb, cq) = (p.b.pd, p.b.mr.lkey, p.b.cq);
    let srq = p.b.dev.create_srq(pd, 16, 1).unwrap();
    let qb = p.b
        .dev
        .create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq: Some(srq), cap: QpCap::default(), sq_sig_all: false })
        .unwrap();
    assert_eq!(p.b.dev.post_recv(qb, RecvWr::new(0)), Err(PostRecvError::QpHasSrq));
    for i in 0..8 {
        p.b.dev.post_srq_recv(srq, RecvWr::new(100 + i).with_sge(MEM_BASE + i * 0x1000, 64, lb)).unwrap();
    }
    assert!(p.b.dev.modify_srq(srq, 17).is_err());
    p.b.dev.modify_srq(srq, 4).unwrap();
    // Connect a's RC QP to this b QP by hand.
    let o = RcOpts::default();
    let qa = {
        let n = &mut p.a;
        n.dev
            .create_qp(QpInitAttr { qp_type: QpType::Rc, pd: n.pd, send_cq: n.cq, recv_cq: n.cq, srq: None, cap: QpCap::default(), sq_sig_all: false })
            .unwrap()
    };
    let na = p.a.dev.query_qp(qa).unwrap().qp_num;
    let nb = p.b.dev.query_qp(qb).unwrap().qp_num;
    let (ava, avb) = (p.a.av_to(&p.b), p.b.av_to(&p.a));
    use droce_transport::device::rc_connect::*;
    for (dev, q, av, peer) in [(&mut p.a.dev, qa, ava, nb), (&mut p.b.dev, qb, avb, na)] {
        let (a, m) = init_attr(AccessFlags::ALL);
        dev.modify_qp(q, &a, m).unwrap();
        let (a, m) = rtr_attr(av, o.mtu, peer, o.psn_a, 4, 1);
        dev.modify_qp(q, &a, m).unwrap();
        let (a, m) = rts_attr(o.psn_a, 8, 7, 7, 4);
        dev.modify_qp(q, &a, m).unwrap();
    }
    let la = p.a.mr.lkey;
    for i in 0..5u64 {
        p.a.dev.post_send(qa, SendWr::new(i, SendOpcode::Send).with_sge(MEM_BASE, 10, la)).unwrap();
    }
    p.run_idle(100_000);
    let got: Vec<_> = std::iter::from_fn(|| p.b.poll()).map(|w| w.wr_id).collect();
    assert_eq!(got, vec![100, 101, 102, 103, 104]);
    assert_eq!(p.b.dev.poll_event(), Some(AsyncEvent::SrqLimitReached(srq)));
    assert_eq!(p.b.dev.poll_event(), None, "fires once, then disarmed");
    assert_eq!(p.b.dev.srq(srq).unwrap().len(), 3);
    assert_eq!(p.b.dev.srq(srq).unwrap().limit(), 0);
}

#[test]
fn ud_local_error_enters_sqe_and_recovers() {
    let mut p = Pair::new(LinkConfig::PERFECT, 8, MEM);
    let (qa, qb) = p.ud_pair(QK);
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    let d = p.ud_dest(true, qb, QK);
    let bad = droce_transport::Lkey(la.0 ^ 4);
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 8, bad).with_ud(d)).unwrap();
    assert_eq!(p.a.poll().map(|w| (w.wr_id, w.status)), Some((1, WcStatus::LocProtErr)));
    assert_eq!(p.a.dev.qp_state(qa), Some(QpState::Sqe));
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(MEM_BASE, 8, la).with_ud(d)).unwrap();
    assert_eq!(p.a.poll().map(|w| (w.wr_id, w.status)), Some((2, WcStatus::WrFlushErr)));
    // Receives still work in SQE.
    p.a.dev.post_recv(qa, RecvWr::new(5).with_sge(MEM_BASE + 0x1000, 256, la)).unwrap();
    let back = p.ud_dest(false, qa, QK);
    p.b.dev.post_send(qb, SendWr::new(9, SendOpcode::Send).with_sge(MEM_BASE, 8, lb).with_ud(back)).unwrap();
    p.run_idle(10_000);
    assert_eq!(p.a.poll().map(|w| (w.wr_id, w.status)), Some((5, WcStatus::Success)));
    // SQE -> RTS resumes sending.
    p.a.dev.modify_qp(qa, &QpAttr { qp_state: QpState::Rts, ..QpAttr::default() }, M::STATE).unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(6).with_sge(MEM_BASE + 0x1000, 256, lb)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(3, SendOpcode::Send).with_sge(MEM_BASE, 8, la).with_ud(d)).unwrap();
    p.run_idle(10_000);
    assert_eq!(p.a.poll().map(|w| (w.wr_id, w.status)), Some((3, WcStatus::Success)));
}

#[test]
fn ipv6_gids_rc_and_ud() {
    use droce_transport::{Device, DeviceConfig, Gid, VecMemory};
    use std::net::Ipv6Addr;
    let g = |i: u16| Gid::from_ipv6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i));
    let mk = |i: u8| {
        let cfg = DeviceConfig { mac: [2, 0, 0, 0, 0, i], gids: vec![g(i as u16)], seed: i as u64, ..DeviceConfig::default() };
        Device::new(cfg, VecMemory::new(MEM_BASE, MEM))
    };
    let (mut a, mut b) = (mk(1), mk(2));
    let setup = |d: &mut Device<VecMemory>| {
        let pd = d.alloc_pd();
        let mr = d.reg_mr(pd, MEM_BASE, MEM as u64, AccessFlags::ALL).unwrap();
        let cq = d.create_cq(64).unwrap();
        let init = |ty| QpInitAttr { qp_type: ty, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: true };
        let rc = d.create_qp(init(QpType::Rc)).unwrap();
        let ud = d.create_qp(init(QpType::Ud)).unwrap();
        ud_up(d, ud, QK);
        (mr, cq, rc, ud)
    };
    let (mra, cqa, rca, uda) = setup(&mut a);
    let (mrb, cqb, rcb, udb) = setup(&mut b);
    use droce_transport::device::rc_connect::*;
    let qn = |d: &Device<VecMemory>, q| d.query_qp(q).unwrap().qp_num;
    let (na, nb) = (qn(&a, rca), qn(&b, rcb));
    for (d, q, peer, pq) in [(&mut a, rca, 2u8, nb), (&mut b, rcb, 1u8, na)] {
        let av = droce_transport::verbs::AddressVector { dgid: g(peer as u16), dmac: [2, 0, 0, 0, 0, peer], ..Default::default() };
        let (x, m) = init_attr(AccessFlags::ALL);
        d.modify_qp(q, &x, m).unwrap();
        let (x, m) = rtr_attr(av, PathMtu::Mtu1024, pq, droce_transport::Psn::new(5), 4, 1);
        d.modify_qp(q, &x, m).unwrap();
        let (x, m) = rts_attr(droce_transport::Psn::new(5), 10, 7, 7, 4);
        d.modify_qp(q, &x, m).unwrap();
    }
    a.memory_mut().write(MEM_BASE, b"over ipv6").unwrap();
    b.post_recv(rcb, RecvWr::new(1).with_sge(MEM_BASE + 0x1000, 64, mrb.lkey)).unwrap();
    b.post_recv(udb, RecvWr::new(2).with_sge(MEM_BASE + 0x2000, 128, mrb.lkey)).unwrap();
    a.post_send(rca, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 9, mra.lkey)).unwrap();
    let av = droce_transport::verbs::AddressVector { dgid: g(2), dmac: [2, 0, 0, 0, 0, 2], ..Default::default() };
    let dest = droce_transport::verbs::UdDest { av, remote_qpn: qn(&b, udb), remote_qkey: QK };
    a.post_send(uda, SendWr::new(2, SendOpcode::Send).with_sge(MEM_BASE, 9, mra.lkey).with_ud(dest)).unwrap();
    let mut buf = vec![0u8; a.max_frame_len()];
    let mut ud_frame = Vec::new();
    for _ in 0..10 {
        while let Some(n) = a.poll_transmit(droce_transport::Instant(0), &mut buf) {
            assert_eq!(&buf[12..14], &[0x86, 0xdd], "IPv6 ethertype");
            if RoceRepr::parse(&buf[..n]).unwrap().0.ext.deth.is_some() {
                ud_frame = buf[..n].to_vec();
            }
            b.handle_rx(droce_transport::Instant(0), &mut buf[..n]);
        }
        while let Some(n) = b.poll_transmit(droce_transport::Instant(0), &mut buf) {
            a.handle_rx(droce_transport::Instant(0), &mut buf[..n]);
        }
    }
    let wa: Vec<_> = std::iter::from_fn(|| a.poll_cq_one(cqa).unwrap()).map(|w| w.status).collect();
    assert_eq!(wa, vec![WcStatus::Success, WcStatus::Success]);
    let wb: Vec<_> = std::iter::from_fn(|| b.poll_cq_one(cqb).unwrap()).collect();
    assert_eq!(wb.len(), 2);
    assert_eq!(b.memory().slice(MEM_BASE + 0x1000, 9), b"over ipv6");
    // UD over IPv6: the GRH is the IPv6 header itself.
    assert_eq!(b.memory().slice(MEM_BASE + 0x2000, 40), &ud_frame[14..54]);
    assert_eq!(b.memory().slice(MEM_BASE + 0x2000 + 40, 9), b"over ipv6");
}
