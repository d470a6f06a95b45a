//! Segment trains (`Device::tx_train`) against frame-by-frame transmission (`poll_transmit`,
//! which makes one frame per call): the same traffic on two seeded pairs, one taking each
//! device's frames of a round as one train, must put the same frames on the link in the same
//! order, byte for byte, and end with the same completions, counters and clock. The trains
//! must also really run: a run of one QP's frames (a message's segments, READ responses) is
//! made without the round robin and the QP checks, and `Pair::train_run_frames` counts them.
//!
//! Covered: WRITE/SEND streams held back by the window and resumed by ACKs, READ responses,
//! a QP with replies and requests at once, several QPs taking turns, go-back-N and selective
//! repeat over a lossy link, and paced QPs (congestion control: every frame the pacer's way).

use droce_transport::cc::CcConfig;
use droce_transport::qp::{PathMtu, QpHandle};
use droce_transport::sim::{LinkConfig, Node, Pair, RcOpts, MEM_BASE};
use droce_transport::verbs::{RecvWr, SendOpcode, SendWr, WorkCompletion};
use droce_transport::wire::{Opcode, RoceRepr};
use droce_transport::counters::Counters;
use droce_transport::{DeviceConfig, Instant, Memory};
use std::cell::RefCell;
use std::rc::Rc;

mod rng;
use rng::pattern;

const MEM: usize = 1 << 21;

/// What a run leaves: every frame on the link (direction, bytes), the completions of both
/// nodes in order, both devices' counters, the clock, and the frames trains made as runs.
struct Outcome {
    frames: Vec<(bool, Vec<u8>)>,
    wcs: Vec<(bool, WorkCompletion)>,
    counters: (Counters, Counters),
    now: Instant,
}

/// An RC QP on each node, connected, with selective repeat on both when `sr`.
fn connect(a: &mut Node, b: &mut Node, o: RcOpts, sr: bool) -> (QpHandle, QpHandle) {
    droce_transport::sim::rc_connect_sr(a, b, o, sr, sr)
}

/// The traffic of one case.
#[derive(Debug, Clone, Copy)]
struct Case {
    link: LinkConfig,
    eth_mtu: u32,
    mtu: PathMtu,
    /// QP pairs, all busy at once.
    qps: usize,
    /// a -> b WRITEs, SENDs (with immediate) and WRITEs with immediate.
    requests: bool,
    /// a READs from b (b sends the responses).
    reads: bool,
    /// b also WRITEs to a (a's QP then has replies and requests).
    both_ways: bool,
    sr: bool,
    pace: bool,
    /// Payloads of at least this many bytes left in memory (`None`: copied).
    split_min: Option<usize>,
}

const BASE: Case = Case {
    link: LinkConfig::PERFECT,
    eth_mtu: 1500,
    mtu: PathMtu::Mtu1024,
    qps: 1,
    requests: true,
    reads: false,
    both_ways: false,
    sr: false,
    pace: false,
    split_min: None,
};

/// Runs `c` on a fresh pair, frame by frame or with trains; returns what happened and how
/// many frames the trains made as runs.
fn run(c: Case, train: bool, seed: u64) -> (Outcome, u64) {
    let mut cfg = DeviceConfig { eth_mtu: c.eth_mtu, ..DeviceConfig::default() };
    if c.pace {
        // every QP paced to 20 Gb/s with a 16 KiB bucket: the pacer holds the streams
        cfg.cc = CcConfig { pace: true, line_rate_bps: 20_000_000_000, pacer_burst_bytes: 16 * 1024, ..CcConfig::default() };
    }
    let mut p = Pair::with_config(c.link, seed, MEM, cfg);
    p.train = train;
    p.split_min = c.split_min;
    let log = Rc::new(RefCell::new(Vec::new()));
    let l = log.clone();
    p.filter = Some(Box::new(move |to_b, f| {
        l.borrow_mut().push((to_b, f.to_vec()));
        false
    }));
    let mtu = c.mtu.bytes() as usize;
    let (la, lb, ra, rb) = (p.a.mr.lkey, p.b.mr.lkey, p.a.mr.rkey, p.b.mr.rkey);
    p.a.dev.memory_mut().write(MEM_BASE, &pattern(seed, 1 << 19)).unwrap();
    p.b.dev.memory_mut().write(MEM_BASE + (1 << 20), &pattern(seed + 1, 1 << 19)).unwrap();
    let mut expect = 0;
    for k in 0..c.qps {
        let (qa, qb) = connect(&mut p.a, &mut p.b, RcOpts { mtu: c.mtu, ..RcOpts::default() }, c.sr);
        let src = MEM_BASE + k as u64 * 0x1_0000;
        let dst = MEM_BASE + (1 << 20) + 0x8_0000 + k as u64 * 0x1_0000;
        for (i, &len) in [64 * 1024usize, 3 * mtu + 5, 40 * mtu + 1, 1, mtu, 30_000].iter().enumerate() {
            let id = (k * 100 + i) as u64;
            if c.requests {
                let op = [SendOpcode::Write, SendOpcode::SendImm, SendOpcode::WriteImm][i % 3];
                if op != SendOpcode::Write {
                    p.b.dev.post_recv(qb, RecvWr::new(id).with_sge(dst, 64 * 1024, lb)).unwrap();
                    expect += 1;
                }
                p.a.dev.post_send(qa, SendWr::new(id, op).with_sge(src + i as u64 * 7, len as u32, la).with_imm(0x5a00 + i as u32).with_remote(dst, rb)).unwrap();
                expect += 1;
            }
            if c.reads {
                let from = MEM_BASE + (1 << 20) + i as u64 * 0x1000;
                p.a.dev.post_send(qa, SendWr::new(id + 50, SendOpcode::Read).with_sge(src + 0x8000, len as u32, la).with_remote(from, rb)).unwrap();
                expect += 1;
            }
            if c.both_ways {
                p.b.dev.post_send(qb, SendWr::new(id + 70, SendOpcode::Write).with_sge(dst + 0x100, len as u32, lb).with_remote(src + 0x4000, ra)).unwrap();
                expect += 1;
            }
        }
    }
    let mut wcs = Vec::new();
    let done = p.run_until(5_000_000, |p| {
        while let Some(w) = p.a.poll() {
            wcs.push((false, w));
        }
        while let Some(w) = p.b.poll() {
            wcs.push((true, w));
        }
        wcs.len() >= expect
    });
    assert!(done, "{c:?} train {train}: {} of {expect} completions", wcs.len());
    p.run_idle(1_000_000);
    let frames = log.borrow().clone();
    let out = Outcome { frames, wcs, counters: (p.a.dev.counters().clone(), p.b.dev.counters().clone()), now: p.now };
    (out, p.train_run_frames)
}

/// The first difference of two frame logs, for a readable failure.
fn first_difference(a: &[(bool, Vec<u8>)], b: &[(bool, Vec<u8>)]) -> String {
    let describe = |f: &(bool, Vec<u8>)| {
        let r = RoceRepr::parse(&f.1).map(|(r, _)| (r.bth.opcode, r.bth.psn));
        format!("to_b {} len {} {:?}", f.0, f.1.len(), r)
    };
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("frame {i}: by frame {} / train {}", describe(&a[i]), describe(&b[i])),
        None => format!("{} frames by frame, {} with trains", a.len(), b.len()),
    }
}

/// Runs `c` both ways and compares; returns the train's run frames and the frame count.
fn same_both_ways(c: Case, seed: u64) -> (u64, usize) {
    let (by_frame, none) = run(c, false, seed);
    let (trains, runs) = run(c, true, seed);
    assert_eq!(none, 0);
    assert!(by_frame.frames == trains.frames, "{c:?} seed {seed}: {}", first_difference(&by_frame.frames, &trains.frames));
    assert_eq!(by_frame.wcs, trains.wcs, "{c:?} seed {seed}");
    assert_eq!(by_frame.counters, trains.counters, "{c:?} seed {seed}");
    assert_eq!(by_frame.now, trains.now, "{c:?} seed {seed}");
    (runs, trains.frames.len())
}

fn count(frames: &[(bool, Vec<u8>)], to_b: bool, ops: &[Opcode]) -> usize {
    frames.iter().filter(|(d, f)| *d == to_b && RoceRepr::parse(f).is_ok_and(|(r, _)| ops.contains(&r.bth.opcode))).count()
}

#[test]
fn a_train_of_requests_is_the_frames_one_by_one() {
    for (eth_mtu, mtu) in [(1500, PathMtu::Mtu1024), (1500, PathMtu::Mtu256), (9000, PathMtu::Mtu4096)] {
        for split_min in [None, Some(1)] {
            let c = Case { eth_mtu, mtu, split_min, ..BASE };
            let (runs, frames) = same_both_ways(c, 3);
            // most frames are a message's Middle/Last behind its First: made as runs
            assert!(runs * 2 > frames as u64, "{c:?}: {runs} of {frames} frames as runs");
        }
    }
}

#[test]
fn a_train_of_read_responses_is_the_frames_one_by_one() {
    let c = Case { requests: false, reads: true, ..BASE };
    let (by_frame, _) = run(c, false, 5);
    let responses = count(&by_frame.frames, false, &[Opcode::RcReadResponseMiddle, Opcode::RcReadResponseLast]);
    assert!(responses > 100, "{responses} READ responses");
    for split_min in [None, Some(1)] {
        let (runs, _) = same_both_ways(Case { split_min, ..c }, 5);
        // b's READ responses after each First: only the responder sends runs here
        assert!(runs * 10 >= responses as u64 * 9, "{runs} run frames for {responses} Middle/Last responses");
    }
}

#[test]
fn replies_and_requests_of_one_qp_and_several_qps_keep_their_order() {
    let (runs, _) = same_both_ways(Case { reads: true, both_ways: true, ..BASE }, 11);
    assert!(runs > 0);
    // QPs taking turns: a run needs the others idle (it keeps the round robin's order)
    for c in [Case { qps: 3, ..BASE }, Case { qps: 2, reads: true, both_ways: true, split_min: Some(1), ..BASE }] {
        same_both_ways(c, 11);
    }
}

#[test]
fn trains_interrupted_by_loss_naks_and_timeouts_are_the_frames_one_by_one() {
    let lossy = LinkConfig { loss: 0.02, ..LinkConfig::LOSSY };
    for seed in 1..=4 {
        for sr in [false, true] {
            let c = Case { link: lossy, reads: true, sr, ..BASE };
            let (by_frame, _) = run(c, false, seed);
            assert!(by_frame.counters.0.retransmitted_pkts > 0, "seed {seed}: the link lost nothing to resend");
            let (runs, _) = same_both_ways(c, seed);
            assert!(runs > 0);
        }
    }
}

#[test]
fn paced_qps_go_frame_by_frame_the_pacers_way() {
    for c in [Case { pace: true, ..BASE }, Case { pace: true, requests: false, reads: true, split_min: Some(1), ..BASE }] {
        let (by_frame, _) = run(c, false, 9);
        assert!(by_frame.counters.0.cc_pacing_stalls + by_frame.counters.1.cc_pacing_stalls > 0, "{c:?}: the pacer never held");
        let (runs, _) = same_both_ways(c, 9);
        assert_eq!(runs, 0, "{c:?}: a paced QP's frames are each the pacer's");
    }
}
