//! Mixed RC traffic over a lossy, duplicating, reordering, bit-flipping link: every message
//! must arrive exactly once, intact, and complete in order.
//!
//! `cargo test -p droce-transport --test lossy` runs 10^5 messages; the 10^6-message soak is
//! `#[ignore]`d (it takes minutes in a debug build): run it with
//! `cargo test -p droce-transport --release --test lossy -- --ignored`.

mod rng;

use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr};
use droce_transport::Memory;
use rng::Rng;
use std::collections::VecDeque;

const SLOT: u64 = 16 * 1024;
const SLOTS: u64 = 128;
const WINDOW: usize = 48;
// Memory layout (both nodes use the same offsets).
const SRC: u64 = MEM_BASE; // A: source / read destination slots
const RECV: u64 = MEM_BASE + SLOT * SLOTS; // B: receive slots
const WRITE: u64 = MEM_BASE + 2 * SLOT * SLOTS; // B: write target slots
const RO: u64 = MEM_BASE + 3 * SLOT * SLOTS; // B: read-only pattern region (64 KiB)
const COUNTER: u64 = MEM_BASE + 3 * SLOT * SLOTS + 65536;
const MEM: usize = (4 * SLOT * SLOTS) as usize;

/// 256 KiB of pseudo-random bytes; message `seed` carries the window at a seed-dependent
/// offset, so every message has its own content and checking it costs one memcmp.
fn noise() -> &'static [u8] {
    static NOISE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    NOISE.get_or_init(|| {
        let mut r = Rng(0x1234_5678_9abc_def1);
        (0..(256 * 1024) / 8).flat_map(|_| r.next().to_le_bytes()).collect()
    })
}
fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let b = noise();
    let room = (b.len() - n) as u64;
    let off = (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % (room + 1);
    b[off as usize..off as usize + n].to_vec()
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Send { len: usize },
    Write { len: usize },
    Read { off: u64, len: usize },
    FetchAdd { expect: u64 },
}

struct Pending {
    wr_id: u64,
    kind: Kind,
}

fn run_mixed(n: u64, seed: u64, link: LinkConfig) -> Pair {
    run_mixed_on(Pair::new(link, seed, MEM), n, seed)
}

fn run_mixed_on(mut p: Pair, n: u64, seed: u64) -> Pair {
    // PSNs start just below the 24-bit wrap, so every run crosses it.
    let psn_a = droce_transport::Psn::new(0xff_ff00);
    let psn_b = droce_transport::Psn::new(0xff_fff0);
    let opts = RcOpts { timeout: 6, max_rd_atomic: 8, psn_a, psn_b, ..RcOpts::default() };
    let (qa, qb) = p.rc_pair(opts);
    let (la, lb, rkb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    let ro = pattern(0x5eed, 65536);
    p.b.dev.memory_mut().write(RO, &ro).unwrap();
    let mut rng = Rng(seed | 1);
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut recvs: VecDeque<(u64, usize)> = VecDeque::new(); // (send seq, len) expected at B
    let (mut posted, mut done, mut fadds, mut sends_done) = (0u64, 0u64, 0u64, 0u64);
    let mut steps = 0u64;
    let max_steps = n * 400 + 1_000_000;
    while done < n {
        steps += 1;
        assert!(steps < max_steps, "stuck: posted {posted} done {done} now {:?} a {:?} b {:?}", p.now, p.a.dev.counters(), p.b.dev.counters());
        // Receive completions on B: in order, intact.
        while let Some(wc) = p.b.poll() {
            let (seq, len) = recvs.pop_front().expect("unexpected receive");
            assert_eq!((wc.status, wc.opcode, wc.wr_id, wc.byte_len), (WcStatus::Success, WcOpcode::Recv, seq, len as u32));
            let slot = RECV + (seq % SLOTS) * SLOT;
            assert!(p.b.dev.memory().slice(slot, len) == &pattern(seq, len)[..], "send {seq} corrupted");
            sends_done += 1;
        }
        // Send completions on A: in posting order.
        while let Some(wc) = p.a.poll() {
            let pd = pending.pop_front().expect("unexpected completion");
            assert_eq!((wc.wr_id, wc.status), (pd.wr_id, WcStatus::Success), "{:?}", pd.kind);
            let slot = SRC + (pd.wr_id % SLOTS) * SLOT;
            match pd.kind {
                Kind::Send { .. } => assert_eq!(wc.opcode, WcOpcode::Send),
                Kind::Write { len } => {
                    assert_eq!(wc.opcode, WcOpcode::RdmaWrite);
                    let t = WRITE + (pd.wr_id % SLOTS) * SLOT;
                    assert!(p.b.dev.memory().slice(t, len) == &pattern(pd.wr_id, len)[..], "write {} corrupted", pd.wr_id);
                }
                Kind::Read { off, len } => {
                    assert_eq!(wc.opcode, WcOpcode::RdmaRead);
                    assert!(p.a.dev.memory().slice(slot, len) == &ro[off as usize..off as usize + len], "read {} corrupted", pd.wr_id);
                }
                Kind::FetchAdd { expect } => {
                    assert_eq!(wc.opcode, WcOpcode::FetchAdd);
                    assert_eq!(p.a.dev.memory().slice(slot, 8), &expect.to_ne_bytes(), "atomic executed more or less than once");
                }
            }
            done += 1;
        }
        // Keep WINDOW operations outstanding.
        while posted < n && pending.len() < WINDOW {
            let id = posted;
            let slot = SRC + (id % SLOTS) * SLOT;
            let r = rng.next();
            let len = rng::message_len(r, SLOT);
            let kind = match (r >> 40) % 10 {
                0..=3 => Kind::Send { len },
                4..=6 => Kind::Write { len },
                7 | 8 => Kind::Read { off: (r >> 20) % 1024, len: len.min(65536 - 1024) },
                _ => Kind::FetchAdd { expect: fadds },
            };
            let wr = match kind {
                Kind::Send { len } => {
                    p.a.dev.memory_mut().write(slot, &pattern(id, len)).unwrap();
                    let rslot = RECV + (id % SLOTS) * SLOT;
                    p.b.dev.post_recv(qb, RecvWr::new(id).with_sge(rslot, SLOT as u32, lb)).unwrap();
                    recvs.push_back((id, len));
                    SendWr::new(id, SendOpcode::Send).with_sge(slot, len as u32, la)
                }
                Kind::Write { len } => {
                    p.a.dev.memory_mut().write(slot, &pattern(id, len)).unwrap();
                    let t = WRITE + (id % SLOTS) * SLOT;
                    SendWr::new(id, SendOpcode::Write).with_sge(slot, len as u32, la).with_remote(t, rkb)
                }
                Kind::Read { off, len } => {
                    p.a.dev.memory_mut().slice_mut(slot, len).fill(0);
                    SendWr::new(id, SendOpcode::Read).with_sge(slot, len as u32, la).with_remote(RO + off, rkb)
                }
                Kind::FetchAdd { .. } => {
                    fadds += 1;
                    SendWr::new(id, SendOpcode::FetchAdd).with_sge(slot, 8, la).with_remote(COUNTER, rkb).with_atomic(1, 0)
                }
            };
            p.a.dev.post_send(qa, wr).unwrap();
            pending.push_back(Pending { wr_id: id, kind });
            posted += 1;
        }
        p.step();
    }
    p.run_idle(1_000_000);
    while let Some(wc) = p.b.poll() {
        let (seq, len) = recvs.pop_front().expect("unexpected receive");
        assert_eq!((wc.status, wc.wr_id, wc.byte_len), (WcStatus::Success, seq, len as u32));
        sends_done += 1;
    }
    assert!(recvs.is_empty(), "{} receives never completed", recvs.len());
    assert!(p.a.poll().is_none() && p.b.poll().is_none(), "extra completions");
    assert_eq!(p.b.dev.memory().slice(COUNTER, 8), &fadds.to_ne_bytes(), "fetch-add count");
    assert!(sends_done > 0 && fadds > 0);
    p
}

#[test]
fn mixed_1e5_lossy() {
    let p = run_mixed(100_000, 0xd70ce, LinkConfig::LOSSY);
    let s = p.stats;
    eprintln!("link {s:?}\nA {:?}\nB {:?}\nvirtual time {:?}", p.a.dev.counters(), p.b.dev.counters(), p.now);
    assert!(s.dropped > 0 && s.duplicated > 0 && s.reordered > 0 && s.flipped > 0);
    let icrc = p.a.dev.counters().rcvd_icrc_err + p.b.dev.counters().rcvd_icrc_err;
    assert!(icrc > 0, "bit flips must be caught by the ICRC");
    assert!(p.b.dev.counters().duplicate_request > 0);
    assert!(p.b.dev.counters().out_of_seq_request > 0);
}

#[test]
fn mixed_heavy_loss_small() {
    let link = LinkConfig { loss: 0.1, duplicate: 0.05, reorder: 0.1, bit_flip: 0.05, ..LinkConfig::LOSSY };
    run_mixed(3_000, 7, link);
}

#[test]
#[ignore = "soak: 10^6 messages take minutes; run with --release -- --ignored"]
fn mixed_1e6_soak() {
    let p = run_mixed(1_000_000, 0x50a4, LinkConfig::LOSSY);
    eprintln!("link {:?}", p.stats);
}

/// Both ends are requester and responder at once: SENDs and READs in both directions.
#[test]
fn bidirectional_lossy() {
    const N: u64 = 10_000;
    let mut p = Pair::new(LinkConfig::LOSSY, 0xb1d1, MEM);
    let (qa, qb) = p.rc_pair(RcOpts { timeout: 6, ..RcOpts::default() });
    let ro = pattern(0x77, 65536);
    for n in [&mut p.a, &mut p.b] {
        n.dev.memory_mut().write(RO, &ro).unwrap();
    }
    let mut rng = Rng(99);
    // Per direction: next id to post, completions seen, expected receives.
    let mut posted = [0u64; 2];
    let mut done = [0u64; 2];
    let mut pending: [VecDeque<(u64, bool, usize, u64)>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut recvs: [VecDeque<(u64, usize)>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut steps = 0u64;
    while done[0] < N || done[1] < N {
        steps += 1;
        assert!(steps < 50_000_000, "stuck {done:?}");
        for side in 0..2 {
            let (me, peer) = if side == 0 { (&mut p.a, &mut p.b) } else { (&mut p.b, &mut p.a) };
            let (qme, qpeer) = if side == 0 { (qa, qb) } else { (qb, qa) };
            // receives of the peer's sends arrive at `me`
            while let Some(wc) = me.poll() {
                if wc.opcode == WcOpcode::Recv {
                    let (seq, len) = recvs[1 - side].pop_front().expect("unexpected receive");
                    assert_eq!((wc.status, wc.wr_id, wc.byte_len), (WcStatus::Success, seq, len as u32));
                    let slot = RECV + (seq % SLOTS) * SLOT;
                    assert!(me.dev.memory().slice(slot, len) == &pattern(seq + side as u64 * 1_000_000_007, len)[..]);
                    continue;
                }
                let (id, is_read, len, off) = pending[side].pop_front().expect("unexpected completion");
                assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
                if is_read {
                    let slot = SRC + (id % SLOTS) * SLOT;
                    assert!(me.dev.memory().slice(slot, len) == &ro[off as usize..off as usize + len]);
                }
                done[side] += 1;
            }
            while posted[side] < N && pending[side].len() < WINDOW {
                let id = posted[side];
                let r = rng.next();
                let len = (r >> 8) as usize % 3000;
                let slot = SRC + (id % SLOTS) * SLOT;
                let (la, lpeer, rkpeer) = (me.mr.lkey, peer.mr.lkey, peer.mr.rkey);
                #[allow(clippy::manual_is_multiple_of)] // MSRV 1.75
                let read = r % 3 == 0;
                if read {
                    let off = (r >> 30) % 1024;
                    me.dev.memory_mut().slice_mut(slot, len).fill(0);
                    me.dev.post_send(qme, SendWr::new(id, SendOpcode::Read).with_sge(slot, len as u32, la).with_remote(RO + off, rkpeer)).unwrap();
                    pending[side].push_back((id, true, len, off));
                } else {
                    // Sender's own seed space so the two directions never share patterns.
                    let seed = id + (1 - side as u64) * 1_000_000_007;
                    me.dev.memory_mut().write(slot, &pattern(seed, len)).unwrap();
                    let rslot = RECV + (id % SLOTS) * SLOT;
                    peer.dev.post_recv(qpeer, RecvWr::new(id).with_sge(rslot, SLOT as u32, lpeer)).unwrap();
                    recvs[side].push_back((id, len));
                    me.dev.post_send(qme, SendWr::new(id, SendOpcode::Send).with_sge(slot, len as u32, la)).unwrap();
                    pending[side].push_back((id, false, len, 0));
                }
                posted[side] += 1;
            }
        }
        p.step();
    }
    assert!(p.stats.dropped > 0 && p.stats.flipped > 0);
}

/// Receives are posted slowly while the link loses, duplicates and reorders: RNR NAKs,
/// their loss, timeouts and go-back-N interleave, and every message still arrives once,
/// intact and in order (SEND and WRITE_IMM, both consuming receives).
#[test]
fn rnr_under_loss() {
    const N: u64 = 1_000;
    let mut p = Pair::new(LinkConfig::LOSSY, 0x7272, MEM);
    let (qa, qb) = p.rc_pair(RcOpts { timeout: 6, rnr_retry: 7, min_rnr_timer: 1, ..RcOpts::default() });
    let (la, lb, rkb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    let mut rng = Rng(5);
    let (mut posted, mut recvs_posted, mut done_a, mut done_b) = (0u64, 0u64, 0u64, 0u64);
    let mut lens = VecDeque::new();
    let mut round = 0u64;
    while done_a < N || done_b < N {
        round += 1;
        assert!(round < 20_000_000, "stuck a {done_a} b {done_b}");
        while posted < N && posted - done_a < WINDOW as u64 {
            let len = (rng.next() % 2000) as usize;
            let slot = SRC + (posted % SLOTS) * SLOT;
            p.a.dev.memory_mut().write(slot, &pattern(posted, len)).unwrap();
            let wr = if posted % 2 == 0 {
                SendWr::new(posted, SendOpcode::Send).with_sge(slot, len as u32, la)
            } else {
                let t = WRITE + (posted % SLOTS) * SLOT;
                SendWr::new(posted, SendOpcode::WriteImm).with_sge(slot, len as u32, la).with_remote(t, rkb).with_imm(posted as u32)
            };
            p.a.dev.post_send(qa, wr).unwrap();
            lens.push_back(len);
            posted += 1;
        }
        // One receive every 8 rounds: the responder is often out of receives.
        if round % 8 == 0 && recvs_posted < N && recvs_posted < done_b + 16 {
            let rslot = RECV + (recvs_posted % SLOTS) * SLOT;
            p.b.dev.post_recv(qb, RecvWr::new(recvs_posted).with_sge(rslot, SLOT as u32, lb)).unwrap();
            recvs_posted += 1;
        }
        p.step();
        while let Some(wc) = p.a.poll() {
            assert_eq!((wc.wr_id, wc.status), (done_a, WcStatus::Success));
            done_a += 1;
        }
        while let Some(wc) = p.b.poll() {
            assert_eq!((wc.wr_id, wc.status), (done_b, WcStatus::Success), "receives complete in order");
            let len = lens[done_b as usize];
            assert_eq!(wc.byte_len, len as u32);
            let at = if done_b % 2 == 0 {
                assert_eq!(wc.opcode, WcOpcode::Recv);
                RECV + (done_b % SLOTS) * SLOT
            } else {
                assert_eq!((wc.opcode, wc.imm_data), (WcOpcode::RecvRdmaWithImm, done_b as u32));
                WRITE + (done_b % SLOTS) * SLOT
            };
            assert!(p.b.dev.memory().slice(at, len) == &pattern(done_b, len)[..], "message {done_b} corrupted");
            done_b += 1;
        }
    }
    assert!(p.b.dev.counters().send_rnr_err > 50, "{:?}", p.b.dev.counters());
    assert!(p.stats.dropped > 0);
}

/// The loss-adaptive window: with a 1024-PSN maximum (the DPDK engine's default) the same
/// mixed traffic over the lossy link still arrives exactly once and intact.
#[test]
fn mixed_lossy_large_window() {
    let cfg = droce_transport::DeviceConfig { max_unacked_psns: 1024, ..Default::default() };
    let p = run_mixed_on(Pair::with_config(LinkConfig::LOSSY, 77, MEM, cfg), 20_000, 77);
    assert!(p.a.dev.counters().retransmitted_pkts > 0, "the link lost nothing: no window test");
}
