//! A deterministic two-node network for tests, benchmarks and fuzzing: two devices, a
//! virtual clock, and a seeded link that drops, duplicates, reorders, delays and flips bits
//! (quinn-proto's `tests/util.rs` `Pair`, smoltcp's fault injector). Bit flips must be
//! caught by the ICRC.

use crate::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use crate::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use crate::rng::SplitMix64;
use crate::time::{Duration, Instant};
use crate::types::{Gid, Psn, QKey};
use crate::wire::{EthernetAddress, EthernetFrame};
use crate::verbs::{AccessFlags, AddressVector, CqHandle, MemoryRegion, PdHandle, UdDest, WorkCompletion};
use crate::{Device, DeviceConfig, VecMemory};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;

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
    rng: SplitMix64,
    wire: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    buf: Vec<u8>,
    /// Recycled frame buffers.
    pool: Vec<Vec<u8>>,
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
        Pair { a, b, now: Instant(0), link, link_up: true, stats: LinkStats::default(), filter: None, rng: SplitMix64::new(seed), wire: BinaryHeap::new(), seq: 0, buf, pool: Vec::new() }
    }

    /// Create and connect an RC QP on each node (RESET -> INIT -> RTR -> RTS).
    pub fn rc_pair(&mut self, o: RcOpts) -> (QpHandle, QpHandle) {
        let qa = create(&mut self.a, QpType::Rc, o.cap);
        let qb = create(&mut self.b, QpType::Rc, o.cap);
        let na = self.a.dev.query_qp(qa).expect("qp").qp_num;
        let nb = self.b.dev.query_qp(qb).expect("qp").qp_num;
        let (ava, avb) = (self.a.av_to(&self.b), self.b.av_to(&self.a));
        for (n, q, av, peer, rq, sq) in [(&mut self.a, qa, ava, nb, o.psn_b, o.psn_a), (&mut self.b, qb, avb, na, o.psn_a, o.psn_b)] {
            let (at, m) = init_attr(AccessFlags::ALL);
            n.dev.modify_qp(q, &at, m).expect("INIT");
            let (at, m) = rtr_attr(av, o.mtu, peer, rq, o.max_rd_atomic, o.min_rnr_timer);
            n.dev.modify_qp(q, &at, m).expect("RTR");
            let (at, m) = rts_attr(sq, o.timeout, o.retry_cnt, o.rnr_retry, o.max_rd_atomic);
            n.dev.modify_qp(q, &at, m).expect("RTS");
        }
        (qa, qb)
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
        if !self.link_up || self.rng.chance(self.link.loss) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(self.link.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut f = self.pool.pop().unwrap_or_default();
            f.clear();
            f.extend_from_slice(frame);
            if self.rng.chance(self.link.bit_flip) && !f.is_empty() {
                let bit = self.rng.below(f.len() as u64 * 8);
                f[(bit / 8) as usize] ^= 1 << (bit % 8);
                self.stats.flipped += 1;
            }
            let mut at = self.now + self.link.delay;
            if self.rng.chance(self.link.reorder) {
                at = at + Duration(self.rng.below(self.link.reorder_window.0.max(1)));
                self.stats.reordered += 1;
            }
            self.seq += 1;
            self.wire.push(Reverse(InFlight { at, seq: self.seq, to_b, frame: f }));
        }
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
        for to_b in [true, false] {
            loop {
                let dev = if to_b { &mut self.a.dev } else { &mut self.b.dev };
                let Some(n) = dev.poll_transmit(self.now, &mut buf) else { break };
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
        while self.wire.peek().is_some_and(|Reverse(f)| f.at <= self.now) {
            let Some(Reverse(mut f)) = self.wire.pop() else { break };
            self.stats.delivered += 1;
            let dev = if f.to_b { &mut self.b.dev } else { &mut self.a.dev };
            dev.handle_rx(self.now, &mut f.frame);
            self.pool.push(f.frame);
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
        let next = [
            self.wire.peek().map(|Reverse(f)| f.at),
            self.a.dev.poll_timeout(),
            self.b.dev.poll_timeout(),
            timer,
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => {
                if t > self.now {
                    self.now = t;
                }
                true
            }
            None => false,
        }
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
