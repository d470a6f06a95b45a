//! The two UCT interfaces (droce_rc, droce_ud) over the process-wide droce runtime.
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
//! invokes with no lock held (a callback may send again). Everything goes through the
//! runtime's verbs ([`droce_dpdk::runtime::Runtime`]).
//!
//! Files: this one the interface (queues, memory layout, figures); `addr` the address formats;
//! `endpoint` endpoints, flush, fence and pending requests; `send` the operations; `atomic`
//! the atomics and their compare-swap emulation; `completion` progress and completions; `ud`
//! the droce_ud reliability glue (the protocol is `droce_transport::ud::reliable`).

// Operations carry UCX's argument lists (endpoint, buffers, remote address, key, completion).
#![allow(clippy::too_many_arguments)]
// MSRV 1.75: no Option::is_none_or, no u64::is_multiple_of.
#![allow(clippy::unnecessary_map_or, clippy::manual_is_multiple_of)]

mod addr;
mod atomic;
mod completion;
mod endpoint;
mod send;
mod ud;

pub use addr::*;
pub use atomic::AtomicKind;

use crate::md;
use crate::status::*;
use atomic::AtomicOp;
use droce_dpdk::runtime::idle::IdleSpell;
use droce_dpdk::runtime::Runtime;
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::ud::reliable::{Config as UdReliability, Receiver as UdReceiver, Sender as UdSender};
use droce_transport::verbs::mr::DeregMrError;
use droce_transport::verbs::{CqHandle, PdHandle, RecvWr, SendWr, SrqHandle, UdDest};
use droce_transport::{Gid, Lkey, Psn, QKey};
use std::collections::{BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

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
/// Idle progress calls in a row after which the thread gives up its CPU once (default of
/// `DROCE_UCX_IDLE_YIELD`; 0 there: never): a yield, or a sleep once idle for a millisecond
/// ([`droce_dpdk::runtime::idle`]).
const IDLE_YIELD: u32 = 64;

fn idle_yield() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| match parse_idle_yield(std::env::var("DROCE_UCX_IDLE_YIELD").ok().as_deref()) {
        Ok(n) => n,
        Err(e) => {
            // named on stderr at any UCX log level, the default kept (as the provider's knobs)
            eprintln!("droce: {e}; it stays {IDLE_YIELD}");
            IDLE_YIELD
        }
    })
}

fn parse_idle_yield(v: Option<&str>) -> Result<u32, String> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(IDLE_YIELD),
        Some(t) => match t.parse::<u32>() {
            Ok(0) => Ok(u32::MAX),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("DROCE_UCX_IDLE_YIELD='{t}': want a number of idle calls (0: never yield)")),
        },
    }
}

/// Bytes of the droce_ud reliability header at the head of every UD datagram (after the GRH
/// on receive).
pub const UD_HDR: usize = droce_transport::ud::reliable::HEADER_LEN;
/// No endpoint: an operation whose endpoint is gone, or an acknowledgement-only datagram, only
/// frees its slot at its completion.
const NO_EP: u32 = u32::MAX;


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
    /// UD: the reliable sender of this endpoint's datagrams (tokens: send slots).
    rel: Option<UdSender<u32>>,
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
            rel: None,
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
    /// RC: this interface offers selective repeat in its endpoint addresses
    /// (`RuntimeConfig::selective_repeat`, `DROCE_SELECTIVE_REPEAT`).
    selective_repeat: bool,
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
    /// The current idle spell (yield or sleep when giving up the CPU).
    idle_spell: IdleSpell,
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
    /// UD: timers and bounds of the reliability protocol.
    ud_cfg: UdReliability,
    /// UD: the next expected sequence number of every sending endpoint heard from, and the
    /// acknowledgements owed (sent with the next datagram to that peer, or alone at the next
    /// progress call).
    ud_rx: UdReceiver,
    /// UD: datagrams the reliability protocol finished or gave up (a buffer kept between calls).
    ud_done: Vec<u32>,
    /// UD: the origin of the protocol's time (it reads no clock itself).
    epoch: std::time::Instant,
    /// UD: endpoint generations (the high half of an endpoint key).
    ep_gen: u16,
    /// Progress calls (retransmission-timer pacing).
    tick: u32,
    /// UD: datagrams sent again (DROCE_UCX_STATS).
    retransmits: u64,
    /// Progress calls, the device polls they made, the polls that found work, completions
    /// taken (DROCE_UCX_STATS).
    stat_progress: [u64; 4],
    /// The process's device polls as this interface last saw them (one poll serves all).
    poll_seen: completion::PollSeen,
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
        let mtu = host.path_mtu();
        let selective_repeat = host.config().selective_repeat;
        let d = host;
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
            selective_repeat,
            free_tx: (0..lay.tx_count as u32).rev().collect(),
            ops: vec![None; lay.tx_count],
            eps: Vec::new(),
            free_eps: Vec::new(),
            pending_rr: VecDeque::new(),
            iface_waiters: Vec::new(),
            psn_seed: (std::process::id().wrapping_mul(0x9e37_79b9) ^ (base as u32)) & 0xff_ffff,
            closed: false,
            idle: 0,
            idle_spell: IdleSpell::default(),
            ev_spare: Vec::with_capacity(POLL_BUDGET * 2),
            wr_spare: None,
            rx_wr: RecvWr::new(0).with_sge(base, lay.rx_stride as u32, lkey),
            ud_sges: if kind == Kind::Ud { vec![Vec::new(); lay.tx_count] } else { Vec::new() },
            // every datagram in flight holds a send slot: the window is the slot count
            ud_cfg: UdReliability { window: lay.tx_count, ..UdReliability::default() },
            ud_rx: UdReceiver::new(&UdReliability::default()),
            ud_done: Vec::new(),
            epoch: std::time::Instant::now(),
            ep_gen: 0,
            tick: 0,
            retransmits: 0,
            stat_progress: [0; 4],
            poll_seen: Default::default(),
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
                iface.post_rx(&mut g, d, slot).map_err(|s| format!("droce: posting receive buffers failed ({s})"))?;
            }
        }
        Ok(iface)
    }

    /// Destroys the queues and deregisters the slot block; `false` when the block must not be
    /// freed (frames in flight still point into it).
    pub fn close(&self) -> bool {
        let mut g = lock(&self.inner);
        g.closed = true;
        let mut h = lock(self.host);
        if std::env::var_os("DROCE_UCX_STATS").is_some() {
            let port = h.port_id().0;
            eprintln!("droce {:?} iface closed; device statistics:\n{}", self.kind, droce_dpdk::roce::format_roce_stats(port, &h.stats()));
            if self.kind == Kind::Ud {
                eprintln!("droce_ud: {} datagrams sent again", g.retransmits);
            }
            let [calls, polls, busy, wcs] = g.stat_progress;
            eprintln!("droce {:?}: {calls} progress calls, {polls} device polls ({busy} with work), {wcs} completions", self.kind);
        }
        h.flush(); // held ACKs (RuntimeConfig::hold_acks) leave before the queues go
        let d = &mut *h;
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
        match h.dereg_mr(g.lkey) {
            Ok(()) | Err(DeregMrError::InvalidMr) => true,
            // Zero-copy frames over the slots are still held by the PMD (a ring whose consumer
            // stopped): the block stays registered and must outlive them.
            Err(DeregMrError::InUse) => false,
        }
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
        let d = host;
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
            // UCP reads these figures to pick lanes and to set its eager/rendezvous threshold
            // (docs/ucx.md, "What UCP picks"). Measured over the zero-config memif pair at path
            // MTU 4096, 2-core VM, medians of 5 alternated ucx_perftest runs (2026-11-28, load
            // 17-23; BENCHMARKS.md): am_lat 8 B typical, put_bw 1 MiB zcopy with 8 in flight,
            // am_bw 8 B typical per message. Their ratios matter more than their values.
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
                latency_s: 4.8e-6,
                bandwidth_bps: 1700e6,
                overhead_s: 0.29e-6,
                path_mtu: mtu,
            },
            // Measured as droce_rc's, bandwidth from am_bw bcopy of one full datagram (4080 B;
            // zcopy moves half of that). Reliable (the header, acknowledgements,
            // retransmission), and its lower latency makes it UCP's AM lane (UCP tag_lat 8 B
            // 4.7 -> 3.4 us median); eager messages up to UCP's rendezvous threshold go over it
            // in datagrams, RDMA and rendezvous stay on droce_rc.
            Kind::Ud => Info {
                am_max_short: seg - UD_HDR,
                am_max_bcopy: seg - UD_HDR,
                am_max_zcopy: seg.saturating_sub(MAX_HDR + UD_HDR),
                am_max_hdr: MAX_HDR.min(seg / 2),
                max_iov: MAX_IOV,
                latency_s: 3.8e-6,
                bandwidth_bps: 725e6,
                overhead_s: 0.33e-6,
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
}

/// The PD shared by all droce MRs and QPs (see [`md::pd`]).
pub fn shared_pd(host: &mut Runtime) -> PdHandle {
    md::pd(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_idle_yield_is_an_error_not_the_default() {
        assert_eq!(parse_idle_yield(None), Ok(IDLE_YIELD));
        assert_eq!(parse_idle_yield(Some("0")), Ok(u32::MAX));
        assert_eq!(parse_idle_yield(Some("7")), Ok(7));
        assert!(parse_idle_yield(Some("7x")).unwrap_err().contains("DROCE_UCX_IDLE_YIELD='7x'"));
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

