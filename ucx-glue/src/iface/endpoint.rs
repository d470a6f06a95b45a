//! Endpoints: creation (an RC QP, or a UD address and a reliable sender), connection,
//! destruction; and what UCT asks of them besides sends: flush, fence, error check, pending
//! requests (dispatched round-robin over endpoints while send slots are free).

use super::*;
use droce_transport::device::rc_connect::{init_attr, rtr_attr, rts_attr};
use droce_transport::ud::reliable::EndpointKey;
use droce_transport::verbs::AccessFlags;
use droce_transport::Qpn;

impl Iface {
    /// RC: a QP in INIT waiting for `connect_to_ep`. UD: an address handle to (GID, QPN).
    pub fn ep_create(&self, ep_c: usize, dev_addr: Option<&[u8; DEV_ADDR_LEN]>, iface_addr: Option<&[u8; UD_IFACE_ADDR_LEN]>) -> Result<u32, Status> {
        let mut g = lock(&self.inner);
        let mut ep = Ep::new(ep_c);
        ep.peer_gid = dev_addr.map(|d| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&d[..16]);
            a
        });
        match self.kind {
            Kind::Rc => {
                let mut h = lock(self.host);
                let (pd, cq, srq, tx) = (g.pd, g.cq, g.srq, g.lay.tx_count as u32);
                let d = &mut *h;
                let cap = QpCap { max_send_wr: tx, max_recv_wr: 1, max_send_sge: (MAX_IOV + 1) as u32, max_recv_sge: 1, max_inline_data: 0 };
                let qp = d.create_qp(QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq, srq, cap, sq_sig_all: true }).map_err(|_| UCS_ERR_NO_RESOURCE)?;
                let (a, m) = init_attr(AccessFlags::ALL);
                if d.modify_qp(qp, &a, m).is_err() {
                    let _ = d.destroy_qp(qp);
                    return Err(UCS_ERR_IO_ERROR);
                }
                g.psn_seed = g.psn_seed.wrapping_mul(1_103_515_245).wrapping_add(12345) & 0xff_ffff;
                ep.qp = Some(qp);
                ep.psn = g.psn_seed;
            }
            Kind::Ud => {
                let (Some(dev), Some(ifa)) = (dev_addr, iface_addr) else { return Err(UCS_ERR_INVALID_PARAM) };
                let av = droce_transport::verbs::AddressVector { dgid: Gid(*dev), sgid_index: g.sgid_index, hop_limit: 64, ..Default::default() };
                ep.ud = Some(UdDest { av, remote_qpn: Qpn::new(u32::from_le_bytes(*ifa)), remote_qkey: UD_QKEY });
                ep.connected = true;
            }
        }
        if self.kind == Kind::Ud && g.free_eps.is_empty() && g.eps.len() >= 0xffff {
            return Err(UCS_ERR_NO_RESOURCE); // endpoint keys hold a 16-bit id
        }
        g.ep_gen = g.ep_gen.wrapping_add(1);
        let gen = g.ep_gen;
        let id = match g.free_eps.pop() {
            Some(i) => {
                g.eps[i as usize] = Some(ep);
                i
            }
            None => {
                g.eps.push(Some(ep));
                (g.eps.len() - 1) as u32
            }
        };
        if self.kind == Kind::Ud {
            let cfg = g.ud_cfg;
            if let Some(ep) = g.eps[id as usize].as_mut() {
                ep.rel = Some(UdSender::new(EndpointKey::new(id as u16, gen), cfg));
            }
        }
        Ok(id)
    }

    /// Destroy an endpoint; operations still in flight complete no more (their slots return).
    pub fn ep_destroy(&self, id: u32) {
        let mut g = lock(&self.inner);
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::take) else { return };
        if let Some(qp) = ep.qp {
            if !g.closed {
                let _ = lock(self.host).destroy_qp(qp);
            }
        }
        for slot in 0..g.ops.len() {
            if let Some(o) = g.ops[slot].as_mut().filter(|o| o.ep == id) {
                // RC: every operation is in the send queue until its completion; UD: a datagram
                // may wait only for its acknowledgement
                let queued = ep.rel.as_ref().map_or(true, |r| r.is_queued(slot as u32));
                if queued {
                    // Still in a send queue: the slot returns at its local completion.
                    o.ep = NO_EP;
                    o.comp = 0;
                } else {
                    g.ops[slot] = None;
                    g.free_tx.push(slot as u32);
                }
            }
        }
        g.pending_rr.retain(|&e| e != id);
        g.free_eps.push(id);
    }

    pub fn ep_address(&self, id: u32) -> Result<[u8; RC_EP_ADDR_LEN], Status> {
        let g = lock(&self.inner);
        let ep = g.eps.get(id as usize).and_then(Option::as_ref).ok_or(UCS_ERR_INVALID_PARAM)?;
        let qp = ep.qp.ok_or(UCS_ERR_UNSUPPORTED)?;
        let qpn = lock(self.host).query_qp(qp).map_err(|_| UCS_ERR_IO_ERROR)?.qp_num.value();
        Ok(RcEpAddr { qpn, psn: ep.psn, mtu: g.mtu, selective_repeat: g.selective_repeat }.encode())
    }

    /// RC: INIT -> RTR -> RTS towards the peer QP (the transport rc_connect attributes), with
    /// selective repeat when both addresses offer it.
    pub fn ep_connect_to_ep(&self, id: u32, dev_addr: &[u8; DEV_ADDR_LEN], ep_addr: &[u8; RC_EP_ADDR_LEN]) -> Result<(), Status> {
        let mut g = lock(&self.inner);
        let (sgid, mtu, sr) = (g.sgid_index, g.mtu, g.selective_repeat);
        let ep = g.eps.get_mut(id as usize).and_then(Option::as_mut).ok_or(UCS_ERR_INVALID_PARAM)?;
        let qp = ep.qp.ok_or(UCS_ERR_UNSUPPORTED)?;
        let peer = RcEpAddr::decode(ep_addr);
        let mut pg = [0u8; 16];
        pg.copy_from_slice(&dev_addr[..16]);
        ep.peer_gid = Some(pg);
        let mtu = mtu.min(peer.mtu);
        let mut h = lock(self.host);
        let av = h.av(Gid(*dev_addr), sgid);
        let d = &mut *h;
        let (mut a, mut m) = rtr_attr(av, mtu, Qpn::new(peer.qpn), Psn::new(peer.psn), 16, 12);
        // Both ends decide alike from the two addresses (docs/selective-repeat.md).
        if use_selective_repeat(sr, &peer) {
            a.selective_repeat = true;
            m = m | QpAttrMask::SELECTIVE_REPEAT;
        }
        d.modify_qp(qp, &a, m).map_err(|_| UCS_ERR_IO_ERROR)?;
        // ACK timeout 4.096 us * 2^17 = 0.54 s, 7 retries: a dead peer is reported after about
        // 4 s. The peer's ACKs come from its progress calls (software RoCE), so a peer that is
        // descheduled on a loaded machine must not look dead (67 ms x 7 did, under load 10).
        let (a, m) = rts_attr(Psn::new(ep.psn), 17, 7, 7, 16);
        d.modify_qp(qp, &a, m).map_err(|_| UCS_ERR_IO_ERROR)?;
        ep.connected = true;
        if !ep.pending.is_empty() && !ep.in_rr {
            ep.in_rr = true;
            g.pending_rr.push_back(id);
        }
        Ok(())
    }


    pub fn ep_flush(&self, id: u32, cancel: bool, comp: usize) -> Status {
        let mut g = lock(&self.inner);
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else { return UCS_ERR_INVALID_PARAM };
        if cancel {
            // Nothing can be recalled from the send queue; flush(cancel) waits like flush.
            ep.pending.clear();
        }
        if ep.inflight.is_empty() {
            return UCS_OK;
        }
        if !ep.pending.is_empty() && !ep.dispatching {
            return UCS_ERR_NO_RESOURCE;
        }
        if comp != 0 {
            ep.waiters.push((ep.next_seq, comp));
        }
        UCS_INPROGRESS
    }

    pub fn iface_flush(&self, comp: usize) -> Status {
        let mut g = lock(&self.inner);
        if g.free_tx.len() == g.lay.tx_count {
            return UCS_OK;
        }
        if comp != 0 {
            g.iface_waiters.push(comp);
        }
        UCS_INPROGRESS
    }

    pub fn ep_fence(&self, id: u32) -> Status {
        let mut g = lock(&self.inner);
        match g.eps.get_mut(id as usize).and_then(Option::as_mut) {
            Some(ep) => {
                ep.fence = true;
                UCS_OK
            }
            None => UCS_ERR_INVALID_PARAM,
        }
    }

    pub fn iface_fence(&self) -> Status {
        let mut g = lock(&self.inner);
        for ep in g.eps.iter_mut().flatten() {
            ep.fence = true;
        }
        UCS_OK
    }

    pub fn ep_check(&self, id: u32) -> Status {
        let g = lock(&self.inner);
        match g.eps.get(id as usize).and_then(Option::as_ref) {
            Some(ep) => ep.failed.unwrap_or(UCS_OK),
            None => UCS_ERR_INVALID_PARAM,
        }
    }

    /// `UCS_ERR_BUSY` when the endpoint could send right now (UCT's contract), else queued.
    pub fn pending_add(&self, id: u32, req: usize) -> Status {
        let mut g = lock(&self.inner);
        let has_slot = !g.free_tx.is_empty();
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else { return UCS_ERR_INVALID_PARAM };
        if has_slot && ep.connected && ep.pending.is_empty() && ep.failed.is_none() && !ep.dispatching {
            return UCS_ERR_BUSY;
        }
        ep.pending.push_back(req);
        if !ep.in_rr {
            ep.in_rr = true;
            g.pending_rr.push_back(id);
        }
        UCS_OK
    }

    pub fn pending_take(&self, id: u32) -> Vec<usize> {
        let mut g = lock(&self.inner);
        match g.eps.get_mut(id as usize).and_then(Option::as_mut) {
            Some(ep) => ep.pending.drain(..).collect(),
            None => Vec::new(),
        }
    }

    /// The next pending request to call, round-robin over endpoints, while send slots are free.
    pub fn pending_next(&self) -> Option<(u32, usize)> {
        let mut g = lock(&self.inner);
        while let Some(&id) = g.pending_rr.front() {
            if g.free_tx.is_empty() {
                return None;
            }
            let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else {
                g.pending_rr.pop_front();
                continue;
            };
            match ep.pending.front() {
                Some(&req) if ep.connected => {
                    ep.dispatching = true;
                    return Some((id, req));
                }
                _ => {
                    ep.in_rr = false;
                    g.pending_rr.pop_front();
                }
            }
        }
        None
    }

    /// After calling a pending request: true to continue dispatching.
    pub fn pending_done(&self, id: u32, req: usize, status: Status) -> bool {
        let mut g = lock(&self.inner);
        let Some(ep) = g.eps.get_mut(id as usize).and_then(Option::as_mut) else {
            g.pending_rr.retain(|&e| e != id);
            return true;
        };
        ep.dispatching = false;
        let go_on = status == UCS_OK || status == UCS_INPROGRESS;
        if status == UCS_OK && ep.pending.front() == Some(&req) {
            ep.pending.pop_front();
        }
        let more = !ep.pending.is_empty();
        if g.pending_rr.front() == Some(&id) {
            g.pending_rr.pop_front();
        }
        let ep = g.eps[id as usize].as_mut().expect("checked above");
        if more {
            ep.in_rr = true;
            if go_on {
                g.pending_rr.push_back(id);
            } else {
                g.pending_rr.push_front(id);
            }
        } else {
            ep.in_rr = false;
        }
        go_on
    }
}
