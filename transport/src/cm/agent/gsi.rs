//! QP1 of the agent: the General Services Interface as a UD QP (IBA 13.4.6), its CQ, and the
//! MAD slots in the embedder's memory that it receives into and sends from.
//!
//! The slots live at a virtual address the embedder hands in ([`MAD_BUFFER_LEN`] bytes that
//! its [`Memory`] reaches); the agent registers them as an MR of its own PD and touches them
//! only through the device's memory: a completed receive slot is read, a free send slot is
//! written, nothing else.

use super::{CmAgentCounters, CmAgentError};
use crate::cm::{CmMad, GSI_QKEY, GSI_QPN, MAD_SIZE};
use crate::memory::Memory;
use crate::qp::{QpAttr, QpAttrMask, QpCap, QpHandle, QpInitAttr, QpState, QpType};
use crate::status::{WcOpcode, WcStatus};
use crate::types::{Gid, Psn, QKey, Qpn};
use crate::ud::{grh_source, GRH_LEN};
use crate::verbs::{AccessFlags, AddressVector, CqHandle, MemoryRegion, PdHandle, RecvWr, SendOpcode, SendWr, Sge, UdDest};
use crate::Device;

/// Receive and send MAD slots of QP1.
pub(super) const RECV_SLOTS: usize = 64;
pub(super) const SEND_SLOTS: usize = 64;
const RECV_SLOT_LEN: usize = GRH_LEN + MAD_SIZE;
/// Marks a send slot's work request ID (receive slots use the bare slot number).
const WR_SEND: u64 = 1 << 32;

/// Bytes of embedder memory the agent's MAD slots take (receive slots, then send slots).
pub const MAD_BUFFER_LEN: usize = RECV_SLOTS * RECV_SLOT_LEN + SEND_SLOTS * MAD_SIZE;

/// What one completion of QP1's CQ brought.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one at a time, on the stack, consumed at once
pub(super) enum Completion {
    /// A CM MAD from QP1 of `peer`.
    Mad { peer: Gid, mad: CmMad },
    /// A send slot came back, or a flushed receive: nothing for the CM.
    Nothing,
    /// Received on QP1 but not a CM MAD we understand (other classes, truncated, other QP).
    Bad,
}

/// QP1 and its resources.
#[derive(Debug)]
pub(super) struct Gsi {
    pd: PdHandle,
    cq: CqHandle,
    qp: QpHandle,
    mr: MemoryRegion,
    va: u64,
    free_send: Vec<usize>,
}

/// Drops what `open` made so far when a later step fails.
fn undo<M: Memory>(dev: &mut Device<M>, pd: PdHandle, mr: Option<&MemoryRegion>, cq: Option<CqHandle>, qp: Option<QpHandle>) {
    if let Some(qp) = qp {
        let _ = dev.destroy_qp(qp);
    }
    if let Some(cq) = cq {
        let _ = dev.destroy_cq(cq);
    }
    if let Some(mr) = mr {
        let _ = dev.dereg_mr(mr.lkey);
    }
    let _ = dev.dealloc_pd(pd);
}

impl Gsi {
    /// Creates QP1 (fails if it exists) in a PD of its own with the slots at `va` as its MR,
    /// brings it to RTS with the GSI Q_Key, and posts every receive slot.
    pub(super) fn open<M: Memory>(dev: &mut Device<M>, va: u64) -> Result<Gsi, CmAgentError> {
        let pd = dev.alloc_pd();
        let mr = match dev.reg_mr(pd, va, MAD_BUFFER_LEN as u64, AccessFlags::LOCAL_WRITE) {
            Ok(mr) => mr,
            Err(e) => {
                undo(dev, pd, None, None, None);
                return Err(CmAgentError::Setup(format!("reg_mr: {e:?}")));
            }
        };
        let cq = match dev.create_cq(RECV_SLOTS + SEND_SLOTS + 8) {
            Ok(cq) => cq,
            Err(e) => {
                undo(dev, pd, Some(&mr), None, None);
                return Err(CmAgentError::Setup(format!("create_cq: {e:?}")));
            }
        };
        let cap = QpCap { max_send_wr: SEND_SLOTS as u32, max_recv_wr: RECV_SLOTS as u32, ..QpCap::default() };
        let qp = match dev.create_gsi_qp(QpInitAttr { qp_type: QpType::Ud, pd, send_cq: cq, recv_cq: cq, srq: None, cap, sq_sig_all: true }) {
            Ok(qp) => qp,
            Err(e) => {
                undo(dev, pd, Some(&mr), Some(cq), None);
                return Err(CmAgentError::Setup(format!("create_gsi_qp: {e:?}")));
            }
        };
        let init = QpAttr { qp_state: QpState::Init, pkey_index: 0, port_num: 1, qkey: QKey(GSI_QKEY), ..QpAttr::default() };
        let steps = [
            (init, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY),
            (QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, QpAttrMask::STATE),
            (QpAttr { qp_state: QpState::Rts, sq_psn: Psn::new(0), ..QpAttr::default() }, QpAttrMask::STATE | QpAttrMask::SQ_PSN),
        ];
        for (a, m) in steps {
            if let Err(e) = dev.modify_qp(qp, &a, m) {
                undo(dev, pd, Some(&mr), Some(cq), Some(qp));
                return Err(CmAgentError::Setup(format!("QP1 modify: {e:?}")));
            }
        }
        let gsi = Gsi { pd, cq, qp, mr, va, free_send: (0..SEND_SLOTS).rev().collect() };
        for i in 0..RECV_SLOTS {
            if let Err(e) = gsi.post_recv(dev, i) {
                undo(dev, pd, Some(&gsi.mr), Some(cq), Some(qp));
                return Err(e);
            }
        }
        Ok(gsi)
    }

    /// Destroys QP1, its CQ, MR and PD. True when the MR is gone, so the device no longer
    /// touches the slots and the embedder may reuse the memory.
    pub(super) fn close<M: Memory>(self, dev: &mut Device<M>) -> bool {
        let _ = dev.destroy_qp(self.qp);
        let _ = dev.destroy_cq(self.cq);
        let released = dev.dereg_mr(self.mr.lkey).is_ok();
        let _ = dev.dealloc_pd(self.pd);
        released
    }

    pub(super) fn qp(&self) -> QpHandle {
        self.qp
    }

    /// The next completion of QP1, `None` when the CQ is empty. A receive slot is posted
    /// again once read (unless it was flushed: QP1 is going away).
    pub(super) fn poll<M: Memory>(&mut self, dev: &mut Device<M>) -> Option<Completion> {
        let wc = dev.poll_cq_one(self.cq).ok().flatten()?;
        if wc.wr_id & WR_SEND != 0 {
            self.free_send.push((wc.wr_id & 0xffff) as usize);
            return Some(Completion::Nothing);
        }
        let slot = wc.wr_id as usize;
        let got = if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv && wc.src_qp == Qpn::new(GSI_QPN) {
            let mut b = [0u8; RECV_SLOT_LEN];
            let len = (wc.byte_len as usize).clamp(GRH_LEN, RECV_SLOT_LEN);
            let read = dev.memory().read(self.recv_addr(slot), &mut b[..len]);
            match (read, grh_source(&b[..GRH_LEN]), CmMad::parse(&b[GRH_LEN..len])) {
                (Ok(()), Some(peer), Ok(mad)) => Completion::Mad { peer, mad },
                _ => Completion::Bad,
            }
        } else if wc.status == WcStatus::Success {
            Completion::Bad
        } else {
            Completion::Nothing
        };
        if wc.status != WcStatus::WrFlushErr {
            let _ = self.post_recv(dev, slot);
        }
        Some(got)
    }

    /// Posts `mad` as a UD SEND to QP1 of `peer` from our GID of the peer's kind (IPv4,
    /// IPv6 link-local or global). A MAD that cannot leave is counted in `tx_dropped`; the
    /// CM's retransmission covers it.
    pub(super) fn send<M: Memory>(&mut self, dev: &mut Device<M>, peer: Gid, mad: &CmMad, c: &mut CmAgentCounters) {
        let Some(slot) = self.free_send.pop() else {
            c.tx_dropped += 1;
            return;
        };
        let Some(sgid) = send_gid_index(&dev.config().gids, &peer) else {
            c.tx_dropped += 1;
            self.free_send.push(slot);
            return;
        };
        let mut b = [0u8; MAD_SIZE];
        mad.emit(&mut b);
        let addr = self.send_addr(slot);
        if dev.memory_mut().write(addr, &b).is_err() {
            c.tx_dropped += 1;
            self.free_send.push(slot);
            return;
        }
        let mut wr = SendWr::new(WR_SEND | slot as u64, SendOpcode::Send);
        wr.sg_list.push(Sge { addr, length: MAD_SIZE as u32, lkey: self.mr.lkey });
        wr.ud = Some(UdDest { av: av(peer, sgid), remote_qpn: Qpn::new(GSI_QPN), remote_qkey: QKey(GSI_QKEY) });
        match dev.post_send(self.qp, wr) {
            Ok(()) => c.mads_tx += 1,
            Err(_) => {
                c.tx_dropped += 1;
                self.free_send.push(slot);
            }
        }
    }

    fn post_recv<M: Memory>(&self, dev: &mut Device<M>, slot: usize) -> Result<(), CmAgentError> {
        let wr = RecvWr::new(slot as u64).with_sge(self.recv_addr(slot), RECV_SLOT_LEN as u32, self.mr.lkey);
        dev.post_recv(self.qp, wr).map_err(|e| CmAgentError::Setup(format!("post_recv: {e:?}")))
    }

    fn recv_addr(&self, slot: usize) -> u64 {
        self.va + (slot * RECV_SLOT_LEN) as u64
    }

    fn send_addr(&self, slot: usize) -> u64 {
        self.va + (RECV_SLOTS * RECV_SLOT_LEN + slot * MAD_SIZE) as u64
    }
}

/// Address vector to `dgid` from our GID `sgid_index`. The destination MAC stays zero: the
/// embedder resolves it when the frame leaves (as for every AV the CM programs).
pub(super) fn av(dgid: Gid, sgid_index: u8) -> AddressVector {
    AddressVector { dgid, dmac: [0; 6], sgid_index, hop_limit: 64, traffic_class: 0, flow_label: 0 }
}

/// Our GID a MAD to `peer` leaves from: IPv4 to IPv4; IPv6 link-local to link-local, global
/// to global.
fn send_gid_index(gids: &[Gid], peer: &Gid) -> Option<u8> {
    let i = match peer.to_ipv4() {
        Some(_) => gids.iter().position(|g| g.is_ipv4_mapped()),
        None => {
            let ll = is_link_local(peer);
            gids.iter().position(|g| !g.is_ipv4_mapped() && is_link_local(g) == ll)
        }
    };
    i.and_then(|i| u8::try_from(i).ok())
}

pub(super) fn is_link_local(g: &Gid) -> bool {
    g.to_ipv6().segments()[0] == 0xfe80
}


#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;


    #[test]
    fn send_gid_by_family() {
        let ll = Gid::from_ipv6("fe80::1".parse().unwrap());
        let v4 = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1));
        let global = Gid::from_ipv6("fd00::1".parse().unwrap());
        let gids = [ll, v4, global];
        assert_eq!(send_gid_index(&gids, &Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2))), Some(1));
        assert_eq!(send_gid_index(&gids, &Gid::from_ipv6("fe80::2".parse().unwrap())), Some(0));
        assert_eq!(send_gid_index(&gids, &Gid::from_ipv6("fd00::2".parse().unwrap())), Some(2));
        assert_eq!(send_gid_index(&[ll], &Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2))), None);
    }
}
