//! The provider's state behind every fid and what it does with it, one job per file:
//!
//! ```text
//! records      the plain records: CQ, EQ events, counters, AVs, endpoints, operations
//! objects      opening and closing them (CQs, EQs, MRs, endpoints and their QPs, SRQs)
//! posting      libfabric requests into work requests: prefixes, inline, iov and size
//!              checks, selective completion, temporary registrations, multi-receive
//! connection   passive endpoints, connect/accept/reject/shutdown, CM and SIDR events
//! completion   work completions into CQ entries and counter updates
//! progress     the step that runs the runtime and hands its events to the above
//! ```
//!
//! One process-wide `Mutex<Engine>` (lock order: engine, then the runtime); every FFI entry
//! locks it, so all threading levels are safe. Manual progress runs inside CQ/EQ/counter
//! reads; auto progress is the runtime's progress thread running the same step.

use crate::addr::{self, Local};
use crate::queue::Queue;
use droce_dpdk::roce::cm::ConnId;
use droce_dpdk::runtime::idle::{IdleAction, IdleSpell};
use droce_dpdk::runtime::Runtime;
use droce_transport::qp::QpHandle;
use droce_transport::verbs::{CqHandle, PdHandle, RecvWr, SendOpcode, SendWr, SrqHandle, WorkCompletion};
use droce_transport::{Gid, Lkey};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard, OnceLock};

mod completion;
mod connection;
mod objects;
mod posting;
mod progress;
mod records;

pub use completion::{grh_source, wc_errno, wc_status_str};
pub use connection::{cm_decode, cm_encode, Sidr};
pub use posting::{strip_prefix, AppMemory, AtomicRequest, RxRequest, Tx, TxRequest};
pub use progress::idle_yield_after;
pub use records::*;

pub type Errno = u32;
pub type Id = u32;

/// Q_Key of droce's UD endpoints (high bit clear: not a controlled key).
pub const UD_QKEY: u32 = 0x0d40_ce11;
const DEV_CQ_DEPTH: usize = 1 << 14;

pub use crate::mr_table::Mr;
use crate::mr_table::MrTable;

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
    pub auto_progress: bool,
    /// Consecutive progress steps that found nothing to do (see [`Engine::idle_give_up`]).
    idle_steps: u32,
    /// The current idle spell of the threads reading CQs (see [`Engine::idle_give_up`]).
    idle_spell: IdleSpell,
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

/// The engine, opening the host (EAL, port, device, CM agent) on first use.
pub fn engine() -> Result<MutexGuard<'static, Engine>, String> {
    let r = ENGINE.get_or_init(|| {
        let host = droce_dpdk::runtime::global().map_err(|e| e.to_string())?;
        let mut h = host.lock().unwrap_or_else(|p| p.into_inner());
        let local = Local { ip: addr::canon(h.local_ip()), peer: h.config().peer.map(addr::canon) };
        let pd = h.alloc_pd();
        let discard_cq = h.create_cq(DEV_CQ_DEPTH).map_err(|e| format!("create_cq: {e:?}"))?;
        drop(h);
        let e = Engine {
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
            auto_progress: false,
            idle_steps: 0,
            idle_spell: IdleSpell::default(),
            lost_seen: 0,
            swr: SendWr::new(0, SendOpcode::Send),
            rwr: RecvWr::new(0),
            wcs: Vec::with_capacity(64),
            cq_list: vec![(None, discard_cq)],
            sidr: HashMap::new(),
        };
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

    pub(super) fn wr_id(&mut self) -> u64 {
        let w = self.next_wr;
        self.next_wr += 1;
        w
    }
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
