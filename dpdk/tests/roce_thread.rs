//! Auto progress: each RoceDevice runs in its own engine thread; the test thread talks to both
//! through the SPSC command/event rings only. Setup partly before spawning (manual mode),
//! partly through commands (PD, MR, CQ, QP, modify, post, stats).

mod roce_util;

use droce_dpdk::roce::{Command, EngineThread, Reply, VerbError};
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpCap, QpHandle, QpInitAttr, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{AccessFlags, CqHandle, MemoryRegion, PdHandle, RecvWr, SendOpcode, SendWr, UdDest};
use droce_transport::{Gid, Memory, Psn, QKey, Qpn};
use roce_util::*;
use std::net::Ipv4Addr;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn pd(e: &mut EngineThread) -> PdHandle {
    match e.call(Command::AllocPd, T).unwrap() {
        Reply::Pd(p) => p,
        r => panic!("{r:?}"),
    }
}
fn cq(e: &mut EngineThread) -> CqHandle {
    match e.call(Command::CreateCq { depth: 4096 }, T).unwrap() {
        Reply::Cq(c) => c,
        r => panic!("{r:?}"),
    }
}
fn qp(e: &mut EngineThread, pd: PdHandle, cq: CqHandle, t: QpType) -> (QpHandle, Qpn) {
    let init = QpInitAttr { qp_type: t, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: false };
    let q = match e.call(Command::CreateQp { init }, T).unwrap() {
        Reply::Qp(q) => q,
        r => panic!("{r:?}"),
    };
    let n = match e.call(Command::QueryQp { qp: q }, T).unwrap() {
        Reply::QpInfo(i) => i.qp_num,
        r => panic!("{r:?}"),
    };
    (q, n)
}
fn modify(e: &mut EngineThread, qp: QpHandle, (attr, mask): (droce_transport::qp::QpAttr, droce_transport::qp::QpAttrMask)) {
    match e.call(Command::ModifyQp { qp, attr: Box::new(attr), mask }, T) {
        Ok(Reply::Done) => {}
        r => panic!("{r:?}"),
    }
}

#[test]
fn engine_threads_rc_and_ud() {
    let wire = Wire::memif("roce-thread", None);
    let (ipa, ipb) = (Ipv4Addr::new(10, 1, 0, 1), Ipv4Addr::new(10, 1, 0, 2));
    let mut ca = wire.config(0);
    ca.ipv4 = vec![ipa];
    let mut cb = wire.config(1);
    cb.ipv4 = vec![ipb];
    let a = wire.device(0, ca);
    let b = wire.device(1, cb);
    let (ga, gb) = (a.gid(1).unwrap(), b.gid(1).unwrap());
    let (mut bufa, mut bufb) = (Buf::new(1 << 20), Buf::new(1 << 20));
    let (basea, baseb) = (bufa.addr(), bufb.addr());
    let mut ea = EngineThread::spawn(a, vec![]).unwrap();
    let mut eb = EngineThread::spawn(b, vec![]).unwrap();
    let (pda, pdb) = (pd(&mut ea), pd(&mut eb));
    // SAFETY: the buffers outlive the engine threads' devices (dropped at the end, after stop)
    // and are read by this thread only after completions.
    #[allow(unsafe_code)]
    let (mra, mrb): (MemoryRegion, MemoryRegion) = unsafe {
        (
            ea.reg_mr(pda, basea as *mut u8, bufa.len(), AccessFlags::ALL, T).unwrap(),
            eb.reg_mr(pdb, baseb as *mut u8, bufb.len(), AccessFlags::ALL, T).unwrap(),
        )
    };
    let (cqa, cqb) = (cq(&mut ea), cq(&mut eb));
    let (qa, na) = qp(&mut ea, pda, cqa, QpType::Rc);
    let (qb, nb) = qp(&mut eb, pdb, cqb, QpType::Rc);
    let (psa, psb) = (Psn::new(11), Psn::new(22));
    let av = |g: Gid| droce_transport::verbs::AddressVector {
        dgid: g,
        dmac: [0; 6],
        sgid_index: 1,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    for (e, q, peer_gid, peer_qpn, rq, sq) in [(&mut ea, qa, gb, nb, psb, psa), (&mut eb, qb, ga, na, psa, psb)] {
        modify(e, q, init_attr(AccessFlags::ALL));
        modify(e, q, rtr_attr(av(peer_gid), PathMtu::Mtu1024, peer_qpn, rq, 16, 1));
        modify(e, q, rts_attr(sq, 8, 7, 7, 16));
    }
    // an error comes back as an error: post on a QP handle that does not exist
    let bad = ea.call(Command::PostSend { qp: QpHandle(999), wr: SendWr::new(0, SendOpcode::Send) }, T);
    assert!(matches!(bad, Err(VerbError::PostSend(_))), "{bad:?}");

    // Pipelined SENDs: 200 messages of 3000 B, receives pre-posted, data checked
    let n = 200u64;
    for i in 0..n {
        let dst = baseb + 0x10000 + (i % 64) * 4096;
        eb.submit(Command::PostRecv { qp: qb, wr: RecvWr::new(i).with_sge(dst, 4096, mrb.lkey) }).unwrap();
        if i % 64 == 63 || i == n - 1 {
            // receives posted in rounds of 64 buffers: send this round and check it
            let first = i - (i % 64);
            for j in first..=i {
                let data = pattern(j as u8, 3000);
                let src = basea + 0x10000 + (j % 64) * 4096;
                // SAFETY: no work request uses this buffer now (previous round completed).
                #[allow(unsafe_code)]
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), src as *mut u8, data.len())
                };
                ea.submit(Command::PostSend { qp: qa, wr: SendWr::new(j, SendOpcode::Send).with_sge(src, 3000, mra.lkey) }).unwrap();
            }
            for j in first..=i {
                let w = ea.wait_wc(cqa, T).expect("send completion");
                assert_eq!((w.status, w.opcode, w.wr_id), (WcStatus::Success, WcOpcode::Send, j));
                let r = eb.wait_wc(cqb, T).expect("recv completion");
                assert_eq!((r.status, r.byte_len, r.wr_id), (WcStatus::Success, 3000, j));
                let mut got = vec![0u8; 3000];
                // SAFETY: the receive completed; nothing writes this buffer now.
                #[allow(unsafe_code)]
                unsafe {
                    std::ptr::copy_nonoverlapping((baseb + 0x10000 + (j % 64) * 4096) as *const u8, got.as_mut_ptr(), 3000)
                };
                assert_eq!(got, pattern(j as u8, 3000), "message {j}");
            }
        }
    }
    // WRITE then READ back, then fetch-add 100 times
    let data = pattern(3, 65536);
    let mem = {
        let mut m = droce_dpdk::roce::ProcessMemory::new();
        // SAFETY: as above: buffers alive, no work request in flight on these ranges.
        #[allow(unsafe_code)]
        unsafe {
            m.add_region(basea, bufa.len() as u64).unwrap();
            m.add_region(baseb, bufb.len() as u64).unwrap();
        }
        m
    };
    let mut mem = mem;
    mem.write(basea + 0x1000, &data).unwrap();
    ea.submit(Command::PostSend {
        qp: qa,
        wr: SendWr::new(1, SendOpcode::Write).with_sge(basea + 0x1000, 65536, mra.lkey).with_remote(baseb + 0x80000, mrb.rkey),
    })
    .unwrap();
    assert_eq!(ea.wait_wc(cqa, T).unwrap().status, WcStatus::Success);
    ea.submit(Command::PostSend {
        qp: qa,
        wr: SendWr::new(2, SendOpcode::Read).with_sge(basea + 0x40000, 65536, mra.lkey).with_remote(baseb + 0x80000, mrb.rkey),
    })
    .unwrap();
    let w = ea.wait_wc(cqa, T).unwrap();
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaRead));
    let mut got = vec![0u8; 65536];
    mem.read(basea + 0x40000, &mut got).unwrap();
    assert_eq!(got, data);
    mem.write(baseb + 0x800, &0u64.to_ne_bytes()).unwrap();
    for i in 0..100u64 {
        ea.submit(Command::PostSend {
            qp: qa,
            wr: SendWr::new(i, SendOpcode::FetchAdd)
                .with_sge(basea + 0x800 + 8 * (i % 16), 8, mra.lkey)
                .with_remote(baseb + 0x800, mrb.rkey)
                .with_atomic(1, 0),
        })
        .unwrap();
        let w = ea.wait_wc(cqa, T).unwrap();
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::FetchAdd));
        assert_eq!(mem.fetch_add(basea + 0x800 + 8 * (i % 16), 0).unwrap(), i, "original value returned");
    }
    assert_eq!(mem.fetch_add(baseb + 0x800, 0).unwrap(), 100);

    // UD through the thread
    let qkey = QKey(0x42);
    let (ua, _) = qp(&mut ea, pda, cqa, QpType::Ud);
    let (ub, unb) = qp(&mut eb, pdb, cqb, QpType::Ud);
    for (e, q) in [(&mut ea, ua), (&mut eb, ub)] {
        use droce_transport::qp::{QpAttr, QpAttrMask, QpState};
        modify(
            e,
            q,
            (
                QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey, ..QpAttr::default() },
                QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
            ),
        );
        modify(e, q, (QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, QpAttrMask::STATE));
        modify(e, q, (QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(5), ..QpAttr::default() }, QpAttrMask::STATE | QpAttrMask::SQ_PSN));
    }
    mem.write(basea + 0x2000, &pattern(8, 512)).unwrap();
    eb.submit(Command::PostRecv { qp: ub, wr: RecvWr::new(9).with_sge(baseb + 0x3000, 552, mrb.lkey) }).unwrap();
    let dest = UdDest { av: av(gb), remote_qpn: unb, remote_qkey: qkey };
    ea.submit(Command::PostSend { qp: ua, wr: SendWr::new(8, SendOpcode::Send).with_sge(basea + 0x2000, 512, mra.lkey).with_ud(dest) })
        .unwrap();
    assert_eq!(ea.wait_wc(cqa, T).unwrap().status, WcStatus::Success);
    let r = eb.wait_wc(cqb, T).unwrap();
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 552));
    let mut got = vec![0u8; 512];
    mem.read(baseb + 0x3000 + 40, &mut got).unwrap();
    assert_eq!(got, pattern(8, 512));

    let st = match ea.call(Command::Stats, T).unwrap() {
        Reply::Stats(s) => s,
        r => panic!("{r:?}"),
    };
    assert!(st.transport.sent_pkts > 600 && st.engine.arp_requests_tx == 1, "{st:?}");
    let a = ea.stop().expect("engine thread a");
    let b = eb.stop().expect("engine thread b");
    assert_eq!(a.device().counters().rcvd_icrc_err, 0);
    drop((a, b));
    drop(mem);
    drop((bufa, bufb));
    wire.finish();
}
