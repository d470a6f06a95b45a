//! The `switch` forwarding mode: an L2 learning switch over every port droce-pmd opened.
//!
//! Each received frame teaches the switch that its source MAC lives behind the port it came
//! in on; a frame to a known unicast MAC leaves on that MAC's port only, and a broadcast,
//! multicast or unknown-unicast frame is flooded to every other port. Nothing in the frame is
//! changed, so ARP, IPv6 ND and RoCEv2 pass through as on a wire: several droce-pmd RDMA
//! processes, each on its own memif link to the switch process, reach one another.
//!
//! The decision ([`MacTable::decide`]) is plain data in, plain data out, so it is tested
//! without DPDK; [`SwitchStream`] is the I/O around it (one RX burst per port, the frames
//! copied for flooding, one TX burst per egress port).
//!
//! # The emulated bottleneck
//! With `--bottleneck=SPEC` every forwarded frame passes through the transport's sans-IO port
//! model [`Bottleneck`] before its TX burst: it is queued, released at the line rate (its
//! serialisation time), tail-dropped when the queue is full, and CE-marked by RED when it is
//! ECN-capable. `--bottleneck-scope=port` (the default) gives each egress port its own queue,
//! as a switch's output ports have; `--bottleneck-scope=switch` sends every forwarded frame
//! through one shared queue (a trunk), whatever its egress port: with one memif link per
//! process, two perftest pairs never share an egress port, and this is how they compete for
//! one link all the same. Time is the TSC in nanoseconds since the stream was built.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use droce_dpdk::{Mbuf, MbufBatch, Mempool, Port, QueueId, Tsc, TscInstant};
use droce_transport::bottleneck::{Bottleneck, BottleneckConfig, BottleneckStats};
use droce_transport::Instant;

use crate::pkt::MAX_BURST;
use crate::fwd::{Stream, StreamStats};

/// How long a learnt MAC is kept without a frame from it: 802.1D's default ageing time.
pub const DEFAULT_AGEING_NS: u64 = 300 * 1_000_000_000;
/// Most MACs the table holds; a new source beyond it is not learnt (its replies are flooded),
/// so a flood of random source MACs cannot grow the switch's memory.
pub const DEFAULT_TABLE_CAPACITY: usize = 4096;

/// Where one frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// To this one port.
    Port(u16),
    /// To every port but the ingress one.
    Flood,
    /// Nowhere: too short to be Ethernet, a multicast source (invalid), or a destination that
    /// lives behind the port the frame came in on (a switch never sends a frame back).
    Drop,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    port: u16,
    /// When a frame from this MAC was last seen (ns, the switch's clock).
    seen: u64,
}

/// The MAC learning table: source MAC -> port, with ageing and a bounded size.
#[derive(Debug)]
pub struct MacTable {
    entries: HashMap<[u8; 6], Entry>,
    capacity: usize,
    ageing_ns: u64,
}

fn is_multicast(mac: &[u8]) -> bool {
    mac[0] & 1 == 1
}

impl MacTable {
    pub fn new(capacity: usize, ageing_ns: u64) -> MacTable {
        MacTable { entries: HashMap::with_capacity(capacity.min(1024)), capacity, ageing_ns }
    }

    /// Learns the source of `frame` (received on `ingress` at `now_ns`) and says where it goes.
    pub fn decide(&mut self, ingress: u16, frame: &[u8], now_ns: u64) -> Forward {
        if frame.len() < 14 {
            return Forward::Drop;
        }
        let dst: [u8; 6] = frame[0..6].try_into().unwrap_or([0; 6]);
        let src: [u8; 6] = frame[6..12].try_into().unwrap_or([0; 6]);
        if is_multicast(&src) {
            return Forward::Drop;
        }
        self.learn(src, ingress, now_ns);
        if is_multicast(&dst) {
            return Forward::Flood;
        }
        match self.lookup(&dst, now_ns) {
            Some(p) if p == ingress => Forward::Drop,
            Some(p) => Forward::Port(p),
            None => Forward::Flood,
        }
    }

    /// Records that `mac` is behind `port`; a MAC seen on another port moves there at once
    /// (a station that moved, or a process restarted on another link).
    pub fn learn(&mut self, mac: [u8; 6], port: u16, now_ns: u64) {
        if let Some(e) = self.entries.get_mut(&mac) {
            *e = Entry { port, seen: now_ns };
            return;
        }
        if self.entries.len() >= self.capacity {
            self.expire(now_ns);
            if self.entries.len() >= self.capacity {
                return;
            }
        }
        self.entries.insert(mac, Entry { port, seen: now_ns });
    }

    /// The port of `mac` if it was seen within the ageing time.
    pub fn lookup(&self, mac: &[u8; 6], now_ns: u64) -> Option<u16> {
        self.entries.get(mac).filter(|e| now_ns.saturating_sub(e.seen) <= self.ageing_ns).map(|e| e.port)
    }

    /// Forgets every MAC not seen within the ageing time.
    pub fn expire(&mut self, now_ns: u64) {
        let age = self.ageing_ns;
        self.entries.retain(|_, e| now_ns.saturating_sub(e.seen) <= age);
    }

    /// MACs in the table.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Counters of the switch as a whole, beside the per-port ones.
#[derive(Debug, Default)]
pub struct SwitchStats {
    /// Frames sent to every other port (counted once per received frame).
    pub flooded: AtomicU64,
    /// Frames not forwarded (see [`Forward::Drop`]).
    pub filtered: AtomicU64,
    /// Flood copies that could not be made (pool empty, or a frame larger than one mbuf).
    pub copy_failed: AtomicU64,
    /// MACs in the table.
    pub macs: AtomicU64,
}

#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    // one writer (the lcore polling the switch): load + store, no locked instruction
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Where the emulated bottleneck sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BottleneckScope {
    /// One queue per egress port.
    Port,
    /// One queue for all forwarded frames (a shared trunk).
    Switch,
}

/// A bottleneck's counters as the forwarding lcore last published them, for the main lcore.
#[derive(Debug, Default)]
pub struct SharedBottleneckStats {
    enqueued: AtomicU64,
    dropped: AtomicU64,
    marked: AtomicU64,
    dequeued: AtomicU64,
    bytes_out: AtomicU64,
    queue_bytes: AtomicU64,
    max_queue_bytes: AtomicU64,
}

impl SharedBottleneckStats {
    fn publish(&self, s: &BottleneckStats) {
        let r = Ordering::Relaxed;
        self.enqueued.store(s.enqueued, r);
        self.dropped.store(s.dropped, r);
        self.marked.store(s.marked, r);
        self.dequeued.store(s.dequeued, r);
        self.bytes_out.store(s.bytes_out, r);
        self.queue_bytes.store(s.queue_bytes as u64, r);
        self.max_queue_bytes.store(s.max_queue_bytes as u64, r);
    }

    pub fn load(&self) -> BottleneckStats {
        let r = Ordering::Relaxed;
        BottleneckStats {
            enqueued: self.enqueued.load(r),
            dropped: self.dropped.load(r),
            marked: self.marked.load(r),
            dequeued: self.dequeued.load(r),
            bytes_out: self.bytes_out.load(r),
            queue_bytes: self.queue_bytes.load(r) as usize,
            max_queue_bytes: self.max_queue_bytes.load(r) as usize,
        }
    }
}

/// A frame in a bottleneck queue with the port it leaves on (one queue may feed every port).
struct Tagged {
    m: Mbuf,
    port: u16,
}

impl AsMut<[u8]> for Tagged {
    fn as_mut(&mut self) -> &mut [u8] {
        self.m.as_mut()
    }
}

/// What [`SwitchStream`] needs to run.
pub struct SwitchSpec {
    pub ports: Vec<Port>,
    pub queue: QueueId,
    pub pool: Arc<Mempool>,
    pub burst: u16,
    /// The emulated bottleneck, if any, and where it sits.
    pub bottleneck: Option<(BottleneckConfig, BottleneckScope)>,
}

/// The switch as one stream over all ports (one lcore polls it: the table needs no lock).
pub struct SwitchStream {
    table: MacTable,
    rx: MbufBatch<{ MAX_BURST as usize }>,
    io: Egress,
    tsc: Tsc,
    t0: TscInstant,
}

/// The sending half, apart from the table and the RX batch so that a received burst can be
/// drained while frames are queued for sending.
struct Egress {
    spec: SwitchSpec,
    /// Frames waiting for the TX burst of each egress port.
    out: Vec<MbufBatch<{ MAX_BURST as usize }>>,
    /// Per port: rx = received on it, tx / tx_dropped = sent / refused on it.
    port_stats: Vec<Arc<StreamStats>>,
    sw: Arc<SwitchStats>,
    /// The bottleneck queues: none, one per port, or one shared; with their published counters.
    shapers: Vec<(Bottleneck<Tagged>, Arc<SharedBottleneckStats>)>,
    scope: BottleneckScope,
    /// The time of the current poll (ns), for the bottleneck.
    now: Instant,
}

impl SwitchStream {
    pub fn new(spec: SwitchSpec) -> SwitchStream {
        let n = spec.ports.len();
        let (shapers, scope) = match spec.bottleneck {
            None => (Vec::new(), BottleneckScope::Port),
            Some((cfg, scope)) => {
                let queues = if scope == BottleneckScope::Port { n } else { 1 };
                // each queue draws its marks from its own seed, so ports do not mark in step
                let q = (0..queues)
                    .map(|i| (Bottleneck::new(BottleneckConfig { seed: cfg.seed.wrapping_add(i as u64), ..cfg }), Arc::default()))
                    .collect();
                (q, scope)
            }
        };
        SwitchStream {
            table: MacTable::new(DEFAULT_TABLE_CAPACITY, DEFAULT_AGEING_NS),
            rx: MbufBatch::new(),
            io: Egress {
                out: (0..n).map(|_| MbufBatch::new()).collect(),
                port_stats: (0..n).map(|_| Arc::new(StreamStats::default())).collect(),
                sw: Arc::new(SwitchStats::default()),
                shapers,
                scope,
                now: Instant::ZERO,
                spec,
            },
            tsc: Tsc::new(),
            t0: TscInstant(droce_dpdk::rdtsc()),
        }
    }

    /// The counters of every port (RX on it, TX on it), for the forward statistics.
    pub fn port_stats(&self) -> Vec<Arc<StreamStats>> {
        self.io.port_stats.clone()
    }

    pub fn switch_stats(&self) -> Arc<SwitchStats> {
        self.io.sw.clone()
    }

    /// The counters of each bottleneck queue: one per port (port scope), one (switch scope),
    /// or none.
    pub fn bottleneck_stats(&self) -> Vec<Arc<SharedBottleneckStats>> {
        self.io.shapers.iter().map(|(_, s)| s.clone()).collect()
    }

    fn now_ns(&self) -> u64 {
        self.tsc.cycles_to_ns(droce_dpdk::rdtsc().wrapping_sub(self.t0.0))
    }
}

impl Egress {
    /// Sends what is waiting for `port`; what the PMD does not take is freed and counted.
    fn flush(&mut self, port: usize) {
        let b = &mut self.out[port];
        if b.is_empty() {
            return;
        }
        let st = &self.port_stats[port];
        match self.spec.ports[port].tx_burst(self.spec.queue, b) {
            Ok(sent) => {
                bump(&st.tx, u64::from(sent));
                if !b.is_empty() {
                    bump(&st.tx_dropped, b.clear() as u64);
                }
            }
            Err(_) => bump(&st.tx_dropped, b.clear() as u64),
        }
    }

    /// Sends `m` on `port`: through the bottleneck when there is one, else straight to the
    /// port's next TX burst.
    fn emit(&mut self, port: usize, m: Mbuf) {
        if self.shapers.is_empty() {
            return self.queue_tx(port, m);
        }
        let q = if self.scope == BottleneckScope::Port { port } else { 0 };
        // a tail drop frees the frame here; the model counts it
        let _ = self.shapers[q].0.enqueue(self.now, Tagged { m, port: port as u16 });
    }

    /// Moves every frame the bottleneck queues have finished serialising by now to its port.
    fn release(&mut self) {
        for q in 0..self.shapers.len() {
            while let Some(t) = self.shapers[q].0.dequeue(self.now) {
                self.queue_tx(usize::from(t.port), t.m);
            }
            let (b, shared) = &self.shapers[q];
            shared.publish(&b.stats());
        }
    }

    /// Queues `m` for the TX burst of `port`, sending a full batch first.
    fn queue_tx(&mut self, port: usize, m: Mbuf) {
        if let Err(m) = self.out[port].push(m) {
            self.flush(port);
            let _ = self.out[port].push(m);
        }
    }

    /// A private copy of `m` for one more egress port. Copied, not shared by reference count:
    /// the ports run with fast mbuf free, which requires every sent mbuf to hold one reference.
    fn copy(&self, m: &Mbuf) -> Option<Mbuf> {
        let r = if m.nb_segs() == 1 { self.spec.pool.alloc_from_slice(m.data()) } else { self.spec.pool.alloc_from_slice(&m.to_vec()) };
        match r {
            Ok(c) => Some(c),
            Err(_) => {
                bump(&self.sw.copy_failed, 1);
                None
            }
        }
    }

    /// Sends `m`, received on `ingress`, where `fwd` says.
    fn route(&mut self, ingress: usize, fwd: Forward, m: Mbuf) {
        let n = self.spec.ports.len();
        match fwd {
            Forward::Port(p) if usize::from(p) < n => self.emit(usize::from(p), m),
            Forward::Port(_) | Forward::Drop => bump(&self.sw.filtered, 1),
            Forward::Flood => {
                bump(&self.sw.flooded, 1);
                if n < 2 {
                    return;
                }
                // every other port gets a copy, the last of them the original
                let last = if ingress + 1 == n { n - 2 } else { n - 1 };
                for p in (0..n).filter(|&p| p != ingress && p != last) {
                    if let Some(c) = self.copy(&m) {
                        self.emit(p, c);
                    }
                }
                self.emit(last, m);
            }
        }
    }
}

impl Stream for SwitchStream {
    fn poll(&mut self) {
        let now = self.now_ns();
        self.io.now = Instant(now);
        let n = self.io.spec.ports.len();
        for ingress in 0..n {
            let got = self.io.spec.ports[ingress].rx_burst_max(self.io.spec.queue, &mut self.rx, self.io.spec.burst).unwrap_or(0);
            if got == 0 {
                continue;
            }
            bump(&self.io.port_stats[ingress].rx, u64::from(got));
            for m in self.rx.drain() {
                let fwd = self.table.decide(ingress as u16, m.data(), now);
                self.io.route(ingress, fwd, m);
            }
        }
        self.io.release();
        for p in 0..n {
            self.io.flush(p);
        }
        self.io.sw.macs.store(self.table.len() as u64, Ordering::Relaxed);
    }

    fn stats(&self) -> &Arc<StreamStats> {
        &self.io.port_stats[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];
    const BCAST: [u8; 6] = [0xff; 6];
    const SEC: u64 = 1_000_000_000;

    fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f
    }

    #[test]
    fn unknown_is_flooded_then_learnt_unicast_goes_to_one_port() {
        let mut t = MacTable::new(16, DEFAULT_AGEING_NS);
        // A on port 0 asks for B (broadcast ARP): flooded, A learnt
        assert_eq!(t.decide(0, &frame(BCAST, A), 0), Forward::Flood);
        assert_eq!(t.lookup(&A, 0), Some(0));
        // B not yet known: a unicast to it is flooded too
        assert_eq!(t.decide(0, &frame(B, A), 1), Forward::Flood);
        // B answers from port 3: goes to A's port only, and B is learnt
        assert_eq!(t.decide(3, &frame(A, B), 2), Forward::Port(0));
        assert_eq!(t.decide(0, &frame(B, A), 3), Forward::Port(3));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn multicast_destination_floods_and_multicast_source_drops() {
        let mut t = MacTable::new(16, DEFAULT_AGEING_NS);
        t.learn(B, 1, 0);
        // IPv6 ND solicited-node multicast 33:33:ff:..
        assert_eq!(t.decide(0, &frame([0x33, 0x33, 0xff, 0, 0, 1], A), 0), Forward::Flood);
        assert_eq!(t.decide(0, &frame(B, [0x01, 0, 0x5e, 0, 0, 1]), 0), Forward::Drop);
        assert_eq!(t.lookup(&[0x01, 0, 0x5e, 0, 0, 1], 0), None, "a multicast source is never learnt");
        assert_eq!(t.decide(0, &[0u8; 13], 0), Forward::Drop, "runt");
    }

    #[test]
    fn a_frame_is_never_sent_back_where_it_came_from() {
        let mut t = MacTable::new(16, DEFAULT_AGEING_NS);
        t.learn(B, 2, 0);
        assert_eq!(t.decide(2, &frame(B, A), 0), Forward::Drop);
    }

    #[test]
    fn a_station_that_moves_is_relearnt_at_once() {
        let mut t = MacTable::new(16, DEFAULT_AGEING_NS);
        assert_eq!(t.decide(0, &frame(BCAST, A), 0), Forward::Flood);
        assert_eq!(t.decide(1, &frame(BCAST, A), 5), Forward::Flood);
        assert_eq!(t.decide(2, &frame(A, B), 6), Forward::Port(1));
    }

    #[test]
    fn entries_age_out() {
        let mut t = MacTable::new(16, 10 * SEC);
        t.learn(A, 1, 0);
        assert_eq!(t.lookup(&A, 10 * SEC), Some(1));
        assert_eq!(t.lookup(&A, 10 * SEC + 1), None);
        assert_eq!(t.decide(0, &frame(A, B), 10 * SEC + 1), Forward::Flood);
        // traffic from A keeps it alive
        t.learn(A, 1, 10 * SEC + 2);
        assert_eq!(t.lookup(&A, 19 * SEC), Some(1));
        t.expire(30 * SEC);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_table_is_bounded_and_makes_room_from_aged_entries() {
        let mut t = MacTable::new(4, 10 * SEC);
        for i in 0..10u8 {
            t.learn([0x02, 0, 0, 0, 1, i], 1, 0);
        }
        assert_eq!(t.len(), 4);
        assert_eq!(t.lookup(&[0x02, 0, 0, 0, 1, 9], 0), None, "not learnt when full");
        // a frame to an unlearnt MAC is still delivered (flooded)
        assert_eq!(t.decide(0, &frame([0x02, 0, 0, 0, 1, 9], A), 1), Forward::Flood);
        // once the old ones have aged, new MACs are learnt again
        t.learn(A, 3, 11 * SEC);
        assert_eq!(t.lookup(&A, 11 * SEC), Some(3));
        assert_eq!(t.len(), 1);
    }
}
