//! The plain records behind the fids: CQs, EQ events, counters, address vectors, endpoints,
//! shared contexts, passive endpoints, and the operations in flight with their gather lists.

use super::{Errno, Id};
use crate::addr::{self, EpAddr};
use crate::ffi::sys as fi;
use crate::info::{self, EpType};
use crate::queue::{CqEntry, CqError, Queue, ADDR_NOTAVAIL};
use droce_dpdk::roce::cm::ConnId;
use droce_transport::qp::QpHandle;
use droce_transport::verbs::{CqHandle, SendOpcode, SrqHandle};
use droce_transport::{Lkey, Rkey};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};

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
pub struct SendReq<'a> {
    pub opcode: SendOpcode,
    /// The gather list (empty for an inline send).
    pub segs: Segs,
    /// An inline send (fi_inject and small sends): the application's iov, copied at post
    /// time straight into the work request's own buffer; the buffer is free on return.
    pub inline: Option<&'a [(u64, u64)]>,
    pub imm: Option<u32>,
    pub remote: Option<(u64, Rkey)>,
    pub atomic: (u64, u64),
    pub dest: Option<u64>,
    pub op: Op,
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
