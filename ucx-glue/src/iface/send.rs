//! The operations: AM short/bcopy/zcopy (AM id in the immediate data), PUT (RDMA WRITE), GET
//! (RDMA READ). Each takes a send slot ([`Iface::reserve`]) and posts one signaled work request
//! ([`Iface::post`]); on droce_ud the slot starts with the reliability header.

use super::*;
use droce_transport::verbs::{SendFlags, SendOpcode};
use droce_transport::Rkey;

impl Iface {
    /// Checks before an operation; returns a free send slot.
    pub(super) fn reserve(g: &mut Inner, id: u32) -> Result<u32, Status> {
        let ep = g.eps.get(id as usize).and_then(Option::as_ref).ok_or(UCS_ERR_INVALID_PARAM)?;
        if let Some(s) = ep.failed {
            return Err(s);
        }
        if !ep.connected || (!ep.pending.is_empty() && !ep.dispatching) {
            return Err(UCS_ERR_NO_RESOURCE);
        }
        g.free_tx.pop().ok_or(UCS_ERR_NO_RESOURCE)
    }

    /// A blank send work request with `opcode` (the kept one when there is: no allocation).
    pub(super) fn new_wr(g: &mut Inner, opcode: SendOpcode) -> SendWr {
        match g.wr_spare.take() {
            Some(mut w) => {
                w.sg_list.clear();
                w.wr_id = 0;
                w.opcode = opcode;
                w.flags = SendFlags::SIGNALED;
                w.imm_data = 0;
                w.remote_addr = 0;
                w.rkey = Rkey(0);
                w.compare_add = 0;
                w.swap = 0;
                w.ud = None;
                w
            }
            None => SendWr::new(0, opcode),
        }
    }

    /// Post `wr` (wr_id = slot) on the endpoint and record the operation.
    pub(super) fn post(&self, g: &mut Inner, h: &mut Runtime, id: u32, slot: u32, mut wr: SendWr, comp: usize, kind: OpKind) -> Result<(), Status> {
        let (qp, seq) = {
            let ep = g.eps[id as usize].as_mut().ok_or(UCS_ERR_INVALID_PARAM)?;
            if ep.fence {
                wr.flags = wr.flags | SendFlags::FENCE;
            }
            if let Some(ud) = ep.ud {
                wr = wr.with_ud(ud);
            }
            (ep.qp.or(g.ud_qp).ok_or(UCS_ERR_IO_ERROR)?, ep.next_seq)
        };
        wr.wr_id = slot as u64;
        wr.flags = wr.flags | SendFlags::SIGNALED;
        let am = wr.imm_data as u8;
        if self.kind == Kind::Ud {
            if let Err(e) = self.ud_stamp(g, h, id, slot, &wr) {
                g.free_tx.push(slot);
                g.wr_spare = Some(wr);
                return Err(e);
            }
        }
        let r = h.post_send_ref(qp, &wr);
        g.wr_spare = Some(wr);
        match r {
            Ok(()) => {
                let ep = g.eps[id as usize].as_mut().ok_or(UCS_ERR_INVALID_PARAM)?;
                ep.fence = false;
                ep.next_seq += 1;
                ep.inflight.insert(seq);
                if let Some(rel) = ep.rel.as_mut() {
                    let pushed = rel.push(slot);
                    debug_assert!(pushed.is_ok(), "ud_stamp checked the window");
                }
                g.ops[slot as usize] = Some(Op { ep: id, seq, comp, kind, am });
                if g.free_tx.len() + 2 >= g.lay.tx_count {
                    // At most one other operation in flight (latency-bound: a ping-pong, a lone
                    // put; on RC the previous message of a ping-pong is still unacknowledged, as
                    // the peer sends its ACK after its reply): put it on the wire now rather than
                    // at the next progress call. With more in flight the progress loop sends
                    // them in bursts.
                    h.poll_device();
                }
                Ok(())
            }
            Err(e) => {
                g.free_tx.push(slot);
                Err(from_post(e))
            }
        }
    }

    /// Copy `segs` into send slot `slot` (registered memory) from `off`; the bytes written.
    pub(super) fn copy_in(g: &Inner, h: &mut Runtime, slot: u32, mut off: usize, segs: &[Seg]) -> Result<usize, Status> {
        let base = Self::tx_addr(g, slot);
        for s in segs {
            let Seg::Copy(b) = s else { return Err(UCS_ERR_INVALID_PARAM) };
            if off + b.len() > g.lay.tx_stride {
                return Err(UCS_ERR_EXCEEDS_LIMIT);
            }
            h.write_mem(base + off as u64, b).map_err(|_| UCS_ERR_IO_ERROR)?;
            off += b.len();
        }
        Ok(off)
    }

    /// AM short / zcopy (AM id in the immediate data). Copy segments go through the send slot;
    /// zcopy segments are posted as SGEs after the header.
    pub fn am_send(&self, id: u32, am_id: u8, hdr: &[u8], segs: &[Seg], comp: usize) -> Result<(), Status> {
        let mut g = lock(&self.inner);
        // UD: the reliability header goes first (post() writes it).
        let skip = if self.kind == Kind::Ud { UD_HDR } else { 0 };
        let total = skip + hdr.len() + segs.iter().map(Seg::len).sum::<usize>();
        let zcopy = segs.iter().any(|s| matches!(s, Seg::Zcopy { .. }));
        let limit = if zcopy { g.lay.seg } else { g.lay.seg.min(g.lay.tx_stride) };
        if total > limit || (zcopy && hdr.len() > MAX_HDR) || segs.len() > MAX_IOV {
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        let slot = Self::reserve(&mut g, id)?;
        let mut h = lock(self.host);
        let res = (|| {
            let base = Self::tx_addr(&g, slot);
            let mut wr = Self::new_wr(&mut g, SendOpcode::SendImm).with_imm(am_id as u32);
            if zcopy {
                if !hdr.is_empty() || skip > 0 {
                    h.write_mem(base + skip as u64, hdr).map_err(|_| UCS_ERR_IO_ERROR)?;
                    wr = wr.with_sge(base, (skip + hdr.len()) as u32, g.lkey);
                }
                for s in segs {
                    match *s {
                        Seg::Zcopy { addr, len, lkey } => wr = wr.with_sge(addr, len as u32, lkey),
                        Seg::Copy(_) => return Err(UCS_ERR_INVALID_PARAM),
                    }
                }
            } else {
                h.write_mem(base + skip as u64, hdr).map_err(|_| UCS_ERR_IO_ERROR)?;
                let n = Self::copy_in(&g, &mut h, slot, skip + hdr.len(), segs)?;
                wr = wr.with_sge(base, n as u32, g.lkey);
            }
            Ok(wr)
        })();
        match res {
            Ok(wr) => self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::Plain),
            Err(e) => {
                g.free_tx.push(slot);
                Err(e)
            }
        }
    }

    /// bcopy step 1: a send slot and its address/capacity for the pack callback.
    pub fn bcopy_reserve(&self, id: u32) -> Result<(u32, u64, usize), Status> {
        let mut g = lock(&self.inner);
        let slot = Self::reserve(&mut g, id)?;
        let skip = if self.kind == Kind::Ud { UD_HDR } else { 0 };
        Ok((slot, Self::tx_addr(&g, slot) + skip as u64, g.lay.seg - skip))
    }

    /// bcopy step 2: post the packed slot (`am_id` Some: AM; None: RDMA WRITE to `remote`).
    pub fn bcopy_post(&self, id: u32, slot: u32, len: usize, am_id: Option<u8>, remote: Option<(u64, Rkey)>) -> Result<(), Status> {
        let mut g = lock(&self.inner);
        let len = len + if self.kind == Kind::Ud { UD_HDR } else { 0 };
        if len > g.lay.seg {
            g.free_tx.push(slot);
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        if g.eps.get(id as usize).and_then(Option::as_ref).is_none() {
            g.free_tx.push(slot);
            return Err(UCS_ERR_INVALID_PARAM);
        }
        let base = Self::tx_addr(&g, slot);
        let mut wr = match (am_id, remote) {
            (Some(a), _) => Self::new_wr(&mut g, SendOpcode::SendImm).with_imm(a as u32),
            (None, Some((addr, rkey))) => Self::new_wr(&mut g, SendOpcode::Write).with_remote(addr, rkey),
            (None, None) => {
                g.free_tx.push(slot);
                return Err(UCS_ERR_INVALID_PARAM);
            }
        };
        wr = wr.with_sge(base, len as u32, g.lkey);
        let mut h = lock(self.host);
        self.post(&mut g, &mut h, id, slot, wr, 0, OpKind::Plain)
    }

    /// Give back a slot reserved by [`bcopy_reserve`](Self::bcopy_reserve) and not posted.
    pub fn bcopy_abort(&self, slot: u32) {
        lock(&self.inner).free_tx.push(slot);
    }

    /// PUT short (copy) or zcopy: RDMA WRITE.
    pub fn put(&self, id: u32, segs: &[Seg], remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        self.rdma(id, SendOpcode::Write, segs, remote, rkey, comp)
    }

    /// GET zcopy: RDMA READ into the registered segments.
    pub fn get_zcopy(&self, id: u32, segs: &[Seg], remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        self.rdma(id, SendOpcode::Read, segs, remote, rkey, comp)
    }

    fn rdma(&self, id: u32, opcode: SendOpcode, segs: &[Seg], remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        if self.kind != Kind::Rc {
            return Err(UCS_ERR_UNSUPPORTED);
        }
        let mut g = lock(&self.inner);
        let total: usize = segs.iter().map(Seg::len).sum();
        let zcopy = segs.iter().any(|s| matches!(s, Seg::Zcopy { .. }));
        if (!zcopy && total > g.lay.seg) || total > MAX_RDMA || segs.len() > MAX_IOV {
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        let slot = Self::reserve(&mut g, id)?;
        let mut h = lock(self.host);
        let mut wr = Self::new_wr(&mut g, opcode).with_remote(remote, rkey);
        if zcopy {
            for s in segs {
                match *s {
                    Seg::Zcopy { addr, len, lkey } => wr = wr.with_sge(addr, len as u32, lkey),
                    Seg::Copy(_) => {
                        g.free_tx.push(slot);
                        return Err(UCS_ERR_INVALID_PARAM);
                    }
                }
            }
        } else {
            match Self::copy_in(&g, &mut h, slot, 0, segs) {
                Ok(n) => wr = wr.with_sge(Self::tx_addr(&g, slot), n as u32, g.lkey),
                Err(e) => {
                    g.free_tx.push(slot);
                    return Err(e);
                }
            }
        }
        self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::Plain)
    }

    /// GET bcopy: RDMA READ into the send slot; the unpack callback runs at completion.
    pub fn get_bcopy(&self, id: u32, cb: usize, arg: usize, len: usize, remote: u64, rkey: Rkey, comp: usize) -> Result<(), Status> {
        if self.kind != Kind::Rc {
            return Err(UCS_ERR_UNSUPPORTED);
        }
        let mut g = lock(&self.inner);
        if len > g.lay.seg {
            return Err(UCS_ERR_EXCEEDS_LIMIT);
        }
        let slot = Self::reserve(&mut g, id)?;
        let mut h = lock(self.host);
        let addr = Self::tx_addr(&g, slot);
        let wr = Self::new_wr(&mut g, SendOpcode::Read).with_remote(remote, rkey).with_sge(addr, len as u32, g.lkey);
        self.post(&mut g, &mut h, id, slot, wr, comp, OpKind::GetBcopy { cb, arg, len })
    }
}
