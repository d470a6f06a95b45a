//! RC error and recovery paths: retry exhaustion, RNR, remote access violations, PSN
//! sequence errors, duplicate READ/atomic replay.

use droce_transport::device::AsyncEvent;
use droce_transport::qp::QpState;
use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{AccessFlags, RecvWr, SendOpcode, SendWr, WorkCompletion};
use droce_transport::wire::{Opcode, RoceRepr};
use droce_transport::Memory;

const MEM: usize = 1 << 20;

fn drain(p: &mut Pair, on_b: bool) -> Vec<WorkCompletion> {
    let n = if on_b { &mut p.b } else { &mut p.a };
    std::iter::from_fn(|| n.poll()).collect()
}

fn opcode_psn(frame: &[u8]) -> Option<(Opcode, u32)> {
    RoceRepr::parse(frame).ok().map(|(r, _)| (r.bth.opcode, r.bth.psn.value()))
}

#[test]
fn retry_exhaustion_then_flush() {
    let mut p = Pair::new(LinkConfig::PERFECT, 1, MEM);
    let (qa, _qb) = p.rc_pair(RcOpts { retry_cnt: 3, timeout: 4, ..RcOpts::default() });
    let la = p.a.mr.lkey;
    p.link_up = false;
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 100, la)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Write).with_sge(MEM_BASE, 100, la).with_remote(MEM_BASE, p.b.mr.rkey)).unwrap();
    p.run_idle(100_000);
    let wcs = drain(&mut p, false);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(p.a.dev.counters().completer_retry_err, 3, "retry_cnt retransmissions");
    assert_eq!(p.a.dev.counters().retry_exceeded_err, 1);
    assert_eq!(p.a.dev.qp_state(qa), Some(QpState::Err));
    assert!(matches!(p.a.dev.poll_event(), Some(AsyncEvent::QpFatal(_, WcStatus::RetryExcErr))));
    // timeout 4 = 65.5 µs, 4 transmissions
    assert!(p.now.0 >= 4 * 65_536 && p.now.0 < 10 * 65_536, "{:?}", p.now);
    // Posting to a QP in ERR flushes at once.
    p.a.dev.post_send(qa, SendWr::new(3, SendOpcode::Send)).unwrap();
    let wcs = drain(&mut p, false);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::WrFlushErr));
}

#[test]
fn rnr_then_success_when_recv_arrives() {
    let mut p = Pair::new(LinkConfig::PERFECT, 2, MEM);
    let (qa, qb) = p.rc_pair(RcOpts { rnr_retry: 6, min_rnr_timer: 14, ..RcOpts::default() });
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    p.a.dev.memory_mut().write(MEM_BASE, b"hello rnr").unwrap();
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 9, la)).unwrap();
    assert!(p.run_until(100_000, |p| p.b.dev.counters().send_rnr_err >= 3));
    let t_rnr = p.now;
    assert!(drain(&mut p, false).is_empty());
    p.b.dev.post_recv(qb, RecvWr::new(9).with_sge(MEM_BASE + 0x1000, 64, lb)).unwrap();
    assert!(p.run_until(100_000, |p| !p.a.dev.cq(p.a.cq).unwrap().is_empty()));
    let wcs = drain(&mut p, false);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
    let r = drain(&mut p, true);
    assert_eq!((r[0].wr_id, r[0].status, r[0].byte_len), (9, WcStatus::Success, 9));
    assert_eq!(p.b.dev.memory().slice(MEM_BASE + 0x1000, 9), b"hello rnr");
    assert!(p.a.dev.counters().rcvd_rnr_err >= 3);
    // min_rnr_timer 14 = 1.28 ms between attempts
    assert!(t_rnr.0 >= 2 * 1_280_000, "{t_rnr:?}");
}

#[test]
fn rnr_retry_exhausted() {
    let mut p = Pair::new(LinkConfig::PERFECT, 3, MEM);
    let (qa, _qb) = p.rc_pair(RcOpts { rnr_retry: 2, min_rnr_timer: 1, ..RcOpts::default() });
    let la = p.a.mr.lkey;
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 9, la)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(MEM_BASE, 9, la)).unwrap();
    p.run_idle(100_000);
    let wcs = drain(&mut p, false);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::RnrRetryExcErr));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(p.b.dev.counters().send_rnr_err, 3, "initial try + rnr_retry retries");
    assert_eq!(p.a.dev.counters().retry_rnr_exceeded_err, 1);
}

#[test]
fn rnr_retry_7_is_infinite() {
    let mut p = Pair::new(LinkConfig::PERFECT, 4, MEM);
    let (qa, qb) = p.rc_pair(RcOpts { rnr_retry: 7, min_rnr_timer: 1, ..RcOpts::default() });
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    // several packets: after each RNR NAK the rest of the message arrives out of sequence
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 5000, la)).unwrap();
    assert!(p.run_until(1_000_000, |p| p.b.dev.counters().send_rnr_err >= 3));
    let (fa, fb, rb) = (p.a.dev.counters().forward_pkts(), p.b.dev.counters().forward_pkts(), p.b.dev.counters().rcvd_pkts);
    assert!(p.run_until(1_000_000, |p| p.b.dev.counters().send_rnr_err >= 200));
    assert!(drain(&mut p, false).is_empty());
    // a peer that only repeats itself moves nothing on (what a timeout-bounded wait counts)
    let (ca, cb) = (p.a.dev.counters(), p.b.dev.counters());
    assert!(cb.rcvd_pkts > rb + 400 && cb.out_of_seq_request > 0, "{cb:?}");
    assert_eq!((ca.forward_pkts(), cb.forward_pkts()), (fa, fb), "{ca:?}\n{cb:?}");
    p.b.dev.post_recv(qb, RecvWr::new(9).with_sge(MEM_BASE + 0x10000, 8192, lb)).unwrap();
    assert!(p.run_until(100_000, |p| !p.a.dev.cq(p.a.cq).unwrap().is_empty()));
    assert_eq!(drain(&mut p, false)[0].status, WcStatus::Success);
    assert!(p.b.dev.counters().forward_pkts() > fb && p.a.dev.counters().forward_pkts() > fa);
}

/// Each violation: a WRITE (or READ/atomic) that the responder refuses with a NAK; the
/// requester completes it with `expect`, the target memory stays untouched.
fn violation(setup: impl FnOnce(&mut Pair) -> SendWr, expect: WcStatus) {
    let mut p = Pair::new(LinkConfig::PERFECT, 5, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let lb = p.b.mr.lkey;
    p.b.dev.post_recv(qb, RecvWr::new(50).with_sge(MEM_BASE + 0x8000, 64, lb)).unwrap();
    p.b.dev.memory_mut().slice_mut(MEM_BASE + 0x4000, 0x2000).fill(0x5a);
    p.a.dev.memory_mut().slice_mut(MEM_BASE, 0x100).fill(0x11);
    let before = p.b.dev.memory().slice(MEM_BASE, MEM).to_vec();
    let wr = setup(&mut p);
    let before2 = p.b.dev.memory().slice(MEM_BASE, MEM).to_vec();
    assert_eq!(before, before2);
    p.a.dev.post_send(qa, wr).unwrap();
    p.a.dev.post_send(qa, SendWr::new(99, SendOpcode::Send)).unwrap();
    p.run_idle(100_000);
    let wcs = drain(&mut p, false);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!(wcs[0].status, expect);
    assert_eq!((wcs[1].wr_id, wcs[1].status), (99, WcStatus::WrFlushErr));
    assert!(p.b.dev.memory().slice(MEM_BASE, MEM) == &before[..], "target memory changed");
    assert_eq!(p.b.dev.counters().send_nak, 1);
    // The responder QP is in error too and flushed its receive.
    assert_eq!(p.b.dev.qp_state(qb), Some(QpState::Err));
    let r = drain(&mut p, true);
    assert_eq!((r[0].wr_id, r[0].status), (50, WcStatus::WrFlushErr));
}

#[test]
fn remote_access_bad_rkey() {
    violation(|p| {
        let bad = droce_transport::Rkey(p.b.mr.rkey.0 ^ 0x1);
        SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 64, p.a.mr.lkey).with_remote(MEM_BASE + 0x4000, bad)
    }, WcStatus::RemAccessErr);
}

#[test]
fn remote_access_out_of_bounds() {
    violation(|p| {
        let pd = p.b.pd;
        let mr = p.b.dev.reg_mr(pd, MEM_BASE + 0x4000, 0x1000, AccessFlags::ALL).unwrap();
        SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 64, p.a.mr.lkey).with_remote(MEM_BASE + 0x4000 + 0x1000 - 32, mr.rkey)
    }, WcStatus::RemAccessErr);
}

#[test]
fn remote_access_wrong_pd() {
    violation(|p| {
        let other = p.b.dev.alloc_pd();
        let mr = p.b.dev.reg_mr(other, MEM_BASE + 0x4000, 0x1000, AccessFlags::ALL).unwrap();
        SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 64, p.a.mr.lkey).with_remote(MEM_BASE + 0x4000, mr.rkey)
    }, WcStatus::RemAccessErr);
}

#[test]
fn remote_access_missing_write_flag() {
    violation(|p| {
        let pd = p.b.pd;
        let mr = p.b.dev.reg_mr(pd, MEM_BASE + 0x4000, 0x1000, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
        SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 64, p.a.mr.lkey).with_remote(MEM_BASE + 0x4000, mr.rkey)
    }, WcStatus::RemAccessErr);
}

#[test]
fn remote_access_missing_read_flag() {
    violation(|p| {
        let pd = p.b.pd;
        let mr = p.b.dev.reg_mr(pd, MEM_BASE + 0x4000, 0x1000, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
        SendWr::new(1, SendOpcode::Read).with_sge(MEM_BASE + 0x100, 64, p.a.mr.lkey).with_remote(MEM_BASE + 0x4000, mr.rkey)
    }, WcStatus::RemAccessErr);
}

#[test]
fn remote_access_missing_atomic_flag() {
    violation(|p| {
        let pd = p.b.pd;
        let mr = p.b.dev.reg_mr(pd, MEM_BASE + 0x4000, 0x1000, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
        SendWr::new(1, SendOpcode::FetchAdd).with_sge(MEM_BASE + 0x100, 8, p.a.mr.lkey).with_remote(MEM_BASE + 0x4000, mr.rkey).with_atomic(1, 0)
    }, WcStatus::RemAccessErr);
}

#[test]
fn misaligned_atomic_is_invalid_request() {
    violation(|p| {
        SendWr::new(1, SendOpcode::FetchAdd).with_sge(MEM_BASE + 0x100, 8, p.a.mr.lkey).with_remote(MEM_BASE + 0x4004, p.b.mr.rkey).with_atomic(1, 0)
    }, WcStatus::RemInvReqErr);
}

#[test]
fn send_longer_than_receive_is_invalid_request() {
    let mut p = Pair::new(LinkConfig::PERFECT, 6, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    p.b.dev.post_recv(qb, RecvWr::new(50).with_sge(MEM_BASE + 0x8000, 16, lb)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 17, la)).unwrap();
    p.run_idle(100_000);
    assert_eq!(drain(&mut p, false)[0].status, WcStatus::RemInvReqErr);
    let r = drain(&mut p, true);
    assert_eq!((r[0].wr_id, r[0].status), (50, WcStatus::LocLenErr));
}

#[test]
fn local_protection_error() {
    let mut p = Pair::new(LinkConfig::PERFECT, 6, MEM);
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let bad = droce_transport::Lkey(p.a.mr.lkey.0 ^ 2);
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 17, bad)).unwrap();
    p.run_idle(1000);
    assert_eq!(drain(&mut p, false)[0].status, WcStatus::LocProtErr);
    assert_eq!(p.a.dev.qp_state(qa), Some(QpState::Err));
    assert_eq!(p.stats.sent, 0, "nothing went on the wire");
}

#[test]
fn psn_sequence_error_goes_back_n() {
    let mut p = Pair::new(LinkConfig::PERFECT, 7, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    p.a.dev.memory_mut().write(MEM_BASE, &data).unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(1).with_sge(MEM_BASE + 0x10000, 8192, lb)).unwrap();
    // Lose the second packet of the 8-packet SEND, once.
    let mut dropped = false;
    let requests = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let seen = requests.clone();
    p.filter = Some(Box::new(move |to_b, f| {
        if to_b && opcode_psn(f).is_some() {
            seen.set(seen.get() + 1);
        }
        if !dropped && to_b && opcode_psn(f).is_some_and(|(op, _)| op == Opcode::RcSendMiddle) {
            dropped = true;
            return true;
        }
        false
    }));
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 8192, la)).unwrap();
    p.run_idle(100_000);
    assert_eq!(drain(&mut p, false)[0].status, WcStatus::Success);
    let r = drain(&mut p, true);
    assert_eq!((r.len(), r[0].byte_len), (1, 8192));
    assert_eq!(p.b.dev.memory().slice(MEM_BASE + 0x10000, 8192), &data[..]);
    assert_eq!(p.a.dev.counters().rcvd_seq_err, 1, "one NAK per gap");
    assert!(p.b.dev.counters().out_of_seq_request >= 6);
    assert_eq!(p.a.dev.counters().completer_retry_err, 0, "recovered by the NAK, not the timer");
    // every packet sent again is counted once, the NAK itself not (it once counted one more)
    assert_eq!(p.a.dev.counters().retransmitted_pkts, requests.get() - 8, "{} request frames", requests.get());
}

#[test]
fn atomic_replayed_not_reexecuted() {
    let mut p = Pair::new(LinkConfig::PERFECT, 8, MEM);
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let (la, rkb) = (p.a.mr.lkey, p.b.mr.rkey);
    p.b.dev.memory_mut().write(MEM_BASE + 0x40, &100u64.to_ne_bytes()).unwrap();
    // Lose the first two atomic ACKs: the requester resends, the responder replays.
    let mut lost = 0;
    p.filter = Some(Box::new(move |to_b, f| {
        if !to_b && lost < 2 && opcode_psn(f).is_some_and(|(op, _)| op == Opcode::RcAtomicAcknowledge) {
            lost += 1;
            return true;
        }
        false
    }));
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::FetchAdd).with_sge(MEM_BASE, 8, la).with_remote(MEM_BASE + 0x40, rkb).with_atomic(5, 0)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::CmpSwap).with_sge(MEM_BASE + 8, 8, la).with_remote(MEM_BASE + 0x40, rkb).with_atomic(105, 7)).unwrap();
    p.run_idle(100_000);
    let w = drain(&mut p, false);
    assert_eq!((w[0].status, w[0].opcode, w[1].status), (WcStatus::Success, WcOpcode::FetchAdd, WcStatus::Success));
    assert_eq!(p.a.dev.memory().slice(MEM_BASE, 8), &100u64.to_ne_bytes());
    assert_eq!(p.a.dev.memory().slice(MEM_BASE + 8, 8), &105u64.to_ne_bytes());
    assert_eq!(p.b.dev.memory().slice(MEM_BASE + 0x40, 8), &7u64.to_ne_bytes(), "executed exactly once each");
    assert!(p.b.dev.counters().duplicate_request >= 1);
}

#[test]
fn read_response_lost_is_replayed() {
    let mut p = Pair::new(LinkConfig::PERFECT, 9, MEM);
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let (la, rkb) = (p.a.mr.lkey, p.b.mr.rkey);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 13 + 1) as u8).collect();
    p.b.dev.memory_mut().write(MEM_BASE + 0x3000, &data).unwrap();
    // Lose the FIRST response packet (the requester sees a gap and re-issues the READ) and
    // then the LAST packet of the replayed stream (the ACK timer re-reads just the tail).
    let (mut lost_first, mut lasts) = (false, 0);
    let requests = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let seen = requests.clone();
    p.filter = Some(Box::new(move |to_b, f| {
        let Some((op, _)) = opcode_psn(f) else { return false };
        if to_b {
            seen.set(seen.get() + 1);
            return false;
        }
        if !lost_first && op == Opcode::RcReadResponseFirst {
            lost_first = true;
            return true;
        }
        if op == Opcode::RcReadResponseLast {
            lasts += 1;
            return lasts == 2;
        }
        false
    }));
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Read).with_sge(MEM_BASE, 5000, la).with_remote(MEM_BASE + 0x3000, rkb)).unwrap();
    p.run_idle(100_000);
    let w = drain(&mut p, false);
    assert_eq!((w.len(), w[0].status, w[0].byte_len), (1, WcStatus::Success, 5000));
    assert_eq!(p.a.dev.memory().slice(MEM_BASE, 5000), &data[..]);
    assert!(p.b.dev.counters().duplicate_request >= 2);
    assert!(p.a.dev.counters().completer_retry_err >= 1);
    // the READ re-issued after the gap and after the timeout: each counted once as it leaves
    assert_eq!(p.a.dev.counters().retransmitted_pkts, requests.get() - 1, "{} READ requests", requests.get());
}

#[test]
fn fence_and_rd_atomic_limit() {
    let mut p = Pair::new(LinkConfig::PERFECT, 10, MEM);
    let (qa, qb) = p.rc_pair(RcOpts { max_rd_atomic: 1, ..RcOpts::default() });
    let (la, lb, rkb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    p.b.dev.memory_mut().write(MEM_BASE + 0x3000, b"remote!!").unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(1).with_sge(MEM_BASE + 0x9000, 64, lb)).unwrap();
    // Two READs with max_rd_atomic 1: the second waits for the first.
    let mut reads_in_flight = 0i32;
    let mut max_reads = 0i32;
    let order = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let o2 = order.clone();
    p.filter = Some(Box::new(move |_, f| {
        if let Some((op, _)) = opcode_psn(f) {
            if op == Opcode::RcReadRequest {
                reads_in_flight += 1;
            }
            if op == Opcode::RcReadResponseOnly {
                reads_in_flight -= 1;
            }
            max_reads = max_reads.max(reads_in_flight);
            assert!(max_reads <= 1, "more READs outstanding than max_rd_atomic");
            o2.borrow_mut().push(op);
        }
        false
    }));
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Read).with_sge(MEM_BASE, 8, la).with_remote(MEM_BASE + 0x3000, rkb)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Read).with_sge(MEM_BASE + 8, 8, la).with_remote(MEM_BASE + 0x3000, rkb)).unwrap();
    // FENCE: the SEND carrying the READ result must not start before the READs completed.
    p.a.dev
        .post_send(qa, SendWr::new(3, SendOpcode::Send).with_sge(MEM_BASE, 16, la).with_flags(droce_transport::verbs::SendFlags::FENCE | droce_transport::verbs::SendFlags::SIGNALED))
        .unwrap();
    p.run_idle(100_000);
    let w = drain(&mut p, false);
    assert_eq!(w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]);
    assert_eq!(p.b.dev.memory().slice(MEM_BASE + 0x9000, 16), b"remote!!remote!!");
    let ops = order.borrow();
    let send_at = ops.iter().position(|&o| o == Opcode::RcSendOnly).unwrap();
    let last_resp = ops.iter().rposition(|&o| o == Opcode::RcReadResponseOnly).unwrap();
    assert!(send_at > last_resp, "fenced SEND went before the READ responses: {ops:?}");
}

#[test]
fn send_with_invalidate_revokes_the_rkey() {
    let mut p = Pair::new(LinkConfig::PERFECT, 11, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    let pd = p.b.pd;
    let mr = p.b.dev.reg_mr(pd, MEM_BASE + 0x4000, 0x1000, AccessFlags::ALL).unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(1).with_sge(MEM_BASE + 0x8000, 64, lb)).unwrap();
    // WRITE works, SEND_INV names the rkey, the next WRITE is refused.
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 8, la).with_remote(MEM_BASE + 0x4000, mr.rkey)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::SendInv).with_sge(MEM_BASE, 8, la).with_imm(mr.rkey.0)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(3, SendOpcode::Write).with_sge(MEM_BASE, 8, la).with_remote(MEM_BASE + 0x4000, mr.rkey)).unwrap();
    p.run_idle(100_000);
    let w: Vec<_> = drain(&mut p, false).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(w, vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::RemAccessErr)]);
    let r = drain(&mut p, true);
    assert_eq!((r[0].imm_data, r[0].wc_flags.contains(droce_transport::verbs::WcFlags::WITH_INV)), (mr.rkey.0, true));
}

#[test]
fn pd_and_mr_lifecycle() {
    use droce_transport::device::DeallocPdError;
    use droce_transport::verbs::mr::RegMrError;
    let mut p = Pair::new(LinkConfig::PERFECT, 12, MEM);
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let d = &mut p.b.dev;
    let pd = d.alloc_pd();
    assert_eq!(d.reg_mr(pd, MEM_BASE, 64, AccessFlags::REMOTE_WRITE), Err(RegMrError::RemoteWriteWithoutLocalWrite));
    assert_eq!(d.reg_mr(pd, MEM_BASE, 64, AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ), Err(RegMrError::RemoteWriteWithoutLocalWrite));
    let m1 = d.reg_mr(pd, MEM_BASE, 64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
    assert_eq!(m1.lkey.0, m1.rkey.0);
    assert_eq!(d.dealloc_pd(pd), Err(DeallocPdError::Busy));
    d.dereg_mr(m1.lkey).unwrap();
    assert!(d.dereg_mr(m1.lkey).is_err());
    let m2 = d.reg_mr(pd, MEM_BASE, 64, AccessFlags::ALL).unwrap();
    assert_eq!(m2.lkey.0 >> 8, m1.lkey.0 >> 8, "slot reused");
    d.dereg_mr(m2.lkey).unwrap();
    d.dealloc_pd(pd).unwrap();
    // A deregistered region is no longer reachable remotely.
    let pdb = p.b.pd;
    let m3 = p.b.dev.reg_mr(pdb, MEM_BASE, 64, AccessFlags::ALL).unwrap();
    p.b.dev.dereg_mr(m3.lkey).unwrap();
    let la = p.a.mr.lkey;
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 8, la).with_remote(MEM_BASE, m3.rkey)).unwrap();
    p.run_idle(100_000);
    assert_eq!(drain(&mut p, false)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn sqd_drains_then_notifies() {
    use droce_transport::qp::{QpAttr, QpAttrMask};
    let mut p = Pair::new(LinkConfig::PERFECT, 13, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    for i in 0..3 {
        p.b.dev.post_recv(qb, RecvWr::new(i).with_sge(MEM_BASE + 0x10000, 8192, lb)).unwrap();
    }
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 4096, la)).unwrap();
    // Start the first message, then ask for SQD: it finishes, the second one does not start.
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    let n = p.a.dev.poll_transmit(p.now, &mut buf).unwrap();
    p.b.dev.handle_rx(p.now, &mut buf[..n]);
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(MEM_BASE, 8, la)).unwrap();
    let sqd = QpAttr { qp_state: QpState::Sqd, en_sqd_async_notify: true, ..QpAttr::default() };
    p.a.dev.modify_qp(qa, &sqd, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY).unwrap();
    assert_eq!(p.a.dev.poll_event(), None, "not drained yet");
    p.run_idle(100_000);
    let w: Vec<_> = drain(&mut p, false).iter().map(|w| w.wr_id).collect();
    assert_eq!(w, vec![1]);
    assert_eq!(p.a.dev.poll_event(), Some(AsyncEvent::SqDrained(qa)));
    // Back to RTS: the queued WR goes out.
    p.a.dev.modify_qp(qa, &QpAttr { qp_state: QpState::Rts, ..QpAttr::default() }, QpAttrMask::STATE).unwrap();
    p.run_idle(100_000);
    assert_eq!(drain(&mut p, false)[0].wr_id, 2);
}
