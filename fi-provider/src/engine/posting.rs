//! libfabric requests into work requests: the posting policy behind fi_send*, fi_recv*,
//! fi_write*, fi_read* and fi_atomic*. FI_MSG_PREFIX room stripped, inject and iov-count and
//! size limits checked, selective completion decided, small sends inlined, gather lists
//! resolved to lkeys (a registration just for the operation when no MR covers a buffer), UD
//! receives without prefix room given a bounce area, multi-receive buffers queued.

use super::*;
use crate::ffi::sys as fi;
use crate::info::{self, EpType};
use droce_transport::qp::{QpAttr, QpAttrMask};
use droce_transport::verbs::{AccessFlags, SendFlags, Sge, UdDest};
use droce_transport::{QKey, Qpn, Rkey};

/// What posting does with application memory that rests on the application's word (a buffer
/// holds the bytes it describes; a registered range stays valid until its MR is closed). It is
/// implemented beside the provider's other `unsafe` code, in `ffi`.
pub trait AppMemory {
    /// Registers `addr..addr+len` with the device and records it (`temp`: for one operation,
    /// deregistered at its completion).
    fn register(&self, e: &mut Engine, addr: u64, len: u64, access: AccessFlags, temp: bool) -> Result<Mr, Errno>;
    /// Copies the bytes `iov` describes, in order, into `out` (their total length): the one
    /// copy of an inline send, into its work request's buffer.
    fn gather(&self, iov: &[(u64, u64)], out: &mut [u8]);
}

/// What a transmit request does: a send, or an RMA write or read of (remote address, key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx {
    Send,
    Write(u64, u64),
    Read(u64, u64),
}

/// A send, RMA write or RMA read as the application stated it.
#[derive(Debug, Clone, Copy)]
pub struct TxRequest<'a> {
    pub iov: &'a [(u64, u64)],
    /// The lkey of each iov entry's descriptor (None: no descriptor).
    pub desc: &'a [Option<Lkey>],
    /// The destination's fi_addr (DGRAM).
    pub dest: u64,
    pub context: usize,
    /// The fi_*msg call's flags (None: the endpoint's transmit op_flags).
    pub flags: Option<u64>,
    pub imm: Option<u64>,
    pub kind: Tx,
    /// An fi_inject* call: completes nothing.
    pub inject: bool,
}

/// A receive as the application stated it.
#[derive(Debug, Clone, Copy)]
pub struct RxRequest<'a> {
    pub iov: &'a [(u64, u64)],
    pub desc: &'a [Option<Lkey>],
    pub context: usize,
    /// fi_recvmsg's flags (None: the endpoint's receive op_flags).
    pub flags: Option<u64>,
}

/// One RoCE atomic on an 8-byte target: FetchAdd (add) or CmpSwap (compare, swap).
#[derive(Debug, Clone, Copy)]
pub struct AtomicRequest {
    pub cswap: bool,
    /// (add or compare, swap)
    pub operand: (u64, u64),
    /// A base atomic (counted as a write); otherwise a fetching or compare one (a read).
    pub write: bool,
    /// Where the original value lands: the application's word and its descriptor's lkey
    /// (None: a provider word, for fi_atomic).
    pub result: Option<(u64, Option<Lkey>)>,
    pub addr: u64,
    pub key: u64,
    pub context: usize,
    /// The fi_*msg call's flags (None: the endpoint's transmit op_flags).
    pub flags: Option<u64>,
    /// fi_inject_atomic: completes nothing.
    pub inject: bool,
}

/// The iov without its first `prefix` bytes, and how many whole entries were dropped.
pub fn strip_prefix(iov: &[(u64, u64)], prefix: u64) -> Option<(Vec<(u64, u64)>, usize)> {
    let mut left = prefix;
    let mut out = Vec::with_capacity(iov.len());
    let mut dropped = 0;
    for &(a, l) in iov {
        if left >= l && left > 0 {
            left -= l;
            dropped += 1;
            continue;
        }
        out.push((a + left, l - left));
        left = 0;
    }
    (left == 0).then_some((out, dropped))
}

impl Engine {
    /// The gather/scatter list of an operation: descriptors give lkeys; without one, an
    /// application MR covering the range, else a registration just for this operation (its
    /// lkey is added to `tmp`).
    fn segments(&mut self, mem: &dyn AppMemory, iov: &[(u64, u64)], desc: &[Option<Lkey>], tmp: &mut Vec<Lkey>) -> Result<Segs, Errno> {
        let mut v = Segs::default();
        for (i, &(addr, len)) in iov.iter().enumerate() {
            if len == 0 {
                continue;
            }
            let lkey = match desc.get(i).copied().flatten().or_else(|| self.find_mr(addr, len)) {
                Some(l) => l,
                None => {
                    let m = mem.register(self, addr, len, AccessFlags::LOCAL_WRITE, true)?;
                    tmp.push(m.lkey);
                    m.lkey
                }
            };
            v.push(Seg { addr, len, lkey })?;
        }
        Ok(v)
    }

    fn drop_tmp_mrs(&mut self, tmp: Vec<Lkey>) {
        for l in tmp {
            self.remove_mr(l);
        }
    }

    /// fi_send*, fi_inject*, fi_write*, fi_read* on endpoint `id`.
    pub fn post_tx(&mut self, mem: &dyn AppMemory, id: Id, r: TxRequest) -> Result<(), Errno> {
        let x = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        let stripped;
        let (mut iov, mut desc) = (r.iov, r.desc);
        if x.ty == EpType::Dgram && x.prefix {
            // FI_MSG_PREFIX: the first bytes of a send buffer are the provider's (the GRH room).
            let (v, skipped) = strip_prefix(iov, info::UD_PREFIX).ok_or(fi::FI_EINVAL)?;
            stripped = v;
            iov = &stripped;
            desc = &desc[skipped.min(desc.len())..];
        }
        let total: u64 = iov.iter().map(|v| v.1).sum();
        let op_flags = r.flags.unwrap_or(x.tx_op_flags);
        // The fi_inject* calls complete nothing; the FI_INJECT flag only hands the buffer back at
        // return (the data is copied now, within inject_size) and completes as any other op.
        let report = !r.inject && (!x.tx_selective || op_flags & fi::FI_COMPLETION as u64 != 0);
        let inject = r.inject || op_flags & fi::FI_INJECT as u64 != 0;
        if inject && total > info::INJECT_SIZE {
            return Err(fi::FI_EMSGSIZE);
        }
        if x.ty == EpType::Dgram && total > info::DGRAM_MAX_MSG_SIZE {
            // the advertised max_msg_size, whatever the port's MTU
            return Err(fi::FI_EMSGSIZE);
        }
        if iov.len() as u64 > info::iov_limit() {
            // checked here too: the inline copy below builds no scatter list
            return Err(fi::FI_EINVAL);
        }
        let mut tmp = Vec::new();
        // Small sends and writes go inline: copied now, once, into the work request's own
        // buffer in the transport; the application's buffer is free when the call returns.
        let inline = !matches!(r.kind, Tx::Read(..)) && total <= info::INJECT_SIZE;
        let segs = if inline {
            Segs::default()
        } else {
            match self.segments(mem, iov, desc, &mut tmp) {
                Ok(s) => s,
                Err(x) => {
                    self.drop_tmp_mrs(tmp);
                    return Err(x);
                }
            }
        };
        let (opcode, remote, kflags, okind) = match r.kind {
            Tx::Send => (if r.imm.is_some() { SendOpcode::SendImm } else { SendOpcode::Send }, None, fi::FI_SEND as u64 | fi::FI_MSG as u64, OpKind::Send),
            Tx::Write(a, k) => (if r.imm.is_some() { SendOpcode::WriteImm } else { SendOpcode::Write }, Some((a, Rkey(k as u32))), fi::FI_RMA as u64 | fi::FI_WRITE as u64, OpKind::Write),
            Tx::Read(a, k) => (SendOpcode::Read, Some((a, Rkey(k as u32))), fi::FI_RMA as u64 | fi::FI_READ as u64, OpKind::Read),
        };
        let first = iov.first().map(|v| v.0).unwrap_or(0);
        let op = Op { ep: id, kind: okind, context: r.context, flags: kflags, buf: first, len: total, report, tmp_mrs: tmp.clone(), bounce: None };
        let res = self.post_send(mem, id, SendReq { opcode, segs, inline: inline.then_some(iov), imm: r.imm.map(|d| d as u32), remote, atomic: (0, 0), dest: Some(r.dest), op });
        if res.is_err() {
            self.drop_tmp_mrs(tmp);
        }
        res
    }

    /// fi_recv* on endpoint (or shared receive context) `id`.
    pub fn post_rx(&mut self, mem: &dyn AppMemory, id: Id, r: RxRequest) -> Result<(), Errno> {
        if self.eps.get(&id).is_some_and(|x| x.qp.is_none()) {
            return Err(fi::FI_EOPBADSTATE);
        }
        let multi = self.eps.get(&id).is_some_and(|x| x.ty == EpType::Msg && r.flags.unwrap_or(x.rx_op_flags) & fi::FI_MULTI_RECV as u64 != 0);
        if !self.eps.contains_key(&id) && r.flags.unwrap_or(0) & fi::FI_MULTI_RECV as u64 != 0 {
            // a shared receive context (an SRQ) takes one message per receive
            return Err(fi::FI_EOPNOTSUPP);
        }
        // FI_SELECTIVE_COMPLETION on the receive binding: only receives that ask for it
        // (FI_COMPLETION in their flags or the endpoint's op_flags) complete successfully to
        // the CQ; a multi-receive buffer always reports (each message names its offset).
        let report = multi || self.eps.get(&id).map_or(true, |x| !x.rx_selective || r.flags.unwrap_or(x.rx_op_flags) & fi::FI_COMPLETION as u64 != 0);
        if multi && r.iov.len() != 1 {
            // one buffer that successive messages fill
            return Err(fi::FI_EINVAL);
        }
        let mut tmp = Vec::new();
        // A NULL buffer takes no data (fabtests' shared_ctx posts NULL receives for zero-byte
        // messages): it gets no scatter entry, so only a message that fits the rest arrives,
        // longer ones complete with FI_ETRUNC.
        let kept: (Vec<(u64, u64)>, Vec<Option<Lkey>>);
        let (iov_used, desc_used) = if r.iov.iter().any(|v| v.0 == 0 && v.1 != 0) {
            kept = r.iov.iter().enumerate().filter(|(_, v)| v.0 != 0).map(|(i, v)| (*v, r.desc.get(i).copied().flatten())).unzip();
            (&kept.0[..], &kept.1[..])
        } else {
            (r.iov, r.desc)
        };
        let mut segs = match self.segments(mem, iov_used, desc_used, &mut tmp) {
            Ok(s) => s,
            Err(x) => {
                if debug() {
                    eprintln!("droce-fi: recv {iov_used:x?}: no memory registration ({x})");
                }
                self.drop_tmp_mrs(tmp);
                return Err(x);
            }
        };
        let total: u64 = r.iov.iter().map(|v| v.1).sum();
        let first = r.iov.first().map(|v| v.0).unwrap_or(0);
        let mut bounce = None;
        if self.eps.get(&id).is_some_and(|x| x.ty == EpType::Dgram && !x.prefix) {
            // No room for the GRH in the application's buffer: receive into our own, no larger
            // than a UD packet can be (a 4096-byte path MTU) whatever the application's length.
            let mut area = vec![0u8; (info::UD_PREFIX + total.min(4096)) as usize].into_boxed_slice();
            let addr = area.as_mut_ptr() as u64;
            match mem.register(self, addr, area.len() as u64, AccessFlags::LOCAL_WRITE, true) {
                Ok(m) => {
                    tmp.push(m.lkey);
                    segs = Segs::one(Seg { addr, len: area.len() as u64, lkey: m.lkey });
                }
                Err(x) => {
                    self.drop_tmp_mrs(tmp);
                    return Err(x);
                }
            }
            bounce = Some(Bounce { area, user: r.iov.to_vec() });
        }
        let op = Op { ep: id, kind: OpKind::Recv, context: r.context, flags: fi::FI_RECV as u64 | fi::FI_MSG as u64, buf: first, len: total, report, tmp_mrs: tmp.clone(), bounce };
        let res = if multi {
            match segs.as_slice() {
                [s] => self.post_multi_recv(id, *s, op),
                _ => Err(fi::FI_EINVAL),
            }
        } else {
            self.post_recv(id, segs.as_slice(), op)
        };
        if res.is_err() {
            self.drop_tmp_mrs(tmp);
        }
        res
    }

    /// fi_atomic*, fi_fetch_atomic*, fi_compare_atomic* on endpoint `id`.
    pub fn post_atomic(&mut self, mem: &dyn AppMemory, id: Id, r: AtomicRequest) -> Result<(), Errno> {
        let x = self.eps.get(&id).ok_or(fi::FI_EINVAL)?;
        let op_flags = r.flags.unwrap_or(x.tx_op_flags);
        // fi_inject_atomic completes nothing; the FI_INJECT flag (the operand is read before the
        // call returns anyway) completes as any other op
        let report = !r.inject && (!x.tx_selective || op_flags & fi::FI_COMPLETION as u64 != 0);
        let context = if r.inject { 0 } else { r.context };
        if r.addr % 8 != 0 {
            // IBA 9.4.5: the target of a RoCE atomic is 8-byte aligned; the responder would
            // answer with a NAK that ends the connection
            return Err(fi::FI_EINVAL);
        }
        let mut tmp = Vec::new();
        let mut bounce = None;
        let (seg, buf) = match r.result {
            Some((addr, desc)) => match self.segments(mem, &[(addr, 8)], &[desc], &mut tmp) {
                Ok(s) => match s.as_slice().first() {
                    Some(s) => (*s, addr),
                    None => return Err(fi::FI_EINVAL),
                },
                Err(x) => {
                    self.drop_tmp_mrs(tmp);
                    return Err(x);
                }
            },
            None => {
                let mut area = vec![0u8; 8].into_boxed_slice();
                let a = area.as_mut_ptr() as u64;
                let m = mem.register(self, a, 8, AccessFlags::LOCAL_WRITE, true)?;
                tmp.push(m.lkey);
                bounce = Some(Bounce { area, user: Vec::new() });
                (Seg { addr: a, len: 8, lkey: m.lkey }, 0)
            }
        };
        let (opcode, atomic) = if r.cswap { (SendOpcode::CmpSwap, r.operand) } else { (SendOpcode::FetchAdd, (r.operand.0, 0)) };
        let flags = fi::FI_ATOMIC as u64 | if r.write { fi::FI_WRITE as u64 } else { fi::FI_READ as u64 };
        let op = Op { ep: id, kind: OpKind::Atomic, context, flags, buf, len: 8, report, tmp_mrs: tmp.clone(), bounce };
        let res = self.post_send(mem, id, SendReq { opcode, segs: Segs::one(seg), inline: None, imm: None, remote: Some((r.addr, Rkey(r.key as u32))), atomic, dest: Some(0), op });
        if res.is_err() {
            self.drop_tmp_mrs(tmp);
        }
        res
    }

    /// Posts `r` on endpoint `id`'s QP; an inline request's bytes are gathered from the
    /// application (`mem`) into the work request's buffer in the transport: one copy.
    pub fn post_send(&mut self, mem: &dyn AppMemory, id: Id, r: SendReq) -> Result<(), Errno> {
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
        wr.flags = if r.inline.is_some() { SendFlags::SIGNALED | SendFlags::INLINE } else { SendFlags::SIGNALED };
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
        let posted = match r.inline {
            Some(iov) => h.post_send_inline_with(qp, &self.swr, iov.iter().map(|v| v.1 as usize).sum(), |out| mem.gather(iov, out)),
            None => h.post_send_ref(qp, &self.swr),
        };
        posted.map_err(|e| {
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
        h.poll_device();
        drop(h);
        if debug() {
            eprintln!("droce-fi: ep{id} post {:?} len {} inline {} imm {:?} ctx {:#x} report {}", r.opcode, r.op.len, r.inline.is_some(), r.imm, r.op.context, r.op.report);
        }
        self.ops.insert(wr_id, r.op);
        Ok(())
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
    pub(super) fn multi_rnr_fast(&mut self, id: Id) {
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
    pub(super) fn next_multi_recv(&mut self, id: Id) {
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
    pub(super) fn post_recv_id(&mut self, id: Id, segs: &[Seg], op: Op) -> Result<u64, Errno> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_stripping() {
        let iov = [(0x1000, 40), (0x2000, 24)];
        assert_eq!(strip_prefix(&iov, 40), Some((vec![(0x2000, 24)], 1)));
        assert_eq!(strip_prefix(&[(0x1000, 64)], 40), Some((vec![(0x1000 + 40, 24)], 0)));
        assert_eq!(strip_prefix(&[(0x1000, 30), (0x2000, 30)], 40), Some((vec![(0x2000 + 10, 20)], 1)));
        assert_eq!(strip_prefix(&[(0x1000, 39)], 40), None, "no room for the prefix");
        assert_eq!(strip_prefix(&iov, 0), Some((iov.to_vec(), 0)));
    }
}
