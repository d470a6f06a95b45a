//! Every RC opcode end to end over a perfect simulated link, with data checks.

use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendFlags, SendOpcode, SendWr, WcFlags, WorkCompletion};
use droce_transport::Memory;

const MEM: usize = 1 << 20;

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn wait_wc(p: &mut Pair, on_b: bool) -> WorkCompletion {
    let mut got = None;
    let ok = p.run_until(1_000_000, |p| {
        let n = if on_b { &mut p.b } else { &mut p.a };
        if got.is_none() {
            got = n.poll();
        }
        got.is_some()
    });
    assert!(ok, "no completion");
    got.unwrap()
}

#[test]
fn send_variants_all_sizes() {
    let mut p = Pair::new(LinkConfig::PERFECT, 1, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    for (i, &len) in [0usize, 1, 13, 64, 1023, 1024, 1025, 1027, 4096, 10_000].iter().enumerate() {
        for op in [SendOpcode::Send, SendOpcode::SendImm, SendOpcode::SendInv] {
            let data = pattern(i as u8, len);
            let src = MEM_BASE + 0x1000;
            let dst = MEM_BASE + 0x40000;
            p.a.dev.memory_mut().write(src, &data).unwrap();
            p.b.dev.memory_mut().slice_mut(dst, 16384).fill(0xee);
            p.b.dev.post_recv(qb, RecvWr::new(77).with_sge(dst, 16384, lb)).unwrap();
            let mut wr = SendWr::new(i as u64, op).with_sge(src, len as u32, la).with_imm(0xdead_0000 + i as u32);
            if op == SendOpcode::SendInv {
                // invalidate an rkey that is not registered: only reported in the WC
                wr.imm_data = 0x00ff_ff00;
            }
            p.a.dev.post_send(qa, wr).unwrap();
            let wa = wait_wc(&mut p, false);
            assert_eq!((wa.status, wa.opcode, wa.wr_id), (WcStatus::Success, WcOpcode::Send, i as u64));
            let wb = wait_wc(&mut p, true);
            assert_eq!((wb.status, wb.opcode, wb.wr_id, wb.byte_len), (WcStatus::Success, WcOpcode::Recv, 77, len as u32));
            match op {
                SendOpcode::SendImm => {
                    assert!(wb.wc_flags.contains(WcFlags::WITH_IMM));
                    assert_eq!(wb.imm_data, 0xdead_0000 + i as u32);
                }
                SendOpcode::SendInv => {
                    assert!(wb.wc_flags.contains(WcFlags::WITH_INV));
                    assert_eq!(wb.imm_data, 0x00ff_ff00);
                }
                _ => assert_eq!(wb.wc_flags.0, 0),
            }
            assert_eq!(p.b.dev.memory().slice(dst, len), &data[..], "len {len} {op:?}");
            assert!(p.b.dev.memory().slice(dst + len as u64, 16).iter().all(|&b| b == 0xee));
        }
    }
}

#[test]
fn write_read_atomics() {
    let mut p = Pair::new(LinkConfig::PERFECT, 2, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb, rkb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    for (i, &len) in [0usize, 8, 1024, 1500, 4096, 65536].iter().enumerate() {
        let data = pattern(i as u8 + 9, len);
        let src = MEM_BASE + 0x1000;
        let remote = MEM_BASE + 0x20000;
        p.a.dev.memory_mut().write(src, &data).unwrap();
        // WRITE
        p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(src, len as u32, la).with_remote(remote, rkb)).unwrap();
        let w = wait_wc(&mut p, false);
        assert_eq!((w.status, w.opcode, w.byte_len), (WcStatus::Success, WcOpcode::RdmaWrite, len as u32));
        assert_eq!(p.b.dev.memory().slice(remote, len), &data[..]);
        // WRITE_IMM consumes a receive
        p.b.dev.post_recv(qb, RecvWr::new(5).with_sge(MEM_BASE, 0, lb)).unwrap();
        let data2 = pattern(i as u8 + 100, len);
        p.a.dev.memory_mut().write(src, &data2).unwrap();
        p.a.dev
            .post_send(qa, SendWr::new(2, SendOpcode::WriteImm).with_sge(src, len as u32, la).with_remote(remote, rkb).with_imm(0x1234))
            .unwrap();
        let w = wait_wc(&mut p, false);
        assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaWrite));
        let r = wait_wc(&mut p, true);
        assert_eq!((r.status, r.opcode, r.imm_data, r.byte_len), (WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0x1234, len as u32));
        assert!(r.wc_flags.contains(WcFlags::WITH_IMM));
        assert_eq!(p.b.dev.memory().slice(remote, len), &data2[..]);
        // READ it back into another buffer
        let back = MEM_BASE + 0x80000;
        p.a.dev.memory_mut().slice_mut(back, len + 8).fill(0);
        p.a.dev.post_send(qa, SendWr::new(3, SendOpcode::Read).with_sge(back, len as u32, la).with_remote(remote, rkb)).unwrap();
        let w = wait_wc(&mut p, false);
        assert_eq!((w.status, w.opcode, w.byte_len), (WcStatus::Success, WcOpcode::RdmaRead, len as u32));
        assert_eq!(p.a.dev.memory().slice(back, len), &data2[..]);
    }
    // atomics
    let target = MEM_BASE + 0x100;
    p.b.dev.memory_mut().write(target, &40u64.to_ne_bytes()).unwrap();
    let res = MEM_BASE + 0x200;
    p.a.dev.post_send(qa, SendWr::new(10, SendOpcode::FetchAdd).with_sge(res, 8, la).with_remote(target, rkb).with_atomic(2, 0)).unwrap();
    let w = wait_wc(&mut p, false);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::FetchAdd));
    assert_eq!(p.a.dev.memory().slice(res, 8), &40u64.to_ne_bytes());
    assert_eq!(p.b.dev.memory().slice(target, 8), &42u64.to_ne_bytes());
    // compare fails
    p.a.dev.post_send(qa, SendWr::new(11, SendOpcode::CmpSwap).with_sge(res, 8, la).with_remote(target, rkb).with_atomic(7, 99)).unwrap();
    let w = wait_wc(&mut p, false);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::CompSwap));
    assert_eq!(p.a.dev.memory().slice(res, 8), &42u64.to_ne_bytes());
    assert_eq!(p.b.dev.memory().slice(target, 8), &42u64.to_ne_bytes());
    // compare matches
    p.a.dev.post_send(qa, SendWr::new(12, SendOpcode::CmpSwap).with_sge(res, 8, la).with_remote(target, rkb).with_atomic(42, 99)).unwrap();
    let w = wait_wc(&mut p, false);
    assert_eq!(w.status, WcStatus::Success);
    assert_eq!(p.b.dev.memory().slice(target, 8), &99u64.to_ne_bytes());
}

#[test]
fn inline_and_unsignaled() {
    let mut p = Pair::new(LinkConfig::PERFECT, 3, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    let src = MEM_BASE + 0x1000;
    p.a.dev.memory_mut().write(src, b"inline payload!").unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(1).with_sge(MEM_BASE + 0x9000, 64, lb)).unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(2).with_sge(MEM_BASE + 0xa000, 64, lb)).unwrap();
    // INLINE: the data is captured at post time, so overwriting the buffer afterwards is fine.
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(src, 15, la).with_flags(SendFlags::INLINE)).unwrap();
    p.a.dev.memory_mut().write(src, b"XXXXXXXXXXXXXXX").unwrap();
    // Unsignaled, then signaled: one send completion.
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(src, 4, la).with_flags(SendFlags::INLINE | SendFlags::SIGNALED)).unwrap();
    p.run_idle(100_000);
    let a: Vec<_> = std::iter::from_fn(|| p.a.poll()).collect();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].wr_id, 2);
    let b: Vec<_> = std::iter::from_fn(|| p.b.poll()).collect();
    assert_eq!(b.len(), 2);
    assert_eq!(p.b.dev.memory().slice(MEM_BASE + 0x9000, 15), b"inline payload!");
    assert_eq!(p.b.dev.memory().slice(MEM_BASE + 0xa000, 4), b"XXXX");
}

#[test]
fn transmit_round_robin_among_qps() {
    let mut p = Pair::new(LinkConfig::PERFECT, 4, MEM);
    let (qa1, qb1) = p.rc_pair(RcOpts::default());
    let (qa2, qb2) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    for i in 0..8 {
        p.b.dev.post_recv(qb1, RecvWr::new(i).with_sge(MEM_BASE + 0x10000, 4096, lb)).unwrap();
        p.b.dev.post_recv(qb2, RecvWr::new(i).with_sge(MEM_BASE + 0x20000, 4096, lb)).unwrap();
    }
    // QP 1 gets a long message first; QP 2's short ones must not wait behind it.
    p.a.dev.post_send(qa1, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 4096, la)).unwrap();
    for i in 0..4 {
        p.a.dev.post_send(qa2, SendWr::new(10 + i, SendOpcode::Send).with_sge(MEM_BASE, 8, la)).unwrap();
    }
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    let mut order = Vec::new();
    while let Some(n) = p.a.dev.poll_transmit(p.now, &mut buf) {
        let (r, _) = droce_transport::wire::RoceRepr::parse(&buf[..n]).unwrap();
        order.push(r.bth.dest_qp);
    }
    let (n1, n2) = (p.b.dev.query_qp(qb1).unwrap().qp_num, p.b.dev.query_qp(qb2).unwrap().qp_num);
    assert_eq!(order, vec![n1, n2, n1, n2, n1, n2, n1, n2], "one frame per QP in turn");
}

/// `poll_transmit_data` holds plain ACKs (they go with the next `poll_transmit`, or in
/// one burst with the reply the application posted meanwhile, ahead of it) but not READ
/// responses.
#[test]
fn poll_transmit_data_holds_acks_not_read_responses() {
    use droce_transport::wire::{Opcode, RoceRepr};
    use droce_transport::Instant;
    let mut p = Pair::new(LinkConfig::PERFECT, 7, MEM);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    let now = Instant(0);
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    let op_of = |f: &[u8]| RoceRepr::parse(f).expect("parse").0.bth.opcode;
    p.a.dev.post_recv(qa, RecvWr::new(1).with_sge(MEM_BASE + 0x8000, 64, la)).unwrap();
    p.b.dev.post_recv(qb, RecvWr::new(2).with_sge(MEM_BASE + 0x8000, 64, lb)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(10, SendOpcode::Send).with_sge(MEM_BASE, 8, la)).unwrap();
    let n = p.a.dev.poll_transmit_data(now, &mut buf).expect("the SEND is data");
    assert_eq!(op_of(&buf[..n]), Opcode::RcSendOnly);
    p.b.dev.handle_rx(now, &mut buf[..n]);
    let wc = p.b.poll().expect("receive completes before any ACK is sent");
    assert_eq!((wc.opcode, wc.status), (WcOpcode::Recv, WcStatus::Success));
    assert!(p.b.dev.poll_transmit_data(now, &mut buf).is_none(), "the ACK waits");
    // the reply posted meanwhile takes the held ACK along, behind it: A must complete its
    // SEND before it receives the answer (ofi_rxm's atomics depend on that order)
    p.b.dev.post_send(qb, SendWr::new(20, SendOpcode::Send).with_sge(MEM_BASE, 8, lb)).unwrap();
    let n = p.b.dev.poll_transmit_data(now, &mut buf).expect("held ACK");
    assert_eq!(op_of(&buf[..n]), Opcode::RcAcknowledge, "the ACK leaves ahead of the reply");
    p.a.dev.handle_rx(now, &mut buf[..n]);
    let n = p.b.dev.poll_transmit_data(now, &mut buf).expect("reply");
    assert_eq!(op_of(&buf[..n]), Opcode::RcSendOnly);
    p.a.dev.handle_rx(now, &mut buf[..n]);
    assert!(p.b.dev.poll_transmit(now, &mut buf).is_none());
    let mut got = Vec::new();
    while let Some(wc) = p.a.poll() {
        got.push((wc.opcode, wc.wr_id, wc.status));
    }
    assert_eq!(got, vec![(WcOpcode::Send, 10, WcStatus::Success), (WcOpcode::Recv, 1, WcStatus::Success)], "send completion first");
    // a READ response is data: not held
    p.b.dev.post_send(qb, SendWr::new(30, SendOpcode::Read).with_sge(MEM_BASE + 0x100, 16, lb).with_remote(MEM_BASE, p.a.mr.rkey)).unwrap();
    let n = p.b.dev.poll_transmit_data(now, &mut buf).expect("READ request");
    p.a.dev.handle_rx(now, &mut buf[..n]);
    // A still owes B an ACK for the reply SEND: it goes, in order, with the READ response
    // queued behind it (the response is not held)
    let n = p.a.dev.poll_transmit_data(now, &mut buf).expect("ACK ahead of a READ response");
    assert_eq!(op_of(&buf[..n]), Opcode::RcAcknowledge);
    let n = p.a.dev.poll_transmit_data(now, &mut buf).expect("READ response is not held");
    assert_eq!(op_of(&buf[..n]), Opcode::RcReadResponseOnly);
    assert!(p.a.dev.poll_transmit_data(now, &mut buf).is_none());
}
