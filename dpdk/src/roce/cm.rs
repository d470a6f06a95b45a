//! The GSI agent: IB CM (rdma_cm compatible) over QP1 of a [`RoceDevice`].
//!
//! [`CmAgent`] owns QP1 (a UD QP, Q_Key 0x80010000), its CQ and its MAD buffers, and a
//! sans-IO [`CmEndpoint`]. It is driven from the engine loop: call [`CmAgent::poll`] next to
//! [`RoceDevice::poll`]; it feeds every MAD received on QP1 (after the 40-byte GRH area) to
//! the endpoint with the sender's GID, runs the CM timers from the engine clock, moves the
//! application's RC QPs through INIT/RTR/RTS/ERROR as the CM says, and posts the endpoint's
//! MADs as UD SENDs to QP1 of the peer (the engine resolves the MAC from the IP).
//!
//! ```text
//! CmAgent::new(&mut dev, CmAgentConfig) -> Result<CmAgent, CmAgentError>
//! listen(port) / listen_service(service_id) / unlisten_service(service_id)
//! connect(&mut dev, dst: SocketAddr, qp, ConnectParams { private_data, .. }) -> ConnId
//! poll(&mut dev) -> bool (did something); poll_timeout() -> Option<Instant>
//! poll_event() -> Option<CmAgentEvent>:
//!   ConnectRequest { id, src, dst, private_data, responder_resources, initiator_depth }
//!   Established { id, params, private_data (the REP's) }   (the QP is in RTS)
//!   Rejected { id, reason, private_data }   Disconnected { id } (the QP is in ERROR)
//!   TimedOut { id } (the QP is in ERROR)
//! accept(&mut dev, id, qp, &ConnectParams) (QP → RTR, RTS before the REP leaves)
//! reject(id, private_data) (REJ reason 28, consumer defined)
//! disconnect(&mut dev, id) (QP → ERROR, DREQ)
//! close(self, &mut dev) (destroys QP1, frees the buffers)
//! SIDR (UD service resolution, what rdma_cm does for RDMA_PS_UDP ids):
//! sidr_register(port, qpn, qkey) -> service_id / sidr_unregister(service_id): answer
//!   SIDR_REQs for that UDP-port-space service with the QPN and Q_Key (NO_QP otherwise)
//! sidr_resolve(&mut dev, dst: SocketAddr) -> SidrId (SIDR_REQ, retransmitted)
//! poll_sidr_event() -> Option<SidrEvent>: Resolved { id, qpn, qkey } / Failed { id, status }
//! ```
//!
//! Application QPs must be RC QPs in RESET or INIT ([`to_init`] before posting receives, like
//! `rdma_create_qp`); the agent moves them. Everything is
//! non-blocking; events queue up until polled.

use super::RoceDevice;
use droce_transport::cm::rdma_cm::{self, CmaHeaderRepr, PortSpace, RcConnect};
use droce_transport::cm::rej::RejectReason;
use droce_transport::cm::sidr::{self, rep::SidrStatus, SidrRepRepr, SidrReqRepr};
use droce_transport::cm::CmMessage;
use droce_transport::cm::{CmConfig, CmEndpoint, CmEvent, CmMad, ConnHandle, ConnParams, EndpointEvent, Incoming, GSI_QKEY, GSI_QPN, MAD_SIZE};
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use droce_transport::ud::GRH_LEN;
use droce_transport::verbs::{AccessFlags, CqHandle, MemoryRegion, PdHandle, RecvWr, SendOpcode, SendWr, UdDest, WorkCompletion};
use droce_transport::status::{WcOpcode, WcStatus};
use droce_transport::{Gid, Instant, Psn, QKey, Qpn};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Receive and send MAD slots of QP1.
const RECV_SLOTS: usize = 64;
const SEND_SLOTS: usize = 64;
const RECV_SLOT_LEN: usize = GRH_LEN + MAD_SIZE;
const WR_SEND: u64 = 1 << 32;
/// SIDR_REQ retransmission interval and attempts (the passive side answers at once).
const SIDR_RETRY_NS: u64 = 200_000_000;
const SIDR_TRIES: u32 = 10;

/// A UD service resolution started by [`CmAgent::sidr_resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SidrId(pub u32);

/// The answer to a [`CmAgent::sidr_resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidrEvent {
    /// The peer's UD QP behind the service.
    Resolved { id: SidrId, qpn: Qpn, qkey: QKey },
    /// A SIDR_REP with a non-success status (`SidrStatus`, e.g. 3 = no QP for the service),
    /// or [`SIDR_TIMEOUT`] when no answer came.
    Failed { id: SidrId, status: u8 },
}

/// `SidrEvent::Failed` status when every SIDR_REQ went unanswered.
pub const SIDR_TIMEOUT: u8 = 0xff;

#[derive(Debug, Clone)]
struct SidrQuery {
    id: SidrId,
    peer: Gid,
    mad: CmMad,
    next: Instant,
    tries: u32,
}

/// How the agent sets up its endpoint.
#[derive(Debug, Clone, Copy)]
pub struct CmAgentConfig {
    pub cm: CmConfig,
    /// Seeds comm IDs, TIDs, starting PSNs and source ports.
    pub seed: u64,
    /// Overrides the CM response timeout exponent of our REQs (rdma_cm: 20, ≈ 4.3 s).
    pub cm_response_timeout: Option<u8>,
    /// Overrides the number of CM retries of our REQs (rdma_cm: 15).
    pub max_cm_retries: Option<u8>,
    /// `min_rnr_timer` of the QPs at RTR (rdma-core default 12).
    pub min_rnr_timer: u8,
}

impl Default for CmAgentConfig {
    fn default() -> Self {
        CmAgentConfig { cm: CmConfig::default(), seed: 0x6c6d_5f67_7369, cm_response_timeout: None, max_cm_retries: None, min_rnr_timer: 12 }
    }
}

/// The connection parameters an application offers (rdma_cm `rdma_conn_param`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectParams {
    /// Consumer private data (≤ 56 bytes in a REQ, ≤ 196 in a REP; more is cut).
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

impl ConnectParams {
    /// rping's `conn_param`: 1 READ each way, retry 7, RNR retry 7.
    pub fn rping() -> Self {
        ConnectParams { private_data: Vec::new(), responder_resources: 1, initiator_depth: 1, retry_count: 7, rnr_retry_count: 7 }
    }
}

/// Names one connection (or one connect request) of the agent; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn{}", self.0)
    }
}

/// What the application must know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmAgentEvent {
    /// A REQ for a listened service: answer with `accept` or `reject`.
    ConnectRequest {
        id: ConnId,
        /// The peer's address and port from the rdma_cm header (the GID's address and 0
        /// when the REQ carries no rdma_cm header).
        src: SocketAddr,
        dst: SocketAddr,
        private_data: Vec<u8>,
        responder_resources: u8,
        initiator_depth: u8,
        peer_qpn: Qpn,
    },
    /// The QP is in RTS (active side: before the RTU leaves; passive: the RTU arrived).
    /// `private_data`: the REP's (the acceptor's private data; 196 bytes, zero padded).
    Established { id: ConnId, params: ConnParams, private_data: Vec<u8> },
    /// The peer refused (REJ); the QP is in ERROR.
    Rejected { id: ConnId, reason: RejectReason, private_data: Vec<u8> },
    /// DREQ or DREP: the QP is in ERROR.
    Disconnected { id: ConnId },
    /// No answer after every CM retry; the QP is in ERROR.
    TimedOut { id: ConnId },
}

impl CmAgentEvent {
    pub fn id(&self) -> ConnId {
        match self {
            CmAgentEvent::ConnectRequest { id, .. }
            | CmAgentEvent::Established { id, .. }
            | CmAgentEvent::Rejected { id, .. }
            | CmAgentEvent::Disconnected { id }
            | CmAgentEvent::TimedOut { id } => *id,
        }
    }
}

/// Why a CM call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmAgentError {
    /// QP1 or its resources could not be created (already taken, no memory, ...).
    Setup(String),
    /// Unknown or already finished connection, or a call in the wrong state.
    InvalidConn,
    /// The QP is not an RC QP in RESET or INIT, or a transition failed.
    Qp(String),
    /// The destination address has no matching local GID (IPv4 vs IPv6).
    NoLocalAddress,
}

impl fmt::Display for CmAgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmAgentError::Setup(s) => write!(f, "GSI setup failed: {s}"),
            CmAgentError::InvalidConn => f.write_str("no such connection in this state"),
            CmAgentError::Qp(s) => write!(f, "QP: {s}"),
            CmAgentError::NoLocalAddress => f.write_str("no local address of the destination's family"),
        }
    }
}

impl std::error::Error for CmAgentError {}

/// Counters of the agent (the endpoint has its own, see [`CmAgent::endpoint`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmAgentCounters {
    pub mads_rx: u64,
    pub mads_tx: u64,
    /// Received on QP1 but not a CM MAD we understand (other classes, truncated, ...).
    pub bad_mads: u64,
    /// MADs that could not be posted (all send slots busy, or post_send failed): the CM
    /// retransmits.
    pub tx_dropped: u64,
    /// QP transitions that failed (the connection is then reported as an error/reject).
    pub qp_errors: u64,
}

#[derive(Debug)]
enum Slot {
    /// A REQ handed to the application.
    Pending(Box<Incoming>),
    /// A connection of the endpoint with the application's QP.
    Live { h: ConnHandle, qp: QpHandle },
}

/// The GSI agent of one device (see the module docs).
pub struct CmAgent {
    cfg: CmAgentConfig,
    ep: CmEndpoint,
    rng: u64,
    pd: PdHandle,
    cq: CqHandle,
    qp: QpHandle,
    mr: MemoryRegion,
    /// RECV_SLOTS receive slots then SEND_SLOTS send slots of MAD_SIZE. Never moved; freed
    /// only by `close` after QP1 is gone (leaked if the agent is dropped without `close`,
    /// because the device may still write into it).
    buf: std::mem::ManuallyDrop<Box<[u8]>>,
    free_send: Vec<usize>,
    next_id: u32,
    slots: BTreeMap<ConnId, Slot>,
    by_handle: BTreeMap<ConnHandle, ConnId>,
    events: VecDeque<CmAgentEvent>,
    counters: CmAgentCounters,
    ca_guid: u64,
    /// UDP-port-space service ID -> the UD QP that answers it.
    sidr_services: BTreeMap<u64, (Qpn, QKey)>,
    /// SIDR_REQs in flight by request ID.
    sidr_queries: BTreeMap<u32, SidrQuery>,
    sidr_events: VecDeque<SidrEvent>,
}

impl fmt::Debug for CmAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmAgent").field("qp", &self.qp).field("conns", &self.slots.len()).finish()
    }
}

/// The EUI-64 node GUID rxe derives from the MAC (0x505400fffe770011 for 52:54:00:77:00:11).
pub fn ca_guid_from_mac(m: [u8; 6]) -> u64 {
    u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn mtu_from_code(c: u8) -> PathMtu {
    match c {
        1 => PathMtu::Mtu256,
        2 => PathMtu::Mtu512,
        4 => PathMtu::Mtu2048,
        5 => PathMtu::Mtu4096,
        _ => PathMtu::Mtu1024,
    }
}

/// The sender's GID from the GRH area of a UD receive (IPv4: the IP header in the last 20
/// bytes, as rxe writes it; IPv6: the whole 40 bytes).
fn grh_source(grh: &[u8]) -> Option<Gid> {
    if grh.len() < GRH_LEN {
        return None;
    }
    if grh[0] >> 4 == 6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&grh[8..24]);
        Some(Gid::from_ipv6(Ipv6Addr::from(a)))
    } else if grh[20] >> 4 == 4 {
        let s = &grh[20 + 12..20 + 16];
        Some(Gid::from_ipv4(Ipv4Addr::new(s[0], s[1], s[2], s[3])))
    } else {
        None
    }
}

fn gid_ip(g: &Gid) -> IpAddr {
    match g.to_ipv4() {
        Some(a) => IpAddr::V4(a),
        None => IpAddr::V6(g.to_ipv6()),
    }
}

impl CmAgent {
    /// Creates QP1 on `dev` (fails if it exists), its PD, CQ and MAD buffers, and posts the
    /// receives.
    pub fn new(dev: &mut RoceDevice, cfg: CmAgentConfig) -> Result<CmAgent, CmAgentError> {
        let mut buf = vec![0u8; RECV_SLOTS * RECV_SLOT_LEN + SEND_SLOTS * MAD_SIZE].into_boxed_slice();
        let pd = dev.device_mut().alloc_pd();
        // SAFETY: `buf` is a heap allocation that is never moved or freed while registered:
        // `close` deregisters it (after destroying QP1) before freeing it, and a dropped
        // agent leaks it (ManuallyDrop), so the device never writes to freed memory. The
        // agent reads it only for completed receives and writes it only for free send slots.
        #[allow(unsafe_code)]
        let mr = unsafe { dev.reg_mr(pd, buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }
            .map_err(|e| CmAgentError::Setup(format!("reg_mr: {e:?}")))?;
        let d = dev.device_mut();
        let cq = d.create_cq(RECV_SLOTS + SEND_SLOTS + 8).map_err(|e| CmAgentError::Setup(format!("create_cq: {e:?}")))?;
        let cap = QpCap { max_send_wr: SEND_SLOTS as u32, max_recv_wr: RECV_SLOTS as u32, ..QpCap::default() };
        let qp = d
            .create_gsi_qp(QpInitAttr { qp_type: QpType::Ud, pd, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: true })
            .map_err(|e| CmAgentError::Setup(format!("create_gsi_qp: {e:?}")))?;
        let a = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: QKey(GSI_QKEY), ..QpAttr::default() };
        let steps = [
            (a, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY),
            (QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, QpAttrMask::STATE),
            (QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(0), ..QpAttr::default() }, QpAttrMask::STATE | QpAttrMask::SQ_PSN),
        ];
        for (a, m) in steps {
            d.modify_qp(qp, &a, m).map_err(|e| CmAgentError::Setup(format!("QP1 modify: {e:?}")))?;
        }
        let mut rng = cfg.seed ^ 0x4753_495f_4147_454e;
        let ep = CmEndpoint::new(cfg.cm, splitmix(&mut rng));
        let mut agent = CmAgent {
            cfg,
            ep,
            rng,
            pd,
            cq,
            qp,
            mr,
            buf: std::mem::ManuallyDrop::new(buf),
            free_send: (0..SEND_SLOTS).rev().collect(),
            next_id: 0,
            slots: BTreeMap::new(),
            by_handle: BTreeMap::new(),
            events: VecDeque::new(),
            counters: CmAgentCounters::default(),
            ca_guid: ca_guid_from_mac(dev.mac()),
            sidr_services: BTreeMap::new(),
            sidr_queries: BTreeMap::new(),
            sidr_events: VecDeque::new(),
        };
        for i in 0..RECV_SLOTS {
            agent.post_recv(dev, i)?;
        }
        Ok(agent)
    }

    /// Destroys QP1 and its resources and frees the MAD buffers. Connections still open are
    /// not disconnected (call `disconnect` and let `poll` send the DREQs first).
    pub fn close(mut self, dev: &mut RoceDevice) {
        let d = dev.device_mut();
        let _ = d.destroy_qp(self.qp);
        let _ = d.destroy_cq(self.cq);
        let ok = dev.dereg_mr(self.mr.lkey).is_ok();
        let _ = dev.device_mut().dealloc_pd(self.pd);
        if ok {
            // SAFETY: QP1 is destroyed and the buffer deregistered, so the device no longer
            // touches it; `self` is consumed, so `buf` is not used after this point.
            #[allow(unsafe_code)]
            unsafe {
                std::mem::ManuallyDrop::drop(&mut self.buf)
            };
        }
    }

    pub fn counters(&self) -> &CmAgentCounters {
        &self.counters
    }
    /// The sans-IO endpoint (its counters: unmatched MADs, REJs for unknown services).
    pub fn endpoint(&self) -> &CmEndpoint {
        &self.ep
    }
    pub fn qp(&self) -> QpHandle {
        self.qp
    }

    /// Accepts rdma_cm REQs for `port` in the TCP port space (what `rdma_listen` does).
    pub fn listen(&mut self, port: u16) -> u64 {
        let s = rdma_cm::service_id(PortSpace::TCP, port);
        self.ep.listen(s);
        s
    }
    pub fn listen_service(&mut self, service_id: u64) {
        self.ep.listen(service_id);
    }
    pub fn unlisten_service(&mut self, service_id: u64) {
        self.ep.unlisten(service_id);
    }

    pub fn poll_event(&mut self) -> Option<CmAgentEvent> {
        self.events.pop_front()
    }

    /// Answers SIDR_REQs for `port` in the UDP port space (rdma_cm's RDMA_PS_UDP) with `qpn`
    /// and `qkey`, replacing an earlier registration of the port. Returns the service ID.
    pub fn sidr_register(&mut self, port: u16, qpn: Qpn, qkey: QKey) -> u64 {
        let s = rdma_cm::service_id(PortSpace::UDP, port);
        self.sidr_services.insert(s, (qpn, qkey));
        s
    }

    pub fn sidr_unregister(&mut self, service_id: u64) {
        self.sidr_services.remove(&service_id);
    }

    /// Asks `dst`'s CM for the UD QP behind UDP port `dst.port()`: a SIDR_REQ (rdma_cm
    /// private-data header included) leaves with the next `poll` and is retransmitted every
    /// 200 ms, 10 times; the answer is a [`SidrEvent`] with the returned id.
    pub fn sidr_resolve(&mut self, dev: &mut RoceDevice, dst: SocketAddr) -> Result<SidrId, CmAgentError> {
        let (src_ip, _) = self.local_addr(dev, dst.ip())?;
        let r = splitmix(&mut self.rng);
        let mut request_id = r as u32;
        while self.sidr_queries.contains_key(&request_id) {
            request_id = request_id.wrapping_add(1);
        }
        let mut private_data = [0u8; sidr::req::PRIVATE_DATA_LEN];
        let addrs = match (src_ip, dst.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => rdma_cm::CmaAddrs::V4 { src, dst },
            (IpAddr::V6(src), IpAddr::V6(dst)) => rdma_cm::CmaAddrs::V6 { src, dst },
            _ => return Err(CmAgentError::NoLocalAddress),
        };
        CmaHeaderRepr { src_port: 0x8000 | ((r >> 32) as u16 & 0x7fff), addrs }.emit(&mut private_data);
        let req = SidrReqRepr { request_id, pkey: droce_transport::PKey(0xffff), service_id: rdma_cm::service_id(PortSpace::UDP, dst.port()), private_data };
        let peer = match dst.ip() {
            IpAddr::V4(a) => Gid::from_ipv4(a),
            IpAddr::V6(a) => Gid::from_ipv6(a),
        };
        let id = SidrId(request_id);
        let mad = CmMad::new(r >> 8, CmMessage::SidrReq(req));
        self.send_mad(dev, peer, &mad);
        let next = Instant(dev.now().0 + SIDR_RETRY_NS);
        self.sidr_queries.insert(request_id, SidrQuery { id, peer, mad, next, tries: SIDR_TRIES - 1 });
        Ok(id)
    }

    pub fn poll_sidr_event(&mut self) -> Option<SidrEvent> {
        self.sidr_events.pop_front()
    }

    fn sidr_timers(&mut self, dev: &mut RoceDevice, now: Instant) -> bool {
        let due: Vec<u32> = self.sidr_queries.iter().filter(|(_, q)| q.next <= now).map(|(k, _)| *k).collect();
        for k in &due {
            let Some(q) = self.sidr_queries.get_mut(k) else { continue };
            if q.tries == 0 {
                let id = q.id;
                self.sidr_queries.remove(k);
                self.sidr_events.push_back(SidrEvent::Failed { id, status: SIDR_TIMEOUT });
                continue;
            }
            q.tries -= 1;
            q.next = Instant(now.0 + SIDR_RETRY_NS);
            let (peer, mad) = (q.peer, q.mad.clone());
            self.send_mad(dev, peer, &mad);
        }
        !due.is_empty()
    }

    fn sidr_mad(&mut self, dev: &mut RoceDevice, peer: Gid, mad: &CmMad) {
        match &mad.message {
            CmMessage::SidrReq(req) => {
                let (status, (qpn, qkey)) = match self.sidr_services.get(&req.service_id) {
                    Some(x) => (SidrStatus::SUCCESS, *x),
                    None => (SidrStatus::NO_QP, (Qpn::new(0), QKey(0))),
                };
                let rep = SidrRepRepr {
                    request_id: req.request_id,
                    status,
                    info_len: 0,
                    qpn,
                    service_id: req.service_id,
                    qkey,
                    info: [0; sidr::rep::INFO_LEN],
                    private_data: [0; sidr::rep::PRIVATE_DATA_LEN],
                };
                let out = CmMad::new(mad.header.transaction_id, CmMessage::SidrRep(rep));
                self.send_mad(dev, peer, &out);
            }
            CmMessage::SidrRep(rep) => {
                let Some(q) = self.sidr_queries.remove(&rep.request_id) else { return };
                self.sidr_events.push_back(if rep.status == SidrStatus::SUCCESS {
                    SidrEvent::Resolved { id: q.id, qpn: rep.qpn, qkey: rep.qkey }
                } else {
                    SidrEvent::Failed { id: q.id, status: rep.status.0 }
                });
            }
            _ => {}
        }
    }

    /// The earliest CM deadline (retransmissions, TimeWait), for a sleeping engine.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let s = self.sidr_queries.values().map(|q| q.next).min();
        match (self.ep.poll_timeout(), s) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The negotiated parameters of a live connection.
    pub fn params(&self, id: ConnId) -> Option<&ConnParams> {
        match self.slots.get(&id)? {
            Slot::Live { h, .. } => self.ep.connection(*h)?.params(),
            Slot::Pending(_) => None,
        }
    }

    fn fresh_id(&mut self) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Opens an rdma_cm connection (TCP port space) to `dst` with `qp` (RC, RESET or INIT;
    /// moved to INIT now, to RTR/RTS when the REP arrives). Events come with the returned id.
    pub fn connect(&mut self, dev: &mut RoceDevice, dst: SocketAddr, qp: QpHandle, p: &ConnectParams) -> Result<ConnId, CmAgentError> {
        let (src_ip, local_gid) = self.local_addr(dev, dst.ip())?;
        to_init(dev, qp)?;
        let local_qpn = dev.device().query_qp(qp).map_err(|e| CmAgentError::Qp(format!("{e:?}")))?.qp_num;
        let r = splitmix(&mut self.rng);
        let src_port = 0x8000 | (r as u16 & 0x7fff);
        let starting_psn = Psn::new((r >> 16) as u32 & 0xff_ffff);
        let mtu = dev.path_mtu() as u8;
        let mut req = RcConnect {
            local_comm_id: 0,
            local_ca_guid: self.ca_guid,
            local_qpn,
            starting_psn,
            src: SocketAddr::new(src_ip, src_port),
            dst,
            local_gid,
            remote_gid: match dst.ip() {
                IpAddr::V4(a) => Gid::from_ipv4(a),
                IpAddr::V6(a) => Gid::from_ipv6(a),
            },
            path_mtu: mtu,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            private_data: &p.private_data,
        }
        .to_req()
        .ok_or(CmAgentError::NoLocalAddress)?;
        if let Some(t) = self.cfg.cm_response_timeout {
            req.remote_cm_response_timeout = t;
            req.local_cm_response_timeout = t;
        }
        // Linux: local ACK timeout = packet life time + 1 (19 for RoCE's 18).
        req.primary_path.local_ack_timeout = (self.cfg.cm.packet_life_time + 1).min(31);
        if let Some(n) = self.cfg.max_cm_retries {
            req.max_cm_retries = n;
        }
        let peer = req.primary_path.remote_gid;
        let h = self.ep.connect(dev.now(), peer, req);
        let id = self.fresh_id();
        self.slots.insert(id, Slot::Live { h, qp });
        self.by_handle.insert(h, id);
        Ok(id)
    }

    /// Accepts the connect request `id` with `qp` (RC, RESET or INIT): the QP goes to RTR and
    /// RTS now, the REP leaves with the next `poll`; `Established` follows the RTU.
    ///
    /// When `qp` cannot be programmed the request is refused instead: a REJ (reason 28,
    /// consumer defined, what Linux's CM sends when the passive consumer gives up on a REQ)
    /// leaves with the next `poll`, `id` is gone, and the error is returned.
    pub fn accept(&mut self, dev: &mut RoceDevice, id: ConnId, qp: QpHandle, p: &ConnectParams) -> Result<(), CmAgentError> {
        let Some(Slot::Pending(inc)) = self.slots.get(&id) else {
            return Err(CmAgentError::InvalidConn);
        };
        let inc = (**inc).clone();
        let local = to_init(dev, qp).and_then(|()| dev.device().query_qp(qp).map_err(|e| CmAgentError::Qp(format!("{e:?}"))));
        let local_qpn = match local {
            Ok(info) => info.qp_num,
            Err(e) => {
                self.counters.qp_errors += 1;
                self.slots.remove(&id);
                self.ep.reject(&inc, RejectReason::CONSUMER_DEFINED, &[]);
                return Err(e);
            }
        };
        let r = splitmix(&mut self.rng);
        let psn = Psn::new(r as u32 & 0xff_ffff);
        let mut inc_capped = inc.clone();
        // Our offer caps the peer's: READs we accept and READs we issue.
        inc_capped.req.initiator_depth = inc.req.initiator_depth.min(p.responder_resources.max(1));
        inc_capped.req.responder_resources = inc.req.responder_resources.min(p.initiator_depth.max(1));
        inc_capped.req.path_mtu = inc.req.path_mtu.min(dev.path_mtu() as u8);
        let h = self.ep.accept_with_private_data(dev.now(), &inc_capped, local_qpn, psn, self.ca_guid, &p.private_data);
        let params = self.ep.connection(h).and_then(|c| c.params()).cloned();
        let programmed = match params {
            Some(params) => self.rtr_rts(dev, qp, &params),
            None => Err(CmAgentError::Qp("no parameters after accept".into())),
        };
        if let Err(e) = programmed {
            // The REP has not left yet (it goes with the next poll): send a REJ in its place.
            self.counters.qp_errors += 1;
            self.slots.remove(&id);
            self.ep.abort_accept(h, &inc_capped, RejectReason::CONSUMER_DEFINED, &[]);
            to_error(dev, qp);
            return Err(e);
        }
        self.slots.insert(id, Slot::Live { h, qp });
        self.by_handle.insert(h, id);
        Ok(())
    }

    /// Refuses the connect request `id` with REJ reason 28 (consumer defined, `rdma_reject`).
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmAgentError> {
        self.reject_with(id, RejectReason::CONSUMER_DEFINED, private_data)
    }

    pub fn reject_with(&mut self, id: ConnId, reason: RejectReason, private_data: &[u8]) -> Result<(), CmAgentError> {
        match self.slots.remove(&id) {
            Some(Slot::Pending(inc)) => {
                self.ep.reject(&inc, reason, private_data);
                Ok(())
            }
            Some(s) => {
                self.slots.insert(id, s);
                Err(CmAgentError::InvalidConn)
            }
            None => Err(CmAgentError::InvalidConn),
        }
    }

    /// Sends the ACKs held for the next round, moves the QP to ERROR and sends a DREQ
    /// (`rdma_disconnect`); `Disconnected` follows the DREP (or the DREQ's timeout).
    pub fn disconnect(&mut self, dev: &mut RoceDevice, id: ConnId) -> Result<(), CmAgentError> {
        let Some(Slot::Live { h, qp }) = self.slots.get(&id) else {
            return Err(CmAgentError::InvalidConn);
        };
        let (h, qp) = (*h, *qp);
        // ACKs held for the next round leave first: the peer's last send must complete
        // before our DREQ (behind it) moves its QP to error and flushes it
        dev.flush();
        to_error(dev, qp);
        if self.ep.disconnect(dev.now(), h) {
            Ok(())
        } else {
            Err(CmAgentError::InvalidConn)
        }
    }

    /// One round: received MADs, due CM timers, events (QP transitions), outgoing MADs.
    /// Returns true if anything happened.
    pub fn poll(&mut self, dev: &mut RoceDevice) -> bool {
        let mut work = false;
        let now = dev.now();
        // Bounded: at most every slot once per round.
        for _ in 0..RECV_SLOTS + SEND_SLOTS {
            let Ok(Some(wc)) = dev.device_mut().poll_cq_one(self.cq) else { break };
            work = true;
            self.completion(dev, now, &wc);
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
            work = true;
        }
        if !self.sidr_queries.is_empty() {
            work |= self.sidr_timers(dev, now);
        }
        while let Some(ev) = self.ep.poll_event() {
            work = true;
            self.endpoint_event(dev, ev);
        }
        while let Some((peer, mad)) = self.ep.poll_transmit() {
            work = true;
            self.send_mad(dev, peer, &mad);
        }
        work
    }

    fn completion(&mut self, dev: &mut RoceDevice, now: Instant, wc: &WorkCompletion) {
        if wc.wr_id & WR_SEND != 0 {
            self.free_send.push((wc.wr_id & 0xffff) as usize);
            return;
        }
        let slot = wc.wr_id as usize;
        if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv && wc.src_qp == Qpn::new(GSI_QPN) {
            let off = slot * RECV_SLOT_LEN;
            let b = &self.buf[off..off + RECV_SLOT_LEN];
            let len = (wc.byte_len as usize).min(RECV_SLOT_LEN);
            match (grh_source(&b[..GRH_LEN]), CmMad::parse(&b[GRH_LEN..len.max(GRH_LEN)])) {
                (Some(peer), Ok(mad)) => {
                    self.counters.mads_rx += 1;
                    if matches!(mad.message, CmMessage::SidrReq(_) | CmMessage::SidrRep(_)) {
                        self.sidr_mad(dev, peer, &mad);
                    } else {
                        self.ep.handle_mad(now, peer, &mad);
                    }
                }
                _ => self.counters.bad_mads += 1,
            }
        } else if wc.status == WcStatus::Success {
            self.counters.bad_mads += 1;
        }
        if wc.status != WcStatus::WrFlushErr {
            let _ = self.post_recv(dev, slot);
        }
    }

    fn endpoint_event(&mut self, dev: &mut RoceDevice, ev: EndpointEvent) {
        match ev {
            EndpointEvent::Incoming(inc) => {
                let id = self.fresh_id();
                let (src, dst, private_data) = match CmaHeaderRepr::parse(&inc.req.private_data) {
                    Ok(h) => (
                        SocketAddr::new(h.addrs.src(), h.src_port),
                        SocketAddr::new(h.addrs.dst(), rdma_cm::parse_service_id(inc.req.service_id).map_or(0, |(_, p)| p)),
                        inc.req.private_data[rdma_cm::HEADER_LEN..].to_vec(),
                    ),
                    Err(_) => (
                        SocketAddr::new(gid_ip(&inc.peer), 0),
                        SocketAddr::new(gid_ip(&inc.req.primary_path.remote_gid), 0),
                        inc.req.private_data.to_vec(),
                    ),
                };
                self.events.push_back(CmAgentEvent::ConnectRequest {
                    id,
                    src,
                    dst,
                    private_data,
                    responder_resources: inc.req.responder_resources,
                    initiator_depth: inc.req.initiator_depth,
                    peer_qpn: inc.req.local_qpn,
                });
                self.slots.insert(id, Slot::Pending(Box::new(inc)));
            }
            EndpointEvent::Connection(h, ev) => {
                let Some(&id) = self.by_handle.get(&h) else { return };
                let Some(Slot::Live { qp, .. }) = self.slots.get(&id) else { return };
                let qp = *qp;
                let passive = self.ep.connection(h).map(|c| c.role()) == Some(droce_transport::cm::Role::Passive);
                match ev {
                    CmEvent::Established(p) => {
                        // Passive: the QP went to RTS in `accept`.
                        if !passive {
                            if let Err(_e) = self.rtr_rts(dev, qp, &p) {
                                self.counters.qp_errors += 1;
                            }
                        }
                        let private_data = self.ep.connection(h).and_then(|c| c.rep()).map(|r| r.private_data.to_vec()).unwrap_or_default();
                        self.events.push_back(CmAgentEvent::Established { id, params: p, private_data });
                    }
                    CmEvent::Rejected { reason, private_data } => {
                        to_error(dev, qp);
                        self.events.push_back(CmAgentEvent::Rejected { id, reason, private_data: private_data.to_vec() });
                    }
                    CmEvent::TimedOut => {
                        to_error(dev, qp);
                        self.events.push_back(CmAgentEvent::TimedOut { id });
                    }
                    CmEvent::Disconnected => {
                        to_error(dev, qp);
                        self.events.push_back(CmAgentEvent::Disconnected { id });
                    }
                    CmEvent::TimeWaitExit => {}
                }
                if self.ep.connection(h).is_none() {
                    self.by_handle.remove(&h);
                    self.slots.remove(&id);
                }
            }
        }
    }

    fn rtr_rts(&mut self, dev: &mut RoceDevice, qp: QpHandle, p: &ConnParams) -> Result<(), CmAgentError> {
        let sgid = dev.gid_index(&p.path.local_gid).ok_or(CmAgentError::NoLocalAddress)?;
        let mut av = dev.av(p.path.remote_gid, sgid);
        av.flow_label = p.path.flow_label;
        av.hop_limit = p.path.hop_limit.max(1);
        av.traffic_class = p.path.traffic_class;
        let mtu = mtu_from_code(p.path_mtu).min(dev.path_mtu());
        let d = dev.device_mut();
        let (a, m) = rtr_attr(av, mtu, p.remote_qpn, p.rq_psn, p.responder_resources, self.cfg.min_rnr_timer);
        d.modify_qp(qp, &a, m).map_err(|e| CmAgentError::Qp(format!("RTR: {e:?}")))?;
        let (a, m) = rts_attr(p.sq_psn, p.ack_timeout, p.retry_count, p.rnr_retry_count, p.initiator_depth);
        d.modify_qp(qp, &a, m).map_err(|e| CmAgentError::Qp(format!("RTS: {e:?}")))?;
        Ok(())
    }

    fn local_addr(&self, dev: &RoceDevice, dst: IpAddr) -> Result<(IpAddr, Gid), CmAgentError> {
        dev.gids()
            .iter()
            .find_map(|g| match (dst, g.to_ipv4()) {
                (IpAddr::V4(_), Some(a)) => Some((IpAddr::V4(a), *g)),
                (IpAddr::V6(d), None) if (d.segments()[0] == 0xfe80) == (g.to_ipv6().segments()[0] == 0xfe80) => {
                    Some((IpAddr::V6(g.to_ipv6()), *g))
                }
                _ => None,
            })
            .ok_or(CmAgentError::NoLocalAddress)
    }

    fn post_recv(&mut self, dev: &mut RoceDevice, slot: usize) -> Result<(), CmAgentError> {
        let addr = self.buf.as_ptr() as u64 + (slot * RECV_SLOT_LEN) as u64;
        let wr = RecvWr::new(slot as u64).with_sge(addr, RECV_SLOT_LEN as u32, self.mr.lkey);
        dev.device_mut().post_recv(self.qp, wr).map_err(|e| CmAgentError::Setup(format!("post_recv: {e:?}")))
    }

    fn send_mad(&mut self, dev: &mut RoceDevice, peer: Gid, mad: &CmMad) {
        let Some(slot) = self.free_send.pop() else {
            self.counters.tx_dropped += 1;
            return;
        };
        let off = RECV_SLOTS * RECV_SLOT_LEN + slot * MAD_SIZE;
        mad.emit(&mut self.buf[off..off + MAD_SIZE]);
        let sgid = match peer.to_ipv4() {
            Some(_) => dev.gids().iter().position(|g| g.is_ipv4_mapped()),
            None => {
                let ll = peer.to_ipv6().segments()[0] == 0xfe80;
                dev.gids().iter().position(|g| !g.is_ipv4_mapped() && (g.to_ipv6().segments()[0] == 0xfe80) == ll)
            }
        };
        let Some(sgid) = sgid else {
            self.counters.tx_dropped += 1;
            self.free_send.push(slot);
            return;
        };
        let av = dev.av(peer, sgid as u8);
        let mut wr = SendWr::new(WR_SEND | slot as u64, SendOpcode::Send);
        wr.sg_list.push(droce_transport::verbs::Sge { addr: self.buf.as_ptr() as u64 + off as u64, length: MAD_SIZE as u32, lkey: self.mr.lkey });
        wr.ud = Some(UdDest { av, remote_qpn: Qpn::new(GSI_QPN), remote_qkey: QKey(GSI_QKEY) });
        match dev.device_mut().post_send(self.qp, wr) {
            Ok(()) => self.counters.mads_tx += 1,
            Err(_) => {
                self.counters.tx_dropped += 1;
                self.free_send.push(slot);
            }
        }
    }
}

/// RESET → INIT (rdma_cm grants remote READ, WRITE and atomics); INIT stays. What
/// `rdma_create_qp` does: call it before posting receives on a QP that will be connected.
pub fn to_init(dev: &mut RoceDevice, qp: QpHandle) -> Result<(), CmAgentError> {
    let d = dev.device_mut();
    let info = d.query_qp(qp).map_err(|e| CmAgentError::Qp(format!("{e:?}")))?;
    if info.qp_type != QpType::Rc {
        return Err(CmAgentError::Qp("not an RC QP".into()));
    }
    match info.attr.qp_state {
        QpState::Reset => {
            let (a, m) = init_attr(AccessFlags::ALL);
            d.modify_qp(qp, &a, m).map_err(|e| CmAgentError::Qp(format!("INIT: {e:?}")))
        }
        QpState::Init => Ok(()),
        s => Err(CmAgentError::Qp(format!("QP in {s:?}, want RESET or INIT"))),
    }
}

fn to_error(dev: &mut RoceDevice, qp: QpHandle) {
    let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
    let _ = dev.device_mut().modify_qp(qp, &a, QpAttrMask::STATE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_like_rxe() {
        assert_eq!(ca_guid_from_mac([0x52, 0x54, 0x00, 0x77, 0x00, 0x11]), 0x5054_00ff_fe77_0011);
    }

    #[test]
    fn grh_sources() {
        let mut g = [0u8; GRH_LEN];
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[192, 168, 77, 10]);
        assert_eq!(grh_source(&g), Some(Gid::from_ipv4(Ipv4Addr::new(192, 168, 77, 10))));
        let mut g = [0u8; GRH_LEN];
        g[0] = 0x60;
        let a: Ipv6Addr = "fd00::1".parse().unwrap();
        g[8..24].copy_from_slice(&a.octets());
        assert_eq!(grh_source(&g), Some(Gid::from_ipv6(a)));
        assert_eq!(grh_source(&[0u8; GRH_LEN]), None);
    }
}
