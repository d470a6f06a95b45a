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

use crate::cc::{self, CcConfig};
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
pub use transmit::{TxFrame, TxPass, TxPayload, TxTrain};
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
    /// Congestion control: ECN, CNPs, DCQCN and pacing ([`CcConfig::off`] for none).
    pub cc: CcConfig,
    /// Selective repeat (QPs with [`QpAttr::selective_repeat`]): how many PSNs past the
    /// expected one a responder keeps packets for; at most this many packets of one path
    /// MTU each per QP. Packets further out are dropped and NAKed as without it.
    pub sr_window: u32,
    /// The receive path checks the ICRC of an in-sequence SEND/WRITE continuation or READ
    /// response while it copies the payload into memory (one pass over the bytes) instead of
    /// before (two passes). Same frames accepted, same memory and completions; see
    /// `docs/design.md` ("Where the payload is copied"). Off (the default): check, then
    /// copy. Opt-in because the bytes of a corrupted frame reach memory before its
    /// retransmission rewrites them: an application that polls memory for the end of a WRITE
    /// (perftest's write_lat) sees them.
    pub fused_rx: bool,
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
            cc: CcConfig::default(),
            sr_window: 128,
            fused_rx: false,
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
    /// The slab index the last received frame's QPN resolved to ([`Device::rx_qp_index`]).
    rx_last_qp: u32,
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
    /// While `poll_transmit_split` runs: the smallest payload left in memory (else `usize::MAX`).
    split_min: usize,
    /// The payload `emit` left in memory for the frame it just wrote.
    split_out: Option<TxPayload>,
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
            rx_last_qp: 0,
            next_qpn,
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            ip_id: 0,
            port_mtu,
            fx: Effects::default(),
            holding: false,
            split_min: usize::MAX,
            split_out: None,
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

    /// The current DCQCN rate of a QP, bits per second: the maximum rate
    /// ([`CcConfig::max_rate_bps`]) unless CNPs cut it.
    pub fn qp_rate_bps(&self, qp: QpHandle) -> Option<u64> {
        self.qps.get(qp.0).map(|q| q.cc.rate_bps(&self.cfg.cc))
    }

    /// Congestion control from now on: the header templates are rebuilt (so that `ecn`
    /// applies to the next frames), with `dcqcn` off every QP's rate is back at the maximum
    /// and unpaced, and with `pace` off a QP at the maximum rate is unpaced.
    pub fn set_cc(&mut self, cc: CcConfig) {
        let off = !cc.dcqcn;
        self.cfg.cc = cc;
        let mut unblocked = Vec::new();
        for (idx, q) in self.qps.iter_mut() {
            q.tx_hdr = None;
            // a QP paced only by the cap runs unpaced once `pace` is off
            let uncapped = !self.cfg.cc.pace && q.cc.rp.as_ref().is_some_and(|r| r.dcqcn.recovered(&self.cfg.cc));
            if (off || uncapped) && q.cc.rp.take().is_some() {
                unblocked.push(idx);
            }
        }
        for idx in unblocked {
            self.mark_ready(idx);
        }
    }

    /// The DCQCN reaction-point state of a QP, while its rate is below the maximum.
    pub fn qp_dcqcn(&self, qp: QpHandle) -> Option<&cc::Dcqcn> {
        self.qps.get(qp.0)?.cc.rp.as_ref().map(|r| &r.dcqcn)
    }

}

/// Whether an RC QP's requester can emit a packet now: RTS, or SQD with its next WQE already
/// started (SQD lets a started message finish), and nothing blocking it (window, fence,
/// READ/atomic limit, RNR wait).
fn rc_request_ready(q: &Qp, lim: &ReqLimits) -> bool {
    let state_allows = match q.state {
        QpState::Rts => true,
        QpState::Sqd => !q.req.resend.is_empty() || q.req.sq.get(q.req.next).is_some_and(|w| w.started),
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

pub mod rc_connect;

#[allow(unused_imports)]
use QpCap as _QpCapUsed;

mod completion;
mod receive;
mod resources;
mod transmit;
