//! The GSI agent on a [`RoceDevice`]: the transport's sans-IO agent
//! ([`droce_transport::cm::agent`], IB CM and SIDR over QP1, RC QP transitions) with what only
//! the engine has: its clock, process memory for the MAD slots, and the held ACKs that must
//! leave before a DREQ. Destination MACs of the agent's address vectors are resolved by the
//! engine when the frames leave, as for every AV.
//!
//! The API is the transport agent's with `&mut RoceDevice` in place of the device and the
//! time; see there for the calls and events. Call [`CmAgent::poll`] next to
//! [`RoceDevice::poll`].

use super::RoceDevice;
use droce_transport::cm::agent;
use droce_transport::cm::rej::RejectReason;
use droce_transport::cm::{CmEndpoint, ConnParams};
use droce_transport::qp::QpHandle;
use droce_transport::{Instant, QKey, Qpn};
use std::fmt;
use std::mem::ManuallyDrop;
use std::net::SocketAddr;

pub use droce_transport::cm::agent::{
    ca_guid_from_mac, CmAgentConfig, CmAgentCounters, CmAgentError, CmAgentEvent, ConnId, ConnectParams, SidrEvent, SidrId, SIDR_TIMEOUT,
};

/// The GSI agent of one device (see the module docs).
pub struct CmAgent {
    inner: agent::CmAgent,
    /// The MAD slots. Never moved; freed only by `close` after QP1 is gone (leaked if the
    /// agent is dropped without `close`, because the device may still write into it).
    buf: ManuallyDrop<Box<[u8]>>,
}

impl fmt::Debug for CmAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl CmAgent {
    /// Creates QP1 on `dev` (fails if it exists), its PD, CQ and MAD slots, and posts the
    /// receives.
    pub fn new(dev: &mut RoceDevice, cfg: CmAgentConfig) -> Result<CmAgent, CmAgentError> {
        let mut buf = ManuallyDrop::new(vec![0u8; agent::MAD_BUFFER_LEN].into_boxed_slice());
        let (va, len) = (buf.as_mut_ptr() as u64, buf.len() as u64);
        // SAFETY: `buf` is a heap allocation that is never moved, and freed only after the
        // range is removed again: below if the agent cannot be set up (its MR is gone then),
        // in `close` once QP1 is destroyed and the MR deregistered; a dropped agent leaks it.
        // The agent touches it only through the device (completed receive slots, free send
        // slots), never while a work request owns the slot.
        #[allow(unsafe_code)]
        let added = unsafe { dev.device_mut().memory_mut().add_region(va, len) };
        if added.is_err() {
            return Err(CmAgentError::Setup("MAD slots: no memory range".into()));
        }
        match agent::CmAgent::new(dev.device_mut(), cfg, va) {
            Ok(inner) => Ok(CmAgent { inner, buf }),
            Err(e) => {
                dev.device_mut().memory_mut().remove_region(va, len);
                drop(ManuallyDrop::into_inner(buf));
                Err(e)
            }
        }
    }

    /// Destroys QP1 and its resources and frees the MAD slots. Connections still open are
    /// not disconnected (call `disconnect` and let `poll` send the DREQs first).
    pub fn close(self, dev: &mut RoceDevice) {
        let CmAgent { inner, buf } = self;
        if inner.close(dev.device_mut()) {
            dev.device_mut().memory_mut().remove_region(buf.as_ptr() as u64, buf.len() as u64);
            drop(ManuallyDrop::into_inner(buf));
        }
    }

    pub fn counters(&self) -> &CmAgentCounters {
        self.inner.counters()
    }
    /// The sans-IO endpoint (its counters: unmatched MADs, REJs for unknown services).
    pub fn endpoint(&self) -> &CmEndpoint {
        self.inner.endpoint()
    }
    pub fn qp(&self) -> QpHandle {
        self.inner.qp()
    }

    /// Accepts rdma_cm REQs for `port` in the TCP port space (what `rdma_listen` does).
    pub fn listen(&mut self, port: u16) -> u64 {
        self.inner.listen(port)
    }
    pub fn listen_service(&mut self, service_id: u64) {
        self.inner.listen_service(service_id);
    }
    pub fn unlisten_service(&mut self, service_id: u64) {
        self.inner.unlisten_service(service_id);
    }

    pub fn poll_event(&mut self) -> Option<CmAgentEvent> {
        self.inner.poll_event()
    }

    /// Answers SIDR_REQs for `port` in the UDP port space (rdma_cm's RDMA_PS_UDP) with `qpn`
    /// and `qkey`, replacing an earlier registration of the port. Returns the service ID.
    pub fn sidr_register(&mut self, port: u16, qpn: Qpn, qkey: QKey) -> u64 {
        self.inner.sidr_register(port, qpn, qkey)
    }
    pub fn sidr_unregister(&mut self, service_id: u64) {
        self.inner.sidr_unregister(service_id);
    }
    /// Asks `dst`'s CM for the UD QP behind UDP port `dst.port()` (SIDR_REQ, retransmitted);
    /// the answer is a [`SidrEvent`] with the returned id.
    pub fn sidr_resolve(&mut self, dev: &mut RoceDevice, dst: SocketAddr) -> Result<SidrId, CmAgentError> {
        let now = dev.now();
        self.inner.sidr_resolve(dev.device_mut(), now, dst)
    }
    pub fn poll_sidr_event(&mut self) -> Option<SidrEvent> {
        self.inner.poll_sidr_event()
    }

    /// The earliest CM deadline (retransmissions, TimeWait), for a sleeping engine.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    /// The negotiated parameters of a live connection.
    pub fn params(&self, id: ConnId) -> Option<&ConnParams> {
        self.inner.params(id)
    }

    /// Opens an rdma_cm connection (TCP port space) to `dst` with `qp` (RC, RESET or INIT).
    pub fn connect(&mut self, dev: &mut RoceDevice, dst: SocketAddr, qp: QpHandle, p: &ConnectParams) -> Result<ConnId, CmAgentError> {
        let now = dev.now();
        self.inner.connect(dev.device_mut(), now, dst, qp, p)
    }

    /// Accepts the connect request `id` with `qp` (RC, RESET or INIT); on failure a REJ goes
    /// in place of the REP.
    pub fn accept(&mut self, dev: &mut RoceDevice, id: ConnId, qp: QpHandle, p: &ConnectParams) -> Result<(), CmAgentError> {
        let now = dev.now();
        self.inner.accept(dev.device_mut(), now, id, qp, p)
    }

    /// Refuses the connect request `id` with REJ reason 28 (consumer defined, `rdma_reject`).
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmAgentError> {
        self.inner.reject(id, private_data)
    }
    pub fn reject_with(&mut self, id: ConnId, reason: RejectReason, private_data: &[u8]) -> Result<(), CmAgentError> {
        self.inner.reject_with(id, reason, private_data)
    }

    /// Sends the ACKs held for the next round, moves the QP to ERROR and sends a DREQ
    /// (`rdma_disconnect`); `Disconnected` follows the DREP (or the DREQ's timeout).
    pub fn disconnect(&mut self, dev: &mut RoceDevice, id: ConnId) -> Result<(), CmAgentError> {
        if !self.inner.has_connection(id) {
            return Err(CmAgentError::InvalidConn);
        }
        // The peer's last send must complete before our DREQ (behind it) moves its QP to
        // error and flushes it.
        dev.flush();
        let now = dev.now();
        self.inner.disconnect(dev.device_mut(), now, id)
    }

    /// One round: received MADs, due CM timers, events (QP transitions), outgoing MADs.
    /// Returns true if anything happened.
    pub fn poll(&mut self, dev: &mut RoceDevice) -> bool {
        let now = dev.now();
        self.inner.poll(dev.device_mut(), now)
    }
}

/// RESET → INIT (rdma_cm grants remote READ, WRITE and atomics); INIT stays. What
/// `rdma_create_qp` does: call it before posting receives on a QP that will be connected.
pub fn to_init(dev: &mut RoceDevice, qp: QpHandle) -> Result<(), CmAgentError> {
    agent::to_init(dev.device_mut(), qp)
}
