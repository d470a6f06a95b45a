//! ECN, the notification point (CNPs) and the DCQCN reaction point, end to end on two
//! simulated nodes: frames are marked CE between `poll_transmit` and `handle_rx`, the way a
//! congested switch would, by a small network loop of this file (fixed one-way delay).

mod rng;

use droce_transport::cc::CcConfig;
use droce_transport::qp::QpHandle;
use droce_transport::sim::{LinkConfig, Pair, RcOpts, MEM_BASE};
use droce_transport::status::WcStatus;
use droce_transport::verbs::{SendOpcode, SendWr, RecvWr};
use droce_transport::wire::{icrc, Opcode, RoceRepr};
use droce_transport::device::{TxFrame, TxPass};
use droce_transport::{DeviceConfig, Duration, Instant, Memory, QKey};
use rng::Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const DELAY: Duration = Duration(2_000);

/// Frames in flight: (arrival, sequence, to_b, frame), earliest first.
type Wire = BinaryHeap<Reverse<(Instant, u64, bool, Vec<u8>)>>;

fn pair(cc: CcConfig) -> Pair {
    Pair::with_config(LinkConfig::PERFECT, 7, 4 << 20, DeviceConfig { cc, max_unacked_psns: 1024, ..DeviceConfig::default() })
}

/// Sets ECN CE in an IPv4 RoCE frame and fixes the header checksum (the ICRC masks the
/// TOS, so it stays valid), as a switch does.
fn set_ce(f: &mut [u8]) {
    assert_eq!(&f[12..14], &[0x08, 0x00], "IPv4");
    f[15] |= 0b11;
    f[24..26].fill(0);
    let c = !ipv4_sum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

fn ipv4_sum(h: &[u8]) -> u16 {
    let mut s: u32 = h.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn opcode(f: &[u8]) -> Opcode {
    RoceRepr::parse(f).expect("a valid RoCE frame").0.bth.opcode
}

/// What the network loop saw.
#[derive(Debug, Default)]
struct Seen {
    /// (time, to_b, frame) of every frame put on the link.
    frames: Vec<(Instant, bool, Vec<u8>)>,
}

impl Seen {
    fn cnps(&self, to_b: bool) -> usize {
        self.frames.iter().filter(|(_, d, f)| *d == to_b && opcode(f) == Opcode::Cnp).count()
    }
}

/// Faults of the test link, as probabilities per frame (seeded, deterministic).
#[derive(Clone, Copy)]
struct Faults {
    loss: f64,
    duplicate: f64,
    reorder: f64,
    flip: f64,
    seed: u64,
}

impl Faults {
    const NONE: Faults = Faults { loss: 0.0, duplicate: 0.0, reorder: 0.0, flip: 0.0, seed: 1 };
}

/// Runs the two nodes until `done` or idle (at most `max_rounds` rounds): every frame is
/// delivered `DELAY` after it was sent, with CE set when `mark(now, to_b, frame)` says so.
fn run(p: &mut Pair, seen: &mut Seen, max_rounds: u64, mark: impl FnMut(Instant, bool, &[u8]) -> bool, done: impl FnMut(&mut Pair) -> bool) -> bool {
    run_with(p, seen, Faults::NONE, max_rounds, mark, done)
}

/// [`run`] over a link that also drops, duplicates, delays (reorders) and corrupts frames.
fn run_with(p: &mut Pair, seen: &mut Seen, faults: Faults, max_rounds: u64, mut mark: impl FnMut(Instant, bool, &[u8]) -> bool, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
    let mut rng = Rng(faults.seed | 1);
    let mut wire: Wire = BinaryHeap::new();
    let mut seq = 0u64;
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    for _ in 0..max_rounds {
        if done(p) {
            return true;
        }
        let mut busy = false;
        for to_b in [true, false] {
            loop {
                let dev = if to_b { &mut p.a.dev } else { &mut p.b.dev };
                // with `p.split_min`, zero-copy transmit: headers in `buf`, the payload read
                // from registered memory behind them, as the DPDK engine chains it
                let n = match p.split_min {
                    None => dev.poll_transmit(p.now, &mut buf),
                    Some(min) => match dev.poll_transmit_split(p.now, &mut buf, TxPass::All, min) {
                        None => None,
                        Some(TxFrame { len, payload: None }) => Some(len),
                        Some(TxFrame { len, payload: Some(pl) }) => {
                            p.split_frames += 1;
                            let end = len + pl.len;
                            dev.memory().read(pl.addr, &mut buf[len..end]).unwrap();
                            buf[end..end + pl.trailer().len()].copy_from_slice(pl.trailer());
                            Some(end + pl.trailer().len())
                        }
                    },
                };
                let Some(n) = n else { break };
                let mut f = buf[..n].to_vec();
                seen.frames.push((p.now, to_b, f.clone()));
                if mark(p.now, to_b, &f) {
                    set_ce(&mut f);
                }
                busy = true;
                if rng.chance(faults.loss) {
                    continue;
                }
                let copies = if rng.chance(faults.duplicate) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut f = f.clone();
                    if rng.chance(faults.flip) {
                        let bit = rng.next() % (f.len() as u64 * 8);
                        f[(bit / 8) as usize] ^= 1 << (bit % 8);
                    }
                    let extra = if rng.chance(faults.reorder) { Duration(rng.next() % 20_000) } else { Duration(0) };
                    seq += 1;
                    wire.push(Reverse((p.now + DELAY + extra, seq, to_b, f)));
                }
            }
        }
        while wire.peek().is_some_and(|Reverse(w)| w.0 <= p.now) {
            let Reverse((_, _, to_b, mut f)) = wire.pop().unwrap();
            let dev = if to_b { &mut p.b.dev } else { &mut p.a.dev };
            dev.handle_rx(p.now, &mut f);
            busy = true;
        }
        for dev in [&mut p.a.dev, &mut p.b.dev] {
            if dev.poll_timeout().is_some_and(|t| t <= p.now) {
                dev.handle_timeout(p.now);
                busy = true;
            }
        }
        if busy {
            continue;
        }
        let next = [wire.peek().map(|Reverse(w)| w.0), p.a.dev.poll_timeout(), p.b.dev.poll_timeout()].into_iter().flatten().min();
        match next {
            Some(t) => p.now = p.now.max(t),
            None => return done(p),
        }
    }
    done(p)
}

/// A WRITE of `len` bytes of a pattern from a to b at `off`; returns the pattern.
fn post_write(p: &mut Pair, qa: QpHandle, id: u64, off: u64, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i as u64 * 7 + id * 13) as u8).collect();
    p.a.dev.memory_mut().write(MEM_BASE + off, &data).unwrap();
    let (lk, rk) = (p.a.mr.lkey, p.b.mr.rkey);
    p.a.dev
        .post_send(qa, SendWr::new(id, SendOpcode::Write).with_sge(MEM_BASE + off, len as u32, lk).with_remote(MEM_BASE + off, rk))
        .unwrap();
    data
}

/// What a's side of a 1 MiB WRITE put on the link (see [`timed_mib_write`]).
struct TimedWrite {
    /// Frames and bytes a sent.
    frames: usize,
    bytes: u64,
    /// From the post to a's last frame.
    took_ns: u64,
    /// The last frame's length: the pacer lets it leave without waiting for its bytes.
    last_len: u64,
}

/// Post a 1 MiB WRITE from a to b, run until it completes, check b's memory, and time it.
fn timed_mib_write(p: &mut Pair, qa: QpHandle) -> TimedWrite {
    let start = p.now;
    let d = post_write(p, qa, 1, 0, 1 << 20);
    let mut seen = Seen::default();
    assert!(run(p, &mut seen, 1_000_000, |_, _, _| false, |p| p.a.poll().is_some()));
    assert_eq!(p.b.dev.memory().slice(MEM_BASE, 1 << 20), &d[..]);
    let a: Vec<&(Instant, bool, Vec<u8>)> = seen.frames.iter().filter(|x| x.1).collect();
    let last = a.last().expect("a sent frames");
    TimedWrite {
        frames: a.len(),
        bytes: a.iter().map(|x| x.2.len() as u64).sum(),
        took_ns: last.0.saturating_duration_since(start).as_nanos(),
        last_len: last.2.len() as u64,
    }
}

/// The CNP our notification point sends, byte for byte. Layout: RoCEv2 annex A17.9.3 (BTH
/// opcode 0x81, 16 reserved bytes, ICRC), checked against Scapy's `scapy/contrib/roce.py`
/// (`cnp(dqpn)`: `BTH(opcode=0x81, becn=1, dqpn=dqpn) / CNPPadding()`, two reserved 64-bit
/// zero words; P_Key 0xFFFF, PSN 0, AckReq 0, FECN 0 by default) and droce's opcode table
/// (`wire/opcode.rs`: CNP = BTH + 16-byte reserved header, 28 bytes). Wireshark's
/// `packet-infiniband.c` (the copy read) dissects the 12-byte BTH field by field (BTH byte
/// 4, FECN/BECN, as one reserved byte) and shows what follows an opcode it has no header
/// sequence for, 0x81 included, as vendor data before the 4-byte ICRC: it has no
/// CNP-specific fields to compare, and nothing in it contradicts this layout. The ICRC below was
/// computed independently of droce (zlib CRC-32 over 8 x 0xFF, the IP packet with TOS,
/// TTL, IPv4 checksum, UDP checksum and BTH byte 4 set to 0xFF, stored LSB first).
#[test]
fn cnp_layout_golden() {
    let mut p = pair(CcConfig::default());
    let (qa, qb) = p.rc_pair(RcOpts::default());
    post_write(&mut p, qa, 1, 0, 8);
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    let n = p.a.dev.poll_transmit(Instant(0), &mut buf).unwrap();
    let mut f = buf[..n].to_vec();
    assert_eq!(opcode(&f), Opcode::RcWriteOnly);
    assert_eq!(f[15] & 3, 0b10, "data leaves ECT(0)");
    set_ce(&mut f);
    p.b.dev.handle_rx(Instant(1_000), &mut f);
    assert_eq!(p.b.dev.counters().ecn_ce_rcvd, 1);
    let n = p.b.dev.poll_transmit(Instant(1_000), &mut buf).unwrap();
    let cnp = buf[..n].to_vec();
    let sport = p.b.dev.query_qp(qb).unwrap().udp_sport;
    assert_eq!(sport, 0xc121, "the RC QP's UDP source port (rc_udp_sport of QPNs 0x11/0x11)");
    let a_qpn = p.a.dev.query_qp(qa).unwrap().qp_num.value();
    assert_eq!(a_qpn, 0x11);
    #[rustfmt::skip]
    let want: [u8; 74] = [
        // Ethernet: to the MAC the CE-marked frame came from (node a), from node b; IPv4.
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  0x02, 0x00, 0x00, 0x00, 0x00, 0x02,  0x08, 0x00,
        // IPv4: version/IHL; TOS 0xC0 = DSCP 48 (cnp_dscp) << 2 | Not-ECT; total length 60
        // (20 IP + 8 UDP + 12 BTH + 16 reserved + 4 ICRC); identification 0 (b's first
        // frame); DF; TTL 64; UDP; header checksum; 10.0.0.2 -> 10.0.0.1.
        0x45, 0xc0, 0x00, 0x3c,  0x00, 0x00, 0x40, 0x00,  0x40, 0x11, 0x25, 0xef,
        10, 0, 0, 2,  10, 0, 0, 1,
        // UDP: source port of b's QP, destination 4791, length 40, checksum 0 (as rxe).
        0xc1, 0x21, 0x12, 0xb7,  0x00, 0x28, 0x00, 0x00,
        // BTH: opcode 0x81 (CNP); SE 0, M 0, pad 0, TVer 0; P_Key 0xFFFF (b's QP);
        // FECN 0, BECN 1 (0x40); DestQP 0x000011 = a's QP, the marked frame's source;
        // AckReq 0; PSN 0.
        0x81, 0x00, 0xff, 0xff,  0x40, 0x00, 0x00, 0x11,  0x00, 0x00, 0x00, 0x00,
        // 16 reserved bytes.
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        // ICRC.
        0x90, 0x2e, 0xf5, 0x5a,
    ];
    assert_eq!(cnp, want, "CNP bytes: {cnp:02x?}");
    assert_eq!(ipv4_sum(&cnp[14..34]), 0xffff, "IPv4 checksum verifies");
    assert!(icrc::verify(&cnp[14..]), "ICRC verifies");
    // The CNP leaves ahead of the ACK of the marked WRITE.
    let n = p.b.dev.poll_transmit(Instant(1_000), &mut buf).unwrap();
    assert_eq!(opcode(&buf[..n]), Opcode::RcAcknowledge);
    assert_eq!(buf[15] & 3, 0b10, "ACKs leave ECT(0) too");
    assert_eq!(p.b.dev.counters().cnp_sent, 1);
    // a takes the CNP: one cut.
    let mut c = cnp.to_vec();
    p.a.dev.handle_rx(Instant(3_000), &mut c);
    let cs = p.a.dev.counters();
    assert_eq!((cs.cnp_rcvd, cs.cc_rate_cuts, cs.rcvd_bad_opcode), (1, 1, 0));
    assert!(p.a.dev.qp_rate_bps(qa).unwrap() < CcConfig::default().line_rate_bps);
}

#[test]
fn np_sends_one_cnp_per_interval() {
    let cc = CcConfig { cnp_interval: Duration::from_micros(50), ..CcConfig::default() };
    let mut p = pair(cc);
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    post_write(&mut p, qa, 1, 0, 64 * 1024);
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    let mut frames = Vec::new();
    while let Some(n) = p.a.dev.poll_transmit(Instant(0), &mut buf) {
        frames.push(buf[..n].to_vec());
    }
    assert_eq!(frames.len(), 64);
    let mut cnps = Vec::new();
    // 64 CE-marked frames, one per microsecond: 0..=49 us one CNP, 50..=63 us another.
    for (i, f) in frames.iter_mut().enumerate() {
        set_ce(f);
        let now = Instant(i as u64 * 1_000);
        p.b.dev.handle_rx(now, f);
        while let Some(n) = p.b.dev.poll_transmit(now, &mut buf) {
            if opcode(&buf[..n]) == Opcode::Cnp {
                cnps.push(now);
            }
        }
    }
    assert_eq!(cnps, vec![Instant(0), Instant(50_000)]);
    let c = p.b.dev.counters();
    assert_eq!((c.ecn_ce_rcvd, c.cnp_sent, c.cnp_suppressed), (64, 2, 62));
}

/// CE marks on a's data for the first `until`: CNPs flow back, a's rate drops, pacing
/// spreads its frames, and once the marks stop the rate recovers to the line rate and
/// the QP pays nothing again. The data arrives intact.
#[test]
fn marks_cut_the_rate_and_it_recovers() {
    // ConnectX's timers: its byte counter recovers the rate within this test's budget (the
    // default's 10 MB byte counter leaves recovery to the 55 us timer, tens of ms)
    let cc = CcConfig { line_rate_bps: 10_000_000_000, ..CcConfig::connectx() };
    let line = cc.line_rate_bps;
    let mut p = pair(cc);
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let until = Instant(2_000_000);
    let mut seen = Seen::default();
    let mut data = Vec::new();
    let mut lowest = line;
    // 32 WRITEs of 64 KiB, posted as the previous ones complete.
    let mut posted = 0u64;
    let mut completed = 0u64;
    let ok = run(
        &mut p,
        &mut seen,
        2_000_000,
        |now, to_b, f| to_b && now < until && opcode(f) != Opcode::Cnp,
        |p| {
            while let Some(wc) = p.a.poll() {
                assert_eq!(wc.status, WcStatus::Success);
                completed += 1;
            }
            while posted < 32 && posted < completed + 4 {
                data.push(post_write(p, qa, posted, posted * 65536, 65536));
                posted += 1;
            }
            lowest = lowest.min(p.a.dev.qp_rate_bps(qa).unwrap());
            completed == 32 && p.now > until && p.a.dev.qp_dcqcn(qa).is_none()
        },
    );
    let ca = p.a.dev.counters().clone();
    let cb = p.b.dev.counters().clone();
    assert!(ok, "not done at {:?}: completed {completed}, rate {:?}, a {ca:?}", p.now, p.a.dev.qp_rate_bps(qa));
    eprintln!(
        "marks for {until:?}: {} CE, {} CNPs, {} cuts, lowest rate {lowest} b/s, {} pacing stalls, back at {line} b/s at {:?}",
        cb.ecn_ce_rcvd, cb.cnp_sent, ca.cc_rate_cuts, ca.cc_pacing_stalls, p.now
    );
    assert!(cb.ecn_ce_rcvd > 100, "{cb:?}");
    assert!(cb.cnp_sent >= 10 && seen.cnps(false) as u64 == cb.cnp_sent, "{cb:?}");
    assert_eq!(seen.cnps(true), 0, "a saw no marks");
    assert_eq!(ca.cnp_rcvd, cb.cnp_sent);
    assert!(ca.cc_rate_cuts >= 1 && ca.cc_rate_cuts <= ca.cnp_rcvd, "{ca:?}");
    assert!(lowest < line / 2, "the rate went down to {lowest}");
    assert!(ca.cc_pacing_stalls > 0, "pacing held frames back");
    assert_eq!(ca.cc_rate_recovered, 1, "{ca:?}");
    assert_eq!(p.a.dev.qp_rate_bps(qa), Some(line));
    for (i, d) in data.iter().enumerate() {
        assert_eq!(p.b.dev.memory().slice(MEM_BASE + i as u64 * 65536, 65536), &d[..], "WRITE {i}");
    }
    // Every frame but CNPs left ECT(0); CNPs left Not-ECT.
    for (_, _, f) in &seen.frames {
        let want = if opcode(f) == Opcode::Cnp { 0b00 } else { 0b10 };
        assert_eq!(f[15] & 3, want);
    }
    // While the rate was cut, a's data left no faster than the rate allows: the gaps
    // between a's frames after the first cut are far above the 10 G serialisation time
    // (1 KiB frame at 10 Gb/s: ~0.85 us).
    let first_cut = seen.frames.iter().find(|(_, to_b, f)| !*to_b && opcode(f) == Opcode::Cnp).map(|x| x.0).unwrap() + DELAY;
    let a_data: Vec<Instant> = seen.frames.iter().filter(|(t, to_b, _)| *to_b && *t > first_cut && *t < until).map(|x| x.0).collect();
    let span = a_data.last().unwrap().saturating_duration_since(a_data[0]).as_nanos();
    let bits = a_data.len() as u64 * 1100 * 8;
    assert!(bits * 1_000_000_000 / span.max(1) < line, "{} frames in {span} ns", a_data.len());
}

/// The pacer holds a QP to its rate: with the rate fixed at 1 Gb/s (no increase events in
/// the test's time), 1 MiB takes bytes * 8 / rate on the wire, within a bucket.
#[test]
fn pacing_holds_the_qp_to_its_rate() {
    let cc = CcConfig {
        rate_to_set_on_first_cnp: 1000,
        rpg_time_reset: Duration::from_millis(1_000),
        rpg_byte_reset: u64::MAX,
        ..CcConfig::default()
    };
    let burst = cc.pacer_burst_bytes as u64;
    let mut p = pair(cc);
    let (qa, qb) = p.rc_pair(RcOpts::default());
    // One CE mark on a frame from a: b's CNP sets a to 1 Gb/s.
    post_write(&mut p, qa, 0, 0, 8);
    let mut seen = Seen::default();
    let mut first = true;
    run(&mut p, &mut seen, 10_000, |_, to_b, _| to_b && std::mem::take(&mut first), |p| p.a.poll().is_some());
    assert_eq!(p.a.dev.qp_rate_bps(qa), Some(1_000_000_000));
    assert_eq!(p.b.dev.counters().cnp_sent, 1);
    let _ = qb;
    let w = timed_mib_write(&mut p, qa);
    // Time for all but one bucket (the burst allowance) and the last frame.
    let expect = (w.bytes - burst - w.last_len) * 8;
    let (bytes, took) = (w.bytes, w.took_ns);
    assert!(took >= expect * 99 / 100 && took <= expect * 102 / 100 + 20_000, "{} frames, {bytes} bytes in {took} ns, expected ~{expect}", w.frames);
    assert!(p.a.dev.counters().cc_pacing_stalls > 100);
}

/// UD: a CE-marked datagram is answered with a CNP to its DETH source QP, at the address it
/// came from; the sender's UD QP is cut.
#[test]
fn ud_cnp_goes_to_the_deth_source_qp() {
    let mut p = pair(CcConfig::default());
    let qkey = QKey(0x1111_1111);
    let (qa, qb) = p.ud_pair(qkey);
    let dest = p.ud_dest(true, qb, qkey);
    let (lka, lkb) = (p.a.mr.lkey, p.b.mr.lkey);
    p.b.dev.post_recv(qb, RecvWr::new(9).with_sge(MEM_BASE, 4096, lkb)).unwrap();
    p.a.dev.memory_mut().write(MEM_BASE, b"datagram").unwrap();
    p.a.dev.post_send(qa, SendWr::new(1, SendOpcode::Send).with_sge(MEM_BASE, 8, lka).with_ud(dest)).unwrap();
    let mut seen = Seen::default();
    let mut first = true;
    run(&mut p, &mut seen, 10_000, |_, to_b, _| to_b && std::mem::take(&mut first), |p| p.a.dev.counters().cnp_rcvd > 0);
    let cnp = seen.frames.iter().find(|(_, to_b, f)| !*to_b && opcode(f) == Opcode::Cnp).expect("a CNP");
    let (r, _) = RoceRepr::parse(&cnp.2).unwrap();
    assert_eq!(r.bth.dest_qp, p.a.dev.query_qp(qa).unwrap().qp_num);
    assert_eq!((r.ip.src_gid(), r.ip.dst_gid(), r.eth.dst_addr.0), (p.b.gid, p.a.gid, p.a.mac));
    assert!(r.bth.becn && !r.bth.fecn);
    assert_eq!(p.a.dev.counters().cc_rate_cuts, 1);
    assert!(p.a.dev.qp_rate_bps(qa).unwrap() < CcConfig::default().line_rate_bps);
    let wc = p.b.poll().unwrap();
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 48));
}

/// `CcConfig::off()`: frames leave Not-ECT, CE marks are counted but answered by nothing,
/// a CNP (from a peer with CC on) is counted and changes nothing.
#[test]
fn off_sends_nothing_new() {
    let mut p = pair(CcConfig::off());
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let d = post_write(&mut p, qa, 1, 0, 64 * 1024);
    let mut seen = Seen::default();
    assert!(run(&mut p, &mut seen, 100_000, |_, to_b, _| to_b, |p| p.a.poll().is_some()));
    assert_eq!(p.b.dev.memory().slice(MEM_BASE, 64 * 1024), &d[..]);
    assert!(seen.frames.iter().all(|(_, _, f)| f[15] & 3 == 0 && opcode(f) != Opcode::Cnp));
    let (ca, cb) = (p.a.dev.counters(), p.b.dev.counters());
    assert_eq!((cb.ecn_ce_rcvd, cb.cnp_sent, cb.cnp_suppressed), (64, 0, 0));
    assert_eq!((ca.cnp_rcvd, ca.cc_rate_cuts, ca.cc_pacing_stalls), (0, 0, 0));
    // A CNP from a CC-enabled peer is counted and ignored.
    let mut q = pair(CcConfig::default());
    let (qa2, _) = q.rc_pair(RcOpts::default());
    post_write(&mut q, qa2, 1, 0, 8);
    let mut buf = vec![0u8; q.a.dev.max_frame_len()];
    let n = q.a.dev.poll_transmit(Instant(0), &mut buf).unwrap();
    let mut f = buf[..n].to_vec();
    set_ce(&mut f);
    q.b.dev.handle_rx(Instant(0), &mut f);
    let n = q.b.dev.poll_transmit(Instant(0), &mut buf).unwrap();
    let mut cnp = buf[..n].to_vec();
    p.a.dev.handle_rx(p.now, &mut cnp);
    assert_eq!(p.a.dev.counters().cnp_rcvd, 1);
    assert_eq!(p.a.dev.qp_rate_bps(qa), Some(CcConfig::off().line_rate_bps));
    assert!(p.a.dev.qp_dcqcn(qa).is_none());
}

/// A QP that never saw a CNP has no DCQCN state and no congestion-control deadline: a
/// finished transfer leaves the device without timers.
#[test]
fn unmarked_traffic_pays_nothing() {
    let mut p = pair(CcConfig::default());
    let (qa, qb) = p.rc_pair(RcOpts::default());
    post_write(&mut p, qa, 1, 0, 256 * 1024);
    let mut seen = Seen::default();
    assert!(run(&mut p, &mut seen, 100_000, |_, _, _| false, |p| p.a.poll().is_some()));
    assert!(p.a.dev.qp_dcqcn(qa).is_none() && p.b.dev.qp_dcqcn(qb).is_none());
    let c = p.a.dev.counters();
    assert_eq!((c.cc_pacing_stalls, c.cnp_rcvd, c.ecn_ce_rcvd), (0, 0, 0));
    // Frames of one message leave back to back, in one round.
    let a: Vec<Instant> = seen.frames.iter().filter(|x| x.1).map(|x| x.0).collect();
    assert_eq!(a.len(), 256);
    assert!(a.iter().all(|t| *t == a[0]));
    // Only the ACK coalescing / retransmit timers of the transport remain, none of ours.
    run(&mut p, &mut seen, 1_000, |_, _, _| false, |_| false);
    assert_eq!(p.a.dev.poll_timeout(), None);
}

/// A CNP for an RC QP from an address that is not its peer is not taken.
#[test]
fn rc_takes_cnps_only_from_its_peer() {
    let mut p = pair(CcConfig::default());
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    post_write(&mut p, qa, 1, 0, 8);
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    let n = p.a.dev.poll_transmit(Instant(0), &mut buf).unwrap();
    let mut f = buf[..n].to_vec();
    set_ce(&mut f);
    p.b.dev.handle_rx(Instant(0), &mut f);
    let n = p.b.dev.poll_transmit(Instant(0), &mut buf).unwrap();
    let mut cnp = buf[..n].to_vec();
    // Source address 10.0.0.9 instead of b's 10.0.0.2 (IPv4 checksum fixed; the ICRC
    // covers the addresses, so recompute it too).
    cnp[29] = 9;
    cnp[24..26].fill(0);
    let c = !ipv4_sum(&cnp[14..34]);
    cnp[24..26].copy_from_slice(&c.to_be_bytes());
    let l = cnp.len();
    let crc = icrc::compute(&cnp[14..l - 4]).unwrap();
    cnp[l - 4..].copy_from_slice(&crc.to_le_bytes());
    p.a.dev.handle_rx(Instant(0), &mut cnp);
    let c = p.a.dev.counters();
    assert_eq!((c.cnp_rcvd, c.cc_rate_cuts, c.rcvd_not_for_us), (0, 0, 1));
}

/// A READ is congested on the responder's side: CE marks on b's READ responses make a's
/// NP send CNPs to b's QP, whose READ responses are then paced; a's requests are not.
#[test]
fn marked_read_responses_slow_the_responder() {
    let mut p = pair(CcConfig::default());
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (len, reads) = (64 * 1024usize, 16u64);
    let data: Vec<u8> = (0..len * reads as usize).map(|i| (i * 31 + 5) as u8).collect();
    p.b.dev.memory_mut().write(MEM_BASE + 0x10_0000, &data).unwrap();
    let (lk, rk) = (p.a.mr.lkey, p.b.mr.rkey);
    // One READ at a time, the next posted when the previous completes.
    let (mut posted, mut done) = (0u64, 0u64);
    let mut seen = Seen::default();
    let is_read_response = |f: &[u8]| opcode(f).info().is_response() && opcode(f) != Opcode::RcAcknowledge;
    let ok = run(&mut p, &mut seen, 1_000_000, |_, to_b, f| !to_b && is_read_response(f), |p| {
        while let Some(wc) = p.a.poll() {
            assert_eq!(wc.status, WcStatus::Success);
            done += 1;
        }
        if posted == done && posted < reads {
            let off = posted * len as u64;
            let wr = SendWr::new(posted, SendOpcode::Read).with_sge(MEM_BASE + off, len as u32, lk).with_remote(MEM_BASE + 0x10_0000 + off, rk);
            p.a.dev.post_send(qa, wr).unwrap();
            posted += 1;
        }
        done == reads
    });
    assert!(ok);
    assert_eq!(p.a.dev.memory().slice(MEM_BASE, data.len()), &data[..]);
    let (ca, cb) = (p.a.dev.counters(), p.b.dev.counters());
    assert!(ca.ecn_ce_rcvd >= 1024 && ca.cnp_sent >= 10, "{ca:?}");
    assert_eq!(cb.cnp_rcvd, ca.cnp_sent);
    assert!(cb.cc_rate_cuts >= 1 && cb.cc_pacing_stalls > 0, "{cb:?}");
    assert!(p.b.dev.qp_rate_bps(qb).unwrap() < CcConfig::default().line_rate_bps);
    assert_eq!((ca.cnp_rcvd, ca.cc_pacing_stalls), (0, 0), "the requester is not slowed");
    // Once paced, b's READ responses leave spread out, not in one instant.
    let first_cnp_at = seen.frames.iter().find(|(_, to_b, f)| *to_b && opcode(f) == Opcode::Cnp).unwrap().0;
    let times: std::collections::BTreeSet<Instant> = seen.frames.iter().filter(|(t, to_b, f)| !*to_b && *t > first_cnp_at + DELAY && is_read_response(f)).map(|x| x.0).collect();
    assert!(times.len() > 100, "READ responses left at {} distinct instants", times.len());
}

/// Congestion marks on a lossy link: 1 % loss, duplication, reordering and bit flips, and
/// 5 % of a's frames marked CE. Every SEND arrives once, intact and in order, every WRITE
/// lands, every work request completes; CNPs, cuts and pacing were at work throughout.
#[test]
fn marks_on_a_lossy_link_lose_nothing() {
    const N: u64 = 3000;
    const SLOT: u64 = 16 * 1024;
    const SLOTS: u64 = 64;
    let mut p = pair(CcConfig::default());
    let (qa, qb) = p.rc_pair(RcOpts::default());
    let (lka, lkb, rkb) = (p.a.mr.lkey, p.b.mr.lkey, p.b.mr.rkey);
    let faults = Faults { loss: 0.01, duplicate: 0.01, reorder: 0.01, flip: 0.01, seed: 0x5eed };
    let mut rng = Rng(0xfeed);
    let msg = |i: u64, len: usize| -> Vec<u8> { (0..len).map(|k| (k as u64 ^ i.wrapping_mul(0x9e37)) as u8).collect() };
    // (id, is_send, len) of what was posted and not yet checked.
    let mut posted = std::collections::VecDeque::new();
    let mut writes = std::collections::HashMap::new();
    let (mut next, mut sends_posted, mut sends_seen, mut completed) = (0u64, 0u64, 0u64, 0u64);
    let mut seen = Seen::default();
    let mut mark_rng = Rng(0xabc);
    let ok = run_with(&mut p, &mut seen, faults, 20_000_000, |_, to_b, f| to_b && opcode(f) != Opcode::Cnp && mark_rng.chance(0.05), |p| {
        while let Some(wc) = p.a.poll() {
            assert_eq!(wc.status, WcStatus::Success, "send {wc:?}");
            assert_eq!(wc.wr_id, completed, "completions in order");
            // A completed WRITE has landed (its slot is not reused while 32 are in flight).
            if let Some(len) = writes.remove(&wc.wr_id) {
                let dst = MEM_BASE + (1 << 20) + (wc.wr_id % SLOTS) * SLOT;
                assert_eq!(p.b.dev.memory().slice(dst, len), &msg(wc.wr_id, len)[..], "WRITE {}", wc.wr_id);
            }
            completed += 1;
        }
        while let Some(wc) = p.b.poll() {
            assert_eq!(wc.status, WcStatus::Success, "recv {wc:?}");
            // SENDs arrive in order: the oldest unchecked SEND is this one.
            let (id, len) = loop {
                let (id, is_send, len) = posted.pop_front().expect("a posted message");
                if is_send {
                    break (id, len);
                }
            };
            assert_eq!(wc.wr_id, sends_seen % SLOTS);
            assert_eq!(wc.byte_len as usize, len);
            let slot = MEM_BASE + (2 << 20) + (sends_seen % SLOTS) * SLOT;
            assert_eq!(p.b.dev.memory().slice(slot, len), &msg(id, len)[..], "SEND {id}");
            sends_seen += 1;
        }
        // Keep 32 messages in flight, SENDs and WRITEs mixed.
        while next < N && next < completed + 32 && sends_posted < sends_seen + SLOTS {
            let len = 1 + (rng.next() % SLOT) as usize;
            let data = msg(next, len);
            let src = MEM_BASE + (next % SLOTS) * SLOT;
            p.a.dev.memory_mut().write(src, &data).unwrap();
            if rng.next() & 1 == 0 {
                let slot = sends_posted % SLOTS;
                p.b.dev.post_recv(qb, RecvWr::new(slot).with_sge(MEM_BASE + (2 << 20) + slot * SLOT, SLOT as u32, lkb)).unwrap();
                p.a.dev.post_send(qa, SendWr::new(next, SendOpcode::Send).with_sge(src, len as u32, lka)).unwrap();
                sends_posted += 1;
                posted.push_back((next, true, len));
            } else {
                let dst = MEM_BASE + (1 << 20) + (next % SLOTS) * SLOT;
                p.a.dev.post_send(qa, SendWr::new(next, SendOpcode::Write).with_sge(src, len as u32, lka).with_remote(dst, rkb)).unwrap();
                posted.push_back((next, false, len));
                writes.insert(next, len);
            }
            next += 1;
        }
        completed == N && sends_seen == sends_posted
    });
    let (ca, cb) = (p.a.dev.counters().clone(), p.b.dev.counters().clone());
    assert!(ok, "stuck at {:?}: {completed}/{N} completed, a {ca:?}, b {cb:?}", p.now);
    assert!(writes.is_empty() && sends_seen > N / 3);
    assert!(cb.ecn_ce_rcvd > 100 && cb.cnp_sent > 10 && ca.cc_rate_cuts > 10, "a {ca:?}, b {cb:?}");
    assert!(ca.cc_pacing_stalls > 0 && ca.retransmitted_pkts > 0 && cb.rcvd_icrc_err > 0, "a {ca:?}, b {cb:?}");
    eprintln!("{N} messages: {} CE, {} CNPs sent, {} cuts, {} stalls, {} retransmitted, done at {:?}", cb.ecn_ce_rcvd, cb.cnp_sent, ca.cc_rate_cuts, ca.cc_pacing_stalls, ca.retransmitted_pkts, p.now);
}

/// IPv6: ECT(0) goes into the traffic class next to the AV's DSCP, CE is read from it, and
/// the CNP goes back over IPv6 (no header checksum; the ICRC masks the traffic class).
#[test]
fn ipv6_traffic_class_carries_ect_and_ce() {
    use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
    use droce_transport::qp::{PathMtu, QpCap, QpInitAttr, QpType};
    use droce_transport::verbs::{AccessFlags, AddressVector};
    use droce_transport::{Device, Gid, Psn, VecMemory};
    let gid = |i: u16| Gid::from_ipv6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i));
    let mac = |i: u8| [2, 0, 0, 0, 0, i];
    let mut devs: Vec<_> = (1..=2u8)
        .map(|i| {
            let cfg = DeviceConfig { mac: mac(i), gids: vec![gid(i as u16)], ..DeviceConfig::default() };
            let mut d = Device::new(cfg, VecMemory::new(MEM_BASE, 1 << 16));
            let pd = d.alloc_pd();
            let mr = d.reg_mr(pd, MEM_BASE, 1 << 16, AccessFlags::ALL).unwrap();
            let cq = d.create_cq(64).unwrap();
            let qp = d.create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: true }).unwrap();
            (d, mr, qp)
        })
        .collect();
    let qpns: Vec<_> = devs.iter().map(|(d, _, q)| d.query_qp(*q).unwrap().qp_num).collect();
    for (i, (d, _, q)) in devs.iter_mut().enumerate() {
        let peer = 1 - i;
        // DSCP 26 (AF31) asked for by the AV.
        let av = AddressVector { dgid: gid(peer as u16 + 1), dmac: mac(peer as u8 + 1), sgid_index: 0, hop_limit: 64, traffic_class: 26 << 2, flow_label: 0 };
        let (a, m) = init_attr(AccessFlags::ALL);
        d.modify_qp(*q, &a, m).unwrap();
        let (a, m) = rtr_attr(av, PathMtu::Mtu1024, qpns[peer], Psn::new(100), 4, 12);
        d.modify_qp(*q, &a, m).unwrap();
        let (a, m) = rts_attr(Psn::new(100), 14, 7, 7, 4);
        d.modify_qp(*q, &a, m).unwrap();
    }
    let (rkey, qa) = (devs[1].1.rkey, devs[0].2);
    let lk = devs[0].1.lkey;
    devs[0].0.post_send(qa, SendWr::new(1, SendOpcode::Write).with_sge(MEM_BASE, 8, lk).with_remote(MEM_BASE, rkey)).unwrap();
    let mut buf = vec![0u8; devs[0].0.max_frame_len()];
    let n = devs[0].0.poll_transmit(Instant(0), &mut buf).unwrap();
    let mut f = buf[..n].to_vec();
    assert_eq!(&f[12..14], &[0x86, 0xdd]);
    let tc = |f: &[u8]| (f[14] & 0x0f) << 4 | f[15] >> 4;
    assert_eq!(tc(&f), 26 << 2 | 0b10, "DSCP 26, ECT(0)");
    f[15] |= 0b11 << 4; // CE
    assert!(icrc::verify(&f[14..]), "the ICRC masks the traffic class");
    devs[1].0.handle_rx(Instant(1_000), &mut f);
    let n = devs[1].0.poll_transmit(Instant(1_000), &mut buf).unwrap();
    let (cnp, _) = RoceRepr::parse(&buf[..n]).unwrap();
    assert_eq!(cnp.bth.opcode, Opcode::Cnp);
    assert_eq!((cnp.ip.src_gid(), cnp.ip.dst_gid(), cnp.ip.traffic_class()), (gid(2), gid(1), 48 << 2));
    assert_eq!(cnp.bth.dest_qp, qpns[0]);
    let mut c = buf[..n].to_vec();
    devs[0].0.handle_rx(Instant(2_000), &mut c);
    assert_eq!(devs[0].0.counters().cc_rate_cuts, 1);
    assert!(devs[0].0.qp_rate_bps(qa).unwrap() < CcConfig::default().line_rate_bps);
}

/// `Device::set_cc` at run time: ECN off takes effect on the next frame, DCQCN off drops a
/// QP's cut rate and pacing at once.
#[test]
fn set_cc_applies_to_the_next_frames() {
    let mut p = pair(CcConfig::default());
    let (qa, _qb) = p.rc_pair(RcOpts::default());
    let mut buf = vec![0u8; p.a.dev.max_frame_len()];
    post_write(&mut p, qa, 1, 0, 8);
    let n = p.a.dev.poll_transmit(Instant(0), &mut buf).unwrap();
    assert_eq!(buf[15] & 3, 0b10);
    let mut f = buf[..n].to_vec();
    set_ce(&mut f);
    p.b.dev.handle_rx(Instant(0), &mut f);
    let n = p.b.dev.poll_transmit(Instant(0), &mut buf).unwrap();
    let mut cnp = buf[..n].to_vec();
    p.a.dev.handle_rx(Instant(1_000), &mut cnp);
    assert!(p.a.dev.qp_dcqcn(qa).is_some());
    p.a.dev.set_cc(CcConfig { ecn: false, dcqcn: false, ..CcConfig::default() });
    assert!(p.a.dev.qp_dcqcn(qa).is_none());
    assert_eq!(p.a.dev.qp_rate_bps(qa), Some(CcConfig::default().line_rate_bps));
    post_write(&mut p, qa, 2, 0, 8);
    let n = p.a.dev.poll_transmit(Instant(1_000), &mut buf).unwrap();
    assert_eq!(opcode(&buf[..n]), Opcode::RcWriteOnly);
    assert_eq!(buf[15] & 3, 0b00, "Not-ECT after set_cc");
    assert_eq!(ipv4_sum(&buf[14..34]), 0xffff);
    assert!(icrc::verify(&buf[14..n]));
    // A CNP now is counted and ignored.
    p.a.dev.handle_rx(Instant(10_000), &mut cnp);
    assert!(p.a.dev.qp_dcqcn(qa).is_none());
    assert_eq!(p.a.dev.counters().cnp_rcvd, 2);
}

/// `line_rate` is the ceiling DCQCN starts a QP at and recovers it to, not a pacer: a QP no
/// CNP has cut sends as fast as the port takes frames (here the simulated link, which has no
/// rate of its own). `pace=on` makes it a cap: the same 1 MiB then takes bytes * 8 / rate.
#[test]
fn line_rate_is_a_ceiling_and_pace_makes_it_a_cap() {
    let line = 1_000_000_000u64;
    // also with zero-copy transmit (frames split into headers + registered memory): the pacer
    // must count the payload it does not see in the buffer
    for (pace, split) in [(false, None), (true, None), (true, Some(1024))] {
        let cc = CcConfig { line_rate_bps: line, pace, ..CcConfig::default() };
        let burst = cc.pacer_burst_bytes as u64;
        let mut p = pair(cc);
        p.split_min = split;
        let (qa, _) = p.rc_pair(RcOpts::default());
        let w = timed_mib_write(&mut p, qa);
        let (bytes, took) = (w.bytes, w.took_ns);
        let at_rate = (bytes - burst - w.last_len) * 8 * 1_000_000_000 / line;
        assert_eq!(p.a.dev.qp_rate_bps(qa), Some(line));
        assert_eq!(p.b.dev.counters().cnp_sent, 0);
        if pace {
            assert!(took >= at_rate * 99 / 100 && took <= at_rate * 102 / 100 + 20_000, "paced (split {split:?}): {bytes} bytes in {took} ns, expected ~{at_rate}");
            assert_eq!(p.split_frames > 0, split.is_some());
            assert!(p.a.dev.counters().cc_pacing_stalls > 100);
        } else {
            assert!(took < at_rate / 10, "unpaced: {bytes} bytes in {took} ns, the line rate would take {at_rate}");
            assert_eq!(p.a.dev.counters().cc_pacing_stalls, 0);
        }
    }
}
