//! A two-node network with a line rate, for the selective-repeat tests and the goodput
//! example (`examples/sr_goodput.rs` includes this file): each node's port serialises one
//! frame at a time at `rate_gbps` (with Ethernet's preamble, FCS and inter-frame gap), every
//! frame then takes `delay` to arrive; seeded faults (loss, duplication, reordering, bit
//! flips) and a per-frame script (drop or delay a chosen packet) act on the way. Time is
//! simulated, so results do not depend on the machine. `sim::Pair` delivers every frame of a
//! burst at once, which gives loss recovery no RTT to beat and reordering no order to keep.
#![allow(dead_code)]

use droce_transport::qp::QpHandle;
use droce_transport::sim::{advance_clock, Node, RcOpts};
use droce_transport::{DeviceConfig, Duration, Instant};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Bytes Ethernet puts on the line around a frame: preamble 8, FCS 4, inter-frame gap 12.
pub const LINE_OVERHEAD: u64 = 24;

/// The link, the same in both directions.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub rate_gbps: f64,
    /// Propagation delay (one way).
    pub delay: Duration,
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    /// A reordered frame arrives up to this much later.
    pub reorder_window: Duration,
    pub bit_flip: f64,
    /// Congestion: probability that a switch marks an ECT frame CE on the way.
    pub ce: f64,
}

impl Link {
    /// 10 Gb/s, 5 µs each way, no faults.
    pub const CLEAN: Link =
        Link { rate_gbps: 10.0, delay: Duration(5_000), loss: 0.0, duplicate: 0.0, reorder: 0.0, reorder_window: Duration(0), bit_flip: 0.0, ce: 0.0 };

    /// Time `len` bytes of frame occupy the line.
    pub fn serialisation(&self, len: usize) -> Duration {
        Duration((((len as u64 + LINE_OVERHEAD) * 8) as f64 / self.rate_gbps).ceil() as u64)
    }
}

/// What the script does with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Pass,
    Drop,
    /// Arrives twice.
    Twice,
    /// Arrives this much later than it would.
    Delay(Duration),
}

/// Called for every frame a node puts on the line: (`to_b`, frame).
pub type Script = Box<dyn FnMut(bool, &[u8]) -> Fate>;

/// Per-direction link counters (index 0: a -> b, 1: b -> a).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub sent: [u64; 2],
    pub dropped: [u64; 2],
    pub duplicated: [u64; 2],
    pub reordered: [u64; 2],
    pub flipped: [u64; 2],
}

/// A frame on the way: (arrival, order sent, to_b, frame).
type Flying = (Instant, u64, bool, Vec<u8>);

pub struct Net {
    pub a: Node,
    pub b: Node,
    pub now: Instant,
    pub link: Link,
    pub script: Option<Script>,
    pub stats: Stats,
    rng: u64,
    seq: u64,
    wire: BinaryHeap<Reverse<Flying>>,
    /// When each port's line is free again.
    line_free: [Instant; 2],
    buf: Vec<u8>,
}

impl Net {
    pub fn new(link: Link, seed: u64, mem_len: usize, cfg: DeviceConfig) -> Net {
        let a = Node::with_config(1, mem_len, DeviceConfig { seed: seed ^ 0xa, ..cfg.clone() });
        let b = Node::with_config(2, mem_len, DeviceConfig { seed: seed ^ 0xb, ..cfg });
        let buf = vec![0u8; a.dev.max_frame_len()];
        Net {
            a,
            b,
            now: Instant(0),
            link,
            script: None,
            stats: Stats::default(),
            rng: seed | 1,
            seq: 0,
            wire: BinaryHeap::new(),
            line_free: [Instant(0); 2],
            buf,
        }
    }

    /// Connect one RC QP on each node; `sr_a`/`sr_b` set the selective-repeat attribute on
    /// a's and b's QP (both when the peers negotiated it).
    pub fn rc_pair(&mut self, o: RcOpts, sr_a: bool, sr_b: bool) -> (QpHandle, QpHandle) {
        droce_transport::sim::rc_connect_sr(&mut self.a, &mut self.b, o, sr_a, sr_b)
    }

    fn next_rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_rand() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn put(&mut self, to_b: bool, at: Instant, frame: &[u8]) {
        let d = if to_b { 0 } else { 1 };
        self.stats.sent[d] += 1;
        let mut at = at + self.link.delay;
        if let Some(s) = self.script.as_mut() {
            match s(to_b, frame) {
                Fate::Pass => {}
                Fate::Twice => {
                    let f = frame.to_vec();
                    self.seq += 1;
                    self.wire.push(Reverse((at, self.seq, to_b, f)));
                }
                Fate::Drop => {
                    self.stats.dropped[d] += 1;
                    return;
                }
                Fate::Delay(x) => at = at + x,
            }
        }
        if self.chance(self.link.loss) {
            self.stats.dropped[d] += 1;
            return;
        }
        let copies = if self.chance(self.link.duplicate) {
            self.stats.duplicated[d] += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut f = frame.to_vec();
            // (no draw when off, so the seeded fates of the other tests stay as they were)
            if self.link.ce > 0.0 && self.chance(self.link.ce) {
                droce_transport::bottleneck::set_ce(&mut f);
            }
            if self.chance(self.link.bit_flip) {
                let bit = self.next_rand() % (f.len() as u64 * 8);
                f[(bit / 8) as usize] ^= 1 << (bit % 8);
                self.stats.flipped[d] += 1;
            }
            let mut t = at;
            if self.chance(self.link.reorder) {
                t = t + Duration(self.next_rand() % self.link.reorder_window.0.max(1));
                self.stats.reordered[d] += 1;
            }
            self.seq += 1;
            self.wire.push(Reverse((t, self.seq, to_b, f)));
        }
    }

    /// One round: each port whose line is free sends one frame, due frames arrive, due timers
    /// fire; when nothing happened the clock jumps to the next event. False when idle.
    pub fn step(&mut self) -> bool {
        let mut busy = false;
        let mut buf = core::mem::take(&mut self.buf);
        for (i, to_b) in [(0, true), (1, false)] {
            if self.line_free[i] > self.now {
                continue;
            }
            let dev = if to_b { &mut self.a.dev } else { &mut self.b.dev };
            if let Some(n) = dev.poll_transmit(self.now, &mut buf) {
                let done = self.now + self.link.serialisation(n);
                self.line_free[i] = done;
                self.put(to_b, done, &buf[..n]);
                busy = true;
            }
        }
        self.buf = buf;
        while self.wire.peek().is_some_and(|Reverse(f)| f.0 <= self.now) {
            let Reverse((_, _, to_b, mut f)) = self.wire.pop().expect("peeked");
            let dev = if to_b { &mut self.b.dev } else { &mut self.a.dev };
            dev.handle_rx(self.now, &mut f);
            busy = true;
        }
        for dev in [&mut self.a.dev, &mut self.b.dev] {
            if dev.poll_timeout().is_some_and(|t| t <= self.now) {
                dev.handle_timeout(self.now);
                busy = true;
            }
        }
        if busy {
            return true;
        }
        let mut next = [self.wire.peek().map(|Reverse(f)| f.0), self.a.dev.poll_timeout(), self.b.dev.poll_timeout()];
        // A port that has something to send and waits for its line.
        let lines = [(self.line_free[0], self.a.dev.tx_ready()), (self.line_free[1], self.b.dev.tx_ready())];
        let line = lines.iter().filter(|(t, ready)| *ready && *t > self.now).map(|(t, _)| *t).min();
        next[0] = [next[0], line].into_iter().flatten().min();
        advance_clock(&mut self.now, next.into_iter().flatten().min())
    }

    /// Step until idle or `max_steps` rounds; true when it became idle.
    pub fn run_idle(&mut self, max_steps: u64) -> bool {
        (0..max_steps).any(|_| !self.step())
    }
}

/// BTH opcode and PSN of a RoCEv2 frame over IPv4 (the nodes' GIDs are IPv4-mapped).
pub fn bth(frame: &[u8]) -> Option<(u8, u32)> {
    let b = frame.get(14 + 20 + 8..14 + 20 + 8 + 12)?;
    Some((b[0], u32::from_be_bytes([0, b[9], b[10], b[11]])))
}

/// Whether the opcode is a request (not a response or ACK).
pub fn is_request(op: u8) -> bool {
    droce_transport::wire::Opcode::try_from(op).is_ok_and(|o| !o.info().is_response())
}
