//! A switch egress port as data: a line rate, a byte-bounded FIFO with tail drop, and
//! RED-style ECN marking on enqueue, the way data-centre switches mark for DCQCN.
//!
//! The simulator's fabric puts one in front of the receiver (and one, non-marking, on every
//! host's uplink); the DPDK engine's emulated bottleneck queues mbufs in one. Nothing here
//! reads a clock: `now` comes in, and [`Bottleneck::poll_at`] says when to come back.
//!
//! Serialisation: a frame of `L` bytes occupies the port for `L * 8 / rate_bps` seconds,
//! starting when it arrives or when the previous frame has left, whichever is later. `L` is
//! the buffer's length (the frame as the transport writes it, without preamble, FCS or gap).
//! Sub-nanosecond remainders are carried from frame to frame, so a back-to-back burst of `N`
//! frames takes exactly `N * L * 8 / rate_bps`, rounded down to the nanosecond once.
//!
//! Marking (on enqueue, against the bytes already queued, `q`): `q <= kmin` never, `q >= kmax`
//! always, in between with probability `pmax * (q - kmin) / (kmax - kmin)`. A marked frame
//! gets CE (0b11) in the ECN bits of the IPv4 TOS or IPv6 traffic class, and the IPv4 header
//! checksum is updated incrementally (RFC 1624), so a header that was corrupt stays corrupt.
//! Only ECN-capable frames (ECT(0), ECT(1), or already CE) are marked; a non-ECT frame, a
//! non-IP frame or a VLAN-tagged one is queued unmarked (and tail-dropped like any other
//! when the queue is full). RoCEv2's ICRC masks the TOS/traffic class, so marking never
//! breaks it.
//!
//! Text form ([`BottleneckConfig::from_str`], the engine's CLI):
//! `rate=10g,queue=512k,kmin=40k,kmax=160k,pmax=0.2,seed=1`. `rate` is bits/s with decimal
//! suffixes (`k` = 10^3, `m` = 10^6, `g` = 10^9); `queue`, `kmin`, `kmax` are bytes with
//! binary suffixes (`k` = 1024, `m` = 1024^2), as switch buffers are sized; `pmax` is a
//! probability; `seed` an integer. Keys left out keep [`BottleneckConfig::default`].

use crate::rng::SplitMix64;
use crate::time::Instant;
use crate::wire::{EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet};
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// ECN codepoint "congestion experienced" (RFC 3168).
pub const ECN_CE: u8 = 0b11;

/// The port: line rate, buffer, marking thresholds, and the seed of the marking draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BottleneckConfig {
    /// Line rate in bits per second (> 0).
    pub rate_bps: u64,
    /// Buffer in bytes: a frame that would take the queue above it is tail-dropped.
    pub queue_bytes: usize,
    /// Queue depth in bytes at or below which nothing is marked.
    pub kmin: usize,
    /// Queue depth in bytes at or above which every ECN-capable frame is marked.
    pub kmax: usize,
    /// Marking probability just below `kmax` (0..=1).
    pub pmax: f64,
    pub seed: u64,
}

impl Default for BottleneckConfig {
    /// 10 Gb/s, 512 KiB of buffer, marking from 40 KiB to 160 KiB with pmax 0.2.
    fn default() -> Self {
        BottleneckConfig { rate_bps: 10_000_000_000, queue_bytes: 512 << 10, kmin: 40 << 10, kmax: 160 << 10, pmax: 0.2, seed: 1 }
    }
}

impl BottleneckConfig {
    /// A plain link: no marking (thresholds beyond any queue), a buffer that never fills in
    /// practice. Models a host's NIC uplink.
    pub fn unmarked(rate_bps: u64) -> Self {
        BottleneckConfig { rate_bps, queue_bytes: usize::MAX, kmin: usize::MAX, kmax: usize::MAX, pmax: 0.0, seed: 0 }
    }

    /// Checks the invariants `new` relies on.
    pub fn validate(&self) -> Result<(), BottleneckParseError> {
        if self.rate_bps == 0 {
            return Err(BottleneckParseError::Invalid("rate must be above 0".into()));
        }
        if !(0.0..=1.0).contains(&self.pmax) {
            return Err(BottleneckParseError::Invalid(format!("pmax {} is not within 0..=1", self.pmax)));
        }
        if self.kmin > self.kmax {
            return Err(BottleneckParseError::Invalid(format!("kmin {} is above kmax {}", self.kmin, self.kmax)));
        }
        Ok(())
    }
}

/// Counters of a port. `enqueued = dequeued + queued frames`; drops are not enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BottleneckStats {
    /// Frames accepted into the queue.
    pub enqueued: u64,
    /// Frames refused because the queue was full.
    pub dropped: u64,
    /// Frames that were given CE.
    pub marked: u64,
    /// Frames that left the port.
    pub dequeued: u64,
    /// Bytes that left the port.
    pub bytes_out: u64,
    /// Bytes queued now (including the frame being serialised).
    pub queue_bytes: usize,
    /// The most bytes ever queued.
    pub max_queue_bytes: usize,
}

struct Queued<T> {
    frame: T,
    len: usize,
    arrived: Instant,
}

/// A switch egress port queueing frames of type `T` (a `Vec<u8>` in the simulator, an mbuf in
/// the engine).
pub struct Bottleneck<T> {
    cfg: BottleneckConfig,
    rng: SplitMix64,
    queue: VecDeque<Queued<T>>,
    /// When the port finished (or will finish) serialising the last frame dequeued.
    busy_until: Instant,
    /// Remainder of that finish time below one nanosecond, in units of 1/rate_bps ns.
    busy_frac: u64,
    stats: BottleneckStats,
}

impl<T: AsMut<[u8]>> Bottleneck<T> {
    /// Panics when `cfg` fails [`BottleneckConfig::validate`] (a zero rate would never drain).
    pub fn new(cfg: BottleneckConfig) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("bottleneck config: {e}");
        }
        Bottleneck {
            cfg,
            rng: SplitMix64::new(cfg.seed),
            queue: VecDeque::new(),
            busy_until: Instant::ZERO,
            busy_frac: 0,
            stats: BottleneckStats::default(),
        }
    }

    pub fn config(&self) -> &BottleneckConfig {
        &self.cfg
    }

    /// Err(frame) = tail-dropped (queue full); may set CE on an ECT frame.
    pub fn enqueue(&mut self, now: Instant, mut frame: T) -> Result<(), T> {
        let len = frame.as_mut().len();
        let q = self.stats.queue_bytes;
        if q.saturating_add(len) > self.cfg.queue_bytes {
            self.stats.dropped += 1;
            return Err(frame);
        }
        if self.should_mark(q) && set_ce(frame.as_mut()) {
            self.stats.marked += 1;
        }
        self.queue.push_back(Queued { frame, len, arrived: now });
        self.stats.enqueued += 1;
        self.stats.queue_bytes = q + len;
        self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(self.stats.queue_bytes);
        Ok(())
    }

    /// The head frame once its serialisation at rate_bps has finished by `now`.
    pub fn dequeue(&mut self, now: Instant) -> Option<T> {
        let head = self.queue.front()?;
        let (done, frac) = self.finish_of(head);
        if done > now {
            return None;
        }
        let q = self.queue.pop_front()?;
        self.busy_until = done;
        self.busy_frac = frac;
        self.stats.dequeued += 1;
        self.stats.bytes_out += q.len as u64;
        self.stats.queue_bytes -= q.len;
        Some(q.frame)
    }

    /// When the head frame will be ready (None when empty).
    pub fn poll_at(&self) -> Option<Instant> {
        self.queue.front().map(|h| self.finish_of(h).0)
    }

    pub fn stats(&self) -> BottleneckStats {
        self.stats
    }

    /// Frames queued now.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// When `h` (the head) finishes serialising, and the sub-nanosecond remainder.
    fn finish_of(&self, h: &Queued<T>) -> (Instant, u64) {
        // An idle port starts afresh at the arrival; a busy one right after its last frame.
        let (start, frac) = if h.arrived > self.busy_until { (h.arrived, 0) } else { (self.busy_until, self.busy_frac) };
        let rate = self.cfg.rate_bps as u128;
        let num = h.len as u128 * 8 * 1_000_000_000 + frac as u128;
        let ns = (num / rate).min(u64::MAX as u128) as u64;
        (Instant(start.0.saturating_add(ns)), (num % rate) as u64)
    }

    /// RED on the instantaneous queue: draws only inside the linear region.
    fn should_mark(&mut self, q: usize) -> bool {
        let (kmin, kmax) = (self.cfg.kmin, self.cfg.kmax);
        if q <= kmin {
            false
        } else if q >= kmax {
            true
        } else {
            let p = self.cfg.pmax * (q - kmin) as f64 / (kmax - kmin) as f64;
            self.rng.chance(p)
        }
    }
}

/// Sets CE on an ECN-capable IPv4 or IPv6 frame; false when the frame is not one (not IP,
/// too short, or Not-ECT), and then it is left untouched.
pub fn set_ce(frame: &mut [u8]) -> bool {
    let Ok(mut eth) = EthernetFrame::new_checked(&mut *frame) else { return false };
    match eth.ethertype() {
        EtherType::Ipv4 => {
            let Ok(mut ip) = Ipv4Packet::new_checked(eth.payload_mut()) else { return false };
            let ecn = ip.ecn();
            if ecn == 0 {
                return false;
            }
            if ecn != ECN_CE {
                // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), over the 16-bit word TOS sits in.
                let old = u16::from_be_bytes([ip.version() << 4 | ip.header_len() / 4, ip.dscp() << 2 | ecn]);
                let new = old | ECN_CE as u16;
                let sum = (!ip.checksum()) as u32 + (!old) as u32 + new as u32;
                let mut s = sum;
                while s >> 16 != 0 {
                    s = (s & 0xffff) + (s >> 16);
                }
                let dscp = ip.dscp();
                ip.set_dscp_ecn(dscp, ECN_CE);
                ip.set_checksum(!(s as u16));
            }
            true
        }
        EtherType::Ipv6 => {
            let Ok(mut ip) = Ipv6Packet::new_checked(eth.payload_mut()) else { return false };
            let tc = ip.traffic_class();
            if tc & ECN_CE == 0 {
                return false;
            }
            let flow = ip.flow_label();
            ip.set_version_tc_flow(tc | ECN_CE, flow);
            true
        }
        _ => false,
    }
}

/// Why a bottleneck string was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum BottleneckParseError {
    /// A key other than rate, queue, kmin, kmax, pmax, seed.
    UnknownKey(String),
    /// `key` without `=value`.
    MissingValue(String),
    /// A value that does not parse for its key.
    BadValue { key: String, value: String },
    /// Values that parse but do not fit together (zero rate, pmax outside 0..=1, kmin > kmax).
    Invalid(String),
}

impl fmt::Display for BottleneckParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BottleneckParseError::UnknownKey(k) => {
                write!(f, "unknown bottleneck key '{k}' (expected rate, queue, kmin, kmax, pmax or seed)")
            }
            BottleneckParseError::MissingValue(k) => write!(f, "bottleneck key '{k}' needs a value, e.g. {k}=..."),
            BottleneckParseError::BadValue { key, value } => {
                let what = match key.as_str() {
                    "rate" => "a rate in bits/s such as 10g, 100m or 25000000",
                    "queue" | "kmin" | "kmax" => "a size in bytes such as 512k, 1m or 4096",
                    "pmax" => "a probability such as 0.2",
                    _ => "an integer",
                };
                write!(f, "bottleneck '{key}': '{value}' is not {what}")
            }
            BottleneckParseError::Invalid(why) => write!(f, "bottleneck: {why}"),
        }
    }
}

impl std::error::Error for BottleneckParseError {}

/// `digits[suffix]` with `suffix` scaling by `k`, `m` or `g` (`g` only when `giga` is given).
fn parse_scaled(s: &str, kilo: u64, giga: Option<u64>) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&s[..s.len() - 1], kilo),
        b'm' => (&s[..s.len() - 1], kilo * kilo),
        b'g' => (&s[..s.len() - 1], giga?),
        _ => (s, 1),
    };
    // Fractions such as 2.5g are welcome on a rate.
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mul);
    }
    let f: f64 = num.parse().ok()?;
    let v = f * mul as f64;
    (f.is_finite() && f >= 0.0 && v < u64::MAX as f64).then_some(v.round() as u64)
}

impl FromStr for BottleneckConfig {
    type Err = BottleneckParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut c = BottleneckConfig::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(match item {
                    "rate" | "queue" | "kmin" | "kmax" | "pmax" | "seed" => BottleneckParseError::MissingValue(item.into()),
                    _ => BottleneckParseError::UnknownKey(item.into()),
                });
            };
            let (key, value) = (key.trim(), value.trim());
            let bad = || BottleneckParseError::BadValue { key: key.into(), value: value.into() };
            let size = || parse_scaled(value, 1024, None).and_then(|v| usize::try_from(v).ok()).ok_or_else(bad);
            match key {
                "rate" => c.rate_bps = parse_scaled(value, 1000, Some(1_000_000_000)).ok_or_else(bad)?,
                "queue" => c.queue_bytes = size()?,
                "kmin" => c.kmin = size()?,
                "kmax" => c.kmax = size()?,
                "pmax" => c.pmax = value.parse::<f64>().ok().filter(|p| p.is_finite()).ok_or_else(bad)?,
                "seed" => c.seed = value.parse().map_err(|_| bad())?,
                _ => return Err(BottleneckParseError::UnknownKey(key.into())),
            }
        }
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EthernetAddress, EthernetRepr, Ipv4Repr, Ipv6Repr};
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// An Ethernet/IPv4 frame of `len` bytes with the given ECN bits (DSCP 26, as RoCE uses).
    fn v4(len: usize, ecn: u8) -> Vec<u8> {
        let mut f = vec![0u8; len];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr { src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]), dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]), ethertype: EtherType::Ipv4 }
            .emit(&mut eth);
        let repr = Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            next_header: 17,
            payload_len: len - 14 - 20,
            dscp: 26,
            ecn,
            ident: 0x1234,
            dont_frag: true,
            hop_limit: 64,
        };
        repr.emit(&mut Ipv4Packet::new_unchecked(eth.payload_mut()));
        f
    }

    fn v6(len: usize, tc: u8) -> Vec<u8> {
        let mut f = vec![0u8; len];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr { src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]), dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]), ethertype: EtherType::Ipv6 }
            .emit(&mut eth);
        let repr = Ipv6Repr {
            src_addr: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            dst_addr: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
            next_header: 17,
            payload_len: len - 14 - 40,
            hop_limit: 64,
            traffic_class: tc,
            flow_label: 0xabcde,
        };
        repr.emit(&mut Ipv6Packet::new_unchecked(eth.payload_mut()));
        f
    }

    fn ecn_of(f: &[u8]) -> u8 {
        let eth = EthernetFrame::new_checked(f).unwrap();
        match eth.ethertype() {
            EtherType::Ipv4 => Ipv4Packet::new_checked(eth.payload()).unwrap().ecn(),
            EtherType::Ipv6 => Ipv6Packet::new_checked(eth.payload()).unwrap().traffic_class() & 3,
            _ => unreachable!(),
        }
    }

    fn cfg(rate_bps: u64, queue_bytes: usize, kmin: usize, kmax: usize, pmax: f64) -> BottleneckConfig {
        BottleneckConfig { rate_bps, queue_bytes, kmin, kmax, pmax, seed: 7 }
    }

    /// Dequeues everything, stepping to `poll_at` each time; returns the departure times.
    fn drain(b: &mut Bottleneck<Vec<u8>>) -> Vec<Instant> {
        let mut out = Vec::new();
        for _ in 0..1_000_000 {
            let Some(at) = b.poll_at() else { break };
            assert!(at.0 == 0 || b.dequeue(Instant(at.0 - 1)).is_none(), "ready before poll_at");
            assert!(b.dequeue(at).is_some());
            out.push(at);
        }
        out
    }

    #[test]
    fn back_to_back_burst_takes_n_l_8_over_rate() {
        // 10 Gb/s, 1000 B: 800 ns a frame; 7 Gb/s, 1027 B: 1173.714... ns (remainders carried).
        for (rate, len, n) in [(10_000_000_000u64, 1000usize, 100u64), (7_000_000_000, 1027, 1000), (1_000_000, 64, 10)] {
            let mut b = Bottleneck::new(cfg(rate, usize::MAX, usize::MAX, usize::MAX, 0.0));
            let t0 = Instant(5_000);
            for _ in 0..n {
                b.enqueue(t0, vec![0u8; len]).unwrap();
            }
            let times = drain(&mut b);
            assert_eq!(times.len() as u64, n);
            let expect = (n as u128 * len as u128 * 8 * 1_000_000_000 / rate as u128) as u64;
            assert_eq!(times.last().unwrap().0 - t0.0, expect, "rate {rate} len {len}");
            // The first frame is ready after one serialisation time, not before.
            assert_eq!(times[0].0 - t0.0, (len as u64 * 8 * 1_000_000_000) / rate);
            let s = b.stats();
            assert_eq!((s.enqueued, s.dequeued, s.bytes_out, s.queue_bytes), (n, n, n * len as u64, 0));
        }
    }

    #[test]
    fn idle_port_starts_at_arrival() {
        let mut b = Bottleneck::new(cfg(8_000_000_000, 1 << 20, 1 << 20, 1 << 20, 0.0));
        b.enqueue(Instant(0), vec![0; 1000]).unwrap(); // 1000 ns
        assert_eq!(b.poll_at(), Some(Instant(1000)));
        assert!(b.dequeue(Instant(999)).is_none());
        assert!(b.dequeue(Instant(1000)).is_some());
        assert_eq!(b.poll_at(), None);
        // Arrives long after the port went idle: no credit from the idle time.
        b.enqueue(Instant(10_000), vec![0; 500]).unwrap();
        assert_eq!(b.poll_at(), Some(Instant(10_500)));
        // Arrives while the previous one is still serialising: waits for it.
        b.enqueue(Instant(10_100), vec![0; 500]).unwrap();
        assert_eq!(drain(&mut b), vec![Instant(10_500), Instant(11_000)]);
    }

    #[test]
    fn tail_drop_when_full_and_conservation() {
        let mut b = Bottleneck::new(cfg(10_000_000_000, 3000, usize::MAX, usize::MAX, 0.0));
        for _ in 0..3 {
            b.enqueue(Instant(0), vec![1; 1000]).unwrap();
        }
        let back = b.enqueue(Instant(0), vec![9; 1000]).unwrap_err();
        assert_eq!(back, vec![9; 1000], "the refused frame comes back untouched");
        let small = b.enqueue(Instant(0), vec![0; 1]);
        assert!(small.is_err(), "3000 + 1 > 3000");
        let s = b.stats();
        assert_eq!((s.enqueued, s.dropped, s.queue_bytes, s.max_queue_bytes), (3, 2, 3000, 3000));
        // Room again once the head has left.
        assert!(b.dequeue(Instant(800)).is_some());
        b.enqueue(Instant(800), vec![0; 1000]).unwrap();
        let s = b.stats();
        assert_eq!(s.enqueued, s.dequeued + b.len() as u64);
        assert_eq!(s.queue_bytes, 3000);
    }

    /// Fraction of ECT(0) frames marked when each arrives to a queue of exactly `q` bytes.
    fn mark_fraction(q: usize, trials: u32) -> f64 {
        let c = cfg(10_000_000_000, 1 << 30, 10_000, 50_000, 0.2);
        // One generator across the trials, so that the draws are independent.
        let mut rng = SplitMix64::new(c.seed);
        let mut marked = 0;
        for _ in 0..trials {
            let mut b = Bottleneck::new(c);
            b.rng = rng;
            // Fill to `q` with non-IP filler (never marked), then offer one ECT(0) frame.
            let mut filler = q;
            while filler > 0 {
                let l = filler.min(1500);
                b.enqueue(Instant(0), vec![0; l]).unwrap();
                filler -= l;
            }
            assert_eq!(b.stats().queue_bytes, q);
            b.enqueue(Instant(0), v4(1000, 0b10)).unwrap();
            marked += b.stats().marked;
            rng = b.rng;
        }
        marked as f64 / trials as f64
    }

    #[test]
    fn marking_probability_follows_red() {
        assert_eq!(mark_fraction(0, 2000), 0.0);
        assert_eq!(mark_fraction(10_000, 2000), 0.0, "at kmin: no mark");
        assert_eq!(mark_fraction(50_000, 500), 1.0, "at kmax: always");
        assert_eq!(mark_fraction(200_000, 500), 1.0, "above kmax: always");
        // Halfway: pmax / 2 = 0.1; 20000 draws give a standard deviation of 0.0021.
        let mid = mark_fraction(30_000, 20_000);
        assert!((mid - 0.1).abs() < 0.01, "halfway {mid}");
        // Just below kmax: close to pmax, not 1.
        let top = mark_fraction(49_000, 20_000);
        assert!((top - 0.195).abs() < 0.015, "near kmax {top}");
        let low = mark_fraction(12_000, 20_000);
        assert!((low - 0.01).abs() < 0.004, "near kmin {low}");
    }

    #[test]
    fn marks_only_ect_frames_and_keeps_ipv4_checksum_valid() {
        // kmin = kmax = 0: every frame after the first finds a queue and must be marked.
        let mut b = Bottleneck::new(cfg(10_000_000_000, 1 << 20, 0, 0, 1.0));
        b.enqueue(Instant(0), vec![0; 100]).unwrap();
        for (ecn, want) in [(0b00, 0b00), (0b01, 0b11), (0b10, 0b11), (0b11, 0b11)] {
            let mut f = v4(1078, ecn);
            let ident_before = Ipv4Packet::new_checked(&f[14..]).unwrap().ident();
            b.enqueue(Instant(0), f.clone()).unwrap();
            // Same decision on a frame of our own, to inspect it.
            let changed = set_ce(&mut f);
            assert_eq!(changed, ecn != 0);
            assert_eq!(ecn_of(&f), want);
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            assert!(ip.verify_checksum(), "ecn {ecn:#04b}: checksum after marking");
            assert_eq!(ip.dscp(), 26, "DSCP kept");
            assert_eq!(ip.ident(), ident_before);
            // The checksum is the one a fresh emit gives.
            let mut fresh = f.clone();
            Ipv4Packet::new_unchecked(&mut fresh[14..34]).fill_checksum();
            assert_eq!(fresh, f);
        }
        let s = b.stats();
        assert_eq!(s.marked, 3, "ECT(1), ECT(0) and CE count; Not-ECT does not");
        // The queued frames carry the marks.
        b.dequeue(Instant(1 << 40)).unwrap();
        let got: Vec<u8> = (0..4).map(|_| ecn_of(&b.dequeue(Instant(1 << 40)).unwrap())).collect();
        assert_eq!(got, vec![0b00, 0b11, 0b11, 0b11]);
    }

    #[test]
    fn incremental_checksum_keeps_a_corrupt_header_corrupt() {
        let mut f = v4(200, 0b10);
        f[14 + 10] ^= 0x40; // break the checksum
        assert!(set_ce(&mut f));
        assert!(!Ipv4Packet::new_checked(&f[14..]).unwrap().verify_checksum());
    }

    #[test]
    fn marks_ipv6_traffic_class() {
        let mut b = Bottleneck::new(cfg(10_000_000_000, 1 << 20, 0, 0, 1.0));
        b.enqueue(Instant(0), vec![0; 100]).unwrap();
        for tc in [26 << 2, (26 << 2) | 0b10, (26 << 2) | 0b01] {
            b.enqueue(Instant(0), v6(1000, tc)).unwrap();
        }
        assert_eq!(b.stats().marked, 2);
        b.dequeue(Instant(1 << 40)).unwrap();
        for want in [26 << 2, (26 << 2) | 0b11, (26 << 2) | 0b11] {
            let f = b.dequeue(Instant(1 << 40)).unwrap();
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
            assert_eq!(ip.traffic_class(), want);
            assert_eq!(ip.flow_label(), 0xabcde, "flow label kept");
            assert_eq!(ip.version(), 6);
        }
    }

    #[test]
    fn non_ip_and_short_frames_are_never_marked() {
        let mut b = Bottleneck::new(cfg(10_000_000_000, 1 << 20, 0, 0, 1.0));
        let mut arp = v4(100, 0b10);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let orig = arp.clone();
        b.enqueue(Instant(0), vec![0; 10]).unwrap();
        b.enqueue(Instant(0), arp).unwrap();
        let mut truncated = v4(100, 0b10);
        truncated.truncate(30);
        b.enqueue(Instant(0), truncated).unwrap();
        assert_eq!(b.stats().marked, 0);
        b.dequeue(Instant(1 << 40)).unwrap();
        assert_eq!(b.dequeue(Instant(1 << 40)).unwrap(), orig);
    }

    #[test]
    fn marking_is_deterministic_by_seed() {
        // 2000 frames of 1000 B: the probability climbs from 0 to 1 across the run.
        let run = |seed| {
            let mut b = Bottleneck::new(BottleneckConfig { seed, ..cfg(10_000_000_000, 1 << 30, 0, 2_000_000, 1.0) });
            for _ in 0..2000 {
                b.enqueue(Instant(0), v4(1000, 0b10)).unwrap();
            }
            (0..2000).map(|_| ecn_of(&b.dequeue(Instant(u64::MAX)).unwrap())).collect::<Vec<_>>()
        };
        let a = run(3);
        assert_eq!(a, run(3));
        assert_ne!(a, run(4));
        let marked = a.iter().filter(|&&e| e == ECN_CE).count();
        assert!((900..1100).contains(&marked), "about half marked: {marked}");
    }

    #[test]
    fn parses_text_form() {
        let c: BottleneckConfig = "rate=10g,queue=512k,kmin=40k,kmax=160k,pmax=0.2,seed=1".parse().unwrap();
        assert_eq!(c, BottleneckConfig { rate_bps: 10_000_000_000, queue_bytes: 524_288, kmin: 40_960, kmax: 163_840, pmax: 0.2, seed: 1 });
        let c: BottleneckConfig = " rate=2.5g , queue=1m,kmin=5000,kmax=5000,pmax=1 ".parse().unwrap();
        assert_eq!((c.rate_bps, c.queue_bytes, c.kmin, c.kmax, c.pmax), (2_500_000_000, 1 << 20, 5000, 5000, 1.0));
        let c: BottleneckConfig = "rate=100m".parse().unwrap();
        assert_eq!(c, BottleneckConfig { rate_bps: 100_000_000, ..BottleneckConfig::default() });
        assert_eq!("rate=40k".parse::<BottleneckConfig>().unwrap().rate_bps, 40_000);
        assert_eq!("".parse::<BottleneckConfig>().unwrap(), BottleneckConfig::default());
    }

    #[test]
    fn parse_errors_name_the_key_and_value() {
        let e = |s: &str| s.parse::<BottleneckConfig>().unwrap_err();
        assert_eq!(e("rate=10g,burst=3"), BottleneckParseError::UnknownKey("burst".into()));
        assert_eq!(e("kmin"), BottleneckParseError::MissingValue("kmin".into()));
        assert_eq!(e("bogus"), BottleneckParseError::UnknownKey("bogus".into()));
        assert_eq!(e("rate=fast"), BottleneckParseError::BadValue { key: "rate".into(), value: "fast".into() });
        assert_eq!(e("queue=1g"), BottleneckParseError::BadValue { key: "queue".into(), value: "1g".into() });
        assert_eq!(e("pmax=x"), BottleneckParseError::BadValue { key: "pmax".into(), value: "x".into() });
        assert_eq!(e("seed=-1"), BottleneckParseError::BadValue { key: "seed".into(), value: "-1".into() });
        assert!(matches!(e("pmax=1.5"), BottleneckParseError::Invalid(_)));
        assert!(matches!(e("kmin=200k,kmax=100k"), BottleneckParseError::Invalid(_)));
        assert!(matches!(e("rate=0"), BottleneckParseError::Invalid(_)));
        let msg = e("queue=lots").to_string();
        assert!(msg.contains("'queue'") && msg.contains("'lots'"), "{msg}");
        let msg = e("burst=3").to_string();
        assert!(msg.contains("'burst'") && msg.contains("rate, queue"), "{msg}");
    }
}
