//! The two payload paths against the plain ones: frames sent split (headers in the buffer,
//! payload left in memory, pad + ICRC as a trailer) are byte for byte the frames the copy path
//! writes; the one-pass receive (ICRC checked while the payload is placed) accepts and rejects
//! exactly what check-then-copy does, with the same memory and completions.

use droce_transport::qp::PathMtu;
use droce_transport::sim::{rc_connect, LinkConfig, Node, Pair, RcOpts, MEM_BASE};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr, WorkCompletion};
use droce_transport::wire::{icrc, Opcode, RoceRepr};
use droce_transport::{DeviceConfig, Duration, Instant, Memory, Message};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

mod rng;
use rng::pattern;

const MEM: usize = 1 << 20;

/// Every frame put on the pair's link, both directions, in order.
fn record(p: &mut Pair) -> Rc<RefCell<Vec<Vec<u8>>>> {
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    p.filter = Some(Box::new(move |_, f| {
        l.borrow_mut().push(f.to_vec());
        false
    }));
    log
}

fn wait_wcs(p: &mut Pair, n: usize) -> Vec<(bool, WorkCompletion)> {
    let mut got = Vec::new();
    let ok = p.run_until(2_000_000, |p| {
        while let Some(w) = p.a.poll() {
            got.push((false, w));
        }
        while let Some(w) = p.b.poll() {
            got.push((true, w));
        }
        got.len() >= n
    });
    assert!(ok, "{} of {n} completions", got.len());
    got
}

/// Posts the same traffic on a pair: every payload-carrying RC opcode (SEND, SEND with
/// immediate / invalidate, WRITE, WRITE with immediate, READ) at sizes around the MTU.
fn all_payload_opcodes(p: &mut Pair, mtu: usize) -> Vec<(bool, WorkCompletion)> {
    let (qa, qb) = p.rc_pair(RcOpts { mtu: PathMtu::from_bytes(mtu as u32).unwrap(), ..RcOpts::default() });
    let (la, lb, rb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    let mut wcs = Vec::new();
    for (i, &len) in [1usize, 3, mtu - 1, mtu, mtu + 1, 3 * mtu + 5].iter().enumerate() {
        let src = MEM_BASE + 0x1000 + i as u64 * 7;
        let dst = MEM_BASE + 0x80000;
        p.a.dev.memory_mut().write(src, &pattern(i as u64, len)).unwrap();
        for op in [SendOpcode::Send, SendOpcode::SendImm, SendOpcode::SendInv, SendOpcode::Write, SendOpcode::WriteImm, SendOpcode::Read] {
            if matches!(op, SendOpcode::Send | SendOpcode::SendImm | SendOpcode::SendInv | SendOpcode::WriteImm) {
                p.b.dev.post_recv(qb, RecvWr::new(9).with_sge(dst, 4 * mtu as u32, lb)).unwrap();
            }
            let mut wr = SendWr::new(i as u64, op).with_sge(src, len as u32, la).with_imm(0x5a5a_0000 + i as u32);
            if matches!(op, SendOpcode::Write | SendOpcode::WriteImm | SendOpcode::Read) {
                wr = wr.with_remote(dst + 3, rb);
            }
            p.a.dev.post_send(qa, wr).unwrap();
            let want = if matches!(op, SendOpcode::Write | SendOpcode::Read) { 1 } else { 2 };
            wcs.extend(wait_wcs(p, want));
        }
    }
    wcs
}

#[test]
fn split_frames_equal_copied_frames_for_every_payload_opcode() {
    for (eth_mtu, mtu) in [(1500, 1024usize), (9000, 4096)] {
        let mut plain = Pair::with_eth_mtu(LinkConfig::PERFECT, 7, MEM, eth_mtu);
        let mut split = Pair::with_eth_mtu(LinkConfig::PERFECT, 7, MEM, eth_mtu);
        split.split_min = Some(1);
        let (lp, ls) = (record(&mut plain), record(&mut split));
        let wp = all_payload_opcodes(&mut plain, mtu);
        let ws = all_payload_opcodes(&mut split, mtu);
        assert_eq!(format!("{wp:?}"), format!("{ws:?}"), "completions, MTU {mtu}");
        let (lp, ls) = (lp.borrow(), ls.borrow());
        assert_eq!(lp.len(), ls.len(), "frame count, MTU {mtu}");
        let mut ops = BTreeSet::new();
        let mut with_payload = 0;
        for (k, (a, b)) in lp.iter().zip(ls.iter()).enumerate() {
            assert_eq!(a, b, "frame {k} at MTU {mtu}");
            let (r, range) = RoceRepr::parse(a).expect("valid frame");
            if !range.is_empty() {
                with_payload += 1;
                ops.insert(r.bth.opcode);
            }
        }
        assert_eq!(split.split_frames, with_payload, "every frame with payload went split at MTU {mtu}");
        use Opcode::*;
        for op in [
            RcSendFirst, RcSendMiddle, RcSendLast, RcSendLastImm, RcSendLastInv, RcSendOnly, RcSendOnlyImm, RcSendOnlyInv,
            RcWriteFirst, RcWriteMiddle, RcWriteLast, RcWriteLastImm, RcWriteOnly, RcWriteOnlyImm,
            RcReadResponseFirst, RcReadResponseMiddle, RcReadResponseLast, RcReadResponseOnly,
        ] {
            assert!(ops.contains(&op), "{op:?} not exercised at MTU {mtu}");
        }
        assert_eq!(plain.b.dev.memory().slice(MEM_BASE, MEM), split.b.dev.memory().slice(MEM_BASE, MEM));
    }
}

#[test]
fn split_threshold_keeps_small_payloads_in_the_buffer() {
    let mut p = Pair::new(LinkConfig::PERFECT, 3, MEM);
    p.split_min = Some(512);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (la, lb) = (p.a.mr.lkey, p.b.mr.lkey);
    for (len, split) in [(100usize, 0u64), (511, 0), (512, 1), (1024 + 100, 1)] {
        let before = p.split_frames;
        p.b.dev.post_recv(qb, RecvWr::new(1).with_sge(MEM_BASE + 0x8000, 4096, lb)).unwrap();
        p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(MEM_BASE, len as u32, la)).unwrap();
        wait_wcs(&mut p, 2);
        assert_eq!(p.split_frames - before, split, "{len} B");
    }
}

/// Random multi-packet SENDs and WRITEs over a link that loses, duplicates, reorders and
/// flips bits: the pair with the one-pass receive sends the same frames, ends with the same
/// memory and the same completions as the pair with check-then-copy.
#[test]
fn fused_receive_matches_check_then_copy_on_a_lossy_link() {
    for (eth_mtu, mtu) in [(1500, 1024usize), (9000, 4096)] {
        let link = LinkConfig { loss: 0.02, duplicate: 0.02, reorder: 0.02, reorder_window: Duration::from_micros(30), bit_flip: 0.1, ..LinkConfig::PERFECT };
        let run = |fused: bool| {
            let cfg = DeviceConfig { eth_mtu, fused_rx: fused, ..DeviceConfig::default() };
            let mut p = Pair::with_config(link, 11, MEM, cfg);
            let log = record(&mut p);
            let (qa, qb) = p.rc_pair(RcOpts { mtu: PathMtu::from_bytes(mtu as u32).unwrap(), retry_cnt: 7, ..RcOpts::default() });
            let (la, lb, rb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
            let mut wcs = Vec::new();
            for i in 0..40u64 {
                let len = (pattern(i, 2)[0] as usize * 61 + pattern(i, 2)[1] as usize) % (5 * mtu) + 1;
                let src = MEM_BASE + 0x1000;
                p.a.dev.memory_mut().write(src, &pattern(100 + i, len)).unwrap();
                let dst = MEM_BASE + 0x40000 + (i % 4) * 0x8000;
                let op = [SendOpcode::Send, SendOpcode::Write, SendOpcode::SendImm, SendOpcode::WriteImm][i as usize % 4];
                if op != SendOpcode::Write {
                    p.b.dev.post_recv(qb, RecvWr::new(i).with_sge(dst, 6 * mtu as u32, lb)).unwrap();
                }
                let mut wr = SendWr::new(i, op).with_sge(src, len as u32, la).with_imm(i as u32);
                if matches!(op, SendOpcode::Write | SendOpcode::WriteImm) {
                    wr = wr.with_remote(dst, rb);
                }
                p.a.dev.post_send(qa, wr).unwrap();
                wcs.extend(wait_wcs(&mut p, if op == SendOpcode::Write { 1 } else { 2 }));
            }
            let frames = log.borrow().clone();
            let mem = p.b.dev.memory().slice(MEM_BASE, MEM).to_vec();
            (format!("{wcs:?}"), frames, mem, p.b.dev.counters().clone(), p.stats.flipped)
        };
        let (wf, ff, mf, cf, flipped) = run(true);
        let (wp, fp, mp, cp, _) = run(false);
        assert!(flipped > 5, "the link flipped bits ({flipped})");
        assert!(cf.rcvd_icrc_err > 0, "ICRC errors were seen");
        assert_eq!(wf, wp, "completions, MTU {mtu}");
        assert_eq!(ff.len(), fp.len(), "frame count, MTU {mtu}");
        assert!(ff == fp, "frames differ at MTU {mtu}");
        assert!(mf == mp, "memory differs at MTU {mtu}");
        assert_eq!(format!("{cf:?}"), format!("{cp:?}"), "counters, MTU {mtu}");
    }
}

/// One SEND Middle, with each bit of the frame flipped in turn, to a responder with the
/// one-pass receive and to one with check-then-copy: every flip the ICRC covers is rejected by
/// both (counted, PSN not accepted), the fused one writes nothing outside the packet's own
/// destination range, and the good frames then complete the message identically.
#[test]
fn every_covered_bit_flip_is_rejected_by_both_paths() {
    for (eth_mtu, mtu) in [(1500, 1024usize), (9000, 4096)] {
        let mk = |fused: bool| {
            let cfg = DeviceConfig { eth_mtu, fused_rx: fused, ..DeviceConfig::default() };
            let mut a = Node::with_config(1, MEM, DeviceConfig { seed: 5, ..cfg.clone() });
            let mut b = Node::with_config(2, MEM, DeviceConfig { seed: 6, ..cfg });
            let (qa, qb) = rc_connect(&mut a, &mut b, RcOpts { mtu: PathMtu::from_bytes(mtu as u32).unwrap(), ..RcOpts::default() });
            (a, b, qa, qb)
        };
        let ((mut a, mut bf, qa, qb), (_, mut bp, _, _)) = (mk(true), mk(false));
        let dst = MEM_BASE + 0x10000;
        for b in [&mut bf, &mut bp] {
            b.dev.memory_mut().slice_mut(MEM_BASE, MEM).fill(0xee);
            b.dev.post_recv(qb, RecvWr::new(1).with_sge(dst, 3 * mtu as u32, b.mr.lkey)).unwrap();
        }
        let len = 2 * mtu + 10;
        a.dev.memory_mut().write(MEM_BASE, &pattern(1, len)).unwrap();
        a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, len as u32, a.mr.lkey)).unwrap();
        let now = Instant::from_nanos(0);
        let mut frames = Vec::new();
        let mut buf = vec![0u8; a.dev.max_frame_len()];
        while let Some(n) = a.dev.poll_transmit(now, &mut buf) {
            frames.push(buf[..n].to_vec());
        }
        assert_eq!(frames.len(), 3);
        assert_eq!(RoceRepr::parse(&frames[1]).unwrap().0.bth.opcode, Opcode::RcSendMiddle);
        for b in [&mut bf, &mut bp] {
            b.dev.handle_rx(now, &mut frames[0].clone());
        }
        let snap = bf.dev.memory().slice(MEM_BASE, MEM).to_vec();
        let (lo, hi) = ((dst - MEM_BASE) as usize + mtu, (dst - MEM_BASE) as usize + 2 * mtu);
        let middle = &frames[1];
        let ip_end = middle.len();
        let (mut covered, mut uncovered) = (0, 0);
        for bit in 0..middle.len() * 8 {
            let mut f = middle.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            if f.len() > 14 + 20 && icrc::verify(&f[14..ip_end]) {
                // Ethernet header, or a field the ICRC masks (TTL, TOS, checksums, BTH byte 4):
                // no ICRC can see it; such a frame is not corrupt as far as RoCE knows.
                uncovered += 1;
                continue;
            }
            covered += 1;
            let (ef, ep) = (bf.dev.counters().clone(), bp.dev.counters().clone());
            bf.dev.handle_rx(now, &mut f.clone());
            bp.dev.handle_rx(now, &mut f);
            let (cf, cp) = (bf.dev.counters(), bp.dev.counters());
            assert_eq!(format!("{cf:?}"), format!("{cp:?}"), "bit {bit}: both paths count alike");
            assert_eq!(cf.rcvd_pkts, ef.rcvd_pkts, "bit {bit}: not accepted (fused)");
            assert_eq!(cp.rcvd_pkts, ep.rcvd_pkts, "bit {bit}: not accepted (plain)");
            let m = bf.dev.memory().slice(MEM_BASE, MEM);
            assert!(m[..lo] == snap[..lo] && m[hi..] == snap[hi..], "bit {bit}: fused wrote outside its range");
            assert!(bp.dev.memory().slice(MEM_BASE, MEM) == &snap[..], "bit {bit}: plain wrote");
            assert!(bf.poll().is_none() && bp.poll().is_none(), "bit {bit}: no completion");
        }
        assert!(covered > 8 * (mtu + 20) && uncovered < 8 * 24, "covered {covered}, uncovered {uncovered}");
        assert!(bf.dev.memory().slice(MEM_BASE, MEM)[lo..hi] != snap[lo..hi], "the fused path did write its range");
        for b in [&mut bf, &mut bp] {
            b.dev.handle_rx(now, &mut frames[1].clone());
            b.dev.handle_rx(now, &mut frames[2].clone());
        }
        let (wf, wp) = (bf.poll(), bp.poll());
        assert!(wf.is_some());
        assert_eq!(format!("{wf:?}"), format!("{wp:?}"));
        assert!(bf.dev.memory().slice(MEM_BASE, MEM) == bp.dev.memory().slice(MEM_BASE, MEM));
        assert_eq!(bf.dev.memory().slice(dst, len), &pattern(1, len)[..]);
    }
}

/// The default receive path places nothing from a corrupted frame. An application that
/// polls memory for the end of an RDMA WRITE (perftest's write_lat spins on the last byte)
/// would otherwise see a corrupted WRITE Last's bytes before its retransmission rewrites
/// them: the one-pass receive did exactly that in an end-to-end test with 1 % corruption
/// (`tests/rdma_e2e.rs`, write_lat --verify), so it is opt-in.
#[test]
fn by_default_a_corrupted_write_last_leaves_memory_untouched() {
    assert!(!DeviceConfig::default().fused_rx);
    let mtu = 1024usize;
    let cfg = DeviceConfig::default();
    let mut a = Node::with_config(1, MEM, DeviceConfig { seed: 5, ..cfg.clone() });
    let mut b = Node::with_config(2, MEM, DeviceConfig { seed: 6, ..cfg });
    let (qa, _qb) = rc_connect(&mut a, &mut b, RcOpts { mtu: PathMtu::from_bytes(mtu as u32).unwrap(), ..RcOpts::default() });
    let dst = MEM_BASE + 0x10000;
    b.dev.memory_mut().slice_mut(MEM_BASE, MEM).fill(0xee);
    let len = mtu + 476;
    a.dev.memory_mut().write(MEM_BASE, &pattern(3, len)).unwrap();
    a.dev.post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, len as u32, a.mr.lkey).with_remote(dst, b.mr.rkey)).unwrap();
    let now = Instant::from_nanos(0);
    let mut frames = Vec::new();
    let mut buf = vec![0u8; a.dev.max_frame_len()];
    while let Some(n) = a.dev.poll_transmit(now, &mut buf) {
        frames.push(buf[..n].to_vec());
    }
    assert_eq!(frames.len(), 2);
    assert_eq!(RoceRepr::parse(&frames[1]).unwrap().0.bth.opcode, Opcode::RcWriteLast);
    b.dev.handle_rx(now, &mut frames[0].clone());
    let snap = b.dev.memory().slice(MEM_BASE, MEM).to_vec();
    let icrc_errors = b.dev.counters().rcvd_icrc_err;
    // one flipped bit in the payload, just before the last byte
    let mut bad = frames[1].clone();
    let at = bad.len() - 4 - 2;
    bad[at] ^= 0x08;
    b.dev.handle_rx(now, &mut bad);
    assert_eq!(b.dev.counters().rcvd_icrc_err, icrc_errors + 1);
    assert!(b.dev.memory().slice(MEM_BASE, MEM) == &snap[..], "a corrupted WRITE Last reached memory");
    b.dev.handle_rx(now, &mut frames[1].clone());
    assert_eq!(b.dev.memory().slice(dst, len), &pattern(3, len)[..]);
}

/// Each received part is written with the message it belongs to (`Memory::write_part`), so
/// that an embedder can place large messages past the caches: a WRITE's RETH address and
/// length on every part, a READ's scatter list and length on every response, a SEND's receive
/// buffer and bytes so far; the first part marked.
#[test]
fn parts_carry_their_message() {
    let mtu = 1024usize;
    let mut p = Pair::new(LinkConfig::PERFECT, 7, MEM);
    let (qa, qb) = p.rc_pair(RcOpts { mtu: PathMtu::Mtu1024, ..RcOpts::default() });
    let (la, lb, rb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    let (src, dst, len) = (MEM_BASE + 0x1000, MEM_BASE + 0x80000, 3 * mtu + 5);
    p.a.dev.memory_mut().write(src, &pattern(1, len)).unwrap();
    p.a.dev.memory_mut().log_parts();
    p.b.dev.memory_mut().log_parts();
    let parts = [mtu, mtu, mtu, 5];
    let whole = |start: u64| -> Vec<(usize, Message)> {
        parts.iter().enumerate().map(|(i, &n)| (n, Message { start, len: len as u64, first: i == 0 })).collect()
    };

    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(src, len as u32, la).with_remote(dst + 8, rb)).unwrap();
    wait_wcs(&mut p, 1);
    assert_eq!(p.b.dev.memory_mut().take_parts(), whole(dst + 8), "WRITE: the RETH address and length on every part");

    p.b.dev.post_recv(qb, RecvWr::new(9).with_sge(dst, 4 * mtu as u32, lb)).unwrap();
    p.a.dev.post_send(qa, SendWr::new(2, SendOpcode::Send).with_sge(src, len as u32, la)).unwrap();
    wait_wcs(&mut p, 2);
    let so_far = [mtu, 2 * mtu, 3 * mtu, len];
    let want: Vec<(usize, Message)> =
        parts.iter().zip(so_far).enumerate().map(|(i, (&n, s))| (n, Message { start: dst, len: s as u64, first: i == 0 })).collect();
    assert_eq!(p.b.dev.memory_mut().take_parts(), want, "SEND: the receive buffer and the bytes so far");

    p.a.dev.post_send(qa, SendWr::new(3, SendOpcode::Read).with_sge(src + 16, len as u32, la).with_remote(dst, rb)).unwrap();
    wait_wcs(&mut p, 1);
    assert_eq!(p.a.dev.memory_mut().take_parts(), whole(src + 16), "READ: the scatter list and length on every response");
    assert!(p.a.dev.memory().slice(src + 16, len) == p.b.dev.memory().slice(dst, len), "READ data differs");
}
