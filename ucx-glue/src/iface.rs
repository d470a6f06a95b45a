//! The two UCT interfaces (droce_rc, droce_ud) over the process-wide droce host.
//!
//! One interface owns: a completion queue, a block of registered memory split into receive
//! slots and send slots, and (RC) a shared receive queue feeding every RC QP of the interface,
//! or (UD) its one UD QP. A send slot is the resource of one operation in flight: it holds the
//! copied payload of short/bcopy sends, the header of an AM zcopy, the landing buffer of a GET
//! bcopy or an atomic result; with no free slot an operation returns `UCS_ERR_NO_RESOURCE` and
//! the caller may queue a pending request. Every work request is signaled: a completion frees
//! its slot, finishes the operation and drives flush.
//!
//! No UCX callback runs here: [`Iface::progress`] returns [`Event`]s, which the FFI layer
//! invokes with no lock held (a callback may send again).

// Operations carry UCX's argument lists (endpoint, buffers, remote address, key, completion).
#![allow(clippy::too_many_arguments)]
// MSRV 1.75: no Option::is_none_or, no u64::is_multiple_of.
#![allow(clippy::unnecessary_map_or, clippy::manual_is_multiple_of)]

use crate::md;
use crate::status::*;
use droce_dpdk::runtime::Runtime;
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{AccessFlags, CqHandle, PdHandle, RecvWr, SendFlags, SendOpcode, SendWr, SrqHandle, UdDest, WcFlags};
use droce_transport::{Gid, Lkey, Psn, QKey, Qpn, Rkey};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Bytes of GRH at the head of a UD receive buffer.
const GRH: usize = 40;
/// Q_Key of droce_ud QPs (high bit clear: a plain, uncontrolled key).
const UD_QKEY: QKey = QKey(0x0d0c_e11d);
/// Largest AM zcopy header (it is copied into the operation's send slot).
pub const MAX_HDR: usize = 128;
/// Largest scatter list of a zcopy operation (plus one SGE for an AM header).
pub const MAX_IOV: usize = 8;
/// Largest RDMA zcopy.
const MAX_RDMA: usize = 1 << 30;
/// Completions handled per progress call.
const POLL_BUDGET: usize = 64;
/// Idle progress calls in a row after which the thread yields its CPU once (default of
/// `DROCE_UCX_IDLE_YIELD`; 0 there: never yield).
const IDLE_YIELD: u32 = 64;

fn idle_yield() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| match std::env::var("DROCE_UCX_IDLE_YIELD").ok().and_then(|v| v.parse::<u32>().ok()) {
        Some(0) => u32::MAX,
        Some(n) => n,
        None => IDLE_YIELD,
    })
}

/// droce_ud reliability header at the head of every UD datagram (after the GRH on receive):
/// sender endpoint key, sequence number, and an acknowledgement riding along (endpoint key of
/// the receiver's peer endpoint, or [`NO_EP`], and the last in-order sequence number received
/// from it); four little-endian u32.
pub const UD_HDR: usize = 16;
/// No endpoint (an acknowledgement-only datagram carries no sequence number; an operation whose
/// endpoint is gone only frees its slot).
const NO_EP: u32 = u32::MAX;
/// Immediate data of an acknowledgement-only datagram (AM ids are below 256).
const IMM_UD_ACK: u32 = 0x1ff;
/// Unacknowledged datagrams are sent again after this long.
const UD_RTO: Duration = Duration::from_millis(5);
/// A UD endpoint whose datagrams saw no acknowledgement for this long fails (RC: about 4 s).
const UD_FAIL_AFTER: Duration = Duration::from_secs(4);
/// Progress calls between retransmission-timer checks.
const UD_TIMER_EVERY: u32 = 16;

pub const DEV_ADDR_LEN: usize = 16;
pub const UD_IFACE_ADDR_LEN: usize = 4;
pub const RC_EP_ADDR_LEN: usize = 8;

/// An RC endpoint address: the QPN (24 bits, little endian) with the path MTU this end allows
/// in its high byte (the IB MTU code, 1 = 256 ... 5 = 4096), then the initial PSN (little
/// endian). Each end connects at the smaller of the two path MTUs, so a rank whose port runs
/// at 1024 (a 1500-byte Ethernet MTU) and one at 4096 (a memif port's default) still agree.
pub fn encode_rc_ep_addr(qpn: u32, psn: u32, mtu: PathMtu) -> [u8; RC_EP_ADDR_LEN] {
    let mut a = [0u8; RC_EP_ADDR_LEN];
    a[..4].copy_from_slice(&((qpn & 0x00ff_ffff) | (mtu as u32) << 24).to_le_bytes());
    a[4..].copy_from_slice(&psn.to_le_bytes());
    a
}

/// (QPN, PSN, path MTU) of an RC endpoint address. A high byte that is no MTU code (0 from
/// a build that did not send one) means 1024, the path MTU every RoCE port supports.
pub fn decode_rc_ep_addr(a: &[u8; RC_EP_ADDR_LEN]) -> (u32, u32, PathMtu) {
    let w = u32::from_le_bytes([a[0], a[1], a[2], a[3]]);
    let psn = u32::from_le_bytes([a[4], a[5], a[6], a[7]]);
    let mtu = match w >> 24 {
        1 => PathMtu::Mtu256,
        2 => PathMtu::Mtu512,
        4 => PathMtu::Mtu2048,
        5 => PathMtu::Mtu4096,
        _ => PathMtu::Mtu1024,
    };
    (w & 0x00ff_ffff, psn, mtu)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rc,
    Ud,
}

/// Interface configuration (UCX_DROCE_RC_* / UCX_DROCE_UD_*).
#[derive(Debug, Clone, Copy)]
pub struct IfaceCfg {
    pub seg_size: usize,
    pub tx_queue_len: u32,
    pub rx_queue_len: u32,
}

/// Figures for `uct_iface_query`; also the C ABI's `droce_iface_info_t` (shim/droce_abi.h: same
/// fields, same order), so keep the two in step.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Info {
    pub am_max_short: usize,
    pub am_max_bcopy: usize,
    pub am_max_zcopy: usize,
    pub am_max_hdr: usize,
    pub put_max_short: usize,
    pub put_max_bcopy: usize,
    pub put_max_zcopy: usize,
    pub get_max_bcopy: usize,
    pub get_max_zcopy: usize,
    pub max_iov: usize,
    pub latency_s: f64,
    pub bandwidth_bps: f64,
    pub overhead_s: f64,
    pub path_mtu: u32,
}

/// Memory layout of an interface's registered block.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub rx_stride: usize,
    pub tx_stride: usize,
    pub rx_count: usize,
    pub tx_count: usize,
    pub seg: usize,
}

impl Layout {
    pub fn new(kind: Kind, cfg: &IfaceCfg, mtu: PathMtu) -> Layout {
        let mtu = mtu.bytes() as usize;
        let seg = match kind {
            Kind::Rc => cfg.seg_size.clamp(256, 1 << 20),
            Kind::Ud => cfg.seg_size.clamp(256, mtu).min(mtu),
        };
        let round = |n: usize| (n + 63) & !63;
        let rx_stride = round(seg + if kind == Kind::Ud { GRH } else { 0 });
        Layout {
            rx_stride,
            tx_stride: round(seg),
            rx_count: cfg.rx_queue_len.clamp(16, 16384) as usize,
            tx_count: cfg.tx_queue_len.clamp(4, 4096) as usize,
            seg,
        }
    }
    pub fn bytes(&self) -> usize {
        self.rx_stride * self.rx_count + self.tx_stride * self.tx_count
    }
}

/// A payload element: a copy source, or a registered range for zcopy.
#[derive(Debug, Clone, Copy)]
pub enum Seg<'a> {
    Copy(&'a [u8]),
    Zcopy { addr: u64, len: usize, lkey: Lkey },
}

impl Seg<'_> {
    fn len(&self) -> usize {
        match self {
            Seg::Copy(b) => b.len(),
            Seg::Zcopy { len, .. } => *len,
        }
    }
}

/// Something the FFI layer must do with no lock held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Invoke the AM handler `id` on `len` bytes at `addr`, then repost receive slot `slot`.
    Am { id: u8, addr: u64, len: usize, slot: u32 },
    /// `uct_invoke_completion(comp, status)`.
    Complete { comp: usize, status: Status },
    /// A GET bcopy landed: `unpack(arg, addr, len)`; then the slot is freed.
    Unpack { cb: usize, arg: usize, addr: u64, len: usize, slot: u32 },
    /// Store an atomic's fetched value (`width` 4 or 8 bytes) at `result`.
    AtomicResult { result: usize, width: u8, value: u64 },
    /// The endpoint failed (peer unreachable): `uct_iface_handle_ep_err`.
    /// `peer_gone`: the host saw this endpoint's peer go (its memif link went down,
    /// [`Runtime::lost_peers_since`]).
    EpFailed { ep_c: usize, status: Status, peer_gone: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicKind {
    Add,
    Swap,
    Cswap,
}

#[derive(Debug, Clone, Copy)]
struct AtomicOp {
    kind: AtomicKind,
    width: u8,
    value: u64,
    compare: u64,
    /// The 8-byte word the operation targets.
    word: u64,
    rkey: Rkey,
    /// Bit offset of a 32-bit operand in its word (little endian).
    shift: u32,
    result: usize,
    /// Compare value of the compare-swap in flight (emulated operations).
    expected: u64,
    native: bool,
}

impl AtomicOp {
    /// The new word for an old word `w` (emulated ops), or None when nothing is to be written.
    fn apply(&self, w: u64) -> u64 {
        let (mask, cur) = if self.width == 4 {
            (0xffff_ffffu64 << self.shift, (w >> self.shift) & 0xffff_ffff)
        } else {
            (u64::MAX, w)
        };
        let new = match self.kind {
            AtomicKind::Add => {
                if self.width == 4 {
                    (cur as u32).wrapping_add(self.value as u32) as u64
                } else {
                    cur.wrapping_add(self.value)
                }
            }
            AtomicKind::Swap => self.value,
            AtomicKind::Cswap => {
                if cur == self.compare {
                    self.value
                } else {
                    cur
                }
            }
        };
        if self.width == 4 {
            (w & !mask) | ((new & 0xffff_ffff) << self.shift)
        } else {
            new
        }
    }
    fn fetched(&self, w: u64) -> u64 {
        if self.width == 4 {
            (w >> self.shift) & 0xffff_ffff
        } else {
            w
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum OpKind {
    Plain,
    GetBcopy { cb: usize, arg: usize, len: usize },
    Atomic(AtomicOp),
}

#[derive(Debug, Clone, Copy)]
struct Op {
    ep: u32,
    seq: u64,
    comp: usize,
    kind: OpKind,
    /// UD: the AM id (immediate data) for a retransmission.
    am: u8,
    /// UD: a work request of this slot is in the send queue (its local completion is due).
    posted: bool,
    /// UD: the peer acknowledged it (it retires at its local completion).
    acked: bool,
}

#[derive(Debug)]
struct Ep {
    c: usize,
    qp: Option<QpHandle>,
    psn: u32,
    ud: Option<UdDest>,
    connected: bool,
    failed: Option<Status>,
    next_seq: u64,
    inflight: BTreeSet<u64>,
    /// Flush completions waiting until every operation with a lower sequence number is done.
    waiters: Vec<(u64, usize)>,
    pending: VecDeque<usize>,
    in_rr: bool,
    dispatching: bool,
    fence: bool,
    /// Last known value of the last word an emulated atomic touched: the next compare-swap's guess.
    word_cache: Option<(u64, u64)>,
    /// UD: this endpoint's key in the reliability header (id | generation << 16).
    ud_key: u32,
    /// UD: send slots sent and not yet acknowledged, in sequence order.
    unacked: VecDeque<u32>,
    /// UD: when the unacknowledged datagrams are sent again (None: not armed yet).
    retx_at: Option<Instant>,
    /// UD: since when the endpoint waits for an acknowledgement that makes progress.
    last_ack: Option<Instant>,
    /// UD: acknowledgements in a row that repeated the last one (the peer saw a gap).
    dup_acks: u8,
    /// UD: a fast retransmission is due at the next timer check (at most one per timeout).
    fast_retx: bool,
    /// UD: a fast retransmission was made since the last acknowledgement that made progress.
    fast_done: bool,
    /// The peer's GID (its device address) once known: a host-reported loss of that address
    /// fails this endpoint ([`Iface::fail_lost_endpoints`]).
    peer_gid: Option<[u8; 16]>,
}

impl Ep {
    fn new(c: usize) -> Ep {
        Ep {
            c,
            qp: None,
            psn: 0,
            ud: None,
            peer_gid: None,
            connected: false,
            failed: None,
            next_seq: 0,
            inflight: BTreeSet::new(),
            waiters: Vec::new(),
            pending: VecDeque::new(),
            in_rr: false,
            dispatching: false,
            fence: false,
            word_cache: None,
            ud_key: NO_EP,
            unacked: VecDeque::new(),
            retx_at: None,
            last_ack: None,
            dup_acks: 0,
            fast_retx: false,
            fast_done: false,
        }
    }
    fn flushed_below(&self, target: u64) -> bool {
        self.inflight.first().map_or(true, |&s| s >= target)
    }
}

#[derive(Debug)]
struct Inner {
    cq: CqHandle,
    srq: Option<SrqHandle>,
    ud_qp: Option<QpHandle>,
    ud_qpn: u32,
    pd: PdHandle,
    lkey: Lkey,
    base: u64,
    lay: Layout,
    gid: Gid,
    sgid_index: u8,
    mtu: PathMtu,
    free_tx: Vec<u32>,
    ops: Vec<Option<Op>>,
    eps: Vec<Option<Ep>>,
    free_eps: Vec<u32>,
    pending_rr: VecDeque<u32>,
    iface_waiters: Vec<usize>,
    psn_seed: u32,
    closed: bool,
    /// Progress calls in a row that found nothing to do.
    idle: u32,
    /// The event buffer of progress, handed to the FFI layer and given back by
    /// [`Iface::after_events`]: no allocation per progress round.
    ev_spare: Vec<Event>,
    /// A send work request kept between posts: its gather list's capacity is reused
    /// (`post_send_ref`), so a post allocates nothing.
    wr_spare: Option<SendWr>,
    /// The receive work request every repost reuses (one SGE).
    rx_wr: RecvWr,
    /// UD: the gather list of each send slot's datagram (for retransmission).
    ud_sges: Vec<Vec<droce_transport::verbs::Sge>>,
    /// UD: next expected sequence number per sending endpoint (source GID, source QPN, key).
    chans: HashMap<([u8; 16], u32, u32), u32>,
    /// UD: channels owing an acknowledgement (sent with the next datagram to that peer, or
    /// alone at the next progress call).
    ack_due: Vec<([u8; 16], u32, u32)>,
    /// UD: endpoint generations (the high half of an endpoint key).
    ep_gen: u16,
    /// Progress calls (retransmission-timer pacing).
    tick: u32,
    /// UD: datagrams sent again (DROCE_UCX_STATS).
    retransmits: u64,
    /// UD: an endpoint has a fast retransmission due.
    ud_fast: bool,
    /// How many of the host's lost peers ([`Runtime::lost_peers_since`]) were seen: the
    /// endpoints to each failed.
    lost_seen: usize,
}

/// One UCT interface.
#[derive(Debug)]
pub struct Iface {
    pub kind: Kind,
    /// The C `droce_iface_t*`, passed back to AM invocations.
    pub c: usize,
    host: &'static Mutex<Runtime>,
    inner: Mutex<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn verb<T, E: std::fmt::Debug>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("droce: {what}: {e:?}"))
}

/// Result of [`Iface::progress`].
#[derive(Debug, Default)]
pub struct Progress {
    /// Give it back with [`Iface::after_events`] (it keeps the buffer for the next round).
    pub events: Vec<Event>,
    pub count: u32,
    /// Endpoints have queued pending requests (dispatch them).
    pub pending: bool,
}

impl Iface {
    /// Create the interface's queues in `host` over the registered block `[base, base+len)`
    /// (`lkey`), laid out by `lay`.
    pub fn new(kind: Kind, c: usize, host_m: &'static Mutex<Runtime>, host: &mut Runtime, pd: PdHandle, lkey: Lkey, base: u64, lay: Layout) -> Result<Iface, String> {
        let gid = match host.local_ip() {
            std::net::IpAddr::V4(a) => Gid::from_ipv4(a),
            std::net::IpAddr::V6(a) => Gid::from_ipv6(a),
        };
        let sgid_index = host.local_gid_index();
        let mtu = host.dev().path_mtu();
        let d = host.dev().device_mut();
        let cq = verb("create_cq", d.create_cq(lay.tx_count + lay.rx_count + 64))?;
        let mut inner = Inner {
            cq,
            srq: None,
            ud_qp: None,
            ud_qpn: 0,
            pd,
            lkey,
            base,
            lay,
            gid,
            sgid_index,
            mtu,
            free_tx: (0..lay.tx_count as u32).rev().collect(),
            ops: vec![None; lay.tx_count],
            eps: Vec::new(),
            free_eps: Vec::new(),
            pending_rr: VecDeque::new(),
            iface_waiters: Vec::new(),
            psn_seed: (std::process::id().wrapping_mul(0x9e37_79b9) ^ (base as u32)) & 0xff_ffff,
            closed: false,
            idle: 0,
            ev_spare: Vec::with_capacity(POLL_BUDGET * 2),
            wr_spare: None,
            rx_wr: RecvWr::new(0).with_sge(base, lay.rx_stride as u32, lkey),
            ud_sges: if kind == Kind::Ud { vec![Vec::new(); lay.tx_count] } else { Vec::new() },
            chans: HashMap::new(),
            ack_due: Vec::new(),
            ep_gen: 0,
            tick: 0,
            retransmits: 0,
            ud_fast: false,
            lost_seen: 0,
        };
        match kind {
            Kind::Rc => {
                let srq = verb("create_srq", d.create_srq(pd, lay.rx_count, 1))?;
                inner.srq = Some(srq);
            }
            Kind::Ud => {
                let cap = QpCap { max_send_wr: lay.tx_count as u32, max_recv_wr: lay.rx_count as u32, max_send_sge: (MAX_IOV + 1) as u32, max_recv_sge: 1, max_inline_data: 0 };
                let qp = verb("create_qp UD", d.create_qp(QpInitAttr { qp_type: QpType::Ud, pd, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: true }))?;
                let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: UD_QKEY, ..QpAttr::default() };
                verb("UD INIT", d.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY))?;
                let a = QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() };
                verb("UD RTR", d.modify_qp(qp, &a, QpAttrMask::STATE))?;
                let a = QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(inner.psn_seed), ..QpAttr::default() };
                verb("UD RTS", d.modify_qp(qp, &a, QpAttrMask::STATE | QpAttrMask::SQ_PSN))?;
                inner.ud_qpn = verb("query_qp", d.query_qp(qp))?.qp_num.value();
                inner.ud_qp = Some(qp);
            }
        }
        let iface = Iface { kind, c, host: host_m, inner: Mutex::new(inner) };
        {
            let mut g = lock(&iface.inner);
            for slot in 0..lay.rx_count as u32 {
                iface.post_rx(&mut g, host, slot).map_err(|s| format!("droce: posting receive buffers failed ({s})"))?;
            }
        }
        Ok(iface)
    }

    /// Destroy the queues and deregister the block; returns the block's (base, len) for the
    /// caller to free.
    pub fn close(&self) -> (u64, usize) {
        let mut g = lock(&self.inner);
        g.closed = true;
        let mut h = lock(self.host);
        if std::env::var_os("DROCE_UCX_STATS").is_some() {
            let port = h.port_id().0;
            eprintln!("droce {:?} iface closed; device statistics:\n{}", self.kind, droce_dpdk::roce::format_roce_stats(port, &h.dev().stats()));
            if self.kind == Kind::Ud {
                eprintln!("droce_ud: {} datagrams sent again", g.retransmits);
            }
        }
        h.dev().flush(); // held ACKs (RuntimeConfig::hold_acks) leave before the queues go
        let d = h.dev().device_mut();
        for ep in g.eps.iter_mut().flatten() {
            if let Some(qp) = ep.qp.take() {
                let _ = d.destroy_qp(qp);
            }
        }
        if let Some(qp) = g.ud_qp.take() {
            let _ = d.destroy_qp(qp);
        }
        if let Some(srq) = g.srq.take() {
            let _ = d.destroy_srq(srq);
        }
        let _ = d.destroy_cq(g.cq);
        let _ = h.dev().dereg_mr(g.lkey);
        (g.base, g.lay.bytes())
    }

    fn rx_addr(g: &Inner, slot: u32) -> u64 {
        g.base + slot as u64 * g.lay.rx_stride as u64
    }
    fn tx_addr(g: &Inner, slot: u32) -> u64 {
        g.base + (g.lay.rx_count * g.lay.rx_stride) as u64 + slot as u64 * g.lay.tx_stride as u64
    }

    fn post_rx(&self, g: &mut Inner, host: &mut Runtime, slot: u32) -> Result<(), Status> {
        let addr = Self::rx_addr(g, slot);
        let wr = &mut g.rx_wr;
        wr.wr_id = slot as u64;
        wr.sg_list[0].addr = addr;
        let d = host.dev().device_mut();
        let r = match (g.srq, g.ud_qp) {
            (Some(srq), _) => d.post_srq_recv_ref(srq, &g.rx_wr),
            (None, Some(qp)) => d.post_recv_ref(qp, &g.rx_wr),
            _ => return Err(UCS_ERR_IO_ERROR),
        };
        r.map_err(|_| UCS_ERR_IO_ERROR)
    }

    pub fn info(&self) -> Info {
        let g = lock(&self.inner);
        let seg = g.lay.seg;
        let mtu = g.mtu.bytes();
        match self.kind {
            // Figures measured over the memif wire on the 2-core build machine (docs/ucx.md):
            // am_lat 8 B 4.2 us typical, put_bw 64 KiB zcopy with 8 puts in flight 550 MB/s.
            Kind::Rc => Info {
                am_max_short: seg,
                am_max_bcopy: seg,
                am_max_zcopy: seg - MAX_HDR,
                am_max_hdr: MAX_HDR,
                put_max_short: seg,
                put_max_bcopy: seg,
                put_max_zcopy: MAX_RDMA,
                get_max_bcopy: seg,
                get_max_zcopy: MAX_RDMA,
                max_iov: MAX_IOV,
                latency_s: 4.2e-6,
                bandwidth_bps: 550e6,
                overhead_s: 0.25e-6, // am_bw 8 B: 0.23 us typical per posted message
                path_mtu: mtu,
            },
            // Measured: am_lat 8 B 3.3 us typical, am_bw 900 B zcopy 200 MB/s. Reliable (the
            // header, acknowledgements, retransmission), so UCP may take it as its AM lane
            // (lower latency: UCP tag_lat 8 B 4.7 -> 3.4 us median); RDMA and large data stay
            // on droce_rc.
            Kind::Ud => Info {
                am_max_short: seg - UD_HDR,
                am_max_bcopy: seg - UD_HDR,
                am_max_zcopy: seg.saturating_sub(MAX_HDR + UD_HDR),
                am_max_hdr: MAX_HDR.min(seg / 2),
                max_iov: MAX_IOV,
                latency_s: 3.4e-6,
                bandwidth_bps: 200e6,
                overhead_s: 0.3e-6, // am_bw 8 B: 0.23-0.37 us typical per posted message
                path_mtu: mtu,
                ..Info::default()
            },
        }
    }

    pub fn device_address(&self) -> [u8; DEV_ADDR_LEN] {
        lock(&self.inner).gid.0
    }

    pub fn iface_address(&self) -> [u8; UD_IFACE_ADDR_LEN] {
        lock(&self.inner).ud_qpn.to_le_bytes()
    }

    pub fn is_reachable(&self, dev_addr: &[u8; DEV_ADDR_LEN]) -> bool {
        // One wire: every droce GID is reachable; an all-zero GID is not an address.
        dev_addr.iter().any(|&b| b != 0)
    }

    // ------------------------------------------------------------------ endpoints

    /// RC: a QP in INIT waiting for `connect_to_ep`. UD: an address handle to (GID, QPN).
    pub fn ep_create(&self, ep_c: usize, dev_addr: Option<&[u8; DEV_ADDR_LEN]>, iface_addr: Option<&[u8; UD_IFACE_ADDR_LEN]>) -> Result<u32, Status> {
        let mut g = lock(&self.inner);
        let mut ep = Ep::new(ep_c);
        ep.peer_gid = dev_addr.map(|d| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&d[..16]);
            a
        });
        match self.kind {
            Kind::Rc => {
                let mut h = lock(self.host);
                let (pd, cq, srq, tx) = (g.pd, g.cq, g.srq, g.lay.tx_count as u32);
                let d = h.dev().device_mut();
                let cap = QpCap { max_send_wr: tx, max_recv_wr: 1, max_send_sge: (MAX_IOV + 1) as u32, max_recv_sge: 1, max_inline_data: 0 };
                let qp = d.create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq, cap, sq_sig_all: true }).map_err(|_| UCS_ERR_NO_RESOURCE)?;
                let (a, m) = init_attr(AccessFlags::ALL);
                if d.modify_qp(qp, &a, m).is_err() {
                    let _ = d.destroy_qp(qp);
                    return Err(UCS_ERR_IO_ERROR);
                }
                g.psn_seed = g.psn_seed.wrapping_mul(1_103_515_245).wrapping_add(12345) & 0xff_ffff;
                ep.qp = Some(qp);
                ep.psn = g.psn_seed;
            }
            Kind::Ud => {
                let (Some(dev), Some(ifa)) = (dev_addr, iface_addr) else { return Err(UCS_ERR_INVALID_PARAM) };
                let av = droce_transport::verbs::AddressVector { dgid: Gid(*dev), sgid_index: g.sgid_index, hop_limit: 64, ..Default::default() };
                ep.ud = Some(UdDest { av, remote_qpn: Qpn::new(u32::from_le_bytes(*ifa)), remote_qkey: UD_QKEY });
                ep.connected = true;
            }
        }
        if self.kind == Kind::Ud && g.free_eps.is_empty() && g.eps.len() >= 0xffff {
            return Err(UCS_ERR_NO_RESOURCE); // endpoint keys hold a 16-bit id
        }
        g.ep_gen = g.ep_gen.wrapping_add(1);
        let gen = g.ep_gen as u32;
        let id = match g.free_eps.pop() {
            Some(i) => {
                g.eps[i as usize] = Some(ep);
                i
            }
            None => {
                g.eps.push(Some(ep));
                (g.eps.len() - 1) as u32
            }
        };
        if self.kind == Kind::Ud {
            if let Some(ep) = g.eps[id as usize].as_mut() {
                ep.ud_key = id | gen << 16;
            }
        }
        Ok(id)
    }

    /// Destroy an endpoint; operations still in flight complete no more (their slots return).
    pub fn ep_destroy(&self, id: u32) {
        let mut g = lock(&self.inner);
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::take) else { return };
        if let Some(qp) = ep.qp {
            if !g.closed {
                let _ = lock(self.host).dev().device_mut().destroy_qp(qp);
            }
        }
        for slot in 0..g.ops.len() {
            if let Some(o) = g.ops[slot].as_mut().filter(|o| o.ep == id) {
                if o.posted {
                    // Still in the shared UD send queue: the slot returns at its local completion.
                    o.ep = NO_EP;
                    o.comp = 0;
                } else {
                    g.ops[slot] = None;
                    g.free_tx.push(slot as u32);
                }
            }
        }
        g.pending_rr.retain(|&e| e != id);
        g.free_eps.push(id);
    }

    pub fn ep_address(&self, id: u32) -> Result<[u8; RC_EP_ADDR_LEN], Status> {
        let g = lock(&self.inner);
        let ep = g.eps.get(id as usize).and_then(Option::as_ref).ok_or(UCS_ERR_INVALID_PARAM)?;
        let qp = ep.qp.ok_or(UCS_ERR_UNSUPPORTED)?;
        let qpn = lock(self.host).dev().device().query_qp(qp).map_err(|_| UCS_ERR_IO_ERROR)?.qp_num.value();
        Ok(encode_rc_ep_addr(qpn, ep.psn, g.mtu))
    }

    /// RC: INIT -> RTR -> RTS towards the peer QP (the transport rc_connect attributes).
    pub fn ep_connect_to_ep(&self, id: u32, dev_addr: &[u8; DEV_ADDR_LEN], ep_addr: &[u8; RC_EP_ADDR_LEN]) -> Result<(), Status> {
        let mut g = lock(&self.inner);
        let (sgid, mtu) = (g.sgid_index, g.mtu);
        let ep = g.eps.get_mut(id as usize).and_then(Option::as_mut).ok_or(UCS_ERR_INVALID_PARAM)?;
        let qp = ep.qp.ok_or(UCS_ERR_UNSUPPORTED)?;
        let (peer_qpn, peer_psn, peer_mtu) = decode_rc_ep_addr(ep_addr);
        let mut pg = [0u8; 16];
        pg.copy_from_slice(&dev_addr[..16]);
        ep.peer_gid = Some(pg);
        let mtu = mtu.min(peer_mtu);
        let mut h = lock(self.host);
        let av = h.dev().av(Gid(*dev_addr), sgid);
        let d = h.dev().device_mut();
        let (a, m) = rtr_attr(av, mtu, Qpn::new(peer_qpn), Psn::new(peer_psn), 16, 12);
        d.modify_qp(qp, &a, m).map_err(|_| UCS_ERR_IO_ERROR)?;
        // ACK timeout 4.096 us * 2^17 = 0.54 s, 7 retries: a dead peer is reported after about
        // 4 s. The peer's ACKs come from its progress calls (software RoCE), so a peer that is
        // descheduled on a loaded machine must not look dead (67 ms x 7 did, under load 10).
        let (a, m) = rts_attr(Psn::new(ep.psn), 17, 7, 7, 16);
        d.modify_qp(qp, &a, m).map_err(|_| UCS_ERR_IO_ERROR)?;
        ep.connected = true;
        if !ep.pending.is_empty() && !ep.in_rr {
            ep.in_rr = true;
            g.pending_rr.push_back(id);
        }
        Ok(())
    }

    // ------------------------------------------------------------------ sends

    /// Checks before an operation; returns a free send slot.
    fn reserve(g: &mut Inner, id: u32) -> Result<u32, Status> {
        let ep = g.eps.get(id as usize).and_then(Option::as_ref).ok_or(UCS_ERR_INVALID_PARAM)?;
        if let Some(s) = ep.failed {
            return Err(s);
        }
        if !ep.connected || (!ep.pending.is_empty() && !ep.dispatching) {
            return Err(UCS_ERR_NO_RESOURCE);
        }
        g.free_tx.pop().ok_or(UCS_ERR_NO_RESOURCE)
    }

    /// A blank send work request with `opcode` (the kept one when there is: no allocation).
    fn new_wr(g: &mut Inner, opcode: SendOpcode) -> SendWr {
        match g.wr_spare.take() {
            Some(mut w) => {
                w.sg_list.clear();
                w.wr_id = 0;
                w.opcode = opcode;
                w.flags = SendFlags::SIGNALED;
                w.imm_data = 0;
                w.remote_addr = 0;
                w.rkey = Rkey(0);
                w.compare_add = 0;
                w.swap = 0;
                w.ud = None;
                w
            }
            None => SendWr::new(0, opcode),
        }
    }

    /// Post `wr` (wr_id = slot) on the endpoint and record the operation.
    fn post(&self, g: &mut Inner, h: &mut Runtime, id: u32, slot: u32, mut wr: SendWr, comp: usize, kind: OpKind) -> Result<(), Status> {
        let (qp, seq) = {
            let ep = g.eps[id as usize].as_mut().ok_or(UCS_ERR_INVALID_PARAM)?;
            if ep.fence {
                wr.flags = wr.flags | SendFlags::FENCE;
            }
            if let Some(ud) = ep.ud {
                wr = wr.with_ud(ud);
            }
            (ep.qp.or(g.ud_qp).ok_or(UCS_ERR_IO_ERROR)?, ep.next_seq)
        };
        wr.wr_id = slot as u64;
        wr.flags = wr.flags | SendFlags::SIGNALED;
        let am = wr.imm_data as u8;
        if self.kind == Kind::Ud {
            // The reliability header in the slot's first UD_HDR bytes (left free by the caller),
            // with an acknowledgement owed to the same peer riding along.
            let ep = g.eps[id as usize].as_ref().ok_or(UCS_ERR_INVALID_PARAM)?;
            let (key, dest) = (ep.ud_key, ep.ud.ok_or(UCS_ERR_IO_ERROR)?);
            let (ack_ep, ack_seq) = Self::take_ack_for(g, &dest.av.dgid.0, dest.remote_qpn.value());
            let mut hb = [0u8; UD_HDR];
            for (i, v) in [key, seq as u32, ack_ep, ack_seq].into_iter().enumerate() {
                hb[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
            if h.dev().write_mem(Self::tx_addr(g, slot), &hb).is_err() {
                g.free_tx.push(slot);
                g.wr_spare = Some(wr);
                return Err(UCS_ERR_IO_ERROR);
            }
            let v = &mut g.ud_sges[slot as usize];
            v.clear();
            v.extend_from_slice(&wr.sg_list);
        }
        let r = h.dev().device_mut().post_send_ref(qp, &wr);
        g.wr_spare = Some(wr);
        match r {
            Ok(()) => {
                let ud = self.kind == Kind::Ud;
                let ep = g.eps[id as usize].as_mut().ok_or(UCS_ERR_INVALID_PARAM)?;
                ep.fence = false;
                ep.next_seq += 1;
                ep.inflight.insert(seq);
                if ud {
                    // the timer check arms the retransmission (no clock read here)
                    ep.unacked.push_back(slot);
                }
                g.ops[slot as usize] = Some(Op { ep: id, seq, comp, kind, am, posted: true, acked: false });
                if g.free_tx.len() + 2 >= g.lay.tx_count {
                    // At most one other operation in flight (latency-bound: a ping-pong, a lone
                    // put; on RC the previous message of a ping-pong is still unacknowledged, as
                    // the peer sends its ACK after its reply): put it on the wire now rather than
                    // at the next progress call. With more in flight the progress loop sends
                    // them in bursts.
                    h.dev().poll();
                }
                Ok(())
            }
            Err(e) => {
                g.free_tx.push(slot);
                Err(from_post(e))
            }
        }
    }

    /// Copy `segs` into send slot `slot` (registered memory) from `off`; the bytes written.
    fn copy_in(g: &Inner, h: &mut Runtime, slot: u32, mut off: usize, segs: &[Seg]) -> Result<usize, Status> {
        let base = Self::tx_addr(g, slot);
        for s in segs {
            let Seg::Copy(b) = s else { return Err(UCS_ERR_INVALID_PARAM) };
            if off + b.len() > g.lay.tx_stride {
                return Err(UCS_ERR_EXCEEDS_LIMIT);
            }
            h.dev().write_mem(base + off as u64, b).map_err(|_| UCS_ERR_IO_ERROR)?;
            off += b.len();
        }
        Ok(off)
    }

    /// AM short / zcopy (AM id in the immediate data). Copy segments go through the send slot;
    /// zcopy segments are posted as SGEs after the header.
    pub fn am_send(&self, id: u32, am_id: u8, hdr: &[u8], segs: &[Seg], comp: usize) -> Result<(), Status> {
        let mut g = lock(&self.inner);
        // UD: the reliability header goes first (post() writes it).
        let skip = if self.kind == Kind::Ud { UD_HDR } else { 0 };
        let total = skip + hdr.len() + segs.iter().map(Seg::len).sum::<usize>();
        let zcopy = segs.iter().any(|s| matches!(s, Seg::Zcopy { .. }));
        let limit = if zcopy { g.lay.seg } else { g.lay.seg.min(g.lay.tx_stride) };
        if total > limit || (zcopy && hdr.len() > MAX_HDR) || segs.len() > MAX_IOV {
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        let slot = Self::reserve(&mut g, id)?;
        let mut h = lock(self.host);
        let res = (|| {
            let base = Self::tx_addr(&g, slot);
            let mut wr = Self::new_wr(&mut g, SendOpcode::SendImm).with_imm(am_id as u32);
            if zcopy {
                if !hdr.is_empty() || skip > 0 {
                    h.dev().write_mem(base + skip as u64, hdr).map_err(|_| UCS_ERR_IO_ERROR)?;
                    wr = wr.with_sge(base, (skip + hdr.len()) as u32, g.lkey);
                }
                for s in segs {
                    match *s {
                        Seg::Zcopy { addr, len, lkey } => wr = wr.with_sge(addr, len as u32, lkey),
                        Seg::Copy(_) => return Err(UCS_ERR_INVALID_PARAM),
                    }
                }
            } else {
                h.dev().write_mem(base + skip as u64, hdr).map_err(|_| UCS_ERR_IO_ERROR)?;
                let n = Self::copy_in(&g, &mut h, slot, skip + hdr.len(), segs)?;
                wr = wr.with_sge(base, n as u32, g.lkey);
            }
            Ok(wr)
        })();
        match res {
            Ok(wr) => self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::Plain),
            Err(e) => {
                g.free_tx.push(slot);
                Err(e)
            }
        }
    }

    /// bcopy step 1: a send slot and its address/capacity for the pack callback.
    pub fn bcopy_reserve(&self, id: u32) -> Result<(u32, u64, usize), Status> {
        let mut g = lock(&self.inner);
        let slot = Self::reserve(&mut g, id)?;
        let skip = if self.kind == Kind::Ud { UD_HDR } else { 0 };
        Ok((slot, Self::tx_addr(&g, slot) + skip as u64, g.lay.seg - skip))
    }

    /// bcopy step 2: post the packed slot (`am_id` Some: AM; None: RDMA WRITE to `remote`).
    pub fn bcopy_post(&self, id: u32, slot: u32, len: usize, am_id: Option<u8>, remote: Option<(u64, Rkey)>) -> Result<(), Status> {
        let mut g = lock(&self.inner);
        let len = len + if self.kind == Kind::Ud { UD_HDR } else { 0 };
        if len > g.lay.seg {
            g.free_tx.push(slot);
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        if g.eps.get(id as usize).and_then(Option::as_ref).is_none() {
            g.free_tx.push(slot);
            return Err(UCS_ERR_INVALID_PARAM);
        }
        let base = Self::tx_addr(&g, slot);
        let mut wr = match (am_id, remote) {
            (Some(a), _) => Self::new_wr(&mut g, SendOpcode::SendImm).with_imm(a as u32),
            (None, Some((addr, rkey))) => Self::new_wr(&mut g, SendOpcode::Write).with_remote(addr, rkey),
            (None, None) => {
                g.free_tx.push(slot);
                return Err(UCS_ERR_INVALID_PARAM);
            }
        };
        wr = wr.with_sge(base, len as u32, g.lkey);
        let mut h = lock(self.host);
        self.post(&mut g, &mut h, id, slot, wr, 0, OpKind::Plain)
    }

    /// Give back a slot reserved by [`bcopy_reserve`](Self::bcopy_reserve) and not posted.
    pub fn bcopy_abort(&self, slot: u32) {
        lock(&self.inner).free_tx.push(slot);
    }

    /// PUT short (copy) or zcopy: RDMA WRITE.
    pub fn put(&self, id: u32, segs: &[Seg], remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        self.rdma(id, SendOpcode::Write, segs, remote, rkey, comp)
    }

    /// GET zcopy: RDMA READ into the registered segments.
    pub fn get_zcopy(&self, id: u32, segs: &[Seg], remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        self.rdma(id, SendOpcode::Read, segs, remote, rkey, comp)
    }

    fn rdma(&self, id: u32, opcode: SendOpcode, segs: &[Seg], remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        if self.kind != Kind::Rc {
            return Err(UCS_ERR_UNSUPPORTED);
        }
        let mut g = lock(&self.inner);
        let total: usize = segs.iter().map(Seg::len).sum();
        let zcopy = segs.iter().any(|s| matches!(s, Seg::Zcopy { .. }));
        if (!zcopy && total > g.lay.seg) || total > MAX_RDMA || segs.len() > MAX_IOV {
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        let slot = Self::reserve(&mut g, id)?;
        let mut h = lock(self.host);
        let mut wr = Self::new_wr(&mut g, opcode).with_remote(remote, rkey);
        if zcopy {
            for s in segs {
                match *s {
                    Seg::Zcopy { addr, len, lkey } => wr = wr.with_sge(addr, len as u32, lkey),
                    Seg::Copy(_) => {
                        g.free_tx.push(slot);
                        return Err(UCS_ERR_INVALID_PARAM);
                    }
                }
            }
        } else {
            match Self::copy_in(&g, &mut h, slot, 0, segs) {
                Ok(n) => wr = wr.with_sge(Self::tx_addr(&g, slot), n as u32, g.lkey),
                Err(e) => {
                    g.free_tx.push(slot);
                    return Err(e);
                }
            }
        }
        self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::Plain)
    }

    /// GET bcopy: RDMA READ into the send slot; the unpack callback runs at completion.
    pub fn get_bcopy(&self, id: u32, cb: usize, arg: usize, len: usize, remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        if self.kind != Kind::Rc {
            return Err(UCS_ERR_UNSUPPORTED);
        }
        let mut g = lock(&self.inner);
        if len > g.lay.seg {
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        let slot = Self::reserve(&mut g, id)?;
        let mut h = lock(self.host);
        let addr = Self::tx_addr(&g, slot);
        let wr = Self::new_wr(&mut g, SendOpcode::Read).with_remote(remote, rkey).with_sge(addr, len as u32, g.lkey);
        self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::GetBcopy { cb, arg, len })
    }

    /// An atomic: 64-bit add and cswap natively; swap and 32-bit ops as a compare-swap loop.
    /// `result` 0: no fetch (post).
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(&self, id: u32, kind: AtomicKind, width: u8, value: u64, compare: u64, remote: u64, rkey: Rkey, result: usize, comp: usize) -> Result<(), Status> {
        if self.kind != Kind::Rc {
            return Err(UCS_ERR_UNSUPPORTED);
        }
        if !(width == 8 && remote % 8 == 0 || width == 4 && remote % 4 == 0) {
            return Err(UCS_ERR_INVALID_PARAM);
        }
        let mut g = lock(&self.inner);
        let word = remote & !7;
        let native = width == 8 && kind != AtomicKind::Swap;
        let guess = g.eps.get(id as usize).and_then(Option::as_ref).and_then(|e| e.word_cache).filter(|&(a, _)| a == word).map_or(0, |(_, v)| v);
        let mut op = AtomicOp { kind, width, value, compare, word, rkey, shift: ((remote & 7) * 8) as u32, result, expected: guess, native };
        let slot = Self::reserve(&mut g, id)?;
        let wr = Self::atomic_wr(&g, slot, &mut op);
        let mut h = lock(self.host);
        self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::Atomic(op))
    }

    fn atomic_wr(g: &Inner, slot: u32, op: &mut AtomicOp) -> SendWr {
        let sge_addr = Self::tx_addr(g, slot);
        let (opcode, a, b) = if op.native {
            match op.kind {
                AtomicKind::Add => (SendOpcode::FetchAdd, op.value, 0),
                _ => (SendOpcode::CmpSwap, op.compare, op.value),
            }
        } else {
            (SendOpcode::CmpSwap, op.expected, op.apply(op.expected))
        };
        SendWr::new(0, opcode).with_remote(op.word, op.rkey).with_atomic(a, b).with_sge(sge_addr, 8, g.lkey)
    }

    // ------------------------------------------------------------------ flush, fence, pending

    pub fn ep_flush(&self, id: u32, cancel: bool, comp: usize) -> Status {
        let mut g = lock(&self.inner);
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else { return UCS_ERR_INVALID_PARAM };
        if cancel {
            // Nothing can be recalled from the send queue; flush(cancel) waits like flush.
            ep.pending.clear();
        }
        if ep.inflight.is_empty() {
            return UCS_OK;
        }
        if !ep.pending.is_empty() && !ep.dispatching {
            return UCS_ERR_NO_RESOURCE;
        }
        if comp != 0 {
            ep.waiters.push((ep.next_seq, comp));
        }
        UCS_INPROGRESS
    }

    pub fn iface_flush(&self, comp: usize) -> Status {
        let mut g = lock(&self.inner);
        if g.free_tx.len() == g.lay.tx_count {
            return UCS_OK;
        }
        if comp != 0 {
            g.iface_waiters.push(comp);
        }
        UCS_INPROGRESS
    }

    pub fn ep_fence(&self, id: u32) -> Status {
        let mut g = lock(&self.inner);
        match g.eps.get_mut(id as usize).and_then(Option::as_mut) {
            Some(ep) => {
                ep.fence = true;
                UCS_OK
            }
            None => UCS_ERR_INVALID_PARAM,
        }
    }

    pub fn iface_fence(&self) -> Status {
        let mut g = lock(&self.inner);
        for ep in g.eps.iter_mut().flatten() {
            ep.fence = true;
        }
        UCS_OK
    }

    pub fn ep_check(&self, id: u32) -> Status {
        let g = lock(&self.inner);
        match g.eps.get(id as usize).and_then(Option::as_ref) {
            Some(ep) => ep.failed.unwrap_or(UCS_OK),
            None => UCS_ERR_INVALID_PARAM,
        }
    }

    /// `UCS_ERR_BUSY` when the endpoint could send right now (UCT's contract), else queued.
    pub fn pending_add(&self, id: u32, req: usize) -> Status {
        let mut g = lock(&self.inner);
        let has_slot = !g.free_tx.is_empty();
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else { return UCS_ERR_INVALID_PARAM };
        if has_slot && ep.connected && ep.pending.is_empty() && ep.failed.is_none() && !ep.dispatching {
            return UCS_ERR_BUSY;
        }
        ep.pending.push_back(req);
        if !ep.in_rr {
            ep.in_rr = true;
            g.pending_rr.push_back(id);
        }
        UCS_OK
    }

    pub fn pending_take(&self, id: u32) -> Vec<usize> {
        let mut g = lock(&self.inner);
        match g.eps.get_mut(id as usize).and_then(Option::as_mut) {
            Some(ep) => ep.pending.drain(..).collect(),
            None => Vec::new(),
        }
    }

    /// The next pending request to call, round-robin over endpoints, while send slots are free.
    pub fn pending_next(&self) -> Option<(u32, usize)> {
        let mut g = lock(&self.inner);
        while let Some(&id) = g.pending_rr.front() {
            if g.free_tx.is_empty() {
                return None;
            }
            let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else {
                g.pending_rr.pop_front();
                continue;
            };
            match ep.pending.front() {
                Some(&req) if ep.connected => {
                    ep.dispatching = true;
                    return Some((id, req));
                }
                _ => {
                    ep.in_rr = false;
                    g.pending_rr.pop_front();
                }
            }
        }
        None
    }

    /// After calling a pending request: true to continue dispatching.
    pub fn pending_done(&self, id: u32, req: usize, status: Status) -> bool {
        let mut g = lock(&self.inner);
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else {
            g.pending_rr.retain(|&e| e != id);
            return true;
        };
        ep.dispatching = false;
        let go_on = status == UCS_OK || status == UCS_INPROGRESS;
        if status == UCS_OK && ep.pending.front() == Some(&req) {
            ep.pending.pop_front();
        }
        let more = !ep.pending.is_empty();
        if g.pending_rr.front() == Some(&id) {
            g.pending_rr.pop_front();
        }
        let ep = g.eps[id as usize].as_mut().expect("checked above");
        if more {
            ep.in_rr = true;
            if go_on {
                g.pending_rr.push_back(id);
            } else {
                g.pending_rr.push_front(id);
            }
        } else {
            ep.in_rr = false;
        }
        go_on
    }

    // ------------------------------------------------------------------ progress

    /// Poll the host and this interface's completions.
    pub fn progress(&self) -> Progress {
        let mut out = Progress::default();
        let mut g = lock(&self.inner);
        if g.closed {
            return out;
        }
        let mut ev = std::mem::take(&mut g.ev_spare);
        let mut h = lock(self.host);
        if self.kind == Kind::Ud {
            // Acknowledgements that found no datagram to ride on since the last call, then due
            // retransmissions; both leave with this call's device poll.
            if !g.ack_due.is_empty() {
                self.ud_send_acks(&mut g, &mut h);
            }
            g.tick = g.tick.wrapping_add(1);
            if g.ud_fast || g.tick % UD_TIMER_EVERY == 0 && g.eps.iter().flatten().any(|e| !e.unacked.is_empty() && e.failed.is_none()) {
                g.ud_fast = false;
                self.ud_timers(&mut g, &mut h, &mut ev);
            }
        }
        // The device every call; the CM agent (unused by UCX) only now and then.
        let busy = h.progress_datapath();
        let mut seen = g.lost_seen;
        let lost = h.lost_peers_since(&mut seen).to_vec();
        if !lost.is_empty() {
            g.lost_seen = seen;
            let gids: Vec<[u8; 16]> = lost.iter().map(|ip| gid_of(*ip)).collect();
            self.fail_lost_endpoints(&mut g, &mut h, &mut ev, &gids);
        }
        for _ in 0..POLL_BUDGET {
            let wc = match h.dev().device_mut().poll_cq_one(g.cq) {
                Ok(Some(wc)) => wc,
                _ => break,
            };
            out.count += 1;
            if (wc.opcode as u32) >= WcOpcode::Recv as u32 {
                self.rx_completion(&mut g, &mut h, &wc, &mut ev);
            } else {
                self.tx_completion(&mut g, &mut h, &wc, &mut ev);
            }
        }
        drop(h);
        if !g.iface_waiters.is_empty() && g.free_tx.len() == g.lay.tx_count {
            for comp in std::mem::take(&mut g.iface_waiters) {
                ev.push(Event::Complete { comp, status: UCS_OK });
            }
        }
        out.pending = !g.pending_rr.is_empty();
        // A long idle spell: let another runnable thread have this CPU. Both ends of a pair
        // busy-poll; on a machine with fewer free CPUs than pollers the peer (whose progress
        // sends the reply or the ACK) otherwise waits for the scheduler's timeslice.
        let mut yield_now = false;
        if busy || out.count > 0 {
            g.idle = 0;
        } else {
            g.idle = g.idle.saturating_add(1);
            if g.idle > idle_yield() {
                g.idle = 0;
                yield_now = true;
            }
        }
        if ev.is_empty() {
            g.ev_spare = ev;
        } else {
            out.events = ev;
        }
        drop(g);
        if yield_now {
            std::thread::yield_now();
        }
        out
    }

    fn rx_completion(&self, g: &mut Inner, h: &mut Runtime, wc: &droce_transport::verbs::WorkCompletion, ev: &mut Vec<Event>) {
        let slot = wc.wr_id as u32;
        if wc.status != WcStatus::Success {
            return; // flushed at destroy
        }
        let skip = if self.kind == Kind::Ud { GRH + UD_HDR } else { 0 };
        let imm = wc.wc_flags.contains(WcFlags::WITH_IMM).then_some(wc.imm_data);
        if (wc.byte_len as usize) < skip || !imm.is_some_and(|i| i <= 0xff || (self.kind == Kind::Ud && i == IMM_UD_ACK)) {
            // not a droce AM: repost the buffer
            let _ = self.post_rx(g, h, slot);
            return;
        }
        if self.kind == Kind::Ud && !self.ud_rx(g, h, wc, slot, ev) {
            let _ = self.post_rx(g, h, slot);
            return;
        }
        ev.push(Event::Am { id: wc.imm_data as u8, addr: Self::rx_addr(g, slot) + skip as u64, len: wc.byte_len as usize - skip, slot });
    }

    // ------------------------------------------------------------------ UD reliability
    //
    // Every UD datagram starts with [`UD_HDR`]: (sender endpoint key, sequence number,
    // acknowledged endpoint key, acknowledged sequence number). A receiver delivers a sender
    // endpoint's datagrams in sequence order only (a gap or a duplicate is dropped) and owes it a
    // cumulative acknowledgement, which rides on the next datagram to that peer or goes alone at
    // the next progress call. A sender keeps every datagram in its send slot until acknowledged
    // and sends the unacknowledged ones again (go-back-N) after [`UD_RTO`]; with no
    // acknowledgement for [`UD_FAIL_AFTER`] the endpoint fails like an RC one.

    /// A UD receive: apply the acknowledgement it carries; true if it is the next datagram of
    /// its channel (deliver it), false to drop it (acknowledgement only, duplicate, gap).
    fn ud_rx(&self, g: &mut Inner, h: &mut Runtime, wc: &droce_transport::verbs::WorkCompletion, slot: u32, ev: &mut Vec<Event>) -> bool {
        let base = Self::rx_addr(g, slot);
        let mut grh = [0u8; GRH + UD_HDR];
        if h.dev().read_mem(base, &mut grh).is_err() {
            return false;
        }
        let w = |i: usize| u32::from_le_bytes([grh[GRH + i * 4], grh[GRH + i * 4 + 1], grh[GRH + i * 4 + 2], grh[GRH + i * 4 + 3]]);
        let (src_ep, seq, ack_ep, ack_seq) = (w(0), w(1), w(2), w(3));
        if ack_ep != NO_EP {
            self.ud_acked(g, ack_ep, ack_seq, ev);
        }
        if wc.imm_data == IMM_UD_ACK {
            return false;
        }
        let Some(gid) = grh_source(&grh[..GRH]) else { return false };
        let key = (gid, wc.src_qp.value(), src_ep);
        let exp = g.chans.entry(key).or_insert(0);
        let next = seq == *exp;
        if next {
            *exp = exp.wrapping_add(1);
        }
        if !g.ack_due.contains(&key) {
            g.ack_due.push(key);
        }
        crate::trace!("ud rx from ep {src_ep:#x} seq {seq} ack {ack_ep:#x}/{ack_seq} -> {}", if next { "deliver" } else { "drop" });
        next
    }

    /// The acknowledgement owed to a channel of the peer (GID, QPN), if any: (its endpoint key,
    /// last in-order sequence number), else (NO_EP, 0).
    fn take_ack_for(g: &mut Inner, gid: &[u8; 16], qpn: u32) -> (u32, u32) {
        match g.ack_due.iter().position(|k| &k.0 == gid && k.1 == qpn) {
            Some(i) => {
                let k = g.ack_due.swap_remove(i);
                (k.2, g.chans.get(&k).map_or(0, |e| e.wrapping_sub(1)))
            }
            None => (NO_EP, 0),
        }
    }

    /// The peer received every datagram of endpoint `key` up to `ack_seq`.
    fn ud_acked(&self, g: &mut Inner, key: u32, ack_seq: u32, ev: &mut Vec<Event>) {
        let id = (key & 0xffff) as usize;
        if !g.eps.get(id).and_then(Option::as_ref).is_some_and(|e| e.ud_key == key) {
            return; // an endpoint gone since
        }
        let mut progressed = false;
        loop {
            let Some(&slot) = g.eps[id].as_ref().and_then(|e| e.unacked.front()) else { break };
            let Some(op) = g.ops[slot as usize].as_mut() else {
                g.eps[id].as_mut().map(|e| e.unacked.pop_front());
                continue;
            };
            // wrapping comparison: seq <= ack_seq
            if (ack_seq.wrapping_sub(op.seq as u32) as i32) < 0 {
                break;
            }
            g.eps[id].as_mut().map(|e| e.unacked.pop_front());
            progressed = true;
            if op.posted {
                op.acked = true; // retires at its local completion
            } else if let Some(op) = g.ops[slot as usize].take() {
                Self::retire(g, slot, op, UCS_OK, true, ev);
            }
        }
        // the sequence number of the oldest unacknowledged datagram
        let front = g.eps[id].as_ref().and_then(|e| e.unacked.front()).and_then(|&s| g.ops[s as usize]).map(|o| o.seq as u32);
        let Some(e) = g.eps[id].as_mut() else { return };
        if progressed {
            // the next timer check re-arms from scratch (no clock read on this path)
            e.last_ack = None;
            e.retx_at = None;
            e.dup_acks = 0;
            e.fast_done = false;
        } else if front.is_some_and(|f| f.wrapping_sub(1) == ack_seq) && !e.fast_done {
            // The peer repeats its acknowledgement: it received something past a gap (or a
            // duplicate). Two in a row: send the unacknowledged datagrams again at the next
            // timer check instead of after the full timeout (once per timeout period).
            e.dup_acks = e.dup_acks.saturating_add(1);
            if e.dup_acks >= 2 {
                e.fast_retx = true;
                e.fast_done = true;
                e.dup_acks = 0;
                g.ud_fast = true;
            }
        }
    }

    /// Acknowledgement-only datagrams for the channels still owed one (send slots permitting).
    fn ud_send_acks(&self, g: &mut Inner, h: &mut Runtime) {
        while let Some(&key) = g.ack_due.last() {
            let Some(qp) = g.ud_qp else { return };
            let Some(slot) = g.free_tx.pop() else { return };
            g.ack_due.pop();
            let ack = g.chans.get(&key).map_or(0, |e| e.wrapping_sub(1));
            let mut hb = [0u8; UD_HDR];
            for (i, v) in [NO_EP, 0, key.2, ack].into_iter().enumerate() {
                hb[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
            let addr = Self::tx_addr(g, slot);
            let av = droce_transport::verbs::AddressVector { dgid: Gid(key.0), sgid_index: g.sgid_index, hop_limit: 64, ..Default::default() };
            let dest = UdDest { av, remote_qpn: Qpn::new(key.1), remote_qkey: UD_QKEY };
            let mut wr = Self::new_wr(g, SendOpcode::SendImm).with_imm(IMM_UD_ACK).with_sge(addr, UD_HDR as u32, g.lkey).with_ud(dest);
            wr.wr_id = slot as u64;
            let ok = h.dev().write_mem(addr, &hb).is_ok() && h.dev().device_mut().post_send_ref(qp, &wr).is_ok();
            g.wr_spare = Some(wr);
            if ok {
                g.ops[slot as usize] = Some(Op { ep: NO_EP, seq: 0, comp: 0, kind: OpKind::Plain, am: 0, posted: true, acked: true });
            } else {
                g.free_tx.push(slot);
                return;
            }
        }
    }

    /// Send unacknowledged datagrams again where due; fail endpoints that saw no
    /// acknowledgement for UD_FAIL_AFTER.
    /// Peers the host found gone ([`Runtime::lost_peers_since`]: the process behind a memif link
    /// that went down; one link per peer on the zero-config mesh), by GID: every endpoint to
    /// one of them fails now with `UCS_ERR_ENDPOINT_TIMEOUT`, as it would after its retries,
    /// and not only those with an operation outstanding (a side waiting for a reply has none
    /// and waited forever); endpoints to other peers go on (an endpoint whose peer is not known
    /// yet fails with any loss). RC: the QP goes to the error state, so what is outstanding
    /// completes with flush errors through the usual path; UD: unacknowledged operations end
    /// here.
    fn fail_lost_endpoints(&self, g: &mut Inner, h: &mut Runtime, ev: &mut Vec<Event>, lost: &[[u8; 16]]) {
        for id in 0..g.eps.len() {
            let Some(e) = g.eps[id].as_mut() else { continue };
            if e.failed.is_some() {
                continue;
            }
            if e.peer_gid.is_some_and(|p| !lost.contains(&p)) {
                continue;
            }
            e.failed = Some(UCS_ERR_ENDPOINT_TIMEOUT);
            e.retx_at = None;
            ev.push(Event::EpFailed { ep_c: e.c, status: UCS_ERR_ENDPOINT_TIMEOUT, peer_gone: true });
            if let Some(qp) = e.qp {
                let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                let _ = h.dev().device_mut().modify_qp(qp, &a, QpAttrMask::STATE);
            }
            let slots: Vec<u32> = e.unacked.drain(..).collect();
            for slot in slots {
                match g.ops[slot as usize].as_mut() {
                    Some(op) if op.posted => op.acked = true,
                    Some(_) => {
                        if let Some(op) = g.ops[slot as usize].take() {
                            Self::retire(g, slot, op, UCS_ERR_ENDPOINT_TIMEOUT, true, ev);
                        }
                    }
                    None => {}
                }
            }
        }
    }

    fn ud_timers(&self, g: &mut Inner, h: &mut Runtime, ev: &mut Vec<Event>) {
        let Some(qp) = g.ud_qp else { return };
        let now = Instant::now();
        for id in 0..g.eps.len() {
            let Some(e) = g.eps[id].as_mut() else { continue };
            if e.failed.is_some() || e.unacked.is_empty() {
                continue;
            }
            let fast = std::mem::take(&mut e.fast_retx);
            if e.retx_at.is_none() && !fast {
                // armed at the first check that sees unacknowledged datagrams
                e.retx_at = Some(now + UD_RTO);
                e.last_ack.get_or_insert(now);
                continue;
            }
            e.last_ack.get_or_insert(now);
            if !fast && !e.retx_at.is_some_and(|t| t <= now) {
                continue;
            }
            crate::trace!("ud timer: ep {id} {} unacked, {:?} since the last acknowledgement", e.unacked.len(), e.last_ack.map(|t| now.duration_since(t)));
            let (dest, last) = (e.ud, e.last_ack);
            if last.is_some_and(|t| now.duration_since(t) >= UD_FAIL_AFTER) {
                let e = g.eps[id].as_mut().expect("checked above");
                e.failed = Some(UCS_ERR_ENDPOINT_TIMEOUT);
                e.retx_at = None;
                ev.push(Event::EpFailed { ep_c: e.c, status: UCS_ERR_ENDPOINT_TIMEOUT, peer_gone: false });
                let slots: Vec<u32> = e.unacked.drain(..).collect();
                for slot in slots {
                    match g.ops[slot as usize].as_mut() {
                        Some(op) if op.posted => op.acked = true,
                        Some(_) => {
                            if let Some(op) = g.ops[slot as usize].take() {
                                Self::retire(g, slot, op, UCS_ERR_ENDPOINT_TIMEOUT, true, ev);
                            }
                        }
                        None => {}
                    }
                }
                continue;
            }
            let Some(dest) = dest else { continue };
            let slots: Vec<u32> = g.eps[id].as_ref().map(|e| e.unacked.iter().copied().collect()).unwrap_or_default();
            for slot in slots {
                let Some(op) = g.ops[slot as usize] else { continue };
                if op.posted {
                    continue; // the last copy is still queued
                }
                // A fresh acknowledgement rides along (the header's old one may be long stale):
                // when every slot of both ends holds an unacknowledged datagram, no ACK-only
                // datagram can be sent (it needs a free slot) and retransmissions are the only
                // datagrams left to carry one.
                let (ack_ep, ack_seq) = Self::take_ack_for(g, &dest.av.dgid.0, dest.remote_qpn.value());
                if ack_ep != NO_EP {
                    let mut ab = [0u8; 8];
                    ab[..4].copy_from_slice(&ack_ep.to_le_bytes());
                    ab[4..].copy_from_slice(&ack_seq.to_le_bytes());
                    let _ = h.dev().write_mem(Self::tx_addr(g, slot) + 8, &ab);
                }
                let mut wr = Self::new_wr(g, SendOpcode::SendImm).with_imm(op.am as u32).with_ud(dest);
                wr.sg_list.extend_from_slice(&g.ud_sges[slot as usize]);
                wr.wr_id = slot as u64;
                let ok = h.dev().device_mut().post_send_ref(qp, &wr).is_ok();
                g.wr_spare = Some(wr);
                if !ok {
                    break; // send queue full: the next timer round
                }
                g.retransmits += 1;
                if let Some(o) = g.ops[slot as usize].as_mut() {
                    o.posted = true;
                }
            }
            if let Some(e) = g.eps[id].as_mut() {
                e.retx_at = Some(now + UD_RTO);
            }
        }
    }

    /// An operation is over: its completion, its slot (`free`), its endpoint's flush waiters.
    fn retire(g: &mut Inner, slot: u32, op: Op, status: Status, free: bool, ev: &mut Vec<Event>) {
        if op.comp != 0 {
            ev.push(Event::Complete { comp: op.comp, status });
        }
        if free {
            g.free_tx.push(slot);
        }
        if op.ep == NO_EP {
            return;
        }
        if let Some(ep) = g.eps[op.ep as usize].as_mut() {
            ep.inflight.remove(&op.seq);
            if !ep.waiters.is_empty() {
                let mut i = 0;
                while i < ep.waiters.len() {
                    if ep.flushed_below(ep.waiters[i].0) {
                        let (_, comp) = ep.waiters.swap_remove(i);
                        ev.push(Event::Complete { comp, status: ep.failed.unwrap_or(UCS_OK) });
                    } else {
                        i += 1;
                    }
                }
            }
        }
    }

    fn tx_completion(&self, g: &mut Inner, h: &mut Runtime, wc: &droce_transport::verbs::WorkCompletion, ev: &mut Vec<Event>) {
        let slot = wc.wr_id as u32;
        crate::trace!("{:?} tx completion slot {slot} {:?} {:?}", self.kind, wc.opcode, wc.status);
        let Some(mut op) = g.ops.get_mut(slot as usize).and_then(Option::take) else { return };
        let status = from_wc(wc.status);
        if op.ep == NO_EP {
            // an acknowledgement-only datagram, or an operation of a destroyed endpoint
            g.free_tx.push(slot);
            return;
        }
        if self.kind == Kind::Ud && status == UCS_OK {
            // Sent; it is over once the peer acknowledged it too.
            op.posted = false;
            if op.acked {
                let st = g.eps[op.ep as usize].as_ref().and_then(|e| e.failed).unwrap_or(UCS_OK);
                Self::retire(g, slot, op, st, true, ev);
            } else {
                g.ops[slot as usize] = Some(op);
            }
            return;
        }
        if self.kind == Kind::Ud {
            if let Some(ep) = g.eps[op.ep as usize].as_mut() {
                ep.unacked.retain(|&s| s != slot);
            }
        }
        let mut free_slot = true;
        if status != UCS_OK {
            if let Some(ep) = g.eps[op.ep as usize].as_mut() {
                if ep.failed.is_none() {
                    let s = if status == UCS_ERR_CANCELED { UCS_ERR_ENDPOINT_TIMEOUT } else { status };
                    ep.failed = Some(s);
                    ev.push(Event::EpFailed { ep_c: ep.c, status: s, peer_gone: false });
                }
            }
            if op.comp != 0 {
                ev.push(Event::Complete { comp: op.comp, status });
            }
        } else {
            match op.kind {
                OpKind::Plain => {
                    if op.comp != 0 {
                        ev.push(Event::Complete { comp: op.comp, status: UCS_OK });
                    }
                }
                OpKind::GetBcopy { cb, arg, len } => {
                    ev.push(Event::Unpack { cb, arg, addr: Self::tx_addr(g, slot), len, slot });
                    if op.comp != 0 {
                        ev.push(Event::Complete { comp: op.comp, status: UCS_OK });
                    }
                    free_slot = false; // freed after the unpack callback ran
                }
                OpKind::Atomic(mut a) => {
                    let mut b = [0u8; 8];
                    let _ = h.dev().read_mem(Self::tx_addr(g, slot), &mut b);
                    let old = u64::from_le_bytes(b);
                    let done = a.native || old == a.expected || a.apply(old) == old;
                    if let Some(ep) = g.eps[op.ep as usize].as_mut() {
                        if !a.native {
                            let now = if old == a.expected { a.apply(old) } else { old };
                            ep.word_cache = Some((a.word, now));
                        }
                    }
                    if done {
                        if a.result != 0 {
                            ev.push(Event::AtomicResult { result: a.result, width: a.width, value: a.fetched(old) });
                        }
                        if op.comp != 0 {
                            ev.push(Event::Complete { comp: op.comp, status: UCS_OK });
                        }
                    } else {
                        // Lost the race for the word: retry with the value just read.
                        a.expected = old;
                        let mut wr = Self::atomic_wr(g, slot, &mut a);
                        wr.wr_id = slot as u64;
                        wr.flags = SendFlags::SIGNALED;
                        op.kind = OpKind::Atomic(a);
                        let qp = g.eps[op.ep as usize].as_ref().and_then(|e| e.qp);
                        if let Some(qp) = qp {
                            if h.dev().device_mut().post_send(qp, wr).is_ok() {
                                g.ops[slot as usize] = Some(op);
                                return;
                            }
                        }
                        if op.comp != 0 {
                            ev.push(Event::Complete { comp: op.comp, status: UCS_ERR_IO_ERROR });
                        }
                    }
                }
            }
        }
        op.comp = 0; // completed above
        Self::retire(g, slot, op, status, free_slot, ev);
    }

    /// After the events ran: repost receive slots, free GET bcopy slots; keeps the buffer.
    pub fn after_events(&self, mut events: Vec<Event>) {
        let mut g = lock(&self.inner);
        if g.closed {
            return;
        }
        let mut h = None;
        for e in &events {
            match *e {
                Event::Am { slot, .. } => {
                    let h = h.get_or_insert_with(|| lock(self.host));
                    let _ = self.post_rx(&mut g, h, slot);
                }
                Event::Unpack { slot, .. } => g.free_tx.push(slot),
                _ => {}
            }
        }
        drop(h);
        if events.capacity() > g.ev_spare.capacity() {
            events.clear();
            g.ev_spare = events;
        }
    }
}

/// The source GID of a UD receive's 40-byte GRH area: an IPv6 header, or (RoCEv2 over IPv4,
/// as rxe lays it out) an IPv4 header in its last 20 bytes.
fn grh_source(grh: &[u8]) -> Option<[u8; 16]> {
    if grh.len() < GRH {
        return None;
    }
    if grh[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&grh[8..24]);
        Some(a)
    } else if grh[20] >> 4 == 4 {
        let s = &grh[32..36];
        Some(Gid::from_ipv4(std::net::Ipv4Addr::new(s[0], s[1], s[2], s[3])).0)
    } else {
        None
    }
}

/// The PD shared by all droce MRs and QPs (see [`md::pd`]).
pub fn shared_pd(host: &mut Runtime) -> PdHandle {
    md::pd(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: AtomicKind, width: u8, value: u64, compare: u64, shift: u32) -> AtomicOp {
        AtomicOp { kind, width, value, compare, word: 0, rkey: Rkey(0), shift, result: 0, expected: 0, native: false }
    }

    #[test]
    fn emulated_32_bit_ops_touch_only_their_half() {
        let w = 0x1111_2222_3333_4444u64;
        assert_eq!(op(AtomicKind::Add, 4, 1, 0, 0).apply(w), 0x1111_2222_3333_4445);
        assert_eq!(op(AtomicKind::Add, 4, 1, 0, 32).apply(w), 0x1111_2223_3333_4444);
        assert_eq!(op(AtomicKind::Add, 4, 1, 0, 0).apply(0xffff_ffff), 0, "wraps inside 32 bits");
        assert_eq!(op(AtomicKind::Swap, 4, 7, 0, 32).apply(w), 0x0000_0007_3333_4444);
        assert_eq!(op(AtomicKind::Cswap, 4, 9, 0x3333_4444, 0).apply(w), 0x1111_2222_0000_0009);
        assert_eq!(op(AtomicKind::Cswap, 4, 9, 5, 0).apply(w), w, "compare mismatch writes nothing");
        assert_eq!(op(AtomicKind::Swap, 8, 5, 0, 0).apply(w), 5);
        assert_eq!(op(AtomicKind::Add, 4, 0, 0, 32).fetched(w), 0x1111_2222);
    }

    #[test]
    fn rc_ep_addr_carries_the_path_mtu() {
        for mtu in [PathMtu::Mtu256, PathMtu::Mtu512, PathMtu::Mtu1024, PathMtu::Mtu2048, PathMtu::Mtu4096] {
            let a = encode_rc_ep_addr(0x00ab_cdef, 0x0012_3456, mtu);
            assert_eq!(decode_rc_ep_addr(&a), (0x00ab_cdef, 0x0012_3456, mtu));
        }
        // QPN bits above 24 never leak into the MTU byte
        let a = encode_rc_ep_addr(0xffff_ffff, 7, PathMtu::Mtu512);
        assert_eq!(decode_rc_ep_addr(&a), (0x00ff_ffff, 7, PathMtu::Mtu512));
        // an address without an MTU code (high byte 0) connects at 1024
        let mut old = [0u8; RC_EP_ADDR_LEN];
        old[..4].copy_from_slice(&0x0000_0011u32.to_le_bytes());
        assert_eq!(decode_rc_ep_addr(&old), (0x11, 0, PathMtu::Mtu1024));
        // the smaller end wins
        let (_, _, peer) = decode_rc_ep_addr(&encode_rc_ep_addr(1, 1, PathMtu::Mtu1024));
        assert_eq!(PathMtu::Mtu4096.min(peer), PathMtu::Mtu1024);
    }

    #[test]
    fn ud_segments_are_capped_at_the_path_mtu() {
        let cfg = IfaceCfg { seg_size: 8192, tx_queue_len: 256, rx_queue_len: 1024 };
        let l = Layout::new(Kind::Ud, &cfg, PathMtu::Mtu1024);
        assert_eq!(l.seg, 1024);
        assert!(l.rx_stride >= 1024 + GRH);
        let l = Layout::new(Kind::Rc, &cfg, PathMtu::Mtu1024);
        assert_eq!(l.seg, 8192);
        assert_eq!(l.bytes(), 1024 * 8192 + 256 * 8192);
    }
}

/// The GID (device address) of a host address: IPv4-mapped or IPv6.
fn gid_of(ip: std::net::IpAddr) -> [u8; 16] {
    match ip {
        std::net::IpAddr::V4(a) => Gid::from_ipv4(a).0,
        std::net::IpAddr::V6(a) => Gid::from_ipv6(a).0,
    }
}
