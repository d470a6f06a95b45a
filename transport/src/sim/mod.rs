//! A deterministic two-node network for tests, benchmarks and fuzzing: two devices, a
//! virtual clock, and a seeded link that drops, duplicates, reorders, delays and flips bits
//! (quinn-proto's `tests/util.rs` `Pair`, smoltcp's fault injector). Bit flips must be
//! caught by the ICRC. [`NeighPair`] runs two ports' neighbour resolution on the same link.
//! [`fabric::Fabric`] is the N-node version: hosts with line-rate uplinks behind a switch
//! whose egress ports queue, drop and ECN-mark ([`crate::bottleneck`]).

use crate::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use crate::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use crate::rng::SplitMix64;
use crate::time::{Duration, Instant};
use crate::types::{Gid, Psn, QKey};
use crate::verbs::{AccessFlags, AddressVector, CqHandle, MemoryRegion, PdHandle, UdDest, WorkCompletion};
use crate::neigh::{NeighConfig, Neighbours, Route, MAX_CONTROL_FRAME};
use crate::wire::{classify, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, FrameKind, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
use crate::device::TxPass;
use crate::{Device, DeviceConfig, Memory, VecMemory};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub mod fabric;

/// Moves a simulated clock to the next event, `next` (the earliest frame arrival or timer;
/// the clock never goes back); false when there is none: the network is idle. The end of
/// every simulator's step.
pub fn advance_clock(now: &mut Instant, next: Option<Instant>) -> bool {
    match next {
        Some(t) => {
            *now = (*now).max(t);
            true
        }
        None => false,
    }
}

/// Faults of the simulated link, as probabilities per frame.
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    pub loss: f64,
    pub duplicate: f64,
    /// Probability that a frame gets an extra random delay of up to `reorder_window`.
    pub reorder: f64,
    pub reorder_window: Duration,
    pub bit_flip: f64,
    /// One-way delay of every frame.
    pub delay: Duration,
}

impl LinkConfig {
    pub const PERFECT: LinkConfig = LinkConfig {
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_window: Duration(0),
        bit_flip: 0.0,
        delay: Duration(1_000),
    };
    /// 1 % loss, 1 % duplication, 1 % reordering, 1 % bit flips.
    pub const LOSSY: LinkConfig = LinkConfig {
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_window: Duration(20_000),
        bit_flip: 0.01,
        delay: Duration(1_000),
    };
}

/// Link statistics.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkStats {
    pub sent: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub flipped: u64,
    pub delivered: u64,
    /// Frames that found the receiving node's RX ring full ([`Pair::ring`]).
    pub ring_dropped: u64,
}

/// One simulated host: a device, a PD, one MR over all its memory and one CQ.
pub struct Node {
    pub dev: Device<VecMemory>,
    pub pd: PdHandle,
    pub mr: MemoryRegion,
    pub cq: CqHandle,
    pub gid: Gid,
    pub mac: [u8; 6],
}

pub const MEM_BASE: u64 = 0x1000_0000;

impl Node {
    pub fn new(id: u8, mem_len: usize, seed: u64) -> Node {
        Node::with_eth_mtu(id, mem_len, seed, 1500)
    }

    pub fn with_eth_mtu(id: u8, mem_len: usize, seed: u64, eth_mtu: u32) -> Node {
        Node::with_config(id, mem_len, DeviceConfig { seed, eth_mtu, ..DeviceConfig::default() })
    }

    /// A node from `cfg` (its `mac` and `gids` are replaced by the node's own).
    pub fn with_config(id: u8, mem_len: usize, cfg: DeviceConfig) -> Node {
        let gid = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, id));
        let mac = [0x02, 0, 0, 0, 0, id];
        let cfg = DeviceConfig { mac, gids: vec![gid], ..cfg };
        let mut dev = Device::new(cfg, VecMemory::new(MEM_BASE, mem_len));
        let pd = dev.alloc_pd();
        let mr = dev.reg_mr(pd, MEM_BASE, mem_len as u64, AccessFlags::ALL).expect("reg_mr");
        let cq = dev.create_cq(1 << 16).expect("create_cq");
        Node { dev, pd, mr, cq, gid, mac }
    }

    pub fn av_to(&self, peer: &Node) -> AddressVector {
        AddressVector { dgid: peer.gid, dmac: peer.mac, sgid_index: 0, hop_limit: 64, traffic_class: 0, flow_label: 0 }
    }

    pub fn poll(&mut self) -> Option<WorkCompletion> {
        self.dev.poll_cq_one(self.cq).ok().flatten()
    }
}

/// RC connection parameters.
#[derive(Debug, Clone, Copy)]
pub struct RcOpts {
    pub mtu: PathMtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub psn_a: Psn,
    pub psn_b: Psn,
    pub cap: QpCap,
}

impl Default for RcOpts {
    fn default() -> Self {
        RcOpts {
            mtu: PathMtu::Mtu1024,
            // 4.096 µs * 2^8 ≈ 1 ms: short enough for fast tests.
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            psn_a: Psn::new(0x735b2c),
            psn_b: Psn::new(0x977190),
            cap: QpCap { max_send_wr: 1024, max_recv_wr: 1024, ..QpCap::default() },
        }
    }
}

struct InFlight {
    at: Instant,
    seq: u64,
    to_b: bool,
    frame: Vec<u8>,
}
impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> core::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Decides per frame (`to_b`, frame) whether the link drops it.
pub type FrameFilter = Box<dyn FnMut(bool, &[u8]) -> bool>;

/// Two nodes joined by a simulated link.
pub struct Pair {
    pub a: Node,
    pub b: Node,
    pub now: Instant,
    pub link: LinkConfig,
    pub link_up: bool,
    pub stats: LinkStats,
    /// Called for every frame put on the link (`to_b`, frame); returning true drops it.
    /// Lets tests lose one chosen packet.
    pub filter: Option<FrameFilter>,
    /// Take frames with [`Device::poll_transmit_split`] (payloads of at least this many
    /// bytes left in memory) and put them on the link linearised, as a NIC gathers a chain.
    pub split_min: Option<usize>,
    /// Frames sent split (headers, memory, trailer).
    pub split_frames: u64,
    /// Take each device's frames of a round as one segment train ([`Device::tx_train`])
    /// instead of one `poll_transmit` call each; the link sees the same frames either way.
    pub train: bool,
    /// Frames the trains made as the continuation of a QP's run ([`TxTrain::run_frames`]).
    ///
    /// [`TxTrain::run_frames`]: crate::device::TxTrain::run_frames
    pub train_run_frames: u64,
    /// Nodes (a, b) not scheduled, as a SIGSTOPped process: a paused node sends nothing,
    /// runs no timers and takes no frames; frames for it wait in its RX ring.
    pub paused: [bool; 2],
    /// Poll-mode rounds, as droce-dpdk's engine runs them: per step each node sends at most
    /// `burst` frames and takes at most `burst` from its RX ring, and a busy step lasts
    /// `round`. Without it a step sends and delivers everything that is ready at once, so a
    /// node never answers a frame before it has taken every frame that arrived with it.
    pub rounds: Option<Rounds>,
    /// Frames an RX ring holds (in use while a node is paused, or with `rounds`); frames
    /// that find it full are dropped (`LinkStats::ring_dropped`), as a PMD's RX ring does.
    pub ring: usize,
    rx_ring: [std::collections::VecDeque<Vec<u8>>; 2],
    wire: Wire,
    buf: Vec<u8>,
}

/// See [`Pair::rounds`].
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    pub burst: usize,
    pub round: Duration,
}

/// The frames in flight on a link, by arrival time, and the link's random choices.
struct Wire {
    rng: SplitMix64,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// Recycled frame buffers.
    pool: Vec<Vec<u8>>,
}

impl Wire {
    fn new(seed: u64) -> Wire {
        Wire { rng: SplitMix64::new(seed), queue: BinaryHeap::new(), seq: 0, pool: Vec::new() }
    }

    /// Puts `frame` on the link at `now` with its faults (loss, duplication, bit flips,
    /// reordering); returns the copies that will arrive (0, 1 or 2).
    fn put(&mut self, link: &LinkConfig, stats: &mut LinkStats, now: Instant, to_b: bool, frame: &[u8]) -> u32 {
        if self.rng.chance(link.loss) {
            stats.dropped += 1;
            return 0;
        }
        let copies = if self.rng.chance(link.duplicate) {
            stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut f = self.pool.pop().unwrap_or_default();
            f.clear();
            f.extend_from_slice(frame);
            if self.rng.chance(link.bit_flip) && !f.is_empty() {
                let bit = self.rng.below(f.len() as u64 * 8);
                f[(bit / 8) as usize] ^= 1 << (bit % 8);
                stats.flipped += 1;
            }
            let mut at = now + link.delay;
            if self.rng.chance(link.reorder) {
                at = at + Duration(self.rng.below(link.reorder_window.0.max(1)));
                stats.reordered += 1;
            }
            self.seq += 1;
            self.queue.push(Reverse(InFlight { at, seq: self.seq, to_b, frame: f }));
        }
        copies
    }

    /// The next frame due at `now`.
    fn due(&mut self, now: Instant) -> Option<InFlight> {
        if self.queue.peek().is_some_and(|Reverse(f)| f.at <= now) {
            self.queue.pop().map(|Reverse(f)| f)
        } else {
            None
        }
    }

    fn next_arrival(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse(f)| f.at)
    }
}

impl Pair {
    pub fn new(link: LinkConfig, seed: u64, mem_len: usize) -> Pair {
        Pair::with_eth_mtu(link, seed, mem_len, 1500)
    }

    /// A pair whose ports have Ethernet MTU `eth_mtu` (9000 allows IB MTU 4096).
    pub fn with_eth_mtu(link: LinkConfig, seed: u64, mem_len: usize, eth_mtu: u32) -> Pair {
        Pair::with_config(link, seed, mem_len, DeviceConfig { eth_mtu, ..DeviceConfig::default() })
    }

    /// A pair whose devices use `cfg` (seeds, MACs and GIDs are set per node).
    pub fn with_config(link: LinkConfig, seed: u64, mem_len: usize, cfg: DeviceConfig) -> Pair {
        let a = Node::with_config(1, mem_len, DeviceConfig { seed: seed ^ 0xa, ..cfg.clone() });
        let b = Node::with_config(2, mem_len, DeviceConfig { seed: seed ^ 0xb, ..cfg });
        let buf = vec![0u8; a.dev.max_frame_len()];
        Pair {
            a,
            b,
            now: Instant(0),
            link,
            link_up: true,
            stats: LinkStats::default(),
            filter: None,
            split_min: None,
            split_frames: 0,
            train: false,
            train_run_frames: 0,
            paused: [false; 2],
            rounds: None,
            ring: 1024,
            rx_ring: Default::default(),
            wire: Wire::new(seed),
            buf,
        }
    }

    /// Create and connect an RC QP on each node (RESET -> INIT -> RTR -> RTS).
    pub fn rc_pair(&mut self, o: RcOpts) -> (QpHandle, QpHandle) {
        rc_connect(&mut self.a, &mut self.b, o)
    }

    /// Create a UD QP with Q_Key `qkey` on each node, in RTS.
    pub fn ud_pair(&mut self, qkey: QKey) -> (QpHandle, QpHandle) {
        let cap = QpCap { max_send_wr: 1024, max_recv_wr: 1024, ..QpCap::default() };
        let qa = create(&mut self.a, QpType::Ud, cap);
        let qb = create(&mut self.b, QpType::Ud, cap);
        for (n, q) in [(&mut self.a, qa), (&mut self.b, qb)] {
            ud_up(&mut n.dev, q, qkey);
        }
        (qa, qb)
    }

    /// The UD destination of `qp` on node b (from a), or on a (from b) when `to_b` is false.
    pub fn ud_dest(&self, to_b: bool, qp: QpHandle, qkey: QKey) -> UdDest {
        let (src, dst) = if to_b { (&self.a, &self.b) } else { (&self.b, &self.a) };
        UdDest { av: src.av_to(dst), remote_qpn: dst.dev.query_qp(qp).expect("qp").qp_num, remote_qkey: qkey }
    }

    fn send(&mut self, to_b: bool, frame: &[u8]) {
        self.stats.sent += 1;
        if let Some(f) = self.filter.as_mut() {
            if f(to_b, frame) {
                self.stats.dropped += 1;
                return;
            }
        }
        if !self.link_up {
            self.stats.dropped += 1;
            return;
        }
        self.wire.put(&self.link, &mut self.stats, self.now, to_b, frame);
    }

    /// One round: both devices transmit everything they have, due frames are delivered and
    /// due timers fire; if nothing happened, the clock jumps to the next event. Returns false
    /// when the network is idle (nothing in flight, no timers).
    pub fn step(&mut self) -> bool {
        self.step_with_timer(None)
    }

    /// [`step`](Self::step) for a test that runs timers of its own next to the devices (a
    /// CM agent's): an idle round jumps the clock to `timer` too, if it comes first.
    pub fn step_with_timer(&mut self, timer: Option<Instant>) -> bool {
        let mut busy = false;
        let mut buf = core::mem::take(&mut self.buf);
        let burst = self.rounds.map_or(usize::MAX, |r| r.burst);
        for to_b in [true, false] {
            if self.paused[usize::from(!to_b)] {
                continue;
            }
            if self.train {
                busy |= self.transmit_train(to_b, &mut buf);
                continue;
            }
            for _ in 0..burst {
                let dev = if to_b { &mut self.a.dev } else { &mut self.b.dev };
                let n = match self.split_min {
                    None => dev.poll_transmit(self.now, &mut buf),
                    Some(min) => dev.poll_transmit_split(self.now, &mut buf, TxPass::All, min).map(|f| match f.payload {
                        None => f.len,
                        Some(p) => {
                            self.split_frames += 1;
                            let end = f.len + p.len;
                            if dev.memory().read(p.addr, &mut buf[f.len..end]).is_err() {
                                buf[f.len..end].fill(0);
                            }
                            buf[end..end + p.trailer().len()].copy_from_slice(p.trailer());
                            end + p.trailer().len()
                        }
                    }),
                };
                let Some(n) = n else { break };
                // Address vectors may leave the MAC to the link layer (the CM's do): this
                // link has one neighbour, the other node.
                let mut eth = EthernetFrame::new_unchecked(&mut buf[..n]);
                if n >= 6 && eth.dst_addr() == EthernetAddress([0; 6]) {
                    eth.set_dst_addr(EthernetAddress(if to_b { self.b.mac } else { self.a.mac }));
                }
                self.send(to_b, &buf[..n]);
                busy = true;
            }
        }
        self.buf = buf;
        while let Some(mut f) = self.wire.due(self.now) {
            let i = usize::from(f.to_b);
            // Through the RX ring when the node does not take every frame at once.
            if self.rounds.is_some() || self.paused[i] || !self.rx_ring[i].is_empty() {
                if self.rx_ring[i].len() >= self.ring {
                    self.stats.ring_dropped += 1;
                    self.wire.pool.push(f.frame);
                } else {
                    self.rx_ring[i].push_back(f.frame);
                }
                continue;
            }
            self.stats.delivered += 1;
            let dev = if f.to_b { &mut self.b.dev } else { &mut self.a.dev };
            dev.handle_rx(self.now, &mut f.frame);
            self.wire.pool.push(f.frame);
            busy = true;
        }
        for i in 0..2 {
            if self.paused[i] {
                continue;
            }
            for _ in 0..burst {
                let Some(mut f) = self.rx_ring[i].pop_front() else { break };
                self.stats.delivered += 1;
                let dev = if i == 1 { &mut self.b.dev } else { &mut self.a.dev };
                dev.handle_rx(self.now, &mut f);
                self.wire.pool.push(f);
                busy = true;
            }
        }
        for (i, dev) in [&mut self.a.dev, &mut self.b.dev].into_iter().enumerate() {
            if !self.paused[i] && dev.poll_timeout().is_some_and(|t| t <= self.now) {
                dev.handle_timeout(self.now);
                busy = true;
            }
        }
        if busy {
            if let Some(r) = self.rounds {
                self.now = self.now + r.round;
            }
            return true;
        }
        let (pa, pb) = (self.paused[0], self.paused[1]);
        let next = [
            self.wire.next_arrival(),
            self.a.dev.poll_timeout().filter(|_| !pa),
            self.b.dev.poll_timeout().filter(|_| !pb),
            timer,
        ]
        .into_iter()
        .flatten()
        .min();
        advance_clock(&mut self.now, next)
    }

    /// One device's frames of a round as a segment train, linearised as by `step`, then on
    /// the link in their order (the link's choices depend on nothing the train changes).
    fn transmit_train(&mut self, to_b: bool, buf: &mut [u8]) -> bool {
        let (dev, peer_mac) = if to_b { (&mut self.a.dev, self.b.mac) } else { (&mut self.b.dev, self.a.mac) };
        let mut frames = Vec::new();
        let mut train = dev.tx_train(self.now, TxPass::All, self.split_min.unwrap_or(usize::MAX));
        while let Some(f) = train.next(buf) {
            let n = match f.payload {
                None => f.len,
                Some(p) => {
                    self.split_frames += 1;
                    let end = f.len + p.len;
                    if train.memory().read(p.addr, &mut buf[f.len..end]).is_err() {
                        buf[f.len..end].fill(0);
                    }
                    buf[end..end + p.trailer().len()].copy_from_slice(p.trailer());
                    end + p.trailer().len()
                }
            };
            let mut eth = EthernetFrame::new_unchecked(&mut buf[..n]);
            if n >= 6 && eth.dst_addr() == EthernetAddress([0; 6]) {
                eth.set_dst_addr(EthernetAddress(peer_mac));
            }
            frames.push(buf[..n].to_vec());
        }
        self.train_run_frames += train.run_frames();
        drop(train);
        for f in &frames {
            self.send(to_b, f);
        }
        !frames.is_empty()
    }

    /// Step until `done` returns true, the network is idle, or `max_steps` rounds passed.
    /// Returns whether `done` became true.
    pub fn run_until(&mut self, max_steps: u64, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    /// Step until idle (or `max_steps`).
    pub fn run_idle(&mut self, max_steps: u64) -> bool {
        for _ in 0..max_steps {
            if !self.step() {
                return true;
            }
        }
        false
    }
}

/// Create an RC QP on `a` and one on `b` and connect them (RESET -> INIT -> RTR -> RTS);
/// `o.psn_a` is `a`'s send PSN, `o.psn_b` is `b`'s.
pub fn rc_connect(a: &mut Node, b: &mut Node, o: RcOpts) -> (QpHandle, QpHandle) {
    rc_connect_sr(a, b, o, false, false)
}

/// As [`rc_connect`], with the selective-repeat attribute at RTR on `a`'s QP when `sr_a`
/// and on `b`'s when `sr_b` (both when the peers negotiated it).
pub fn rc_connect_sr(a: &mut Node, b: &mut Node, o: RcOpts, sr_a: bool, sr_b: bool) -> (QpHandle, QpHandle) {
    let qa = create(a, QpType::Rc, o.cap);
    let qb = create(b, QpType::Rc, o.cap);
    let na = a.dev.query_qp(qa).expect("qp").qp_num;
    let nb = b.dev.query_qp(qb).expect("qp").qp_num;
    let (ava, avb) = (a.av_to(b), b.av_to(a));
    for (n, q, av, peer, rq, sq, sr) in [(a, qa, ava, nb, o.psn_b, o.psn_a, sr_a), (b, qb, avb, na, o.psn_a, o.psn_b, sr_b)] {
        let (at, m) = init_attr(AccessFlags::ALL);
        n.dev.modify_qp(q, &at, m).expect("INIT");
        let (mut at, mut m) = rtr_attr(av, o.mtu, peer, rq, o.max_rd_atomic, o.min_rnr_timer);
        if sr {
            at.selective_repeat = true;
            m = m | QpAttrMask::SELECTIVE_REPEAT;
        }
        n.dev.modify_qp(q, &at, m).expect("RTR");
        let (at, m) = rts_attr(sq, o.timeout, o.retry_cnt, o.rnr_retry, o.max_rd_atomic);
        n.dev.modify_qp(q, &at, m).expect("RTS");
    }
    (qa, qb)
}

fn create(n: &mut Node, ty: QpType, cap: QpCap) -> QpHandle {
    n.dev
        .create_qp(QpInitAttr { qp_type: ty, pd: n.pd, send_cq: n.cq, recv_cq: n.cq, srq: None, cap, sq_sig_all: false })
        .expect("create_qp")
}

/// RESET -> INIT -> RTR -> RTS for a UD QP.
pub fn ud_up(dev: &mut Device<VecMemory>, q: QpHandle, qkey: QKey) {
    let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey, ..QpAttr::default() };
    dev.modify_qp(q, &a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY).expect("UD INIT");
    let a = QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() };
    dev.modify_qp(q, &a, QpAttrMask::STATE).expect("UD RTR");
    let a = QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(0x2849f1), ..QpAttr::default() };
    dev.modify_qp(q, &a, QpAttrMask::STATE | QpAttrMask::SQ_PSN).expect("UD RTS");
}

/// Two ports' neighbour resolution ([`Neighbours`]) on the seeded link: each side sends
/// data frames (Ethernet + IPv4/IPv6, protocol 253) to IP destinations; ARP and ND resolve
/// them through loss, duplication and reordering. Data frames arriving at a port are kept
/// with the MAC they were sent to.
pub struct NeighPair {
    pub a: Neighbours<Vec<u8>>,
    pub b: Neighbours<Vec<u8>>,
    pub mac_a: [u8; 6],
    pub mac_b: [u8; 6],
    pub now: Instant,
    pub link: LinkConfig,
    pub stats: LinkStats,
    /// Frames other than ARP / ICMPv6 received by a and by b, in arrival order: the data
    /// frames (and whatever a bit flip made of another frame).
    pub received_a: Vec<Vec<u8>>,
    pub received_b: Vec<Vec<u8>>,
    /// Copies of data frames the link will deliver (after its losses and duplicates).
    pub data_copies: u64,
    /// Data frames the neighbour layer dropped (hold queue full, destination unresolved).
    pub data_dropped: u64,
    /// Received ARP / ICMPv6 frames that did not parse (bit flips) or are not ND.
    pub rx_errors: u64,
    wire: Wire,
}

/// IP protocol number "for experimentation" (RFC 3692): the data frames of [`NeighPair`].
const PROTOCOL_TEST: u8 = 253;

impl NeighPair {
    /// Port a: 02::1, 10.0.0.1, fd00::1; port b: 02::2, 10.0.0.2, fd00::2 (plus their
    /// link-local addresses).
    pub fn new(cfg: NeighConfig, link: LinkConfig, seed: u64) -> NeighPair {
        let (mac_a, mac_b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let a = Neighbours::new(cfg, mac_a, &[Ipv4Addr::new(10, 0, 0, 1)], &[Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)]);
        let b = Neighbours::new(cfg, mac_b, &[Ipv4Addr::new(10, 0, 0, 2)], &[Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)]);
        NeighPair {
            a,
            b,
            mac_a,
            mac_b,
            now: Instant(0),
            link,
            stats: LinkStats::default(),
            received_a: Vec::new(),
            received_b: Vec::new(),
            data_copies: 0,
            data_dropped: 0,
            rx_errors: 0,
            wire: Wire::new(seed),
        }
    }

    /// A data frame from a (or b when `from_a` is false) to `dst`, `tag` as its payload.
    pub fn send(&mut self, from_a: bool, dst: IpAddr, tag: u32) {
        let (n, mac) = if from_a { (&mut self.a, self.mac_a) } else { (&mut self.b, self.mac_b) };
        let frame = data_frame(mac, n.own_ipv6()[0], dst, tag);
        match n.route(self.now, dst, frame) {
            Route::Send(to, f) => self.put_data(from_a, to, f),
            Route::Held => {}
            Route::Dropped(_) => self.data_dropped += 1,
        }
    }

    fn put_data(&mut self, from_a: bool, to: [u8; 6], mut f: Vec<u8>) {
        EthernetFrame::new_unchecked(&mut f[..]).set_dst_addr(EthernetAddress(to));
        self.stats.sent += 1;
        self.data_copies += self.wire.put(&self.link, &mut self.stats, self.now, from_a, &f) as u64;
    }

    /// One round: requests and replies go out, due frames arrive, due retries run; if
    /// nothing happened the clock jumps to the next event. False when idle.
    pub fn step(&mut self) -> bool {
        let mut busy = false;
        let mut buf = [0u8; MAX_CONTROL_FRAME];
        for from_a in [true, false] {
            loop {
                let n = if from_a { &mut self.a } else { &mut self.b };
                let Some(len) = n.poll_transmit(&mut buf) else { break };
                self.stats.sent += 1;
                self.wire.put(&self.link, &mut self.stats, self.now, from_a, &buf[..len]);
                busy = true;
            }
        }
        while let Some(f) = self.wire.due(self.now) {
            self.stats.delivered += 1;
            busy = true;
            let to_b = f.to_b;
            let n = if to_b { &mut self.b } else { &mut self.a };
            let released = match classify(&f.frame) {
                FrameKind::Arp => n.handle_arp(self.now, &f.frame[14..]),
                FrameKind::Icmpv6 { .. } => {
                    let src = EthernetFrame::new_unchecked(&f.frame[..]).src_addr().0;
                    n.handle_nd(self.now, src, &f.frame[14..])
                }
                _ => {
                    if to_b { &mut self.received_b } else { &mut self.received_a }.push(f.frame);
                    continue;
                }
            };
            match released {
                Ok(Some(r)) => {
                    for d in r.frames {
                        self.put_data(!to_b, r.mac, d);
                    }
                }
                Ok(None) => {}
                Err(_) => self.rx_errors += 1,
            }
        }
        for from_a in [true, false] {
            let n = if from_a { &mut self.a } else { &mut self.b };
            if n.poll_timeout().is_some_and(|t| t <= self.now) {
                self.data_dropped += n.handle_timeout(self.now).len() as u64;
                busy = true;
            }
        }
        if busy {
            return true;
        }
        let next = [self.wire.next_arrival(), self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
        advance_clock(&mut self.now, next)
    }

    /// Step until idle or `max_steps` rounds; returns whether it became idle.
    pub fn run_idle(&mut self, max_steps: u64) -> bool {
        (0..max_steps).any(|_| !self.step())
    }
}

/// Ethernet (destination left zero) + IPv4 or IPv6 to `dst` + a 4-byte tag.
fn data_frame(mac: [u8; 6], src6: Ipv6Addr, dst: IpAddr, tag: u32) -> Vec<u8> {
    let (ethertype, ip_len) = match dst {
        IpAddr::V4(_) => (EtherType::Ipv4, 20),
        IpAddr::V6(_) => (EtherType::Ipv6, 40),
    };
    let mut f = vec![0u8; 14 + ip_len + 4];
    EthernetRepr { src_addr: EthernetAddress(mac), dst_addr: EthernetAddress([0; 6]), ethertype }.emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    let l3 = &mut f[14..];
    match dst {
        IpAddr::V4(d) => {
            let r = Ipv4Repr { src_addr: Ipv4Addr::UNSPECIFIED, dst_addr: d, next_header: PROTOCOL_TEST, payload_len: 4, dscp: 0, ecn: 0, ident: 0, dont_frag: true, hop_limit: 64 };
            r.emit(&mut Ipv4Packet::new_unchecked(&mut l3[..]));
        }
        IpAddr::V6(d) => {
            let r = Ipv6Repr { src_addr: src6, dst_addr: d, next_header: PROTOCOL_TEST, payload_len: 4, traffic_class: 0, flow_label: 0, hop_limit: 64 };
            r.emit(&mut Ipv6Packet::new_unchecked(&mut l3[..]));
        }
    }
    l3[ip_len..].copy_from_slice(&tag.to_be_bytes());
    f
}
