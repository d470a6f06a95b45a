//! The GSI agent: IB CM (rdma_cm compatible) over QP1 of a [`Device`], sans-IO.
//!
//! [`CmAgent`] owns QP1 (a UD QP, Q_Key 0x80010000), its CQ and its MAD slots, and a
//! [`CmEndpoint`]. The embedder drives it next to the device: [`CmAgent::poll`] feeds every
//! MAD received on QP1 (after the 40-byte GRH area) to the endpoint with the sender's GID,
//! runs the CM timers at `now`, moves the application's RC QPs through INIT/RTR/RTS/ERROR as
//! the CM says, and posts the endpoint's MADs as UD SENDs to QP1 of the peer. Address
//! vectors carry no MAC: the embedder resolves it from the IP when the frame leaves.
//!
//! ```text
//! CmAgent::new(&mut dev, CmAgentConfig, mad_buffer_va) -> Result<CmAgent, CmAgentError>
//! listen(port) / listen_service(service_id) / unlisten_service(service_id)
//! connect(&mut dev, now, dst: SocketAddr, qp, &ConnectParams { private_data, selective_repeat, .. }) -> ConnId
//! poll(&mut dev, now) -> bool (did something); poll_timeout() -> Option<Instant>
//! poll_event() -> Option<CmAgentEvent>:
//!   ConnectRequest { id, src, dst, private_data, responder_resources, initiator_depth }
//!   Established { id, params, private_data (the REP's) }   (the QP is in RTS)
//!   Rejected { id, reason, private_data }   Disconnected { id } (the QP is in ERROR)
//!   TimedOut { id } (the QP is in ERROR)
//! accept(&mut dev, now, id, qp, &ConnectParams) (QP → RTR, RTS before the REP leaves)
//! reject(id, private_data) (REJ reason 28, consumer defined)
//! disconnect(&mut dev, now, id) (QP → ERROR, DREQ)
//! close(self, &mut dev) -> bool (destroys QP1; true: the MAD slots are free again)
//! SIDR (UD service resolution, what rdma_cm does for RDMA_PS_UDP ids):
//! sidr_register(port, qpn, qkey) -> service_id / sidr_unregister(service_id): answer
//!   SIDR_REQs for that UDP-port-space service with the QPN and Q_Key (NO_QP otherwise)
//! sidr_resolve(&mut dev, now, dst: SocketAddr) -> SidrId (SIDR_REQ, retransmitted)
//! poll_sidr_event() -> Option<SidrEvent>: Resolved { id, qpn, qkey } / Failed { id, status }
//! ```
//!
//! `ConnectParams::selective_repeat` offers droce's selective repeat to a droce peer that
//! offers it too, through a trailer in the private data that only such a peer ever sees
//! (`ext.rs`); the QPs of both sides get `QpAttr::selective_repeat` at RTR when both offered.
//!
//! Application QPs must be RC QPs in RESET or INIT ([`to_init`] before posting receives, like
//! `rdma_create_qp`); the agent moves them. Everything is non-blocking; events queue up until
//! polled. Randomness (comm IDs, TIDs, PSNs, source ports) comes from the config's seed.

mod events;
mod ext;
mod gsi;
mod sidr;

pub use events::{CmAgentCounters, CmAgentError, CmAgentEvent, ConnId, ConnectParams};
pub use gsi::MAD_BUFFER_LEN;
pub use sidr::{SidrEvent, SidrId, SIDR_RETRY, SIDR_TIMEOUT, SIDR_TRIES};

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use self::gsi::{Completion, Gsi};
use self::sidr::Sidr;
use super::rdma_cm::{self, CmaHeaderRepr, PortSpace, RcConnect};
use super::rej::RejectReason;
use super::{CmConfig, CmEndpoint, CmEvent, CmMessage, ConnHandle, ConnParams, EndpointEvent, Incoming, Role};
use crate::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use crate::memory::Memory;
use crate::qp::{PathMtu, QpAttr, QpAttrMask, QpHandle, QpState, QpType};
use crate::rng::SplitMix64;
use crate::time::Instant;
use crate::types::{Gid, Psn, QKey, Qpn};
use crate::verbs::AccessFlags;
use crate::Device;

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

#[derive(Debug)]
enum Slot {
    /// A REQ handed to the application.
    Pending(Box<Incoming>),
    /// A connection of the endpoint with the application's QP; `ext`: the extensions our
    /// REQ offered (active side; `ext::SELECTIVE_REPEAT`).
    Live { h: ConnHandle, qp: QpHandle, ext: u8 },
}

/// The GSI agent of one device (see the module docs).
pub struct CmAgent {
    cfg: CmAgentConfig,
    ep: CmEndpoint,
    rng: SplitMix64,
    gsi: Gsi,
    next_id: u32,
    slots: BTreeMap<ConnId, Slot>,
    by_handle: BTreeMap<ConnHandle, ConnId>,
    events: VecDeque<CmAgentEvent>,
    counters: CmAgentCounters,
    ca_guid: u64,
    sidr: Sidr,
}

impl fmt::Debug for CmAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmAgent").field("qp", &self.gsi.qp()).field("conns", &self.slots.len()).finish()
    }
}

/// The EUI-64 node GUID rxe derives from the MAC (0x505400fffe770011 for 52:54:00:77:00:11).
pub fn ca_guid_from_mac(m: [u8; 6]) -> u64 {
    u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
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

fn gid_ip(g: &Gid) -> IpAddr {
    match g.to_ipv4() {
        Some(a) => IpAddr::V4(a),
        None => IpAddr::V6(g.to_ipv6()),
    }
}

fn ip_gid(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(a) => Gid::from_ipv4(a),
        IpAddr::V6(a) => Gid::from_ipv6(a),
    }
}

/// Our address (and its GID) for talking to `dst`: IPv4 for IPv4; for IPv6 a link-local
/// GID for a link-local destination, a global one otherwise.
fn local_addr(gids: &[Gid], dst: IpAddr) -> Result<(IpAddr, Gid), CmAgentError> {
    gids.iter()
        .find_map(|g| match (dst, g.to_ipv4()) {
            (IpAddr::V4(_), Some(a)) => Some((IpAddr::V4(a), *g)),
            (IpAddr::V6(d), None) if (d.segments()[0] == 0xfe80) == gsi::is_link_local(g) => Some((IpAddr::V6(g.to_ipv6()), *g)),
            _ => None,
        })
        .ok_or(CmAgentError::NoLocalAddress)
}

impl CmAgent {
    /// Creates QP1 on `dev` (fails if it exists), its PD and CQ, registers the
    /// [`MAD_BUFFER_LEN`] bytes at `mad_buffer` (which the device's memory must reach) as its
    /// MAD slots, and posts the receives. On failure nothing is left on the device.
    pub fn new<M: Memory>(dev: &mut Device<M>, cfg: CmAgentConfig, mad_buffer: u64) -> Result<CmAgent, CmAgentError> {
        let gsi = Gsi::open(dev, mad_buffer)?;
        let mut rng = SplitMix64::new(cfg.seed ^ 0x4753_495f_4147_454e);
        let ep = CmEndpoint::new(cfg.cm, rng.next_u64());
        Ok(CmAgent {
            cfg,
            ep,
            rng,
            gsi,
            next_id: 0,
            slots: BTreeMap::new(),
            by_handle: BTreeMap::new(),
            events: VecDeque::new(),
            counters: CmAgentCounters::default(),
            ca_guid: ca_guid_from_mac(dev.config().mac),
            sidr: Sidr::default(),
        })
    }

    /// Destroys QP1 and its resources. Returns true when the device no longer touches the
    /// MAD slots (their memory may be reused). Connections still open are not disconnected
    /// (call `disconnect` and let `poll` send the DREQs first).
    pub fn close<M: Memory>(self, dev: &mut Device<M>) -> bool {
        self.gsi.close(dev)
    }

    pub fn counters(&self) -> &CmAgentCounters {
        &self.counters
    }
    /// The sans-IO endpoint (its counters: unmatched MADs, REJs for unknown services).
    pub fn endpoint(&self) -> &CmEndpoint {
        &self.ep
    }
    pub fn qp(&self) -> QpHandle {
        self.gsi.qp()
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
        self.sidr.register(port, qpn, qkey)
    }

    pub fn sidr_unregister(&mut self, service_id: u64) {
        self.sidr.unregister(service_id);
    }

    /// Asks `dst`'s CM for the UD QP behind UDP port `dst.port()`: a SIDR_REQ (rdma_cm
    /// private-data header included) leaves now and is retransmitted every [`SIDR_RETRY`],
    /// [`SIDR_TRIES`] times in all; the answer is a [`SidrEvent`] with the returned id.
    pub fn sidr_resolve<M: Memory>(&mut self, dev: &mut Device<M>, now: Instant, dst: SocketAddr) -> Result<SidrId, CmAgentError> {
        let (src_ip, _) = local_addr(&dev.config().gids, dst.ip())?;
        let r = self.rng.next_u64();
        let (id, peer, mad) = self.sidr.resolve(now, src_ip, dst, r).ok_or(CmAgentError::NoLocalAddress)?;
        self.gsi.send(dev, peer, &mad, &mut self.counters);
        Ok(id)
    }

    pub fn poll_sidr_event(&mut self) -> Option<SidrEvent> {
        self.sidr.poll_event()
    }

    /// The earliest CM deadline (retransmissions, TimeWait, SIDR), for a sleeping embedder.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.ep.poll_timeout(), self.sidr.poll_timeout()) {
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

    /// Whether `id` names a connection of the endpoint (being set up, established or
    /// closing), not a connect request waiting for `accept`.
    pub fn has_connection(&self, id: ConnId) -> bool {
        matches!(self.slots.get(&id), Some(Slot::Live { .. }))
    }

    fn fresh_id(&mut self) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Opens an rdma_cm connection (TCP port space) to `dst` with `qp` (RC, RESET or INIT;
    /// moved to INIT now, to RTR/RTS when the REP arrives). Events come with the returned id.
    pub fn connect<M: Memory>(&mut self, dev: &mut Device<M>, now: Instant, dst: SocketAddr, qp: QpHandle, p: &ConnectParams) -> Result<ConnId, CmAgentError> {
        let (src_ip, local_gid) = local_addr(&dev.config().gids, dst.ip())?;
        to_init(dev, qp)?;
        let local_qpn = dev.query_qp(qp).map_err(|e| CmAgentError::Qp(format!("{e:?}")))?.qp_num;
        let r = self.rng.next_u64();
        let src_port = 0x8000 | (r as u16 & 0x7fff);
        let starting_psn = Psn::new((r >> 16) as u32 & 0xff_ffff);
        // The offer goes at the end of the consumer's bytes, if its data leaves room.
        let mut user = [0u8; rdma_cm::REQ_USER_PRIVATE_DATA_LEN];
        let offer = if p.selective_repeat { ext::SELECTIVE_REPEAT } else { 0 };
        let n = p.private_data.len().min(user.len());
        user[..n].copy_from_slice(&p.private_data[..n]);
        let ext = if ext::write(&mut user, p.private_data.len(), offer) { offer } else { 0 };
        let mut req = RcConnect {
            local_comm_id: 0,
            local_ca_guid: self.ca_guid,
            local_qpn,
            starting_psn,
            src: SocketAddr::new(src_ip, src_port),
            dst,
            local_gid,
            remote_gid: ip_gid(dst.ip()),
            path_mtu: dev.port_mtu() as u8,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            private_data: if ext != 0 { &user } else { &p.private_data },
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
        let h = self.ep.connect(now, peer, req);
        let id = self.fresh_id();
        self.slots.insert(id, Slot::Live { h, qp, ext });
        self.by_handle.insert(h, id);
        Ok(id)
    }

    /// Accepts the connect request `id` with `qp` (RC, RESET or INIT): the QP goes to RTR and
    /// RTS now, the REP leaves with the next `poll`; `Established` follows the RTU.
    ///
    /// When `qp` cannot be programmed the request is refused instead: a REJ (reason 28,
    /// consumer defined, what Linux's CM sends when the passive consumer gives up on a REQ)
    /// leaves with the next `poll`, `id` is gone, and the error is returned.
    pub fn accept<M: Memory>(&mut self, dev: &mut Device<M>, now: Instant, id: ConnId, qp: QpHandle, p: &ConnectParams) -> Result<(), CmAgentError> {
        let Some(Slot::Pending(inc)) = self.slots.get(&id) else {
            return Err(CmAgentError::InvalidConn);
        };
        let inc = (**inc).clone();
        let local = to_init(dev, qp).and_then(|()| dev.query_qp(qp).map_err(|e| CmAgentError::Qp(format!("{e:?}"))));
        let local_qpn = match local {
            Ok(info) => info.qp_num,
            Err(e) => {
                self.counters.qp_errors += 1;
                self.slots.remove(&id);
                self.ep.reject(&inc, RejectReason::CONSUMER_DEFINED, &[]);
                return Err(e);
            }
        };
        let psn = Psn::new(self.rng.next_u64() as u32 & 0xff_ffff);
        let mut inc_capped = inc.clone();
        // Our offer caps the peer's: READs we accept and READs we issue.
        inc_capped.req.initiator_depth = inc.req.initiator_depth.min(p.responder_resources.max(1));
        inc_capped.req.responder_resources = inc.req.responder_resources.min(p.initiator_depth.max(1));
        inc_capped.req.path_mtu = inc.req.path_mtu.min(dev.port_mtu() as u8);
        // Extensions both sides offer; the REP names them (only to a REQ that offered).
        let mine = if p.selective_repeat { ext::SELECTIVE_REPEAT } else { 0 };
        let mut agreed = ext::read(&inc.req.private_data) & mine;
        let mut rep_data = [0u8; super::rep::PRIVATE_DATA_LEN];
        let n = p.private_data.len().min(rep_data.len());
        rep_data[..n].copy_from_slice(&p.private_data[..n]);
        if !ext::write(&mut rep_data, p.private_data.len(), agreed) {
            agreed = 0;
        }
        let rep_data: &[u8] = if agreed != 0 { &rep_data } else { &p.private_data };
        let h = self.ep.accept_with_private_data(now, &inc_capped, local_qpn, psn, self.ca_guid, rep_data);
        let params = self.ep.connection(h).and_then(|c| c.params()).cloned();
        let programmed = match params {
            Some(params) => self.rtr_rts(dev, qp, &params, agreed & ext::SELECTIVE_REPEAT != 0),
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
        self.slots.insert(id, Slot::Live { h, qp, ext: agreed });
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

    /// Moves the QP to ERROR and sends a DREQ (`rdma_disconnect`); `Disconnected` follows the
    /// DREP (or the DREQ's timeout). An embedder that holds ACKs back sends them first: the
    /// peer's last send must complete before our DREQ (behind it) moves its QP to error and
    /// flushes it.
    pub fn disconnect<M: Memory>(&mut self, dev: &mut Device<M>, now: Instant, id: ConnId) -> Result<(), CmAgentError> {
        let Some(Slot::Live { h, qp, .. }) = self.slots.get(&id) else {
            return Err(CmAgentError::InvalidConn);
        };
        let (h, qp) = (*h, *qp);
        to_error(dev, qp);
        if self.ep.disconnect(now, h) {
            Ok(())
        } else {
            Err(CmAgentError::InvalidConn)
        }
    }

    /// One round at `now`: received MADs, due CM timers, events (QP transitions), outgoing
    /// MADs. Returns true if anything happened.
    pub fn poll<M: Memory>(&mut self, dev: &mut Device<M>, now: Instant) -> bool {
        let mut work = false;
        // Bounded: at most every slot once per round.
        for _ in 0..gsi::RECV_SLOTS + gsi::SEND_SLOTS {
            let Some(c) = self.gsi.poll(dev) else { break };
            work = true;
            match c {
                Completion::Mad { peer, mad } => {
                    self.counters.mads_rx += 1;
                    if matches!(mad.message, CmMessage::SidrReq(_) | CmMessage::SidrRep(_)) {
                        if let Some(rep) = self.sidr.handle_mad(&mad) {
                            self.gsi.send(dev, peer, &rep, &mut self.counters);
                        }
                    } else {
                        self.ep.handle_mad(now, peer, &mad);
                    }
                }
                Completion::Bad => self.counters.bad_mads += 1,
                Completion::Nothing => {}
            }
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
            work = true;
        }
        if self.sidr.has_queries() {
            let mut again = Vec::new();
            work |= self.sidr.handle_timeout(now, &mut again);
            for (peer, mad) in &again {
                self.gsi.send(dev, *peer, mad, &mut self.counters);
            }
        }
        while let Some(ev) = self.ep.poll_event() {
            work = true;
            self.endpoint_event(dev, ev);
        }
        while let Some((peer, mad)) = self.ep.poll_transmit() {
            work = true;
            self.gsi.send(dev, peer, &mad, &mut self.counters);
        }
        work
    }

    fn endpoint_event<M: Memory>(&mut self, dev: &mut Device<M>, ev: EndpointEvent) {
        match ev {
            EndpointEvent::Incoming(inc) => {
                let id = self.fresh_id();
                // The consumer gets its peer's data as sent: without the extension trailer.
                let mut field = inc.req.private_data;
                ext::strip(&mut field);
                let (src, dst, private_data) = match CmaHeaderRepr::parse(&field) {
                    Ok(h) => (
                        SocketAddr::new(h.addrs.src(), h.src_port),
                        SocketAddr::new(h.addrs.dst(), rdma_cm::parse_service_id(inc.req.service_id).map_or(0, |(_, p)| p)),
                        field[rdma_cm::HEADER_LEN..].to_vec(),
                    ),
                    Err(_) => (SocketAddr::new(gid_ip(&inc.peer), 0), SocketAddr::new(gid_ip(&inc.req.primary_path.remote_gid), 0), field.to_vec()),
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
                let Some(Slot::Live { qp, ext: offered, .. }) = self.slots.get(&id) else { return };
                let (qp, offered) = (*qp, *offered);
                let passive = self.ep.connection(h).map(|c| c.role()) == Some(Role::Passive);
                match ev {
                    CmEvent::Established(p) => {
                        let mut rep_data = self.ep.connection(h).and_then(|c| c.rep()).map(|r| r.private_data);
                        // Active: what the REP says both sides offered. Passive: the QP went to
                        // RTS in `accept`.
                        let agreed = rep_data.as_ref().map_or(0, |d| ext::read(d)) & offered;
                        if !passive && self.rtr_rts(dev, qp, &p, agreed & ext::SELECTIVE_REPEAT != 0).is_err() {
                            self.counters.qp_errors += 1;
                        }
                        if let Some(d) = rep_data.as_mut() {
                            ext::strip(d);
                        }
                        let private_data = rep_data.map(|d| d.to_vec()).unwrap_or_default();
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

    fn rtr_rts<M: Memory>(&mut self, dev: &mut Device<M>, qp: QpHandle, p: &ConnParams, selective_repeat: bool) -> Result<(), CmAgentError> {
        let sgid = dev.config().gids.iter().position(|g| *g == p.path.local_gid).and_then(|i| u8::try_from(i).ok()).ok_or(CmAgentError::NoLocalAddress)?;
        let mut av = gsi::av(p.path.remote_gid, sgid);
        av.flow_label = p.path.flow_label;
        av.hop_limit = p.path.hop_limit.max(1);
        av.traffic_class = p.path.traffic_class;
        let mtu = mtu_from_code(p.path_mtu).min(dev.port_mtu());
        let (mut a, mut m) = rtr_attr(av, mtu, p.remote_qpn, p.rq_psn, p.responder_resources, self.cfg.min_rnr_timer);
        if selective_repeat {
            a.selective_repeat = true;
            m = m | QpAttrMask::SELECTIVE_REPEAT;
        }
        dev.modify_qp(qp, &a, m).map_err(|e| CmAgentError::Qp(format!("RTR: {e:?}")))?;
        let (a, m) = rts_attr(p.sq_psn, p.ack_timeout, p.retry_count, p.rnr_retry_count, p.initiator_depth);
        dev.modify_qp(qp, &a, m).map_err(|e| CmAgentError::Qp(format!("RTS: {e:?}")))?;
        Ok(())
    }
}

/// RESET → INIT (rdma_cm grants remote READ, WRITE and atomics); INIT stays. What
/// `rdma_create_qp` does: call it before posting receives on a QP that will be connected.
pub fn to_init<M: Memory>(dev: &mut Device<M>, qp: QpHandle) -> Result<(), CmAgentError> {
    let info = dev.query_qp(qp).map_err(|e| CmAgentError::Qp(format!("{e:?}")))?;
    if info.qp_type != QpType::Rc {
        return Err(CmAgentError::Qp("not an RC QP".into()));
    }
    match info.attr.qp_state {
        QpState::Reset => {
            let (a, m) = init_attr(AccessFlags::ALL);
            dev.modify_qp(qp, &a, m).map_err(|e| CmAgentError::Qp(format!("INIT: {e:?}")))
        }
        QpState::Init => Ok(()),
        s => Err(CmAgentError::Qp(format!("QP in {s:?}, want RESET or INIT"))),
    }
}

fn to_error<M: Memory>(dev: &mut Device<M>, qp: QpHandle) {
    let a = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
    let _ = dev.modify_qp(qp, &a, QpAttrMask::STATE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_like_rxe() {
        assert_eq!(ca_guid_from_mac([0x52, 0x54, 0x00, 0x77, 0x00, 0x11]), 0x5054_00ff_fe77_0011);
    }

    #[test]
    fn local_address_by_family() {
        let ll = Gid::from_ipv6("fe80::1".parse().unwrap());
        let v4 = Gid::from_ipv4("10.0.0.1".parse().unwrap());
        let global = Gid::from_ipv6("fd00::1".parse().unwrap());
        let gids = [ll, v4, global];
        assert_eq!(local_addr(&gids, "10.0.0.2".parse().unwrap()), Ok(("10.0.0.1".parse().unwrap(), v4)));
        assert_eq!(local_addr(&gids, "fe80::2".parse().unwrap()), Ok(("fe80::1".parse().unwrap(), ll)));
        assert_eq!(local_addr(&gids, "fd00::2".parse().unwrap()), Ok(("fd00::1".parse().unwrap(), global)));
        assert_eq!(local_addr(&[ll], "10.0.0.2".parse().unwrap()), Err(CmAgentError::NoLocalAddress));
    }
}
