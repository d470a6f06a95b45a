//! An N-node fabric for congestion experiments: hosts behind a switch whose egress ports
//! queue, tail-drop and ECN-mark ([`Bottleneck`]), on one virtual clock, deterministic by seed.
//!
//! ```text
//!   Star (incast): every host on one switch; the egress port toward a receiver is where
//!   N senders meet.
//!     sender 0 --uplink--\                         /--egress--> receiver 0
//!     sender 1 --uplink---+-- switch (per-host egress ports) --+
//!     ...                /                          \--egress--> sender i (ACKs, CNPs)
//!
//!   Dumbbell: senders on switch L, receivers on switch R, one L->R and one R->L core
//!   port between them; the L->R core port is the one every flow shares.
//! ```
//!
//! A frame from host `h` to host `d` is serialised on `h`'s uplink (a non-marking
//! [`Bottleneck`] at the host's line rate), crosses a cable (`hop_delay`), is queued on the
//! switch's egress port toward `d` (dumbbell: first on the core port, then a cable, then the
//! far switch's egress port) and crosses the last cable to `d`. A device hands a frame to its
//! uplink only when the uplink is idle, so a host never sends faster than its NIC and its
//! transport sees back-pressure the way a NIC's does. Routing is by destination MAC; a frame
//! for an unknown MAC is counted and dropped.
//!
//! Streams ([`Fabric::add_stream`]) are the applications: an RC QP pair per stream, WRITEs
//! or SENDs of one size with K outstanding, every message's bytes checked on arrival when
//! asked.

use super::{rc_connect, Node, RcOpts, MEM_BASE};
use crate::bottleneck::{Bottleneck, BottleneckConfig, BottleneckStats};
use crate::qp::QpHandle;
use crate::rng::SplitMix64;
use crate::status::{WcOpcode, WcStatus};
use crate::time::{Duration, Instant};
use crate::verbs::{RecvWr, SendOpcode, SendWr};
use crate::wire::{EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet, UdpPacket, ROCE_V2_PORT};
use crate::{DeviceConfig, Memory};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// How the hosts are wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One switch; incast when several senders write to one receiver.
    Star,
    /// Senders on one switch, receivers on another, one core link between them.
    Dumbbell,
}

/// The fabric: how many hosts, their line rate, the switch ports' queues, the cables.
#[derive(Debug, Clone, Copy)]
pub struct FabricConfig {
    pub topology: Topology,
    /// Hosts `0..senders`.
    pub senders: usize,
    /// Hosts `senders..senders + receivers`.
    pub receivers: usize,
    /// Line rate of every host's NIC (its uplink).
    pub host_rate_bps: u64,
    /// Every switch egress port (toward a host, and the dumbbell's core ports): rate, buffer,
    /// marking thresholds. The seed is varied per port.
    pub switch: BottleneckConfig,
    /// Propagation delay of one cable (host to switch, switch to switch).
    pub hop_delay: Duration,
    /// Registered memory of each host.
    pub mem_len: usize,
    /// Seed of the ports' marking draws and of the devices.
    pub seed: u64,
}

impl FabricConfig {
    /// `senders` -> 1 on one switch: 10 Gb/s everywhere, 2 us cables (a base RTT of about
    /// 10 us with 1 KiB frames), and the switch port of [`BottleneckConfig::default`]: marking
    /// from 40 KiB to 160 KiB (pmax 0.2), a buffer of 4 x Kmax.
    pub fn incast(senders: usize) -> FabricConfig {
        let switch = BottleneckConfig::default();
        FabricConfig {
            topology: Topology::Star,
            senders,
            receivers: 1,
            host_rate_bps: switch.rate_bps,
            switch: BottleneckConfig { queue_bytes: 4 * switch.kmax, ..switch },
            hop_delay: Duration::from_micros(2),
            mem_len: 16 << 20,
            seed: 1,
        }
    }

    /// `pairs` senders, each to its own receiver, through one shared core link.
    pub fn dumbbell(pairs: usize) -> FabricConfig {
        FabricConfig { topology: Topology::Dumbbell, receivers: pairs, ..FabricConfig::incast(pairs) }
    }

    pub fn hosts(&self) -> usize {
        self.senders + self.receivers
    }
}

/// A switch egress port or a host uplink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// Host `h`'s NIC toward its switch.
    Uplink(usize),
    /// The switch port toward host `h`.
    Egress(usize),
    /// Dumbbell: the senders' switch toward the receivers' (`Core(0)`), and back (`Core(1)`).
    Core(usize),
}

/// What a stream posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOp {
    Write,
    Send,
}

/// One application flow: `from` posts `op`s of `size` bytes to `to`, `outstanding` at a time,
/// `count` of them (None: forever).
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    pub from: usize,
    pub to: usize,
    pub op: StreamOp,
    pub size: usize,
    pub outstanding: usize,
    pub count: Option<u64>,
    /// Fill every message with its own bytes and compare them where they land.
    pub verify: bool,
}

/// What a stream has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    pub posted: u64,
    /// Messages completed at the sender (acknowledged).
    pub completed: u64,
    /// Payload bytes of those.
    pub bytes_completed: u64,
    /// SEND messages received (receive completions).
    pub received: u64,
    /// Messages whose bytes were compared and found right where they landed.
    pub verified: u64,
    /// Completions with an error status.
    pub errors: u64,
}

struct Stream {
    spec: StreamSpec,
    qp_from: QpHandle,
    qp_to: QpHandle,
    /// Source slots on the sender, destination slots on the receiver: `slots` x `size` each.
    src: u64,
    dst: u64,
    slots: u64,
    /// Receives posted so far (SEND streams).
    recv_posted: u64,
    stats: StreamStats,
}

/// Counters of the fabric itself (the ports count in [`BottleneckStats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Frames given to hosts.
    pub delivered: u64,
    /// Frames for a MAC no host has.
    pub unroutable: u64,
    /// CNPs (BTH opcode 0x81) given to hosts.
    pub cnps: u64,
}

/// Where a frame in flight on a cable is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Hop {
    /// Arrives at switch `s` (0, or 1 = the dumbbell's receiver side).
    Switch(usize),
    /// Arrives at host `h`.
    Host(usize),
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct OnCable {
    at: Instant,
    seq: u64,
    hop: Hop,
    frame: Vec<u8>,
}

/// N hosts, their uplinks, one or two switches, and the streams between them.
pub struct Fabric {
    pub cfg: FabricConfig,
    pub nodes: Vec<Node>,
    pub now: Instant,
    pub stats: FabricStats,
    /// Bytes of frames from host `s` given to any host (headers and retransmissions included).
    pub delivered_bytes_from: Vec<u64>,
    /// CNPs given to host `h`.
    pub cnps_to: Vec<u64>,
    /// Uplinks `0..H`, egress ports `H..2H`, core ports `2H..2H+2`.
    ports: Vec<Bottleneck<Vec<u8>>>,
    cables: BinaryHeap<Reverse<OnCable>>,
    seq: u64,
    by_mac: HashMap<[u8; 6], usize>,
    streams: Vec<Stream>,
    /// (host, local QPN) -> stream.
    by_qp: HashMap<(usize, u32), usize>,
    /// Next free byte of each host's memory for stream buffers.
    mem_next: Vec<u64>,
    pool: Vec<Vec<u8>>,
    noise: Vec<u8>,
}

impl Fabric {
    /// Builds the hosts; `dev(h)` gives host `h`'s device configuration (its MAC, GIDs and
    /// seed are replaced by the fabric's).
    pub fn new(cfg: FabricConfig, mut dev: impl FnMut(usize) -> DeviceConfig) -> Fabric {
        assert!(cfg.senders >= 1 && cfg.receivers >= 1, "a fabric needs a sender and a receiver");
        assert!(cfg.senders <= 100 && cfg.receivers <= 100, "host ids are one byte: at most 100 senders and 100 receivers");
        let hosts = cfg.hosts();
        let nodes: Vec<Node> = (0..hosts)
            .map(|h| {
                let id = if h < cfg.senders { 1 + h } else { 101 + h - cfg.senders } as u8;
                let seed = cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ h as u64;
                Node::with_config(id, cfg.mem_len, DeviceConfig { seed, ..dev(h) })
            })
            .collect();
        let by_mac = nodes.iter().enumerate().map(|(h, n)| (n.mac, h)).collect();
        let mut ports = Vec::with_capacity(2 * hosts + 2);
        for _ in 0..hosts {
            ports.push(Bottleneck::new(BottleneckConfig::unmarked(cfg.host_rate_bps)));
        }
        for p in 0..hosts + 2 {
            let seed = cfg.switch.seed.wrapping_add(cfg.seed.wrapping_mul(0x1000_0000_01b3)).wrapping_add(p as u64);
            ports.push(Bottleneck::new(BottleneckConfig { seed, ..cfg.switch }));
        }
        let mut rng = SplitMix64::new(0x1234_5678_9abc_def1 ^ cfg.seed);
        let noise = (0..(256 * 1024) / 8).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
        Fabric {
            cfg,
            nodes,
            now: Instant::ZERO,
            stats: FabricStats::default(),
            delivered_bytes_from: vec![0; hosts],
            cnps_to: vec![0; hosts],
            ports,
            cables: BinaryHeap::new(),
            seq: 0,
            by_mac,
            streams: Vec::new(),
            by_qp: HashMap::new(),
            mem_next: vec![MEM_BASE; hosts],
            pool: Vec::new(),
            noise,
        }
    }

    /// Host index of sender `i`.
    pub fn sender(&self, i: usize) -> usize {
        assert!(i < self.cfg.senders);
        i
    }

    /// Host index of receiver `j`.
    pub fn receiver(&self, j: usize) -> usize {
        assert!(j < self.cfg.receivers);
        self.cfg.senders + j
    }

    fn port_index(&self, p: Port) -> usize {
        let h = self.cfg.hosts();
        match p {
            Port::Uplink(i) if i < h => i,
            Port::Egress(i) if i < h => h + i,
            Port::Core(i) if i < 2 && self.cfg.topology == Topology::Dumbbell => 2 * h + i,
            _ => panic!("no port {p:?} in this fabric"),
        }
    }

    pub fn port(&self, p: Port) -> &Bottleneck<Vec<u8>> {
        &self.ports[self.port_index(p)]
    }

    pub fn port_stats(&self, p: Port) -> BottleneckStats {
        self.port(p).stats()
    }

    /// The port every flow to receiver 0 shares: its switch egress port (star) or the core
    /// link toward the receivers (dumbbell).
    pub fn bottleneck(&self) -> Port {
        match self.cfg.topology {
            Topology::Star => Port::Egress(self.cfg.senders),
            Topology::Dumbbell => Port::Core(0),
        }
    }

    /// Every port, for totals and conservation checks.
    pub fn ports(&self) -> impl Iterator<Item = (Port, &Bottleneck<Vec<u8>>)> {
        let h = self.cfg.hosts();
        let cores = if self.cfg.topology == Topology::Dumbbell { 2 } else { 0 };
        (0..h).map(Port::Uplink).chain((0..h).map(Port::Egress)).chain((0..cores).map(Port::Core)).map(move |p| (p, self.port(p)))
    }

    /// Frames on cables now.
    pub fn on_cables(&self) -> usize {
        self.cables.len()
    }

    fn switch_of(&self, h: usize) -> usize {
        match self.cfg.topology {
            Topology::Star => 0,
            Topology::Dumbbell => usize::from(h >= self.cfg.senders),
        }
    }

    /// Connects an RC QP pair for `spec` and starts posting; returns the stream's index.
    pub fn add_stream(&mut self, spec: StreamSpec, opts: RcOpts) -> usize {
        let (from, to) = (spec.from, spec.to);
        assert!(from != to && from < self.nodes.len() && to < self.nodes.len(), "stream {from} -> {to}");
        assert!(spec.size > 0 && spec.outstanding > 0);
        assert!(spec.size <= self.noise.len() / 2, "messages up to {} bytes", self.noise.len() / 2);
        let (a, b) = if from < to {
            let (l, r) = self.nodes.split_at_mut(to);
            (&mut l[from], &mut r[0])
        } else {
            let (l, r) = self.nodes.split_at_mut(from);
            (&mut r[0], &mut l[to])
        };
        let (qp_from, qp_to) = rc_connect(a, b, opts);
        let nf = a.dev.query_qp(qp_from).expect("qp").qp_num;
        let nt = b.dev.query_qp(qp_to).expect("qp").qp_num;
        // One slot more than can be outstanding: a slot is reused only after its message
        // has completed and been checked.
        let slots = spec.outstanding as u64 + 1;
        let src = self.alloc(from, slots * spec.size as u64);
        let dst = self.alloc(to, slots * spec.size as u64);
        let idx = self.streams.len();
        self.by_qp.insert((from, nf.value()), idx);
        self.by_qp.insert((to, nt.value()), idx);
        self.streams.push(Stream { spec, qp_from, qp_to, src, dst, slots, recv_posted: 0, stats: StreamStats::default() });
        self.post(idx);
        idx
    }

    fn alloc(&mut self, h: usize, len: u64) -> u64 {
        let at = self.mem_next[h];
        let end = at + len;
        assert!(end <= MEM_BASE + self.cfg.mem_len as u64, "host {h}: stream buffers exceed mem_len {}", self.cfg.mem_len);
        self.mem_next[h] = end;
        at
    }

    /// The stream's QPs: the sender's and the receiver's.
    pub fn stream_qps(&self, s: usize) -> (QpHandle, QpHandle) {
        (self.streams[s].qp_from, self.streams[s].qp_to)
    }

    pub fn stream_stats(&self, s: usize) -> StreamStats {
        self.streams[s].stats
    }

    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// The bytes message `m` of stream `s` carries (when the stream verifies).
    pub fn message_bytes(&self, s: usize, m: u64) -> &[u8] {
        self.pattern(s, m, self.streams[s].spec.size)
    }

    /// Where message `m` of stream `s` lands: the receiving host and the address.
    pub fn landing(&self, s: usize, m: u64) -> (usize, u64) {
        let st = &self.streams[s];
        (st.spec.to, st.dst + (m % st.slots) * st.spec.size as u64)
    }

    /// The bytes of message `m` of stream `s`: a window of the noise at an offset of its own.
    fn pattern(&self, s: usize, m: u64, len: usize) -> &[u8] {
        let room = (self.noise.len() - len) as u64;
        let key = (s as u64) << 48 ^ m;
        let off = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % (room + 1);
        &self.noise[off as usize..off as usize + len]
    }

    /// Tops stream `s` up to its outstanding messages (and its receives).
    fn post(&mut self, s: usize) {
        let st = &self.streams[s];
        let (spec, slots) = (st.spec, st.slots);
        let size = spec.size as u64;
        if spec.op == StreamOp::Send {
            // Receives ahead of the sends: one per slot not yet holding an unchecked message.
            while self.streams[s].recv_posted < self.streams[s].stats.received + slots {
                let st = &self.streams[s];
                let r = st.recv_posted;
                let (addr, qp) = (st.dst + (r % slots) * size, st.qp_to);
                let node = &mut self.nodes[spec.to];
                let lkey = node.mr.lkey;
                node.dev.post_recv(qp, RecvWr::new(r).with_sge(addr, spec.size as u32, lkey)).expect("post_recv");
                self.streams[s].recv_posted += 1;
            }
        }
        loop {
            let st = &self.streams[s];
            let m = st.stats.posted;
            if m - st.stats.completed - st.stats.errors >= spec.outstanding as u64 || spec.count.is_some_and(|c| m >= c) {
                break;
            }
            let (src, dst, qp) = (st.src + (m % slots) * size, st.dst + (m % slots) * size, st.qp_from);
            if spec.verify {
                let p = self.pattern(s, m, spec.size).to_vec();
                self.nodes[spec.from].dev.memory_mut().write(src, &p).expect("source slot");
            }
            let (lkey, rkey) = (self.nodes[spec.from].mr.lkey, self.nodes[spec.to].mr.rkey);
            let wr = match spec.op {
                StreamOp::Write => SendWr::new(m, SendOpcode::Write).with_sge(src, spec.size as u32, lkey).with_remote(dst, rkey),
                StreamOp::Send => SendWr::new(m, SendOpcode::Send).with_sge(src, spec.size as u32, lkey),
            };
            self.nodes[spec.from].dev.post_send(qp, wr).expect("post_send");
            self.streams[s].stats.posted += 1;
        }
    }

    /// Polls every host's CQ and gives the completions to their streams.
    fn run_apps(&mut self) -> bool {
        let mut any = false;
        for h in 0..self.nodes.len() {
            while let Some(wc) = self.nodes[h].poll() {
                any = true;
                let s = *self.by_qp.get(&(h, wc.qp_num.value())).expect("completion of a QP no stream owns");
                let st = &self.streams[s];
                let (spec, slots) = (st.spec, st.slots);
                let size = spec.size as u64;
                if wc.status != WcStatus::Success {
                    self.streams[s].stats.errors += 1;
                    continue;
                }
                let m = wc.wr_id;
                if h == spec.from {
                    assert_eq!(m, st.stats.completed, "stream {s}: send completions out of order");
                    if spec.op == StreamOp::Write && spec.verify {
                        // Acknowledged means placed: the target slot must hold the message.
                        let dst = st.dst + (m % slots) * size;
                        let got = self.nodes[spec.to].dev.memory().slice(dst, spec.size);
                        assert!(got == self.pattern(s, m, spec.size), "stream {s}: WRITE {m} landed corrupted at {dst:#x}");
                        self.streams[s].stats.verified += 1;
                    }
                    let st = &mut self.streams[s].stats;
                    st.completed += 1;
                    st.bytes_completed += size;
                } else {
                    assert_eq!(wc.opcode, WcOpcode::Recv);
                    assert_eq!(m, st.stats.received, "stream {s}: receives out of order");
                    assert_eq!(wc.byte_len as usize, spec.size, "stream {s}: SEND {m} length");
                    if spec.verify {
                        let dst = st.dst + (m % slots) * size;
                        let got = self.nodes[spec.to].dev.memory().slice(dst, spec.size);
                        assert!(got == self.pattern(s, m, spec.size), "stream {s}: SEND {m} landed corrupted");
                        self.streams[s].stats.verified += 1;
                    }
                    self.streams[s].stats.received += 1;
                }
                self.post(s);
            }
        }
        any
    }

    fn put_on_cable(&mut self, at: Instant, hop: Hop, frame: Vec<u8>) {
        self.seq += 1;
        self.cables.push(Reverse(OnCable { at, seq: self.seq, hop, frame }));
    }

    fn dest_of(&self, frame: &[u8]) -> Option<usize> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        self.by_mac.get(&eth.dst_addr().0).copied()
    }

    /// A frame arrives at switch `sw`: onto the egress port toward its host, or the core.
    fn switch_in(&mut self, sw: usize, frame: Vec<u8>) {
        let Some(d) = self.dest_of(&frame) else {
            self.stats.unroutable += 1;
            self.pool.push(frame);
            return;
        };
        let port = if self.switch_of(d) == sw { Port::Egress(d) } else { Port::Core(sw) };
        let i = self.port_index(port);
        if let Err(f) = self.ports[i].enqueue(self.now, frame) {
            self.pool.push(f);
        }
    }

    fn host_in(&mut self, h: usize, mut frame: Vec<u8>) {
        self.stats.delivered += 1;
        if let Some(src) = EthernetFrame::new_checked(&frame[..]).ok().and_then(|e| self.by_mac.get(&e.src_addr().0).copied()) {
            self.delivered_bytes_from[src] += frame.len() as u64;
        }
        if is_cnp(&frame) {
            self.stats.cnps += 1;
            self.cnps_to[h] += 1;
        }
        self.nodes[h].dev.handle_rx(self.now, &mut frame);
        self.pool.push(frame);
    }

    /// One round at `now`: ports hand over the frames they have finished, cables deliver
    /// what is due, hosts with an idle uplink transmit, due timers fire, applications run.
    /// If nothing happened, the clock jumps to the next event, but not past `limit`. Returns
    /// false when nothing is left to happen (or `limit` was reached).
    fn round(&mut self, limit: Option<Instant>) -> bool {
        let mut busy = self.run_apps();
        let hosts = self.cfg.hosts();
        for i in 0..self.ports.len() {
            while let Some(f) = self.ports[i].dequeue(self.now) {
                busy = true;
                let hop = if i < hosts {
                    Hop::Switch(self.switch_of(i))
                } else if i < 2 * hosts {
                    Hop::Host(i - hosts)
                } else {
                    Hop::Switch(1 - (i - 2 * hosts))
                };
                self.put_on_cable(self.now + self.cfg.hop_delay, hop, f);
            }
        }
        while self.cables.peek().is_some_and(|Reverse(c)| c.at <= self.now) {
            let Reverse(c) = self.cables.pop().expect("peeked");
            busy = true;
            match c.hop {
                Hop::Switch(s) => self.switch_in(s, c.frame),
                Hop::Host(h) => self.host_in(h, c.frame),
            }
        }
        for h in 0..hosts {
            if self.nodes[h].dev.poll_timeout().is_some_and(|t| t <= self.now) {
                self.nodes[h].dev.handle_timeout(self.now);
                busy = true;
            }
            // The NIC takes a frame only when its wire is free.
            while self.ports[h].is_empty() {
                let mut buf = self.pool.pop().unwrap_or_default();
                buf.resize(self.nodes[h].dev.max_frame_len(), 0);
                let Some(n) = self.nodes[h].dev.poll_transmit(self.now, &mut buf) else {
                    self.pool.push(buf);
                    break;
                };
                buf.truncate(n);
                busy = true;
                let _ = self.ports[h].enqueue(self.now, buf);
            }
        }
        if busy {
            return true;
        }
        let next = self
            .ports
            .iter()
            .filter_map(|p| p.poll_at())
            .chain(self.cables.peek().map(|Reverse(c)| c.at))
            .chain(self.nodes.iter_mut().filter_map(|n| n.dev.poll_timeout()))
            .min();
        match (next, limit) {
            (Some(t), Some(l)) if t > l => {
                self.now = self.now.max(l);
                false
            }
            (Some(t), _) => {
                self.now = self.now.max(t);
                true
            }
            (None, Some(l)) => {
                self.now = self.now.max(l);
                false
            }
            (None, None) => false,
        }
    }

    /// One round; false when the fabric is idle (nothing queued, on a cable, or timed).
    pub fn step(&mut self) -> bool {
        self.round(None)
    }

    /// Runs until the clock reaches `t` (it is then exactly `t`), or `max_rounds` rounds.
    /// Returns whether `t` was reached.
    pub fn run_until(&mut self, t: Instant, max_rounds: u64) -> bool {
        for _ in 0..max_rounds {
            if self.now >= t {
                return true;
            }
            self.round(Some(t));
        }
        self.now >= t
    }

    /// Runs until idle (or `max_rounds`); returns whether it became idle.
    pub fn run_idle(&mut self, max_rounds: u64) -> bool {
        (0..max_rounds).any(|_| !self.round(None))
    }
}

/// True for a RoCEv2 CNP (BTH opcode 0x81) over IPv4 or IPv6.
fn is_cnp(frame: &[u8]) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else { return false };
    let ip = eth.payload();
    let udp = match eth.ethertype() {
        EtherType::Ipv4 => match Ipv4Packet::new_checked(ip) {
            Ok(p) => &ip[p.header_len() as usize..p.total_len() as usize],
            Err(_) => return false,
        },
        EtherType::Ipv6 => match Ipv6Packet::new_checked(ip) {
            Ok(p) => &ip[crate::wire::ipv6::HEADER_LEN..crate::wire::ipv6::HEADER_LEN + p.payload_len() as usize],
            Err(_) => return false,
        },
        _ => return false,
    };
    let Ok(u) = UdpPacket::new_checked(udp) else { return false };
    u.dst_port() == ROCE_V2_PORT && u.payload().first() == Some(&0x81)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::CcConfig;

    fn write_stream(from: usize, to: usize, size: usize, count: u64) -> StreamSpec {
        StreamSpec { from, to, op: StreamOp::Write, size, outstanding: 4, count: Some(count), verify: true }
    }

    #[test]
    fn one_sender_is_paced_by_its_uplink() {
        // 1 -> 1 with no competition: the receiver's egress port never holds more than a
        // frame or two, and the transfer takes about size * 8 / rate.
        let mut f = Fabric::new(FabricConfig::incast(1), |_| no_cc());
        let (s, r) = (f.sender(0), f.receiver(0));
        let st = f.add_stream(write_stream(s, r, 64 << 10, 32), RcOpts::default());
        assert!(f.run_idle(10_000_000));
        let ss = f.stream_stats(st);
        assert_eq!((ss.completed, ss.verified, ss.errors), (32, 32, 0));
        let b = f.port_stats(f.bottleneck());
        assert_eq!(b.dropped, 0);
        assert!(b.max_queue_bytes <= 2 * 1200, "a lone sender cannot queue at an equal-rate port: {}", b.max_queue_bytes);
        let wire_ns = b.bytes_out * 8 * 1_000_000_000 / f.cfg.host_rate_bps;
        let took = f.now.as_nanos();
        assert!(took >= wire_ns && took < wire_ns + wire_ns / 4 + 200_000, "took {took} ns for {wire_ns} ns of frames");
    }

    fn no_cc() -> DeviceConfig {
        DeviceConfig { cc: CcConfig::off(), ..DeviceConfig::default() }
    }

    #[test]
    fn incast_queues_at_the_receivers_port() {
        let mut f = Fabric::new(FabricConfig::incast(4), |_| no_cc());
        let r = f.receiver(0);
        let ids: Vec<usize> = (0..4).map(|i| f.add_stream(write_stream(i, r, 16 << 10, 20), RcOpts::default())).collect();
        assert!(f.run_idle(10_000_000));
        for s in ids {
            assert_eq!(f.stream_stats(s).verified, 20);
        }
        let b = f.port_stats(f.bottleneck());
        assert!(b.max_queue_bytes > 20_000, "four senders at line rate must queue: {}", b.max_queue_bytes);
        assert_eq!(b.marked, 0, "without CC the devices send Not-ECT frames: nothing to mark");
        assert_eq!(f.stats.cnps, 0);
        for (p, port) in f.ports() {
            let s = port.stats();
            assert_eq!(s.enqueued, s.dequeued, "{p:?} drained");
        }
    }

    #[test]
    fn with_cc_the_port_marks_and_the_receiver_answers_with_cnps() {
        let mut f = Fabric::new(FabricConfig::incast(4), |_| DeviceConfig::default());
        let r = f.receiver(0);
        let ids: Vec<usize> = (0..4).map(|i| f.add_stream(write_stream(i, r, 16 << 10, 40), RcOpts::default())).collect();
        assert!(f.run_idle(10_000_000));
        for s in ids {
            assert_eq!(f.stream_stats(s).verified, 40);
        }
        let b = f.port_stats(f.bottleneck());
        assert!(b.marked > 0, "ECT frames above Kmin are marked: {b:?}");
        assert_eq!(f.nodes[r].dev.counters().ecn_ce_rcvd, b.marked, "every mark reaches the receiver");
        let sent = f.nodes[r].dev.counters().cnp_sent;
        assert!(sent > 0);
        assert_eq!(f.stats.cnps, sent, "the fabric sees every CNP the receiver sends");
        let rcvd: u64 = (0..4).map(|i| f.nodes[i].dev.counters().cnp_rcvd).sum();
        assert_eq!(rcvd, sent);
        assert_eq!(f.cnps_to.iter().take(4).sum::<u64>(), sent, "CNPs go to the senders");
    }

    #[test]
    fn dumbbell_flows_share_the_core() {
        let mut f = Fabric::new(FabricConfig::dumbbell(2), |_| no_cc());
        let a = f.add_stream(write_stream(0, f.receiver(0), 8 << 10, 30), RcOpts::default());
        let b = f.add_stream(StreamSpec { op: StreamOp::Send, ..write_stream(1, f.receiver(1), 8 << 10, 30) }, RcOpts::default());
        assert!(f.run_idle(10_000_000));
        assert_eq!(f.stream_stats(a).verified, 30);
        assert_eq!(f.stream_stats(b).verified, 30);
        assert_eq!(f.stream_stats(b).received, 30);
        let core = f.port_stats(Port::Core(0));
        let to_r0 = f.port_stats(Port::Egress(f.receiver(0)));
        let to_r1 = f.port_stats(Port::Egress(f.receiver(1)));
        assert_eq!(core.dequeued, to_r0.enqueued + to_r1.enqueued, "everything for the receivers crosses the core");
        assert!(core.max_queue_bytes > to_r0.max_queue_bytes);
    }

    #[test]
    fn run_until_stops_on_the_dot_and_is_deterministic() {
        let run = || {
            let mut f = Fabric::new(FabricConfig::incast(2), |_| DeviceConfig::default());
            let r = f.receiver(0);
            for i in 0..2 {
                f.add_stream(StreamSpec { count: None, ..write_stream(i, r, 32 << 10, 1) }, RcOpts::default());
            }
            assert!(f.run_until(Instant(3_000_000), 10_000_000));
            assert_eq!(f.now, Instant(3_000_000));
            (f.port_stats(f.bottleneck()), f.delivered_bytes_from.clone(), f.stream_stats(0), f.stream_stats(1))
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.2.completed > 10 && a.3.completed > 10);
    }
}
