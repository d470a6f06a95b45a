//! The device: owns the verbs tables, routes received frames to QPs by destination QPN,
//! keeps the timer heap, schedules transmission round robin among QPs with work, and
//! counts. Driven sans-IO: `handle_rx`, `poll_transmit`, `poll_timeout`, `handle_timeout`.
//! For latency, a poll loop may use `poll_transmit_data` right after RX (plain ACKs wait for
//! the next `poll_transmit` and leave in one burst with the application's reply, just ahead
//! of it) and `tx_ready` to skip idle TX.
//!
//! ```
//! use droce_transport::{Device, DeviceConfig, Gid, Instant, VecMemory};
//! use droce_transport::qp::{QpCap, QpInitAttr, QpType};
//! use droce_transport::verbs::AccessFlags;
//!
//! let cfg = DeviceConfig { gids: vec![Gid::from_ipv4([10, 0, 0, 1].into())], ..DeviceConfig::default() };
//! let mut dev = Device::new(cfg, VecMemory::new(0x1000, 1 << 16));
//! let pd = dev.alloc_pd();
//! let mr = dev.reg_mr(pd, 0x1000, 1 << 16, AccessFlags::ALL).unwrap();
//! let cq = dev.create_cq(256).unwrap();
//! let qp = dev
//!     .create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: false })
//!     .unwrap();
//! // modify_qp to INIT/RTR/RTS (see `rc_connect`), post_send / post_recv, then drive it:
//! let mut buf = vec![0u8; dev.max_frame_len()];
//! let now = Instant::from_nanos(0);
//! while let Some(len) = dev.poll_transmit(now, &mut buf) { /* put buf[..len] on the wire */ }
//! if let Some(t) = dev.poll_timeout() { /* call dev.handle_timeout(t) when the clock reaches t */ }
//! // for each received frame: dev.handle_rx(now, &mut frame); completions: dev.poll_cq(cq, &mut wcs)
//! # let _ = (mr, qp);
//! ```

use crate::counters::Counters;
use crate::memory::Memory;
use crate::qp::attr::{self, validate, InvalidAttr, PathMtu, QpAttr, QpAttrMask};
use crate::qp::state::{mask_is_ok, transition};
use crate::qp::{Qp, QpCap, QpHandle, QpInfo, QpInitAttr, QpState, QpType, TxHeader};
use crate::rc::completer::{self, Response};
use crate::rc::requester::{ReqLimits, SendWqe};
use crate::rc::responder::{self, RespCtx};
use crate::rc::{Effects, Payload, TxPkt};
use crate::rng::SplitMix64;
use crate::slab::Slab;
use crate::status::{WcOpcode, WcStatus};
use crate::time::{Duration, Instant};
use crate::timer::Timer;
use crate::types::{Gid, Lkey, PKey, Qpn, Rkey};
use crate::verbs::cq::{CreateCqError, PollCqError};
use crate::verbs::mr::{lookup_lkey, DeregMrError, RegMrError};
use crate::verbs::pd::ProtectionDomain;
use crate::verbs::srq::{CreateSrqError, ModifySrqError};
use crate::verbs::*;
use crate::wire::{
    self, icrc, opcode::TransportClass, AethSyndrome, BthRepr, EthernetAddress, EthernetRepr, EtherType,
    HeaderTemplate, IpRepr, Opcode, RoceRepr, UdpRepr, ROCE_V2_PORT,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// Hash of the QPN → QP map, looked up for every received packet. Only this device inserts
/// keys (QPNs it hands out itself), so a peer cannot fill the table with colliding keys,
/// which is what SipHash defends against; one multiply (Fibonacci hashing) spreads them.
#[derive(Default)]
struct QpnHasher(u64);

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Static configuration of a device (one RoCE port).
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub mac: [u8; 6],
    /// GID table: IPv4-mapped (`::ffff:a.b.c.d`) or IPv6 addresses of the port.
    pub gids: Vec<Gid>,
    /// P_Key table; index 0 is the default 0xFFFF.
    pub pkeys: Vec<u16>,
    /// Seed of every random choice (MR key variants).
    pub seed: u64,
    /// Ethernet MTU of the port; bounds the path MTU (1500 -> IB MTU 1024, like rxe).
    pub eth_mtu: u32,
    /// First QPN handed out (rxe starts at 0x11); QP1 is created with `create_gsi_qp`.
    pub first_qpn: u32,
    /// The requester never runs further ahead of the oldest unacknowledged PSN.
    pub max_unacked_psns: u32,
    /// Delay before a responder acknowledges packets that did not ask for an ACK.
    pub ack_coalesce: Duration,
    /// IPv4 TTL / IPv6 hop limit when the AV gives 0.
    pub hop_limit: u8,
    /// The ACK-hold policy, the one switch of it: plain ACK/NAK replies produced by a round of
    /// received frames wait for the next round ([`Device::poll_transmit_after_rx`]) and leave
    /// in one burst with whatever the application posted meanwhile, just ahead of it. Off: an
    /// ACK leaves in the round whose frame asked for it. See [`Device::poll_transmit_data`].
    pub hold_acks: bool,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            mac: [0x02, 0, 0, 0, 0, 1],
            gids: Vec::new(),
            pkeys: vec![0xffff],
            seed: 0,
            eth_mtu: 1500,
            first_qpn: 0x11,
            max_unacked_psns: 128,
            ack_coalesce: Duration::from_micros(20),
            hop_limit: 64,
            hold_acks: false,
        }
    }
}

/// Asynchronous events (IBA 11.6.3), polled with `poll_event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A CQ overflowed (11.6.3.2: CQ error); the QPs using it moved to the error state.
    CqError(CqHandle),
    /// A QP entered the error state because of an error, not modify_qp.
    QpFatal(QpHandle, WcStatus),
    /// An SRQ dropped below its armed limit.
    SrqLimitReached(SrqHandle),
    /// A QP in SQD has no outstanding send work left (IBA 11.6.3.1, requested with
    /// `en_sqd_async_notify` on the RTS -> SQD transition).
    SqDrained(QpHandle),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeallocPdError {
    InvalidPd,
    Busy,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestroyCqError {
    InvalidCq,
    Busy,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestroySrqError {
    InvalidSrq,
    Busy,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateQpError {
    InvalidPd,
    InvalidCq,
    InvalidSrq,
    InvalidCap,
    /// QP1 already exists.
    QpnInUse,
    NoResources,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModifyQpError {
    InvalidQp,
    /// Not a legal transition from the current state (IBA 10.3.1).
    InvalidTransition,
    /// A required attribute is missing or an attribute is not allowed for this transition.
    InvalidAttrMask,
    /// `cur_qp_state` does not match the QP.
    CurStateMismatch,
    InvalidAttr(InvalidAttr),
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryQpError {
    InvalidQp,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestroyQpError {
    InvalidQp,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostSendError {
    InvalidQp,
    /// The QP is in RESET, INIT or RTR (IBA 10.8.2: C10-...).
    InvalidState,
    QueueFull,
    TooManySges,
    InlineTooLong,
    /// The opcode is not supported by the QP's service (RDMA on UD), or UD without AH.
    InvalidOpcode,
    /// UD message longer than the path MTU, or RC message longer than 2^31.
    MessageTooLong,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostRecvError {
    InvalidQp,
    InvalidSrq,
    InvalidState,
    QueueFull,
    TooManySges,
    /// The QP takes its receives from an SRQ.
    QpHasSrq,
    /// An SGE does not lie inside a local-writable MR of the PD.
    InvalidLkey,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyCqError {
    InvalidCq,
}

/// A software RoCEv2 device over application memory `M`.
pub struct Device<M: Memory> {
    cfg: DeviceConfig,
    mem: M,
    rng: SplitMix64,
    pds: Slab<ProtectionDomain>,
    mrs: Slab<MemoryRegion>,
    cqs: Slab<CompletionQueue>,
    srqs: Slab<SharedReceiveQueue>,
    qps: Slab<Qp>,
    qpn_map: HashMap<u32, u32, BuildHasherDefault<QpnHasher>>,
    next_qpn: u32,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    ready: VecDeque<u32>,
    events: VecDeque<AsyncEvent>,
    counters: Counters,
    ip_id: u16,
    port_mtu: PathMtu,
    fx: Effects,
    /// Set while `poll_transmit_data` runs: plain ACK/NAK replies wait.
    holding: bool,
}

/// Largest frame the device produces for its port MTU (buffers given to `poll_transmit`
/// must hold this many bytes).
pub fn max_frame_len(port_mtu: PathMtu) -> usize {
    // Eth 14 + IPv6 40 + UDP 8 + BTH 12 + largest ext headers (RETH 16 + ImmDt 4 / DETH 8 + ImmDt 4 / AETH+AtomicAck 12 / AtomicETH 28) + pad 3 + ICRC 4
    14 + 40 + 8 + 12 + 28 + port_mtu.bytes() as usize + 3 + 4
}

impl<M: Memory> Device<M> {
    pub fn new(cfg: DeviceConfig, mem: M) -> Self {
        let rng = SplitMix64::new(cfg.seed);
        let port_mtu = PathMtu::for_eth_mtu(cfg.eth_mtu);
        let next_qpn = cfg.first_qpn.max(2);
        Device {
            cfg,
            mem,
            rng,
            pds: Slab::default(),
            mrs: Slab::default(),
            cqs: Slab::default(),
            srqs: Slab::default(),
            qps: Slab::default(),
            qpn_map: HashMap::default(),
            next_qpn,
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            ip_id: 0,
            port_mtu,
            fx: Effects::default(),
            holding: false,
        }
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }
    pub fn memory(&self) -> &M {
        &self.mem
    }
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    pub fn port_mtu(&self) -> PathMtu {
        self.port_mtu
    }
    /// Buffer size `poll_transmit` needs.
    pub fn max_frame_len(&self) -> usize {
        max_frame_len(self.port_mtu)
    }
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    // ---------------------------------------------------------------- PD / MR

    pub fn alloc_pd(&mut self) -> PdHandle {
        PdHandle(self.pds.insert(ProtectionDomain::default()))
    }

    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), DeallocPdError> {
        let p = self.pds.get(pd.0).ok_or(DeallocPdError::InvalidPd)?;
        if p.users > 0 {
            return Err(DeallocPdError::Busy);
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    /// Register `len` bytes at `va`. The lkey and rkey are `index << 8 | variant` with a
    /// seeded 8-bit variant, as rxe does.
    pub fn reg_mr(&mut self, pd: PdHandle, va: u64, len: u64, access: AccessFlags) -> Result<MemoryRegion, RegMrError> {
        self.pds.get(pd.0).ok_or(RegMrError::InvalidPd)?;
        MemoryRegion::validate_access(access)?;
        va.checked_add(len).ok_or(RegMrError::InvalidRange)?;
        let idx = self.mrs.next_index();
        if idx >= 1 << 24 {
            return Err(RegMrError::NoResources);
        }
        let key = (idx << 8) | (self.rng.next_u32() & 0xff);
        let mr = MemoryRegion { pd, va, len, access, lkey: Lkey(key), rkey: Rkey(key), remote_valid: true };
        let got = self.mrs.insert(mr.clone());
        debug_assert_eq!(got, idx);
        if let Some(p) = self.pds.get_mut(pd.0) {
            p.users += 1;
        }
        Ok(mr)
    }

    pub fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), DeregMrError> {
        lookup_lkey(&self.mrs, lkey).ok_or(DeregMrError::InvalidMr)?;
        let mr = self.mrs.remove(lkey.0 >> 8).ok_or(DeregMrError::InvalidMr)?;
        if let Some(p) = self.pds.get_mut(mr.pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        Ok(())
    }

    pub fn query_mr(&self, lkey: Lkey) -> Option<&MemoryRegion> {
        lookup_lkey(&self.mrs, lkey)
    }

    // ---------------------------------------------------------------- CQ

    pub fn create_cq(&mut self, depth: usize) -> Result<CqHandle, CreateCqError> {
        Ok(CqHandle(self.cqs.insert(CompletionQueue::new(depth)?)))
    }

    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), DestroyCqError> {
        let c = self.cqs.get(cq.0).ok_or(DestroyCqError::InvalidCq)?;
        if c.users > 0 {
            return Err(DestroyCqError::Busy);
        }
        self.cqs.remove(cq.0);
        Ok(())
    }

    /// Pop up to `out.len()` completions into `out`; returns how many.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize, PollCqError> {
        let c = self.cqs.get_mut(cq.0).ok_or(PollCqError::InvalidCq)?;
        let mut n = 0;
        while n < out.len() {
            match c.pop() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        if n == 0 && c.is_overrun() {
            return Err(PollCqError::Overrun);
        }
        Ok(n)
    }

    /// Pop one completion.
    pub fn poll_cq_one(&mut self, cq: CqHandle) -> Result<Option<WorkCompletion>, PollCqError> {
        let c = self.cqs.get_mut(cq.0).ok_or(PollCqError::InvalidCq)?;
        match c.pop() {
            Some(wc) => Ok(Some(wc)),
            None if c.is_overrun() => Err(PollCqError::Overrun),
            None => Ok(None),
        }
    }

    /// Arm a completion event (ibv_req_notify_cq); `take_cq_event` reports it.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), NotifyCqError> {
        self.cqs.get_mut(cq.0).ok_or(NotifyCqError::InvalidCq)?.req_notify(solicited_only);
        Ok(())
    }

    /// Whether an armed completion event fired since the last call.
    pub fn take_cq_event(&mut self, cq: CqHandle) -> bool {
        self.cqs.get_mut(cq.0).map(|c| core::mem::take(&mut c.event_pending)).unwrap_or(false)
    }

    pub fn cq(&self, cq: CqHandle) -> Option<&CompletionQueue> {
        self.cqs.get(cq.0)
    }

    // ---------------------------------------------------------------- SRQ

    pub fn create_srq(&mut self, pd: PdHandle, max_wr: usize, max_sge: usize) -> Result<SrqHandle, CreateSrqError> {
        self.pds.get_mut(pd.0).ok_or(CreateSrqError::InvalidPd)?;
        let s = SharedReceiveQueue::new(pd, max_wr, max_sge)?;
        if let Some(p) = self.pds.get_mut(pd.0) {
            p.users += 1;
        }
        Ok(SrqHandle(self.srqs.insert(s)))
    }

    /// Arm the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT); 0 disarms.
    pub fn modify_srq(&mut self, srq: SrqHandle, limit: usize) -> Result<(), ModifySrqError> {
        self.srqs.get_mut(srq.0).ok_or(ModifySrqError::InvalidSrq)?.set_limit(limit)
    }

    pub fn srq(&self, srq: SrqHandle) -> Option<&SharedReceiveQueue> {
        self.srqs.get(srq.0)
    }

    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), DestroySrqError> {
        let s = self.srqs.get(srq.0).ok_or(DestroySrqError::InvalidSrq)?;
        if s.users > 0 {
            return Err(DestroySrqError::Busy);
        }
        let s = self.srqs.remove(srq.0).ok_or(DestroySrqError::InvalidSrq)?;
        if let Some(p) = self.pds.get_mut(s.pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        Ok(())
    }

    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), PostRecvError> {
        self.post_srq_recv_ref(srq, &wr)
    }

    /// [`post_srq_recv`](Self::post_srq_recv) without giving up the work request: its
    /// scatter list is copied, so one `RecvWr` can be reused and posting allocates nothing.
    pub fn post_srq_recv_ref(&mut self, srq: SrqHandle, wr: &RecvWr) -> Result<(), PostRecvError> {
        let s = self.srqs.get(srq.0).ok_or(PostRecvError::InvalidSrq)?;
        if s.queue.len() >= s.max_wr {
            return Err(PostRecvError::QueueFull);
        }
        if wr.sg_list.len() > s.max_sge {
            return Err(PostRecvError::TooManySges);
        }
        let len = self.check_recv_sges(s.pd, wr)?;
        let wqe = RecvWqe { wr_id: wr.wr_id, sges: SgeList::from_slice(&wr.sg_list), len };
        self.srqs.get_mut(srq.0).ok_or(PostRecvError::InvalidSrq)?.queue.push_back(wqe);
        Ok(())
    }

    fn check_recv_sges(&self, pd: PdHandle, wr: &RecvWr) -> Result<u64, PostRecvError> {
        let mut len = 0u64;
        for s in &wr.sg_list {
            if s.length > 0 {
                let mr = lookup_lkey(&self.mrs, s.lkey).ok_or(PostRecvError::InvalidLkey)?;
                mr.check(pd, s.addr, s.length as u64, AccessFlags::LOCAL_WRITE).map_err(|_| PostRecvError::InvalidLkey)?;
            }
            len += s.length as u64;
        }
        Ok(len)
    }

    // ---------------------------------------------------------------- QP

    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<QpHandle, CreateQpError> {
        let mut qpn = self.next_qpn;
        let mut tries = 0;
        while self.qpn_map.contains_key(&qpn) || qpn < 2 {
            qpn = (qpn + 1) & 0xff_ffff;
            tries += 1;
            if tries > 1 << 24 {
                return Err(CreateQpError::NoResources);
            }
        }
        self.next_qpn = (qpn + 1) & 0xff_ffff;
        self.create_qp_with_qpn(init, Qpn::new(qpn))
    }

    /// Create QP1, the GSI QP that carries CM MADs (a UD QP, IBA 13.4.6).
    pub fn create_gsi_qp(&mut self, mut init: QpInitAttr) -> Result<QpHandle, CreateQpError> {
        if self.qpn_map.contains_key(&1) {
            return Err(CreateQpError::QpnInUse);
        }
        init.qp_type = QpType::Ud;
        self.create_qp_with_qpn(init, Qpn::GSI)
    }

    fn create_qp_with_qpn(&mut self, init: QpInitAttr, qpn: Qpn) -> Result<QpHandle, CreateQpError> {
        self.pds.get(init.pd.0).ok_or(CreateQpError::InvalidPd)?;
        self.cqs.get(init.send_cq.0).ok_or(CreateQpError::InvalidCq)?;
        self.cqs.get(init.recv_cq.0).ok_or(CreateQpError::InvalidCq)?;
        if let Some(s) = init.srq {
            let srq = self.srqs.get(s.0).ok_or(CreateQpError::InvalidSrq)?;
            if srq.pd != init.pd {
                return Err(CreateQpError::InvalidSrq);
            }
        }
        let c = init.cap;
        if c.max_send_wr == 0 || c.max_send_wr > 1 << 16 || c.max_recv_wr > 1 << 16 || c.max_send_sge > 32 || c.max_recv_sge > 32 {
            return Err(CreateQpError::InvalidCap);
        }
        let idx = self.qps.insert(Qp::new(qpn, init));
        self.qpn_map.insert(qpn.value(), idx);
        if let Some(p) = self.pds.get_mut(init.pd.0) {
            p.users += 1;
        }
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users += 1;
        }
        Ok(QpHandle(idx))
    }

    pub fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), DestroyQpError> {
        let q = self.qps.remove(qp.0).ok_or(DestroyQpError::InvalidQp)?;
        self.qpn_map.remove(&q.qpn.value());
        if let Some(p) = self.pds.get_mut(q.init.pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        for cq in [q.init.send_cq, q.init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(cq.0) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = q.init.srq.and_then(|s| self.srqs.get_mut(s.0)) {
            s.users = s.users.saturating_sub(1);
        }
        self.ready.retain(|&i| i != qp.0);
        Ok(())
    }

    pub fn query_qp(&self, qp: QpHandle) -> Result<QpInfo, QueryQpError> {
        let q = self.qps.get(qp.0).ok_or(QueryQpError::InvalidQp)?;
        let mut attr = q.attr;
        attr.qp_state = q.state;
        attr.cur_qp_state = q.state;
        Ok(QpInfo { qp_num: q.qpn, qp_type: q.init.qp_type, attr, cap: q.init.cap, udp_sport: q.udp_sport })
    }

    pub fn qp_state(&self, qp: QpHandle) -> Option<QpState> {
        self.qps.get(qp.0).map(|q| q.state)
    }

    /// The QP with number `qpn`.
    pub fn qp_by_qpn(&self, qpn: Qpn) -> Option<QpHandle> {
        self.qpn_map.get(&qpn.value()).map(|&i| QpHandle(i))
    }

    /// ibv_modify_qp: validate the transition and attributes against the IBA table, then
    /// apply them.
    pub fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<(), ModifyQpError> {
        let q = self.qps.get(qp.0).ok_or(ModifyQpError::InvalidQp)?;
        let cur = q.state;
        if mask.contains(QpAttrMask::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(ModifyQpError::CurStateMismatch);
        }
        let next = if mask.contains(QpAttrMask::STATE) { attr.qp_state } else { cur };
        let ty = q.init.qp_type;
        if transition(ty, cur, next).is_none() {
            return Err(ModifyQpError::InvalidTransition);
        }
        if !mask_is_ok(ty, cur, next, mask) {
            return Err(ModifyQpError::InvalidAttrMask);
        }
        validate(attr, mask).map_err(ModifyQpError::InvalidAttr)?;
        if mask.contains(QpAttrMask::PKEY_INDEX) && attr.pkey_index as usize >= self.cfg.pkeys.len() {
            return Err(ModifyQpError::InvalidAttr(InvalidAttr::PkeyIndex));
        }
        if mask.contains(QpAttrMask::AV) {
            let sgid = self.cfg.gids.get(attr.ah_attr.sgid_index as usize).ok_or(ModifyQpError::InvalidAttr(InvalidAttr::SgidIndex))?;
            if sgid.is_ipv4_mapped() != attr.ah_attr.dgid.is_ipv4_mapped() {
                return Err(ModifyQpError::InvalidAttr(InvalidAttr::SgidIndex));
            }
        }
        if mask.contains(QpAttrMask::PATH_MTU) && attr.path_mtu > self.port_mtu {
            return Err(ModifyQpError::InvalidAttr(InvalidAttr::PathMtu));
        }
        let pkeys = &self.cfg.pkeys;
        let q = self.qps.get_mut(qp.0).ok_or(ModifyQpError::InvalidQp)?;
        use QpAttrMask as A;
        if mask.contains(A::ACCESS_FLAGS) {
            q.attr.qp_access_flags = attr.qp_access_flags;
        }
        if mask.contains(A::PKEY_INDEX) {
            q.attr.pkey_index = attr.pkey_index;
            q.pkey = PKey(pkeys[attr.pkey_index as usize]);
        }
        if mask.contains(A::QKEY) {
            q.attr.qkey = attr.qkey;
        }
        if mask.contains(A::DEST_QPN) {
            q.attr.dest_qp_num = attr.dest_qp_num;
        }
        if mask.contains(A::AV) {
            q.attr.ah_attr = attr.ah_attr;
            if ty == QpType::Rc {
                q.udp_sport = attr::rc_udp_sport(attr.ah_attr.flow_label, q.qpn, q.attr.dest_qp_num);
            }
        }
        if mask.contains(A::PATH_MTU) {
            q.attr.path_mtu = attr.path_mtu;
        }
        if mask.contains(A::TIMEOUT) {
            q.attr.timeout = attr.timeout;
        }
        if mask.contains(A::RETRY_CNT) {
            q.attr.retry_cnt = attr.retry_cnt;
            q.comp.retry_left = attr.retry_cnt;
        }
        if mask.contains(A::RNR_RETRY) {
            q.attr.rnr_retry = attr.rnr_retry;
            q.comp.rnr_left = attr.rnr_retry;
        }
        if mask.contains(A::RQ_PSN) {
            q.attr.rq_psn = attr.rq_psn;
            q.resp.epsn = attr.rq_psn;
        }
        if mask.contains(A::SQ_PSN) {
            q.attr.sq_psn = attr.sq_psn;
            q.req.set_psn(attr.sq_psn);
            q.comp.psn = attr.sq_psn;
        }
        if mask.contains(A::MAX_QP_RD_ATOMIC) {
            q.attr.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(A::MAX_DEST_RD_ATOMIC) {
            q.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask.contains(A::MIN_RNR_TIMER) {
            q.attr.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask.contains(A::EN_SQD_ASYNC_NOTIFY) {
            q.attr.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        if ty == QpType::Ud && q.init.qp_type == QpType::Ud && q.attr.path_mtu > self.port_mtu {
            q.attr.path_mtu = self.port_mtu;
        }
        match next {
            QpState::Reset => {
                q.reset();
            }
            QpState::Err if cur != QpState::Err => {
                self.enter_error(qp.0, None);
            }
            s => {
                q.state = s;
                q.sqd_notify = s == QpState::Sqd && cur != QpState::Sqd && q.attr.en_sqd_async_notify;
                if ty == QpType::Ud && s == QpState::Init {
                    // UD packets never exceed the port MTU.
                    q.attr.path_mtu = self.port_mtu;
                }
            }
        }
        self.check_sq_drained(qp.0);
        self.mark_ready(qp.0);
        Ok(())
    }

    // ---------------------------------------------------------------- post

    pub fn post_send(&mut self, qp: QpHandle, wr: SendWr) -> Result<(), PostSendError> {
        self.post_send_ref(qp, &wr)
    }

    /// [`post_send`](Self::post_send) without giving up the work request: its gather list
    /// is copied into the send queue (inline up to 4 SGEs), so a caller can keep one
    /// `SendWr` per QP, change `wr_id`/addresses and post it again without allocating.
    pub fn post_send_ref(&mut self, qp: QpHandle, wr: &SendWr) -> Result<(), PostSendError> {
        let q = self.qps.get(qp.0).ok_or(PostSendError::InvalidQp)?;
        if !q.state.can_post_send() {
            return Err(PostSendError::InvalidState);
        }
        if q.req.sq.len() >= q.init.cap.max_send_wr as usize {
            return Err(PostSendError::QueueFull);
        }
        if wr.sg_list.len() > q.init.cap.max_send_sge as usize {
            return Err(PostSendError::TooManySges);
        }
        let ty = q.init.qp_type;
        let len = wr.total_len();
        match ty {
            QpType::Ud => {
                if !matches!(wr.opcode, SendOpcode::Send | SendOpcode::SendImm) || wr.ud.is_none() {
                    return Err(PostSendError::InvalidOpcode);
                }
                if len > q.attr.path_mtu.bytes() as u64 {
                    return Err(PostSendError::MessageTooLong);
                }
            }
            QpType::Rc => {
                if len > 1 << 31 {
                    return Err(PostSendError::MessageTooLong);
                }
                if wr.opcode.is_atomic() && (wr.sg_list.len() != 1 || wr.sg_list[0].length != 8) {
                    return Err(PostSendError::InvalidOpcode);
                }
            }
        }
        let inline_flag = wr.flags.contains(SendFlags::INLINE);
        if inline_flag && (len > q.init.cap.max_inline_data as u64 || wr.opcode.is_rd_atomic()) {
            return Err(PostSendError::InlineTooLong);
        }
        // Local key checks (10.6.3.3 / C10-...): a failure completes the WR with LocProtErr.
        let mut local_error = None;
        let mut inline = None;
        if inline_flag {
            let mut v = vec![0u8; len as usize];
            let mut off = 0;
            for s in &wr.sg_list {
                let n = s.length as usize;
                if self.mem.read(s.addr, &mut v[off..off + n]).is_err() {
                    local_error = Some(WcStatus::LocProtErr);
                }
                off += n;
            }
            inline = Some(v);
        } else {
            let need = if wr.opcode.is_rd_atomic() { AccessFlags::LOCAL_WRITE } else { AccessFlags::NONE };
            for s in &wr.sg_list {
                if s.length == 0 {
                    continue;
                }
                let ok = lookup_lkey(&self.mrs, s.lkey).is_some_and(|mr| mr.check(q.init.pd, s.addr, s.length as u64, need).is_ok());
                if !ok {
                    local_error = Some(WcStatus::LocProtErr);
                }
            }
        }
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        let state = q.state;
        let q = self.qps.get_mut(qp.0).ok_or(PostSendError::InvalidQp)?;
        q.req.sq.push_back(SendWqe::new(wr, inline, len, local_error, signaled));
        if state == QpState::Err {
            // Posted to a QP in the error state: flushed at once (IBA 10.8.3.1).
            self.enter_error(qp.0, None);
        } else if state == QpState::Sqe {
            self.enter_sq_error(qp.0);
        } else {
            self.check_local_errors(qp.0);
        }
        self.mark_ready(qp.0);
        Ok(())
    }

    pub fn post_recv(&mut self, qp: QpHandle, wr: RecvWr) -> Result<(), PostRecvError> {
        self.post_recv_ref(qp, &wr)
    }

    /// [`post_recv`](Self::post_recv) without giving up the work request (its scatter list
    /// is copied): one reused `RecvWr` makes posting allocation-free.
    pub fn post_recv_ref(&mut self, qp: QpHandle, wr: &RecvWr) -> Result<(), PostRecvError> {
        let q = self.qps.get(qp.0).ok_or(PostRecvError::InvalidQp)?;
        if q.init.srq.is_some() {
            return Err(PostRecvError::QpHasSrq);
        }
        if !q.state.can_post_recv() {
            return Err(PostRecvError::InvalidState);
        }
        if q.rq.len() >= q.init.cap.max_recv_wr as usize {
            return Err(PostRecvError::QueueFull);
        }
        if wr.sg_list.len() > q.init.cap.max_recv_sge as usize {
            return Err(PostRecvError::TooManySges);
        }
        let len = self.check_recv_sges(q.init.pd, wr)?;
        let state = q.state;
        let q = self.qps.get_mut(qp.0).ok_or(PostRecvError::InvalidQp)?;
        q.rq.push_back(RecvWqe { wr_id: wr.wr_id, sges: SgeList::from_slice(&wr.sg_list), len });
        if state == QpState::Err {
            self.enter_error(qp.0, None);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- errors, completions

    /// A WQE that failed its local checks completes in error once it is the oldest.
    fn check_local_errors(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        let Some(st) = q.req.sq.front().and_then(|w| w.local_error) else { return };
        let mut fx = core::mem::take(&mut self.fx);
        completer::complete_front(q, st, &mut fx);
        fx.qp_error = true;
        fx.error_status = Some(st);
        self.apply(idx, &mut fx);
        self.fx = fx;
    }

    /// Move a QP to the error state: every outstanding WQE completes with WrFlushErr
    /// (IBA 10.3.1.8, 11.4.2.1).
    fn enter_error(&mut self, idx: u32, cause: Option<WcStatus>) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        let first = q.state != QpState::Err;
        q.state = QpState::Err;
        q.timers.stop_all();
        q.req.rnr_wait = false;
        let mut wcs = Vec::new();
        while let Some(w) = q.req.sq.pop_front() {
            wcs.push((q.init.send_cq, WorkCompletion {
                wr_id: w.wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: w.wr.opcode.wc_opcode(),
                byte_len: 0,
                imm_data: 0,
                qp_num: q.qpn,
                src_qp: q.attr.dest_qp_num,
                wc_flags: WcFlags::default(),
                pkey_index: q.attr.pkey_index,
            }));
        }
        q.req.next = 0;
        q.req.sent_pkts = 0;
        q.req.rd_atomic_inflight = 0;
        let rq = q.resp.recv.take().map(|r| r.wqe).into_iter().chain(q.rq.drain(..));
        for r in rq.collect::<Vec<_>>() {
            wcs.push((q.init.recv_cq, WorkCompletion {
                wr_id: r.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm_data: 0,
                qp_num: q.qpn,
                src_qp: q.attr.dest_qp_num,
                wc_flags: WcFlags::default(),
                pkey_index: q.attr.pkey_index,
            }));
        }
        q.resp.queue.retain(|r| matches!(r, responder::Reply::Ack { .. }));
        if first {
            if let Some(st) = cause {
                self.events.push_back(AsyncEvent::QpFatal(QpHandle(idx), st));
            }
        }
        for (cq, wc) in wcs {
            self.push_wc(cq, wc, false);
        }
    }

    /// UD send queue error (IBA 10.3.1.6): the QP goes to SQE, outstanding sends are
    /// flushed, receives keep working; modify_qp(SQE -> RTS) resumes sending.
    fn enter_sq_error(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        if q.state == QpState::Err {
            return;
        }
        q.state = QpState::Sqe;
        let mut wcs = Vec::new();
        while let Some(w) = q.req.sq.pop_front() {
            let mut wc = WorkCompletion {
                wr_id: w.wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: w.wr.opcode.wc_opcode(),
                byte_len: 0,
                imm_data: 0,
                qp_num: q.qpn,
                src_qp: q.attr.dest_qp_num,
                wc_flags: WcFlags::default(),
                pkey_index: q.attr.pkey_index,
            };
            wc.src_qp = q.qpn;
            wcs.push((q.init.send_cq, wc));
        }
        q.req.next = 0;
        for (cq, wc) in wcs {
            self.push_wc(cq, wc, false);
        }
    }

    fn push_wc(&mut self, cq: CqHandle, wc: WorkCompletion, solicited: bool) {
        let Some(c) = self.cqs.get_mut(cq.0) else { return };
        let was_overrun = c.is_overrun();
        if c.push(wc, solicited).is_err() && !was_overrun {
            // CQ overrun (11.6.2): async CQ error; the QPs using it go to the error state.
            self.counters.cq_overrun += 1;
            self.events.push_back(AsyncEvent::CqError(cq));
            let victims: Vec<u32> = self
                .qps
                .iter()
                .filter(|(_, q)| (q.init.send_cq == cq || q.init.recv_cq == cq) && q.state != QpState::Err)
                .map(|(i, _)| i)
                .collect();
            for i in victims {
                self.enter_error(i, Some(WcStatus::FatalErr));
            }
        }
    }

    /// Apply the effects a QP handler produced — the one place where handlers' outcomes
    /// reach CQs, events and the QP state.
    fn apply(&mut self, idx: u32, fx: &mut Effects) {
        for (cq, wc, sol) in fx.wcs.drain(..) {
            self.push_wc(cq, wc, sol);
        }
        if let Some(s) = fx.srq_limit.take() {
            self.events.push_back(AsyncEvent::SrqLimitReached(s));
        }
        if core::mem::take(&mut fx.qp_error) {
            let st = fx.error_status.take().unwrap_or(WcStatus::GeneralErr);
            let ud = self.qps.get(idx).is_some_and(|q| q.init.qp_type == QpType::Ud);
            if ud {
                self.enter_sq_error(idx);
            } else {
                self.enter_error(idx, Some(st));
            }
        }
        fx.error_status = None;
        self.check_sq_drained(idx);
        self.schedule(idx);
        self.mark_ready(idx);
    }

    /// Report SQ drained once: in SQD, nothing in flight and no started WQE left.
    fn check_sq_drained(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        if q.state != QpState::Sqd || !q.sqd_notify {
            return;
        }
        let busy = q.req.has_unacked(q.comp.psn) || q.req.sq.iter().any(|w| w.started);
        if !busy {
            q.sqd_notify = false;
            self.events.push_back(AsyncEvent::SqDrained(QpHandle(idx)));
        }
    }

    // ---------------------------------------------------------------- timers

    fn schedule(&mut self, idx: u32) {
        let Some(q) = self.qps.get_mut(idx) else { return };
        if let Some(n) = q.timers.next_timeout() {
            #[allow(clippy::unnecessary_map_or)] // is_none_or needs Rust 1.82; MSRV is 1.75
            if q.scheduled.map_or(true, |s| n < s) {
                q.scheduled = Some(n);
                self.timers.push(Reverse((n, idx)));
            }
        }
    }

    /// The next instant `handle_timeout` should be called at.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((d, idx))) = self.timers.peek() {
            match self.qps.get(idx) {
                Some(q) if q.scheduled == Some(d) => return Some(d),
                _ => {
                    self.timers.pop();
                }
            }
        }
        None
    }

    /// Fire every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((d, idx))) = self.timers.peek() {
            if d > now {
                break;
            }
            self.timers.pop();
            let Some(q) = self.qps.get_mut(idx) else { continue };
            if q.scheduled != Some(d) {
                continue;
            }
            q.scheduled = None;
            let mut fx = core::mem::take(&mut self.fx);
            let mut fired = [None; 3];
            for (slot, t) in fired.iter_mut().zip(q.timers.expire(now)) {
                *slot = Some(t);
            }
            for t in fired.into_iter().flatten() {
                match t {
                    Timer::Retransmit => completer::on_retransmit_timeout(q, now, &mut self.counters, &mut fx),
                    Timer::RnrRetry => completer::on_rnr_timeout(q, now),
                    Timer::AckCoalesce => responder::on_ack_timeout(q),
                }
            }
            self.apply(idx, &mut fx);
            self.fx = fx;
        }
    }

    // ---------------------------------------------------------------- receive

    /// Feed one received Ethernet frame in. The frame is scratch for the ICRC check
    /// ([`RoceRepr::parse_in_place`]) and is unchanged on return.
    pub fn handle_rx(&mut self, now: Instant, frame: &mut [u8]) {
        let (repr, range) = match RoceRepr::parse_in_place(frame) {
            Ok(x) => x,
            Err(wire::Error) => {
                if icrc_failed(frame) {
                    self.counters.rcvd_icrc_err += 1;
                } else {
                    self.counters.rcvd_malformed += 1;
                }
                return;
            }
        };
        let payload = &frame[range];
        if repr.eth.dst_addr != EthernetAddress(self.cfg.mac) || !self.cfg.gids.contains(&repr.ip.dst_gid()) {
            self.counters.rcvd_not_for_us += 1;
            return;
        }
        let Some(&idx) = self.qpn_map.get(&repr.bth.dest_qp.value()) else {
            self.counters.rcvd_bad_qpn += 1;
            return;
        };
        let Some(q) = self.qps.get_mut(idx) else {
            self.counters.rcvd_bad_qpn += 1;
            return;
        };
        if !q.state.receives() {
            self.counters.rcvd_bad_qpn += 1;
            return;
        }
        // 9.6.1.1 (C9-42..): P_Key check.
        if !repr.bth.pkey.matches(q.pkey) {
            self.counters.pkey_violation += 1;
            return;
        }
        let info = repr.bth.opcode.info();
        let class_ok = matches!(
            (q.init.qp_type, info.class),
            (QpType::Rc, TransportClass::Rc) | (QpType::Ud, TransportClass::Ud)
        );
        if !class_ok {
            self.counters.rcvd_bad_opcode += 1;
            return;
        }
        let mut fx = core::mem::take(&mut self.fx);
        match q.init.qp_type {
            QpType::Rc => {
                // rxe check_addr: an RC QP only accepts packets from its peer.
                if repr.ip.src_gid() != q.attr.ah_attr.dgid {
                    self.counters.rcvd_not_for_us += 1;
                    self.fx = fx;
                    return;
                }
                self.counters.rcvd_pkts += 1;
                if info.is_response() {
                    if matches!(q.state, QpState::Rts | QpState::Sqd) {
                        if let Some(r) = response_of(&repr, payload) {
                            completer::handle_response(q, r, &mut self.mem, now, &mut self.counters, &mut fx);
                        }
                    }
                } else {
                    let req = responder::Request {
                        opcode: repr.bth.opcode,
                        psn: repr.bth.psn,
                        ack_req: repr.bth.ack_req,
                        solicited: repr.bth.solicited,
                        reth: repr.ext.reth,
                        atomic: repr.ext.atomic,
                        immdt: repr.ext.immdt,
                        ieth: repr.ext.ieth,
                        payload,
                    };
                    let mut ctx = RespCtx {
                        mem: &mut self.mem,
                        mrs: &mut self.mrs,
                        srqs: &mut self.srqs,
                        counters: &mut self.counters,
                        pd: q.init.pd,
                        ack_coalesce: self.cfg.ack_coalesce,
                    };
                    responder::handle_request(q, &req, &mut ctx, now, &mut fx);
                }
            }
            QpType::Ud => {
                self.counters.rcvd_pkts += 1;
                if let Some(deth) = repr.ext.deth {
                    let ip_hdr = &frame[wire::eth::HEADER_LEN..wire::eth::HEADER_LEN + repr.ip.header_len()];
                    crate::ud::receive(
                        q,
                        deth,
                        repr.ext.immdt,
                        repr.bth.solicited,
                        ip_hdr,
                        payload,
                        &mut self.mem,
                        &mut self.srqs,
                        &mut self.counters,
                        &mut fx,
                    );
                }
            }
        }
        self.apply(idx, &mut fx);
        self.check_local_errors(idx);
        self.fx = fx;
    }

    // ---------------------------------------------------------------- transmit

    fn has_tx_work(&self, idx: u32) -> bool {
        let Some(q) = self.qps.get(idx) else { return false };
        if !q.resp.queue.is_empty() {
            return true;
        }
        match (q.init.qp_type, q.state) {
            (QpType::Ud, QpState::Rts) => !q.req.sq.is_empty(),
            (QpType::Rc, _) => rc_request_ready(q, &self.limits(q)),
            _ => false,
        }
    }

    fn limits(&self, q: &Qp) -> ReqLimits {
        ReqLimits {
            mtu: q.mtu(),
            max_rd_atomic: q.attr.max_rd_atomic as u32,
            max_unacked_psns: self.cfg.max_unacked_psns,
            dest_qp: q.attr.dest_qp_num,
            comp_psn: q.comp.psn,
        }
    }

    fn mark_ready(&mut self, idx: u32) {
        if self.has_tx_work(idx) {
            if let Some(q) = self.qps.get_mut(idx) {
                if !q.in_ready {
                    q.in_ready = true;
                    self.ready.push_back(idx);
                }
            }
        }
    }

    /// Whether `poll_transmit` may have a frame: some QP is marked ready (false means it
    /// certainly has none). Lets a poll loop skip buffer setup when idle.
    #[inline]
    pub fn tx_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Write the next frame to send into `buf` (at least `max_frame_len()` bytes) and
    /// return its length. QPs with work take turns, one frame each.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < self.max_frame_len() {
            return None;
        }
        for _ in 0..self.ready.len() {
            let idx = self.ready.pop_front()?;
            if let Some(q) = self.qps.get_mut(idx) {
                q.in_ready = false;
            } else {
                continue;
            }
            let sent = self.transmit_qp(idx, now, buf);
            self.mark_ready(idx);
            if let Some(n) = sent {
                self.counters.sent_pkts += 1;
                return Some(n);
            }
        }
        None
    }

    /// [`poll_transmit`](Self::poll_transmit) without the plain ACK/NAK replies (unless a
    /// READ or atomic response waits behind them, or the QP has a request to send: then
    /// all go, in order): they stay queued (and keep merging: one ACK covers what arrives
    /// meanwhile) for the next `poll_transmit`; READ and atomic responses, requests and
    /// retransmissions go.
    ///
    /// For a poll loop that wants acknowledgements off the critical path: a request that
    /// asked for an ACK completes a receive right away; sending the ACK in that round
    /// would cost a TX burst of its own before the application's reply (a ping-pong's
    /// second half). With `poll_transmit_data` right after RX and `poll_transmit` at the
    /// start of the next round (after whatever the application posted), the ACK and the
    /// reply leave in one burst, the ACK first: the peer completes its send before it
    /// receives the answer, as with any NIC. An ACK waits for at most one round.
    pub fn poll_transmit_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.holding = true;
        let r = self.poll_transmit(now, buf);
        self.holding = false;
        r
    }

    /// What a poll loop sends right after a round of received frames: with the ACK-hold
    /// policy ([`DeviceConfig::hold_acks`]) [`poll_transmit_data`](Self::poll_transmit_data),
    /// else [`poll_transmit`](Self::poll_transmit). The next round's plain `poll_transmit`
    /// (or a flush before the caller stops polling) sends the held ACKs.
    #[inline]
    pub fn poll_transmit_after_rx(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.cfg.hold_acks {
            self.poll_transmit_data(now, buf)
        } else {
            self.poll_transmit(now, buf)
        }
    }

    /// Turns the ACK-hold policy on or off ([`DeviceConfig::hold_acks`]).
    pub fn set_hold_acks(&mut self, on: bool) {
        self.cfg.hold_acks = on;
    }

    /// Whether ACKs wait for the next round ([`DeviceConfig::hold_acks`]).
    pub fn hold_acks(&self) -> bool {
        self.cfg.hold_acks
    }

    fn transmit_qp(&mut self, idx: u32, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let lim = self.limits(self.qps.get(idx)?);
        let q = self.qps.get_mut(idx)?;
        match q.init.qp_type {
            QpType::Rc => {
                let err = q.state == QpState::Err;
                // A held ACK never falls behind a request of its own QP: the peer would
                // see our new message before the ACK for its own, i.e. complete the
                // receive before the send that caused it. No NIC does that, and ofi_rxm's
                // atomics free the request's buffer on the response and reuse it before
                // the late send completion comes (fabtests' ubertest caught it).
                let held = self.holding && (err || (responder::only_acks(q) && !rc_request_ready(q, &lim)));
                let reply = if held { None } else { responder::next_reply(q, err) };
                let pkt = match reply {
                    Some(p) => Some(p),
                    None if matches!(q.state, QpState::Rts | QpState::Sqd) => {
                        if q.state == QpState::Sqd && !q.req.sq.get(q.req.next).is_some_and(|w| w.started) {
                            None
                        } else {
                            let resend = q.req.psn.is_before(q.req.sent_high);
                            let p = q.req.next_packet(&lim);
                            if p.is_some() {
                                completer::arm_retransmit(q, now);
                                if resend {
                                    self.counters.retransmitted_pkts += 1;
                                }
                            }
                            p
                        }
                    }
                    None => None,
                }?;
                let av = q.attr.ah_attr;
                let (sport, pkey) = (q.udp_sport, q.pkey);
                let n = self.emit(idx, &pkt, &av, sport, pkey, buf);
                self.schedule(idx);
                n
            }
            QpType::Ud => {
                if q.state != QpState::Rts {
                    return None;
                }
                let (pkt, dest) = crate::ud::next_packet(q)?;
                let (sport, pkey) = (q.udp_sport, q.pkey);
                let n = self.emit(idx, &pkt, &dest.av, sport, pkey, buf);
                // UD sends complete when they leave (no acknowledgement, IBA 9.8).
                let q = self.qps.get_mut(idx)?;
                let mut fx = core::mem::take(&mut self.fx);
                completer::complete_front(q, if n.is_some() { WcStatus::Success } else { WcStatus::LocQpOpErr }, &mut fx);
                self.apply(idx, &mut fx);
                self.fx = fx;
                self.check_local_errors(idx);
                n
            }
        }
    }

    fn emit(&mut self, idx: u32, pkt: &TxPkt, av: &AddressVector, sport: u16, pkey: PKey, buf: &mut [u8]) -> Option<usize> {
        self.header_template(idx, av, sport)?;
        let tpl = &self.qps.get(idx)?.tx_hdr.as_ref()?.tpl;
        let ident = self.ip_id;
        if tpl.is_ipv4() {
            self.ip_id = self.ip_id.wrapping_add(1);
        }
        let bth = BthRepr {
            opcode: pkt.opcode,
            solicited: pkt.solicited,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qp: pkt.dest_qp,
            ack_req: pkt.ack_req,
            psn: pkt.psn,
        };
        let plen = match pkt.payload {
            Payload::None => 0,
            Payload::SendWqe { len, .. } | Payload::Memory { len, .. } => len as usize,
        };
        let transport_len = pkt.opcode.info().header_len() + plen + wire::pad_len(plen) + wire::icrc::ICRC_LEN;
        if tpl.len() + transport_len > buf.len() {
            return None;
        }
        let tp = tpl.emit(ident, transport_len, buf);
        let h = tp + wire::emit_transport(&bth, &pkt.ext, plen, &mut buf[tp..]);
        let out = &mut buf[h..h + plen];
        match pkt.payload {
            Payload::None => {}
            Payload::Memory { va, .. } => {
                if self.mem.read(va, out).is_err() {
                    out.fill(0);
                }
            }
            Payload::SendWqe { wqe, offset, .. } => {
                let q = self.qps.get(idx)?;
                let w = q.req.sq.get(wqe)?;
                match &w.inline {
                    Some(data) => {
                        let o = offset as usize;
                        out.copy_from_slice(&data[o..o + plen]);
                    }
                    None => {
                        if gather(&self.mem, w.sges.as_slice(), offset, out).is_err() {
                            out.fill(0);
                        }
                    }
                }
            }
        }
        Some(wire::finish_frame(buf, plen))
    }

    /// Make sure the QP's header template is the one for `av` and `sport`: made (from the
    /// GID table) when the QP has none or one for another path. `None` when the source GID
    /// index is out of the table or the two GIDs are not of one IP version.
    fn header_template(&mut self, idx: u32, av: &AddressVector, sport: u16) -> Option<()> {
        let q = self.qps.get_mut(idx)?;
        if !q.tx_hdr.as_ref().is_some_and(|h| h.av == *av && h.sport == sport) {
            let sgid = *self.cfg.gids.get(av.sgid_index as usize)?;
            let hop = if av.hop_limit == 0 { self.cfg.hop_limit } else { av.hop_limit };
            let ip = IpRepr::from_gids(sgid, av.dgid, av.traffic_class, hop, av.flow_label).ok()?;
            let eth = EthernetRepr { src_addr: EthernetAddress(self.cfg.mac), dst_addr: EthernetAddress(av.dmac), ethertype: EtherType::Ipv4 };
            let udp = UdpRepr { src_port: sport, dst_port: ROCE_V2_PORT };
            q.tx_hdr = Some(TxHeader { av: *av, sport, tpl: HeaderTemplate::new(&eth, &ip, &udp) });
        }
        Some(())
    }
}

/// Whether an RC QP's requester can emit a packet now: RTS, or SQD with its next WQE already
/// started (SQD lets a started message finish), and nothing blocking it (window, fence,
/// READ/atomic limit, RNR wait).
fn rc_request_ready(q: &Qp, lim: &ReqLimits) -> bool {
    let state_allows = match q.state {
        QpState::Rts => true,
        QpState::Sqd => q.req.sq.get(q.req.next).is_some_and(|w| w.started),
        _ => false,
    };
    state_allows && q.req.can_send(lim).is_ok()
}

/// Copy bytes `offset..offset+out.len()` of a gather list into `out`.
fn gather<M: Memory>(mem: &M, sges: &[Sge], mut offset: u64, mut out: &mut [u8]) -> Result<(), ()> {
    for s in sges {
        if out.is_empty() {
            break;
        }
        let l = s.length as u64;
        if offset >= l {
            offset -= l;
            continue;
        }
        let n = ((l - offset) as usize).min(out.len());
        let (head, tail) = out.split_at_mut(n);
        mem.read(s.addr + offset, head).map_err(|_| ())?;
        out = tail;
        offset = 0;
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(())
    }
}

/// Tell an ICRC failure apart from other parse failures (for the counters).
fn icrc_failed(frame: &[u8]) -> bool {
    let l3 = wire::eth::HEADER_LEN;
    if frame.len() < l3 + 40 {
        return false;
    }
    let end = match (frame[12], frame[13]) {
        (0x08, 0x00) => l3 + u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]) as usize,
        (0x86, 0xdd) => l3 + 40 + u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]) as usize,
        _ => return false,
    };
    end <= frame.len() && end > l3 && !icrc::verify(&frame[l3..end])
}

/// Convert a parsed response frame into the completer's view.
fn response_of<'a>(repr: &RoceRepr, payload: &'a [u8]) -> Option<Response<'a>> {
    let psn = repr.bth.psn;
    let info = repr.bth.opcode.info();
    Some(match repr.bth.opcode {
        Opcode::RcAcknowledge => match repr.ext.aeth?.syndrome {
            AethSyndrome::Ack { .. } => Response::Ack { psn },
            AethSyndrome::RnrNak { timer } => Response::RnrNak { psn, timer },
            AethSyndrome::Nak(kind) => Response::Nak { psn, kind },
        },
        Opcode::RcAtomicAcknowledge => Response::Atomic { psn, orig: repr.ext.atomic_ack?.orig },
        Opcode::RcReadResponseFirst | Opcode::RcReadResponseMiddle | Opcode::RcReadResponseLast | Opcode::RcReadResponseOnly => {
            // A READ response with a NAK syndrome in its AETH is malformed.
            if let Some(a) = repr.ext.aeth {
                if !matches!(a.syndrome, AethSyndrome::Ack { .. }) {
                    return None;
                }
            }
            Response::Read { psn, first: info.is_first() || info.is_only(), last: info.is_last() || info.is_only(), data: payload }
        }
        _ => return None,
    })
}

/// Convenience for embedders and tests: the attributes of the usual RC bring-up.
pub mod rc_connect {
    use super::*;

    /// RESET -> INIT attributes for an RC QP.
    pub fn init_attr(access: AccessFlags) -> (QpAttr, QpAttrMask) {
        let a = QpAttr { qp_state: QpState::Init, qp_access_flags: access, pkey_index: 0, port_num: 1, ..QpAttr::default() };
        (a, QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT)
    }

    /// INIT -> RTR attributes.
    pub fn rtr_attr(av: AddressVector, mtu: PathMtu, dest_qpn: Qpn, rq_psn: crate::types::Psn, max_dest_rd_atomic: u8, min_rnr_timer: u8) -> (QpAttr, QpAttrMask) {
        let a = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: av,
            path_mtu: mtu,
            dest_qp_num: dest_qpn,
            rq_psn,
            max_dest_rd_atomic,
            min_rnr_timer,
            ..QpAttr::default()
        };
        let m = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER;
        (a, m)
    }

    /// RTR -> RTS attributes.
    pub fn rts_attr(sq_psn: crate::types::Psn, timeout: u8, retry_cnt: u8, rnr_retry: u8, max_rd_atomic: u8) -> (QpAttr, QpAttrMask) {
        let a = QpAttr { qp_state: QpState::Rts, sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic, ..QpAttr::default() };
        let m = QpAttrMask::STATE
            | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
        (a, m)
    }
}

#[allow(unused_imports)]
use QpCap as _QpCapUsed;
