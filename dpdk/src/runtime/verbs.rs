//! The verbs-shaped face of the runtime: what the CLI's RDMA tests, the libfabric provider and
//! the UCX transport call. Each call goes to the transport device (or the CM agent on QP1) the
//! runtime owns; frontends never reach the device underneath, so the runtime alone decides
//! what a post, a poll or a connect costs (ACK hold, progress, memory registration).
//!
//! ```text
//! protection domains, memory     alloc_pd dealloc_pd  reg_mr (unsafe) dereg_mr  read_mem write_mem
//! completion queues, SRQs        create_cq destroy_cq poll_cq poll_cq_one  create_srq destroy_srq
//!                                post_srq_recv post_srq_recv_ref
//! queue pairs                    create_qp destroy_qp query_qp modify_qp qp_to_init  path_mtu av
//! work requests                  post_send post_send_ref post_send_inline_with post_recv post_recv_ref
//! progress from a frontend       poll_device (one device round); in mod.rs: progress,
//!                                progress_datapath, progress_datapath_rx, flush, set_hold_acks / hold_acks
//! asynchronous events            poll_event
//! connections (IB CM on QP1)     listen unlisten connect accept reject disconnect poll_cm_event cm_params
//! UD service resolution (SIDR)   sidr_register sidr_unregister sidr_resolve poll_sidr_event
//! ```

use super::Runtime;
use crate::roce::cm::{CmAgentError, CmAgentEvent, ConnId, ConnectParams, SidrEvent, SidrId};
use crate::roce::RoceStats;
use droce_transport::cm::ConnParams;
use droce_transport::device::{
    CreateQpError, DeallocPdError, DestroyCqError, DestroyQpError, DestroySrqError, ModifyQpError, PostRecvError, PostSendError, QueryQpError,
};
use droce_transport::qp::{PathMtu, QpAttr, QpAttrMask, QpHandle, QpInfo, QpInitAttr};
use droce_transport::verbs::cq::{CreateCqError, PollCqError};
use droce_transport::verbs::mr::{DeregMrError, RegMrError};
use droce_transport::verbs::srq::CreateSrqError;
use droce_transport::verbs::{AccessFlags, AddressVector, CqHandle, MemoryRegion, PdHandle, RecvWr, SendWr, SrqHandle, WorkCompletion};
use droce_transport::{AsyncEvent, Gid, Lkey, MemoryError, QKey, Qpn};
use std::net::SocketAddr;

impl Runtime {
    // ------------------------------------------------------------------ PDs and memory

    pub fn alloc_pd(&mut self) -> PdHandle {
        self.dev.device_mut().alloc_pd()
    }

    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), DeallocPdError> {
        self.dev.device_mut().dealloc_pd(pd)
    }

    /// Registers `len` bytes of process memory at `addr` as an MR of `pd`.
    ///
    /// # Safety
    /// `addr..addr + len` must stay valid for reads and writes until `dereg_mr(lkey)`, and the
    /// application must not change it while a work request or a remote peer may use it: the
    /// verbs contract (freeing registered memory that frames still reference is the caller's
    /// error, as with `ibv_reg_mr`).
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr(&mut self, pd: PdHandle, addr: *mut u8, len: usize, access: AccessFlags) -> Result<MemoryRegion, RegMrError> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.dev.reg_mr(pd, addr, len, access) }
    }

    pub fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), DeregMrError> {
        self.dev.dereg_mr(lkey)
    }

    /// Copies registered memory out (no work request may be writing it).
    pub fn read_mem(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.dev.read_mem(addr, buf)
    }

    /// Copies into registered memory (no work request may be using it).
    pub fn write_mem(&mut self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        self.dev.write_mem(addr, data)
    }

    // ------------------------------------------------------------------ CQs and SRQs

    pub fn create_cq(&mut self, depth: usize) -> Result<CqHandle, CreateCqError> {
        self.dev.device_mut().create_cq(depth)
    }

    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), DestroyCqError> {
        self.dev.device_mut().destroy_cq(cq)
    }

    /// Completions already made; the runtime's progress (a poll loop, a progress thread or
    /// [`Runtime::progress`]) makes new ones.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize, PollCqError> {
        self.dev.device_mut().poll_cq(cq, out)
    }

    pub fn poll_cq_one(&mut self, cq: CqHandle) -> Result<Option<WorkCompletion>, PollCqError> {
        self.dev.device_mut().poll_cq_one(cq)
    }

    pub fn create_srq(&mut self, pd: PdHandle, max_wr: usize, max_sge: usize) -> Result<SrqHandle, CreateSrqError> {
        self.dev.device_mut().create_srq(pd, max_wr, max_sge)
    }

    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), DestroySrqError> {
        self.dev.device_mut().destroy_srq(srq)
    }

    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), PostRecvError> {
        self.dev.device_mut().post_srq_recv(srq, wr)
    }

    // ------------------------------------------------------------------ QPs

    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<QpHandle, CreateQpError> {
        self.dev.device_mut().create_qp(init)
    }

    pub fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), DestroyQpError> {
        self.dev.device_mut().destroy_qp(qp)
    }

    pub fn query_qp(&self, qp: QpHandle) -> Result<QpInfo, QueryQpError> {
        self.dev.device().query_qp(qp)
    }

    pub fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<(), ModifyQpError> {
        self.dev.device_mut().modify_qp(qp, attr, mask)
    }

    /// The path MTU of this port (a connection takes the smaller of its two ends').
    pub fn path_mtu(&self) -> PathMtu {
        self.dev.path_mtu()
    }

    /// The address vector to `dgid` from local GID `sgid_index`.
    pub fn av(&self, dgid: Gid, sgid_index: u8) -> AddressVector {
        self.dev.av(dgid, sgid_index)
    }

    /// Resolves the MAC of `av`'s destination (ARP / neighbour solicitation, retried), polling
    /// the device meanwhile, as the creation of a verbs address handle does: UD sends made
    /// after it find the destination known instead of filling the hold queue behind an
    /// unanswered request (past 256 held frames they were dropped, each completing with
    /// success). Err naming the destination after `timeout`.
    pub fn resolve_av(&mut self, av: &AddressVector, timeout: std::time::Duration) -> Result<[u8; 6], String> {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(mac) = self.dev.resolve_gid(av.dgid) {
                return Ok(mac);
            }
            if t0.elapsed() > timeout {
                let ip = av.dgid.to_ipv4().map_or(std::net::IpAddr::V6(av.dgid.to_ipv6()), std::net::IpAddr::V4);
                return Err(format!("{ip} did not answer ARP / neighbour solicitation within {timeout:?}"));
            }
            if !self.progress() {
                std::thread::yield_now();
            }
        }
    }

    // ------------------------------------------------------------------ work requests

    pub fn post_send(&mut self, qp: QpHandle, wr: SendWr) -> Result<(), PostSendError> {
        self.dev.device_mut().post_send(qp, wr)
    }

    /// [`Runtime::post_send`] without moving the request (the caller reuses it).
    pub fn post_send_ref(&mut self, qp: QpHandle, wr: &SendWr) -> Result<(), PostSendError> {
        self.dev.device_mut().post_send_ref(qp, wr)
    }

    /// An INLINE send of `len` bytes that `fill` writes straight into the work request's own
    /// buffer in the transport (`Device::post_send_inline_with`): the caller's one copy.
    pub fn post_send_inline_with(&mut self, qp: QpHandle, wr: &SendWr, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), PostSendError> {
        self.dev.device_mut().post_send_inline_with(qp, wr, len, fill)
    }

    pub fn post_recv(&mut self, qp: QpHandle, wr: RecvWr) -> Result<(), PostRecvError> {
        self.dev.device_mut().post_recv(qp, wr)
    }

    pub fn post_recv_ref(&mut self, qp: QpHandle, wr: &RecvWr) -> Result<(), PostRecvError> {
        self.dev.device_mut().post_recv_ref(qp, wr)
    }

    /// The next asynchronous event (QP fatal, last WQE reached, ...).
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.dev.device_mut().poll_event()
    }

    /// Counters of the port and the transport, in `show port stats` / `show roce stats` form.
    pub fn stats(&self) -> RoceStats {
        self.dev.stats()
    }

    // ------------------------------------------------------------------ IB CM (QP1)

    /// Listens on RDMA_PS_TCP port `port`; returns its service ID.
    pub fn listen(&mut self, port: u16) -> u64 {
        self.cm.listen(port)
    }

    pub fn unlisten(&mut self, service_id: u64) {
        self.cm.unlisten_service(service_id)
    }

    /// Moves RC QP `qp` from RESET to INIT with every access right, as `rdma_create_qp` does,
    /// so that receives can be posted before [`Runtime::connect`] / [`Runtime::accept`].
    pub fn qp_to_init(&mut self, qp: QpHandle) -> Result<(), CmAgentError> {
        crate::roce::cm::to_init(&mut self.dev, qp)
    }

    /// Starts a connection of RC QP `qp` (RESET or INIT) to `dst`; the QP reaches RTS when
    /// [`CmAgentEvent::Established`] comes.
    pub fn connect(&mut self, dst: SocketAddr, qp: QpHandle, p: &ConnectParams) -> Result<ConnId, CmAgentError> {
        self.cm.connect(&mut self.dev, dst, qp, p)
    }

    /// Accepts a connection request with `qp` (moved to RTR and RTS before the REP leaves).
    pub fn accept(&mut self, id: ConnId, qp: QpHandle, p: &ConnectParams) -> Result<(), CmAgentError> {
        self.cm.accept(&mut self.dev, id, qp, p)
    }

    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmAgentError> {
        self.cm.reject(id, private_data)
    }

    /// Moves the connection's QP to ERROR and sends a DREQ.
    pub fn disconnect(&mut self, id: ConnId) -> Result<(), CmAgentError> {
        // ACKs held for the application's next reply leave now: the QP goes to the error
        // state and its peer, if we acknowledged its last send only in a held ACK, would see
        // the DREQ first and flush that send
        self.dev.flush();
        self.cm.disconnect(&mut self.dev, id)
    }

    pub fn poll_cm_event(&mut self) -> Option<CmAgentEvent> {
        self.cm.poll_event()
    }

    /// The negotiated parameters of an established connection.
    pub fn cm_params(&self, id: ConnId) -> Option<&ConnParams> {
        self.cm.params(id)
    }

    /// Answers SIDR requests for UDP-port-space `port` with `qpn` and `qkey`; returns the service ID.
    pub fn sidr_register(&mut self, port: u16, qpn: Qpn, qkey: QKey) -> u64 {
        self.cm.sidr_register(port, qpn, qkey)
    }

    pub fn sidr_unregister(&mut self, service_id: u64) {
        self.cm.sidr_unregister(service_id)
    }

    pub fn sidr_resolve(&mut self, dst: SocketAddr) -> Result<SidrId, CmAgentError> {
        self.cm.sidr_resolve(&mut self.dev, dst)
    }

    pub fn poll_sidr_event(&mut self) -> Option<SidrEvent> {
        self.cm.poll_sidr_event()
    }

    // ------------------------------------------------------------------ frontends' own progress
    // The libfabric provider and the UCX transport progress the runtime from inside their
    // calls: a latency-bound post is pushed to the wire at once, receives are reposted without
    // moving the request.

    /// One device round (TX what is posted, an RX burst, timers), without the link watch and
    /// the CM agent of [`Runtime::progress`]: the first frames of a request just posted leave
    /// before the caller returns to the application. True if anything happened.
    pub fn poll_device(&mut self) -> bool {
        !self.dev.poll().is_idle()
    }

    /// [`Runtime::post_srq_recv`] without moving the request (the caller reuses it).
    pub fn post_srq_recv_ref(&mut self, srq: SrqHandle, wr: &RecvWr) -> Result<(), PostRecvError> {
        self.dev.device_mut().post_srq_recv_ref(srq, wr)
    }
}
