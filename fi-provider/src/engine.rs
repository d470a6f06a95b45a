//! The provider's state behind every fid: CQs, EQs, counters, AVs, endpoints, outstanding
//! operations, and the progress step that turns device work completions and CM events into
//! libfabric completions and events.
//!
//! One process-wide `Mutex<Engine>` (lock order: engine, then the host); every FFI entry locks
//! it, so all threading levels are safe. Manual progress runs inside CQ/EQ/counter reads;
//! auto progress is a thread that runs the same step.

use crate::addr::{self, EpAddr, Local};
use crate::ffi::sys as fi;
use crate::info::{self, EpType};
use crate::queue::{CqEntry, CqError, Queue, Signal, ADDR_NOTAVAIL};
use droce_dpdk::runtime::Runtime;
use droce_dpdk::roce::cm::{CmAgentEvent, ConnId, ConnectParams, SidrEvent, SidrId};
use droce_transport::device::DestroySrqError;
use droce_transport::qp::{QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::verbs::{CqHandle, PdHandle, SrqHandle, RecvWr, SendFlags, SendOpcode, SendWr, Sge, UdDest, WcFlags, WorkCompletion};
use droce_transport::{Gid, Lkey, Psn, QKey, Qpn, Rkey};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard, OnceLock};

pub type Errno = u32;
pub type Id = u32;

/// Q_Key of droce's UD endpoints (high bit clear: not a controlled key).
pub const UD_QKEY: u32 = 0x0d40_ce11;
/// Marker + length in front of CM private data, so that the peer gets exactly what was sent
/// (REQ/REP private data arrive zero padded to their fixed size).
const CM_MAGIC: u8 = 0xd5;
const DEV_CQ_DEPTH: usize = 1 << 14;

pub fn cm_encode(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(data.len() + 2);
    v.push(CM_MAGIC);
    v.push(data.len() as u8);
    v.extend_from_slice(data);
    v
}

pub fn cm_decode(raw: &[u8]) -> Vec<u8> {
    match raw {
        [CM_MAGIC, n, rest @ ..] if (*n as usize) <= rest.len() => rest[..*n as usize].to_vec(),
        _ => Vec::new(),
    }
}

/// Positive FI_E* value for a work completion status.
pub fn wc_errno(s: WcStatus) -> Errno {
    match s {
        WcStatus::Success => 0,
        WcStatus::WrFlushErr => fi::FI_ECANCELED,
        WcStatus::LocLenErr => fi::FI_ETRUNC,
        WcStatus::RemAccessErr | WcStatus::LocProtErr | WcStatus::LocAccessErr => fi::FI_EACCES,
        WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr | WcStatus::RespTimeoutErr => fi::FI_ETIMEDOUT,
        WcStatus::RemInvReqErr | WcStatus::RemInvRdReqErr => fi::FI_EINVAL,
        _ => fi::FI_EIO,
    }
}

pub fn wc_status_str(v: i32) -> &'static str {
    match u8::try_from(v).ok().and_then(WcStatus::from_value) {
        Some(WcStatus::Success) => "success",
        Some(WcStatus::LocLenErr) => "local length error (receive buffer too small)",
        Some(WcStatus::LocQpOpErr) => "local QP operation error",
        Some(WcStatus::LocProtErr) => "local protection error (bad lkey/descriptor)",
        Some(WcStatus::WrFlushErr) => "work request flushed (endpoint in error or shut down)",
        Some(WcStatus::RemAccessErr) => "remote access error (bad rkey, bounds or rights)",
        Some(WcStatus::RemInvReqErr) => "remote invalid request",
        Some(WcStatus::RemOpErr) => "remote operational error",
        Some(WcStatus::RetryExcErr) => "transport retry counter exceeded (peer unreachable)",
        Some(WcStatus::RnrRetryExcErr) => "RNR retry counter exceeded (no receive posted at the peer)",
        Some(WcStatus::RespTimeoutErr) => "response timeout",
        Some(s) => s.name(),
        None => "unknown droce error",
    }
}

trait StatusName {
    fn name(self) -> &'static str;
}
impl StatusName for WcStatus {
    fn name(self) -> &'static str {
        match self {
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::MwBindErr => "memory window bind error",
            WcStatus::BadRespErr => "bad response (unexpected transport opcode or length from the peer)",
            WcStatus::LocRddViolErr => "local RDD violation",
            WcStatus::RemAbortErr => "remote aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::GeneralErr => "general error",
            _ => "work completion error",
        }
    }
}

/// An EQ event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EqEvent {
    ConnReq { pep_fid: usize, pep_context: usize, conn: ConnId, src: SocketAddr, dst: SocketAddr, data: Vec<u8> },
    Connected { fid: usize, context: usize, data: Vec<u8> },
    Shutdown { fid: usize, context: usize },
    /// fi_mr_reg / fi_av_insert completions of asynchronous objects are not used by droce.
    Other { event: u32, fid: usize, context: usize, data: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqError {
    pub fid: usize,
    pub context: usize,
    pub err: Errno,
    pub prov_errno: i32,
    pub data: Vec<u8>,
}

#[derive(Debug, Default)]
pub struct Cq {
    pub dev: Option<CqHandle>,
    pub q: Queue<CqEntry, CqError>,
}

#[derive(Debug, Default)]
pub struct Cntr {
    pub value: u64,
    pub err: u64,
}

#[derive(Debug, Default)]
pub struct Av {
    pub entries: Vec<Option<EpAddr>>,
    /// Per entry: inserted as an FI_SOCKADDR_IN6 name (lookups answer in the format inserted).
    pub in6: Vec<bool>,
}

impl Av {
    pub fn insert(&mut self, a: EpAddr) -> u64 {
        self.insert_as(a, false)
    }
    /// Inserts `a`, remembering whether the application named it as a sockaddr_in6.
    pub fn insert_as(&mut self, a: EpAddr, in6: bool) -> u64 {
        let i = match self.entries.iter().position(|e| e.is_none()) {
            Some(i) => {
                self.entries[i] = Some(a);
                i
            }
            None => {
                self.entries.push(Some(a));
                self.entries.len() - 1
            }
        };
        if self.in6.len() <= i {
            self.in6.resize(i + 1, false);
        }
        self.in6[i] = in6;
        i as u64
    }
    /// Whether entry `fi_addr` was inserted as a sockaddr_in6.
    pub fn is_in6(&self, fi_addr: u64) -> bool {
        usize::try_from(fi_addr).ok().and_then(|i| self.in6.get(i)).copied().unwrap_or(false)
    }
    pub fn lookup(&self, fi_addr: u64) -> Option<EpAddr> {
        self.entries.get(usize::try_from(fi_addr).ok()?).copied().flatten()
    }
    pub fn remove(&mut self, fi_addr: u64) -> bool {
        match self.entries.get_mut(fi_addr as usize) {
            Some(e @ Some(_)) => {
                *e = None;
                true
            }
            _ => false,
        }
    }
    pub fn reverse(&self, ip: IpAddr, qpn: u32) -> u64 {
        self.entries
            .iter()
            .position(|e| e.is_some_and(|a| a.qpn == Some(qpn) && addr::same_ip(a.sa.ip(), ip)))
            .map(|i| i as u64)
            .unwrap_or(ADDR_NOTAVAIL)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    Idle,
    Connecting,
    Accepting,
    Connected,
    Shutdown,
}

/// Counters an endpoint bound, per kind of completion.
#[derive(Debug, Default, Clone, Copy)]
pub struct EpCntrs {
    pub send: Option<Id>,
    pub recv: Option<Id>,
    pub read: Option<Id>,
    pub write: Option<Id>,
}

#[derive(Debug)]
pub struct Ep {
    pub ty: EpType,
    pub fid: usize,
    pub context: usize,
    pub qp: Option<QpHandle>,
    pub tx_cq: Option<Id>,
    pub rx_cq: Option<Id>,
    /// FI_SELECTIVE_COMPLETION on the TX / RX CQ binding.
    pub tx_selective: bool,
    pub rx_selective: bool,
    pub eq: Option<Id>,
    pub av: Option<Id>,
    pub cntrs: EpCntrs,
    pub conn: Option<ConnId>,
    pub state: ConnState,
    pub src: EpAddr,
    pub peer: Option<EpAddr>,
    pub v6: bool,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    /// DGRAM: the application leaves FI_MSG_PREFIX room in its buffers.
    pub prefix: bool,
    /// The CM agent is done with this endpoint's connection (Disconnected, Rejected or
    /// TimedOut reported): its QP may be destroyed.
    pub cm_done: bool,
    /// FI_OPT_MIN_MULTI_RECV: a multi-receive buffer is released once less than this is left.
    pub min_multi_recv: u64,
    /// DGRAM bound to a port: the SIDR service (UDP port space) that names its QPN.
    pub sidr_service: Option<u64>,
    /// The shared receive context bound (FI_EP_MSG): the QP takes its receives from its SRQ.
    pub srx: Option<Id>,
    /// The QP number once enabled (receives on a shared context find their endpoint by it).
    pub qpn: Option<u32>,
}

/// A shared receive context (fi_srx_context): an SRQ that the MSG endpoints bound to it
/// take their receives from.
#[derive(Debug)]
pub struct Srx {
    pub fid: usize,
    pub context: usize,
    pub srq: SrqHandle,
}

/// How long a DGRAM send keeps asking a peer's CM for the QPN behind an IP + port (the peer
/// may still be starting: "no QP" answers are retried every [`SIDR_RETRY`]).
const SIDR_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
const SIDR_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// UD QPN resolution of a node/service DGRAM address (SIDR over QP1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sidr {
    Pending { id: SidrId, deadline: std::time::Instant },
    Retry { at: std::time::Instant, deadline: std::time::Instant },
    Done(u32),
    Failed,
}

#[derive(Debug)]
pub struct Pep {
    pub fid: usize,
    pub context: usize,
    pub eq: Option<Id>,
    pub src: EpAddr,
    pub listening: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Send,
    Recv,
    Read,
    Write,
    Atomic,
}

/// What a posted work request completes into.
#[derive(Debug, Clone)]
pub struct Op {
    pub ep: Id,
    pub kind: OpKind,
    pub context: usize,
    pub flags: u64,
    pub buf: u64,
    pub len: u64,
    /// Report a CQ entry on success (errors are always reported).
    pub report: bool,
    /// MRs registered just for this operation (no descriptor given), deregistered at completion.
    pub tmp_mrs: Vec<Lkey>,
    /// DGRAM receive without FI_MSG_PREFIX: the device writes GRH + payload here; the
    /// payload is copied to the application's segments at completion.
    pub bounce: Option<Bounce>,
}

/// A multi-receive buffer posted with FI_MULTI_RECV: `off` bytes of `base..base+len` are filled.
#[derive(Debug, Clone, Copy)]
pub struct MultiRecv {
    pub base: u64,
    pub len: u64,
    pub off: u64,
    pub lkey: Lkey,
}

#[derive(Debug, Default)]
pub struct MultiQueue {
    pub posted: bool,
    pub waiting: std::collections::VecDeque<(Seg, Op)>,
    /// The QP's RNR timer is down to [`MULTI_RECV_RNR_TIMER`].
    pub rnr_fast: bool,
}

/// min_rnr_timer code (IBA table 45: 0.01 ms) of a connection that receives into multi-receive
/// buffers: a message that arrives while the rest of a buffer is being posted again is
/// refused with an RNR NAK carrying this timer, so the sender comes back after 10 us instead
/// of the CM's default 0.64 ms (code 12).
pub const MULTI_RECV_RNR_TIMER: u8 = 1;

/// Default FI_OPT_MIN_MULTI_RECV (what the verbs provider uses).
pub const MIN_MULTI_RECV: u64 = 64;

/// A provider-owned receive area (registered while the receive is posted; its lkey is in
/// the op's `tmp_mrs`).
#[derive(Debug, Clone)]
pub struct Bounce {
    pub area: Box<[u8]>,
    pub user: Vec<(u64, u64)>,
}

impl Op {
    /// Where the GRH of a UD receive lands.
    pub fn grh_addr(&self) -> u64 {
        match &self.bounce {
            Some(b) => b.area.as_ptr() as u64,
            None => self.buf,
        }
    }
}

pub use crate::mr_table::Mr;
use crate::mr_table::MrTable;

/// One gather/scatter element of a request: address, length, lkey (resolved by the caller).
#[derive(Debug, Clone, Copy)]
pub struct Seg {
    pub addr: u64,
    pub len: u64,
    pub lkey: Lkey,
}

/// The gather/scatter list of one request, on the stack (at most `IOV_LIMIT` elements):
/// a post allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct Segs {
    n: usize,
    s: [Seg; info::IOV_LIMIT as usize],
}

impl Default for Segs {
    fn default() -> Self {
        Segs { n: 0, s: [Seg { addr: 0, len: 0, lkey: Lkey(0) }; info::IOV_LIMIT as usize] }
    }
}

impl Segs {
    pub fn one(s: Seg) -> Segs {
        let mut v = Segs::default();
        v.s[0] = s;
        v.n = 1;
        v
    }
    /// Appends one element; `FI_EINVAL` beyond the advertised `iov_limit`.
    pub fn push(&mut self, s: Seg) -> Result<(), Errno> {
        if self.n as u64 >= info::iov_limit() {
            return Err(fi::FI_EINVAL);
        }
        let slot = self.s.get_mut(self.n).ok_or(fi::FI_EINVAL)?;
        *slot = s;
        self.n += 1;
        Ok(())
    }
    pub fn as_slice(&self) -> &[Seg] {
        &self.s[..self.n]
    }
}

/// Hasher of the op table: work request ids are distinct sequential integers, so a
/// multiplicative mix is enough (SipHash per post and per completion showed up in profiles).
#[derive(Default)]
pub struct WrHasher(u64);

impl Hasher for WrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub type OpMap = HashMap<u64, Op, BuildHasherDefault<WrHasher>>;
/// Object tables keyed by the provider's small sequential ids (same cheap hasher).
pub type IdMap<V> = HashMap<Id, V, BuildHasherDefault<WrHasher>>;

/// A send-side request.
#[derive(Debug, Clone)]
pub struct SendReq {
    pub opcode: SendOpcode,
    pub segs: Segs,
    /// Copied at post time (fi_inject and small sends): the buffer is free on return.
    pub inline: bool,
    pub imm: Option<u32>,
    pub remote: Option<(u64, Rkey)>,
    pub atomic: (u64, u64),
    pub dest: Option<u64>,
    pub op: Op,
}

pub struct Engine {
    host: &'static Mutex<Runtime>,
    pub local: Local,
    pub pd: PdHandle,
    /// Completions of directions no CQ was bound for: polled and dropped.
    pub discard_cq: CqHandle,
    next_id: Id,
    next_wr: u64,
    pub cqs: IdMap<Cq>,
    pub eqs: IdMap<Queue<EqEvent, EqError>>,
    pub cntrs: IdMap<Cntr>,
    pub avs: IdMap<Av>,
    pub eps: IdMap<Ep>,
    pub peps: IdMap<Pep>,
    /// Multi-receive buffers by the work request id of their posted rest.
    multi: HashMap<u64, MultiRecv, BuildHasherDefault<WrHasher>>,
    /// Per endpoint: whether a multi-receive buffer is posted, and the ones waiting behind it.
    multi_q: IdMap<MultiQueue>,
    pub srxs: IdMap<Srx>,
    /// SRQs of closed shared contexts still used by lingering QPs.
    orphan_srqs: Vec<SrqHandle>,
    pub ops: OpMap,
    pub mrs: MrTable,
    conns: HashMap<ConnId, Id>,
    /// rdma_cm port → passive endpoint
    listeners: HashMap<u16, Id>,
    /// QPs of closed endpoints whose connection the CM agent still drives (a DREQ/DREP or
    /// REQ in flight): destroyed at the connection's terminal event, because the agent moves
    /// the QP it holds to ERROR then and a destroyed handle may already name a new QP.
    zombies: HashMap<ConnId, QpHandle>,
    next_port: u16,
    /// Registered bounce area for inline sends of unregistered buffers.
    pub bounce: Option<(&'static mut [u8], Lkey)>,
    pub auto_progress: bool,
    /// Consecutive progress steps that found nothing to do (see [`Engine::idle_yield_due`]).
    idle_steps: u32,
    /// How many of the host's lost peers ([`Runtime::lost_peers_since`]) were seen: the
    /// connections to each failed (see [`Engine::fail_connections`]).
    lost_seen: usize,
    /// Reused per post (the transport copies the gather list): no allocation per operation.
    swr: SendWr,
    rwr: RecvWr,
    /// Work completions of one progress step (reused).
    wcs: Vec<(Option<Id>, WorkCompletion)>,
    /// Device CQs to poll: (provider CQ id, device CQ), rebuilt when a CQ opens or closes.
    cq_list: Vec<(Option<Id>, CqHandle)>,
    /// DGRAM peers named by IP + port: their UD QPN as the peer's CM answered (SIDR).
    pub sidr: HashMap<SocketAddr, Sidr>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("local", &self.local).field("eps", &self.eps.len()).field("ops", &self.ops.len()).finish()
    }
}

static ENGINE: OnceLock<Result<Mutex<Engine>, String>> = OnceLock::new();

/// The local addresses from the configuration alone (no DPDK): what getinfo needs.
pub fn local_from_config() -> Result<Local, String> {
    if let Some(Ok(e)) = ENGINE.get() {
        return Ok(lock_engine(e).local);
    }
    let c = droce_dpdk::runtime::RuntimeConfig::from_env().map_err(|e| e.to_string())?;
    Ok(Local { ip: addr::canon(c.ip), peer: c.peer.map(addr::canon) })
}

fn lock_engine(m: &Mutex<Engine>) -> MutexGuard<'_, Engine> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The engine, opening the host (EAL, port, device, CM agent) on first use. `init` runs once
/// with the fresh engine (the ffi layer registers the bounce area there).
pub fn engine(init: fn(&mut Engine)) -> Result<MutexGuard<'static, Engine>, String> {
    let r = ENGINE.get_or_init(|| {
        let host = droce_dpdk::runtime::global().map_err(|e| e.to_string())?;
        let mut h = host.lock().unwrap_or_else(|p| p.into_inner());
        let local = Local { ip: addr::canon(h.local_ip()), peer: h.config().peer.map(addr::canon) };
        let pd = h.alloc_pd();
        let discard_cq = h.create_cq(DEV_CQ_DEPTH).map_err(|e| format!("create_cq: {e:?}"))?;
        drop(h);
        let mut e = Engine {
            host,
            local,
            pd,
            discard_cq,
            next_id: 1,
            next_wr: 1,
            cqs: IdMap::default(),
            eqs: IdMap::default(),
            cntrs: IdMap::default(),
            avs: IdMap::default(),
            eps: IdMap::default(),
            peps: IdMap::default(),
            multi: HashMap::default(),
            multi_q: IdMap::default(),
            srxs: IdMap::default(),
            orphan_srqs: Vec::new(),
            ops: OpMap::default(),
            mrs: MrTable::default(),
            conns: HashMap::new(),
            listeners: HashMap::new(),
            zombies: HashMap::new(),
            next_port: 0xc000,
            bounce: None,
            auto_progress: false,
            idle_steps: 0,
            lost_seen: 0,
            swr: SendWr::new(0, SendOpcode::Send),
            rwr: RecvWr::new(0),
            wcs: Vec::with_capacity(64),
            cq_list: vec![(None, discard_cq)],
            sidr: HashMap::new(),
        };
        init(&mut e);
        Ok(Mutex::new(e))
    });
    match r {
        Ok(m) => Ok(lock_engine(m)),
        Err(s) => Err(s.clone()),
    }
}

/// The engine if it is already open (progress threads, close paths).
pub fn engine_if_open() -> Option<MutexGuard<'static, Engine>> {
    match ENGINE.get() {
        Some(Ok(m)) => Some(lock_engine(m)),
        _ => None,
    }
}

impl Engine {
    pub fn host(&self) -> MutexGuard<'static, Runtime> {
        self.host.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn fresh_id(&mut self) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    // ------------------------------------------------------------------ objects

    pub fn open_cq(&mut self, want_fd: bool) -> Result<Id, Errno> {
        let dev = self.host().create_cq(DEV_CQ_DEPTH).map_err(|_| fi::FI_ENOMEM)?;
        let mut q = Queue::default();
        if want_fd {
            q.signal = Some(Signal::new().map_err(|_| fi::FI_ENOMEM)?);
        }
        let id = self.fresh_id();
        self.cqs.insert(id, Cq { dev: Some(dev), q });
        self.rebuild_cq_list();
        Ok(id)
    }

    pub fn close_cq(&mut self, id: Id) -> Result<(), Errno> {
        if self.eps.values().any(|e| e.tx_cq == Some(id) || e.rx_cq == Some(id)) {
            return Err(fi::FI_EBUSY);
        }
        if let Some(cq) = self.cqs.remove(&id) {
            if let Some(d) = cq.dev {
                let _ = self.host().destroy_cq(d);
            }
        }
        self.rebuild_cq_list();
        Ok(())
    }

    fn rebuild_cq_list(&mut self) {
        self.cq_list.clear();
        self.cq_list.extend(self.cqs.iter().filter_map(|(id, c)| c.dev.map(|d| (Some(*id), d))));
        self.cq_list.push((None, self.discard_cq));
    }

    pub fn open_eq(&mut self, want_fd: bool) -> Result<Id, Errno> {
        let mut q = Queue::default();
        if want_fd {
            q.signal = Some(Signal::new().map_err(|_| fi::FI_ENOMEM)?);
        }
        let id = self.fresh_id();
        self.eqs.insert(id, q);
        Ok(id)
    }

    pub fn add_mr(&mut self, mr: Mr) {
        self.mrs.insert(mr);
    }

    /// Deregisters the MR (application or temporary) with this lkey.
    pub fn remove_mr(&mut self, lkey: Lkey) -> Option<Mr> {
        let mr = self.mrs.remove(lkey)?;
        let _ = self.host().dereg_mr(mr.lkey);
        Some(mr)
    }

    /// The lkey of an application MR covering `addr..addr+len` (temporary ones are not lent).
    pub fn find_mr(&self, addr: u64, len: u64) -> Option<Lkey> {
        self.mrs.find(addr, len)
    }

    // ------------------------------------------------------------------ endpoints

    #[allow(clippy::too_many_arguments)]
    pub fn new_ep(&mut self, ty: EpType, fid: usize, context: usize, src: EpAddr, peer: Option<EpAddr>, v6: bool, conn: Option<ConnId>) -> Id {
        let id = self.fresh_id();
        let state = if conn.is_some() { ConnState::Accepting } else { ConnState::Idle };
        self.eps.insert(
            id,
            Ep {
                ty,
                fid,
                context,
                qp: None,
                tx_cq: None,
                rx_cq: None,
                tx_selective: false,
                rx_selective: false,
                eq: None,
                av: None,
                cntrs: EpCntrs::default(),
                conn,
                state,
                src,
                peer,
                v6,
                tx_op_flags: 0,
                rx_op_flags: 0,
                prefix: true,
                cm_done: false,
                min_multi_recv: MIN_MULTI_RECV,
                sidr_service: None,
                srx: None,
                qpn: None,
            },
        );
        id
    }

    fn dev_cq(&self, cq: Option<Id>) -> CqHandle {
        cq.and_then(|c| self.cqs.get(&c)).and_then(|c| c.dev).unwrap_or(self.discard_cq)
    }

    /// fi_enable: the QP exists (RC: in INIT so that receives can be posted; UD: in RTS).
    pub fn enable_ep(&mut self, id: Id) -> Result<(), Errno> {
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        if ep.qp.is_some() {
            return Ok(());
        }
        let (ty, send_cq, recv_cq) = (ep.ty, self.dev_cq(ep.tx_cq), self.dev_cq(ep.rx_cq));
        if ty == EpType::Dgram && ep.av.is_none() {
            return Err(fi::FI_ENOAV);
        }
        let pd = self.pd;
        let srq = match ep.srx {
            Some(s) if ty == EpType::Msg => Some(self.srxs.get(&s).ok_or(fi::FI_EINVAL)?.srq),
            Some(_) => return Err(fi::FI_ENOSYS),
            None => None,
        };
        let mut h = self.host();
        let cap = QpCap {
            max_send_wr: info::TX_SIZE as u32,
            max_recv_wr: info::RX_SIZE as u32,
            max_send_sge: info::IOV_LIMIT as u32,
            max_recv_sge: info::IOV_LIMIT as u32,
            max_inline_data: info::INJECT_SIZE as u32,
        };
        let qp_type = if ty == EpType::Msg { QpType::Rc } else { QpType::Ud };
        let qp = h
            .create_qp(QpInitAttr { qp_type, pd, send_cq, recv_cq, srq, cap, sq_sig_all: false })
            .map_err(|_| fi::FI_ENOMEM)?;
        let res = match ty {
            EpType::Msg => h.rc_qp_to_init(qp).map_err(|_| fi::FI_EIO),
            EpType::Dgram => {
                let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: QKey(UD_QKEY), ..QpAttr::default() };
                let steps = [
                    (a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY),
                    (QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, QpAttrMask::STATE),
                    (QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(0), ..QpAttr::default() }, QpAttrMask::STATE | QpAttrMask::SQ_PSN),
                ];
                steps.iter().try_for_each(|(a, m)| h.modify_qp(qp, a, *m).map_err(|_| fi::FI_EIO))
            }
        };
        if let Err(e) = res {
            let _ = h.destroy_qp(qp);
            return Err(e);
        }
        let qpn = h.query_qp(qp).map(|i| i.qp_num.value()).unwrap_or(0);
        let port = self.eps.get(&id).map_or(0, |e| e.src.sa.port());
        // A DGRAM endpoint bound to a port answers SIDR for it: peers that know only the IP
        // and port (node/service) learn its QPN from our CM.
        let sidr_service = (ty == EpType::Dgram && port != 0).then(|| h.sidr_register(port, Qpn::new(qpn), QKey(UD_QKEY)));
        drop(h);
        let ep = self.eps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        ep.qp = Some(qp);
        ep.sidr_service = sidr_service;
        ep.qpn = Some(qpn);
        if ty == EpType::Dgram {
            ep.src.qpn = Some(qpn);
        }
        Ok(())
    }

    pub fn close_ep(&mut self, id: Id) {
        let Some(ep) = self.eps.remove(&id) else { return };
        let mut h = self.host();
        if let Some(s) = ep.sidr_service {
            h.sidr_unregister(s);
        }
        if let (Some(c), ConnState::Connected | ConnState::Connecting | ConnState::Accepting) = (ep.conn, ep.state) {
            let _ = h.disconnect(c);
        }
        // Acknowledgements the device holds for the next round (and the DREQ) leave now: an
        // application that closes right after its last receive completion may exit next, and
        // the peer's send would otherwise wait for an ACK that never comes.
        for _ in 0..4 {
            h.progress();
        }
        match (ep.qp, ep.conn) {
            (Some(qp), Some(c)) if !ep.cm_done => {
                // keep it out of the way (ERROR) until the agent lets go of it
                let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                let _ = h.modify_qp(qp, &a, QpAttrMask::STATE);
                self.zombies.insert(c, qp);
            }
            (Some(qp), _) => {
                let _ = h.destroy_qp(qp);
            }
            _ => {}
        }
        drop(h);
        if let Some(c) = ep.conn {
            self.conns.remove(&c);
        }
        let dead: Vec<u64> = self.ops.iter().filter(|(_, o)| o.ep == id).map(|(k, _)| *k).collect();
        for k in dead {
            if let Some(o) = self.ops.remove(&k) {
                for l in o.tmp_mrs {
                    self.remove_mr(l);
                }
            }
        }
        if let Some(q) = self.multi_q.remove(&id) {
            for (_, o) in q.waiting {
                for l in o.tmp_mrs {
                    self.remove_mr(l);
                }
            }
        }
        let ops = &self.ops;
        self.multi.retain(|w, _| ops.contains_key(w));
    }

    /// A shared receive context: an SRQ of `size` receives.
    pub fn open_srx(&mut self, fid: usize, context: usize, size: usize) -> Result<Id, Errno> {
        let pd = self.pd;
        let srq = self.host().create_srq(pd, size.clamp(1, info::RX_SIZE as usize), info::IOV_LIMIT as usize).map_err(|_| fi::FI_ENOMEM)?;
        let id = self.fresh_id();
        self.srxs.insert(id, Srx { fid, context, srq });
        Ok(id)
    }

    /// Closes a shared receive context: its posted receives are dropped; the SRQ goes once
    /// no QP uses it (closed endpoints' QPs can linger until their disconnect completes).
    pub fn close_srx(&mut self, id: Id) {
        let Some(s) = self.srxs.remove(&id) else { return };
        let dead: Vec<u64> = self.ops.iter().filter(|(_, o)| o.ep == id).map(|(k, _)| *k).collect();
        for k in dead {
            if let Some(o) = self.ops.remove(&k) {
                for l in o.tmp_mrs {
                    self.remove_mr(l);
                }
            }
        }
        self.orphan_srqs.push(s.srq);
        self.reap_srqs();
    }

    /// Destroys the SRQs of closed shared contexts that no QP uses any more.
    fn reap_srqs(&mut self) {
        if self.orphan_srqs.is_empty() {
            return;
        }
        let mut h = self.host();
        // kept while a QP still uses it (an unknown handle is already gone)
        self.orphan_srqs.retain(|s| matches!(h.destroy_srq(*s), Err(DestroySrqError::Busy)));
    }

    pub fn new_pep(&mut self, fid: usize, context: usize, src: EpAddr) -> Id {
        let id = self.fresh_id();
        self.peps.insert(id, Pep { fid, context, eq: None, src, listening: None });
        id
    }

    fn ephemeral_port(&mut self) -> u16 {
        loop {
            self.next_port = self.next_port.checked_add(1).unwrap_or(0xc000).max(0xc000);
            if !self.listeners.contains_key(&self.next_port) && !self.peps.values().any(|p| p.src.sa.port() == self.next_port) {
                return self.next_port;
            }
        }
    }

    /// fi_setname on a passive endpoint: the address must be ours; port 0 binds an
    /// ephemeral port at once (as a socket bind would).
    pub fn set_pep_name(&mut self, id: Id, a: EpAddr) -> Result<(), Errno> {
        if !self.local.is_local(a.sa.ip()) {
            return Err(fi::FI_EADDRNOTAVAIL);
        }
        let pep = self.peps.get(&id).ok_or(fi::FI_EINVAL)?;
        if pep.listening.is_some() {
            return Err(fi::FI_EOPBADSTATE);
        }
        let port = match a.sa.port() {
            0 => self.ephemeral_port(),
            p if self.listeners.contains_key(&p) => return Err(fi::FI_EADDRINUSE),
            p => p,
        };
        let ip = self.local.ip;
        let pep = self.peps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        pep.src = EpAddr::new(SocketAddr::new(ip, port));
        Ok(())
    }

    pub fn listen(&mut self, id: Id) -> Result<(), Errno> {
        let mut port = self.peps.get(&id).ok_or(fi::FI_EINVAL)?.src.sa.port();
        if port == 0 {
            // An ephemeral rdma_cm port nobody listens on yet.
            port = self.ephemeral_port();
        } else if self.listeners.get(&port).is_some_and(|p| *p != id) {
            return Err(fi::FI_EADDRINUSE);
        }
        let svc = self.host().listen(port);
        self.listeners.insert(port, id);
        let pep = self.peps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        pep.src.sa.set_port(port);
        pep.listening = Some(svc);
        Ok(())
    }

    pub fn close_pep(&mut self, id: Id) {
        if let Some(p) = self.peps.remove(&id) {
            if let Some(svc) = p.listening {
                self.host().unlisten(svc);
                self.listeners.remove(&p.src.sa.port());
            }
        }
    }

    pub fn connect(&mut self, id: Id, dst: EpAddr, data: &[u8]) -> Result<(), Errno> {
        if data.len() as u64 > info::CM_DATA_SIZE {
            return Err(fi::FI_EINVAL);
        }
        self.enable_ep(id)?;
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        if ep.state != ConnState::Idle || ep.eq.is_none() {
            return Err(if ep.eq.is_none() { fi::FI_ENOEQ } else { fi::FI_EISCONN });
        }
        let qp = ep.qp.ok_or(fi::FI_EOPBADSTATE)?;
        let ip = addr::canon(self.local.resolve_dst(dst.sa.ip()));
        let sa = SocketAddr::new(ip, dst.sa.port());
        let p = ConnectParams { private_data: cm_encode(data), responder_resources: 16, initiator_depth: 16, retry_count: 7, rnr_retry_count: 7 };
        let conn = {
            let mut h = self.host();
            if h.peer_gone(ip) {
                // nobody there (a zero-config peer that has exited): the REQ could only time out
                return Err(fi::FI_ECONNREFUSED);
            }
            h.connect(sa, qp, &p).map_err(|_| fi::FI_EHOSTUNREACH)?
        };
        self.conns.insert(conn, id);
        let ep = self.eps.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        ep.conn = Some(conn);
        ep.state = ConnState::Connecting;
        ep.peer = Some(EpAddr::new(sa));
        Ok(())
    }

    pub fn accept(&mut self, id: Id, data: &[u8]) -> Result<(), Errno> {
        if data.len() as u64 > info::CM_DATA_SIZE {
            return Err(fi::FI_EINVAL);
        }
        self.enable_ep(id)?;
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        let (Some(conn), ConnState::Accepting, Some(qp)) = (ep.conn, ep.state, ep.qp) else { return Err(fi::FI_EOPBADSTATE) };
        if ep.eq.is_none() {
            return Err(fi::FI_ENOEQ);
        }
        let p = ConnectParams { private_data: cm_encode(data), responder_resources: 16, initiator_depth: 16, retry_count: 7, rnr_retry_count: 7 };
        {
            let mut h = self.host();
            h.accept(conn, qp, &p).map_err(|_| fi::FI_ECONNABORTED)?;
        }
        self.conns.insert(conn, id);
        Ok(())
    }

    pub fn reject(&mut self, conn: ConnId, data: &[u8]) -> Result<(), Errno> {
        self.host().reject(conn, &cm_encode(data)).map_err(|_| fi::FI_EINVAL)
    }

    pub fn shutdown(&mut self, id: Id) -> Result<(), Errno> {
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        let Some(conn) = ep.conn else { return Err(fi::FI_ENOTCONN) };
        if ep.state == ConnState::Shutdown {
            return Ok(());
        }
        {
            let mut h = self.host();
            let _ = h.disconnect(conn);
        }
        if let Some(ep) = self.eps.get_mut(&id) {
            ep.state = ConnState::Shutdown;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ data path

    fn wr_id(&mut self) -> u64 {
        let w = self.next_wr;
        self.next_wr += 1;
        w
    }

    pub fn post_send(&mut self, id: Id, r: SendReq) -> Result<(), Errno> {
        let ep = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        let qp = ep.qp.ok_or(fi::FI_EOPBADSTATE)?;
        let ud = if ep.ty == EpType::Dgram {
            let av = ep.av.and_then(|a| self.avs.get(&a)).ok_or(fi::FI_ENOAV)?;
            let d = r.dest.and_then(|f| av.lookup(f)).ok_or(fi::FI_EINVAL)?;
            let qpn = match d.qpn {
                Some(q) => q,
                None => self.resolve_ud(d.sa)?,
            };
            Some((d, qpn))
        } else {
            if !matches!(ep.state, ConnState::Connected) {
                return Err(fi::FI_ENOTCONN);
            }
            None
        };
        let wr_id = self.wr_id();
        let wr = &mut self.swr;
        wr.wr_id = wr_id;
        wr.opcode = r.opcode;
        wr.sg_list.clear();
        for s in r.segs.as_slice() {
            wr.sg_list.push(Sge { addr: s.addr, length: s.len as u32, lkey: s.lkey });
        }
        wr.flags = if r.inline { SendFlags::SIGNALED | SendFlags::INLINE } else { SendFlags::SIGNALED };
        wr.imm_data = r.imm.unwrap_or(0);
        let (va, rkey) = r.remote.unwrap_or((0, Rkey(0)));
        wr.remote_addr = va;
        wr.rkey = rkey;
        (wr.compare_add, wr.swap) = if r.opcode.is_atomic() { r.atomic } else { (0, 0) };
        wr.ud = None;
        let mut h = self.host();
        if let Some((d, qpn)) = ud {
            let gid = gid_of(addr::canon(d.sa.ip()));
            let av = h.av(gid, h.local_gid_index());
            self.swr.ud = Some(UdDest { av, remote_qpn: Qpn::new(qpn), remote_qkey: QKey(UD_QKEY) });
        }
        h.post_send_ref(qp, &self.swr).map_err(|e| {
            use droce_transport::device::PostSendError as P;
            match e {
                P::QueueFull => fi::FI_EAGAIN,
                P::MessageTooLong | P::InlineTooLong => fi::FI_EMSGSIZE,
                P::InvalidState => fi::FI_EOPBADSTATE,
                _ => fi::FI_EINVAL,
            }
        })?;
        // The first frames leave now: the application may block elsewhere next (an inject
        // followed by an out-of-band wait must still reach the peer).
        h.poll_once();
        drop(h);
        if debug() {
            eprintln!("droce-fi: ep{id} post {:?} len {} inline {} imm {:?} ctx {:#x} report {}", r.opcode, r.op.len, r.inline, r.imm, r.op.context, r.op.report);
        }
        self.ops.insert(wr_id, r.op);
        Ok(())
    }

    /// The UD QPN behind a node/service DGRAM address: asks the peer's CM (SIDR) and
    /// answers `FI_EAGAIN` until it replied (the caller's retries drive the progress),
    /// `FI_EHOSTUNREACH` when nobody answered within [`SIDR_DEADLINE`].
    fn resolve_ud(&mut self, sa: SocketAddr) -> Result<u32, Errno> {
        if sa.port() == 0 {
            return Err(fi::FI_EADDRNOTAVAIL);
        }
        let key = SocketAddr::new(addr::canon(sa.ip()), sa.port());
        let now = std::time::Instant::now();
        let deadline = match self.sidr.get(&key) {
            Some(Sidr::Done(q)) => return Ok(*q),
            Some(Sidr::Failed) => return Err(fi::FI_EHOSTUNREACH),
            Some(Sidr::Pending { .. }) => None,
            Some(Sidr::Retry { at, deadline }) => (now >= *at).then_some(*deadline),
            None => Some(now + SIDR_DEADLINE),
        };
        if let Some(deadline) = deadline {
            let r = {
                let mut h = self.host();
                h.sidr_resolve(key)
            };
            match r {
                Ok(id) => self.sidr.insert(key, Sidr::Pending { id, deadline }),
                Err(_) => return Err(fi::FI_EHOSTUNREACH),
            };
        }
        self.progress();
        match self.sidr.get(&key) {
            Some(Sidr::Done(q)) => Ok(*q),
            Some(Sidr::Failed) => Err(fi::FI_EHOSTUNREACH),
            _ => Err(fi::FI_EAGAIN),
        }
    }

    fn sidr_event(&mut self, ev: SidrEvent) {
        if debug() {
            eprintln!("droce-fi: sidr {ev:?}");
        }
        let (id, result) = match ev {
            SidrEvent::Resolved { id, qpn, .. } => (id, Some(qpn.value())),
            SidrEvent::Failed { id, .. } => (id, None),
        };
        let now = std::time::Instant::now();
        for v in self.sidr.values_mut() {
            if let Sidr::Pending { id: p, deadline } = *v {
                if p == id {
                    *v = match result {
                        Some(q) => Sidr::Done(q),
                        None if now + SIDR_RETRY < deadline => Sidr::Retry { at: now + SIDR_RETRY, deadline },
                        None => Sidr::Failed,
                    };
                }
            }
        }
    }

    /// A multi-receive buffer (FI_MULTI_RECV, FI_EP_MSG): one receive over the whole of `seg`;
    /// each message that lands in it is reported at its offset, and the rest of the buffer
    /// is posted again at once, until less than the endpoint's FI_OPT_MIN_MULTI_RECV is left
    /// (that message's entry carries FI_MULTI_RECV: the buffer is the application's again).
    /// RC consumes one posted receive per message, so a message that arrives before the rest
    /// is posted again waits for the sender's RNR retry (a few hundred microseconds).
    ///
    /// Buffers fill in the order they were posted: only the first one has a receive posted,
    /// the others wait in the provider until it is released.
    pub fn post_multi_recv(&mut self, id: Id, seg: Seg, op: Op) -> Result<(), Errno> {
        let q = self.multi_q.entry(id).or_default();
        if q.posted {
            q.waiting.push_back((seg, op));
            return Ok(());
        }
        let w = self.post_recv_id(id, &[seg], op)?;
        self.multi.insert(w, MultiRecv { base: seg.addr, len: seg.len, off: 0, lkey: seg.lkey });
        self.multi_q.entry(id).or_default().posted = true;
        Ok(())
    }

    /// Lowers the RNR timer of `id`'s QP (connected: RTS) once it reposts multi-receive buffers.
    fn multi_rnr_fast(&mut self, id: Id) {
        let Some(q) = self.multi_q.get_mut(&id).filter(|q| !q.rnr_fast) else { return };
        q.rnr_fast = true;
        let Some(qp) = self.eps.get(&id).and_then(|e| e.qp) else { return };
        let a = QpAttr { min_rnr_timer: MULTI_RECV_RNR_TIMER, ..QpAttr::default() };
        if let Err(e) = self.host().modify_qp(qp, &a, QpAttrMask::MIN_RNR_TIMER) {
            if debug() {
                eprintln!("droce-fi: ep{id} min_rnr_timer not lowered: {e:?}");
            }
        }
    }

    /// The multi-receive buffer at the head of `id`'s queue was released: post the next.
    fn next_multi_recv(&mut self, id: Id) {
        let Some(q) = self.multi_q.get_mut(&id) else { return };
        q.posted = false;
        while let Some((seg, op)) = self.multi_q.get_mut(&id).and_then(|q| q.waiting.pop_front()) {
            let tmp = op.tmp_mrs.clone();
            if self.post_multi_recv(id, seg, op).is_ok() {
                return;
            }
            for l in tmp {
                self.remove_mr(l);
            }
        }
    }

    pub fn post_recv(&mut self, id: Id, segs: &[Seg], op: Op) -> Result<(), Errno> {
        self.post_recv_id(id, segs, op).map(|_| ())
    }

    /// post_recv returning the work request id.
    fn post_recv_id(&mut self, id: Id, segs: &[Seg], op: Op) -> Result<u64, Errno> {
        let target = match self.srxs.get(&id) {
            Some(s) => Err(s.srq),
            None => Ok(self.eps.get(&id).ok_or(fi::FI_EINVAL)?.qp.ok_or(fi::FI_EOPBADSTATE)?),
        };
        let wr_id = self.wr_id();
        self.rwr.wr_id = wr_id;
        self.rwr.sg_list.clear();
        for s in segs {
            self.rwr.sg_list.push(Sge { addr: s.addr, length: s.len as u32, lkey: s.lkey });
        }
        let mut h = self.host();
        match target {
            Ok(qp) => h.post_recv_ref(qp, &self.rwr),
            Err(srq) => h.post_srq_recv_ref(srq, &self.rwr),
        }
        .map_err(|e| {
            use droce_transport::device::PostRecvError as P;
            if debug() {
                eprintln!("droce-fi: ep{id} post recv failed: {e:?}");
            }
            match e {
                P::QueueFull => fi::FI_EAGAIN,
                P::InvalidState => fi::FI_EOPBADSTATE,
                _ => fi::FI_EINVAL,
            }
        })?;
        if debug() {
            eprintln!("droce-fi: ep{id} post recv len {} ctx {:#x}", op.len, op.context);
        }
        self.ops.insert(wr_id, op);
        Ok(wr_id)
    }

    // ------------------------------------------------------------------ progress

    /// One full progress step (EQ reads, trywait, the progress thread): the device and the CM
    /// agent run until idle (bounded), CM events and work completions are turned into EQ
    /// events and CQ entries. Returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        self.step(true)
    }

    /// The datapath step of CQ and counter reads: the device every call, the CM agent only
    /// every `CM_POLL_EVERY`-th call (it answers MADs and runs its timers a few calls late;
    /// connection setup is driven by EQ reads, which poll it every time). Like the full step
    /// it runs the device until idle (bounded), or until a round found completions while
    /// the host holds ACKs: those then leave with the next call, in one burst with the
    /// reply the application posts (just ahead of it), or from the host's ACK watchdog when it stops polling (before
    /// the watchdog, fi_pingpong 1 MiB ended in the peer's retry-exceeded that way).
    pub fn progress_datapath(&mut self) -> bool {
        self.step(false)
    }

    fn step(&mut self, full: bool) -> bool {
        let mut h = self.host();
        // A round can queue frames for the next one (the RTU after a REP, ACKs): run until
        // idle, bounded, so nothing waits for the application's next call.
        let mut work = false;
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let mut buf = [WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: 0,
            qp_num: Qpn::new(0),
            src_qp: Qpn::new(0),
            wc_flags: WcFlags::default(),
            pkey_index: 0,
        }; 16];
        for _ in 0..8 {
            let w = if full { h.progress() } else { h.progress_datapath() };
            work |= w;
            for &(id, d) in &self.cq_list {
                for _ in 0..256 {
                    let n = h.poll_cq(d, &mut buf).unwrap_or(0);
                    wcs.extend(buf[..n].iter().map(|w| (id, *w)));
                    if n < buf.len() {
                        break;
                    }
                }
            }
            // With held ACKs (the host's default) another round would send them now, a TX
            // burst before the reply the application posts on these completions: return
            // them first; the ACKs leave with the next call (in the reply's burst, ahead of
            // it) or from the host's watchdog.
            if !w || (!wcs.is_empty() && h.hold_acks()) {
                break;
            }
        }
        let lost: Vec<IpAddr> = h.lost_peers_since(&mut self.lost_seen).to_vec();
        let mut events = Vec::new();
        let mut sidr_events = Vec::new();
        while let Some(e) = h.poll_cm_event() {
            events.push(e);
        }
        while let Some(e) = h.poll_sidr_event() {
            sidr_events.push(e);
        }
        // UD receives: the sender's address is in the GRH the device wrote.
        let mut grh_src: HashMap<u64, IpAddr> = HashMap::new();
        if !wcs.is_empty() && self.eps.values().any(|e| e.ty == EpType::Dgram) {
            for (_, wc) in &wcs {
                if let Some(op) = self.ops.get(&wc.wr_id) {
                    if op.kind == OpKind::Recv && wc.status == WcStatus::Success && self.eps.get(&op.ep).is_some_and(|e| e.ty == EpType::Dgram) {
                        let mut g = [0u8; 40];
                        if h.read_mem(op.grh_addr(), &mut g).is_ok() {
                            if let Some(ip) = grh_source(&g) {
                                grh_src.insert(wc.wr_id, ip);
                            }
                        }
                    }
                }
            }
        }
        drop(h);
        work |= !events.is_empty() || !wcs.is_empty();
        for e in events {
            self.cm_event(e);
        }
        work |= !sidr_events.is_empty();
        for e in sidr_events {
            self.sidr_event(e);
        }
        for &(cq, wc) in &wcs {
            self.completion(cq, wc, grh_src.get(&wc.wr_id).copied());
        }
        self.wcs = wcs;
        if !lost.is_empty() {
            self.fail_connections(&lost);
            work = true;
        }
        self.idle_steps = if work { 0 } else { self.idle_steps.saturating_add(1) };
        work
    }

    /// Peers the host found gone ([`Runtime::lost_peers_since`]: the process behind a memif link
    /// that went down, one link per peer on the zero-config mesh): every connection to one of
    /// `lost` fails now, as the tcp provider's do when their socket closes, instead of after
    /// the transport's retries (17 s), which only run while something is outstanding.
    /// Connections to other peers are untouched (an endpoint whose peer address is unknown
    /// fails with any loss).
    /// The QP goes to the error state, so posted receives and sends complete with flush
    /// errors through the usual path (FI_ECANCELED in the CQ error entry); a connected
    /// endpoint gets FI_SHUTDOWN on its EQ, one still connecting an FI_ECONNRESET error.
    fn fail_connections(&mut self, lost: &[IpAddr]) {
        let mut h = self.host();
        let mut failed = Vec::new();
        for (&id, ep) in self.eps.iter_mut() {
            if !matches!(ep.state, ConnState::Connected | ConnState::Connecting | ConnState::Accepting) {
                continue;
            }
            if ep.peer.is_some_and(|p| !lost.iter().any(|l| addr::same_ip(*l, p.sa.ip()))) {
                continue;
            }
            if let Some(qp) = ep.qp {
                let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
                let _ = h.modify_qp(qp, &a, QpAttrMask::STATE);
            }
            failed.push((id, ep.state));
            ep.state = ConnState::Shutdown;
        }
        drop(h);
        for (id, was) in failed {
            let Some(ep) = self.eps.get(&id) else { continue };
            let (fid, context, eq) = (ep.fid, ep.context, ep.eq);
            let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) else { continue };
            if was == ConnState::Connected {
                q.push(EqEvent::Shutdown { fid, context });
            } else {
                q.push_error(EqError { fid, context, err: fi::FI_ECONNRESET, prov_errno: 0, data: Vec::new() });
            }
        }
    }

    /// Whether the caller of a read that found nothing should give up the CPU (after it
    /// released the engine): true once [`idle_yield_after`] progress steps in a row were idle.
    /// Both ends of a connection usually busy-poll on the same few cores, and each side's
    /// ACKs and replies come only from its own progress: spinning on through a scheduler
    /// slice keeps the peer, which has the work, off the CPU.
    pub fn idle_yield_due(&self) -> bool {
        self.idle_steps >= idle_yield_after()
    }

    fn cm_event(&mut self, e: CmAgentEvent) {
        if debug() {
            eprintln!("droce-fi: cm event {e:?}");
        }
        if let CmAgentEvent::Disconnected { id } | CmAgentEvent::Rejected { id, .. } | CmAgentEvent::TimedOut { id } = &e {
            if let Some(qp) = self.zombies.remove(id) {
                let _ = self.host().destroy_qp(qp);
                self.reap_srqs();
                return;
            }
            if let Some(ep) = self.conns.get(id).and_then(|x| self.eps.get_mut(x)) {
                ep.cm_done = true;
            }
        }
        match e {
            CmAgentEvent::ConnectRequest { id, src, dst, private_data, .. } => {
                let Some(pep) = self.listeners.get(&dst.port()).and_then(|p| self.peps.get(p)) else {
                    let _ = self.host().reject(id, &[]);
                    return;
                };
                let ev = EqEvent::ConnReq { pep_fid: pep.fid, pep_context: pep.context, conn: id, src, dst, data: cm_decode(&private_data) };
                match pep.eq.and_then(|q| self.eqs.get_mut(&q)) {
                    Some(q) => q.push(ev),
                    None => {
                        let _ = self.host().reject(id, &[]);
                    }
                }
            }
            CmAgentEvent::Established { id, private_data, .. } => {
                let Some(ep) = self.conns.get(&id).and_then(|e| self.eps.get_mut(e)) else { return };
                // The REP's private data is the acceptor's own: only the connecting side gets it.
                let active = ep.state == ConnState::Connecting;
                ep.state = ConnState::Connected;
                let data = if active { cm_decode(&private_data) } else { Vec::new() };
                let ev = EqEvent::Connected { fid: ep.fid, context: ep.context, data };
                if let Some(q) = ep.eq.and_then(|q| self.eqs.get_mut(&q)) {
                    q.push(ev);
                }
            }
            CmAgentEvent::Rejected { id, private_data, .. } => self.conn_error(id, fi::FI_ECONNREFUSED, cm_decode(&private_data)),
            CmAgentEvent::TimedOut { id } => self.conn_error(id, fi::FI_ETIMEDOUT, Vec::new()),
            CmAgentEvent::Disconnected { id } => {
                let Some(ep) = self.conns.get(&id).and_then(|e| self.eps.get_mut(e)) else { return };
                let was = ep.state;
                ep.state = ConnState::Shutdown;
                if matches!(was, ConnState::Connected | ConnState::Shutdown) {
                    let ev = EqEvent::Shutdown { fid: ep.fid, context: ep.context };
                    if let Some(q) = ep.eq.and_then(|q| self.eqs.get_mut(&q)) {
                        q.push(ev);
                    }
                } else {
                    let (fid, context, eq) = (ep.fid, ep.context, ep.eq);
                    if let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) {
                        q.push_error(EqError { fid, context, err: fi::FI_ECONNRESET, prov_errno: 0, data: Vec::new() });
                    }
                }
            }
        }
    }

    fn conn_error(&mut self, id: ConnId, err: Errno, data: Vec<u8>) {
        let Some(ep) = self.conns.get(&id).and_then(|e| self.eps.get_mut(e)) else { return };
        ep.state = ConnState::Shutdown;
        let x = EqError { fid: ep.fid, context: ep.context, err, prov_errno: 0, data };
        if let Some(q) = ep.eq.and_then(|q| self.eqs.get_mut(&q)) {
            q.push_error(x);
        }
    }

    fn bump(&mut self, c: Option<Id>, ok: bool) {
        if let Some(c) = c.and_then(|c| self.cntrs.get_mut(&c)) {
            if ok {
                c.value += 1;
            } else {
                c.err += 1;
            }
        }
    }

    fn completion(&mut self, cq: Option<Id>, wc: WorkCompletion, grh_src: Option<IpAddr>) {
        if debug() {
            eprintln!("droce-fi: wc {:?} {:?} len {} cq {cq:?} op {:?}", wc.status, wc.opcode, wc.byte_len, self.ops.get(&wc.wr_id).map(|o| (o.ep, o.kind, o.context)));
        }
        let Some(mut op) = self.ops.remove(&wc.wr_id) else { return };
        // A multi-receive buffer: this message is reported at its offset; the rest of the
        // buffer is posted again, or the buffer is released (FI_MULTI_RECV on this entry).
        if let Some(mut m) = self.multi.remove(&wc.wr_id) {
            op.buf = m.base + m.off;
            let ok = wc.status == WcStatus::Success;
            if ok {
                m.off += wc.byte_len as u64;
            }
            let left = m.len.saturating_sub(m.off);
            let min = self.eps.get(&op.ep).map(|e| e.min_multi_recv).unwrap_or(MIN_MULTI_RECV).max(1);
            let mut again = None;
            if ok && left >= min {
                let next = Op { buf: m.base + m.off, len: left, tmp_mrs: Vec::new(), ..op.clone() };
                if let Ok(w) = self.post_recv_id(op.ep, &[Seg { addr: m.base + m.off, len: left, lkey: m.lkey }], next) {
                    // the buffer's registrations stay until it is released
                    if let Some(n) = self.ops.get_mut(&w) {
                        n.tmp_mrs = std::mem::take(&mut op.tmp_mrs);
                    }
                    again = Some(w);
                }
            }
            match again {
                Some(w) => {
                    self.multi.insert(w, m);
                    self.multi_rnr_fast(op.ep);
                }
                None => {
                    op.flags |= fi::FI_MULTI_RECV as u64;
                    if ok {
                        self.next_multi_recv(op.ep);
                    }
                }
            }
        }
        let mut bounce_len = None;
        if let (Some(b), WcStatus::Success, OpKind::Recv) = (&op.bounce, wc.status, op.kind) {
            // GRH first, then the datagram: copy the datagram into the application's buffers
            // (registered ranges, so the device's memory accessors reach them).
            let n = (wc.byte_len as usize).min(b.area.len());
            let data = &b.area[info::UD_PREFIX as usize..n.max(info::UD_PREFIX as usize)];
            let mut off = 0;
            let mut h = self.host();
            for &(a, l) in &b.user {
                let k = (l as usize).min(data.len() - off);
                if k > 0 {
                    let _ = h.write_mem(a, &data[off..off + k]);
                }
                off += k;
            }
            bounce_len = Some(data.len() as u64);
        }
        for l in &op.tmp_mrs {
            self.remove_mr(*l);
        }
        // A receive of a shared context completes for the endpoint whose QP took it.
        let ep_id = if self.srxs.contains_key(&op.ep) {
            self.eps.iter().find(|(_, e)| e.qpn == Some(wc.qp_num.value())).map(|(k, _)| *k).unwrap_or(op.ep)
        } else {
            op.ep
        };
        let Some(ep) = self.eps.get(&ep_id) else {
            // a shared context's receive whose endpoint is gone: the CQ entry still counts
            if self.srxs.contains_key(&op.ep) {
                if let Some(cq) = cq.and_then(|c| self.cqs.get_mut(&c)) {
                    let entry = CqEntry { op_context: op.context, flags: op.flags, len: wc.byte_len as u64, buf: op.buf, data: 0, src: ADDR_NOTAVAIL };
                    if wc.status == WcStatus::Success {
                        cq.q.push(entry);
                    } else {
                        cq.q.push_error(CqError { entry: CqEntry { len: 0, ..entry }, err: wc_errno(wc.status), prov_errno: wc.status.value() as i32, olen: 0 });
                    }
                }
            }
            return;
        };
        let ok = wc.status == WcStatus::Success;
        let mut flags = op.flags;
        let mut len = op.len;
        let mut data = 0;
        let mut src = ADDR_NOTAVAIL;
        let cntr = match op.kind {
            OpKind::Send => ep.cntrs.send,
            OpKind::Recv => {
                len = bounce_len.unwrap_or(wc.byte_len as u64);
                if wc.wc_flags.contains(WcFlags::WITH_IMM) {
                    flags |= fi::FI_REMOTE_CQ_DATA as u64;
                    data = wc.imm_data as u64;
                }
                if wc.opcode == WcOpcode::RecvRdmaWithImm {
                    flags = fi::FI_RMA as u64 | fi::FI_REMOTE_WRITE as u64 | fi::FI_REMOTE_CQ_DATA as u64;
                    len = 0;
                }
                if let (Some(ip), Some(av)) = (grh_src, ep.av.and_then(|a| self.avs.get(&a))) {
                    src = av.reverse(ip, wc.src_qp.value());
                }
                ep.cntrs.recv
            }
            // fi_endpoint(3): base atomics count as writes, fetching and compare atomics as reads
            OpKind::Atomic if op.flags & fi::FI_WRITE as u64 != 0 => ep.cntrs.write,
            OpKind::Read | OpKind::Atomic => ep.cntrs.read,
            OpKind::Write => ep.cntrs.write,
        };
        self.bump(cntr, ok);
        let Some(cq) = cq.and_then(|c| self.cqs.get_mut(&c)) else { return };
        let entry = CqEntry { op_context: op.context, flags, len, buf: if op.kind == OpKind::Recv { op.buf } else { 0 }, data, src };
        if ok {
            // remote CQ data always reaches the CQ: a receive that asked for no completion
            // (selective) still carries the peer's data
            if op.report || flags & fi::FI_REMOTE_CQ_DATA as u64 != 0 {
                cq.q.push(entry);
            }
        } else if !op.report && op.context == 0 {
            // An inject (or an unsignalled send without a context) that failed: nothing can
            // name it in an error entry, and ofi_rxm dereferences every error entry's
            // op_context (rxm_handle_comp_error: a NULL one was a SIGSEGV in the survivor of an
            // rdm pair whose peer died). The verbs provider drops these too (VERBS_NO_COMP_FLAG);
            // the endpoint's failure still shows in the flushed receives, counters and the EQ.
            if debug() {
                eprintln!("droce-fi: error {:?} of an operation without completion or context: not reported", wc.status);
            }
        } else {
            // bytes that did not fit: the message's length (a UD one counts the GRH, which a
            // receive without FI_MSG_PREFIX took into its bounce area, not the application's
            // buffer) beyond the buffer
            let grh = if op.kind == OpKind::Recv && op.bounce.is_some() { info::UD_PREFIX } else { 0 };
            let olen = if wc.status == WcStatus::LocLenErr { (wc.byte_len as u64).saturating_sub(grh).saturating_sub(op.len) } else { 0 };
            cq.q.push_error(CqError { entry: CqEntry { len: 0, ..entry }, err: wc_errno(wc.status), prov_errno: wc.status.value() as i32, olen });
        }
    }

    /// Up to `max` entries of CQ `id`, each handed to `out(index, entry)`; progresses only
    /// when the queue is empty. The number read, `FI_EAVAIL` (an error entry is first) or
    /// `FI_EAGAIN`.
    pub fn cq_read_with(&mut self, id: Id, max: usize, mut out: impl FnMut(usize, &CqEntry)) -> Result<usize, Errno> {
        if self.cqs.get(&id).ok_or(fi::FI_EINVAL)?.q.is_empty() {
            self.progress_datapath();
        }
        let cq = self.cqs.get_mut(&id).ok_or(fi::FI_EINVAL)?;
        if cq.q.has_error() {
            return Err(fi::FI_EAVAIL);
        }
        let mut n = 0;
        while n < max {
            let Some(c) = cq.q.pop() else { break };
            out(n, &c);
            n += 1;
        }
        if n == 0 {
            Err(fi::FI_EAGAIN)
        } else {
            Ok(n)
        }
    }
}

/// Idle progress steps before a read yields the CPU: `DROCE_FI_IDLE_YIELD` (0 = never yield), 64 by default.
pub fn idle_yield_after() -> u32 {
    static N: OnceLock<u32> = OnceLock::new();
    *N.get_or_init(|| match std::env::var("DROCE_FI_IDLE_YIELD").ok().and_then(|v| v.parse::<u32>().ok()) {
        Some(0) => u32::MAX,
        Some(n) => n,
        None => 64,
    })
}

/// DROCE_DEBUG set: connection events and errors go to stderr.
pub fn debug() -> bool {
    static D: OnceLock<bool> = OnceLock::new();
    *D.get_or_init(|| std::env::var_os("DROCE_DEBUG").is_some())
}

pub fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(a) => Gid::from_ipv4(a),
        IpAddr::V6(a) => Gid::from_ipv6(a),
    }
}

/// The sender of a UD receive from its GRH area (IPv4: the IP header in the last 20 bytes,
/// as rxe writes it; IPv6: the whole 40 bytes).
pub fn grh_source(grh: &[u8; 40]) -> Option<IpAddr> {
    if grh[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&grh[8..24]);
        Some(addr::canon(IpAddr::from(a)))
    } else if grh[20] >> 4 == 4 {
        Some(IpAddr::from([grh[32], grh[33], grh[34], grh[35]]))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_data_round_trip_through_zero_padding() {
        let d: Vec<u8> = (0..54).collect();
        let mut wire = cm_encode(&d);
        wire.resize(196, 0);
        assert_eq!(cm_decode(&wire), d);
        let mut short = cm_encode(b"hello");
        short.resize(56, 0);
        assert_eq!(cm_decode(&short), b"hello");
        assert!(cm_decode(&[0u8; 56]).is_empty(), "a peer that sent none");
        assert!(cm_decode(&[CM_MAGIC, 9, 1]).is_empty(), "length beyond the data");
    }

    #[test]
    fn av_insert_lookup_remove_reverse() {
        let mut av = Av::default();
        let a = EpAddr::with_qpn("10.77.0.2:0".parse().unwrap(), 0x11);
        let b = EpAddr::with_qpn("10.77.0.2:0".parse().unwrap(), 0x12);
        assert_eq!(av.insert(a), 0);
        assert_eq!(av.insert(b), 1);
        assert_eq!(av.lookup(1), Some(b));
        assert_eq!(av.reverse("10.77.0.2".parse().unwrap(), 0x12), 1);
        assert_eq!(av.reverse("10.77.0.3".parse().unwrap(), 0x12), ADDR_NOTAVAIL);
        assert!(av.remove(0));
        assert!(!av.remove(0));
        assert_eq!(av.lookup(0), None);
        assert_eq!(av.insert(b), 0, "slots are reused");
    }

    #[test]
    fn grh_sources() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[10, 77, 0, 2]);
        assert_eq!(grh_source(&g), Some("10.77.0.2".parse().unwrap()));
        let mut g6 = [0u8; 40];
        g6[0] = 0x60;
        g6[8..24].copy_from_slice(&"fd00::7".parse::<std::net::Ipv6Addr>().unwrap().octets());
        assert_eq!(grh_source(&g6), Some("fd00::7".parse().unwrap()));
        assert_eq!(grh_source(&[0u8; 40]), None);
    }

    #[test]
    fn segs_hold_up_to_the_iov_limit() {
        let mut v = Segs::default();
        for i in 0..info::IOV_LIMIT {
            v.push(Seg { addr: i, len: 1, lkey: Lkey(7) }).unwrap();
        }
        assert_eq!(v.push(Seg { addr: 99, len: 1, lkey: Lkey(7) }), Err(fi::FI_EINVAL));
        assert_eq!(v.as_slice().len(), info::IOV_LIMIT as usize);
        assert_eq!(v.as_slice()[3].addr, 3);
        assert_eq!(Segs::one(Seg { addr: 5, len: 2, lkey: Lkey(1) }).as_slice().len(), 1);
    }

    #[test]
    fn op_table_keeps_sequential_ids_apart() {
        let mut m = OpMap::default();
        for i in 1..=2000u64 {
            m.insert(i, Op { ep: i as Id, kind: OpKind::Send, context: i as usize, flags: 0, buf: 0, len: 0, report: true, tmp_mrs: Vec::new(), bounce: None });
        }
        assert_eq!(m.len(), 2000);
        assert!((1..=2000u64).all(|i| m.get(&i).is_some_and(|o| o.context == i as usize)));
        assert!(m.remove(&1000).is_some() && m.get(&1000).is_none() && m.get(&1001).is_some());
    }

    #[test]
    fn status_mapping() {
        assert_eq!(wc_errno(WcStatus::WrFlushErr), fi::FI_ECANCELED);
        assert_eq!(wc_errno(WcStatus::LocLenErr), fi::FI_ETRUNC);
        assert_eq!(wc_errno(WcStatus::RemAccessErr), fi::FI_EACCES);
        assert!(wc_status_str(WcStatus::RnrRetryExcErr.value() as i32).contains("RNR"));
    }
}
